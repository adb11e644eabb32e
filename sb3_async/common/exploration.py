"""ε-greedy exploration of the asynchronous value-based methods (Mnih et al. 2016, supp. §2).

"The value based methods sampled the exploration rate ε from a distribution taking three values ε1, ε2, ε3 with
probabilities 0.4, 0.3, 0.3. The values of ε1, ε2, ε3 were annealed from 1 to 0.1, 0.01, 0.5 respectively over the
first four million frames." Each env draws its final ε once (each of the paper's threads steps one env; a worker here
steps several); every env anneals linearly from the initial ε.
Pure functions, tested against hand-computed values.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import numpy as np

FloatOrArray = TypeVar("FloatOrArray", float, np.ndarray)

#: Final exploration rates and their probabilities (supp. §2).
PAPER_FINAL_EPSILONS: tuple[float, ...] = (0.1, 0.01, 0.5)
PAPER_FINAL_EPSILON_PROBS: tuple[float, ...] = (0.4, 0.3, 0.3)


def check_epsilons(values: Sequence[float], probs: Sequence[float] | None) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Validated ``(values, probs)`` of a final-ε distribution; equal probabilities when ``probs`` is None.

    :raises ValueError: naming ``exploration_final_eps`` or ``exploration_final_eps_probs``
    """
    values = tuple(float(v) for v in values)
    if not values or any(not 0.0 <= v <= 1.0 for v in values):
        raise ValueError(f"Invalid exploration_final_eps={values!r}: expected one or more values in [0, 1]")
    probs = tuple(float(p) for p in probs) if probs is not None else tuple(1.0 / len(values) for _ in values)
    if len(probs) != len(values) or any(p < 0 for p in probs) or not np.isclose(sum(probs), 1.0):
        raise ValueError(
            f"Invalid exploration_final_eps_probs={probs!r}: expected {len(values)} non-negative probabilities summing "
            "to 1, one per value of exploration_final_eps"
        )
    return values, probs


def sample_final_epsilons(
    n_workers: int, values: Sequence[float], probs: Sequence[float], rng: np.random.Generator
) -> np.ndarray:
    """``n_workers`` final ε (one per env of the asynchronous Q methods), drawn independently from ``values`` with
    ``probs``."""
    return rng.choice(np.asarray(values, dtype=np.float64), size=n_workers, p=np.asarray(probs, dtype=np.float64))


def linear_epsilon(progress_remaining: float, initial: float, final: FloatOrArray, fraction: float) -> FloatOrArray:
    """ε annealed linearly from ``initial`` to ``final`` over the first ``fraction`` of training, then constant.

    :param progress_remaining: 1 at the start of training, 0 at the end (SB3's convention)
    :param final: the final ε, or an array of them (one per env): the result has its shape
    :param fraction: share of training over which ε is annealed (0: ``final`` at once)
    """
    progress = 1.0 - progress_remaining
    if fraction <= 0 or progress >= fraction:
        return final
    return initial + (final - initial) * progress / fraction


def epsilon_greedy(greedy_actions: np.ndarray, epsilon: FloatOrArray, n_actions: int, rng: np.random.Generator) -> np.ndarray:
    """``greedy_actions`` with each replaced, with probability ``epsilon`` (one for all, or one per action), by a
    uniformly random action."""
    explore = rng.random(len(greedy_actions)) < epsilon
    if not explore.any():
        return greedy_actions
    actions = greedy_actions.copy()
    actions[explore] = rng.integers(n_actions, size=int(explore.sum()))
    return actions


def epsilon_greedy_like(greedy: np.ndarray, epsilon: float, n_actions: int, rng: np.random.Generator) -> np.ndarray:
    """:func:`epsilon_greedy` for what a policy's ``predict()`` returned (a 0-d array for one observation, a 1-d array
    for a batch): the result has the same type, dtype and shape, as SB3's ``DQN.predict`` returns."""
    greedy = np.asarray(greedy)
    return epsilon_greedy(np.atleast_1d(greedy), epsilon, n_actions, rng).reshape(greedy.shape)
