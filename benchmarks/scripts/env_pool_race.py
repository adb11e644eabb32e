"""AsyncEnvPool against the vectorizers users pick for speed: env steps per second, synchronous stepping.

Engines: ``AsyncEnvPool`` with 2 env host processes and with ``n_hosts=0`` (every env in this process), SB3's
``DummyVecEnv`` and ``SubprocVecEnv``, gymnasium's ``AsyncVectorEnv``, PufferLib's ``pufferlib.vector.Multiprocessing``
(2 workers) and TorchRL's ``ParallelEnv`` (2 workers, each a ``SerialEnv`` of its share of the envs). Tasks:
CartPole-v1, HalfCheetah-v5 and PongNoFrameskip-v4, 8 and 64 envs, random actions drawn in advance.

Protocol: per task and env count, one fresh process steps every engine in bursts of ``--seconds``, engine after
engine in a new random order each of ``--rounds`` rounds; a ratio is taken between bursts of the same round, the table
gives medians over rounds. Engines whose idle workers block stay open for the whole race; PufferLib's workers spin on
their flags even while another engine steps, so it is opened (with a 0.3 s warm-up) for each of its bursts and closed
after it. Every process of the race runs torch
with 1 thread (TorchRL's workers and ours alike). ``--busy N`` starts N CPU-bound processes beside the race (the
"machine shared with a learner" check).

PufferLib and TorchRL are comparators, not dependencies: ``pip install pufferlib-core --no-deps`` and
``pip install torchrl tensordict`` (an engine whose library is missing is left out, and the report says so).

Usage: ``python benchmarks/scripts/env_pool_race.py [--rounds 6] [--seconds 0.5] [--busy 0] [--out DIR]``: without
``--out`` it prints the table only. With ``--out DIR`` it writes ``DIR/results.json`` (the raw rates per round, the
command, the date, the machine, and the ``"table"`` that :func:`table_of` computes from the rates) and
``DIR/README.md``; ``python -m sb3_async.benchmark --report DIR --markdown --table script`` prints that table, and
``--render DIR`` recomputes it from the raw rates. The published race::

    python benchmarks/scripts/env_pool_race.py --rounds 6 --seconds 0.5 --out benchmarks/results/env_pool_race

The cost of observation parts that are not arrays (the engines of ``SPACES``, opt-in: the pool's gymnasium view on
the task's observation in a Dict, without and with a Text part, and gymnasium's ``AsyncVectorEnv`` on the latter)::

    python benchmarks/scripts/env_pool_race.py --rounds 6 --seconds 0.5 --tasks CartPole-v1 \
        --engines 'AsyncEnvPool (2 workers), obs in a Dict' 'AsyncEnvPool (2 workers), obs + Text in a Dict' \
        'gym AsyncVectorEnv, obs + Text in a Dict'
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from importlib import metadata
from typing import Any

import gymnasium as gym
import numpy as np
import torch

# Imported here, so the forkserver (which imports this script first) shares them with every worker of every engine.
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

from sb3_async import AsyncEnvPool

TASKS = {"CartPole-v1": "CartPole-v1", "HalfCheetah-v5": "HalfCheetah-v5", "Pong": "PongNoFrameskip-v4"}
SIZES = (8, 64)
POOL, POOL0 = "AsyncEnvPool (2 workers)", "AsyncEnvPool (n_workers=0)"
POOL1 = "AsyncEnvPool (1 worker + main)"  # n_hosts=1, local_envs=n_envs // 2: two processes step, one per core
PUFFER, TORCHRL = "PufferLib Multiprocessing (2 workers)", "TorchRL ParallelEnv (2 workers)"
MULTI_PROCESS = ["SubprocVecEnv", "gym AsyncVectorEnv", PUFFER, TORCHRL]
ENGINES = [POOL, POOL1, POOL0, "DummyVecEnv", *MULTI_PROCESS]
POOLS = [POOL, POOL1]
SPINNING = {PUFFER}
PER_ENV_PROCESS = ["SubprocVecEnv", "gym AsyncVectorEnv"]
# The cost of an observation part that is not an array (opt-in, through the gymnasium views): the task's observation
# in a Dict, and the same with a Text part added, which the pool pickles with each reply
POOL_DICT, POOL_TEXT = "AsyncEnvPool (2 workers), obs in a Dict", "AsyncEnvPool (2 workers), obs + Text in a Dict"
ASYNC_TEXT = "gym AsyncVectorEnv, obs + Text in a Dict"
SPACES = [POOL_DICT, POOL_TEXT, ASYNC_TEXT]


def available(engine: str) -> bool:
    module = {PUFFER: "pufferlib.vector", TORCHRL: "torchrl.envs"}.get(engine)
    if module is None:
        return True
    try:
        __import__(module)
        return True
    except ImportError:
        return False


def version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def make_env(env_id: str) -> gym.Env:
    if env_id.startswith("Pong"):
        import ale_py

        gym.register_envs(ale_py)  # in the worker: a forkserver's or spawn's worker starts without the registration
    return gym.make(env_id)


class WithNote(gym.ObservationWrapper):
    """The env's observation in a Dict (``{"obs": ...}``), with a ``Text`` part saying where the first coordinate
    points when ``text``."""

    def __init__(self, env: gym.Env, text: bool):
        super().__init__(env)
        self.text = text
        parts = {"obs": env.observation_space, **({"note": gym.spaces.Text(16)} if text else {})}
        self.observation_space = gym.spaces.Dict(parts)

    def observation(self, observation: Any) -> dict[str, Any]:
        if not self.text:
            return {"obs": observation}
        return {"obs": observation, "note": "left" if observation.flat[0] < 0 else "right"}


def make_puffer_env(env_id: str, buf: Any = None, seed: int = 0) -> Any:
    import pufferlib.emulation

    return pufferlib.emulation.GymnasiumPufferEnv(env=make_env(env_id), buf=buf, seed=seed)


def make_torchrl_env(env_id: str, count: int) -> Any:
    from torchrl.envs import GymWrapper, SerialEnv

    torch.set_num_threads(1)
    return SerialEnv(count, lambda: GymWrapper(make_env(env_id)))


class Stepper:
    """One engine kept open for bursts of stepping: ``burst(seconds)`` gives env steps per second."""

    def __init__(self, env_id: str, n_envs: int, engine: str):
        self.engine, self.n_envs, self.k = engine, n_envs, 0
        space = make_env(env_id).action_space
        space.seed(0)
        self.batches = [np.stack([space.sample() for _ in range(n_envs)]) for _ in range(16)]
        factories = [lambda: make_env(env_id)] * n_envs
        if engine in SPACES:
            factories = [lambda text=engine != POOL_DICT: WithNote(make_env(env_id), text)] * n_envs
        if engine in (POOL_DICT, POOL_TEXT):
            self.env = AsyncEnvPool(factories, n_hosts=2).as_gym_vector_env("SameStep")
        elif engine == ASYNC_TEXT:
            same_step = gym.vector.AutoresetMode.SAME_STEP  # shared memory cannot hold Text
            self.env = gym.vector.AsyncVectorEnv(factories, shared_memory=False, autoreset_mode=same_step)
        elif engine == POOL:
            self.env: Any = AsyncEnvPool(factories, n_hosts=2).as_vec_env()
        elif engine == POOL1:
            self.env = AsyncEnvPool(factories, n_hosts=1, local_envs=n_envs // 2).as_vec_env()
        elif engine == POOL0:
            self.env = AsyncEnvPool(factories, n_hosts=0).as_vec_env()
        elif engine == "DummyVecEnv":
            self.env = DummyVecEnv(factories)
        elif engine == "SubprocVecEnv":
            self.env = SubprocVecEnv(factories)
        elif engine == "gym AsyncVectorEnv":
            self.env = gym.vector.AsyncVectorEnv(factories, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
        elif engine == PUFFER:
            import pufferlib.vector

            self.env = pufferlib.vector.make(
                make_puffer_env,
                env_args=[env_id],
                backend=pufferlib.vector.Multiprocessing,
                num_envs=n_envs,
                num_workers=2,
                batch_size=n_envs,
            )
        elif engine == TORCHRL:
            from torchrl.envs import ParallelEnv

            self.env = ParallelEnv(2, make_torchrl_env, create_env_kwargs={"env_id": env_id, "count": n_envs // 2})
        else:
            raise ValueError(engine)
        if engine == TORCHRL:
            self.td_root = self.env.reset()  # TorchRL draws its random actions itself (rand_action), in this process
        elif engine == PUFFER or isinstance(self.env, gym.vector.VectorEnv):
            self.env.reset(seed=0)
        else:
            self.env.reset()
        self.burst(0.3)  # warm-up

    def step(self, batch: int) -> None:
        actions = self.batches[batch]
        if self.engine == TORCHRL:
            td = self.env.rand_action(self.td_root)
            _, self.td_root = self.env.step_and_maybe_reset(td)
        else:
            self.env.step(actions)

    def burst(self, seconds: float) -> float:
        steps, start = 0, time.perf_counter()
        while True:
            self.k += 1
            self.step(self.k % len(self.batches))
            steps += self.n_envs
            elapsed = time.perf_counter() - start
            if elapsed > seconds:
                return steps / elapsed

    def close(self) -> None:
        self.env.close()


def race(task: str, n_envs: int, engines: list[str], rounds: int, seconds: float) -> dict[str, list[float]]:
    """Every engine stepped in bursts, in a new order each round. The engines whose idle workers block (ours, SB3's,
    gymnasium's, TorchRL's) stay open for the whole race; PufferLib's workers spin on their flags even while another
    engine steps, so it is opened for its burst and closed after it."""
    torch.set_num_threads(1)
    steppers = {engine: Stepper(TASKS[task], n_envs, engine) for engine in engines if engine not in SPINNING}
    rates: dict[str, list[float]] = {engine: [] for engine in engines}
    order = list(engines)
    rng = np.random.default_rng(0)
    try:
        for _ in range(rounds):
            rng.shuffle(order)
            for engine in order:
                if engine in SPINNING:
                    stepper = Stepper(TASKS[task], n_envs, engine)
                    try:
                        rates[engine].append(stepper.burst(seconds))
                    finally:
                        stepper.close()
                else:
                    rates[engine].append(steppers[engine].burst(seconds))
    finally:
        for stepper in steppers.values():
            stepper.close()
    return rates


def busy_loop() -> None:
    while True:
        pass


def ratio(races: list[dict[str, list[float]]], engine: str, references: list[str]) -> float:
    """``engine``'s rate over the fastest of ``references``: in one race, the median over rounds of the ratio to the
    fastest reference of the same round; references raced apart (see :func:`sub_races`), the smallest of the medians
    of the ratios to each of them (each ratio taken within its own race); NaN when no reference raced."""
    medians = []
    for rates in races:
        refs = [ref for ref in references if ref in rates and ref != engine]
        if refs and engine in rates:
            medians.append(
                statistics.median(value / max(rates[ref][k] for ref in refs) for k, value in enumerate(rates[engine]))
            )
    return min(medians, default=float("nan"))


def sub_races(engines: list[str], n_envs: int, split: int) -> list[list[str]]:
    """The races of one task and env count: every engine in one race, except that from ``split`` envs on, the engines
    that start one process per env (64 MuJoCo or Atari processes each, twice, do not fit in 24 GB) race apart, each
    against the pool and DummyVecEnv."""
    apart = [engine for engine in PER_ENV_PROCESS if engine in engines] if n_envs >= split else []
    races = [[engine for engine in engines if engine not in apart]]
    return races + [[engine for engine in (*POOLS, "DummyVecEnv") if engine in engines] + [engine] for engine in apart]


def medians(races: list[dict[str, list[float]]]) -> dict[str, float]:
    """Each engine's median rate, from the first race it ran in."""
    found: dict[str, float] = {}
    for rates in races:
        for engine, values in rates.items():
            found.setdefault(engine, statistics.median(values))
    return found


