"""The cells and rules shared by ``results.md`` (:mod:`~sb3_async.benchmark.report`) and the published tables
(:mod:`~sb3_async.benchmark.tables`): one formatting, so that a figure reads the same in both."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sb3_async.benchmark.stats import GroupStats, ratio

NOT_REACHED = "n/r"


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


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def seeds_cell(stat: GroupStats) -> str:
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
