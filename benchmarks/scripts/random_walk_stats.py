"""Statistics of RandomWalkActionNoise per bound mode and sigma: what chose its defaults (docs/guide/replay.md).

For episodes of T steps (Pendulum 200, MountainCarContinuous 999), over many independent streams: the mean |y|
(how far the walk moves the action), the share of steps within 1% of the bound (pinned), the lag-20
autocorrelation (temporal correlation), and the spectral slope of y at low frequencies (eq. 10 gives -2).

    python benchmarks/scripts/random_walk_stats.py
"""

from __future__ import annotations

import numpy as np

from sb3_async.common.noise import random_walk_step


def walk(sigma: float, mode: str, steps: int, streams: int, rng: np.random.Generator) -> np.ndarray:
    y = np.zeros(streams)
    out = np.empty((steps, streams))
    for t in range(steps):
        y = random_walk_step(y, rng.normal(0.0, sigma, size=streams), 1.0, mode, 0.01)  # type: ignore[arg-type]
        out[t] = y
    return out


def spectral_slope(ys: np.ndarray) -> float:
    """Least-squares slope of log power vs log frequency over the lowest quarter of frequencies (eq. 10: -2)."""
    power = (np.abs(np.fft.rfft(ys - ys.mean(axis=0), axis=0)) ** 2).mean(axis=1)
    freqs = np.fft.rfftfreq(ys.shape[0])
    band = slice(1, len(freqs) // 4)
    return float(np.polyfit(np.log(freqs[band]), np.log(power[band]), 1)[0])


def main() -> None:
    rng = np.random.default_rng(0)
    print("| T | sigma | mode | mean abs y | pinned share | lag-20 autocorr | low-f spectral slope |")
    print("|---|---|---|---|---|---|---|")
    for steps in (200, 999):
        for sigma in (0.02, 0.05, 0.1, 0.2):
            for mode in ("reflect", "clip", "leak"):
                ys = walk(sigma, mode, steps, 2000, rng)
                pinned = float(np.mean(np.abs(ys) >= 0.99))
                a, b = ys[:-20].ravel(), ys[20:].ravel()
                corr = float(np.corrcoef(a, b)[0, 1])
                print(
                    f"| {steps} | {sigma} | {mode} | {np.mean(np.abs(ys)):.3f} | {pinned:.3f} | {corr:.2f} "
                    f"| {spectral_slope(ys):.2f} |"
                )


if __name__ == "__main__":
    main()
