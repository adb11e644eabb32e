"""Training throughput on Pong: A3C's worker layouts against stock SB3 A2C, each run in a fresh process.

Env steps per second (agent steps; 4 frames each with the AtariWrapper) while training with ``CnnPolicy`` on
``VecFrameStack(make_atari_env("PongNoFrameskip-v4"), 4)`` (A3C: ``sb3_async``'s ``make_atari_env``, the same
observations with a faster frame skip, or SB3's with ``--sb3-atari-wrapper``), timed from the first callback (workers
running, so start-up is left out) for ``--seconds`` seconds. A2C uses the RL Zoo's atari settings (16 envs, RMSpropTFLike).
A3C runs the paper's layout (16 workers, one env each) and layouts with one worker per core and several envs per
worker (the ``n_envs_per_worker`` fast path); a layout ending in ``s`` (``2x8s``) gives each env its own update
(``separate_updates``: the paper's 16 actor-learners on 2 processes). For A3C it also reports the mean policy lag of
the updates in the timed window (``async/policy_lag_mean``: shared updates between a gradient's θ' = θ and its
application), which tells how stale each layout's gradients are. Learning is not measured here: see the benchmark's
``atari`` suite.

Usage: python benchmarks/scripts/pong_throughput.py [--seconds 45] [--layouts 16x1,2x1,2x4,2x8,2x8s]
       python benchmarks/scripts/pong_throughput.py --one 2x8 --seconds 60   # one layout alone, rate as JSON
       python benchmarks/scripts/pong_throughput.py --one 2x8 --sb3-atari-wrapper   # A3C with SB3's AtariWrapper
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time

from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import configure

ENV_ID = "PongNoFrameskip-v4"


class Throughput(BaseCallback):
    """Stops training ``seconds`` after the first callback; records the env steps done meanwhile."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds
        self.start: float | None = None
        self.start_steps = 0

    def _on_step(self) -> bool:
        if self.start is None:
            self.start, self.start_steps = time.perf_counter(), self.model.num_timesteps
        return time.perf_counter() - self.start < self.seconds

    def steps_per_second(self) -> float:
        assert self.start is not None
        return (self.model.num_timesteps - self.start_steps) / (time.perf_counter() - self.start)


def one_run(layout: str, seconds: float, sb3_atari_wrapper: bool = False) -> dict:
    import ale_py
    import gymnasium as gym
    from stable_baselines3.common import env_util
    from stable_baselines3.common.vec_env import VecFrameStack

    from sb3_async.common import atari_wrappers

    gym.register_envs(ale_py)
    if layout == "a2c":
        from stable_baselines3 import A2C
        from stable_baselines3.common.sb2_compat.rmsprop_tf_like import RMSpropTFLike

        env = VecFrameStack(env_util.make_atari_env(ENV_ID, n_envs=16, seed=0), 4)
        policy_kwargs = dict(optimizer_class=RMSpropTFLike, optimizer_kwargs=dict(eps=1e-5))
        model = A2C("CnnPolicy", env, ent_coef=0.01, vf_coef=0.25, policy_kwargs=policy_kwargs, seed=0)
    else:
        from sb3_async import A3C

        separate = layout.endswith("s")  # one update per env: n_workers x n_envs_per_worker actor-learners
        n_workers, per_worker = (int(part) for part in layout.rstrip("s").split("x"))
        make_atari_env = env_util.make_atari_env if sb3_atari_wrapper else atari_wrappers.make_atari_env
        env = VecFrameStack(make_atari_env(ENV_ID, n_envs=1, seed=0), 4)
        kwargs = dict(separate_updates=True) if separate else {}
        model = A3C("CnnPolicy", env, n_workers=n_workers, n_envs_per_worker=per_worker, max_grad_norm=40.0, seed=0, **kwargs)
    callback = Throughput(seconds)
    with tempfile.TemporaryDirectory() as logs:
        model.set_logger(configure(logs, ["csv"]))
        model.learn(100_000_000, callback=callback, log_interval=10)
        model.logger.close()
        with open(os.path.join(logs, "progress.csv")) as file:
            rows = list(csv.DictReader(file))
    wrapper = "sb3" if sb3_atari_wrapper or layout == "a2c" else "sb3_async"
    result = dict(layout=layout, atari_wrapper=wrapper, steps_per_second=callback.steps_per_second())
    lags = [float(row["async/policy_lag_mean"]) for row in rows if row.get("async/policy_lag_mean")]
    if lags:  # every logged window's mean, the first (start-up) left out where there are others
        result["policy_lag_mean"] = sum(lags[1:] or lags) / len(lags[1:] or lags)
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=45.0)
    parser.add_argument(
        "--layouts",
        default="16x1,2x1,2x4,2x8,2x8s",
        help="A3C layouts, n_workers x n_envs_per_worker, and s for separate_updates",
    )
    parser.add_argument("--one", metavar="LAYOUT", help="only this layout (or a2c), in this process; prints its rate as JSON")
    parser.add_argument("--sb3-atari-wrapper", action="store_true", help="A3C with SB3's AtariWrapper, not sb3_async's")
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_run(args.one, args.seconds, args.sb3_atari_wrapper)))
        return
    rates = {}
    for layout in ["a2c", *args.layouts.split(",")]:
        command = [sys.executable, __file__, "--one", layout, "--seconds", str(args.seconds)]
        command += ["--sb3-atari-wrapper"] if args.sb3_atari_wrapper else []
        out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
        result = json.loads(out.strip().splitlines()[-1])
        rates[layout] = result["steps_per_second"]
        name = "SB3 A2C, 16 envs" if layout == "a2c" else f"A3C, {layout.replace('x', ' workers x ').rstrip('s')} envs"
        name += ", one update per env" if layout.endswith("s") else ""
        lag = f", policy lag {result['policy_lag_mean']:.1f} updates" if "policy_lag_mean" in result else ""
        print(f"{name}: {rates[layout]:,.0f} env steps/s ({rates[layout] / rates['a2c']:.2f}x A2C){lag}", flush=True)


if __name__ == "__main__":
    main()
