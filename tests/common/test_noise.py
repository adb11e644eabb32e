"""RandomWalkActionNoise: eq. 10 and its bound (hand values), reset per env index, bounds, independent env streams
(also with an explicit generator, unlike SB3's deep-copied VectorizedActionNoise), stock TD3 with it."""

from __future__ import annotations

import numpy as np
import pytest
from stable_baselines3 import DDPG, TD3
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.noise import VectorizedActionNoise

from sb3_async import RandomWalkActionNoise
from sb3_async.common.noise import random_walk_step


def test_random_walk_step_hand_values():
    y = np.array([0.5, -0.9, 0.0, 0.2])
    x = np.array([0.7, -0.3, 5.0, 0.1])
    # eq. 10 (y + x) inside the bounds; reflect folds 1.2 to 0.8, -1.2 to -0.8, and 5 (a far step) to 1
    np.testing.assert_allclose(random_walk_step(y, x, 1.0, "reflect"), [0.8, -0.8, 1.0, 0.3])
    np.testing.assert_allclose(random_walk_step(y, x, 1.0, "clip"), [1.0, -1.0, 1.0, 0.3])
    np.testing.assert_allclose(random_walk_step(y, x, 1.0, "leak", leak=0.1), [1.0, -1.0, 1.0, 0.28])
    np.testing.assert_allclose(random_walk_step(np.array([0.0]), np.array([0.5]), 0.25, "reflect"), [0.0])


def test_eq_10_increments_and_sqrt_t_spread_inside_the_bound():
    sigma, steps, streams = 0.01, 100, 4000
    noise = RandomWalkActionNoise(np.zeros(1), sigma=sigma, n_envs=streams, bound=10.0, generator=np.random.default_rng(0))
    reference = np.random.default_rng(0)
    walk = np.zeros((streams, 1))
    for _ in range(steps):
        walk = walk + sigma * reference.normal(size=(streams, 1))  # y_t = y_{t-1} + x_t
        np.testing.assert_allclose(noise(), walk, rtol=1e-5, atol=1e-7)
    # Var(y_t) = t sigma^2: the sample std over 4000 streams is within 10% with overwhelming probability.
    assert abs(walk.std() / (sigma * np.sqrt(steps)) - 1) < 0.1


@pytest.mark.parametrize("mode", ["reflect", "clip", "leak"])
def test_stays_within_bound(mode):
    noise = RandomWalkActionNoise(np.zeros(2), sigma=0.5, n_envs=3, bound=0.7, bound_mode=mode)
    values = np.stack([noise() for _ in range(2000)])
    assert values.shape == (2000, 3, 2)
    assert np.abs(values).max() <= 0.7 + 1e-6


def test_reset_per_env_index():
    noise = RandomWalkActionNoise(np.zeros(1), sigma=0.1, n_envs=3, generator=np.random.default_rng(1))
    for _ in range(20):
        noise()
    before = noise.walk.copy()
    noise.reset([1])
    assert noise.walk[1, 0] == 0.0 and noise.walk[0, 0] == before[0, 0] and noise.walk[2, 0] == before[2, 0]
    noise.reset()
    assert np.all(noise.walk == 0.0)
    # After a reset the walk restarts from y_0 = 0: the first value is one shot
    generator = np.random.default_rng(5)
    noise = RandomWalkActionNoise(np.zeros(1), sigma=0.1, generator=generator)
    first = noise()
    assert first.shape == (1,)
    np.testing.assert_allclose(first, 0.1 * np.random.default_rng(5).normal(size=(1, 1))[0], rtol=1e-6)


def test_independent_streams_across_envs_with_an_explicit_generator():
    noise = RandomWalkActionNoise(np.zeros(1), sigma=0.05, n_envs=4, bound=100.0, generator=np.random.default_rng(0))
    walks = np.stack([noise()[:, 0] for _ in range(5000)])
    increments = np.diff(walks, axis=0)
    corr = np.corrcoef(increments.T)[np.triu_indices(4, 1)]
    assert np.all(np.abs(corr) < 6 / np.sqrt(len(increments)))
    assert isinstance(noise, VectorizedActionNoise)  # so SB3 does not wrap (and deep-copy) it
    # SB3's VectorizedActionNoise deep-copies a one-stream noise per env: each copy draws its own shots, even with a
    # generator inside (a plain copy of the generator would give every env the same noise).
    base = RandomWalkActionNoise(np.zeros(1), generator=np.random.default_rng(0))
    assert not isinstance(base, VectorizedActionNoise)
    vectorized = VectorizedActionNoise(base, 2)
    shots = np.stack([vectorized()[:, 0] for _ in range(50)])
    assert not np.allclose(shots[:, 0], shots[:, 1])


@pytest.mark.parametrize("algo", [TD3, DDPG])
@pytest.mark.parametrize("n_envs", [1, 2, 3])
def test_built_like_normal_action_noise_it_works_with_any_number_of_envs(algo, n_envs):
    """Built as users build NormalActionNoise, stock TD3 and DDPG vectorise it and reset each env's copy at its
    episode end (Pendulum: 200 steps)."""
    env = make_vec_env("Pendulum-v1", n_envs=n_envs, seed=0)
    noise = RandomWalkActionNoise(np.zeros(1), 0.1 * np.ones(1))
    model = algo("MlpPolicy", env, action_noise=noise, learning_starts=1000, policy_kwargs=dict(net_arch=[8]), device="cpu")
    model.learn(202 * n_envs)  # each env's first episode ends
    if n_envs > 1:
        assert isinstance(model.action_noise, VectorizedActionNoise) and len(model.action_noise.noises) == n_envs


def test_bad_arguments():
    with pytest.raises(ValueError, match="sigma"):
        RandomWalkActionNoise(np.zeros(1), sigma=-1.0)
    with pytest.raises(ValueError, match="bound"):
        RandomWalkActionNoise(np.zeros(1), bound=0.0)
    with pytest.raises(ValueError, match="bound_mode"):
        RandomWalkActionNoise(np.zeros(1), bound_mode="wrap")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="n_envs"):
        RandomWalkActionNoise(np.zeros(1), n_envs=0)
    with pytest.raises(TypeError, match="generator"):
        RandomWalkActionNoise(np.zeros(1), generator=0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="mean"):
        RandomWalkActionNoise(np.zeros((1, 1)))


def test_stock_td3_resets_each_env_at_its_episode_end():
    env = make_vec_env("Pendulum-v1", n_envs=2, seed=0)
    noise = RandomWalkActionNoise(np.zeros(1), n_envs=2)
    resets: list[object] = []
    original_reset = noise.reset

    def recording_reset(indices=None):
        resets.append(None if indices is None else list(indices))
        original_reset(indices)

    noise.reset = recording_reset  # type: ignore[method-assign]
    model = TD3("MlpPolicy", env, action_noise=noise, learning_starts=500, policy_kwargs=dict(net_arch=[8]), device="cpu")
    model.learn(404)  # 202 steps per env: each env's episode (200 steps) ends once
    assert model.action_noise is noise
    assert [0] in resets and [1] in resets
