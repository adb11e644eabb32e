"""The deterministic-policy-gradient update of the replay learners (AE-DDPG and Ape-X DPG), written once.

Both train SB3's ``TD3Policy`` with one critic on replayed transitions: the critic regresses on the bootstrapped target
(DDPG's eq. 2-3, Lillicrap et al. 2016; Ape-X §3.2 with n-step returns), prioritized replay weights its loss and takes
``|δ|`` back as the new priorities (Schaul et al. 2016, Alg. 1), and the actor climbs the critic (DDPG's eq. 1). What
differs between the two is an argument: the discount (``γ`` or ``γ^n``), the loss scale (DDPG's 1, Ape-X's ½), the
actor's gradient clipping (Ape-X's appendix) and whether the replay is prioritized. The target networks are each
algorithm's own business (AE-DDPG's soft updates, Ape-X's periodic copies) and stay out of this module.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import torch as th
import torch.nn.functional as F
from stable_baselines3.td3.policies import TD3Policy

from sb3_async.common.returns import bootstrapped_targets, weighted_squared_loss
from sb3_async.common.torch_utils import prefer_fused_adam


class DPGStep(NamedTuple):
    """What one update reports: its losses and, from a prioritized replay, the new priorities."""

    critic_loss: float
    actor_loss: float
    #: ``|δ|`` per sample (flat, in the batch's order); None without importance weights (a uniform replay)
    priorities: np.ndarray | None


def dpg_update(
    policy: TD3Policy,
    observations: th.Tensor,
    actions: th.Tensor,
    returns: th.Tensor,
    dones: th.Tensor,
    next_observations: th.Tensor,
    discount: th.Tensor | float,
    weights: th.Tensor | None = None,
    loss_scale: float = 1.0,
    actor_grad_clip: float | None = None,
    actor_params: Sequence[th.Tensor] | None = None,
) -> DPGStep:
    """One critic step, then one actor step, on one batch; the optimizers of ``policy.critic`` and ``policy.actor``
    step, the target networks are only read.

    Critic: ``y = G + discount (1 - d) Q'(s', μ'(s'))`` (:func:`~sb3_async.common.returns.bootstrapped_targets`),
    ``δ = y - Q(s, a)``; with ``weights`` the loss is ``mean(w · loss_scale · δ²)`` and ``|δ|`` comes back as the
    priorities, without them it is ``loss_scale · F.mse_loss(Q, y)`` (TD3's own operation, so that AE-DDPG's update
    stays bit-identical to SB3's ``TD3.train()``). With several critics (``policy_kwargs=dict(n_critics=2)``) it is
    TD3's clipped double Q (Fujimoto et al. 2018, eq. 10): ``Q'`` is the minimum of the target critics, every critic
    regresses on ``y`` (their losses summed, as SB3's TD3) and the priorities are the first critic's ``|δ|``. Actor:
    ``-mean Q(s, μ(s))`` with the first critic, backpropagated into the actor's parameters only (the critic's weight
    gradients of that pass would be zeroed by its next step, ~a third of the pass saved), clipped element-wise to
    ``[-actor_grad_clip, actor_grad_clip]`` when given.

    :param policy: the actor-critic (its critics; the actor climbs the first, as TD3's)
    :param observations: ``s``
    :param actions: ``a``, scaled to [-1, 1] as the replay stores them
    :param returns: ``G`` (``r`` for one step); the shape of ``returns`` is that of the targets and TD errors
    :param dones: 1 where the episode ended within the transition (no bootstrap)
    :param next_observations: ``s'`` (``s_{t+n}``)
    :param discount: ``γ``, ``γ^n`` or per-sample discounts
    :param weights: prioritized replay's importance-sampling weights (shaped as ``returns``); None: a uniform replay
    :param loss_scale: 1 for DDPG's eq. 2, ½ for Ape-X's ``l = ½ δ²``
    :param actor_grad_clip: clip value of the actor's gradient; None: no clipping
    :param actor_params: ``list(policy.actor.parameters())``, when the caller has it (a loop of updates lists them once)
    """
    with th.no_grad():
        next_values = clipped_double_q(policy.critic_target(next_observations, policy.actor_target(next_observations)))
        targets = bootstrapped_targets(returns, dones, next_values.reshape(returns.shape), discount)
    q_values, *other_critics = (q.reshape(returns.shape) for q in policy.critic(observations, actions))
    td_errors: th.Tensor | None = None
    if weights is None:
        critic_loss = F.mse_loss(q_values, targets)
        for q in other_critics:
            critic_loss = critic_loss + F.mse_loss(q, targets)
        if loss_scale != 1.0:
            critic_loss = loss_scale * critic_loss
    else:
        td_errors = targets - q_values
        critic_loss = weighted_squared_loss(td_errors, weights, scale=loss_scale)
        for q in other_critics:
            critic_loss = critic_loss + weighted_squared_loss(targets - q, weights, scale=loss_scale)
    policy.critic.optimizer.zero_grad()
    critic_loss.backward()
    policy.critic.optimizer.step()
    if actor_params is None:
        actor_params = list(policy.actor.parameters())
    actor_loss = -policy.critic.q1_forward(observations, policy.actor(observations)).mean()
    policy.actor.optimizer.zero_grad()
    actor_loss.backward(inputs=actor_params)
    if actor_grad_clip is not None:
        th.nn.utils.clip_grad_value_(actor_params, actor_grad_clip)
    policy.actor.optimizer.step()
    priorities = None if td_errors is None else td_errors.detach().abs().cpu().numpy().ravel()
    return DPGStep(float(critic_loss.item()), float(actor_loss.item()), priorities)


def clipped_double_q(values: Sequence[th.Tensor]) -> th.Tensor:
    """The target critics' values of ``(s', μ'(s'))`` as the bootstrap uses them: the one critic's (DDPG), or their
    element-wise minimum with several (TD3's clipped double Q, Fujimoto et al. 2018, eq. 10), shaped ``(batch, 1)``."""
    if len(values) == 1:
        return values[0]
    return th.min(th.cat(tuple(values), dim=1), dim=1, keepdim=True).values


def ddpg_policy_kwargs(policy_kwargs: Any, net_arch: dict[str, list[int]], **defaults: Any) -> dict[str, Any]:
    """A copy of the user's ``policy_kwargs`` completed with an algorithm's defaults: its paper's ``net_arch``, the
    other ``defaults`` given, one critic (DDPG's; ``n_critics=2`` gives TD3's clipped double Q) and torch's fused Adam
    (:func:`~sb3_async.common.torch_utils.prefer_fused_adam`). What the user set wins.

    :raises TypeError: ``policy_kwargs`` is neither a dict nor None
    """
    if policy_kwargs is not None and not isinstance(policy_kwargs, dict):
        raise TypeError(f"Invalid policy_kwargs={policy_kwargs!r}: expected a dict or None")
    kwargs = dict(policy_kwargs or {})
    kwargs.setdefault("net_arch", net_arch)
    for key, value in defaults.items():
        kwargs.setdefault(key, value)
    kwargs.setdefault("n_critics", 1)
    prefer_fused_adam(kwargs)
    return kwargs
