"""Targets and returns of the papers, as pure functions on arrays (tested against hand-computed values).

Shapes: time first, ``(n_steps, n_envs)``; ``dones[t]`` is True when the episode ended with the transition at ``t``
(terminal state or time limit). Time-limit truncations are bootstrapped the way SB3 does it: the caller adds
``γ V(s_terminal)`` to the reward of that step (:func:`bootstrap_truncated_rewards`) and the step stays done, so the
return does not leak into the next episode but still bootstraps. NumPy, because workers call these on a handful of
numbers every few steps, where a torch call costs more than the arithmetic.
"""

from __future__ import annotations

import numpy as np


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
