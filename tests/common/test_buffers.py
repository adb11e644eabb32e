"""Prioritized and episodic dual replay: the sum tree, PER's sampling law and IS weights, SB3 n-step parity, stale and
bad priority updates, Algorithms 1 and 2 of AE-DDPG on hand-made episodes, stock SB3 runs, save/load round trips."""

from __future__ import annotations

import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from stable_baselines3 import DDPG, DQN, SAC, TD3
from stable_baselines3.common.buffers import NStepReplayBuffer, ReplayBuffer

from sb3_async import EpisodicDualReplayBuffer, PrioritizedReplayBuffer, RandomWalkActionNoise, ReplayStatsCallback
from sb3_async.common.buffers.episodic import admits_episode, update_best_returns
from sb3_async.common.buffers.n_step import n_step_targets
from sb3_async.common.buffers.prioritized import importance_weights
from sb3_async.common.buffers.sum_tree import SumTree

# Tiny networks: one torch thread is faster than several on a busy 2-core machine (restored afterwards).
pytestmark = pytest.mark.usefixtures("one_torch_thread")

OBS = spaces.Box(-np.inf, np.inf, (3,), np.float32)
ACT = spaces.Box(-1.0, 1.0, (1,), np.float32)


def fill(buffers, steps: int, n_envs: int, seed: int = 0, episode_ends=None) -> None:
    """The same random transitions (observations encode step and env) added to every buffer in ``buffers``."""
    rng = np.random.default_rng(seed)
    for t in range(steps):
        obs = np.stack([np.full(3, 1000 * t + e, np.float32) for e in range(n_envs)])
        next_obs = obs + 0.5
        action = rng.uniform(-1, 1, (n_envs, 1)).astype(np.float32)
        reward = rng.normal(size=n_envs).astype(np.float32)
        if episode_ends is None:
            done = rng.random(n_envs) < 0.15
            truncated = done & (rng.random(n_envs) < 0.5)
        else:
            done, truncated = episode_ends(t)
        infos = [{"TimeLimit.truncated": bool(tr)} for tr in truncated]
        for buffer in buffers:
            buffer.add(obs, next_obs, action, reward, done, infos)


# --- sum tree ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("capacity", [1, 7, 16, 300, 5000])
def test_sum_tree_find_matches_cumsum_searchsorted(capacity):
    rng = np.random.default_rng(capacity)
    values = rng.random(capacity) * (rng.random(capacity) < 0.7)  # about 30% zero leaves
    values[0] = max(values[0], 0.1)
    tree = SumTree(capacity)
    tree.update(np.arange(capacity), values)
    assert np.isclose(tree.total, values.sum())
    assert tree.min == values[values > 0].min()
    mass = rng.random(10_000) * values.sum() * (1 - 1e-12)
    np.testing.assert_array_equal(tree.find(mass), np.searchsorted(np.cumsum(values), mass, side="right"))
    # Rounding at the top end never lands on a zero leaf
    last = np.flatnonzero(values)[-1]
    assert tree.find(np.array([tree.total, np.nextafter(tree.total, np.inf)])).tolist() == [last, last]


def test_sum_tree_updates_and_exact_minimum():
    tree = SumTree(1000)
    tree.update(np.arange(1000), np.linspace(1.0, 2.0, 1000))
    tree.update(np.array([5, 5, 900]), np.array([0.5, 0.5, 3.0]))  # duplicates keep one of their (equal) values
    assert tree.min == 0.5
    tree.update(np.array([5]), np.array([4.0]))  # the minimum's leaf goes up: rescanned
    assert tree.min == 1.0
    tree.update(np.array([0]), np.array([0.0]))  # a zero leaf is not a positive minimum
    assert tree.min == pytest.approx(np.linspace(1.0, 2.0, 1000)[1])
    expected = np.linspace(1.0, 2.0, 1000)
    expected[[0, 5, 900]] = [0.0, 4.0, 3.0]
    assert tree.total == pytest.approx(expected.sum())
    for level in range(tree.depth):  # every parent is the sum of its children
        np.testing.assert_allclose(tree.sums[level], tree.sums[level + 1].reshape(-1, 16).sum(axis=1))


# --- prioritized replay -----------------------------------------------------------------------------------------------


def per_with_priorities(priorities: np.ndarray, **kwargs) -> PrioritizedReplayBuffer:
    buffer = PrioritizedReplayBuffer(len(priorities), OBS, ACT, device="cpu", **kwargs)
    fill([buffer], len(priorities), 1)
    buffer.update_priorities(np.arange(len(priorities)), priorities)  # first pass: index == slot
    return buffer


