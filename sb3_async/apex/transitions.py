"""Ape-X's n-step transitions, priorities and actors' ε_i as pure functions (Horgan et al. 2018,
https://arxiv.org/abs/1803.00933); the target and loss they feed are :mod:`sb3_async.common.returns`'.

Tested against hand-computed values from the paper's equations. Transitions are n-step: ``(s_t, a_t, G_t, d_t,
s_{t+n})`` with ``G_t = Σ_{k<n} γ^k r_{t+k}`` truncated at the end of an episode (Ape-X §3.1, "multi-step returns are
truncated if the episode ends in fewer than n steps"). A time-limit truncation is bootstrapped by the actor the
project's way (``γ V(s_terminal)`` added to the last reward, the transition stays done), so every stored transition
either ended its episode (``d = 1``, no bootstrap) or spans exactly n steps (bootstrap ``γ^n``).
"""

from __future__ import annotations

from collections import deque
from typing import Any, NamedTuple

import numpy as np
import torch

from sb3_async.common.masks import masked_values
from sb3_async.validation import check_int


def apex_epsilons(n_actors: int, base: float = 0.4, alpha: float = 7.0) -> np.ndarray:
    """The fixed ε of each Ape-X DQN actor: ``ε_i = base^(1 + alpha i / (N - 1))`` (Ape-X §4.1: ε = 0.4, α = 7);
    one actor gets ``base``.

    :param n_actors: number of actors N
    :param base: ε; 0.4 from the paper
    :param alpha: α; 7 from the paper
    """
    n_actors = check_int("n_actors", n_actors, 1)
    if n_actors == 1:
        return np.array([base], dtype=np.float64)
    i = np.arange(n_actors, dtype=np.float64)
    return base ** (1.0 + alpha * i / (n_actors - 1))


def discounted_return(rewards: np.ndarray, gamma: float) -> np.ndarray:
    """``Σ_k γ^k r_k`` over the last axis: the truncated n-step return ``G_t`` of Ape-X §3.1."""
    rewards = np.asarray(rewards, dtype=np.float64)
    return (rewards * gamma ** np.arange(rewards.shape[-1])).sum(axis=-1)


class NStepTransitions(NamedTuple):
    """A batch of n-step transitions (one row each)."""

    obs: np.ndarray
    actions: np.ndarray
    returns: np.ndarray
    dones: np.ndarray
    next_obs: np.ndarray
    #: legal actions of ``s_{t+n}`` (an env with action masks), else None
    next_masks: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.returns)


class NStepBuilder:
    """The actor's local n-step buffer (Ape-X appendix "Adding Data"): per env the last ``n`` ``(s, a, r)``; each step
    completes the transition of the step ``n`` steps back (``G``, ``d = 0``, ``s_{t+n}``), and the end of an episode
    completes all its pending steps with truncated returns and ``d = 1``.

    :param n_envs: envs stepped together
    :param n_steps: n
    :param gamma: discount γ
    """

    def __init__(self, n_envs: int, n_steps: int, gamma: float):
        self.n_steps, self.gamma = n_steps, gamma
        self._pending: list[deque[tuple[Any, Any, float]]] = [deque() for _ in range(n_envs)]

    def push(
        self,
        obs: Any,
        actions: np.ndarray,
        rewards: np.ndarray,
        dones: np.ndarray,
        next_obs: Any,
        next_masks: np.ndarray | None = None,
    ) -> list[tuple[Any, ...]]:
        """Add one step of every env; returns the completed transitions ``(s, a, G, d, s')``, with the action mask of
        ``s'`` as a sixth item when ``next_masks`` (``(n_envs, n_actions)``, of ``next_obs``) is given."""
        out: list[tuple[Any, ...]] = []
        for env, pending in enumerate(self._pending):
            pending.append((obs[env], actions[env], float(rewards[env])))
            last = (next_obs[env],) if next_masks is None else (next_obs[env], next_masks[env])
            if dones[env]:
                rewards_seq = np.array([step[2] for step in pending])
                for j, (s, a, _) in enumerate(pending):
                    out.append((s, a, float(discounted_return(rewards_seq[j:], self.gamma)), True, *last))
                pending.clear()
            elif len(pending) == self.n_steps:
                rewards_seq = np.array([step[2] for step in pending])
                s, a, _ = pending.popleft()
                out.append((s, a, float(discounted_return(rewards_seq, self.gamma)), False, *last))
        return out


def stack_transitions(items: list[tuple[Any, ...]]) -> NStepTransitions:
    """Completed transitions as arrays."""
    return NStepTransitions(
        obs=np.stack([item[0] for item in items]),
        actions=np.stack([np.asarray(item[1]) for item in items]),
        returns=np.array([item[2] for item in items], dtype=np.float32),
        dones=np.array([item[3] for item in items], dtype=np.float32),
        next_obs=np.stack([item[4] for item in items]),
        next_masks=np.stack([item[5] for item in items]) if len(items[0]) > 5 else None,
    )


def double_q_values(
    next_q_online: torch.Tensor, next_q_target: torch.Tensor, next_masks: torch.Tensor | np.ndarray | None = None
) -> torch.Tensor:
    """Double Q-learning's bootstrap value ``q(s', argmax_a q(s', a, θ), θ⁻)`` (van Hasselt et al. 2016; Ape-X §3.1);
    with ``next_masks`` (legal actions of ``s'``, sb3-contrib's action masks), the argmax is over the legal actions."""
    if next_masks is not None:
        next_q_online = masked_values(next_q_online, next_masks)
    return next_q_target.gather(1, next_q_online.argmax(dim=1, keepdim=True)).squeeze(1)
