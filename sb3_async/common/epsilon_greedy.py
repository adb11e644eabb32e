"""What the value-based algorithms (the async Q family, Ape-X DQN) show users of their ε-greedy exploration.

Both answer ``predict()`` as SB3's ``DQN`` does and log ``rollout/exploration_rate``; they differ only in how ε is
set (annealed on global progress, or a fixed ε_i per env), which each gives as :attr:`EpsilonGreedyPredict.exploration_rate`.
"""

from __future__ import annotations

from abc import abstractmethod

import numpy as np
import torch
from stable_baselines3.common.base_class import BaseAlgorithm

from sb3_async.common.exploration import epsilon_greedy_like
from sb3_async.common.masks import masked_argmax, masked_epsilon_greedy, predict_masks, rows_for


class EpsilonGreedyPredict(BaseAlgorithm):
    """SB3's ``DQN.predict`` and the ``rollout/exploration_rate`` log on top of a Q-network policy; a mixin placed
    before the algorithm's base class."""

    @property
    @abstractmethod
    def exploration_rate(self) -> float:
        """ε of ``predict(deterministic=False)`` and of ``rollout/exploration_rate``."""

    def predict(
        self,
        observation: np.ndarray | dict[str, np.ndarray],
        state: tuple[np.ndarray, ...] | None = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = False,
        action_masks: np.ndarray | None = None,
    ) -> tuple[np.ndarray, tuple[np.ndarray, ...] | None]:
        """Greedy actions; with ``deterministic=False``, each replaced by a random action with probability
        :attr:`exploration_rate` (ε-greedy, as SB3's DQN). With ``action_masks`` (sb3-contrib's ``MaskablePPO.predict``
        convention: bools of shape ``(n_actions,)`` for every observation, or ``(n_envs, n_actions)``), the greedy
        action is the best legal one and the random one is drawn among the legal ones."""
        if action_masks is not None:
            return self._predict_masked(observation, predict_masks(action_masks, self.action_space), deterministic), state
        actions, state = self.policy.predict(observation, state, episode_start, deterministic=True)
        if deterministic:
            return actions, state
        n_actions = int(self.action_space.n)  # type: ignore[attr-defined]
        return epsilon_greedy_like(actions, self.exploration_rate, n_actions, np.random.default_rng()), state

    def _predict_masked(
        self, observation: np.ndarray | dict[str, np.ndarray], masks: np.ndarray, deterministic: bool
    ) -> np.ndarray:
        """``predict()`` with action masks ``(1 or n_obs, n_actions)``: the same output shape as without."""
        policy = self.policy
        policy.set_training_mode(False)
        obs_tensor, vectorized = policy.obs_to_tensor(observation)
        with torch.no_grad():
            q_values = policy.q_net(obs_tensor).cpu().numpy()  # type: ignore[operator]
        masks = rows_for(masks, len(q_values))
        actions = masked_argmax(q_values, masks)
        if not deterministic:
            actions = masked_epsilon_greedy(actions, self.exploration_rate, masks, np.random.default_rng())
        return actions if vectorized else actions.squeeze(axis=0)

    def _log_extra(self) -> None:
        super()._log_extra()  # type: ignore[misc]  # defined by the class this mixin is placed before
        self.logger.record("rollout/exploration_rate", self.exploration_rate)