def test_per_sampling_frequencies_match_p_alpha():
    priorities = np.array([0.1, 0.5, 1.0, 2.0, 4.0, 0.0, 3.0, 0.7])
    buffer = per_with_priorities(priorities, alpha=0.6, eps=1e-6)
    p_alpha = (priorities + 1e-6) ** 0.6
    expected = p_alpha / p_alpha.sum()
    np.random.seed(0)
    n_batches, batch_size = 2000, 64
    counts = np.zeros(len(priorities))
    for _ in range(n_batches):
        np.add.at(counts, buffer.sample_arrays(batch_size).indices, 1)
    n = n_batches * batch_size
    # Stratified sampling has less variance than multinomial: a 6-sigma binomial band never fails by chance.
    band = 6 * np.sqrt(expected * (1 - expected) / n) + 1e-9
    np.testing.assert_array_less(np.abs(counts / n - expected), band)
    # The descent itself is exactly a cumsum/searchsorted over p^alpha, for the same masses.
    mass = np.random.random_sample(1000) * buffer.tree.total * (1 - 1e-12)
    np.testing.assert_array_equal(buffer.tree.find(mass), np.searchsorted(np.cumsum(p_alpha), mass, side="right"))


def test_importance_weights_against_formula():
    priorities = np.array([0.2, 0.5, 1.0, 2.0, 4.0])
    buffer = per_with_priorities(priorities, alpha=0.7, eps=1e-6)
    np.random.seed(1)
    arrays = buffer.sample_arrays(32, beta=0.5)
    p_alpha = (priorities + 1e-6) ** 0.7
    prob = p_alpha / p_alpha.sum()
    n = len(priorities)
    w_all = (n * prob) ** -0.5
    expected = w_all[arrays.indices] / w_all.max()  # normalised by the largest possible weight
    np.testing.assert_allclose(arrays.weights[:, 0], expected, rtol=1e-6)
    assert arrays.weights.max() <= 1.0
    np.testing.assert_allclose(importance_weights(np.array([4.0, 1.0]), 1.0, 0.5), [0.5, 1.0])
    samples = buffer.sample(8, beta=1.0)
    assert samples.weights.shape == (8, 1) and isinstance(samples.indices, np.ndarray)


@pytest.mark.parametrize("n_steps", [1, 3])
def test_samples_identical_to_sb3(n_steps):
    n_envs, size = 2, 40  # 40 // 2 = 20 rows, filled 2.5 times: wrap-around and the newest-row rule
    reference = (
        NStepReplayBuffer(size, OBS, ACT, device="cpu", n_envs=n_envs, n_steps=n_steps, gamma=0.9)
        if n_steps > 1
        else ReplayBuffer(size, OBS, ACT, device="cpu", n_envs=n_envs)
    )
    per = PrioritizedReplayBuffer(size, OBS, ACT, device="cpu", n_envs=n_envs, n_steps=n_steps, gamma=0.9)
    dual = EpisodicDualReplayBuffer(size, OBS, ACT, device="cpu", n_envs=n_envs, n_steps=n_steps, gamma=0.9, rho=0.0)
    fill([reference, per, dual], 50, n_envs)
    rows = np.arange(20).repeat(2)
    np.random.seed(3)
    envs = np.random.randint(0, n_envs, size=len(rows))  # what SB3's _get_samples draws first
    np.random.seed(3)
    expected = reference._get_samples(rows, env=None)
    ours = per._gather_slots(rows * n_envs + envs, 0.4, None)
    for field in ("observations", "actions", "next_observations", "dones", "rewards"):
        np.testing.assert_array_equal(getattr(ours, field), getattr(expected, field).numpy(), err_msg=field)
    if n_steps > 1:
        np.testing.assert_array_equal(ours.discounts, expected.discounts.numpy())
    else:
        assert ours.discounts is None and expected.discounts is None
    # Episodic buffer with rho = 0: the same draws as SB3's sample()
    for seed in range(3):
        np.random.seed(seed)
        expected = reference.sample(16)
        np.random.seed(seed)
        got = dual.sample(16)
        for field in expected._fields:
            a, b = getattr(got, field), getattr(expected, field)
            assert (a is None and b is None) or th.equal(a, b), field


