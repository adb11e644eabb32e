"""How many cores' worth of work this machine gives two busy processes: the total throughput of 2 CPU-bound processes
over that of 1, for a pure Python loop and for HalfCheetah-v5 steps (3 s each).

Usage: ``python benchmarks/scripts/cpu_scaling.py``
"""

from __future__ import annotations

import multiprocessing
import time
from typing import Any

SECONDS = 3.0


def spin(seconds: float, queue: Any) -> None:
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(1000):
            n += 1
    queue.put(n)


def cheetah(seconds: float, queue: Any) -> None:
    import gymnasium as gym
    import numpy as np

    env = gym.make("HalfCheetah-v5")
    env.reset(seed=0)
    action = np.zeros(6, np.float32)
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        env.step(action)
        n += 1
    queue.put(n)


def main() -> None:
    ctx = multiprocessing.get_context("fork")
    for work in (spin, cheetah):
        totals = {}
        for k in (1, 2):
            queue = ctx.Queue()
            procs = [ctx.Process(target=work, args=(SECONDS, queue)) for _ in range(k)]
            for proc in procs:
                proc.start()
            totals[k] = sum(queue.get() for _ in procs)
            for proc in procs:
                proc.join()
        print(f"{work.__name__}: 2 processes / 1 process total throughput: {totals[2] / totals[1]:.2f}")


if __name__ == "__main__":
    main()
