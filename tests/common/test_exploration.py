"""ε-greedy exploration of the async value-based methods (supp. §2) against hand-computed values."""

import numpy as np
import pytest

from sb3_async.common.exploration import (
    PAPER_FINAL_EPSILON_PROBS,
    PAPER_FINAL_EPSILONS,
    check_epsilons,
    epsilon_greedy,
    linear_epsilon,
    sample_final_epsilons,
)


def test_paper_distribution():
    assert PAPER_FINAL_EPSILONS == (0.1, 0.01, 0.5) and PAPER_FINAL_EPSILON_PROBS == (0.4, 0.3, 0.3)


def test_final_epsilons_follow_the_probabilities():
    samples = sample_final_epsilons(30_000, PAPER_FINAL_EPSILONS, PAPER_FINAL_EPSILON_PROBS, np.random.default_rng(0))
    assert set(np.unique(samples)) == {0.1, 0.01, 0.5}
    frequencies = [np.mean(samples == value) for value in PAPER_FINAL_EPSILONS]
    assert frequencies == pytest.approx([0.4, 0.3, 0.3], abs=0.015)
    same_seed = sample_final_epsilons(16, PAPER_FINAL_EPSILONS, PAPER_FINAL_EPSILON_PROBS, np.random.default_rng(3))
    assert (
        same_seed.tolist() == sample_final_epsilons(16, (0.1, 0.01, 0.5), (0.4, 0.3, 0.3), np.random.default_rng(3)).tolist()
    )


def test_linear_annealing():
    # from 1 to 0.1 over the first 10% of training: halfway through that (5% of training) ε = 0.55
    assert linear_epsilon(1.0, 1.0, 0.1, 0.1) == pytest.approx(1.0)
    assert linear_epsilon(0.95, 1.0, 0.1, 0.1) == pytest.approx(0.55)
    assert linear_epsilon(0.9, 1.0, 0.1, 0.1) == pytest.approx(0.1)
    assert linear_epsilon(0.2, 1.0, 0.5, 0.1) == pytest.approx(0.5)
    assert linear_epsilon(1.0, 1.0, 0.01, 0.0) == pytest.approx(0.01)


def test_epsilon_greedy():
    rng = np.random.default_rng(0)
    greedy = np.full(10_000, 2)
    assert np.array_equal(epsilon_greedy(greedy, 0.0, 4, rng), greedy)
    fully_random = epsilon_greedy(greedy, 1.0, 4, rng)
    assert np.bincount(fully_random, minlength=4) / len(greedy) == pytest.approx([0.25] * 4, abs=0.02)
    # ε = 0.2: greedy kept with probability 0.8 + 0.2 / 4 = 0.85
    assert np.mean(epsilon_greedy(greedy, 0.2, 4, rng) == 2) == pytest.approx(0.85, abs=0.015)
    assert np.array_equal(greedy, np.full(10_000, 2))  # input untouched


def test_check_epsilons():
    assert check_epsilons((0.1, 0.5), None) == ((0.1, 0.5), (0.5, 0.5))
    with pytest.raises(ValueError, match="exploration_final_eps="):
        check_epsilons((1.5,), None)
    with pytest.raises(ValueError, match="exploration_final_eps_probs"):
        check_epsilons((0.1, 0.5), (0.3, 0.3))
