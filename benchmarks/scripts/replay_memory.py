"""Bytes per transition of Ape-X's prioritized replay on Atari observations (4 stacked 84x84 frames).

Fills a PrioritizedReplayBuffer of ``--capacity`` transitions (then 20% more: it wraps, freeing the frames of the
transitions it overwrites) with Ape-X-like blocks of 50 n-step transitions from ``--envs`` interleaved envs (episodes
of 200 to 2,000 steps, random frames: no two frames alike, the worst case for sharing), and reports the memory the
buffer holds (tracemalloc, which counts NumPy's arrays and Python's objects) per transition, with and without
``share_frames``, and the projection to the paper's 2M transitions.

    PYTHONPATH=. python benchmarks/scripts/replay_memory.py --capacity 20000
"""

from __future__ import annotations

import argparse
import tracemalloc

import numpy as np
from gymnasium import spaces

from sb3_async.common.buffers.prioritized import PrioritizedReplayBuffer

STACK, FRAME = 4, (84, 84)


def fill(buffer: PrioritizedReplayBuffer, transitions: int, n_envs: int, n_steps: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    streams = []
    for _ in range(n_envs):
        length = int(rng.integers(200, 2000))
        streams.append(dict(frames=np.zeros((STACK - 1 + length + 1, *FRAME), np.uint8), length=length, k=0, filled=0))
    block: list[tuple[np.ndarray, np.ndarray, float]] = []
    done_count = 0
    while done_count < transitions:
        for stream in streams:
            frames, length, k = stream["frames"], stream["length"], stream["k"]
            while stream["filled"] <= min(k + n_steps, length):  # frames arrive as the env steps
                frames[STACK - 1 + stream["filled"]] = rng.integers(0, 256, FRAME, dtype=np.uint8)
                stream["filled"] += 1
            last = min(k + n_steps, length)
            block.append((frames[k : k + STACK].copy(), frames[last : last + STACK].copy(), float(last == length)))
            stream["k"] += 1
            if stream["k"] == length:
                new_length = int(rng.integers(200, 2000))
                frames = np.zeros((STACK - 1 + new_length + 1, *FRAME), np.uint8)
                stream.update(frames=frames, length=new_length, k=0, filled=0)
            if len(block) == 50:
                obs = np.stack([item[0] for item in block])[:, None]
                next_obs = np.stack([item[1] for item in block])[:, None]
                dones = np.array([[item[2]] for item in block], np.float32)
                actions = rng.integers(0, 6, (50, 1, 1))
                buffer.extend(obs, next_obs, actions, rng.normal(size=(50, 1)).astype(np.float32), dones, None,
                              priorities=rng.random((50, 1)))  # fmt: skip
                done_count += 50
                block = []


def measure(capacity: int, share_frames: bool, n_envs: int, n_steps: int) -> float:
    tracemalloc.start()
    space = spaces.Box(0, 255, (STACK, *FRAME), np.uint8)
    buffer = PrioritizedReplayBuffer(capacity, space, spaces.Discrete(6), share_frames=share_frames,
                                     handle_timeout_termination=False, n_steps=1)  # fmt: skip
    fill(buffer, int(capacity * 1.2), n_envs, n_steps)
    current, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del buffer
    return current / capacity


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--capacity", type=int, default=50_000)
    parser.add_argument("--envs", type=int, default=16)
    parser.add_argument("--n-steps", type=int, default=3)
    args = parser.parse_args()
    for share_frames in (False, True):
        per_transition = measure(args.capacity, share_frames, args.envs, args.n_steps)
        name = "share_frames=True " if share_frames else "share_frames=False"
        print(f"{name}: {per_transition:,.0f} bytes per transition; 2M transitions: {per_transition * 2e6 / 2**30:.1f} GiB")


if __name__ == "__main__":
    main()
