"""PrioritizedReplayBuffer's frame storage (share_frames): each distinct frame of stacked image observations stored
once, and every sample identical to what full copies of the observations give."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from gymnasium import spaces

from sb3_async.common.buffers.frames import FramePool, is_frame_space
from sb3_async.common.buffers.prioritized import PrioritizedReplayBuffer

STACK, FRAME = 4, (6, 5)


def frame_stacked_transitions(rng: np.random.Generator, n_envs: int, steps: int, n_steps: int) -> list[dict]:
    """Ape-X-like n-step transitions of ``n_envs`` envs, in time order: VecFrameStack's observations (zeros before
    an episode's first frame), episodes of random lengths, next observation ``n_steps`` later or the terminal one."""
    out = []
    for env in range(n_envs):
        t = 0
        while t < steps:
            length = int(rng.integers(3, 12))
            frames = rng.integers(0, 256, size=(length + 1, *FRAME), dtype=np.uint8)  # frame k: after k steps
            padded = np.concatenate([np.zeros((STACK - 1, *FRAME), dtype=np.uint8), frames])
            stacks = np.stack([padded[k : k + STACK] for k in range(length + 1)])  # stack k ends with frame k
            for k in range(length):
                last = min(k + n_steps, length)
                out.append(dict(env=env, obs=stacks[k], next_obs=stacks[last], done=float(last == length), t=t + k, k=k))
            t += length
    out.sort(key=lambda item: (item["t"], item["env"]))  # interleaved as several actors' blocks arrive
    return out


def _buffers(capacity: int, n_envs: int, n_steps: int = 1) -> tuple[PrioritizedReplayBuffer, PrioritizedReplayBuffer]:
    space = spaces.Box(0, 255, (STACK, *FRAME), np.uint8)
    kwargs = dict(n_envs=n_envs, n_steps=n_steps, gamma=0.9, handle_timeout_termination=False)
    full = PrioritizedReplayBuffer(capacity, space, spaces.Discrete(3), share_frames=False, **kwargs)
    shared = PrioritizedReplayBuffer(capacity, space, spaces.Discrete(3), **kwargs)
    assert shared.share_frames and not full.share_frames  # on by default for images
    return full, shared


def _assert_same_samples(full: PrioritizedReplayBuffer, shared: PrioritizedReplayBuffer, seed: int) -> None:
    for batch in (1, 7, 64):
        np.random.seed(seed + batch)
        a = full.sample_arrays(batch)
        a = type(a)(*(None if x is None else x.copy() for x in a))
        np.random.seed(seed + batch)
        b = shared.sample_arrays(batch)
        for name, x, y in zip(a._fields, a, b):
            if x is None:
                assert y is None, name
            else:
                np.testing.assert_array_equal(x, y, err_msg=name)
    every = np.arange(full.capacity if full.full else full.pos * full.n_envs)
    for name in ("observations", "next_observations"):
        table = full._obs_table(following=name == "next_observations")
        np.testing.assert_array_equal(
            full._gather_obs(name, table, every), shared._gather_obs(name, shared._obs_table(name != "observations"), every)
        )


@pytest.mark.parametrize("n_steps", [1, 3])
def test_blocks_sample_as_full_copies_across_episodes_and_wraparound(n_steps: int) -> None:
    rng = np.random.default_rng(n_steps)
    full, shared = _buffers(capacity=120, n_envs=1, n_steps=n_steps)
    transitions = frame_stacked_transitions(rng, n_envs=3, steps=150, n_steps=n_steps)
    for start in range(0, len(transitions), 50):  # Ape-X inserts blocks of up to 50 transitions
        block = transitions[start : start + 50]
        arrays = (
            np.stack([item["obs"] for item in block])[:, None],
            np.stack([item["next_obs"] for item in block])[:, None],
            rng.integers(0, 3, size=(len(block), 1, 1)),
            rng.normal(size=(len(block), 1)).astype(np.float32),
            np.array([[item["done"]] for item in block], dtype=np.float32),
        )
        priorities = rng.random((len(block), 1))
        full.extend(*arrays, None, priorities=priorities)
        shared.extend(*arrays, None, priorities=priorities)
        _assert_same_samples(full, shared, seed=start)
    assert full.full and shared.full  # wrapped around: frames of overwritten transitions were released
    stored = shared.frames
    assert len(stored) <= full.capacity + 3 * STACK * n_steps * 30  # ~ one frame per transition, not 2 * STACK
    assert len(stored) == len(np.unique(np.concatenate([shared.obs_frames.ravel(), shared.next_obs_frames.ravel()])))
    # priorities updated alike keep the samples alike; a pickled copy samples alike
    np.random.seed(0)
    indices = full.sample_arrays(16).indices.copy()
    full.update_priorities(indices, np.arange(16.0))
    shared.update_priorities(indices, np.arange(16.0))
    _assert_same_samples(full, pickle.loads(pickle.dumps(shared)), seed=99)


