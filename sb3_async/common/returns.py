"""Targets and returns of the papers, as pure functions on tensors (tested against hand-computed values).

Shapes: time first, ``(n_steps, n_envs)``; ``dones[t]`` is True when the episode ended with the transition at ``t``
(terminal state or time limit). Time-limit truncations are bootstrapped the way SB3 does it: the caller adds
``γ V(s_terminal)`` to the reward of that step and marks the step done, so the return does not leak into the next
episode but still bootstraps (see :func:`bootstrap_truncated_rewards`).
"""

from __future__ import annotations

import torch


def nstep_returns(rewards: torch.Tensor, dones: torch.Tensor, last_values: torch.Tensor, gamma: float) -> torch.Tensor:
    r"""Forward-view n-step returns of a rollout segment (A3C, supp. Alg. S3; async n-step Q, Alg. S2).

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
    :return: ``(n_steps, n_envs)`` returns ``R_t``
    """
    if rewards.shape != dones.shape or rewards.shape[1:] != last_values.shape:
        raise ValueError(
            f"Shapes do not match: rewards {tuple(rewards.shape)}, dones {tuple(dones.shape)}, "
            f"last_values {tuple(last_values.shape)}"
        )
    not_done = 1.0 - dones.to(rewards.dtype)
    returns = torch.empty_like(rewards)
    running = last_values.to(rewards.dtype)
    for t in range(rewards.shape[0] - 1, -1, -1):
        running = rewards[t] + gamma * not_done[t] * running
        returns[t] = running
    return returns


def bootstrap_truncated_rewards(
    rewards: torch.Tensor, truncated: torch.Tensor, terminal_values: torch.Tensor, gamma: float
) -> torch.Tensor:
    """Rewards with ``γ V(s_terminal)`` added where an episode was cut by a time limit (SB3's convention).

    :param rewards: ``(n,)`` rewards of one step
    :param truncated: ``(n,)`` True where the episode was truncated (time limit), not terminated
    :param terminal_values: ``(n,)`` value of the last observation of each truncated episode (any value elsewhere)
    :param gamma: discount factor
    """
    return rewards + gamma * truncated.to(rewards.dtype) * terminal_values.to(rewards.dtype)
