"""Quick paired check: 8 CartPole-v1 envs stepped by ``AsyncEnvPool(n_workers=0).as_vec_env()`` against SB3's
``DummyVecEnv``, random actions, alternating bursts of 0.3 s, the median of per-round ratios (the figure in
docs/benchmarks.md, "The in-process VecEnv's direct path"). Not the committed protocol: see scripts/env_pool_speed.py.

Usage: python scripts/in_process_vec_env_check.py [--rounds 10]
"""

import argparse
import time

import gymnasium as gym
import numpy as np
from stable_baselines3.common.vec_env import DummyVecEnv

from sb3_async import AsyncEnvPool


def make() -> gym.Env:
    return gym.make("CartPole-v1")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    venvs = {
        "DummyVecEnv": DummyVecEnv([make] * 8),
        "AsyncEnvPool(n_workers=0)": AsyncEnvPool([make] * 8, n_workers=0).as_vec_env(),
    }
    rng = np.random.default_rng(0)
    actions = [rng.integers(0, 2, 8) for _ in range(64)]
    for venv in venvs.values():
        venv.reset()
    rates: dict[str, list[float]] = {name: [] for name in venvs}
    for _ in range(args.rounds):
        for name, venv in venvs.items():
            start, steps = time.perf_counter(), 0
            while time.perf_counter() - start < 0.3:
                venv.step(actions[steps % 64])
                steps += 1
            rates[name].append(steps * 8 / (time.perf_counter() - start))
    for name, values in rates.items():
        print(f"{name}: {np.median(values):,.0f} env steps/s")
    ratio = np.median(np.array(rates["AsyncEnvPool(n_workers=0)"]) / np.array(rates["DummyVecEnv"]))
    print(f"ratio (pool / DummyVecEnv): {ratio:.2f}")
    for venv in venvs.values():
        venv.close()