def test_n_step_targets_hand_computed():
    rewards = np.array([[1.0, 2.0, 4.0], [1.0, 2.0, 4.0], [1.0, 2.0, 4.0]], dtype=np.float32)
    dones = np.array([[0, 0, 0], [0, 1, 0], [0, 0, 0]], dtype=np.float32)
    timeouts = np.array([[0, 0, 0], [0, 0, 0], [1, 0, 0]], dtype=np.float32)
    returns, discounts, last = n_step_targets(rewards, dones, timeouts, 0.5)
    np.testing.assert_allclose(returns[:, 0], [1 + 0.5 * 2 + 0.25 * 4, 1 + 0.5 * 2, 1])
    np.testing.assert_allclose(discounts[:, 0], [0.125, 0.25, 0.5])
    assert last.tolist() == [2, 1, 0]


def test_stale_priority_updates_are_dropped():
    buffer = PrioritizedReplayBuffer(4, OBS, ACT, device="cpu")
    fill([buffer], 4, 1)
    np.random.seed(0)
    stale = buffer.sample_arrays(4).indices.copy()
    fill([buffer], 2, 1, seed=1)  # overwrites slots 0 and 1
    buffer.update_priorities(stale, np.full(4, 100.0))
    leaves = buffer.tree.leaves(np.arange(4))
    for index, leaf in zip(stale, leaves[stale % 4]):
        overwritten = index % 4 in (0, 1)
        assert np.isclose(leaf, 1.0 if overwritten else (100.0 + buffer.eps) ** buffer.alpha), index
    fresh = buffer.sample_arrays(4).indices
    buffer.update_priorities(fresh, np.full(4, 2.0))
    np.testing.assert_allclose(buffer.tree.leaves(fresh % 4), (2.0 + buffer.eps) ** buffer.alpha)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -1.0])
def test_bad_priorities_refused(bad):
    buffer = per_with_priorities(np.ones(4))
    with pytest.raises(ValueError, match="priorities"):
        buffer.update_priorities(np.arange(4), np.array([1.0, bad, 1.0, 1.0]))
    obs = np.zeros((1, 3), np.float32)
    with pytest.raises(ValueError, match="priorities"):
        buffer.add(obs, obs, np.zeros((1, 1)), np.zeros(1), np.zeros(1), [{}], priorities=np.array([bad]))
    with pytest.raises(ValueError, match="one per index"):
        buffer.update_priorities(np.arange(4), np.ones(3))


def test_initial_priorities_and_running_max():
    buffer = PrioritizedReplayBuffer(8, OBS, ACT, device="cpu", n_envs=2, alpha=0.5, eps=0.0 + 1e-6)
    obs = np.zeros((2, 3), np.float32)
    infos = [{}, {}]
    buffer.add(obs, obs, np.zeros((2, 1)), np.zeros(2), np.zeros(2), infos, priorities=np.array([4.0, 9.0]))
    buffer.add(obs, obs, np.zeros((2, 1)), np.zeros(2), np.zeros(2), infos)  # the running maximum, 9
    np.testing.assert_allclose(buffer.tree.leaves(np.arange(4)), np.sqrt(np.array([4.0, 9.0, 9.0, 9.0]) + 1e-6))


def test_dict_observations_refused():
    dict_space = spaces.Dict({"a": OBS})
    for cls in (PrioritizedReplayBuffer, EpisodicDualReplayBuffer):
        with pytest.raises(ValueError, match="Dict observation"):
            cls(10, dict_space, ACT, device="cpu")


def test_per_optimize_memory_usage_and_uint8_frames():
    frames = spaces.Box(0, 255, (4, 8, 8), np.uint8)
    buffer = PrioritizedReplayBuffer(
        6, frames, ACT, device="cpu", optimize_memory_usage=True, handle_timeout_termination=False
    )
    assert buffer.observations.dtype == np.uint8 and not hasattr(buffer, "next_observations")
    for t in range(9):
        obs = np.full((1, 4, 8, 8), t, np.uint8)
        buffer.add(obs, obs + 1, np.zeros((1, 1)), np.zeros(1), np.zeros(1), [{}])
    assert buffer.tree.leaves(np.array([buffer.pos])) == 0  # its next observation was overwritten
    np.random.seed(0)
    arrays = buffer.sample_arrays(64)
    assert buffer.pos not in arrays.indices % buffer.capacity
    assert arrays.observations.dtype == np.uint8
    np.testing.assert_array_equal(arrays.next_observations, arrays.observations + 1)
    # A late update for a transition invalidated since its sample does not make it sampleable again
    late = arrays.indices.copy()
    for t in range(9, 12):
        obs = np.full((1, 4, 8, 8), t, np.uint8)
        buffer.add(obs, obs + 1, np.zeros((1, 1)), np.zeros(1), np.zeros(1), [{}])
    buffer.update_priorities(late, np.full(len(late), 50.0))
    assert buffer.tree.leaves(np.array([buffer.pos])) == 0