SHORT = {POOL: "pool, 2 workers", POOL1: "pool, 1 worker + main", POOL0: "pool, n_workers=0", PUFFER: "PufferLib (2 workers)",
         TORCHRL: "TorchRL ParallelEnv (2 workers)", POOL_DICT: "pool, Dict", POOL_TEXT: "pool, Dict + Text",
         ASYNC_TEXT: "AsyncVectorEnv, Dict + Text"}  # fmt: skip


def command_of(args: argparse.Namespace | dict[str, Any]) -> str:
    """The command that reproduces a race of these arguments."""
    a = vars(args) if isinstance(args, argparse.Namespace) else args
    words = ["python benchmarks/scripts/env_pool_race.py", f"--rounds {a['rounds']}", f"--seconds {a['seconds']}"]
    words += [f"--busy {a['busy']}"] if a["busy"] else []
    words += [f"--tasks {' '.join(a['tasks'])}"] if list(a["tasks"]) != list(TASKS) else []
    words += [f"--sizes {' '.join(map(str, a['sizes']))}"] if list(a["sizes"]) != list(SIZES) else []
    words += [f"--engines {' '.join(repr(e) for e in a['engines'])}"] if a.get("engines") else []
    words += [f"--split {a['split']}"] if a["split"] != 32 else []
    return " ".join(words + ([f"--out {a['out']}"] if a.get("out") else []))


