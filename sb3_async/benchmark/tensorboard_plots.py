"""PNG figures of the ``async/`` keys of real runs, drawn from their TensorBoard event files (``tensorboard`` reads
them, matplotlib draws: ``pip install 'sb3-async[benchmark]'``).

A log folder holds one sub-folder per run, as SB3 writes them (``tensorboard_log=FOLDER``,
``tb_log_name=NAME`` gives ``FOLDER/NAME_1``). Runs are grouped by the first word of their name (``a3c_2_workers``
and ``a3c_8_workers`` are group ``a3c``); each group gives one figure, ``monitoring_GROUP.png``: one panel per
``async/`` key any run of the group logged (and the episode return), one line per run, against env steps.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

import numpy as np

from sb3_async.benchmark.plots import _pyplot, _save

__all__ = ["plot_tensorboard", "read_scalars"]

#: Keys drawn besides the ``async/`` ones, first.
EXTRA_KEYS = ("rollout/ep_rew_mean",)


def read_scalars(run_dir: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Every scalar of one run's event files: ``key -> (steps, values)``."""
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError as error:
        raise ImportError("Reading TensorBoard logs needs tensorboard: pip install 'sb3-async[benchmark]'") from error
    accumulator = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    accumulator.Reload()
    scalars = {}
    for key in accumulator.Tags()["scalars"]:
        events = accumulator.Scalars(key)
        scalars[key] = (np.array([e.step for e in events]), np.array([e.value for e in events]))
    return scalars


def plot_tensorboard(log_dir: Path, out_dir: Path) -> list[Path]:
    """Write one ``monitoring_GROUP.png`` per group of runs of ``log_dir`` into ``out_dir``; returns their paths."""
    runs = sorted(path.parent for path in Path(log_dir).glob("*/events.out.tfevents.*"))
    if not runs:
        raise ValueError(f"Invalid log_dir={str(log_dir)!r}: no TensorBoard event files in its sub-folders")
    groups: dict[str, list[Path]] = defaultdict(list)
    for run in dict.fromkeys(runs):
        groups[run.name.split("_")[0]].append(run)
    out_dir.mkdir(parents=True, exist_ok=True)
    plt = _pyplot()
    written = []
    for group, members in groups.items():
        scalars = {run.name.rsplit("_", 1)[0]: read_scalars(run) for run in members}
        keys = sorted({key for values in scalars.values() for key in values if key.startswith("async/")})
        keys = [key for key in EXTRA_KEYS if any(key in values for values in scalars.values())] + keys
        columns = 3
        rows = math.ceil(len(keys) / columns)
        figure, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 2.8 * rows), squeeze=False)
        for ax, key in zip(axes.flat, keys):
            for name, values in scalars.items():
                if key in values:
                    steps, ys = values[key]
                    ax.plot(steps, ys, label=name, linewidth=1.2)
            ax.set_title(key, fontsize=9)
            ax.set_xlabel("env steps", fontsize=8)
            ax.tick_params(labelsize=7)
            ax.grid(alpha=0.3)
        for ax in list(axes.flat)[len(keys) :]:
            ax.axis("off")
        axes.flat[0].legend(fontsize=7)
        written.append(_save(plt, figure, f"TensorBoard scalars: {', '.join(scalars)}", out_dir / f"monitoring_{group}.png"))
    return written
