"""How many actors one Ape-X learner can feed on this machine: the learner's parts timed with synthetic actors.

Synthetic actors are blocks of 50 n-step transitions with priorities, drawn in advance (no env, no actor process),
handed to the learner as an actor's messages are (``_on_message``). Per task (CartPole-v1: the zoo's MLP, batch 256;
Pong: the paper's dueling Nature CNN on 84x84x4 frames, batch 512) and replay size (100k and 2M transitions;
Pong at 100k only: 2M frames need about 14 GB), in one process, torch on ``--threads`` threads:

- **insert**: transitions per second the learner inserts (blocks received, priorities written), learning off;
- **sample**: milliseconds to sample a prioritized batch and write its priorities back, no update;
- **update**: learner updates per second (sample, gradient step, priorities, target refresh), the replay full;
- **ingest**: transitions per second the learner takes in while it learns at ``replay_ratio`` (default 1: each
  transition learned from once on average; the paper's ratio is about 0.5 to 2 on Atari): the rate at which one
  update's batch plus its ``batch / replay_ratio`` new transitions take one update's and their insert's time;
- **actor**: env steps per second of one real Ape-X actor process on the task (its env, its inference, its n-step
  transitions and priorities), learning off;
- **actors fed**: ``ingest / actor``, the actors one learner keeps at the ratio if each had a core of its own.

Usage: ``python benchmarks/scripts/apex_capacity.py [--seconds 3] [--threads 1] [--out DIR]``; with ``--out`` it writes
``DIR/apex_capacity.json`` (raw timings, command, date, machine, and the ``"table"``); ``python -m sb3_async.benchmark
--report DIR/apex_capacity.json --markdown --table script`` prints the table. The published figure, beside the
learners suite's table::

    python benchmarks/scripts/apex_capacity.py --seconds 3 --threads 1 --out benchmarks/results/learners
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
import warnings
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import torch
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import configure
from stable_baselines3.common.vec_env import VecFrameStack

from sb3_async import ApeXDQN
from sb3_async.apex.transitions import NStepTransitions
from sb3_async.common.atari_wrappers import make_atari_env

BLOCK = 50
TASKS: dict[str, dict[str, Any]] = {
    "CartPole-v1": dict(
        policy="MlpPolicy",
        batch_size=256,
        policy_kwargs=dict(net_arch=[64, 64]),
        sizes=(100_000, 2_000_000),
    ),
    "Pong": dict(policy="CnnPolicy", batch_size=512, policy_kwargs=None, sizes=(100_000,)),
}


def make_env(task: str) -> Any:
    """The task's env as the zoo builds it (Pong: the Atari wrapper and 4 stacked frames; each actor rebuilds it)."""
    if task == "CartPole-v1":
        return "CartPole-v1"
    import ale_py
    import gymnasium as gym

    gym.register_envs(ale_py)
    return VecFrameStack(make_atari_env("PongNoFrameskip-v4", n_envs=1, seed=0), n_stack=4)


def learner(task: str, buffer_size: int, **kwargs: Any) -> ApeXDQN:
    spec = TASKS[task]
    model = ApeXDQN(
        spec["policy"],
        make_env(task),
        buffer_size=buffer_size,
        batch_size=spec["batch_size"],
        learning_starts=spec["batch_size"],
        n_actors=1,
        policy_kwargs=spec["policy_kwargs"],
        seed=0,
        **kwargs,
    )
    model.set_logger(configure(None, []))
    model._share_state()
    return model


def synthetic_blocks(model: ApeXDQN, count: int, rng: np.random.Generator) -> list[Any]:
    """``count`` blocks of ``BLOCK`` transitions in the model's spaces (values drawn at random), with priorities."""
    space = model.observation_space
    blocks = []
    for _ in range(count):
        if space.dtype == np.uint8:
            obs = rng.integers(0, 256, size=(BLOCK, *space.shape), dtype=np.uint8)
            next_obs = rng.integers(0, 256, size=(BLOCK, *space.shape), dtype=np.uint8)
        else:
            obs = rng.standard_normal((BLOCK, *space.shape)).astype(np.float32)
            next_obs = rng.standard_normal((BLOCK, *space.shape)).astype(np.float32)
        block = NStepTransitions(
            obs=obs,
            actions=rng.integers(0, model.action_space.n, size=(BLOCK, 1)).astype(np.int64),
            returns=rng.standard_normal(BLOCK).astype(np.float32),
            dones=(rng.random(BLOCK) < 0.01).astype(np.float32),
            next_obs=next_obs,
        )
        blocks.append((block, rng.random(BLOCK) + 0.1, 0))
    return blocks


def fill(model: ApeXDQN, blocks: list[Any], transitions: int) -> None:
    """Insert blocks (cycling through ``blocks``) until the replay holds ``transitions``."""
    i = 0
    while model.replay_buffer.size() < transitions:
        model._on_message(0, "transitions", blocks[i % len(blocks)])
        i += 1


def timed(seconds: float, step: Any) -> tuple[int, float]:
    """Call ``step()`` for about ``seconds``; returns the calls and the time they took."""
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        step()
        calls += 1
    return calls, time.perf_counter() - start


