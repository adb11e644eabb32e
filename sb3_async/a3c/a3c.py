"""Asynchronous Advantage Actor-Critic (A3C), Mnih et al. 2016, supplementary Algorithm S3."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.policies import ActorCriticPolicy, BasePolicy, MultiInputActorCriticPolicy
from stable_baselines3.common.type_aliases import GymEnv, Schedule
from torch.nn import functional as F

from sb3_async.common.async_algorithm import AsyncAlgorithm, StatsReporter, check_float, check_int
from sb3_async.common.env_util import EnvRecipe
from sb3_async.common.optimizers import OPTIMIZER_NAMES, WorkerOptimizer, _AsyncOptimizer, as_async_optimizer, make_optimizer
from sb3_async.common.policies import A3CCnnPolicy, SoftplusGaussianPolicy
from sb3_async.common.returns import bootstrap_truncated_rewards, nstep_returns
from sb3_async.common.runtime import WorkerContext, WorkerSpec
from sb3_async.common.torch_utils import build_worker_policy, clip_grad_norm, sample_actions, to_tensor

SelfA3C = TypeVar("SelfA3C", bound="A3C")


@dataclass
class _A3CWorkerConfig:
    env_recipe: EnvRecipe
    n_envs: int
    policy_class: type[ActorCriticPolicy]
    observation_space: spaces.Space
    action_space: spaces.Space
    policy_kwargs: dict[str, Any]
    lr_schedule: Schedule
    n_steps: int
    gamma: float
    ent_coef: float
    vf_coef: float
    max_grad_norm: float | None
    normalize_advantage: bool
    optimizer: tuple[type[_AsyncOptimizer], dict[str, Any]]
    optimizer_shared: bool


def _stack(items: list[Any]) -> Any:
    """``(n_steps, n_envs, ...)`` arrays flattened to ``(n_steps * n_envs, ...)`` (dict observations key by key)."""
    if isinstance(items[0], dict):
        return {key: _stack([item[key] for item in items]) for key in items[0]}
    stacked = np.stack(items)
    return stacked.reshape(stacked.shape[0] * stacked.shape[1], *stacked.shape[2:])


def _a3c_worker(ctx: WorkerContext, cfg: _A3CWorkerConfig) -> None:
    """One actor-learner of supp. Algorithm S3; ``n_envs`` envs stepped in lockstep share each update."""
    env = cfg.env_recipe.make_vec_env(cfg.n_envs, seed=ctx.base_seed + ctx.rank * cfg.n_envs)
    local = build_worker_policy(
        cfg.policy_class, cfg.observation_space, cfg.action_space, cfg.lr_schedule, cfg.policy_kwargs
    )  # θ'
    local.set_training_mode(True)
    shared_params: list[torch.Tensor] = ctx.shared["params"]  # type: ignore[assignment]
    local_params = list(local.parameters())
    optimizer = WorkerOptimizer(*cfg.optimizer, shared_params, ctx.shared["optimizer_state"], cfg.optimizer_shared)  # type: ignore[arg-type]
    reporter = StatsReporter(ctx, env_offset=ctx.rank * cfg.n_envs)
    box = isinstance(cfg.action_space, spaces.Box)
    low, high = (cfg.action_space.low, cfg.action_space.high) if isinstance(cfg.action_space, spaces.Box) else (None, None)
    discrete = isinstance(cfg.action_space, spaces.Discrete)

    obs = env.reset()
    while not ctx.should_stop():
        with torch.no_grad():
            torch._foreach_copy_(local_params, shared_params)  # synchronize θ' = θ
        obs_list, action_list, reward_list, done_list = [], [], [], []
        for _ in range(cfg.n_steps):
            actions = sample_actions(local, obs)
            env_actions = np.clip(actions, low, high) if box else actions
            new_obs, rewards, dones, infos = env.step(env_actions)
            rewards = rewards.astype(np.float32)
            truncated = [i for i in np.flatnonzero(dones) if infos[i].get("TimeLimit.truncated", False)]
            if truncated:  # bootstrap from V(s_terminal) at time limits, as SB3 does
                terminal = to_tensor(_stack([[infos[i]["terminal_observation"] for i in truncated]]))
                with torch.no_grad():
                    terminal_values = np.zeros(cfg.n_envs, dtype=np.float32)
                    terminal_values[truncated] = local.predict_values(terminal).flatten().numpy()
                mask = np.zeros(cfg.n_envs, dtype=bool)
                mask[truncated] = True
                rewards = bootstrap_truncated_rewards(rewards, mask, terminal_values, cfg.gamma)
            reporter.record_infos(dones, infos)
            obs_list.append(obs)
            action_list.append(actions)
            reward_list.append(rewards)
            done_list.append(dones)
            obs = new_obs
            if cfg.n_envs == 1 and dones[0]:
                break  # "until terminal s_t or t - t_start == t_max"
        n = len(obs_list)
        with torch.no_grad():
            last_values = local.predict_values(to_tensor(obs)).flatten().numpy()
        returns = torch.as_tensor(nstep_returns(np.stack(reward_list), np.stack(done_list), last_values, cfg.gamma)).flatten()
        batch_actions = torch.as_tensor(_stack(action_list))
        if discrete:
            batch_actions = batch_actions.long().flatten()
        values, log_prob, entropy = local.evaluate_actions(to_tensor(_stack(obs_list)), batch_actions)
        values = values.flatten()
        advantages = returns - values.detach()
        if cfg.normalize_advantage and advantages.numel() > 1:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        policy_loss = -(advantages * log_prob).mean()  # ∇ log π(a_i|s_i; θ') (R - V(s_i; θ'_v))
        value_loss = F.mse_loss(values, returns)  # ∂(R - V(s_i; θ'_v))² / ∂θ'_v
        entropy_loss = -entropy.mean() if entropy is not None else log_prob.mean()
        loss = policy_loss + cfg.ent_coef * entropy_loss + cfg.vf_coef * value_loss
        for param in local_params:
            param.grad = None
        loss.backward()
        if cfg.max_grad_norm is not None:
            clip_grad_norm(local_params, cfg.max_grad_norm)
        # Asynchronous update of θ using dθ, without locks.
        optimizer.step([param.grad for param in local_params], cfg.lr_schedule(ctx.progress_remaining))
        ctx.add_steps(n * cfg.n_envs)
        reporter.record_train(policy_loss=policy_loss.item(), value_loss=value_loss.item(), entropy_loss=entropy_loss.item())
        reporter.maybe_flush(obs)
    reporter.maybe_flush(obs, force=True)
    env.close()


class A3C(AsyncAlgorithm):
    """Asynchronous Advantage Actor-Critic (A3C).

    Paper: Mnih et al. 2016, "Asynchronous Methods for Deep Reinforcement Learning", https://arxiv.org/abs/1602.01783
    (supplementary Algorithm S3). ``n_workers`` actor-learners, each with its own env copies and a private copy θ'
    of the shared parameters θ, collect up to ``n_steps`` transitions, compute n-step returns and apply their gradient
    to θ with a lock-free optimizer (shared RMSProp by default).

    :param policy: ``"MlpPolicy"``, ``"CnnPolicy"`` (the paper's Atari network), ``"MultiInputPolicy"``,
        ``"SoftplusMlpPolicy"`` (the paper's continuous head), or a policy class
    :param env: env id, factory, ``gym.Env`` or ``VecEnv``; every worker builds its own copies
    :param learning_rate: learning rate or schedule of global progress; 7e-4 as SB3's A2C (the paper samples it from
        LogUniform(1e-4, 1e-2) and anneals it to 0: pass ``stable_baselines3.common.utils.LinearSchedule``)
    :param n_steps: t_max, steps per update; 5 from the paper (supp. §2)
    :param gamma: discount factor; 0.99 from the paper (supp. §2)
    :param ent_coef: entropy regularization β; 0.01 from the paper (supp. §2; 1e-4 for its continuous tasks)
    :param vf_coef: weight of the value loss; 0.5 as SB3's A2C
    :param max_grad_norm: gradient-norm clipping of each worker's gradient (None: off); 0.5 as SB3's A2C
    :param n_workers: actor-learner processes; default the CPU count (the paper: 16 threads)
    :param n_envs_per_worker: envs per worker stepped together, one batched forward pass per step (1 in the paper)
    :param normalize_advantage: normalize advantages per update (not in the paper)
    :param optimizer: ``"shared_rmsprop"`` (paper default), ``"rmsprop"`` (per-worker statistics) or ``"sgd"``
        (momentum SGD), the three methods of supp. §1
    :param optimizer_kwargs: for the optimizer (see :class:`~sb3_async.common.optimizers.SharedRMSprop`:
        ``alpha=0.99`` from the paper, ``eps``, ``initial_square_avg``)
    :param backend: ``"mp"`` (processes on this machine)
    :param start_method: ``"forkserver"``, ``"spawn"`` or ``"fork"``
    :param stats_window_size: episodes averaged for ``rollout/`` logging
    :param tensorboard_log: TensorBoard log folder
    :param policy_kwargs: passed to the policy
    :param verbose: 0 silent, 1 training info
    :param seed: base seed; worker ``i`` uses ``seed + i``
    :param device: ignored for training (workers run on CPU); the networks stay on CPU
    :param _init_setup_model: build the networks on creation
    """

    policy_aliases: ClassVar[dict[str, type[BasePolicy]]] = {
        "MlpPolicy": ActorCriticPolicy,
        "CnnPolicy": A3CCnnPolicy,
        "MultiInputPolicy": MultiInputActorCriticPolicy,
        "SoftplusMlpPolicy": SoftplusGaussianPolicy,
    }
    policy: ActorCriticPolicy

    def __init__(
        self,
        policy: str | type[ActorCriticPolicy],
        env: GymEnv | str | Any | None,
        learning_rate: float | Schedule = 7e-4,
        n_steps: int = 5,
        gamma: float = 0.99,
        ent_coef: float = 0.01,
        vf_coef: float = 0.5,
        max_grad_norm: float | None = 0.5,
        n_workers: int | None = None,
        n_envs_per_worker: int = 1,
        normalize_advantage: bool = False,
        optimizer: str = "shared_rmsprop",
        optimizer_kwargs: dict[str, Any] | None = None,
        backend: str = "mp",
        start_method: str = "forkserver",
        stats_window_size: int = 100,
        tensorboard_log: str | None = None,
        policy_kwargs: dict[str, Any] | None = None,
        verbose: int = 0,
        seed: int | None = None,
        device: torch.device | str = "cpu",
        _init_setup_model: bool = True,
    ):
        self.n_steps = check_int("n_steps", n_steps)
        self.gamma = check_float("gamma", gamma, 0.0, 1.0)
        self.ent_coef = check_float("ent_coef", ent_coef)
        self.vf_coef = check_float("vf_coef", vf_coef)
        self.max_grad_norm = None if max_grad_norm is None else check_float("max_grad_norm", max_grad_norm)
        if optimizer not in OPTIMIZER_NAMES:
            raise ValueError(f"Invalid optimizer={optimizer!r}: expected one of {', '.join(OPTIMIZER_NAMES)}")
        self.optimizer_name = optimizer
        self.optimizer_kwargs = dict(optimizer_kwargs or {})
        self.normalize_advantage = bool(normalize_advantage)
        super().__init__(
            policy,
            env,
            learning_rate,
            n_workers=n_workers,
            n_envs_per_worker=n_envs_per_worker,
            backend=backend,
            start_method=start_method,
            policy_kwargs=policy_kwargs,
            stats_window_size=stats_window_size,
            tensorboard_log=tensorboard_log,
            verbose=verbose,
            seed=seed,
            device="cpu",
            supported_action_spaces=(spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary),
        )
        if _init_setup_model:
            self._setup_model()

    def _setup_model(self) -> None:
        super()._setup_model()
        policy = self.policy_class(self.observation_space, self.action_space, self.lr_schedule, **self.policy_kwargs)
        if not isinstance(policy, ActorCriticPolicy):
            raise TypeError(f"Invalid policy={self.policy_class.__name__}: A3C needs an ActorCriticPolicy subclass")
        self.policy = policy.to(torch.device("cpu"))
        # The policy's own optimizer is replaced by the paper's lock-free one (its statistics are saved with the model).
        self.policy.optimizer = make_optimizer(
            self.optimizer_name, self.policy.parameters(), lr=self.lr_schedule(1.0), **self.optimizer_kwargs
        )

    def _get_torch_save_params(self) -> tuple[list[str], list[str]]:
        return ["policy", "policy.optimizer"], []

    def _share_state(self) -> None:
        self.policy.share_memory()
        as_async_optimizer(self.policy.optimizer).share_memory()

    def _worker_specs(self) -> list[WorkerSpec]:
        optimizer = as_async_optimizer(self.policy.optimizer)
        cfg = _A3CWorkerConfig(
            env_recipe=self._env_recipe,  # type: ignore[arg-type]
            n_envs=self.n_envs_per_worker,
            policy_class=self.policy_class,  # type: ignore[arg-type]
            observation_space=self.observation_space,
            action_space=self.action_space,
            policy_kwargs=self.policy_kwargs,
            lr_schedule=self.lr_schedule,
            n_steps=self.n_steps,
            gamma=self.gamma,
            ent_coef=self.ent_coef,
            vf_coef=self.vf_coef,
            max_grad_norm=self.max_grad_norm,
            normalize_advantage=self.normalize_advantage,
            optimizer=(type(optimizer), optimizer.hyperparameters()),
            optimizer_shared=optimizer.shared,
        )
        shared = {
            "params": list(self.policy.parameters()),
            "optimizer_state": optimizer.state_tensors(),
        }
        return [WorkerSpec(_a3c_worker, cfg, shared, name=f"a3c-{rank}") for rank in range(self.n_workers)]