def test_add_of_several_envs_samples_as_full_copies() -> None:
    rng = np.random.default_rng(0)
    full, shared = _buffers(capacity=80, n_envs=2)
    per_env = [
        [item for item in frame_stacked_transitions(rng, 1, 100, 1) if item["env"] == 0][:60],
        [item for item in frame_stacked_transitions(rng, 1, 100, 1) if item["env"] == 0][:60],
    ]
    for step in range(60):
        obs = np.stack([per_env[e][step]["obs"] for e in range(2)])
        next_obs = np.stack([per_env[e][step]["next_obs"] for e in range(2)])
        done = np.array([per_env[e][step]["done"] for e in range(2)], dtype=np.float32)
        args = (obs, next_obs, np.array([[1], [2]]), np.ones(2, dtype=np.float32), done, [{}, {}])
        full.add(*args)
        shared.add(*args)
    _assert_same_samples(full, shared, seed=1)
    assert full.pos == shared.pos and full.full == shared.full


def test_frame_pool_counts_references_and_reuses_freed_slots() -> None:
    pool = FramePool((2, 2), np.uint8, chunk_frames=4)
    a, b, c = (np.full((2, 2), value, dtype=np.uint8) for value in (1, 2, 3))
    ids = pool.add(np.stack([a, b, a, a]))
    assert ids.tolist() == [0, 1, 0, 0] and len(pool) == 2
    pool.release(ids[:3])
    assert len(pool) == 1  # b freed, a still referenced once
    assert pool.add(c[None]).tolist() == [1]  # b's slot reused
    more = pool.add(np.stack([np.full((2, 2), v, dtype=np.uint8) for v in range(10, 15)]))
    assert len(pool.chunks) == 2 and len(pool) == 7
    out = np.empty((2, 3, 2, 2), dtype=np.uint8)
    pool.gather(np.array([[0, 1, more[-1]], [more[0], 0, 1]]), out)
    np.testing.assert_array_equal(out[0, 0], a)
    np.testing.assert_array_equal(out[0, 1], c)
    np.testing.assert_array_equal(out[0, 2], np.full((2, 2), 14))
    np.testing.assert_array_equal(out[1, 0], np.full((2, 2), 10))


def test_frame_storage_choice() -> None:
    assert is_frame_space(spaces.Box(0, 255, (4, 84, 84), np.uint8))
    assert not is_frame_space(spaces.Box(-1, 1, (4,), np.float32))
    vector = PrioritizedReplayBuffer(10, spaces.Box(-1, 1, (4,), np.float32), spaces.Discrete(2))
    assert not vector.share_frames and vector.observations.shape == (10, 1, 4)
    image = spaces.Box(0, 255, (4, 84, 84), np.uint8)
    sb3_storage = dict(optimize_memory_usage=True, handle_timeout_termination=False)
    assert not PrioritizedReplayBuffer(10, image, spaces.Discrete(2), **sb3_storage).share_frames
    with pytest.raises(ValueError, match="share_frames"):
        PrioritizedReplayBuffer(10, spaces.Box(-1, 1, (4,), np.float32), spaces.Discrete(2), share_frames=True)
    with pytest.raises(ValueError, match="share_frames"):
        PrioritizedReplayBuffer(10, image, spaces.Discrete(2), share_frames=True, **sb3_storage)
