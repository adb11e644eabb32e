"""Env steps per second of AsyncEnvPool against SB3's SubprocVecEnv and DummyVecEnv and gymnasium's AsyncVectorEnv.

Eight envs on CartPole-v1, HalfCheetah-v5 and PongNoFrameskip-v4 with random actions, stepped synchronously; and eight
CartPole envs that sleep a random 0-5 ms per step (uneven step times), where ``recv(min_ready=n_envs // 2)`` acts on
the ready half.

Two protocols:

* ``--paired`` (the committed figures): per task, one fresh process holds every engine open and steps them in short
  bursts, in a new random order each round; ratios are taken between bursts of the same round, so load that drifts on
  a shared machine hits every engine alike;
* default: every measurement in a fresh process, configurations interleaved round after round, medians over rounds
  (on a machine whose load swings 5x within minutes, this one is noise).

Usage: ``python benchmarks/scripts/env_pool_speed.py --paired [--rounds 12] [--seconds 0.5]
[--out benchmarks/results/env_pool]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Any

import gymnasium as gym
import numpy as np

# Imported here, so the forkserver (which imports this script first) shares them with every worker of every engine.
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

from sb3_async import AsyncEnvPool

N_ENVS = 8
TASKS = {"CartPole-v1": "CartPole-v1", "HalfCheetah-v5": "HalfCheetah-v5", "Pong": "PongNoFrameskip-v4"}
MIXED = f"AsyncEnvPool(n_workers=1, local_envs={N_ENVS // 2})"
ENVPOOL = "AsyncEnvPool(engine=envpool)"
ENGINES = ["AsyncEnvPool", "AsyncEnvPool(n_workers=0)", MIXED, "SubprocVecEnv", "DummyVecEnv", "gym AsyncVectorEnv"]
try:  # the EnvPool engine where EnvPool is installed (Python <= 3.11)
    import envpool  # noqa: F401

    ENGINES.insert(3, ENVPOOL)
except ImportError:
    pass
#: The EnvPool engine's env per task, with what makes it step as the gymnasium env does: Pong raw (one frame per step,
#: 210x160 RGB, no no-op starts, no stacking), as PongNoFrameskip-v4, not EnvPool's DQN-style Atari defaults
ENVPOOL_ENVS: dict[str, tuple[str, dict[str, Any]]] = {
    "CartPole-v1": ("CartPole-v1", {}),
    "HalfCheetah-v5": ("HalfCheetah-v5", {}),
    "Pong": (
        "Pong-v5",
        {
            "frame_skip": 1,
            "stack_num": 1,
            "gray_scale": False,
            "img_height": 210,
            "img_width": 160,
            "noop_max": 1,
            "episodic_life": False,
            "reward_clip": False,
            "repeat_action_probability": 0.0,
            "max_episode_steps": 108_000,
        },
    ),
}
#: AsyncEnvPool's keyword arguments per engine name (the default layout: one worker per core)
POOL_KWARGS: dict[str, dict[str, int]] = {
    "AsyncEnvPool": {},
    "AsyncEnvPool(n_workers=0)": {"n_workers": 0},
    MIXED: {"n_workers": 1, "local_envs": N_ENVS // 2},
    "AsyncEnvPool(n_workers=8)": {"n_workers": 8},
}
BASELINES = ["SubprocVecEnv", "DummyVecEnv", "gym AsyncVectorEnv"]
SLEEP_TASK = "CartPole-v1 + sleep 0-5 ms"
SLEEP_ENGINES = [
    "AsyncEnvPool(n_workers=8) step",
    "AsyncEnvPool(n_workers=8) recv(min_ready=4)",
    "AsyncEnvPool(n_workers=8) recv(min_ready=1)",
    "AsyncEnvPool step",
    "AsyncEnvPool recv(min_ready=4)",
    "SubprocVecEnv",
]


class SleepyEnv(gym.Wrapper):
    """Sleeps a random 0-5 ms per step: step times that vary between envs (the uneven-step-time case)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.rng = np.random.default_rng()

    def step(self, action: Any) -> Any:
        time.sleep(self.rng.uniform(0.0, 0.005))
        return self.env.step(action)


