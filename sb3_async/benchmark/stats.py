"""Aggregation of a suite's runs over seeds: what the report (:mod:`~sb3_async.benchmark.report`) and the plots
(:mod:`~sb3_async.benchmark.plots`) both read.

- **Medians over seeds, not-reached counted as infinitely slow** (:func:`median_to_threshold`): a run that never
  reached the threshold has no time to threshold and sorts after every run that did, so the median is a measured time
  when more than half of the seeds reached the threshold, and ``None`` (not reached) otherwise.
- **Ratio = ours / its peer** of those medians (:func:`ratio`): ``None`` when either is not reached.
- Runs that crashed (``error`` in the record) are left out of every median (:func:`group_stats`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


def median_to_threshold(values: Iterable[float | None]) -> float | None:
    """Median over seeds of a time (or step count) to threshold; ``None`` stands for a seed that did not reach it and
    counts as infinitely slow. Returns ``None`` (not reached) when the median is not a measured value, or when there
    is no value at all."""
    data = [math.inf if value is None else float(value) for value in values]
    if not data:
        return None
    median = statistics.median(data)
    return None if math.isinf(median) else median


def ratio(ours: float | None, peer: float | None) -> float | None:
    """``ours / peer``; ``None`` when either is not reached (or the peer's is 0)."""
    if ours is None or peer is None or peer == 0:
        return None
    return ours / peer


def median_of(values: Iterable[float | None]) -> float | None:
    """Median of the values that are not ``None``; ``None`` when there is none."""
    data = [float(value) for value in values if value is not None]
    return statistics.median(data) if data else None


@dataclass
class GroupStats:
    """One (env, algorithm, variant) aggregated over its seeds (crashed runs excluded)."""

    env: str
    algo: str
    library: str
    variant: str
    axes: dict[str, Any]
    threshold: float
    runs: int
    reached: int
    errors: int
    median_seconds: float | None
    median_steps: float | None
    final_mean: float | None
    final_std: float | None
    final_means: list[float] = field(default_factory=list)
    steps_per_second: float | None = None
    steps_per_second_after_startup: float | None = None
    startup_seconds: float | None = None
    peak_rss_mb: float | None = None
    peak_pss_mb: float | None = None

    @property
    def label(self) -> str:
        return self.algo if self.variant == "default" else f"{self.algo} {self.variant}"


def group_stats(records: Sequence[dict[str, Any]]) -> list[GroupStats]:
    """Aggregate the runs by (env, algorithm, variant), in the order they first appear."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for record in records:
        groups.setdefault((record["env"], record["algo"], record["variant"]), []).append(record)
    stats = []
    for (env, algo, variant), runs in groups.items():
        ok = [run for run in runs if not run.get("error")]
        stats.append(
            GroupStats(
                env=env,
                algo=algo,
                library=runs[0]["library"],
                variant=variant,
                axes=dict(runs[0].get("axes") or {}),
                threshold=float(runs[0]["threshold"]),
                runs=len(runs),
                reached=sum(bool(run["reached"]) for run in ok),
                errors=len(runs) - len(ok),
                median_seconds=median_to_threshold(run["seconds_to_threshold"] for run in ok),
                median_steps=median_to_threshold(run["steps_to_threshold"] for run in ok),
                final_mean=median_of(run["final_eval_mean"] for run in ok),
                final_std=median_of(run["final_eval_std"] for run in ok),
                final_means=[float(run["final_eval_mean"]) for run in ok if run["final_eval_mean"] is not None],
                steps_per_second=median_of(run["steps_per_second"] for run in ok),
                steps_per_second_after_startup=median_of(run.get("steps_per_second_after_startup") for run in ok),
                startup_seconds=median_of(run.get("startup_seconds") for run in ok),
                peak_rss_mb=median_of(run["peak_rss_mb"] for run in ok),
                peak_pss_mb=median_of(run.get("peak_pss_mb") for run in ok),
            )
        )
    return stats


@dataclass
class RatioRow:
    """Ours against one peer on one env."""

    env: str
    ours: GroupStats
    peer: GroupStats

    @property
    def seconds_ratio(self) -> float | None:
        return ratio(self.ours.median_seconds, self.peer.median_seconds)

    @property
    def steps_ratio(self) -> float | None:
        return ratio(self.ours.median_steps, self.peer.median_steps)


def ratio_rows(stats: Sequence[GroupStats], peers: Mapping[str, Sequence[str]]) -> list[RatioRow]:
    """Every (ours, peer) pair measured on the same env: each variant of ours against the peer with its default
    hyperparameters.

    :param peers: algorithm -> its peers (from the registry)
    """
    defaults = {(s.env, s.algo): s for s in stats if s.variant == "default"}
    rows = []
    for ours in stats:
        if ours.library != "sb3_async":
            continue
        for peer in peers.get(ours.algo, ()):
            if (ours.env, peer) in defaults:
                rows.append(RatioRow(ours.env, ours, defaults[(ours.env, peer)]))
    return rows


def sweep_axes(stats: Sequence[GroupStats]) -> tuple[str, str]:
    """The (series, x) axes of a sweep: the first and second keys of the variants' ``axes``."""
    keys = list(stats[0].axes)
    if len(keys) < 2:
        raise ValueError(f"A sweep's variants need two axes (series, x), got {keys}")
    return keys[0], keys[1]


def best_evaluation(run: dict[str, Any]) -> dict[str, float] | None:
    """The evaluation point with the highest mean (the first of equals: what ``EvalCallback`` keeps)."""
    curve = run.get("curve") or []
    return max(curve, key=lambda point: point["mean"]) if curve else None
