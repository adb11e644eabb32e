"""PrioritizedReplayBuffer speed against cpprb's PrioritizedReplayBuffer.

Same work for both, interleaved in one process (run it on one core: ``taskset -c 0``): a batch of 512 sampled with
IS weights (beta 0.4) and the 512 priorities updated (cpprb with ``check_for_update=True``, as our stale-update drop);
a block of 50 transitions added with priorities; and the Atari shape (uint8 4x84x84 frames, next observations read
from the next slot in both: SB3's ``optimize_memory_usage`` and cpprb's ``next_of``). Medians over rounds.

cpprb is a comparator, never a dependency:  pip install "sb3-async[replay-bench]"   (or: pip install cpprb)

    taskset -c 0 python benchmarks/scripts/replay_speed.py                  # vector (1M x 4 floats) and Atari (100k frames)
    taskset -c 0 python benchmarks/scripts/replay_speed.py --atari-capacity 20000 --rounds 30
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

import numpy as np
import torch as th
from gymnasium import spaces

from sb3_async import PrioritizedReplayBuffer

GOALS = {"vector_sample_update_ms": 0.6, "vector_speedup_vs_cpprb": 1.3, "add50_us": 50.0, "atari_ratio_max": 1.2}


def fill_ours(buffer: PrioritizedReplayBuffer, obs_shape: tuple[int, ...], dtype: type, rng: np.random.Generator) -> None:
    block = 10_000 if np.prod(obs_shape) < 100 else 500
    filled = 0
    while filled < buffer.buffer_size:
        steps = min(block, buffer.buffer_size - filled)
        obs = rng.integers(0, 255, (steps, 1, *obs_shape)).astype(dtype)
        infos = [[{}] for _ in range(steps)]
        buffer.extend(obs, obs, rng.uniform(-1, 1, (steps, 1, 1)), rng.random((steps, 1)), np.zeros((steps, 1)), infos,
                      priorities=rng.random((steps, 1)) + 0.01)  # fmt: skip
        filled += steps


def fill_cpprb(buffer, size: int, obs_shape: tuple[int, ...], dtype: type, rng: np.random.Generator, next_of: bool) -> None:
    block = 10_000 if np.prod(obs_shape) < 100 else 500
    for start in range(0, size, block):
        steps = min(block, size - start)
        obs = rng.integers(0, 255, (steps, *obs_shape)).astype(dtype)
        data = dict(obs=obs, act=rng.uniform(-1, 1, (steps, 1)), rew=rng.random(steps), done=np.zeros(steps))
        if not next_of:
            data["next_obs"] = obs
        else:
            data["next_obs"] = obs  # cpprb's next_of stores it in the next slot
        buffer.add(**data, priorities=rng.random(steps) + 0.01)


def time_interleaved(
    tasks: dict[str, Callable[[], None]], rounds: int, repeat: int, clock: Callable[[], float]
) -> dict[str, float]:
    """Median seconds per call of each task on ``clock``; the tasks alternate round by round."""
    samples: dict[str, list[float]] = {name: [] for name in tasks}
    for _ in range(rounds):
        for name, task in tasks.items():
            start = clock()
            for _ in range(repeat):
                task()
            samples[name].append((clock() - start) / repeat)
    return {name: float(np.median(values)) for name, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--capacity", type=int, default=1_000_000)
    parser.add_argument("--atari-capacity", type=int, default=100_000, help="0 skips the Atari shape")
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    parser.add_argument(
        "--clock",
        choices=["cpu", "wall"],
        default="cpu",
        help="cpu: this process's CPU time (time.process_time), which waiting for a busy shared core does not inflate; "
        "wall: time.perf_counter",
    )
    args = parser.parse_args()
    try:
        import cpprb
    except ImportError as error:
        raise SystemExit(
            'cpprb is needed as the comparator: pip install "sb3-async[replay-bench]" (or pip install cpprb)'
        ) from error
    th.set_num_threads(1)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    rng = np.random.default_rng(0)
    batch, beta = args.batch_size, 0.4
    results: dict[str, float] = {}

    # Vector observations: 1M x 4 floats
    box = spaces.Box(-np.inf, np.inf, (4,), np.float32)
    act = spaces.Box(-1, 1, (1,), np.float32)
    ours = PrioritizedReplayBuffer(args.capacity, box, act, device="cpu", alpha=0.6, beta=beta)
    fill_ours(ours, (4,), np.float32, rng)
    env_dict = {"obs": {"shape": 4}, "act": {"shape": 1}, "rew": {}, "next_obs": {"shape": 4}, "done": {}}
    theirs = cpprb.PrioritizedReplayBuffer(args.capacity, env_dict, alpha=0.6, eps=1e-6, check_for_update=True)
    fill_cpprb(theirs, args.capacity, (4,), np.float32, rng, next_of=False)
    new_priorities = rng.random(batch) + 0.01

    def ours_step() -> None:
        ours.update_priorities(ours.sample_arrays(batch, beta=beta).indices, new_priorities)

    def cpprb_step() -> None:
        theirs.update_priorities(theirs.sample(batch, beta=beta)["indexes"], new_priorities)

    block_obs = rng.normal(size=(50, 1, 4)).astype(np.float32)
    block = (block_obs, block_obs, rng.uniform(-1, 1, (50, 1, 1)), rng.random((50, 1)), np.zeros((50, 1)))
    block_infos = None  # cpprb has no truncation flags to read: neither side reads infos
    block_priorities = rng.random((50, 1)) + 0.01
    cpprb_block = dict(
        obs=block_obs[:, 0], act=block[2][:, 0], rew=block[3][:, 0], next_obs=block_obs[:, 0], done=block[4][:, 0]
    )

    def ours_add() -> None:
        ours.extend(*block, block_infos, priorities=block_priorities)

    def cpprb_add() -> None:
        theirs.add(**cpprb_block, priorities=block_priorities[:, 0])

    vector = time_interleaved({"ours": ours_step, "cpprb": cpprb_step}, args.rounds, 20, clock)
    adds = time_interleaved({"ours": ours_add, "cpprb": cpprb_add}, args.rounds, 20, clock)
    results.update(
        vector_sample_update_ms=vector["ours"] * 1e3,
        vector_cpprb_ms=vector["cpprb"] * 1e3,
        vector_speedup_vs_cpprb=vector["cpprb"] / vector["ours"],
        add50_us=adds["ours"] * 1e6,
        add50_cpprb_us=adds["cpprb"] * 1e6,
    )
    del ours, theirs

    if args.atari_capacity:
        frames = spaces.Box(0, 255, (4, 84, 84), np.uint8)
        ours = PrioritizedReplayBuffer(
            args.atari_capacity, frames, act, device="cpu", optimize_memory_usage=True, handle_timeout_termination=False
        )
        fill_ours(ours, (4, 84, 84), np.uint8, rng)
        atari_dict = {"obs": {"shape": (4, 84, 84), "dtype": np.uint8}, "act": {"shape": 1}, "rew": {}, "done": {}}
        theirs = cpprb.PrioritizedReplayBuffer(
            args.atari_capacity, atari_dict, next_of="obs", alpha=0.6, eps=1e-6, check_for_update=True
        )
        fill_cpprb(theirs, args.atari_capacity, (4, 84, 84), np.uint8, rng, next_of=True)
        atari = time_interleaved({"ours": ours_step, "cpprb": cpprb_step}, max(args.rounds // 5, 5), 5, clock)
        results.update(atari_ms=atari["ours"] * 1e3, atari_cpprb_ms=atari["cpprb"] * 1e3)
        results["atari_ratio"] = atari["ours"] / atari["cpprb"]

    print(
        f"cpprb {metadata.version('cpprb')}, numpy {np.__version__}, batch {batch}, rounds {args.rounds}, {args.clock} clock"
    )
    print("| measure | ours | cpprb | ratio (cpprb / ours) | goal |")
    print("|---|---|---|---|---|")
    print(
        f"| sample {batch} + IS weights + update, 1M x 4 floats | {results['vector_sample_update_ms']:.3f} ms "
        f"| {results['vector_cpprb_ms']:.3f} ms | {results['vector_speedup_vs_cpprb']:.2f}x | <= 0.6 ms and >= 1.3x |"
    )
    print(
        f"| add a block of 50 transitions | {results['add50_us']:.1f} us | {results['add50_cpprb_us']:.1f} us "
        f"| {results['add50_cpprb_us'] / results['add50_us']:.2f}x | <= 50 us |"
    )
    if "atari_ratio" in results:
        print(
            f"| Atari {args.atari_capacity} x uint8 4x84x84, sample {batch} with next obs + update "
            f"| {results['atari_ms']:.2f} ms "
            f"| {results['atari_cpprb_ms']:.2f} ms | {1 / results['atari_ratio']:.2f}x | ours <= 1.2x cpprb's time |"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
