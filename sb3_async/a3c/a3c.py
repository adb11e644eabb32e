"""Asynchronous Advantage Actor-Critic (A3C), Mnih et al. 2016, supplementary Algorithm S3."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import numpy as np
import torch
from gymnasium import spaces
from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy, RecurrentMultiInputActorCriticPolicy
from sb3_contrib.common.recurrent.type_aliases import RNNStates
from stable_baselines3.common.policies import ActorCriticPolicy, BasePolicy, MultiInputActorCriticPolicy
from stable_baselines3.common.type_aliases import GymEnv, Schedule
from torch.nn import functional as F

from sb3_async.a3c.recorded_activations import RecordedActivationsUpdate
from sb3_async.common.async_algorithm import AsyncAlgorithm, forwarded_arguments
from sb3_async.common.gradient_sharing import (
    GRADIENT_SHARING_ENTRIES,
    GradientSharing,
    GradientWorker,
    GradientWorkerConfig,
    Segment,
    shared_setting,
    stack_steps,
    tensor_obs,
)
from sb3_async.common.masks import mask_policy
from sb3_async.common.policies import A3CCnnLstmPolicy, A3CCnnPolicy, SoftplusGaussianPolicy
from sb3_async.common.returns import gae_advantages, nstep_returns
from sb3_async.common.torch_utils import has_categorical_head, sample_actions, to_tensor
from sb3_async.games.league import attach_opponents
from sb3_async.runtime import WorkerContext, WorkerSpec
from sb3_async.validation import check_float, check_int

SelfA3C = TypeVar("SelfA3C", bound="A3C")


@dataclass
class _A3CWorkerConfig(GradientWorkerConfig):
    ent_coef: float
    vf_coef: float
    normalize_advantage: bool
    gae_lambda: float
    use_sde: bool
    sde_sample_freq: int


def _env_major(batch: Any, n_envs: int) -> Any:
    """A time-major batch ``(n_steps * n_envs, ...)`` reordered env-major: one sequence per env, as sb3-contrib's
    recurrent policies read it (dict observations key by key)."""
    if isinstance(batch, dict):
        return {key: _env_major(value, n_envs) for key, value in batch.items()}
    shape = batch.shape[1:]
    return batch.reshape(-1, n_envs, *shape).transpose(0, 1).reshape(-1, *shape)


def _time_major(batch: torch.Tensor, n_envs: int) -> torch.Tensor:
    """The inverse of :func:`_env_major` for a flat ``(n_envs * n_steps,)`` output."""
    return batch.reshape(n_envs, -1).T.flatten()


class LstmCarry:
    """The LSTM states of a worker's envs (sb3-contrib's ``RNNStates``), carried from step to step and across
    segments; they never leave the worker.

    At each step the policy resets the state of an env whose observation starts an episode (``episode_starts``, as
    in RecurrentPPO). The loss replays a segment from the states held at its start, detached: backpropagation
    through time is truncated at the segment, t_max steps (A3C LSTM, Mnih et al. 2016 §5.1).

    :param policy: the worker's recurrent policy θ'
    :param n_envs: the worker's envs
    """

    def __init__(self, policy: RecurrentActorCriticPolicy, n_envs: int):
        self.policy = policy
        lstm = policy.lstm_actor
        shape = (lstm.num_layers, n_envs, lstm.hidden_size)
        self.states = RNNStates((torch.zeros(shape), torch.zeros(shape)), (torch.zeros(shape), torch.zeros(shape)))

    def act(self, obs: Any, episode_starts: np.ndarray) -> np.ndarray:
        """Sample actions for the envs' observations and advance their states."""
        with torch.no_grad():
            actions, _, _, self.states = self.policy(to_tensor(obs), self.states, _as_float(episode_starts))
        return actions.numpy()

    def values(self, obs: Any, envs: np.ndarray, episode_starts: np.ndarray) -> np.ndarray:
        """V(obs) of the envs ``envs`` from their critic states, the observations that follow their last step (as
        RecurrentPPO's bootstraps)."""
        vf_states = (self.states.vf[0][:, envs], self.states.vf[1][:, envs])
        with torch.no_grad():
            return self.policy.predict_values(to_tensor(obs), vf_states, _as_float(episode_starts)).flatten().numpy()

    def replay(
        self, segment: Segment, actions: torch.Tensor, states: RNNStates, episode_starts: np.ndarray
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Values, log-probabilities and entropies of a segment's steps (time-major, as the segment), evaluated with
        gradients from ``states`` and ``episode_starts`` held at its start.

        :param segment: the steps, from :meth:`GradientWorker.collect`
        :param actions: the segment's actions, time-major
        :param states: the LSTM states before the segment's first step
        :param episode_starts: whether each env's first observation of the segment starts an episode
        """
        n_envs = len(episode_starts)
        starts = np.stack([episode_starts, *segment.dones[:-1]])  # step t's observation starts an episode
        values, log_prob, entropy = self.policy.evaluate_actions(
            _env_major(tensor_obs(segment.obs), n_envs),
            _env_major(actions, n_envs),
            states,
            _as_float(starts.T.flatten()),
        )
        return (
            _time_major(values.flatten(), n_envs),
            _time_major(log_prob, n_envs),
            None if entropy is None else _time_major(entropy, n_envs),
        )


def _as_float(flags: np.ndarray) -> torch.Tensor:
    return torch.as_tensor(flags, dtype=torch.float32)


def _a3c_worker(ctx: WorkerContext, cfg: _A3CWorkerConfig) -> None:
    """A worker of supp. Algorithm S3: its ``n_envs`` envs stepped in lockstep, each segment's update from
    :meth:`A3C.loss` (one per env with ``separate_updates``)."""
    worker = GradientWorker(ctx, cfg, attach_players=attach_opponents)  # θ' and its league play games' other seats
    local = worker.policy  # θ'
    lstm = LstmCarry(local, cfg.n_envs) if isinstance(local, RecurrentActorCriticPolicy) else None
    # with action masks, every pass goes through the policy's masked categorical (acting, log-probabilities, entropy)
    masked = mask_policy(local) if worker.masks is not None else None
    categorical = lstm is None and has_categorical_head(local)
    recorded = RecordedActivationsUpdate(local) if masked is None and RecordedActivationsUpdate.supports(local) else None
    box = isinstance(cfg.action_space, spaces.Box)
    low, high = (cfg.action_space.low, cfg.action_space.high) if isinstance(cfg.action_space, spaces.Box) else (None, None)
    discrete = isinstance(cfg.action_space, spaces.Discrete)
    all_envs = np.arange(cfg.n_envs)

    steps_since_noise = 0

    def act(obs: Any) -> np.ndarray:
        nonlocal steps_since_noise
        # gSDE: new exploration noise every sde_sample_freq steps (SB3's A2C), else once per segment (below)
        if cfg.use_sde and cfg.sde_sample_freq > 0 and steps_since_noise % cfg.sde_sample_freq == 0:
            local.reset_noise(cfg.n_envs)
        steps_since_noise += 1
        if masked is not None:
            masked.masks = worker.masks
        if lstm is not None:
            return lstm.act(obs, worker.episode_starts)
        if recorded is not None:
            return recorded.act(obs)
        if masked is not None:
            if categorical:  # the masked logits sampled directly: the same distribution
                return sample_actions(local, obs, masks=worker.masks)
            with torch.no_grad():
                return local.get_distribution(to_tensor(obs)).get_actions().numpy()
        return sample_actions(local, obs)

    def terminal_value(obs: Any, envs: np.ndarray) -> np.ndarray:
        if lstm is not None:  # a truncated episode goes on into its terminal observation
            return lstm.values(obs, envs, np.zeros(len(envs), dtype=bool))
        with torch.no_grad():
            return local.predict_values(to_tensor(obs)).flatten().numpy()

    def env_action(actions: np.ndarray) -> np.ndarray:
        return np.clip(actions, low, high) if box else actions

    while not ctx.should_stop():
        worker.synchronize()  # θ' = θ
        if cfg.use_sde:  # SB3's A2C samples gSDE noise at the start of each rollout
            local.reset_noise(cfg.n_envs)
            steps_since_noise = 0
        if lstm is not None:  # what the loss replays the segment from (truncated BPTT)
            start_states, start_episode_starts = lstm.states, worker.episode_starts
        if recorded is not None:
            recorded.start_segment()
        segment = worker.collect(act, terminal_value, env_action)
        if lstm is not None:  # V(s_t; θ'_v), or 0 for a terminal s_t (via dones)
            last_values = lstm.values(segment.next_obs, all_envs, worker.episode_starts)
        else:
            last_values = terminal_value(segment.next_obs, all_envs)
        batch_actions = torch.as_tensor(stack_steps(segment.actions))
        if discrete:
            batch_actions = batch_actions.long().flatten()
        if masked is not None:  # the segment's masks, time-major as the batch
            segment_masks = torch.as_tensor(stack_steps(segment.masks))
        # asynchronous update of θ using dθ, without locks: each actor-learner's in turn (separate_updates: one per env)
        for envs, rows in worker.actor_learners(len(segment)):
            part = segment if rows is None else segment.select(envs)
            actions = batch_actions if rows is None else batch_actions[rows]
            if masked is not None:  # in the order of the batch the policy evaluates
                part_masks = segment_masks if rows is None else segment_masks[rows]
                masked.masks = _env_major(part_masks, len(envs)) if lstm is not None else part_masks
            if lstm is not None:
                states = RNNStates(*(tuple(state[:, envs] for state in pair) for pair in start_states))
                values, log_prob, entropy = lstm.replay(part, actions, states, start_episode_starts[envs])
            elif recorded is not None:
                values, log_prob, entropy = recorded.evaluate_actions(actions, rows)
            else:
                values, log_prob, entropy = local.evaluate_actions(tensor_obs(part.obs), actions)
            losses = A3C.loss(cfg, part, values.flatten(), log_prob, entropy, last_values[envs])
            after_backward = recorded.backward if recorded is not None else None
            worker.apply_gradients(losses.pop("loss"), len(part), after_backward, n_envs=len(envs))
            worker.reporter.record_train(**{name: loss.item() for name, loss in losses.items()})
        worker.reporter.maybe_flush(worker.obs)
    worker.close()


class A3C(AsyncAlgorithm):
    """Asynchronous Advantage Actor-Critic (A3C).

    Paper: Mnih et al. 2016, "Asynchronous Methods for Deep Reinforcement Learning", https://arxiv.org/abs/1602.01783
    (supplementary Algorithm S3). ``n_workers`` actor-learners, each with its own env copies and a private copy θ'
    of the shared parameters θ, collect up to ``n_steps`` transitions, compute n-step returns and apply their gradient
    to θ with a lock-free optimizer (shared RMSProp by default).

    :param policy: ``"MlpPolicy"``, ``"CnnPolicy"`` (the paper's Atari network), ``"MultiInputPolicy"``,
        ``"SoftplusMlpPolicy"`` (the paper's continuous head), the recurrent ``"MlpLstmPolicy"``, ``"CnnLstmPolicy"``
        (the paper's A3C LSTM: its Atari network, then 256 LSTM cells) and ``"MultiInputLstmPolicy"`` (sb3-contrib's
        ``RecurrentActorCriticPolicy`` family: each worker carries its envs' LSTM states across segments and
        backpropagates through each segment; ``predict(obs, state, episode_start)`` as with ``RecurrentPPO``), or a
        policy class
    :param env: env id, factory, ``gym.Env`` or ``VecEnv``; every worker builds its own copies
    :param learning_rate: learning rate or schedule of global progress; 7e-4 as SB3's A2C (the paper samples it from
        LogUniform(1e-4, 1e-2) and anneals it to 0: pass ``stable_baselines3.common.utils.LinearSchedule``)
    :param n_steps: t_max, steps per update; 5 from the paper (supp. §2)
    :param gamma: discount factor; 0.99 from the paper (supp. §2)
    :param gae_lambda: λ of Generalized Advantage Estimation (Schulman et al. 2016) for the advantages and value
        targets; 1.0 (default) gives the paper's n-step returns exactly; the zoo's A2C recipes for continuous control
        use 0.9
    :param ent_coef: entropy regularization β; 0.01 from the paper (supp. §2; 1e-4 for its continuous tasks)
    :param vf_coef: weight of the value loss; 0.5 as SB3's A2C
    :param max_grad_norm: gradient-norm clipping of each worker's gradient (None: off); 0.5 as SB3's A2C
    :param n_workers: actor-learner processes; default the CPU count (the paper: 16 threads)
    :param n_envs_per_worker: envs per worker stepped together, one batched forward pass per step (1 in the paper)
    :param separate_updates: each env of a worker is an actor-learner of its own: one update per env and segment,
        from that env's steps alone, applied in turn (each a gradient at the θ' of the worker's forward passes, as
        the paper's actor-learners apply gradients at their own snapshot), so that ``n_workers`` processes run the
        paper's ``n_workers * n_envs_per_worker`` actor-learners. False (default): one update for all the worker's
        envs. On few cores, ``n_workers=2, n_envs_per_worker=8, separate_updates=True`` runs the paper's 16
        actor-learners without 16 processes competing for the cores
    :param normalize_advantage: normalize advantages per update (not in the paper)
    :param use_sde: generalized State-Dependent Exploration (gSDE, Raffin et al. 2021) instead of action noise, as
        SB3's A2C (``MlpPolicy`` on a ``Box`` action space; not in the paper); off by default
    :param sde_sample_freq: new gSDE noise every this many steps of a worker; -1 (default, as SB3): once per segment
    :param optimizer: ``"shared_rmsprop"`` (paper default), ``"rmsprop"`` (per-worker statistics) or ``"sgd"``
        (momentum SGD), the three methods of supp. §1
    :param optimizer_kwargs: for the optimizer (see :class:`~sb3_async.common.optimizers.SharedRMSprop`:
        ``alpha=0.99`` from the paper, ``eps``, ``initial_square_avg``)
    :param backend: ``"mp"`` (processes on this machine), ``"ray"`` (a Ray cluster, ``pip install "sb3-async[ray]"``)
        or ``"serial"`` (every worker in this process, in turn: for debugging)
    :param backend_kwargs: the backend's options (see :class:`~sb3_async.common.async_algorithm.AsyncAlgorithm`)
    :param start_method: ``"forkserver"``, ``"spawn"`` or ``"fork"``
    :param pause_for_eval: park the workers while an ``EvalCallback`` evaluates inside ``learn()``, so it scores and
        saves one frozen policy as with SB3's algorithms (default True; False: evaluations run while workers train)
    :param torch_threads: torch threads of the main process during ``learn()``; None (default): the CPUs the workers
        leave free, at least 1 (logged as ``config/torch_threads``); the caller's count is restored after
    :param step_timeout: seconds one env step may take in a worker before ``learn()`` fails naming the env (default
        60; None: no limit)
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
        "MlpLstmPolicy": RecurrentActorCriticPolicy,
        "CnnLstmPolicy": A3CCnnLstmPolicy,
        "MultiInputLstmPolicy": RecurrentMultiInputActorCriticPolicy,
    }
    policy: ActorCriticPolicy
    gradient_sharing: GradientSharing  # always held (set in __init__)
    optimizer_name = shared_setting("optimizer_name")
    optimizer_kwargs = shared_setting("optimizer_kwargs")
    max_grad_norm = shared_setting("max_grad_norm")
    separate_updates = shared_setting("separate_updates")

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
        separate_updates: bool = False,
        normalize_advantage: bool = False,
        gae_lambda: float = 1.0,
        use_sde: bool = False,
        sde_sample_freq: int = -1,
        optimizer: str = "shared_rmsprop",
        optimizer_kwargs: dict[str, Any] | None = None,
        backend: str = "mp",
        start_method: str = "forkserver",
        backend_kwargs: dict[str, Any] | None = None,
        pause_for_eval: bool = True,
        torch_threads: int | None = None,
        step_timeout: float | None = 60.0,
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
        self.normalize_advantage = bool(normalize_advantage)
        self.gae_lambda = check_float("gae_lambda", gae_lambda, 0.0, 1.0)
        if not isinstance(use_sde, (bool, np.bool_)):
            raise TypeError(f"Invalid use_sde={use_sde!r}: expected a bool")
        sde_sample_freq = check_int("sde_sample_freq", sde_sample_freq, minimum=-1)
        if use_sde:  # SB3's OnPolicyAlgorithm passes it to the policy the same way
            policy_kwargs = {**(policy_kwargs or {}), "use_sde": True}
        #: the lock-free optimizer and what the workers share
        self.gradient_sharing = GradientSharing(optimizer, optimizer_kwargs, max_grad_norm, separate_updates)
        super().__init__(
            **forwarded_arguments(
                locals(),
                AsyncAlgorithm.__init__,
                device="cpu",
                supported_action_spaces=(spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary),
            )
        )
        self.use_sde, self.sde_sample_freq = bool(use_sde), sde_sample_freq  # after BaseAlgorithm's defaults
        if _init_setup_model:
            self._setup_model()

    def _setup_model(self) -> None:
        super()._setup_model()
        policy = self._make_policy(ActorCriticPolicy)
        if self.use_sde and not policy.use_sde:
            raise ValueError(f"Invalid use_sde=True: {self.policy_class.__name__} has no gSDE head (use 'MlpPolicy')")
        self.policy = policy.to(torch.device("cpu"))
        # the paper's lock-free optimizer replaces the policy's own (its statistics are saved with the model)
        self.policy.optimizer = self.gradient_sharing.make_optimizer(self.policy, self.lr_schedule(1.0))

    @staticmethod
    def loss(
        cfg: _A3CWorkerConfig,
        segment: Segment,
        values: torch.Tensor,
        log_prob: torch.Tensor,
        entropy: torch.Tensor | None,
        last_values: np.ndarray,
    ) -> dict[str, torch.Tensor]:
        """Supp. Algorithm S3's loss of one actor-learner's segment (time-major ``values``, ``log_prob``, ``entropy``;
        ``last_values``: V(s_t; θ'_v) after it, 0 for a terminal s_t via the dones), with its parts."""
        rewards, dones = np.stack(segment.rewards), np.stack(segment.dones)
        if cfg.gae_lambda == 1.0:  # the paper's n-step returns, exactly
            returns = torch.as_tensor(nstep_returns(rewards, dones, last_values, cfg.gamma)).flatten()
            advantages = returns - values.detach()
        else:
            segment_values = values.detach().numpy().reshape(rewards.shape)
            gae, gae_returns = gae_advantages(rewards, segment_values, dones, last_values, cfg.gamma, cfg.gae_lambda)
            advantages, returns = torch.as_tensor(gae).flatten(), torch.as_tensor(gae_returns).flatten()
        if cfg.normalize_advantage and advantages.numel() > 1:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        policy_loss = -(advantages * log_prob).mean()  # ∇ log π(a_i|s_i; θ') (R - V(s_i; θ'_v))
        value_loss = F.mse_loss(values, returns)  # ∂(R - V(s_i; θ'_v))² / ∂θ'_v
        entropy_loss = -entropy.mean() if entropy is not None else log_prob.mean()
        loss = policy_loss + cfg.ent_coef * entropy_loss + cfg.vf_coef * value_loss
        return dict(loss=loss, policy_loss=policy_loss, value_loss=value_loss, entropy_loss=entropy_loss)

    def _worker_specs(self) -> list[WorkerSpec]:
        cfg = _A3CWorkerConfig(
            **self._worker_policy_config(self.n_steps, self.gamma),
            **self.gradient_sharing.worker_config(self.policy.optimizer),
            ent_coef=self.ent_coef,
            vf_coef=self.vf_coef,
            normalize_advantage=self.normalize_advantage,
            gae_lambda=self.gae_lambda,
            use_sde=self.use_sde,
            sde_sample_freq=self.sde_sample_freq,
        )
        shared = self.gradient_sharing.shared(self.policy, self.policy.optimizer)
        return [
            WorkerSpec(_a3c_worker, cfg, shared, name=f"a3c-{rank}", **GRADIENT_SHARING_ENTRIES)
            for rank in range(self.n_workers)
        ]
