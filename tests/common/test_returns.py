"""n-step returns (supp. Alg. S2/S3) and GAE (Schulman et al. 2016) against hand-computed values."""

import numpy as np
import pytest

from sb3_async.common.returns import (
    bootstrap_truncated_rewards,
    gae_advantages,
    nstep_q_targets,
    nstep_returns,
    one_step_q_targets,
    sarsa_targets,
)


def test_nstep_returns_bootstrap_from_last_value():
    # R = V(s_3) = 10; R_2 = 1 + 0.5 * 10 = 6; R_1 = 2 + 0.5 * 6 = 5; R_0 = 3 + 0.5 * 5 = 5.5
    returns = nstep_returns(np.array([[3.0], [2.0], [1.0]]), np.zeros((3, 1), bool), np.array([10.0]), gamma=0.5)
    assert returns[:, 0].tolist() == pytest.approx([5.5, 5.0, 6.0])


def test_nstep_returns_cut_at_episode_end():
    # env 0 ends at t=1: R_1 = r_1 = 2 (no bootstrap), R_0 = 1 + 0.9 * 2; t=2 starts a new episode: R_2 = 3 + 0.9 * 4
    # env 1 never ends: R_2 = 1 + 0.9 * 5, R_1 = 1 + 0.9 * R_2, R_0 = 1 + 0.9 * R_1
    rewards = np.array([[1.0, 1.0], [2.0, 1.0], [3.0, 1.0]])
    dones = np.array([[False, False], [True, False], [False, False]])
    returns = nstep_returns(rewards, dones, np.array([4.0, 5.0]), gamma=0.9)
    assert returns[:, 0].tolist() == pytest.approx([1 + 0.9 * 2, 2.0, 3 + 0.9 * 4])
    r2 = 1 + 0.9 * 5
    r1 = 1 + 0.9 * r2
    assert returns[:, 1].tolist() == pytest.approx([1 + 0.9 * r1, r1, r2])


def test_terminal_last_step_ignores_bootstrap():
    returns = nstep_returns(np.array([[1.0], [1.0]]), np.array([[False], [True]]), np.array([100.0]), gamma=1.0)
    assert returns[:, 0].tolist() == pytest.approx([2.0, 1.0])


def test_truncation_bootstraps_from_terminal_value():
    rewards = bootstrap_truncated_rewards(np.array([1.0, 1.0]), np.array([True, False]), np.array([10.0, 99.0]), 0.9)
    assert rewards.tolist() == pytest.approx([10.0, 1.0])


def test_shape_mismatch_is_an_error():
    with pytest.raises(ValueError, match="Shapes"):
        nstep_returns(np.zeros((3, 2)), np.zeros((3, 2), bool), np.zeros(3), gamma=0.9)


def test_one_step_q_targets():
    # y = r + γ max_a' Q(s', a'; θ⁻), and r alone at a terminal s'
    # step 0: 1 + 0.9 * max(2, 5) = 5.5; step 1 terminal: -1; step 2: 0 + 0.9 * max(-3, -4) = -2.7
    next_q = np.array([[2.0, 5.0], [100.0, 100.0], [-3.0, -4.0]])
    targets = one_step_q_targets(np.array([1.0, -1.0, 0.0]), np.array([False, True, False]), next_q, gamma=0.9)
    assert targets.tolist() == pytest.approx([5.5, -1.0, -2.7])
    assert targets.dtype == np.float32


def test_sarsa_targets_use_the_next_action_value():
    # y = r + γ Q(s', a'; θ⁻) with a' the action taken next: 1 + 0.5 * 2 = 2 (not max = 5); terminal: r
    targets = sarsa_targets(np.array([1.0, 3.0]), np.array([False, True]), np.array([2.0, 7.0]), gamma=0.5)
    assert targets.tolist() == pytest.approx([2.0, 3.0])


def test_nstep_q_targets_bootstrap_from_target_max():
    # R = max_a Q(s_3, a; θ⁻) = 4; R_2 = 1 + 0.5 * 4 = 3; R_1 = 0 + 0.5 * 3 = 1.5; R_0 = 2 + 0.5 * 1.5 = 2.75
    # env 1 ends at t=1: R_1 = 5, R_0 = 1 + 0.5 * 5 = 3.5; R_2 = 2 + 0.5 * max(-1, -2) = 1.5
    rewards = np.array([[2.0, 1.0], [0.0, 5.0], [1.0, 2.0]])
    dones = np.array([[False, False], [False, True], [False, False]])
    targets = nstep_q_targets(rewards, dones, np.array([[4.0, 1.0], [-1.0, -2.0]]), gamma=0.5)
    assert targets[:, 0].tolist() == pytest.approx([2.75, 1.5, 3.0])
    assert targets[:, 1].tolist() == pytest.approx([3.5, 5.0, 1.5])


