"""n-step returns against hand-computed values (supp. Alg. S2/S3)."""

import numpy as np
import pytest

from sb3_async.common.returns import bootstrap_truncated_rewards, nstep_returns


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