# --- episodic dual replay (Algorithms 1 and 2) -----------------------------------------------------------------------


def test_admission_rule_hand_values():
    assert admits_episode(-1000.0, np.zeros(0), 1)  # R_max starts at -inf: a negative return qualifies
    best = update_best_returns(-5.0, np.zeros(0), 1)
    assert not admits_episode(-7.0, best, 1) and admits_episode(-5.0, best, 1)  # R_e >= R_max
    best = update_best_returns(-3.0, update_best_returns(-7.0, best, 2), 2)
    assert best.tolist() == [-3.0, -5.0]
    assert admits_episode(-5.0, best, 2) and not admits_episode(-6.0, best, 2)


def add_episode(buffer, env_idx: int, rewards: list[float], n_envs: int, truncate: bool = False) -> None:
    """One episode of env ``env_idx`` (the other envs idle is not possible in a VecEnv: they add filler steps)."""
    for t, reward in enumerate(rewards):
        last = t == len(rewards) - 1
        obs = np.full((n_envs, 3), reward, np.float32)
        rew = np.zeros(n_envs, np.float32)
        rew[env_idx] = reward
        done = np.zeros(n_envs, bool)
        done[env_idx] = last
        infos = [{"TimeLimit.truncated": bool(last and truncate and e == env_idx)} for e in range(n_envs)]
        buffer.add(obs, obs, np.zeros((n_envs, 1)), rew, done, infos)


def test_storing_rule_on_hand_made_episodes():
    buffer = EpisodicDualReplayBuffer(1000, OBS, ACT, device="cpu", n_envs=1, hmemory_size=100)
    assert buffer.r_max == -np.inf
    add_episode(buffer, 0, [-2.0, -3.0], 1)  # R = -5: first episode, admitted
    add_episode(buffer, 0, [-4.0, -3.0], 1)  # R = -7 < -5: Memory only
    add_episode(buffer, 0, [-1.0, -1.0, -3.0], 1, truncate=True)  # R = -5 >= -5: admitted (time limit ends it too)
    add_episode(buffer, 0, [-1.0], 1)  # R = -1: admitted, R_max = -1
    assert buffer.size() == 8 and buffer.n_episodes == 4
    assert buffer.n_hmemory_episodes == 3 and buffer.r_max == -1.0
    np.testing.assert_array_equal(buffer.h_rewards[: buffer.h_size, 0], [-2, -3, -1, -1, -3, -1])
    np.testing.assert_array_equal(buffer.h_dones[: buffer.h_size, 0], [0, 1, 0, 0, 1, 1])
    np.testing.assert_array_equal(buffer.h_timeouts[: buffer.h_size, 0], [0, 0, 0, 0, 1, 0])
    np.testing.assert_array_equal(buffer.h_observations[: buffer.h_size, 0, 0], [-2, -3, -1, -1, -3, -1])


def test_per_env_episode_caches():
    buffer = EpisodicDualReplayBuffer(1000, OBS, ACT, device="cpu", n_envs=2, hmemory_size=100)
    # Interleaved episodes: env 0 returns 1+1 = 2, env 1 returns 5 then ... each env's cache is its own.
    rewards = np.array([[1.0, 2.0], [1.0, 3.0], [7.0, 0.5]], np.float32)
    dones = np.array([[False, False], [True, True], [True, False]])
    for t in range(3):
        obs = np.stack([np.full(3, 10 * t + e, np.float32) for e in range(2)])
        buffer.add(obs, obs, np.zeros((2, 1)), rewards[t], dones[t], [{}, {}])
    # t=1: env 0 ends with R=2 (admitted, R_max=2), then env 1 with R=5 (admitted); t=2: env 0 ends with R=7.
    assert buffer.n_episodes == 3 and buffer.n_hmemory_episodes == 3 and buffer.r_max == 7.0
    np.testing.assert_array_equal(buffer.h_observations[:5, 0, 0], [0, 10, 1, 11, 20])
    assert buffer.episode_lengths.tolist() == [0, 1] and buffer.episode_returns.tolist() == [0.0, 0.5]


