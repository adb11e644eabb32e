"""The workers' frame stack of images (``ChannelsFirstFrameStack``) against SB3's ``VecFrameStack`` followed by
``VecTransposeImage``, side by side on the same envs: observations, spaces, memory layout and terminal observations; and
the segment batches of such observations (``stack_steps``)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.vec_env import DummyVecEnv, VecFrameStack, VecTransposeImage, is_vecenv_wrapped

from sb3_async.common.gradient_sharing import stack_steps
from sb3_async.common.worker_envs import ChannelsFirstFrameStack, EnvRecipe


class RandomFrames(gym.Env):
    """Random ``uint8`` channel-last frames; an episode ends (terminated or truncated) at random."""

    def __init__(self, channels: int = 1, end_probability: float = 0.1, shape: tuple[int, int] = (30, 28)):
        self.observation_space = spaces.Box(0, 255, (*shape, channels), np.uint8)
        self.action_space = spaces.Discrete(2)
        self.end_probability = end_probability

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        end = self.np_random.random() < self.end_probability
        frame = self.np_random.integers(0, 256, self.observation_space.shape, dtype=np.uint8)
        return frame, 1.0, bool(end and action == 0), bool(end and action == 1), {}


def frames_venv(channels: int, n_envs: int = 4) -> DummyVecEnv:
    venv = DummyVecEnv([lambda: RandomFrames(channels) for _ in range(n_envs)])
    venv.seed(3)
    venv.observation_space.seed(3)
    for env in venv.envs:
        env.observation_space.seed(3)
    return venv


@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("n_stack", [2, 3, 4, 8])
def test_it_gives_what_sb3_frame_stack_then_transpose_give(channels: int, n_stack: int) -> None:
    ours = ChannelsFirstFrameStack(frames_venv(channels), n_stack)
    theirs = VecTransposeImage(VecFrameStack(frames_venv(channels), n_stack, channels_order="last"))
    assert ours.observation_space == theirs.observation_space
    a, b = ours.reset(), theirs.reset()
    assert np.array_equal(a, b) and a.strides == b.strides
    rng = np.random.default_rng(0)
    given, ends = [], 0
    for _ in range(200):
        actions = rng.integers(0, 2, ours.num_envs)
        (a, rew_a, done_a, info_a), (b, rew_b, done_b, info_b) = ours.step(actions), theirs.step(actions)
        assert np.array_equal(a, b) and a.dtype == b.dtype and a.strides == b.strides
        assert np.array_equal(rew_a, rew_b) and np.array_equal(done_a, done_b)
        for mine, sb3 in zip(info_a, info_b):
            assert mine.keys() == sb3.keys()
            if "terminal_observation" in sb3:
                ends += 1
                assert np.array_equal(mine["terminal_observation"], sb3["terminal_observation"])
                assert mine["terminal_observation"].shape == ours.observation_space.shape
        given.append((a, b.copy()))
    assert ends > 20
    for a, b in given:  # each step's observations stay as they were given
        assert np.array_equal(a, b)


def test_it_rejects_observations_other_than_channel_last_images() -> None:
    venv = DummyVecEnv([lambda: gym.make("CartPole-v1")])
    with pytest.raises(TypeError, match="needs channel-last image observations"):
        ChannelsFirstFrameStack(venv, 4)


def test_workers_stack_image_frames_with_it_and_vectors_with_vec_frame_stack() -> None:
    recipe = EnvRecipe(VecFrameStack(DummyVecEnv([RandomFrames]), 4))
    venv = recipe.make_vec_env(2, seed=0)
    assert isinstance(venv, ChannelsFirstFrameStack)
    assert venv.observation_space == VecTransposeImage(VecFrameStack(DummyVecEnv([RandomFrames]), 4)).observation_space
    vectors = EnvRecipe(VecFrameStack(DummyVecEnv([lambda: gym.make("CartPole-v1")]), 4)).make_vec_env(2, seed=0)
    assert isinstance(vectors, VecFrameStack)


@pytest.mark.parametrize("shape", [(8, 10), (10, 8)])
def test_stacks_whose_layout_sb3_reads_otherwise_are_left_to_sb3(shape: tuple[int, int]) -> None:
    """12 frames of 8 x 10 stack to (8, 10, 12), which SB3 reads as channel-first and does not transpose; 12 frames of
    10 x 8 to (10, 8, 12), which it transposes to (12, 10, 8), itself read as channel-last. The workers' envs must give
    what the main process' env gives in both."""
    main = VecFrameStack(DummyVecEnv([lambda: RandomFrames(shape=shape)]), 12)
    venv = EnvRecipe(main).make_vec_env(2, seed=0)
    assert not is_vecenv_wrapped(venv, ChannelsFirstFrameStack)
    assert venv.observation_space == BaseAlgorithm._wrap_env(main).observation_space
    with pytest.raises(TypeError, match="stay so when 12 are stacked"):
        ChannelsFirstFrameStack(DummyVecEnv([lambda: RandomFrames(shape=shape)]), 12)


def test_segment_batches_of_transposed_images_keep_their_layout_and_values() -> None:
    rng = np.random.default_rng(0)
    steps = [np.moveaxis(rng.integers(0, 256, (3, 30, 28, 4), dtype=np.uint8), -1, 1) for _ in range(5)]
    batch = stack_steps(steps)
    expected = np.stack([np.ascontiguousarray(step) for step in steps]).reshape(15, 4, 30, 28)
    assert np.array_equal(batch, expected)
    assert batch.transpose(0, 2, 3, 1).flags.c_contiguous  # channel-last memory, as the steps
    contiguous = stack_steps([np.ascontiguousarray(step) for step in steps])
    assert np.array_equal(contiguous, expected) and contiguous.flags.c_contiguous
