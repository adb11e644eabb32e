"""``--merge --per-run-protocol``: one results folder from invocations of one race whose evaluation interval or
budget differ (each peer evaluated at its own pace, a longer budget for a slower library).

:func:`~sb3_async.benchmark.runner.merge_results` refuses such parts, rightly for a plain merge: a table reads as one
protocol. These two settings are recorded in every run's record (``eval_interval``, ``budget_seconds``), so a table
can still be read run by run; the merged suite says which settings vary and their values (``per_run``), and the
report prints them as such. Everything else (suite, evaluation episodes, device, threads, processor, software) must
still match.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from sb3_async.benchmark.runner import merge_results

#: The suite settings that may differ between the parts (both stored in each run's record).
PER_RUN_FIELDS = ("eval_interval", "budget_seconds")


def merge_per_run(parts: Sequence[dict[str, Any]], supersede: bool = False) -> dict[str, Any]:
    """Merge like :func:`~sb3_async.benchmark.runner.merge_results`, letting :data:`PER_RUN_FIELDS` differ.

    :param supersede: a run id present in several parts keeps the last part's run (an algorithm's zoo entry rerun
        after it changed, under the same protocol); the merged results list the replaced ids in ``superseded``
    :raises ValueError: as ``merge_results`` does for any other difference
    """
    copies = [copy.deepcopy(part) for part in parts]
    superseded: list[str] = []
    if supersede:
        for index, part in enumerate(copies):
            later = {run["run_id"] for other in copies[index + 1 :] for run in other["runs"]}
            superseded += [run["run_id"] for run in part["runs"] if run["run_id"] in later]
            part["runs"] = [run for run in part["runs"] if run["run_id"] not in later]
    varying: dict[str, list[Any]] = {}
    for field in PER_RUN_FIELDS:
        values = [part["suite"].get(field) for part in copies]
        if len(set(map(repr, values))) > 1:
            varying[field] = sorted({value for value in values if value is not None})
            for part in copies:
                part["suite"][field] = None
    merged = merge_results(copies)
    if superseded:
        merged["superseded"] = sorted(set(superseded))
    for field, values in varying.items():
        merged["suite"].setdefault("per_run", {})[field] = values
    # a part that was itself merged per run keeps its own varying settings
    for part in parts:
        for field, values in (part["suite"].get("per_run") or {}).items():
            known = merged["suite"].setdefault("per_run", {}).setdefault(field, [])
            known.extend(value for value in values if value not in known)
            merged["suite"][field] = None
    return merged
