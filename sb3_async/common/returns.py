"""Targets and returns of the papers, as pure functions on arrays (tested against hand-computed values).

Shapes: time first, ``(n_steps, n_envs)``; ``dones[t]`` is True when the episode ended with the transition at ``t``
(terminal state or time limit). Time-limit truncations are bootstrapped the way SB3 does it: the caller adds
``γ V(s_terminal)`` to the reward of that step (:func:`bootstrap_truncated_rewards`) and the step stays done, so the
return does not leak into the next episode but still bootstraps. NumPy, because workers call these on a handful of
numbers every few steps, where a torch call costs more than the arithmetic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

import numpy as np

from sb3_async.common.masks import masked_values

if TYPE_CHECKING:
    import torch

#: The replay learners' targets and losses below are plain arithmetic: NumPy arrays and torch tensors alike.
ArrayOrTensor = TypeVar("ArrayOrTensor", np.ndarray, "torch.Tensor")


def nstep_returns(rewards: np.ndarray, dones: np.ndarray, last_values: np.ndarray, gamma: float) -> np.ndarray:
    r"""Forward-view n-step returns of a rollout segment (A3C, supp. Alg. S3; async n-step Q, supp. Alg. S2).

    For each ``t`` of the segment, the longest available return:

    .. math::
        R \leftarrow \begin{cases} 0 & \text{terminal } s_T \\ V(s_T) & \text{otherwise}\end{cases},
        \qquad R_t = r_t + \gamma R_{t+1}

    with the recursion cut (``R_{t+1} = 0``) after every step that ended an episode.

    :param rewards: ``(n_steps, n_envs)``
    :param dones: ``(n_steps, n_envs)``, True where the episode ended at that step
    :param last_values: ``(n_envs,)`` bootstrap values of the state after the segment, ``V(s_T)`` or
        ``max_a Q(s_T, a; θ⁻)``
    :param gamma: discount factor γ
    :return: ``(n_steps, n_envs)`` float32 returns ``R_t``
    """
    rewards = np.asarray(rewards, dtype=np.float32)
    dones = np.asarray(dones, dtype=bool)
    last_values = np.asarray(last_values, dtype=np.float32)
    if rewards.ndim != 2 or rewards.shape != dones.shape or rewards.shape[1:] != last_values.shape:
        raise ValueError(
            f"Shapes do not match: rewards {rewards.shape}, dones {dones.shape}, last_values {last_values.shape}; "
            "expected (n_steps, n_envs), (n_steps, n_envs) and (n_envs,)"
        )
    not_done = 1.0 - dones.astype(np.float32)
    returns = np.empty_like(rewards)
    running = last_values
    for t in range(rewards.shape[0] - 1, -1, -1):
        running = rewards[t] + gamma * not_done[t] * running
        returns[t] = running
    return returns


def gae_advantages(
    rewards: np.ndarray,
    values: np.ndarray,
    dones: np.ndarray,
    last_values: np.ndarray,
    gamma: float,
    gae_lambda: float,
) -> tuple[np.ndarray, np.ndarray]:
    r"""Generalized Advantage Estimation (Schulman et al. 2016, https://arxiv.org/abs/1506.02438, eq. 16) of a
    rollout segment, SB3's ``RolloutBuffer.compute_returns_and_advantage`` in this module's ``dones`` convention:

    .. math::
        \delta_t = r_t + \gamma (1 - d_t) V(s_{t+1}) - V(s_t), \qquad
        \hat A_t = \delta_t + \gamma \lambda (1 - d_t) \hat A_{t+1}, \qquad \hat R_t = \hat A_t + V(s_t)

    with ``V(s_T)`` = ``last_values`` after the segment and ``d_t`` = ``dones[t]`` (a time-limit truncation's
    ``γ V(s_terminal)`` is already in its reward). ``gae_lambda = 1`` gives the n-step advantage ``R_t - V(s_t)`` of
    :func:`nstep_returns` (up to float rounding; A3C calls :func:`nstep_returns` itself for λ = 1).

    :param rewards: ``(n_steps, n_envs)``
    :param values: ``(n_steps, n_envs)`` ``V(s_t)`` of the segment's states
    :param dones: ``(n_steps, n_envs)``, True where the episode ended at that step
    :param last_values: ``(n_envs,)`` ``V(s_T)`` of the state after the segment
    :param gamma: discount factor γ
    :param gae_lambda: λ in [0, 1], the bias-variance trade-off (0: one-step TD advantage, 1: n-step return)
    :return: ``(advantages, returns)``, each ``(n_steps, n_envs)`` float32
    """
    rewards = np.asarray(rewards, dtype=np.float32)
    values = np.asarray(values, dtype=np.float32)
    dones = np.asarray(dones, dtype=bool)
    last_values = np.asarray(last_values, dtype=np.float32)
    if (
        rewards.ndim != 2
        or values.shape != rewards.shape
        or dones.shape != rewards.shape
        or last_values.shape != rewards.shape[1:]
    ):
        raise ValueError(
            f"Shapes do not match: rewards {rewards.shape}, values {values.shape}, dones {dones.shape}, "
            f"last_values {last_values.shape}; expected (n_steps, n_envs) for the first three and (n_envs,)"
        )
    not_done = 1.0 - dones.astype(np.float32)
    advantages = np.empty_like(rewards)
    next_values, running = last_values, np.zeros_like(last_values)
    for t in range(rewards.shape[0] - 1, -1, -1):
        delta = rewards[t] + gamma * not_done[t] * next_values - values[t]
        running = delta + gamma * gae_lambda * not_done[t] * running
        advantages[t] = running
        next_values = values[t]
    return advantages, (advantages + values).astype(np.float32)


def bootstrap_truncated_rewards(
    rewards: np.ndarray, truncated: np.ndarray, terminal_values: np.ndarray, gamma: float
) -> np.ndarray:
    """Rewards with ``γ V(s_terminal)`` added where an episode was cut by a time limit (SB3's convention).

    :param rewards: ``(n,)`` rewards of one step
    :param truncated: ``(n,)`` True where the episode was truncated (time limit), not terminated
    :param terminal_values: ``(n,)`` value of the last observation of each truncated episode (ignored elsewhere)
    :param gamma: discount factor
    """
    rewards = np.asarray(rewards, dtype=np.float32)
    return rewards + gamma * np.where(truncated, np.asarray(terminal_values, dtype=np.float32), 0.0).astype(np.float32)


def _check_step_shapes(rewards: np.ndarray, dones: np.ndarray, next_values: np.ndarray) -> None:
    if rewards.shape != dones.shape or rewards.shape != next_values.shape:
        raise ValueError(
            f"Shapes do not match: rewards {rewards.shape}, dones {dones.shape}, next values {next_values.shape}; "
            "expected the same shape for the three"
        )


def one_step_q_targets(
    rewards: np.ndarray, dones: np.ndarray, next_q_target: np.ndarray, gamma: float, next_masks: np.ndarray | None = None
) -> np.ndarray:
    r"""Asynchronous one-step Q-learning targets (Mnih et al. 2016, Algorithm 1):

    .. math::
        y = \begin{cases} r & \text{terminal } s' \\ r + \gamma \max_{a'} Q(s', a'; \theta^-) & \text{otherwise}\end{cases}

    :param rewards: ``(n,)`` rewards (time-limit bootstraps already added, see :func:`bootstrap_truncated_rewards`)
    :param dones: ``(n,)`` True where the episode ended with the transition
    :param next_q_target: ``(n, n_actions)`` target-network values ``Q(s', ·; θ⁻)`` of the next states
    :param gamma: discount factor γ
    :param next_masks: ``(n, n_actions)`` legal actions of the next states (sb3-contrib's action masks): the max is
        over them only; None: every action
    :return: ``(n,)`` float32 targets
    """
    next_q_target = np.asarray(next_q_target, dtype=np.float32)
    if next_q_target.ndim != 2:
        raise ValueError(f"next_q_target must be (n, n_actions), got shape {next_q_target.shape}")
    if next_masks is not None:
        next_q_target = _legal_values(next_q_target, next_masks, np.asarray(dones, dtype=bool))
    return sarsa_targets(rewards, dones, next_q_target.max(axis=1), gamma)


def sarsa_targets(rewards: np.ndarray, dones: np.ndarray, next_q_target: np.ndarray, gamma: float) -> np.ndarray:
    r"""Asynchronous one-step Sarsa targets (Mnih et al. 2016, §4):

    .. math:: y = \begin{cases} r & \text{terminal } s' \\ r + \gamma Q(s', a'; \theta^-) & \text{otherwise}\end{cases}

    with ``a'`` the action the worker takes in ``s'``.

    :param rewards: ``(n,)`` rewards (time-limit bootstraps already added)
    :param dones: ``(n,)`` True where the episode ended with the transition
    :param next_q_target: ``(n,)`` ``Q(s', a'; θ⁻)`` (for :func:`one_step_q_targets`, ``max_a' Q(s', a'; θ⁻)``)
    :param gamma: discount factor γ
    :return: ``(n,)`` float32 targets
    """
    rewards = np.asarray(rewards, dtype=np.float32)
    dones = np.asarray(dones, dtype=bool)
    next_q_target = np.asarray(next_q_target, dtype=np.float32)
    _check_step_shapes(rewards, dones, next_q_target)
    return (rewards + gamma * (1.0 - dones.astype(np.float32)) * next_q_target).astype(np.float32)


def _legal_values(q: np.ndarray, masks: np.ndarray, dones: np.ndarray) -> np.ndarray:
    """``q`` ``(n, n_actions)`` with illegal actions at -inf, so that a max is over the legal ones; a row whose max is
    never used (``dones``, no bootstrap) keeps its values (a terminal state may have no legal action)."""
    masks = np.asarray(masks, dtype=bool)
    if masks.shape != q.shape:
        raise ValueError(f"Shapes do not match: Q-values {q.shape}, masks {masks.shape}")
    empty = ~masks.any(axis=1) & ~dones
    if empty.any():
        raise ValueError(f"Invalid masks: row {int(np.flatnonzero(empty)[0])} has no legal action to bootstrap from")
    return masked_values(q, masks | (dones[:, None] & ~masks.any(axis=1, keepdims=True)))


def nstep_q_targets(
    rewards: np.ndarray, dones: np.ndarray, last_q_target: np.ndarray, gamma: float, last_masks: np.ndarray | None = None
) -> np.ndarray:
    r"""Asynchronous n-step Q-learning targets (supp. Algorithm S1), forward view: for each step of the segment, the
    longest available return, bootstrapped from :math:`\max_a Q(s_T, a; \theta^-)` (0 for a terminal ``s_T``).

    :param rewards: ``(n_steps, n_envs)`` rewards (time-limit bootstraps already added)
    :param dones: ``(n_steps, n_envs)`` True where the episode ended with the transition
    :param last_q_target: ``(n_envs, n_actions)`` ``Q(s_T, ·; θ⁻)`` of the state after the segment
    :param gamma: discount factor γ
    :param last_masks: ``(n_envs, n_actions)`` legal actions of ``s_T`` (sb3-contrib's action masks): the max is over
        them only; None: every action
    :return: ``(n_steps, n_envs)`` float32 targets
    """
    last_q_target = np.asarray(last_q_target, dtype=np.float32)
    if last_q_target.ndim != 2:
        raise ValueError(f"last_q_target must be (n_envs, n_actions), got shape {last_q_target.shape}")
    if last_masks is not None:
        last_q_target = _legal_values(last_q_target, last_masks, np.zeros(len(last_q_target), dtype=bool))
    return nstep_returns(rewards, dones, last_q_target.max(axis=1), gamma)


def bootstrapped_targets(
    returns: ArrayOrTensor, dones: ArrayOrTensor, next_values: ArrayOrTensor, discount: ArrayOrTensor | float
) -> ArrayOrTensor:
    """The replay learners' target ``G_t + γ^n (1 - d_t) v(s_{t+n})``: Ape-X §3.1 (DQN) and §3.2 (DPG) with n-step
    ``G_t``; DDPG's eq. 3 (AE-DDPG) with ``n = 1``, ``G_t = r_t``.

    :param returns: ``G_t`` (``r_t`` for one step)
    :param dones: 1 where the episode ended within the n steps (no bootstrap)
    :param next_values: ``v(s_{t+n})`` from the target networks: ``q(s_{t+n}, argmax_a q(s_{t+n}, a, θ), θ⁻)`` (double
        Q), ``q(s_{t+n}, π(s_{t+n}, ψ⁻), φ⁻)`` (DPG, DDPG)
    :param discount: ``γ^n`` (or the per-sample discounts an n-step replay returns)
    """
    return returns + discount * (1.0 - dones) * next_values


def weighted_squared_loss(td_errors: ArrayOrTensor, weights: ArrayOrTensor, scale: float = 0.5) -> ArrayOrTensor:
    """The importance-weighted loss ``mean_i w_i · scale · δ_i²`` of prioritized replay (Schaul et al. 2016, Alg. 1).

    :param scale: ½ from Ape-X §3.1 (``l_t = ½ (G_t - q)²``); 1 is DDPG's eq. 2 (TD3's ``F.mse_loss`` when all
        ``w_i = 1``)
    """
    return (weights * scale * td_errors**2).mean()