def test_hmemory_fifo_keeps_the_end_of_long_episodes():
    buffer = EpisodicDualReplayBuffer(1000, OBS, ACT, device="cpu", hmemory_size=4)
    add_episode(buffer, 0, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 1)
    assert buffer.h_size == 4
    np.testing.assert_array_equal(np.sort(buffer.h_rewards[:, 0]), [3, 4, 5, 6])
    add_episode(buffer, 0, [30.0, 40.0], 1)  # FIFO: the two oldest leave
    np.testing.assert_array_equal(np.sort(buffer.h_rewards[:, 0]), [5, 6, 30, 40])


@pytest.mark.parametrize("rho", [0.05, 0.25, 1.0])
def test_sampling_rule_hmemory_share(rho):
    buffer = EpisodicDualReplayBuffer(1000, OBS, ACT, device="cpu", hmemory_size=100, rho=rho)
    with pytest.raises(ValueError, match="empty"):
        buffer.sample(10)
    np.random.seed(0)
    add_episode(buffer, 0, [-1.0] * 10, 1)  # admitted (first)
    add_episode(buffer, 0, [-2.0] * 90, 1)  # rejected: only in Memory, observation -2
    n = 100_000
    batch = buffer.sample(n)
    share = buffer.last_hmemory_fraction
    assert abs(share - rho) <= 6 * np.sqrt(rho * (1 - rho) / n) + 1e-12
    # Rows from HMemory are admitted transitions (-1); Memory holds 10% of those
    from_admitted = float((batch.observations[:, 0] == -1.0).float().mean())
    assert abs(from_admitted - (rho + (1 - rho) * 0.1)) < 0.01
    assert buffer.stats()["replay/hmemory_fraction"] == share


def test_sampling_rule_all_from_memory_while_hmemory_empty():
    buffer = EpisodicDualReplayBuffer(100, OBS, ACT, device="cpu", rho=1.0)
    fill([buffer], 20, 1, episode_ends=lambda t: (np.zeros(1, bool), np.zeros(1, bool)))
    buffer.sample(64)
    assert buffer.h_size == 0 and buffer.last_hmemory_fraction == 0.0


def test_episodic_bad_arguments():
    with pytest.raises(ValueError, match="rho"):
        EpisodicDualReplayBuffer(10, OBS, ACT, rho=1.5)
    with pytest.raises(ValueError, match="hmemory_size"):
        EpisodicDualReplayBuffer(10, OBS, ACT, hmemory_size=0)
    with pytest.raises(ValueError, match="hmemory_top_k"):
        EpisodicDualReplayBuffer(10, OBS, ACT, hmemory_top_k=0)


# --- stock SB3 algorithms and save/load -------------------------------------------------------------------------------


SMALL = dict(learning_starts=50, batch_size=32, train_freq=4, policy_kwargs=dict(net_arch=[16]), device="cpu", seed=0)


def test_stock_dqn_with_per_and_save_load_round_trip(tmp_path):
    model = DQN(
        "MlpPolicy",
        "CartPole-v1",
        replay_buffer_class=PrioritizedReplayBuffer,
        replay_buffer_kwargs=dict(n_steps=3, gamma=0.99),
        **SMALL,
    )
    model.learn(300)
    buffer = model.replay_buffer
    assert isinstance(buffer, PrioritizedReplayBuffer) and buffer.size() == 300
    np.random.seed(0)
    buffer.update_priorities(buffer.sample_arrays(32).indices, np.linspace(0.0, 5.0, 32))
    model.save_replay_buffer(tmp_path / "per.pkl")
    other = DQN("MlpPolicy", "CartPole-v1", replay_buffer_class=PrioritizedReplayBuffer, **SMALL)
    other.load_replay_buffer(tmp_path / "per.pkl")
    loaded = other.replay_buffer
    for level in range(buffer.tree.depth + 1):
        np.testing.assert_array_equal(loaded.tree.sums[level], buffer.tree.sums[level])
    np.testing.assert_array_equal(loaded.write_counts, buffer.write_counts)
    assert (loaded.max_priority, loaded.tree.min, loaded.pos, loaded.n_steps) == (
        buffer.max_priority,
        buffer.tree.min,
        buffer.pos,
        3,
    )
    np.random.seed(1)
    a = buffer.sample_arrays(16)
    a_copy = [x.copy() for x in a if x is not None]
    np.random.seed(1)
    b = loaded.sample_arrays(16)
    for x, y in zip(a_copy, [x for x in b if x is not None]):
        np.testing.assert_array_equal(x, y)