def table_of(record: dict[str, Any]) -> dict[str, Any]:
    """The published table of a race, from its raw rates only (``record``: what ``results.json`` holds): each
    engine's median env steps/s, and the pools' ratios to DummyVecEnv and to the fastest multi-process vectorizer."""
    args, engines, results = record["args"], record["engines"], record["steps_per_s"]
    others = [engine for engine in MULTI_PROCESS if engine in engines]
    pools = [engine for engine in (POOL1, POOL) if engine in engines]
    columns = ["task", "envs", *(SHORT.get(engine, engine) for engine in engines)]
    for pool in pools:
        columns += [f"{SHORT[pool]} / DummyVecEnv", f"{SHORT[pool]} / fastest multi-process"]
    text_ratios = [ref for ref in (POOL_DICT, ASYNC_TEXT) if POOL_TEXT in engines and ref in engines]
    columns += [f"{SHORT[POOL_TEXT]} / {SHORT[ref]}" for ref in text_ratios]
    rows = []
    for key, races in results.items():
        task, n_envs = key.rsplit(" ", 1)
        rates = medians(races)
        row = [task, n_envs, *(f"{rates[engine]:,.0f}" for engine in engines)]
        for pool in pools:
            row += [f"{ratio(races[:1], pool, ['DummyVecEnv']):.2f}", f"{ratio(races, pool, others):.2f}"]
        row += [f"{ratio(races[:1], POOL_TEXT, [ref]):.2f}" for ref in text_ratios]
        rows.append(row)
    for key, why in record.get("failed", {}).items():
        rows.append([*key.rsplit(" ", 1), *(["—"] * (len(columns) - 3)), why])
    machine = record["machine"]
    missing = [engine for engine in ENGINES if engine not in engines and not set(engines) <= set(SPACES)]
    spaces_note = (
        f'"{SHORT[POOL_DICT]}" and "{SHORT[POOL_TEXT]}" step the pool\'s gymnasium view (same-step autoreset) on the '
        "task's observation in a Dict, without and with a Text part (a string the env writes at each step, which the "
        'pool pickles with each reply); "AsyncVectorEnv, Dict + Text" is gymnasium\'s, one process per env, without '
        "shared memory (which cannot hold Text). "
        if any(engine in SPACES for engine in engines)
        else ""
    )
    notes = (
        f"Env steps per second (medians over {args['rounds']} rounds), random actions, synchronous stepping. "
        + (
            ""
            if set(engines) <= set(SPACES)
            else '"pool" is `AsyncEnvPool(...).as_vec_env()`, "1 worker + main" is `n_workers=1, local_envs=n_envs // 2`. '
        )
        + f"Every engine steps in bursts of {args['seconds']} s, in a new random order each round; a ratio is taken "
        "between bursts of one round, then the median over rounds. "
        + (
            f"From {args['split']} envs on, SubprocVecEnv and gymnasium's AsyncVectorEnv (one process per env) race "
            "apart, each against the pools and DummyVecEnv, and the ratio to them is taken in that race. "
            if any(engine in PER_ENV_PROCESS for engine in engines)
            else ""
        )
        + spaces_note
        + (f"{args['busy']} CPU-bound processes ran beside the race. " if args["busy"] else "")
        + f"{machine['cpus']} cores, torch 1 thread in every process, Python {machine['python']}; "
        + ", ".join(f"{name} {value}" for name, value in machine["versions"].items())
        + "."
        + (f" Left out (library not installed): {', '.join(missing)}." if missing else "")
    )
    title = (
        "Env steps per second: observations that are not arrays"
        if spaces_note
        else "Env steps per second: AsyncEnvPool against the vectorizers"
    )
    return {"title": title, "columns": columns, "rows": rows,
            "notes": notes}  # fmt: skip


