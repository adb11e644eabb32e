"""Ape-X DQN (Horgan et al. 2018, "Distributed Prioritized Experience Replay", https://arxiv.org/abs/1803.00933, §3.1)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.type_aliases import GymEnv, Schedule
from stable_baselines3.dqn.policies import DQNPolicy

from sb3_async.apex.actor import ApeXActing
from sb3_async.apex.base import ApeXAlgorithm
from sb3_async.apex.policies import DuelingCnnPolicy, DuelingDQNPolicy
from sb3_async.apex.transitions import (
    NStepTransitions,
    apex_epsilons,
    double_q_values,
)
from sb3_async.common.async_algorithm import AsyncAlgorithm, forwarded_arguments
from sb3_async.common.buffers.masked import MaskedPrioritizedReplayBuffer
from sb3_async.common.buffers.prioritized import PrioritizedArrays
from sb3_async.common.exploration import epsilon_greedy
from sb3_async.common.masks import masked_argmax, masked_epsilon_greedy
from sb3_async.common.policies import with_target_synced
from sb3_async.common.returns import bootstrapped_targets, weighted_squared_loss
from sb3_async.common.torch_utils import clip_grad_norm, to_tensor
from sb3_async.validation import check_float


def double_q_td_errors(
    q_net: Callable[[Any], torch.Tensor],
    q_net_target: Callable[[Any], torch.Tensor],
    obs: Any,
    actions: torch.Tensor,
    returns: torch.Tensor,
    dones: torch.Tensor,
    next_obs: Any,
    discount: float,
    next_masks: torch.Tensor | np.ndarray | None = None,
) -> torch.Tensor:
    """Ape-X DQN's n-step double-Q TD errors (§3.1): ``δ = G + discount (1 - d) q(s', argmax_a' q(s', a'; θ); θ⁻)
    - q(s, a; θ)``, the argmax over the legal actions with ``next_masks``; the gradient flows through ``q(s, a; θ)``
    only. The actors' initial priorities are ``|δ|``; the learner's loss is their weighted square."""
    with torch.no_grad():
        next_values = double_q_values(q_net(next_obs), q_net_target(next_obs), next_masks)
        targets = bootstrapped_targets(returns, dones, next_values, discount)
    q = q_net(obs).gather(1, actions.long().reshape(-1, 1)).squeeze(1)
    return targets - q


def double_q_loss(
    q_net: Callable[[Any], torch.Tensor],
    q_net_target: Callable[[Any], torch.Tensor],
    batch: PrioritizedArrays,
    discount: float,
    device: torch.device,
    next_masks: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The learner's loss on a prioritized batch: ``mean_i w_i ½ δ_i²`` (Ape-X §3.1, :func:`double_q_td_errors`,
    importance-weighted); returns the loss and ``δ``."""
    td_errors = double_q_td_errors(
        q_net,
        q_net_target,
        torch.as_tensor(batch.observations, device=device),
        torch.as_tensor(batch.actions, device=device).flatten(),
        torch.as_tensor(batch.rewards, device=device).flatten(),
        torch.as_tensor(batch.dones, device=device).flatten(),
        torch.as_tensor(batch.next_observations, device=device),
        discount,
        next_masks,
    )
    return weighted_squared_loss(td_errors, torch.as_tensor(batch.weights, device=device).flatten()), td_errors