def test_stock_td3_with_dual_replay_random_walk_two_envs_and_save_load(tmp_path):
    from stable_baselines3.common.env_util import make_vec_env

    env = make_vec_env("Pendulum-v1", n_envs=2, seed=0)
    noise = RandomWalkActionNoise(np.zeros(1), n_envs=2, generator=np.random.default_rng(0))
    model = TD3(
        "MlpPolicy",
        env,
        replay_buffer_class=EpisodicDualReplayBuffer,
        replay_buffer_kwargs=dict(hmemory_size=1000, rho=0.15, n_steps=2, gamma=0.99),
        action_noise=noise,
        **SMALL,
    )
    model.learn(420, callback=ReplayStatsCallback())  # one episode (200 steps) per env, and a few steps
    assert model.action_noise is noise  # used as given: not deep-copied per env by SB3
    buffer = model.replay_buffer
    assert buffer.n_episodes == 2 and buffer.n_hmemory_episodes >= 1 and np.isfinite(buffer.r_max)
    assert set(buffer.stats()) >= {"replay/hmemory_size", "replay/r_max", "replay/hmemory_fraction"}
    model.save_replay_buffer(tmp_path / "dual.pkl")
    other = TD3("MlpPolicy", env, replay_buffer_class=EpisodicDualReplayBuffer, **SMALL)
    other.load_replay_buffer(tmp_path / "dual.pkl")
    loaded = other.replay_buffer
    assert (loaded.r_max, loaded.h_size, loaded.h_pos, loaded.n_hmemory_episodes, loaded.rho) == (
        buffer.r_max,
        buffer.h_size,
        buffer.h_pos,
        buffer.n_hmemory_episodes,
        0.15,
    )
    np.testing.assert_array_equal(loaded.h_observations, buffer.h_observations)
    np.testing.assert_array_equal(loaded.best_returns, buffer.best_returns)
    np.testing.assert_array_equal(loaded.episode_returns, buffer.episode_returns)


@pytest.mark.parametrize(
    "algo, buffer_class",
    [
        (TD3, PrioritizedReplayBuffer),
        (DDPG, EpisodicDualReplayBuffer),
        (DDPG, PrioritizedReplayBuffer),
        (SAC, EpisodicDualReplayBuffer),
    ],
)
def test_stock_continuous_algorithms_with_each_buffer(algo, buffer_class):
    noise = RandomWalkActionNoise(np.zeros(1)) if algo is not SAC else None
    model = algo("MlpPolicy", "Pendulum-v1", replay_buffer_class=buffer_class, action_noise=noise, **SMALL)
    model.learn(152)
    assert isinstance(model.replay_buffer, buffer_class) and model.replay_buffer.size() == 152


@pytest.mark.parametrize("optimize", [False, True])
def test_per_extend_equals_repeated_add(optimize):
    kwargs = dict(device="cpu", n_envs=2, optimize_memory_usage=optimize, handle_timeout_termination=not optimize)
    one, block = PrioritizedReplayBuffer(20, OBS, ACT, **kwargs), PrioritizedReplayBuffer(20, OBS, ACT, **kwargs)
    rng = np.random.default_rng(0)
    for steps in (3, 8, 4):  # 15 rows of 10: wraps around
        obs = rng.normal(size=(steps, 2, 3)).astype(np.float32)
        next_obs = np.concatenate([obs[1:], rng.normal(size=(1, 2, 3)).astype(np.float32)])
        action, reward = rng.uniform(-1, 1, (steps, 2, 1)), rng.normal(size=(steps, 2))
        done = rng.random((steps, 2)) < 0.3
        infos = [[{"TimeLimit.truncated": bool(d and rng.random() < 0.5)} for d in row] for row in done]
        priorities = rng.random((steps, 2))
        for t in range(steps):
            one.add(obs[t], next_obs[t], action[t], reward[t], done[t], infos[t], priorities=priorities[t])
        block.extend(obs, next_obs, action, reward, done, infos, priorities=priorities)
    names = ["observations", "actions", "rewards", "dones", "timeouts", "write_counts"]
    for name in names + ([] if optimize else ["next_observations"]):
        np.testing.assert_array_equal(getattr(block, name), getattr(one, name), err_msg=name)
    assert (block.pos, block.full, block.max_priority) == (one.pos, one.full, one.max_priority)
    for level in range(one.tree.depth + 1):
        np.testing.assert_allclose(block.tree.sums[level], one.tree.sums[level])