def write_folder(out: str, record: dict[str, Any]) -> None:
    """``results.json`` (the raw rates and their table) and ``README.md`` (the table and its command)."""
    record = {**record, "table": table_of(record)}
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "results.json"), "w") as file:
        json.dump(record, file, indent=1)
    with open(os.path.join(out, "README.md"), "w") as file:
        file.write(f"# AsyncEnvPool against the vectorizers\n\n```\n{record['command']}\n```\n\n")
        file.write(f"`python -m sb3_async.benchmark --report {out} --markdown --table script` prints the table.\n")


def render(folder: str) -> None:
    """Recompute the folder's table from the raw rates of its ``results.json`` (after a change of :func:`table_of`)."""
    with open(os.path.join(folder, "results.json")) as file:
        record = json.load(file)
    write_folder(folder, record)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=0.5)
    parser.add_argument("--busy", type=int, default=0, help="CPU-bound processes beside the race")
    parser.add_argument("--tasks", nargs="*", default=list(TASKS))
    parser.add_argument("--sizes", nargs="*", type=int, default=list(SIZES))
    parser.add_argument("--engines", nargs="*", help="a subset of the engines (default: every one installed)")
    parser.add_argument("--out", help="write results.json and README.md to this folder (default: print the table only)")
    parser.add_argument("--render", metavar="DIR", help="recompute DIR's table from the raw rates of DIR/results.json")
    parser.add_argument("--split", type=int, default=32, help="env count from which the per-env-process engines race apart")
    parser.add_argument("--timeout", type=float, default=900, help="seconds for one task and env count")
    parser.add_argument("--one", nargs=2, metavar=("TASK", "N_ENVS"), help="one task's race (internal)")
    args = parser.parse_args()
    if args.render:
        render(args.render)
        return
    engines = [engine for engine in (args.engines or ENGINES) if available(engine)]
    if args.one:
        print(json.dumps(race(args.one[0], int(args.one[1]), engines, args.rounds, args.seconds)))
        return
    load = os.getloadavg()[0]
    hogs = [multiprocessing.get_context("fork").Process(target=busy_loop, daemon=True) for _ in range(args.busy)]
    for hog in hogs:
        hog.start()
    results: dict[str, list[dict[str, list[float]]]] = {}
    failed: dict[str, str] = {}
    versions = {name: version(name) for name in ("gymnasium", "stable_baselines3", "pufferlib-core", "torchrl")}
    machine = {"arch": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version(), "versions": versions}
    record: dict[str, Any] = {
        "command": command_of(args),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": machine,
        "args": {key: value for key, value in vars(args).items() if key not in ("one", "render")},
        "engines": engines,
        "load_average_at_start": load,
    }
    try:
        for task in args.tasks:
            for n_envs in args.sizes:
                key = f"{task} {n_envs}"
                results[key] = []
                for group in sub_races(engines, n_envs, args.split):
                    command = [sys.executable, __file__, "--one", task, str(n_envs), "--rounds", str(args.rounds),
                               "--seconds", str(args.seconds), "--engines", *group]  # fmt: skip
                    try:
                        out = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
                    except subprocess.TimeoutExpired:
                        failed[key] = f"{', '.join(group)}: did not finish in {args.timeout:.0f} s"
                        break
                    if out.returncode != 0:
                        errors = [line for line in out.stderr.splitlines() if "Error" in line] or [f"exit {out.returncode}"]
                        failed[key] = f"{', '.join(group)}: {errors[-1].strip()}"
                        break
                    results[key].append(json.loads(out.stdout.strip().splitlines()[-1]))
                if key in failed:
                    del results[key]
                print(key, failed.get(key) or medians(results[key]), flush=True)
                if args.out:  # after each task, so that a race cut short keeps what it measured
                    write_folder(args.out, {**record, "steps_per_s": results, "failed": failed})
    finally:
        for hog in hogs:
            hog.kill()
    spec = table_of({**record, "steps_per_s": results, "failed": failed})
    print(" | ".join(spec["columns"]), *(" | ".join(row) for row in spec["rows"]), spec["notes"], sep="\n")


if __name__ == "__main__":
    main()