class DQNActing(ApeXActing):
    """An Ape-X DQN actor: ε_i-greedy on its copy of q(·, θ); priorities from its copies of θ and θ⁻."""

    def _q(self, obs: Any, target: bool = False) -> torch.Tensor:
        return (self.policy.q_net_target if target else self.policy.q_net)(to_tensor(obs))

    def act(self, obs: np.ndarray, masks: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        epsilon = np.asarray(self.cfg.exploration)
        if masks is not None:  # ε-greedy over the legal actions
            with torch.no_grad():
                greedy = masked_argmax(self._q(obs).numpy(), masks)
            actions = masked_epsilon_greedy(greedy, epsilon, masks, self.rng)
            return actions, actions
        with torch.no_grad():
            greedy = self._q(obs).argmax(dim=1).numpy()
        actions = epsilon_greedy(greedy, epsilon, int(self.cfg.action_space.n), self.rng)  # type: ignore[attr-defined]
        return actions, actions

    def values(self, obs: np.ndarray, masks: np.ndarray | None = None) -> np.ndarray:
        with torch.no_grad():
            return double_q_values(self._q(obs), self._q(obs, target=True), masks).numpy()

    def priorities(self, block: NStepTransitions) -> np.ndarray:
        with torch.no_grad():
            td_errors = double_q_td_errors(
                self._q,
                lambda obs: self._q(obs, target=True),
                block.obs,
                torch.as_tensor(block.actions),
                torch.as_tensor(block.returns),
                torch.as_tensor(block.dones),
                block.next_obs,
                self.cfg.gamma**self.cfg.n_steps,
                block.next_masks,
            )
            return td_errors.abs().numpy()


class ApeXDQN(ApeXAlgorithm, epsilon_greedy=True):
    """Ape-X DQN (Horgan et al. 2018, Algorithms 1 and 2, §3.1): ``n_actors`` actors with fixed ε_i-greedy exploration
    feed one prioritized replay; the learner in the main process trains a dueling network with double Q-learning on
    n-step returns, IS-weighted, and writes the new priorities back.

    :param policy: ``"MlpPolicy"`` (dueling MLP), ``"CnnPolicy"`` (dueling Nature CNN, the paper's Atari network) or a
        ``DQNPolicy`` subclass
    :param env: env id, factory, ``gym.Env`` or ``VecEnv`` with a ``Discrete`` action space
    :param learning_rate: 0.00025 / 4 (paper appendix)
    :param buffer_size: replay capacity; 1e6, SB3's DQN default (the paper soft-limits a PNG-compressed replay at 2e6)
    :param learning_starts: transitions in the replay before the learner starts; 100, SB3's DQN default (as Ape-X
        DPG's). The paper's 50 000 (appendix) is a few seconds of its 360 actors; with a few actors and a budget of
        thousands of steps the learner would never start (sb3-contrib's masked identity test, 3000 steps: 7.5, random
        play, against 49 with 100). The zoo's Atari entries set 50 000
    :param batch_size: 512 (paper §4.1)
    :param gamma: 0.99 (DQN, the paper gives no other)
    :param n_steps: 3 (paper §4.1)
    :param target_update_interval: learner batches between target copies; 2500 (paper appendix)
    :param max_grad_norm: gradient norm clipping; 40 (paper appendix)
    :param exploration_base: ε of ε_i = ε^(1 + α i / (N - 1)); 0.4 (paper §4.1)
    :param exploration_alpha: α; 7 (paper §4.1)
    :param alpha: priority exponent; 0.6 (paper §4.1)
    :param beta: importance-sampling exponent; 0.4 (paper §4.1)
    :param block_size: transitions per actor block; 50 (paper §4.1)
    :param actor_update_interval: env steps between parameter refreshes of an actor; 400 (paper §4.1)
    :param max_blocks_in_flight: blocks sent and not yet inserted before an actor waits; 4 (ours: bounds memory)
    :param max_actor_restarts: restarts of one actor within a ``learn()`` call before ``WorkerError``; 3 (ours: the
        paper restarts actors without saying how often; an actor that fails at once every time is a bug to report)
    :param replay_ratio: None (the paper: both sides as fast as they can) or transitions replayed per transition
        inserted (see :class:`~sb3_async.apex.base.ApeXAlgorithm`)
    :param n_actors: actor processes; default the CPU count
    :param n_envs_per_actor: envs per actor, their inference batched (1). The paper's actors step one env each, so
        ε_i indexes env copies: with N = ``n_actors * n_envs_per_actor`` copies, env j of actor r explores with
        ε_{r * n_envs_per_actor + j}
    :param policy_kwargs: for the policy; by default the paper's centered RMSProp (decay 0.95, eps 1.5e-7, no momentum,
        appendix) as ``optimizer_class``/``optimizer_kwargs``; pass ``optimizer_class=torch.optim.Adam`` for SB3's DQN one
    Other arguments: :class:`~sb3_async.common.async_algorithm.AsyncAlgorithm`.
    """

    other_action_spaces = " (for Box actions: A3C, ApeXDPG or AEDDPG)"

    policy_aliases: ClassVar[dict[str, type[BasePolicy]]] = {"MlpPolicy": DuelingDQNPolicy, "CnnPolicy": DuelingCnnPolicy}
    policy: DQNPolicy
    published_modules = ("q_net", "q_net_target")
    acting_class = DQNActing

    def __init__(
        self,
        policy: str | type[DQNPolicy],
        env: GymEnv | str | Any | None,
        learning_rate: float | Schedule = 0.00025 / 4,
        buffer_size: int = 1_000_000,
        learning_starts: int = 100,
        batch_size: int = 512,
        gamma: float = 0.99,
        n_steps: int = 3,
        target_update_interval: int = 2500,
        max_grad_norm: float = 40.0,
        exploration_base: float = 0.4,
        exploration_alpha: float = 7.0,
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
        self.max_grad_norm = check_float("max_grad_norm", max_grad_norm)
        self.exploration_base = check_float("exploration_base", exploration_base, 0.0, 1.0)
        self.exploration_alpha = check_float("exploration_alpha", exploration_alpha)
        if policy_kwargs is not None and not isinstance(policy_kwargs, dict):
            raise TypeError(f"Invalid policy_kwargs={policy_kwargs!r}: expected a dict or None")
        policy_kwargs = dict(policy_kwargs or {})
        if "optimizer_class" not in policy_kwargs:  # the paper's centered RMSProp (appendix)
            policy_kwargs["optimizer_class"] = torch.optim.RMSprop
            policy_kwargs.setdefault("optimizer_kwargs", dict(alpha=0.95, eps=1.5e-7, centered=True, momentum=0.0))
        super().__init__(
            **forwarded_arguments(
                locals(), ApeXAlgorithm.__init__, AsyncAlgorithm.__init__, supported_action_spaces=(spaces.Discrete,)
            )
        )
        if _init_setup_model:
            self._setup_model()

    def _setup_model(self) -> None:
        super()._setup_model()
        self.policy = with_target_synced(self._make_policy(DQNPolicy).to(self.device))
        self.policy.set_training_mode(False)
        self._q_parameters = list(self.policy.q_net.parameters())  # clipped after each backward pass

    def _excluded_save_params(self) -> list[str]:
        return [*super()._excluded_save_params(), "_q_parameters"]

    def _epsilons(self) -> np.ndarray:
        """ε_i of every env copy, actor by actor: the paper's actors step one env each, so its i indexes env copies."""
        return apex_epsilons(self.n_actors * self.n_envs_per_worker, self.exploration_base, self.exploration_alpha)

    def _actor_exploration(self, rank: int) -> np.ndarray:
        k = self.n_envs_per_worker
        return self._epsilons()[rank * k : (rank + 1) * k]

    @property
    def exploration_rate(self) -> float:
        """ε of ``predict(deterministic=False)`` and of ``rollout/exploration_rate``: the mean of the env copies' ε_i."""
        return float(np.mean(self._epsilons()))

    def _train_batch(self, batch: PrioritizedArrays) -> tuple[float, np.ndarray]:
        self._update_learning_rate(self.policy.optimizer)
        next_masks = None
        if isinstance(self.replay_buffer, MaskedPrioritizedReplayBuffer):  # an env with action masks
            next_masks = torch.as_tensor(self.replay_buffer.next_masks(batch.indices), device=self.device)
        discount = self.gamma**self.n_steps
        loss, td_errors = double_q_loss(self.policy.q_net, self.policy.q_net_target, batch, discount, self.device, next_masks)
        self.policy.optimizer.zero_grad()
        loss.backward()
        self._check_divergence(gradient_norm=clip_grad_norm(self._q_parameters, self.max_grad_norm))
        self.policy.optimizer.step()
        return float(loss.item()), td_errors.detach().abs().cpu().numpy()

    def _update_target(self) -> None:
        self.policy.q_net_target.load_state_dict(self.policy.q_net.state_dict())
