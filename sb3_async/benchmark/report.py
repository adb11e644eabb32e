"""From ``results.json`` to ``results.md`` and the plots: aggregation over seeds, ratios, tables.

Rules, stated again in every report:

- **Medians over seeds, not-reached counted as infinitely slow.** A run that never reached the threshold has no time
  to threshold; it sorts after every run that did. The median is therefore a real measured time when more than half
  of the seeds reached the threshold, and ``n/r`` (not reached) otherwise (with an even number of seeds the median
  averages the two middle runs, so it is ``n/r`` as soon as half of the seeds failed).
- **Ratio = ours / its SB3 peer**, of those medians (wall-clock seconds, then env steps): below 1 ours is faster.
  When either median is ``n/r`` the ratio is not a number and the table says which side failed.
- Runs that crashed (``error`` in the record) are left out of every median and listed under "Errors".
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

NOT_REACHED = "n/r"


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


def describe_ratio(ours: float | None, peer: float | None) -> str:
    """The ratio as shown in a table: a number, or which side did not reach the threshold."""
    value = ratio(ours, peer)
    if value is not None:
        return f"{value:.2f}"
    if ours is None and peer is None:
        return "both n/r"
    if ours is None:
        return "ours n/r"
    return "peer n/r"


def _median(values: Iterable[float | None]) -> float | None:
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
                final_mean=_median(run["final_eval_mean"] for run in ok),
                final_std=_median(run["final_eval_std"] for run in ok),
                final_means=[float(run["final_eval_mean"]) for run in ok if run["final_eval_mean"] is not None],
                steps_per_second=_median(run["steps_per_second"] for run in ok),
                steps_per_second_after_startup=_median(run.get("steps_per_second_after_startup") for run in ok),
                startup_seconds=_median(run.get("startup_seconds") for run in ok),
                peak_rss_mb=_median(run["peak_rss_mb"] for run in ok),
                peak_pss_mb=_median(run.get("peak_pss_mb") for run in ok),
            )
        )
    return stats


@dataclass
class RatioRow:
    """Ours against one SB3 peer on one env."""

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


# --- formatting ---------------------------------------------------------------------------------------------------------


def fmt_seconds(value: float | None) -> str:
    return NOT_REACHED if value is None else f"{value:.1f}"


def fmt_steps(value: float | None) -> str:
    return NOT_REACHED if value is None else f"{value:,.0f}"


def fmt_number(value: float | None, digits: int = 0) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def fmt_memory(stat: GroupStats) -> str:
    if stat.peak_rss_mb is None:
        return "—"
    pss = "" if stat.peak_pss_mb is None else f" ({stat.peak_pss_mb:,.0f})"
    return f"{stat.peak_rss_mb:,.0f}{pss}"


def fmt_final(stat: GroupStats) -> str:
    if stat.final_mean is None:
        return "—"
    return f"{stat.final_mean:.1f} ± {stat.final_std or 0.0:.1f}"


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def _seeds(stat: GroupStats) -> str:
    text = f"{stat.reached}/{stat.runs - stat.errors}"
    return text + (f" ({stat.errors} crashed)" if stat.errors else "")


MEDIAN_RULE = (
    "Medians are over seeds; a seed that did not reach the threshold counts as infinitely slow, so a median is a "
    "measured value only when more than half of the seeds reached the threshold, and n/r (not reached) otherwise."
)
MEMORY_RULE = (
    "Peak MB: resident memory of the run's whole process tree (main process, forkserver, workers), sampled every "
    "0.5 s: RSS, and in parentheses PSS (sampled every 5 s and at each evaluation), which counts the pages that "
    "processes share (libraries, shared parameters) once where RSS counts them in every process."
)


def _header(results: dict[str, Any]) -> list[str]:
    suite, machine = results["suite"], results["machine"]
    command = " ".join(results.get("command") or []) or f"python -m sb3_async.benchmark --suite {suite['name']}"
    versions = ", ".join(f"{name} {version}" for name, version in machine["versions"].items() if version)
    wall = results.get("wall_seconds")
    lines = [
        f"# Benchmark `{suite['name']}`",
        "",
        f"{suite['description']}.",
        "",
        "Generated by the benchmark tool: do not edit, rerun (`python -m sb3_async.benchmark --report DIR` re-renders "
        "this page and the plots from `results.json`).",
        "",
    ]
    parts = results.get("parts")
    if parts:
        lines.append(f"- merged from {len(parts)} invocations (`--merge`), {fmt_number(wall)} s wall-clock in all:")
        for part in parts:
            part_command = " ".join(part.get("command") or []) or "unknown command"
            lines.append(
                f"  - `{part_command}`: {part['created']}, {fmt_number(part.get('wall_seconds'))} s, load average at "
                f"the start {_load(part)}, commit {part.get('git_commit') or 'unknown'}"
            )
    else:
        lines += [
            f"- command: `{command}`",
            f"- date: {results['created']}; whole suite: {fmt_number(wall)} s wall-clock",
        ]
    lines += [
        f"- machine: {machine['cpu_model']}, {machine['usable_cpus']} usable cores, {machine['memory_gb']} GB; "
        f"{machine['platform']}; Python {machine['python']}",
        f"- software: {versions}" + ("" if parts else f"; commit {machine.get('git_commit') or 'unknown'}"),
    ]
    if not parts:
        lines.append(f"- load average when the suite started: {_load(machine)}")
    lines.append("")
    return lines


def _load(info: dict[str, Any]) -> str:
    load = info.get("load_average_at_start")
    return "unknown" if not load else ", ".join(f"{value:.2f}" for value in load)


def _protocol(results: dict[str, Any]) -> list[str]:
    suite = results["suite"]
    budget = suite["budget_seconds"]
    max_steps = suite["max_steps"]
    threads = suite["torch_threads"]
    sources = sorted(
        {(run["algo"], run["library"], run.get("hyperparameters_source")) for run in results["runs"]},
        key=lambda item: tuple(str(value) for value in item),  # a crashed run's source is None
    )
    lines = [
        "## Protocol",
        "",
        f"- every run in a fresh process, one at a time on the same cores, interleaved (for seed: for algorithm); "
        f"seeds {', '.join(map(str, suite['seeds']))}",
        f"- deterministic evaluation of {suite['n_eval_episodes']} episodes every "
        + (
            f"n_timesteps / {suite['evals_per_run']} env steps (each run's interval in results.json), "
            if suite.get("evals_per_run")
            else f"{suite['eval_interval']:,} env steps, "
        )
        + "on an eval env built by the RL Zoo with the training env's wrappers; evaluation time is off the clock "
        "(the async algorithms' workers are parked meanwhile)",
        "- clock: wall-clock seconds from the start of `learn()` (worker start-up included), evaluations excluded; "
        "time to threshold = the clock at the first evaluation whose mean reaches the threshold",
        f"- a run stops at the threshold{'' if suite['stop_at_threshold'] else ' (not used here: fixed budget)'}, at "
        + (f"{max_steps:,} env steps" if max_steps else "the config's `n_timesteps`")
        + (f", or after {budget:g} s of training clock" if budget else ""),
        f"- device {suite['device']}; torch threads in each run's main process: "
        f"{threads if threads else 'torch default'} (the async workers use one each)",
        "- hyperparameters: the RL Zoo's YAML files, exactly as its `train` reads them (overrides of this suite "
        "listed per run in results.json): "
        + "; ".join(f"{algo} ({library}) from `{source}`" for algo, library, source in sources if source),
        f"- {MEMORY_RULE}",
        "",
    ]
    return lines


def _errors(results: dict[str, Any]) -> list[str]:
    failed = [run for run in results["runs"] if run.get("error")]
    if not failed:
        return []
    lines = ["## Errors", ""]
    for run in failed:
        first = run["error"].strip().splitlines()[-1] if run["error"].strip() else "unknown error"
        lines.append(f"- `{run['run_id']}`: {first} (full log in `logs/{run['run_id']}.log`)")
    return [*lines, ""]


def _peers(results: dict[str, Any]) -> dict[str, list[str]]:
    """Who is compared with whom: as recorded with the results (else the registry's current table)."""
    recorded = results["suite"].get("peers")
    if recorded is not None:
        return {name: list(peers) for name, peers in recorded.items()}
    from sb3_async.benchmark.registry import ALGORITHMS

    return {name: list(entry.peers) for name, entry in ALGORITHMS.items()}


def render_race(results: dict[str, Any], images: dict[str, str]) -> list[str]:
    stats = group_stats(results["runs"])
    rows = ratio_rows(stats, _peers(results))
    lines = ["## Ratios: ours / SB3 peer (below 1: ours is faster)", ""]
    if rows:
        lines += _table(
            ["env", "ours", "peer", "wall-clock ratio", "env-steps ratio", "seeds reaching (ours, peer)"],
            (
                [
                    row.env,
                    row.ours.label,
                    row.peer.algo,
                    f"**{describe_ratio(row.ours.median_seconds, row.peer.median_seconds)}**",
                    describe_ratio(row.ours.median_steps, row.peer.median_steps),
                    f"{_seeds(row.ours)}, {_seeds(row.peer)}",
                ]
                for row in rows
            ),
        )
    else:
        lines.append("No pair of an sb3_async algorithm and its SB3 peer in these runs: no ratio.")
    lines += ["", MEDIAN_RULE, ""]
    for env in dict.fromkeys(stat.env for stat in stats):
        env_stats = [stat for stat in stats if stat.env == env]
        lines += [f"## {env} (threshold {env_stats[0].threshold:g})", ""]

        def ratio_cell(stat: GroupStats, env: str = env) -> str:
            mine = [row for row in rows if row.env == env and row.ours is stat]
            if mine:
                return ", ".join(
                    f"{describe_ratio(row.ours.median_seconds, row.peer.median_seconds)} vs {row.peer.algo}" for row in mine
                )
            return "peer" if any(row.peer is stat for row in rows if row.env == env) else "—"

        lines += _table(
            [
                "algorithm",
                "ratio (wall-clock)",
                "median s to threshold",
                "median env steps to threshold",
                "seeds reaching",
                "final eval mean ± std",
                "env steps/s",
                "peak MB RSS (PSS)",
            ],
            (
                [
                    f"{stat.label} ({stat.library})",
                    ratio_cell(stat),
                    fmt_seconds(stat.median_seconds),
                    fmt_steps(stat.median_steps),
                    _seeds(stat),
                    fmt_final(stat),
                    fmt_number(stat.steps_per_second),
                    fmt_memory(stat),
                ]
                for stat in env_stats
            ),
        )
        lines += [
            "",
            "Final eval: the last evaluation of each seed (10 episodes: mean ± std), median over seeds of each. "
            "Env steps/s: env steps of the run / training clock (start-up included).",
            "",
        ]
        if env in images:
            lines += [f"![{env}]({images[env]})", ""]
    return lines


def render_scaling(results: dict[str, Any], images: dict[str, str]) -> list[str]:
    stats = group_stats(results["runs"])
    lines: list[str] = []
    for env, algo in dict.fromkeys((stat.env, stat.algo) for stat in stats):
        rows = sorted((s for s in stats if s.env == env and s.algo == algo), key=lambda s: s.axes.get("n_workers", 0))
        base = rows[0]
        lines += [f"## {env}, {algo}: against worker count (threshold {base.threshold:g})", ""]

        def speedup(value: float | None, reference: float | None, inverse: bool = False) -> str:
            if value is None or reference is None or value == 0:
                return NOT_REACHED if inverse else "—"
            return f"{(reference / value) if inverse else (value / reference):.2f}x"

        lines += _table(
            [
                "workers",
                "env steps/s after start-up",
                f"throughput speed-up vs {base.axes.get('n_workers', '?')}",
                "median s to threshold",
                "time speed-up",
                "median env steps to threshold",
                "seeds reaching",
                "env steps/s (whole run)",
                "start-up s",
                "peak MB RSS (PSS)",
            ],
            (
                [
                    str(stat.axes.get("n_workers", stat.variant)),
                    fmt_number(stat.steps_per_second_after_startup),
                    speedup(stat.steps_per_second_after_startup, base.steps_per_second_after_startup),
                    fmt_seconds(stat.median_seconds),
                    speedup(stat.median_seconds, base.median_seconds, inverse=True),
                    fmt_steps(stat.median_steps),
                    _seeds(stat),
                    fmt_number(stat.steps_per_second),
                    fmt_number(stat.startup_seconds, 1),
                    fmt_memory(stat),
                ]
                for stat in rows
            ),
        )
        lines += [
            "",
            "Env steps/s after start-up: from the first callback (workers running) to the last, training clock. "
            "Time speed-up: median time to threshold with the fewest workers / with this many. " + MEDIAN_RULE,
            "",
        ]
        for key in (f"{env}-{algo}-scaling", env):
            if key in images:
                lines += [f"![{key}]({images[key]})", ""]
    return lines


def sweep_axes(stats: Sequence[GroupStats]) -> tuple[str, str]:
    """The (series, x) axes of a sweep: the first and second keys of the variants' ``axes``."""
    keys = list(stats[0].axes)
    if len(keys) < 2:
        raise ValueError(f"A sweep's variants need two axes (series, x), got {keys}")
    return keys[0], keys[1]


def render_sweep(results: dict[str, Any], images: dict[str, str]) -> list[str]:
    stats = group_stats(results["runs"])
    lines: list[str] = []
    for env, algo in dict.fromkeys((stat.env, stat.algo) for stat in stats):
        rows = [s for s in stats if s.env == env and s.algo == algo]
        series_key, x_key = sweep_axes(rows)
        series = list(dict.fromkeys(s.axes[series_key] for s in rows))
        xs = sorted({s.axes[x_key] for s in rows})
        threshold = rows[0].threshold
        lines += [f"## {env}, {algo}: final evaluation score by {series_key} and {x_key}", ""]
        summary = []
        for name in series:
            scores = [score for s in rows if s.axes[series_key] == name for score in s.final_means]
            summary.append(
                [
                    str(name),
                    fmt_number(statistics.median(scores) if scores else None, 1),
                    fmt_number(statistics.fmean(scores) if scores else None, 1),
                    f"{sum(score >= threshold for score in scores)}/{len(scores)}",
                    fmt_number(max(scores) if scores else None, 1),
                ]
            )
        lines += _table(
            [series_key, "median final score", "mean final score", f"runs ending ≥ {threshold:g}", "best"], summary
        )
        lines += [
            "",
            f"Final score of each run (mean of {results['suite']['n_eval_episodes']} deterministic episodes "
            "at the end of training; median over seeds where there are several):",
            "",
        ]
        by_cell = {(s.axes[series_key], s.axes[x_key]): s for s in rows}
        lines += _table(
            [x_key, *map(str, series)],
            (
                [f"{x:.3g}" if isinstance(x, float) else str(x)]
                + [fmt_number(by_cell[(name, x)].final_mean, 1) if (name, x) in by_cell else "—" for name in series]
                for x in xs
            ),
        )
        lines.append("")
        key = f"{env}-{algo}-sweep"
        if key in images:
            lines += [f"![{key}]({images[key]})", ""]
    return lines


def best_evaluation(run: dict[str, Any]) -> dict[str, float] | None:
    """The evaluation point with the highest mean (the first of equals: what ``EvalCallback`` keeps)."""
    curve = run.get("curve") or []
    return max(curve, key=lambda point: point["mean"]) if curve else None


def render_final(results: dict[str, Any], images: dict[str, str]) -> list[str]:
    """The ``final`` kind: per seed, the score of the model ``learn()`` returned next to the best evaluation."""
    runs = [run for run in results["runs"] if not run.get("error")]
    stats = group_stats(results["runs"])
    peers = _peers(results)
    episodes = results["suite"].get("final_eval_episodes")
    lines = []
    for env in dict.fromkeys(stat.env for stat in stats):
        env_stats = [stat for stat in stats if stat.env == env]
        by_algo = {stat.algo: stat for stat in env_stats if stat.variant == "default"}
        lines += [f"## {env}: the final policy against the best evaluation (threshold {env_stats[0].threshold:g})", ""]
        summary = []
        for stat in env_stats:
            mine = [run for run in runs if run["env"] == env and run["algo"] == stat.algo and run["variant"] == stat.variant]
            finals = [run["final_policy"]["mean"] for run in mine if run.get("final_policy")]
            bests = [point["mean"] for point in map(best_evaluation, mine) if point is not None]
            train = _median(run["train_seconds"] for run in mine)
            peer_cells = [
                f"{describe_ratio(train, _median(r['train_seconds'] for r in runs if r['env'] == env and r['algo'] == peer))}"
                f" vs {peer}"
                for peer in peers.get(stat.algo, ())
                if peer in by_algo
            ]
            summary.append(
                [
                    f"{stat.label} ({stat.library})",
                    fmt_number(_median(finals), 1),
                    fmt_number(min(finals) if finals else None, 1),
                    f"{sum(value >= 475 for value in finals)}/{len(finals)}",
                    f"{sum(value >= 400 for value in finals)}/{len(finals)}",
                    fmt_number(_median(bests), 1),
                    fmt_seconds(stat.median_seconds),
                    fmt_seconds(train),
                    ", ".join(peer_cells) or "—",
                    fmt_number(stat.steps_per_second),
                ]
            )
        lines += _table(
            [
                "algorithm",
                f"final policy: median ({episodes} episodes)",
                "worst seed",
                "seeds ≥ 475",
                "seeds ≥ 400",
                "best evaluation: median",
                "median s to threshold",
                "median training s (whole run)",
                "training-time ratio",
                "env steps/s",
            ],
            summary,
        )
        lines += [
            "",
            f"Final policy: the model `learn(n_timesteps)` returned, {episodes} deterministic episodes on a fresh eval "
            "env. Best evaluation: the highest of the run's periodic evaluations (10 episodes each). "
            "Training-time ratio: our median training clock for the whole run / the peer's (below 1: ours is faster).",
            "",
            "Per seed:",
            "",
        ]
        per_seed = []
        for run in sorted(runs, key=lambda r: (r["algo"], r["variant"], r["seed"])):
            if run["env"] != env:
                continue
            best = best_evaluation(run)
            final = run.get("final_policy") or {}
            per_seed.append(
                [
                    run["algo"] if run["variant"] == "default" else f"{run['algo']} {run['variant']}",
                    str(run["seed"]),
                    "—" if not final else f"{final['mean']:.1f} ± {final['std']:.1f}",
                    "—" if best is None else f"{best['mean']:.1f} at {best['steps']:,.0f}",
                    fmt_number(run["curve"][-1]["mean"], 1) if run.get("curve") else "—",
                    fmt_seconds(run["seconds_to_threshold"]),
                    fmt_number(run["train_seconds"], 1),
                    fmt_number(run["env_steps"]),
                ]
            )
        lines += _table(
            [
                "algorithm",
                "seed",
                "final policy",
                "best evaluation (env steps)",
                "last evaluation",
                "s to threshold",
                "training s",
                "env steps",
            ],
            per_seed,
        )
        lines.append("")
        if env in images:
            lines += [f"![{env}]({images[env]})", ""]
    return lines


RENDERERS = {"race": render_race, "scaling": render_scaling, "sweep": render_sweep, "final": render_final}


def render_markdown(results: dict[str, Any], images: dict[str, str] | None = None) -> str:
    """``results.md``: the kind's tables (ratios first for races), then the protocol and any errors."""
    kind = results["suite"]["kind"]
    lines = _header(results)
    lines += RENDERERS[kind](results, images or {})
    lines += _errors(results)
    lines += _protocol(results)
    return "\n".join(lines).rstrip() + "\n"


def write_report(results: dict[str, Any], out_dir: str | Path, plots: bool = True) -> list[Path]:
    """Write ``results.md`` and (with matplotlib) the PNG plots into ``out_dir``; return the files written."""
    out = Path(out_dir)
    images: dict[str, str] = {}
    written: list[Path] = []
    if plots:
        from sb3_async.benchmark import plots as plotting

        for key, path in plotting.plot_results(results, out).items():
            images[key] = path.name
            written.append(path)
    path = out / "results.md"
    path.write_text(render_markdown(results, images))
    return [path, *written]
