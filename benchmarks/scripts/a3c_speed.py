"""A3C against A2C on CartPole-v1 and A3C's worker scaling, measured side by side on this machine.

1. Time to a 475 mean training return (last 100 episodes) on CartPole-v1: A3C with 2 workers (zoo_configs/a3c.yml
   settings) against stock SB3 ``A2C("MlpPolicy", make_vec_env("CartPole-v1", 8))``, each run in a fresh process,
   runs interleaved, clock from the start of ``learn()``.
2. Worker scaling: A3C env steps per second with 1 and 2 workers (forkserver already started, 8 envs per worker).

Usage: python benchmarks/scripts/a3c_speed.py [--seeds 3] [--skip-race] [--skip-scaling]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback

THRESHOLD = 475.0
MAX_STEPS = 600_000


class TimeToReturn(BaseCallback):
    """Stops training when the mean training return of the last 100 episodes reaches the threshold."""

    def __init__(self) -> None:
        super().__init__()
        self.hit: tuple[float, int] | None = None
        self.start = 0.0

    def _on_training_start(self) -> None:
        self.start = time.perf_counter()

    def _on_step(self) -> bool:
        buffer = self.model.ep_info_buffer
        if len(buffer) == buffer.maxlen and np.mean([ep["r"] for ep in buffer]) >= THRESHOLD:
            self.hit = (time.perf_counter() - self.start, self.model.num_timesteps)
            return False
        return True


def one_run(algo: str, seed: int) -> dict:
    if algo == "a2c":
        from stable_baselines3 import A2C
        from stable_baselines3.common.env_util import make_vec_env

        model = A2C("MlpPolicy", make_vec_env("CartPole-v1", 8, seed=seed), seed=seed)
    else:
        from sb3_async import A3C

        model = A3C("MlpPolicy", "CartPole-v1", n_workers=2, n_envs_per_worker=8, learning_rate=1e-3, ent_coef=0.0, seed=seed)
    callback = TimeToReturn()
    start = time.perf_counter()
    model.learn(MAX_STEPS, callback=callback)
    elapsed = time.perf_counter() - start
    seconds, steps = callback.hit if callback.hit else (None, None)
    return dict(algo=algo, seed=seed, seconds=seconds, steps=steps, learn_seconds=elapsed, total_steps=model.num_timesteps)


def scaling(steps: int = 200_000) -> dict[int, float]:
    from sb3_async import A3C

    result = {}
    for n_workers in (1, 2):
        model = A3C("MlpPolicy", "CartPole-v1", n_workers=n_workers, n_envs_per_worker=8, seed=0)
        model.learn(2_000)  # start the forkserver and warm up
        start = time.perf_counter()
        model.learn(steps)
        result[n_workers] = model.num_timesteps / (time.perf_counter() - start)
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--skip-race", action="store_true")
    parser.add_argument("--skip-scaling", action="store_true")
    parser.add_argument("--one", nargs=2, metavar=("ALGO", "SEED"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_run(args.one[0], int(args.one[1]))))
        return
    if not args.skip_race:
        runs = []
        for seed in range(args.seeds):
            for algo in ("a3c", "a2c"):
                out = subprocess.run(
                    [sys.executable, __file__, "--one", algo, str(seed)], capture_output=True, text=True, check=True
                ).stdout
                runs.append(json.loads(out.strip().splitlines()[-1]))
                print(runs[-1], flush=True)
        medians = {}
        for algo in ("a3c", "a2c"):
            times = [r["seconds"] if r["seconds"] is not None else float("inf") for r in runs if r["algo"] == algo]
            steps = [r["steps"] if r["steps"] is not None else float("inf") for r in runs if r["algo"] == algo]
            medians[algo] = (statistics.median(times), statistics.median(steps))
            print(f"{algo}: median seconds to {THRESHOLD:.0f}: {medians[algo][0]:.1f}, median steps {medians[algo][1]:.0f}")
        print(f"ratio A3C / A2C wall-clock: {medians['a3c'][0] / medians['a2c'][0]:.2f} (goal <= 0.5)")
    if not args.skip_scaling:
        fps = scaling()
        print(f"steps/s: 1 worker {fps[1]:.0f}, 2 workers {fps[2]:.0f}, speedup {fps[2] / fps[1]:.2f}x (goal >= 1.8)")


if __name__ == "__main__":
    main()