def make_env(env_id: str) -> gym.Env:
    if env_id.startswith("Pong"):
        import ale_py

        gym.register_envs(ale_py)  # in the worker: a forkserver's or spawn's worker starts without the registration
    return gym.make(env_id)


def make_factories(task: str) -> list:
    if task == SLEEP_TASK:
        return [lambda: SleepyEnv(gym.make("CartPole-v1"))] * N_ENVS
    env_id = TASKS[task]
    return [lambda: make_env(env_id)] * N_ENVS


def measure(task: str, engine: str, seconds: float) -> float:
    """Env steps per second of ``engine`` on ``task``, after a warm-up (the fresh-process protocol)."""
    stepper = Stepper(task, engine)
    try:
        return stepper.burst(seconds)
    finally:
        stepper.close()


def ideal_ratio(min_ready: int, n_envs: int = N_ENVS, horizon_ms: float = 200_000.0) -> float:
    """Env steps per second of ``recv(min_ready)`` over synchronous stepping with no overhead at all, for step times
    uniform in 0-5 ms: a simulation (each recv waits for the ``min_ready``-th finished env and takes every finished one)."""

    def rate(k: int) -> float:
        rng = np.random.default_rng(0)
        now, steps, finish = 0.0, 0, rng.uniform(0.0, 5.0, n_envs)
        while now < horizon_ms:
            now = max(now, float(np.sort(finish)[k - 1]))
            ready = finish <= now
            steps += int(ready.sum())
            finish[ready] = now + rng.uniform(0.0, 5.0, int(ready.sum()))
        return steps / now

    return rate(min_ready) / rate(n_envs)


