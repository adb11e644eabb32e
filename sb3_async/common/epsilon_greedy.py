"""What the value-based algorithms (the async Q family, Ape-X DQN) answer to ``predict()``: ε-greedy actions.

Both answer ``predict()`` as SB3's ``DQN`` does and log ``rollout/exploration_rate``; they differ only in how ε is
set (annealed on global progress, or a fixed ε_i per env), which each gives as its ``exploration_rate``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.policies import BasePolicy

from sb3_async.common.exploration import epsilon_greedy_like
from sb3_async.common.masks import masked_argmax, masked_epsilon_greedy, predict_masks, rows_for


def epsilon_greedy_predict(
    policy: BasePolicy,
    action_space: spaces.Space,
    epsilon: float,
    observation: np.ndarray | dict[str, np.ndarray],
    deterministic: bool = False,
    action_masks: np.ndarray | None = None,
) -> np.ndarray:
    """The actions of SB3's ``DQN.predict`` for a Q-network ``policy`` (which keeps no state): greedy actions; with
    ``deterministic=False``, each replaced by a random action with probability ``epsilon``. With ``action_masks``
    (sb3-contrib's ``MaskablePPO.predict`` convention: bools of shape ``(n_actions,)`` for every observation, or
    ``(n_envs, n_actions)``), the greedy action is the best legal one and the random one is drawn among the legal
    ones."""
    if action_masks is not None:
        masks = predict_masks(action_masks, action_space)
        return _masked_epsilon_greedy(policy, epsilon, observation, masks, deterministic)
    actions, _ = policy.predict(observation, deterministic=True)  # a Q-network keeps no state
    if deterministic:
        return actions
    n_actions = int(action_space.n)  # type: ignore[attr-defined]
    return epsilon_greedy_like(actions, epsilon, n_actions, np.random.default_rng())


def _masked_epsilon_greedy(
    policy: Any, epsilon: float, observation: np.ndarray | dict[str, np.ndarray], masks: np.ndarray, deterministic: bool
) -> np.ndarray:
    """``predict()`` with action masks ``(1 or n_obs, n_actions)``: the same output shape as without."""
    policy.set_training_mode(False)
    obs_tensor, vectorized = policy.obs_to_tensor(observation)
    with torch.no_grad():
        q_values = policy.q_net(obs_tensor).cpu().numpy()
    masks = rows_for(masks, len(q_values))
    actions = masked_argmax(q_values, masks)
    if not deterministic:
        actions = masked_epsilon_greedy(actions, epsilon, masks, np.random.default_rng())
    return actions if vectorized else actions.squeeze(axis=0)