def test_truncation_bootstraps_from_the_target_network():
    # A time limit at step 0: the caller adds γ max_a Q(s_terminal, a; θ⁻) = 0.9 * 10 to r; the step stays done.
    rewards = bootstrap_truncated_rewards(np.array([1.0]), np.array([True]), np.array([10.0]), 0.9)
    targets = one_step_q_targets(rewards, np.array([True]), np.array([[50.0, 60.0]]), gamma=0.9)
    assert targets.tolist() == pytest.approx([10.0])


def test_q_target_shapes_are_checked():
    with pytest.raises(ValueError, match="next_q_target"):
        one_step_q_targets(np.zeros(3), np.zeros(3, bool), np.zeros(3), 0.9)
    with pytest.raises(ValueError, match="Shapes do not match"):
        sarsa_targets(np.zeros(3), np.zeros(3, bool), np.zeros(2), 0.9)
    with pytest.raises(ValueError, match="last_q_target"):
        nstep_q_targets(np.zeros((2, 1)), np.zeros((2, 1), bool), np.zeros(1), 0.9)


def test_gae_hand_computed_with_terminal():
    # gamma 0.5, lambda 0.5, V = [0.5, 1, 1.5], V(s_3) = 2, r = [1, 2, 3]
    # env 0 (no end): d_2 = 3 + 0.5*2 - 1.5 = 2.5, A_2 = 2.5; d_1 = 2 + 0.5*1.5 - 1 = 1.75, A_1 = 1.75 + 0.25*2.5
    #   = 2.375; d_0 = 1 + 0.5*1 - 0.5 = 1, A_0 = 1 + 0.25*2.375 = 1.59375; returns A + V
    # env 1 ends at t=1: d_1 = 2 - 1 = 1, A_1 = 1 (no look-ahead); A_0 = 1 + 0.25*1 = 1.25; t=2 as env 0
    rewards = np.array([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]])
    values = np.array([[0.5, 0.5], [1.0, 1.0], [1.5, 1.5]])
    dones = np.array([[False, False], [False, True], [False, False]])
    advantages, returns = gae_advantages(rewards, values, dones, np.array([2.0, 2.0]), gamma=0.5, gae_lambda=0.5)
    assert advantages[:, 0].tolist() == pytest.approx([1.59375, 2.375, 2.5])
    assert returns[:, 0].tolist() == pytest.approx([2.09375, 3.375, 4.0])
    assert advantages[:, 1].tolist() == pytest.approx([1.25, 1.0, 2.5])
    assert returns[:, 1].tolist() == pytest.approx([1.75, 2.0, 4.0])
    assert advantages.dtype == returns.dtype == np.float32


def test_gae_truncation_bootstraps_from_terminal_value():
    # env truncated at t=1 with V(s_terminal) = 4: r_1 becomes 2 + 0.5*4 = 4, d_1 = 4 - 1 = 3, A_1 = 3;
    # A_0 = (1 + 0.5*1 - 0.5) + 0.25*3 = 1.75; the next episode's values do not leak in
    r1 = bootstrap_truncated_rewards(np.array([2.0]), np.array([True]), np.array([4.0]), gamma=0.5)
    rewards = np.array([[1.0], r1, [3.0]])
    values = np.array([[0.5], [1.0], [1.5]])
    dones = np.array([[False], [True], [False]])
    advantages, _ = gae_advantages(rewards, values, dones, np.array([2.0]), gamma=0.5, gae_lambda=0.5)
    assert advantages[:, 0].tolist() == pytest.approx([1.75, 3.0, 2.5])


def test_gae_limits():
    rng = np.random.default_rng(0)
    rewards, values = rng.normal(size=(6, 3)), rng.normal(size=(6, 3))
    dones = rng.random((6, 3)) < 0.3
    last = rng.normal(size=3)
    # lambda 1: the n-step advantage R_t - V(s_t), targets the n-step returns
    advantages, returns = gae_advantages(rewards, values, dones, last, gamma=0.9, gae_lambda=1.0)
    nstep = nstep_returns(rewards, dones, last, gamma=0.9)
    np.testing.assert_allclose(returns, nstep, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(advantages, nstep - values.astype(np.float32), rtol=1e-5, atol=1e-5)
    # lambda 0: the one-step TD error
    advantages, _ = gae_advantages(rewards, values, dones, last, gamma=0.9, gae_lambda=0.0)
    next_values = np.vstack([values[1:], last[None]])
    np.testing.assert_allclose(advantages, rewards + 0.9 * ~dones * next_values - values, rtol=1e-5, atol=1e-6)


def test_gae_shapes_are_checked():
    with pytest.raises(ValueError, match="Shapes"):
        gae_advantages(np.zeros((3, 2)), np.zeros((3, 1)), np.zeros((3, 2), bool), np.zeros(2), 0.9, 0.9)