def measure(task: str, buffer_size: int, seconds: float, rng: np.random.Generator) -> dict[str, float]:
    model = learner(task, buffer_size)
    blocks = synthetic_blocks(model, 64, rng)
    fill(model, blocks, min(buffer_size, 10 * BLOCK * 64))  # warm-up
    fill(model, blocks, buffer_size)
    cursor = iter(range(10**12))

    def insert() -> None:
        model._on_message(0, "transitions", blocks[next(cursor) % len(blocks)])

    calls, elapsed = timed(seconds, insert)
    insert_rate = calls * BLOCK / elapsed
    buffer, batch_size = model.replay_buffer, model.batch_size

    def sample() -> None:
        batch = buffer.sample_arrays(batch_size)
        buffer.update_priorities(batch.indices, np.abs(batch.rewards.reshape(-1)) + 0.1)

    calls, elapsed = timed(seconds, sample)
    sample_ms = 1000 * elapsed / calls
    model.policy.set_training_mode(True)
    model.learner_step()  # warm-up
    calls, elapsed = timed(seconds, model.learner_step)
    update_rate = calls / elapsed
    return dict(insert_per_s=insert_rate, sample_ms=sample_ms, updates_per_s=update_rate, batch_size=batch_size)


class _Rate(BaseCallback):
    """Env steps per second from ``warmup`` seconds after the first callback, over ``seconds``; then stops."""

    def __init__(self, warmup: float, seconds: float):
        super().__init__()
        self.warmup, self.seconds, self.start, self.rate = warmup, seconds, None, 0.0
        self.first = None

    def _on_step(self) -> bool:
        now = time.perf_counter()
        if self.first is None:
            self.first = now
        if self.start is None:
            if now - self.first >= self.warmup:
                self.start = (now, self.num_timesteps)
            return True
        if now - self.start[0] < self.seconds:
            return True
        self.rate = (self.num_timesteps - self.start[1]) / (now - self.start[0])
        return False


def actor_rate(task: str, seconds: float) -> float:
    """Env steps per second of one Ape-X actor process on ``task`` (its env, inference, n-step transitions and
    priorities), learning off; the main process only receives."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = ApeXDQN(
            TASKS[task]["policy"],
            make_env(task),
            n_actors=1,
            buffer_size=100_000,
            learning_starts=10**9,
            policy_kwargs=TASKS[task]["policy_kwargs"],
            seed=0,
        )
        rate = _Rate(warmup=2.0, seconds=seconds)
        model.learn(10**9, callback=rate)
    return rate.rate


def ingest(row: dict[str, float], ratio: float) -> float:
    """Transitions per second the learner takes in at ``ratio`` (transitions learned from per transition inserted):
    each update learns from ``batch`` transitions, so ``batch / ratio`` new ones arrive per update."""
    new_per_update = row["batch_size"] / ratio
    seconds_per_update = 1 / row["updates_per_s"] + new_per_update / row["insert_per_s"]
    return new_per_update / seconds_per_update


def table_of(record: dict[str, Any]) -> dict[str, Any]:
    ratio = record["args"]["replay_ratio"]
    rows = []
    for key, row in record["learner"].items():
        task, size = key.rsplit(" ", 1)
        fed = ingest(row, ratio)
        actor = record["actor"][task]
        rows.append(
            [
                task,
                f"{int(size):,}",
                f"{row['insert_per_s']:,.0f}",
                f"{row['sample_ms']:.2f}",
                f"{row['updates_per_s']:,.1f}",
                f"{fed:,.0f}",
                f"{actor:,.0f}",
                f"{fed / actor:.1f}",
            ]
        )
    return dict(
        title="Ape-X: what one learner can take in (synthetic actors)",
        columns=[
            "task",
            "replay size",
            "insert (transitions/s)",
            "sample + priorities (ms/batch)",
            "learner updates/s",
            f"ingest at replay ratio {ratio:g} (transitions/s)",
            "one actor (env steps/s)",
            "actors fed",
        ],
        rows=rows,
        notes=(
            f"One process, torch on {record['args']['threads']} thread(s), {record['machine']['cpus']} cores. Synthetic "
            "actors: blocks of 50 transitions with priorities handed to the learner as actors' messages. The learner "
            "updates on a full replay (CartPole: MLP 64x64, batch 256; Pong: dueling Nature CNN, batch 512). "
            '"actors fed" is ingest / one actor\'s rate: the actors one learner keeps at the ratio, each on a core '
            "of its own. `python benchmarks/scripts/apex_capacity.py --seconds "
            f"{record['args']['seconds']:g} --threads {record['args']['threads']}`."
        ),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per timed part")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--replay-ratio", type=float, default=1.0, help="transitions learned from per transition")
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--sizes", nargs="+", type=int, help="replay sizes (default: the task's)")
    parser.add_argument("--out", type=Path, help="write DIR/apex_capacity.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    record: dict[str, Any] = dict(
        command="python benchmarks/scripts/apex_capacity.py " + " ".join(os.sys.argv[1:]),
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        machine=dict(cpus=os.cpu_count(), python=platform.python_version(), torch=torch.__version__),
        args=dict(seconds=args.seconds, threads=args.threads, replay_ratio=args.replay_ratio),
        load_average_at_start=os.getloadavg()[0],
        learner={},
        actor={},
    )
    for task in args.tasks:
        record["actor"][task] = actor_rate(task, args.seconds)
        for size in args.sizes or TASKS[task]["sizes"]:
            record["learner"][f"{task} {size}"] = measure(task, size, args.seconds, rng)
            print(task, size, record["learner"][f"{task} {size}"], flush=True)
    record["table"] = table_of(record)
    from sb3_async.benchmark.tables import render_script

    print("\n".join(render_script(record)))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "apex_capacity.json").write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
