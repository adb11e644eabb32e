"""Stock PPO's env steps per second, training included, on ``DummyVecEnv`` and on ``PoolVecEnv`` (its default layout
from factories, 1 worker + the main process on 2 cores, and 2 workers): 8 envs, ``n_steps`` 256, 4 epochs, one torch
thread, 2 interleaved rounds, medians.

Usage: ``python benchmarks/scripts/ppo_pool_end_to_end.py``
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env

from sb3_async.env_pool import PoolVecEnv

KINDS = ("DummyVecEnv", "PoolVecEnv (1 worker + main)", "PoolVecEnv (2 workers)")
TASKS = (("CartPole-v1", 16_384), ("HalfCheetah-v5", 8_192))


def make(kind: str, env_id: str) -> Any:
    if kind == "DummyVecEnv":
        return make_vec_env(env_id, n_envs=8, seed=0)
    kwargs = {} if kind == "PoolVecEnv (1 worker + main)" else {"n_workers": 2}
    return make_vec_env(env_id, n_envs=8, seed=0, vec_env_cls=PoolVecEnv, vec_env_kwargs=kwargs)


def main() -> None:
    torch.set_num_threads(1)
    for env_id, steps in TASKS:
        rates: dict[str, list[float]] = {}
        for _ in range(2):
            for kind in KINDS:
                venv = make(kind, env_id)
                model = PPO("MlpPolicy", venv, n_steps=256, batch_size=256, n_epochs=4, seed=0, device="cpu")
                start = time.perf_counter()
                model.learn(steps)
                rates.setdefault(kind, []).append(steps / (time.perf_counter() - start))
                venv.close()
        base = statistics.median(rates["DummyVecEnv"])
        for kind, values in rates.items():
            rate = statistics.median(values)
            print(f"PPO {env_id} {kind}: {rate:.0f} env steps/s ({rate / base:.2f}x DummyVecEnv)")


if __name__ == "__main__":
    main()
