"""PNG plots of a suite's results (matplotlib, imported lazily: ``pip install 'sb3-async[benchmark]'``).

- races: evaluation return against training-clock seconds and against env steps, one line per algorithm (median
  over seeds), the min–max over seeds shaded, the threshold dashed. A seed that stopped at the threshold holds its
  last evaluation from then on;
- scaling: env steps/s and time to threshold against worker count (seeds as dots, medians as lines);
- sweeps: the paper's Figure S1 shape (final scores sorted in decreasing order against run rank, one line per
  series) beside the final score against the swept value.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sb3_async.benchmark.stats import group_stats, sweep_axes


def _save(plt: Any, figure: Any, title: str, path: Path) -> Path:
    """Title ``figure``, write it to ``path`` and close it."""
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as error:
        raise ImportError(
            "The benchmark's plots need matplotlib: pip install 'sb3-async[benchmark]' (or pass --no-plots)"
        ) from error
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def curve_band(curves: Sequence[Sequence[dict[str, float]]], key: str) -> tuple[np.ndarray, ...]:
    """Median, min and max over seeds of evaluation curves, on the union of their x values (``key``: ``"seconds"``
    or ``"steps"``). Each seed counts from its first evaluation on and holds its last value after its last one.

    :return: ``(x, median, low, high)``
    """
    curves = [sorted(curve, key=lambda point: point[key]) for curve in curves if curve]
    if not curves:
        empty = np.zeros(0)
        return empty, empty, empty, empty
    grid = np.array(sorted({point[key] for curve in curves for point in curve}), dtype=float)
    values = np.full((len(curves), len(grid)), np.nan)
    for i, curve in enumerate(curves):
        xs = np.array([point[key] for point in curve], dtype=float)
        ys = np.array([point["mean"] for point in curve], dtype=float)
        index = np.searchsorted(xs, grid, side="right") - 1
        started = index >= 0
        values[i, started] = ys[index[started]]
    with np.errstate(all="ignore"):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return grid, np.nanmedian(values, axis=0), np.nanmin(values, axis=0), np.nanmax(values, axis=0)


def plot_curves(runs: Sequence[dict[str, Any]], title: str, threshold: float | None, path: Path) -> Path:
    """Return against seconds and against env steps, one line per (algorithm, variant)."""
    plt = _pyplot()
    figure, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    groups: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        label = run["algo"] if run["variant"] == "default" else f"{run['algo']} {run['variant']}"
        groups.setdefault(f"{label} ({run['library']})", []).append(run)
    for axis, key, xlabel in (
        (axes[0], "seconds", "training clock (s, evaluation excluded)"),
        (axes[1], "steps", "env steps"),
    ):
        for index, (label, group) in enumerate(groups.items()):
            x, median, low, high = curve_band([run["curve"] for run in group], key)
            if not len(x):
                continue
            color = f"C{index}"
            axis.plot(x, median, drawstyle="steps-post", color=color, label=f"{label}, {len(group)} seed(s)")
            axis.plot(x, median, "o", color=color, markersize=3)
            axis.fill_between(x, low, high, step="post", color=color, alpha=0.2, linewidth=0)
        if threshold is not None:
            axis.axhline(threshold, color="black", linestyle="--", linewidth=1, label=f"threshold {threshold:g}")
        axis.set_xlabel(xlabel)
        axis.set_ylabel("deterministic evaluation return")
        axis.grid(alpha=0.3)
    axes[1].legend(loc="best", fontsize=8)
    return _save(plt, figure, f"{title}: median over seeds, min–max shaded", path)


def plot_scaling(runs: Sequence[dict[str, Any]], title: str, path: Path) -> Path:
    """Env steps/s (after start-up) and time to threshold against worker count."""
    plt = _pyplot()
    stats = sorted(group_stats(runs), key=lambda s: s.axes.get("n_workers", 0))
    figure, axes = plt.subplots(1, 2, figsize=(10, 4))
    workers = [s.axes.get("n_workers") for s in stats]
    ok = [run for run in runs if not run.get("error")]
    for run in ok:
        n = run["axes"].get("n_workers")
        if run.get("steps_per_second_after_startup") is not None:
            axes[0].scatter(n, run["steps_per_second_after_startup"], color="C0", alpha=0.5, s=15)
        if run["seconds_to_threshold"] is not None:
            axes[1].scatter(n, run["seconds_to_threshold"], color="C1", alpha=0.5, s=15)
    axes[0].plot(workers, [s.steps_per_second_after_startup or np.nan for s in stats], "o-", color="C0", label="median")
    axes[1].plot(
        workers,
        [s.median_seconds if s.median_seconds is not None else np.nan for s in stats],
        "o-",
        color="C1",
        label="median (n/r not drawn)",
    )
    base, counts = stats[0], [int(w) for w in workers if w]
    if base.steps_per_second_after_startup and len(counts) == len(workers):
        ideal = [base.steps_per_second_after_startup * w / counts[0] for w in counts]
        axes[0].plot(workers, ideal, ":", color="gray", label="linear in workers")
    axes[0].set_ylabel("env steps/s after start-up")
    axes[1].set_ylabel(f"seconds to threshold {stats[0].threshold:g}")
    for axis in axes:
        axis.set_xlabel("workers")
        axis.set_xticks([w for w in workers if w is not None])
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
        axis.set_ylim(bottom=0)
    return _save(plt, figure, title, path)


def plot_sweep(runs: Sequence[dict[str, Any]], title: str, path: Path) -> Path:
    """Figure S1: final scores sorted in decreasing order against rank, one line per series; and score against x."""
    plt = _pyplot()
    stats = group_stats(runs)
    series_key, x_key = sweep_axes(stats)
    ok = [run for run in runs if not run.get("error") and run["final_eval_mean"] is not None]
    series = list(dict.fromkeys(run["axes"][series_key] for run in ok))
    figure, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    threshold = float(runs[0]["threshold"])
    for index, name in enumerate(series):
        mine = [run for run in ok if run["axes"][series_key] == name]
        scores = sorted((run["final_eval_mean"] for run in mine), reverse=True)
        axes[0].plot(range(1, len(scores) + 1), scores, "o-", color=f"C{index}", label=str(name))
        points = sorted((run["axes"][x_key], run["final_eval_mean"]) for run in mine)
        axes[1].plot([x for x, _ in points], [y for _, y in points], "o", color=f"C{index}", alpha=0.6, label=str(name))
        xs = sorted({x for x, _ in points})
        medians = [float(np.median([y for x2, y in points if x2 == x])) for x in xs]
        axes[1].plot(xs, medians, "-", color=f"C{index}")
    for axis in axes:
        axis.axhline(threshold, color="black", linestyle="--", linewidth=1)
        axis.set_ylabel("final deterministic evaluation return")
        axis.grid(alpha=0.3)
    axes[0].set_xlabel("run rank (sorted by final score)")
    from matplotlib.ticker import MaxNLocator

    axes[0].xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[0].legend(fontsize=8)
    axes[1].set_xlabel(x_key)
    if all(isinstance(x, (int, float)) and x > 0 for x in (run["axes"][x_key] for run in ok)):
        axes[1].set_xscale("log")
    return _save(plt, figure, title, path)


def _safe(name: str) -> str:
    return "".join(char if char.isalnum() or char in "-_." else "_" for char in name)


def plot_results(results: dict[str, Any], out_dir: Path) -> dict[str, Path]:
    """Every plot of the suite's kind, written into ``out_dir``: key (as the report refers to it) -> file."""
    kind = results["suite"]["kind"]
    runs = [run for run in results["runs"] if not run.get("error")]
    written: dict[str, Path] = {}
    envs = list(dict.fromkeys(run["env"] for run in runs))
    for env in envs:
        env_runs = [run for run in runs if run["env"] == env]
        threshold = float(env_runs[0]["threshold"]) if env_runs else math.nan
        if kind in ("race", "scaling", "final"):
            written[env] = plot_curves(env_runs, env, threshold, out_dir / f"{_safe(env)}.png")
        for algo in dict.fromkeys(run["algo"] for run in env_runs):
            algo_runs = [run for run in env_runs if run["algo"] == algo]
            if kind == "scaling":
                key = f"{env}-{algo}-scaling"
                written[key] = plot_scaling(algo_runs, f"{env}, {algo}: scaling with workers", out_dir / f"{_safe(key)}.png")
            elif kind == "sweep":
                key = f"{env}-{algo}-sweep"
                written[key] = plot_sweep(
                    algo_runs, f"{env}, {algo}: final score over the sweep", out_dir / f"{_safe(key)}.png"
                )
    return written
