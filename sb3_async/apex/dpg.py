"""Ape-X DPG (Horgan et al. 2018, "Distributed Prioritized Experience Replay", https://arxiv.org/abs/1803.00933, §3.2)."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.type_aliases import GymEnv, Schedule
from stable_baselines3.td3.policies import CnnPolicy, MultiInputPolicy, TD3Policy
from torch import nn

from sb3_async.apex.actor import ApeXActing
from sb3_async.apex.base import ApeXAlgorithm
from sb3_async.apex.transitions import NStepTransitions
from sb3_async.common.async_algorithm import AsyncAlgorithm, forwarded_arguments
from sb3_async.common.buffers.prioritized import PrioritizedArrays
from sb3_async.common.dpg_update import ddpg_policy_kwargs, dpg_update
from sb3_async.common.returns import bootstrapped_targets
from sb3_async.common.torch_utils import to_tensor
from sb3_async.validation import check_float


class DPGActing(ApeXActing):
    """An Ape-X DPG actor: π(s, ψ) + N(0, σ²) per action dimension; priorities from its copies of the critic."""

    def act(self, obs: np.ndarray, masks: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        with torch.no_grad():
            actions = self.policy.actor(to_tensor(obs)).numpy()
        actions = np.clip(actions + self.rng.normal(0.0, self.cfg.exploration, actions.shape), -1.0, 1.0).astype(np.float32)
        return actions, self.policy.unscale_action(actions)

    def _target_values(self, obs: Any) -> torch.Tensor:
        obs = to_tensor(obs)
        return self.policy.critic_target(obs, self.policy.actor_target(obs))[0].flatten()

    def values(self, obs: np.ndarray, masks: np.ndarray | None = None) -> np.ndarray:
        with torch.no_grad():
            return self._target_values(obs).numpy()

    def priorities(self, block: NStepTransitions) -> np.ndarray:
        with torch.no_grad():
            q = self.policy.critic(to_tensor(block.obs), torch.as_tensor(block.actions))[0].flatten()
            targets = bootstrapped_targets(
                torch.as_tensor(block.returns),
                torch.as_tensor(block.dones),
                self._target_values(block.next_obs),
                self.cfg.gamma**self.cfg.n_steps,
            )
            return (targets - q).abs().numpy()


class ApeXDPG(ApeXAlgorithm):
    """Ape-X DPG (Horgan et al. 2018, §3.2): ``n_actors`` actors with Gaussian exploration noise feed one prioritized
    replay; the learner in the main process applies the DDPG update (Lillicrap et al. 2016) on n-step returns, the
    critic loss IS-weighted, and writes the new priorities ``|δ|`` back. Networks: SB3's ``TD3Policy`` with one critic.

    :param policy: ``"MlpPolicy"`` or a ``TD3Policy`` subclass; default networks from the paper's appendix: critic
        400-300 units, actor 300-200 units, tanh activations (``policy_kwargs`` ``net_arch``/``activation_fn``)
    :param env: env id, factory, ``gym.Env`` or ``VecEnv`` with a ``Box`` action space
    :param learning_rate: Adam learning rate of actor and critic; 1e-4 (paper appendix)
    :param buffer_size: replay capacity; 1e6 (paper appendix)
    :param learning_starts: transitions before the learner starts; 100, SB3's TD3 default (the paper gives none for DPG)
    :param batch_size: 256 (paper §4.2)
    :param gamma: 0.99 (DDPG)
    :param n_steps: 5 (paper §4.2)
    :param target_update_interval: learner batches between target copies; 100 (paper appendix)
    :param actor_grad_clip: the actor's gradient clipped element-wise to [-c, c]; 1 (paper appendix)
    :param action_noise_std: σ of the actors' Gaussian noise, on actions scaled to [-1, 1]; 0.3 (paper §4.2)
    :param alpha: priority exponent; 0.6 (paper appendix); the paper evicts by priority, we evict oldest first
    :param beta: importance-sampling exponent; 0.4 (paper appendix)
    :param block_size: transitions per actor block; 50 (paper)
    :param actor_update_interval: env steps between parameter refreshes of an actor; 400 (paper §4.1)
    :param max_blocks_in_flight: blocks sent and not yet inserted before an actor waits; 4 (ours: bounds memory)
    :param max_actor_restarts: restarts of one actor within a ``learn()`` call before ``WorkerError``; 3 (ours: the
        paper restarts actors without saying how often; an actor that fails at once every time is a bug to report)
    :param replay_ratio: None (the paper: both sides as fast as they can) or transitions replayed per transition
        inserted (see :class:`~sb3_async.apex.base.ApeXAlgorithm`)
    :param n_actors: actor processes; default the CPU count
    :param n_envs_per_actor: envs per actor (1)
    Other arguments: :class:`~sb3_async.common.async_algorithm.AsyncAlgorithm`.
    """

    other_action_spaces = " (for Discrete actions: A3C, the async Q family or ApeXDQN)"

    policy_aliases: ClassVar[dict[str, type[BasePolicy]]] = {
        "MlpPolicy": TD3Policy,
        "CnnPolicy": CnnPolicy,
        "MultiInputPolicy": MultiInputPolicy,
    }
    policy: TD3Policy
    published_modules = ("actor", "critic", "actor_target", "critic_target")
    acting_class = DPGActing

    def __init__(
        self,
        policy: str | type[TD3Policy],
        env: GymEnv | str | Any | None,
        learning_rate: float | Schedule = 1e-4,
        buffer_size: int = 1_000_000,
        learning_starts: int = 100,
        batch_size: int = 256,
        gamma: float = 0.99,
        n_steps: int = 5,
        target_update_interval: int = 100,
        actor_grad_clip: float = 1.0,
        action_noise_std: float = 0.3,
        alpha: float = 0.6,
        beta: float = 0.4,
        block_size: int = 50,
        actor_update_interval: int = 400,
        max_blocks_in_flight: int = 4,
        max_actor_restarts: int = 3,
        replay_ratio: float | None = None,
        n_actors: int | None = None,
        n_envs_per_actor: int = 1,
        backend: str = "mp",
        start_method: str = "forkserver",
        backend_kwargs: dict[str, Any] | None = None,
        stats_window_size: int = 100,
        tensorboard_log: str | None = None,
        policy_kwargs: dict[str, Any] | None = None,
        verbose: int = 0,
        seed: int | None = None,
        device: torch.device | str = "auto",
        torch_threads: int | None = None,
        step_timeout: float | None = 60.0,
        _init_setup_model: bool = True,
    ):
        self.actor_grad_clip = check_float("actor_grad_clip", actor_grad_clip)
        self.action_noise_std = check_float("action_noise_std", action_noise_std)
        # The paper appendix's networks; one critic (DDPG's)
        policy_kwargs = ddpg_policy_kwargs(policy_kwargs, dict(pi=[300, 200], qf=[400, 300]), activation_fn=nn.Tanh)
        super().__init__(
            **forwarded_arguments(
                locals(), ApeXAlgorithm.__init__, AsyncAlgorithm.__init__, supported_action_spaces=(spaces.Box,)
            )
        )
        if _init_setup_model:
            self._setup_model()

    def _setup_model(self) -> None:
        super()._setup_model()
        policy = self.policy_class(self.observation_space, self.action_space, self.lr_schedule, **self.policy_kwargs)
        if not isinstance(policy, TD3Policy):
            raise TypeError(f"Invalid policy={self.policy_class.__name__}: {type(self).__name__} needs a TD3Policy subclass")
        self.policy = policy.to(self.device)
        self.policy.set_training_mode(False)

    def _get_torch_save_params(self) -> tuple[list[str], list[str]]:
        return ["policy", "policy.actor.optimizer", "policy.critic.optimizer"], []

    def _actor_exploration(self, rank: int) -> float:
        return self.action_noise_std

    def _train_batch(self, batch: PrioritizedArrays) -> tuple[float, np.ndarray]:
        policy = self.policy
        self._update_learning_rate([policy.actor.optimizer, policy.critic.optimizer])
        device = self.device
        step = dpg_update(
            policy,
            torch.as_tensor(batch.observations, device=device),
            torch.as_tensor(batch.actions, device=device),
            torch.as_tensor(batch.rewards, device=device).flatten(),
            torch.as_tensor(batch.dones, device=device).flatten(),
            torch.as_tensor(batch.next_observations, device=device),
            self.gamma**self.n_steps,
            weights=torch.as_tensor(batch.weights, device=device).flatten(),
            loss_scale=0.5,  # Ape-X §3.1: l = ½ δ²
            actor_grad_clip=self.actor_grad_clip,  # paper appendix
        )
        self._last_actor_loss = step.actor_loss
        self._check_divergence(actor_loss=step.actor_loss)
        assert step.priorities is not None  # weighted: a prioritized replay's update
        return step.critic_loss, step.priorities

    def _update_target(self) -> None:
        self.policy.actor_target.load_state_dict(self.policy.actor.state_dict())
        self.policy.critic_target.load_state_dict(self.policy.critic.state_dict())

    def _log_extra(self) -> None:
        super()._log_extra()
        if hasattr(self, "_last_actor_loss"):
            self.logger.record("train/actor_loss", self._last_actor_loss)