class Stepper:
    """One engine kept open for bursts of stepping (the paired mode): ``burst(seconds)`` gives env steps per second."""

    def __init__(self, task: str, engine: str):
        factories = make_factories(task)
        space = factories[0]().action_space
        space.seed(0)
        self.batches = [np.stack([space.sample() for _ in range(N_ENVS)]) for _ in range(64)]
        self.engine, self.k = engine, 0
        self.min_ready = (1 if "min_ready=1" in engine else N_ENVS // 2) if "recv" in engine else 0
        if self.min_ready:
            self.pool = AsyncEnvPool(factories, n_workers=8 if "n_workers=8" in engine else None)
            self.pool.reset(seed=0)
        elif engine == ENVPOOL:
            env_id, env_kwargs = ENVPOOL_ENVS[task]
            self.venv = AsyncEnvPool(env_id, N_ENVS, engine="envpool", env_kwargs=env_kwargs).as_vec_env()
        elif engine.startswith("AsyncEnvPool"):
            self.venv: Any = AsyncEnvPool(factories, **POOL_KWARGS[engine.removesuffix(" step")]).as_vec_env()
        elif engine == "SubprocVecEnv":
            self.venv = SubprocVecEnv(factories)
        elif engine == "DummyVecEnv":
            self.venv = DummyVecEnv(factories)
        else:
            self.venv = gym.vector.AsyncVectorEnv(factories, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
        if not self.min_ready:
            self.venv.reset(seed=0) if isinstance(self.venv, gym.vector.VectorEnv) else self.venv.reset()
        self.burst(0.2)  # warm-up

    def burst(self, seconds: float) -> float:
        steps, start = 0, time.perf_counter()
        if self.min_ready:  # every env starts the burst with a step to take, and the burst ends with none in flight
            self.pool.send({i: self.batches[0][i] for i in range(N_ENVS)})
            while True:
                obs, *_ = self.pool.recv(min_ready=self.min_ready)
                steps += len(obs)
                elapsed = time.perf_counter() - start
                if elapsed > seconds:
                    break
                self.k += 1
                batch = self.batches[self.k % 64]
                self.pool.send({i: batch[i] for i in obs})
            left = N_ENVS - len(obs)
            while left:  # off the clock
                left -= len(self.pool.recv(min_ready=left)[0])
            return steps / elapsed
        while True:
            self.k += 1
            self.venv.step(self.batches[self.k % 64])
            steps += N_ENVS
            elapsed = time.perf_counter() - start
            if elapsed > seconds:
                return steps / elapsed

    def close(self) -> None:
        (self.pool if self.min_ready else self.venv).close()


def paired(task: str, engines: list[str], rounds: int, seconds: float) -> dict[str, list[float]]:
    """Every engine of ``task`` open at once in this process, stepped in short bursts, engine after engine, round
    after round (a new order each round): load that drifts on a shared machine hits all of them alike."""
    steppers = {engine: Stepper(task, engine) for engine in engines}
    rates: dict[str, list[float]] = {engine: [] for engine in engines}
    order = list(engines)
    rng = np.random.default_rng(0)
    for _ in range(rounds):
        rng.shuffle(order)
        for engine in order:
            rates[engine].append(steppers[engine].burst(seconds))
    for stepper in steppers.values():
        stepper.close()
    return rates


def report(rates: dict[str, dict[str, list[float]]], args: argparse.Namespace, load_at_start: float) -> str:
    """Medians of the per-round ratios (each ratio between measurements of the same round)."""

    def ratio(task: str, engine: str, reference: str | list[str]) -> float:
        refs = [reference] if isinstance(reference, str) else reference
        per_round = [value / max(rates[task][ref][k] for ref in refs) for k, value in enumerate(rates[task][engine])]
        return statistics.median(per_round)

    pools = [engine for engine in ENGINES if engine.startswith("AsyncEnvPool") and engine in rates[next(iter(TASKS))]]
    if args.paired:
        protocol = (
            f"Per task, one fresh process holds every engine open and steps them in bursts of {args.seconds} s, engine"
            f" after engine in a new random order each of {args.rounds} rounds; a ratio is taken between bursts of the"
            " same round (seconds apart)"
        )
    else:
        protocol = (
            f"Each measurement ({args.seconds} s) in a fresh process, configurations interleaved over {args.rounds}"
            " rounds; a ratio is taken between measurements of the same round"
        )
    lines = [
        f"# AsyncEnvPool speed ({'paired bursts, ' if args.paired else ''}benchmarks/scripts/env_pool_speed.py)",
        "",
        f"{N_ENVS} envs, random actions. {protocol}, and the tables give medians over rounds. Load average when the run"
        f" started: {load_at_start:.2f} (other jobs on the machine slow every engine: read the ratios, taken within a"
        f" round; absolute steps/s are medians, for scale). {platform.machine()}, {os.cpu_count()} cores, Python"
        f" {platform.python_version()}.",
        "",
        "## Synchronous stepping (`VecEnv.step`): env steps/s and ratio to the fastest of the three baselines",
        "",
        "| task | " + " | ".join(ENGINES) + " | " + " | ".join(f"{engine} / fastest baseline" for engine in pools) + " |",
        "|---" * (len(ENGINES) + len(pools) + 1) + "|",
    ]
    for task in TASKS:
        cells = " | ".join(f"{statistics.median(rates[task][engine]):,.0f}" for engine in ENGINES)
        ratios = " | ".join(f"{ratio(task, engine, BASELINES):.2f}" for engine in pools)
        lines.append(f"| {task} | {cells} | {ratios} |")
    lines += [
        "",
        f"## Uneven step times ({SLEEP_TASK})",
        "",
        "| engine | env steps/s | / the same pool's synchronous step | ceiling with no overhead (simulated) |",
        "|---|---|---|---|",
    ]
    for engine in SLEEP_ENGINES:
        sync = "AsyncEnvPool(n_workers=8) step" if "n_workers=8" in engine else "AsyncEnvPool step"
        shown = f"{ratio(SLEEP_TASK, engine, sync):.2f}" if engine.startswith("AsyncEnvPool") else ""
        ceiling = ""
        if "n_workers=8) recv" in engine:
            ceiling = f"{ideal_ratio(1 if 'min_ready=1' in engine else N_ENVS // 2):.2f}"
        lines.append(f"| {engine} | {statistics.median(rates[SLEEP_TASK][engine]):,.0f} | {shown} | {ceiling} |")
    paired_flag = "--paired " if args.paired else ""
    lines += [
        "",
        f"Command: `python benchmarks/scripts/env_pool_speed.py {paired_flag}--rounds {args.rounds} --seconds {args.seconds}`",
        "",
    ]
    return "\n".join(lines)


def run_rounds(rounds: int, seconds: float) -> dict[str, dict[str, list[float]]]:
    configs = [(task, engine) for task in TASKS for engine in ENGINES] + [(SLEEP_TASK, engine) for engine in SLEEP_ENGINES]
    results: dict[str, dict[str, list[float]]] = {}
    for round_ in range(rounds):
        order = configs if round_ % 2 == 0 else configs[::-1]  # interleaved, and alternating which goes first
        for task, engine in order:
            command = [sys.executable, __file__, "--one", task, engine, "--seconds", str(seconds)]
            out = subprocess.run(command, capture_output=True, text=True, timeout=600)
            if out.returncode != 0:
                raise RuntimeError(f"{task} / {engine} failed:\n{out.stderr}")
            value = float(out.stdout.strip().splitlines()[-1])
            results.setdefault(task, {}).setdefault(engine, []).append(value)
            print(f"round {round_ + 1}/{rounds}  {task:28s} {engine:45s} {value:10.0f} steps/s", flush=True)
    return results


def run_paired(rounds: int, seconds: float) -> dict[str, dict[str, list[float]]]:
    rates = {}
    for task in [*TASKS, SLEEP_TASK]:
        command = [sys.executable, __file__, "--task", task, "--rounds", str(rounds), "--seconds", str(seconds)]
        out = subprocess.run(command, capture_output=True, text=True, timeout=1800)
        if out.returncode != 0:
            raise RuntimeError(f"{task} failed:\n{out.stderr}")
        rates[task] = json.loads(out.stdout.strip().splitlines()[-1])
        print(task, {engine: round(statistics.median(values)) for engine, values in rates[task].items()}, flush=True)
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--paired", action="store_true", help="paired bursts: all engines of a task in one process")
    parser.add_argument("--rounds", type=int, help="rounds (default: 12 paired, 3 fresh-process)")
    parser.add_argument("--seconds", type=float, help="seconds per measurement (default: 0.5 paired, 3 fresh-process)")
    parser.add_argument("--out", default="benchmarks/results/env_pool")
    parser.add_argument("--one", nargs=2, metavar=("TASK", "ENGINE"), help="measure one configuration (internal)")
    parser.add_argument("--task", help="the paired bursts of one task (internal)")
    args = parser.parse_args()
    args.rounds = args.rounds or (12 if args.paired or args.task else 3)
    args.seconds = args.seconds or (0.5 if args.paired or args.task else 3.0)
    if args.one:
        print(measure(args.one[0], args.one[1], args.seconds))
        return
    if args.task:
        print(json.dumps(paired(args.task, SLEEP_ENGINES if args.task == SLEEP_TASK else ENGINES, args.rounds, args.seconds)))
        return
    load_at_start = os.getloadavg()[0]
    rates = run_paired(args.rounds, args.seconds) if args.paired else run_rounds(args.rounds, args.seconds)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.json"), "w") as file:
        json.dump(
            {"n_envs": N_ENVS, "rounds": args.rounds, "seconds": args.seconds, "load_average_at_start": load_at_start,
             "steps_per_s": rates},
            file,
            indent=1,
        )  # fmt: skip
    text = report(rates, args, load_at_start)
    with open(os.path.join(args.out, "README.md"), "w") as file:
        file.write(text)
    print(text)


if __name__ == "__main__":
    main()
