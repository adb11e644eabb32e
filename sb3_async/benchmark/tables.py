"""The published tables: what ``python -m sb3_async.benchmark --report DIR... --markdown --table KIND`` prints, and
what the README and the docs embed between ``<!-- generated: ... -->`` markers (:mod:`~sb3_async.benchmark.published`
keeps those blocks equal to this output).

Each table is computed from one results folder's ``results.json`` only, so that a ratio never divides seconds
measured on two hosts; the cross-folder ``summary`` takes each row from one folder and only picks, between folders,
the peer that does best against ours (by ratio, which is host-independent).

Kinds:

- ``ratios``: ours / peer of the median time to threshold, per env and pair (the race suites);
- ``envs``: every algorithm of the folder, per env: time and steps to threshold, seeds reaching, final evaluation;
- ``score``: the evaluation at the end of a fixed training budget (races run past the threshold, e.g. MuJoCo);
- ``final``: the ``final`` kind: the model ``learn()`` returned against the best periodic evaluation;
- ``summary``: one row per (task, ours) over several folders: ours, its best peer, the ratio, who is ahead;
- ``script``: the table a measurement script of ``benchmarks/scripts`` computed from its raw measurements and stored
  under ``"table"`` in its ``results.json`` (the scripts that cannot be suites: they time engines, not training runs).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sb3_async.benchmark.cells import NOT_REACHED, describe_ratio, fmt_number, seeds_cell, table
from sb3_async.benchmark.runner import load_results
from sb3_async.benchmark.stats import GroupStats, best_evaluation, group_stats, median_of, ratio, ratio_rows

KINDS = ("ratios", "envs", "score", "final", "summary", "script")


def fmt_duration(seconds: float | None) -> str:
    """Seconds below ten minutes, minutes above (Pong's races last half an hour)."""
    if seconds is None:
        return NOT_REACHED
    return f"{seconds:.1f} s" if seconds < 600 else f"{seconds / 60:.1f} min"


def peers_of(results: dict[str, Any]) -> dict[str, list[str]]:
    """Who is compared with whom: as recorded with the results, and the registry's current peers (a folder merged from
    one-algorithm invocations recorded each algorithm's peers as its own suite listed them)."""
    from sb3_async.benchmark.registry import ALGORITHMS

    peers = {name: list(entry.peers) for name, entry in ALGORITHMS.items()}
    for name, recorded in (results["suite"].get("peers") or {}).items():
        peers[name] = list(dict.fromkeys([*recorded, *peers.get(name, [])]))
    return peers


def default_kind(results: dict[str, Any]) -> str:
    """The table a folder publishes when ``--table`` is not given."""
    if "suite" not in results and "table" in results:
        return "script"
    suite = results["suite"]
    if suite["kind"] == "final":
        return "final"
    return "ratios" if suite.get("stop_at_threshold", True) else "score"


def _runs_of(results: dict[str, Any], stat: GroupStats) -> list[dict[str, Any]]:
    return [
        run
        for run in results["runs"]
        if not run.get("error") and (run["env"], run["algo"], run["variant"]) == (stat.env, stat.algo, stat.variant)
    ]


def _budget(runs: Sequence[dict[str, Any]]) -> str:
    budgets = sorted({float(run["budget_seconds"]) for run in runs if run.get("budget_seconds")})
    return " or ".join(f"{value:g} s" if value < 600 else f"{value / 60:g} min" for value in budgets) or "—"


def render_ratios(results: dict[str, Any]) -> list[str]:
    rows = ratio_rows(group_stats(results["runs"]), peers_of(results))
    if not rows:
        raise ValueError(f"No pair of an sb3_async algorithm and its peer in suite {results['suite']['name']!r}")
    return table(
        [
            "env (threshold)",
            "ours",
            "peer",
            "ours: median time",
            "peer: median time",
            "ratio",
            "env-steps ratio",
            "seeds reaching (ours, peer)",
        ],
        (
            [
                f"{row.env} ({row.ours.threshold:g})",
                row.ours.label,
                row.peer.label,
                fmt_duration(row.ours.median_seconds),
                fmt_duration(row.peer.median_seconds),
                f"**{describe_ratio(row.ours.median_seconds, row.peer.median_seconds)}**",
                describe_ratio(row.ours.median_steps, row.peer.median_steps),
                f"{seeds_cell(row.ours)}, {seeds_cell(row.peer)}",
            ]
            for row in rows
        ),
    )


def render_envs(results: dict[str, Any]) -> list[str]:
    stats = group_stats(results["runs"])
    return table(
        [
            "env (threshold)",
            "algorithm",
            "library",
            "median time to threshold",
            "median env steps",
            "seeds reaching",
            "final evaluation: median",
            "env steps/s",
        ],
        (
            [
                f"{stat.env} ({stat.threshold:g})",
                stat.label,
                stat.library,
                fmt_duration(stat.median_seconds),
                NOT_REACHED if stat.median_steps is None else f"{stat.median_steps:,.0f}",
                seeds_cell(stat),
                fmt_number(stat.final_mean, 1),
                fmt_number(stat.steps_per_second),
            ]
            for stat in stats
        ),
    )


def render_score(results: dict[str, Any]) -> list[str]:
    stats = group_stats(results["runs"])
    rows = []
    for env in dict.fromkeys(stat.env for stat in stats):
        ranked = sorted((s for s in stats if s.env == env), key=lambda s: -math.inf if s.final_mean is None else -s.final_mean)
        for stat in ranked:
            runs = _runs_of(results, stat)
            scores = stat.final_means
            rows.append(
                [
                    env,
                    stat.label,
                    stat.library,
                    _budget(runs),
                    f"**{fmt_number(stat.final_mean, 0)}**" if stat is ranked[0] else fmt_number(stat.final_mean, 0),
                    "—" if not scores else f"{min(scores):,.0f} … {max(scores):,.0f}",
                    f"{len(scores)}",
                    fmt_number(median_of(run["env_steps"] for run in runs)),
                    fmt_number(stat.steps_per_second),
                ]
            )
    return table(
        [
            "env",
            "algorithm",
            "library",
            "training budget",
            "final evaluation: median",
            "seeds: worst … best",
            "seeds",
            "median env steps",
            "env steps/s",
        ],
        rows,
    )


def render_final(results: dict[str, Any]) -> list[str]:
    stats = group_stats(results["runs"])
    peers = peers_of(results)
    episodes = results["suite"].get("final_eval_episodes")
    rows = []
    for stat in stats:
        runs = _runs_of(results, stat)
        finals = [run["final_policy"]["mean"] for run in runs if run.get("final_policy")]
        bests = [point["mean"] for point in map(best_evaluation, runs) if point is not None]
        train = median_of(run["train_seconds"] for run in runs)
        peer_cells = []
        for peer in peers.get(stat.algo, ()):
            peer_runs = [r for r in results["runs"] if not r.get("error") and r["env"] == stat.env and r["algo"] == peer]
            if peer_runs:
                peer_cells.append(f"{describe_ratio(train, median_of(r['train_seconds'] for r in peer_runs))} vs {peer}")
        rows.append(
            [
                stat.env,
                stat.label,
                stat.library,
                fmt_number(median_of(finals), 1),
                fmt_number(min(finals) if finals else None, 1),
                f"{sum(value >= stat.threshold for value in finals)}/{len(finals)}",
                fmt_number(median_of(bests), 1),
                ", ".join(peer_cells) or "—",
            ]
        )
    return table(
        [
            "env",
            "algorithm",
            "library",
            f"final policy: median ({episodes} episodes)",
            "worst seed",
            "seeds ≥ threshold",
            "best evaluation: median",
            "training-time ratio",
        ],
        rows,
    )


@dataclass
class SummaryRow:
    """Ours against its toughest peer on one task, from one folder."""

    task: str
    ours: str
    peer: str
    ours_value: str
    peer_value: str
    ratio: str
    ahead: str
    toughness: float  # higher: the peer does better against ours
    entry: str = ""  # ours' hyperparameters in that folder
    created: str = ""  # when that folder's (last) invocation ran
    host: str = ""  # the machine that folder was measured on


def _time_value(stat: GroupStats, with_final: bool) -> str:
    text = f"{fmt_duration(stat.median_seconds)} ({stat.reached}/{stat.runs - stat.errors})"
    return text + (f"; final {fmt_number(stat.final_mean, 1)}" if with_final else "")


def _time_rows(results: dict[str, Any]) -> list[SummaryRow]:
    rows = []
    stats = group_stats(results["runs"])
    defaults = {(stat.env, stat.algo) for stat in stats if stat.variant == "default"}
    for row in ratio_rows(stats, peers_of(results)):
        if row.ours.variant != "default" and (row.env, row.ours.algo) in defaults:
            continue  # a variant of ours is a study, not our result
        ours, peer = row.ours.median_seconds, row.peer.median_seconds
        value = ratio(ours, peer)
        if value is not None:
            toughness, ahead = value, "yes" if value < 1 else "no"
        elif ours is None and peer is None:  # neither reached: the final evaluations tell who got closer
            ours_final, peer_final = row.ours.final_mean, row.peer.final_mean
            behind = ours_final is None or (peer_final is not None and peer_final > ours_final)
            toughness, ahead = (1.0, "no (final evaluation)") if behind else (1.0, "yes (final evaluation)")
        else:
            toughness, ahead = (math.inf, "no") if ours is None else (-math.inf, "yes")
        rows.append(
            SummaryRow(
                task=f"{row.env}: time to {row.ours.threshold:g}",
                ours=row.ours.label,
                peer=row.peer.label,
                ours_value=_time_value(row.ours, with_final=ours is None and peer is None),
                peer_value=_time_value(row.peer, with_final=ours is None and peer is None),
                ratio=describe_ratio(ours, peer),
                ahead=ahead,
                toughness=toughness,
            )
        )
    return rows


def _score_rows(results: dict[str, Any]) -> list[SummaryRow]:
    stats = group_stats(results["runs"])
    peers = peers_of(results)
    rows = []
    for ours in stats:
        if ours.library != "sb3_async" or ours.variant != "default" or ours.final_mean is None:
            continue
        for peer in stats:
            if peer.env != ours.env or peer.algo not in peers.get(ours.algo, ()) or peer.final_mean is None:
                continue
            both_positive = ours.final_mean > 0 and peer.final_mean > 0
            rows.append(
                SummaryRow(
                    task=f"{ours.env}: score after {_budget(_runs_of(results, ours))}",
                    ours=ours.algo,
                    peer=peer.algo,
                    ours_value=f"{ours.final_mean:,.0f}",
                    peer_value=f"{peer.final_mean:,.0f}",
                    ratio=f"{ours.final_mean / peer.final_mean:.2f}" if both_positive else "—",
                    ahead="yes" if ours.final_mean > peer.final_mean else "no",
                    toughness=peer.final_mean - ours.final_mean,
                )
            )
    return rows


def _entry(results: dict[str, Any], env: str, label: str) -> str:
    """Ours' hyperparameters in these results, as a comparable string."""
    for run in results["runs"]:
        if run["env"] == env and not run.get("error") and label in (run["algo"], f"{run['algo']} {run['variant']}"):
            return json.dumps(run.get("hyperparameters") or {}, sort_keys=True, default=str)
    return ""


def _created(results: dict[str, Any]) -> str:
    return max([results["created"], *(part["created"] for part in results.get("parts") or [])])


def _host(results: dict[str, Any]) -> str:
    machine = results.get("machine") or {}
    cpus = machine.get("usable_cpus") or machine.get("cpu_count") or machine.get("cpus")
    return f"{machine.get('cpu_model', 'unknown CPU')}" + (f", {cpus} cores" if cpus else "")


def render_summary(folders: Sequence[dict[str, Any]]) -> list[str]:
    """Per (task, ours): the races of ours' newest zoo entry only (a race of an entry since changed does not describe
    the entry a user gets), and of those the row where the peer does best against ours. Each row says the host and the
    day its folder was measured (a row's ratio comes from one folder: one host, one sitting); the notes say when the
    rows come from several hosts, and name the peers that raced only an earlier entry of ours."""
    candidates: dict[tuple[str, str], list[SummaryRow]] = {}
    for results in folders:
        if results["suite"]["kind"] != "race":
            continue
        rows = _time_rows(results) if results["suite"].get("stop_at_threshold", True) else _score_rows(results)
        for row in rows:
            row.entry, row.created = _entry(results, row.task.split(":")[0], row.ours), _created(results)
            row.host = _host(results)
            candidates.setdefault((row.task, row.ours), []).append(row)
    best: dict[tuple[str, str], SummaryRow] = {}
    earlier: list[str] = []
    for key, rows in candidates.items():
        newest = max(rows, key=lambda row: row.created).entry
        best[key] = max((row for row in rows if row.entry == newest), key=lambda row: row.toughness)
        raced = {row.peer for row in rows if row.entry == newest}
        for peer in sorted({row.peer for row in rows if row.entry != newest} - raced):
            earlier.append(f"{key[1]} against {peer} on {key[0].split(':')[0]}")
    if not best:
        raise ValueError("No race with a pair of an sb3_async algorithm and its peer in these folders")
    lines = table(
        ["task", "ours", "best peer", "ours: result", "peer: result", "ratio (ours / peer)", "ours ahead", "measured"],
        (
            [
                row.task,
                row.ours,
                row.peer,
                row.ours_value,
                row.peer_value,
                row.ratio,
                row.ahead,
                f"{row.host}, {row.created[:10]}",
            ]  # fmt: skip
            for row in best.values()
        ),
    )
    hosts = sorted({row.host for row in best.values()})
    notes = []
    if len(hosts) > 1:
        notes.append(
            f"The rows were measured on {len(hosts)} kinds of host ({'; '.join(hosts)}): each ratio divides times of one"
            " folder, measured on one host in one sitting; seconds of different rows are not comparable."
        )
    if earlier:
        notes.append(f"Raced only against an earlier entry of ours, so not shown: {'; '.join(earlier)}.")
    return lines + (["", " ".join(notes)] if notes else [])


def render_script(results: dict[str, Any]) -> list[str]:
    """The ``"table"`` a measurement script stored with its raw data: its title, the table, its notes. The script
    computes it (``--render DIR`` recomputes it from the raw data), so the figures still come from the folder only.

    :raises ValueError: no ``"table"`` in the results, or a row whose length differs from the columns'
    """
    spec = results.get("table")
    if not isinstance(spec, dict) or not spec.get("columns"):
        raise ValueError("No 'table' with 'columns' in these results: only a measurement script's folder has one")
    columns = [str(column) for column in spec["columns"]]
    rows = [[str(cell) for cell in row] for row in spec.get("rows") or []]
    for row in rows:
        if len(row) != len(columns):
            raise ValueError(f"Invalid row {row!r}: expected {len(columns)} cells, one per column")
    lines = [f"**{spec['title']}**", ""] if spec.get("title") else []
    lines += table(columns, rows)
    return lines + (["", str(spec["notes"])] if spec.get("notes") else [])


RENDERERS = {
    "ratios": render_ratios,
    "envs": render_envs,
    "score": render_score,
    "final": render_final,
    "script": render_script,
}


def only_algos(results: dict[str, Any], algos: Sequence[str]) -> dict[str, Any]:
    """The results with the runs of these algorithms and of their peers only (an algorithm's page shows its rows).

    :raises ValueError: none of these algorithms ran there
    """
    peers = peers_of(results)
    if not any(run["algo"] in algos for run in results["runs"]):
        raise ValueError(f"None of {', '.join(algos)} in suite {results['suite']['name']!r}")
    keep = set(algos) | {peer for algo in algos for peer in peers.get(algo, ())}
    return {**results, "runs": [run for run in results["runs"] if run["algo"] in keep]}


def render_results(folders: Sequence[dict[str, Any]], kind: str | None = None, algos: Sequence[str] | None = None) -> str:
    """The Markdown of one published table (a trailing newline, nothing around the table); with ``algos``, only the
    rows of these algorithms and their peers (the summary: only these algorithms' rows).

    :raises ValueError: an unknown kind, several folders for a one-folder kind, or a folder without what the kind
        shows
    """
    if kind is not None and kind not in KINDS:
        raise ValueError(f"Invalid table {kind!r}: expected one of {', '.join(KINDS)}")
    if algos and kind == "script":
        raise ValueError("Table 'script' shows a measurement script's table whole: --algos does not apply")
    if algos and kind == "summary":
        folders = [only_algos(results, algos) for results in folders if any(r["algo"] in algos for r in results["runs"])]
    elif algos:
        folders = [only_algos(results, algos) for results in folders]
    if kind == "summary":
        return "\n".join(render_summary(folders)) + "\n"
    if len(folders) != 1:
        raise ValueError(
            f"Table {kind or 'default'!r} reads one results folder, got {len(folders)} (only 'summary' reads several)"
        )
    results = folders[0]
    return "\n".join(RENDERERS[kind or default_kind(results)](results)) + "\n"


def render_folders(folders: Sequence[str | Path], kind: str | None = None, algos: Sequence[str] | None = None) -> str:
    """:func:`render_results` of the ``results.json`` of these folders."""
    return render_results([load_results(folder) for folder in folders], kind, algos)
