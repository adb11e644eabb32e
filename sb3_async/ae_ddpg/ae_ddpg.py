"""AE-DDPG (Zhang et al., "Asynchronous Episodic Deep Deterministic Policy Gradient", https://arxiv.org/abs/1903.00827).

One actor-critic pair (SB3's ``TD3Policy`` with DDPG settings, trained by TD3's ``train()``) and many envs stepped
asynchronously in an :class:`~sb3_async.env_pool.AsyncEnvPool` (§IV-A): the actor acts, in one batched forward
pass, on whichever envs have finished their step, sends them their next actions, and the learner runs its gradient
steps while those envs step. Each transition goes to the replay as it arrives; the episodic dual replay's per-env
caches (Algorithm 1's ``B_i``) are kept by the collection (:mod:`sb3_async.ae_ddpg.collector`), since the envs'
transitions arrive interleaved. The update is the one Ape-X DPG uses too (:func:`sb3_async.common.dpg_update.dpg_update`).
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

import gymnasium as gym
import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.buffers import ReplayBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.noise import ActionNoise, VectorizedActionNoise
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.type_aliases import GymEnv, MaybeCallback, RolloutReturn, Schedule, TrainFreq
from stable_baselines3.common.vec_env import VecEnv, VecTransposeImage
from stable_baselines3.td3.policies import CnnPolicy, MlpPolicy, TD3Policy
from stable_baselines3.td3.td3 import TD3

from sb3_async.ae_ddpg.arguments import (
    check_pool_arguments,
    check_replay_and_noise,
    check_updates_per_transition,
    rho_for_n_envs,
)
from sb3_async.ae_ddpg.collector import EpisodeCaches, PoolCollector
from sb3_async.ae_ddpg.pool_env import make_pool_vec_env
from sb3_async.common.async_metrics import AsyncMetrics
from sb3_async.common.buffers.ages import sample_ages_of
from sb3_async.common.buffers.episodic import EpisodicDualReplayBuffer
from sb3_async.common.buffers.prioritized import PrioritizedReplayBuffer
from sb3_async.common.callbacks import with_live_progress_bar
from sb3_async.common.divergence import DivergenceGuard, warn_if_learning_rate_too_high
from sb3_async.common.dpg_update import ddpg_policy_kwargs, dpg_update
from sb3_async.common.masks import check_masked_action_space
from sb3_async.common.noise import RandomWalkActionNoise
from sb3_async.common.observations import SB3_OBSERVATION_SPACES, check_finite_observations, check_observation_space
from sb3_async.common.save_util import (
    PathLike,
    backend_checked_apart,
    load_checked,
    load_replay,
    save_model_atomically,
    save_replay_atomically,
)
from sb3_async.common.torch_utils import check_torch_threads, learner_cpu_settings, soft_update
from sb3_async.env_pool import AsyncEnvPool
from sb3_async.env_pool.factories import load_pickled_env
from sb3_async.env_pool.vec_env import PoolVecEnv
from sb3_async.validation import check_float, check_int, check_replay_sizes, check_seed

SelfAEDDPG = TypeVar("SelfAEDDPG", bound="AEDDPG")

#: Models saved by earlier versions rebuild their pickled env through this name.
_load_pickled_env = load_pickled_env


class AEDDPG(TD3):
    """
    Asynchronous Episodic DDPG (`Zhang et al. <https://arxiv.org/abs/1903.00827>`_): one actor-critic pair, ``n_envs``
    envs stepped asynchronously (§IV-A), episodic dual replay (§IV-B, Algorithms 1 and 2) and random-walk action noise
    (§IV-C, eq. 10). The update is DDPG's (eq. 1-4), run by SB3's TD3 ``train()`` with ``policy_delay=1``, no target
    policy smoothing and one critic, as SB3's DDPG.

    Collection: the envs live in an :class:`~sb3_async.env_pool.AsyncEnvPool`. Each collection receives the envs
    whose step is done (``recv(min_ready)``, oldest first), stores their transitions, acts on all of them in one
    batched forward pass and sends their actions; the gradient steps then run while those envs step. A slow env
    never holds the others back. Callbacks are called once per ``n_envs`` transitions collected (SB3's rhythm: the
    RL Zoo divides ``eval_freq`` by ``n_envs``), with ``dones``/``infos`` of length ``n_envs`` holding each finished
    episode once, at its env's index.

    Ablations (§V-C) are arguments: ``replay_buffer_class`` (``EpisodicDualReplayBuffer``, ``ReplayBuffer`` or
    ``PrioritizedReplayBuffer``, the latter with the importance-weighted critic loss and priority updates),
    ``action_noise`` (``RandomWalkActionNoise`` or any SB3 noise, one stream per env) and ``n_envs``.

    :param policy: ``"MlpPolicy"`` or a ``TD3Policy`` subclass; default networks from §V-B (MuJoCo): actor
        (256, 256, 128), critic (256, 128), ReLU, one critic
    :param env: an env id, a factory, a ``gym.Env`` (copied), a ``DummyVecEnv`` (its first env copied), or an
        ``AsyncEnvPool`` (or its ``as_vec_env()``) with ``autoreset=True``
    :param n_envs: number of envs (the paper's interaction threads); default 16 (§V-C) for ids, factories and envs
    :param learning_rate: Adam learning rate of actor and critic; 1e-4 (§V-B, MuJoCo)
    :param buffer_size: capacity of Memory; 1e6 (§V-B)
    :param learning_starts: transitions collected (random actions) before learning; 100, SB3's TD3 default (the paper
        gives none)
    :param batch_size: 128 (§V-B, MuJoCo)
    :param tau: soft update coefficient (eq. 4); 1e-3 (§V-B)
    :param gamma: 0.99 (§V-B)
    :param train_freq: train after every ``train_freq`` transitions (or ``(n, "episode")``) collected; 1: after each
        receive of the ready envs
    :param gradient_steps: gradient steps per training; -1 (default): as many as transitions collected since the last
        one (one update per env step, as SB3's TD3 with one env; the paper gives no ratio). Deterministic whatever the
        timing of the envs.
    :param updates_per_transition: with ``gradient_steps=-1``, gradient steps per transition collected (fractions carried
        over to the next training, so the total is exact); 1.0 (default). The paper fixes no ratio ("balance the speed of
        data generation and the speed of data utilization", §IV-B); more than 1 spends the wall clock that parallel
        collection saves on more updates per sample
    :param action_noise: ``"random_walk"`` (default): :class:`RandomWalkActionNoise` with one stream per env (§IV-C; its
        sigma 0.05 and reflection at the bounds chosen by measurement, docs/guide/replay.md); a
        :class:`RandomWalkActionNoise` (built without ``n_envs``: given one stream per env), any SB3 ``ActionNoise``
        (vectorised per env as SB3 does), or None
    :param replay_buffer_class: ``EpisodicDualReplayBuffer`` (default, §IV-B), ``ReplayBuffer`` or
        ``PrioritizedReplayBuffer`` (or subclasses). All envs write into one Memory (the paper's), so n-step returns and
        ``optimize_memory_usage`` are refused (a look-ahead would cross envs)
    :param replay_buffer_kwargs: for the replay; ``EpisodicDualReplayBuffer``'s ``rho`` defaults to
        :func:`rho_for_n_envs` (0.05 for 1 env to 0.25 for 16), its ``hmemory_size`` to 5e4 (§V-B)
    :param min_ready: envs to wait for at each receive; 1 (default): act on whichever envs are ready (§IV-A)
    :param pool_kwargs: for the :class:`AsyncEnvPool` built from an id, factory or env (``n_hosts``, ``start_method``,
        ``on_error``, ``env_kwargs``)
    :param backend: where the pool built from an id, factory or env steps its envs: ``"mp"`` (default), env host
        processes on this machine; ``"ray"``, Ray actors anywhere in a Ray cluster (``pip install "sb3-async[ray]"``),
        the learner and the actor-critic staying in this process (see the pool's ``backend`` and docs/guide/ray.md);
        ``"serial"``, every env in this process (the pool's ``n_hosts=0``; ``pool_kwargs`` asking for env host
        processes are refused), for debugging. A given pool keeps its own
    :param backend_kwargs: options of the backend (``"ray"``: ``address``, ``init_kwargs``, ``num_cpus_per_worker``,
        ``start_timeout``; see :class:`AsyncEnvPool`)
    :param stats_window_size: episodes in the rollout statistics
    :param tensorboard_log: tensorboard log folder
    :param policy_kwargs: for the policy
    :param verbose: verbosity
    :param seed: seed; env ``i`` of the pool is seeded with ``seed + i``
    :param device: torch device of the learner
    :param torch_threads: torch threads of this process during ``learn()``; None (default): the CPUs the pool's env
        processes on this machine leave free, at least 1 (logged as ``config/torch_threads``); the caller's count is
        restored after
    :param step_timeout: seconds an env's step may stay in flight; past it ``learn()`` raises ``StepTimeout``
        naming the env (default 60; None: no limit)
    """

    saved_class_marker: ClassVar[str | None] = "min_ready"  # only AEDDPG saves it
    policy_aliases: ClassVar[dict[str, type[BasePolicy]]] = {
        "MlpPolicy": MlpPolicy,
        "CnnPolicy": CnnPolicy,
    }
    #: SB3's observation spaces but ``Dict``: the Memory holds one observation column.
    supported_observation_spaces: ClassVar[tuple[type[spaces.Space], ...]] = tuple(
        cls for cls in SB3_OBSERVATION_SPACES if cls is not spaces.Dict
    )
    policy: TD3Policy
    env: PoolVecEnv | VecTransposeImage | None  # type: ignore[assignment]  # SB3 wraps image envs in VecTransposeImage
    min_ready: int  # envs to wait for at each receive
    pool_kwargs: dict[str, Any]  # for the pools built here
    backend: str
    backend_kwargs: dict[str, Any]
    step_timeout: float | None  # seconds an env's step may stay in flight
    _divergence: DivergenceGuard | None = None  # the learner's divergence checks, built at its first train()
    #: The pool collection (:class:`~sb3_async.ae_ddpg.collector.PoolCollector`): built with the replay, never saved
    _collector: PoolCollector

    def __init__(
        self,
        policy: str | type[TD3Policy],
        env: GymEnv | str | AsyncEnvPool | Callable[[], gym.Env] | None,
        n_envs: int | None = None,
        learning_rate: float | Schedule = 1e-4,
        buffer_size: int = 1_000_000,
        learning_starts: int = 100,
        batch_size: int = 128,
        tau: float = 1e-3,
        gamma: float = 0.99,
        train_freq: int | tuple[int, str] = 1,
        gradient_steps: int = -1,
        updates_per_transition: float = 1.0,
        action_noise: ActionNoise | str | None = "random_walk",
        replay_buffer_class: type[ReplayBuffer] | None = None,
        replay_buffer_kwargs: dict[str, Any] | None = None,
        min_ready: int = 1,
        pool_kwargs: dict[str, Any] | None = None,
        backend: str = "mp",
        backend_kwargs: dict[str, Any] | None = None,
        stats_window_size: int = 100,
        tensorboard_log: str | None = None,
        policy_kwargs: dict[str, Any] | None = None,
        verbose: int = 0,
        seed: int | None = None,
        device: th.device | str = "auto",
        torch_threads: int | None = None,
        step_timeout: float | None = 60.0,
        _init_setup_model: bool = True,
    ):
        self.torch_threads = check_torch_threads(torch_threads)
        buffer_size, batch_size = check_replay_sizes(buffer_size, batch_size)
        gamma, tau = check_float("gamma", gamma, 0.0, 1.0), check_float("tau", tau, 0.0, 1.0)
        learning_starts = check_int("learning_starts", learning_starts, minimum=0)
        n_envs = None if n_envs is None else check_int("n_envs", n_envs)
        self.min_ready = check_int("min_ready", min_ready)
        self.step_timeout = None if step_timeout is None else check_float("step_timeout", step_timeout, 0.0)
        if self.step_timeout == 0:
            raise ValueError("Invalid step_timeout=0: expected a positive number of seconds, or None (no limit)")
        seed = check_seed(seed)
        warn_if_learning_rate_too_high(type(self).__name__, learning_rate)
        self.updates_per_transition = check_updates_per_transition(updates_per_transition, gradient_steps)
        self._update_credit = 0.0  # fraction of a gradient step owed to the next training
        check_pool_arguments(pool_kwargs, backend, backend_kwargs)
        replay_buffer_class = check_replay_and_noise(replay_buffer_class, action_noise)
        policy_kwargs = ddpg_policy_kwargs(policy_kwargs, dict(pi=[256, 256, 128], qf=[256, 128]))  # §V-B, MuJoCo
        self.pool_kwargs = dict(pool_kwargs or {})
        self.backend, self.backend_kwargs = backend, dict(backend_kwargs or {})
        self.env_source: Callable[[], gym.Env] | str | None = None
        if env is not None:
            env, self.env_source = make_pool_vec_env(env, n_envs, self._pool_arguments())
            try:
                check_observation_space(type(self).__name__, env.observation_space, self.supported_observation_spaces)
                check_masked_action_space(type(self).__name__, env, env.action_space)  # masks: never for Box actions
                if self.min_ready > env.num_envs:
                    raise ValueError(f"Invalid min_ready={self.min_ready}: at most the {env.num_envs} envs stepped (n_envs)")
            except ValueError:
                if self.env_source is not None:  # built here: nobody else will close it
                    env.close()
                raise
        super().__init__(
            policy,
            env,  # type: ignore[arg-type]
            learning_rate=learning_rate,
            buffer_size=buffer_size,
            learning_starts=learning_starts,
            batch_size=batch_size,
            tau=tau,
            gamma=gamma,
            train_freq=train_freq,
            gradient_steps=gradient_steps,
            action_noise=None,
            replay_buffer_class=replay_buffer_class,
            replay_buffer_kwargs=replay_buffer_kwargs,
            optimize_memory_usage=False,
            # DDPG as SB3's DDPG makes it from TD3: no delayed updates, target smoothing noise clipped to 0
            policy_delay=1,
            target_noise_clip=0.0,
            target_policy_noise=0.1,
            stats_window_size=stats_window_size,
            tensorboard_log=tensorboard_log,
            policy_kwargs=policy_kwargs,
            verbose=verbose,
            seed=seed,
            device=device,
            _init_setup_model=False,
        )
        self.action_noise = action_noise  # type: ignore[assignment]
        if env is not None:  # load() passes none: the saved noise is restored after
            self._resolve_noise()
        if _init_setup_model:
            self._setup_model()

    # ---------------------------------------------------------------- model and replay
    def _setup_model(self) -> None:
        cls = self.replay_buffer_class
        assert cls is not None
        kwargs = dict(self.replay_buffer_kwargs)
        if int(kwargs.get("n_steps", 1)) != 1:
            raise ValueError(
                f"Invalid replay_buffer_kwargs n_steps={kwargs['n_steps']!r}: AEDDPG's envs write into one Memory in "
                "arrival order, so an n-step look-ahead would mix envs; use n_steps=1 (the paper's)"
            )
        if issubclass(cls, EpisodicDualReplayBuffer):
            kwargs.setdefault("rho", rho_for_n_envs(self.n_envs))
            kwargs["episode_caches"] = False  # the caches are ours: the envs' transitions arrive interleaved
        if self.replay_buffer is None:
            # One column (n_envs=1): the paper's single Memory, written in arrival order.
            self.replay_buffer = cls(
                self.buffer_size, self.observation_space, self.action_space, device=self.device, n_envs=1, **kwargs
            )
        super()._setup_model()
        self._collector = PoolCollector(self.n_envs, self.replay_buffer.buffer_size, self.min_ready, self.step_timeout)

    def save(self, path: PathLike | io.BufferedIOBase, exclude: Any = None, include: Any = None) -> None:
        """Save the model to a zip file (SB3's ``save``); a path is replaced only once the new file is complete.

        :param path: the file (``.zip`` added when the name has no suffix), or an open binary file
        :param exclude: attributes not to save, in addition to the default ones
        :param include: attributes to save that would otherwise be excluded
        """
        save_model_atomically(self, super().save, path, exclude, include)

    #: SB3's ``load()`` after checks of the file and of its saved arguments, with ``trusted=False`` for files from others
    load = classmethod(load_checked)  # type: ignore[assignment]

    @classmethod
    def _arguments_checked_on_load(cls, arguments: dict[str, Any]) -> dict[str, Any]:
        """The saved constructor arguments that ``load()`` checks, the backend apart
        (:func:`~sb3_async.common.save_util.backend_checked_apart`; the pool's options are checked with ``"mp"``)."""
        return backend_checked_apart(arguments, stand_in="mp")

    def save_replay_buffer(self, path: PathLike | io.BufferedIOBase) -> None:
        """Save the replay buffer as a pickle file (SB3's ``save_replay_buffer``); a path is replaced only once the
        new file is complete.

        :param path: the file (``.pkl`` added when the name has no suffix), or an open binary file
        """
        save_replay_atomically(self, path)

    def load_replay_buffer(self, path: Any, truncate_last_traj: bool = True) -> None:
        """SB3's ``load_replay_buffer``, for a buffer with one Memory column (the one AEDDPG saves); the running
        episodes' caches are dropped (their rows were in the replaced Memory). The file is a pickle, read so that it
        calls nothing but what a replay buffer is made of (:func:`~sb3_async.common.save_util.load_replay`): a file
        that names anything else is refused with a ``ValueError`` before it runs."""
        previous = self.replay_buffer
        self.replay_buffer = load_replay(path, ReplayBuffer, self.verbose)
        self.replay_buffer.device = self.device  # as SB3's: the device of the model loading it
        if self.replay_buffer.n_envs != 1:
            n_columns, self.replay_buffer = self.replay_buffer.n_envs, previous
            raise ValueError(
                f"Invalid replay buffer at {path!r}: it has {n_columns} env columns; AEDDPG writes every env into one "
                "Memory column (n_envs=1), as the buffers it saves"
            )
        if isinstance(self.replay_buffer, EpisodicDualReplayBuffer):
            self.replay_buffer.episode_caches = False
        self._collector.caches = EpisodeCaches(self.n_envs, self.replay_buffer.buffer_size)

    def _excluded_save_params(self) -> list[str]:
        return [
            *super()._excluded_save_params(),
            "_collector",
            "collection_stats",  # saved by 0.2.0 and earlier, now the collector's
            "env_transitions",
            "_async_metrics",
            "_divergence",
        ]

    # ---------------------------------------------------------------- envs and learn
    def _resolve_noise(self) -> None:
        """Build the default noise (one random walk per env), give a one-stream random walk one stream per env and
        check a vectorised one's stream count."""
        if isinstance(self.action_noise, str):
            dim = int(np.prod(self.action_space.shape))  # type: ignore[arg-type]
            self.action_noise = RandomWalkActionNoise(np.zeros(dim), n_envs=self.n_envs)
        elif isinstance(self.action_noise, RandomWalkActionNoise) and not isinstance(self.action_noise, VectorizedActionNoise):
            self.action_noise = self.action_noise.for_envs(self.n_envs)
        if isinstance(self.action_noise, RandomWalkActionNoise) and self.action_noise.n_envs != self.n_envs:
            raise ValueError(
                f"Invalid action_noise={self.action_noise!r}: it has {self.action_noise.n_envs} streams for {self.n_envs} envs"
            )

    def _pool_arguments(self) -> dict[str, Any]:
        """The :class:`AsyncEnvPool` arguments of the pools built here: ``pool_kwargs`` and the backend (a model saved
        before AEDDPG had a backend loads as ``"mp"``; ``"serial"``: a pool of ``n_hosts=0``)."""
        backend = getattr(self, "backend", "mp")
        if backend == "serial":  # every env stepped in this process: a pool without env host processes
            kwargs = {k: v for k, v in self.pool_kwargs.items() if k != "n_workers"}  # the deprecated name of n_hosts
            return dict(kwargs, n_hosts=0, backend="mp", backend_kwargs=None)
        return dict(self.pool_kwargs, backend=backend, backend_kwargs=getattr(self, "backend_kwargs", None) or None)

    def _pool_env(self) -> PoolVecEnv:
        """The :class:`PoolVecEnv` being trained on, under SB3's ``VecTransposeImage`` for image observations."""
        env = self.env.venv if isinstance(self.env, VecTransposeImage) else self.env
        if not isinstance(env, PoolVecEnv):
            raise RuntimeError(f"AEDDPG trains on an AsyncEnvPool's PoolVecEnv, got {self.env!r}")
        return env

    def _env_processes(self) -> int:
        """The env processes stepping on this machine (none for a pool of Ray actors or envs stepped in this process)."""
        if self.env is None:
            return 0
        pool = self._pool_env().pool
        return pool.n_hosts if pool.backend == "mp" else 0

    def set_env(self, env: GymEnv | str | AsyncEnvPool | Callable[[], gym.Env], force_reset: bool = True) -> None:
        """Replace the training envs (an env id, a factory, an env, a ``DummyVecEnv`` or an ``AsyncEnvPool``); the
        number of envs must stay ``n_envs``."""
        pool_env, source = make_pool_vec_env(env, self.n_envs, self._pool_arguments())
        if source is not None:
            self.env_source = source
        super().set_env(pool_env, force_reset=force_reset)

    def _ensure_env(self) -> None:
        if self.env is None and self.env_source is not None:  # learn() after load(): rebuild the saved env
            self.set_env(self.env_source)

    def _setup_learn(
        self,
        total_timesteps: int,
        callback: MaybeCallback = None,
        reset_num_timesteps: bool = True,
        tb_log_name: str = "run",
        progress_bar: bool = False,
    ) -> tuple[int, BaseCallback]:
        self._ensure_env()
        if self.env is None:
            raise ValueError("AEDDPG has no env to learn from: pass one to load(path, env=...) or set_env()")
        self._resolve_noise()
        last_obs = self._last_obs
        result = super()._setup_learn(total_timesteps, callback, reset_num_timesteps, tb_log_name, progress_bar)
        if self._last_obs is not last_obs:
            check_finite_observations(self._last_obs)
        if self._last_obs is not last_obs or self._collector.in_flight is None:  # the envs were reset: episodes cut
            self._collector.reset_episodes(self.replay_buffer.buffer_size)  # type: ignore[union-attr]
            if self.action_noise is not None:
                self.action_noise.reset()
        self._collector.reset_stats()
        self._async_metrics = AsyncMetrics(self.num_timesteps, self._async_counters())
        self.logger.record("config/torch_threads", th.get_num_threads())
        return result

    def _init_callback(self, callback: MaybeCallback, progress_bar: bool = False) -> BaseCallback:
        # progress_bar=True: the live bar (env steps per second, mean episode return) in place of SB3's
        if progress_bar:
            callback = with_live_progress_bar(callback)
        return super()._init_callback(callback, progress_bar=False)

    def _async_counters(self) -> dict[str, float]:
        """Cumulative counters of the ``async/`` keys (:mod:`sb3_async.common.async_metrics`): the learner waits for
        data while it waits for envs to finish their step."""
        stats = self._collector.stats
        return {
            "updates": self._n_updates,
            "replayed": self._n_updates * self.batch_size,
            "learner_wait": stats["recv_seconds"],
        }

    def learn(
        self: SelfAEDDPG,
        total_timesteps: int,
        callback: MaybeCallback = None,
        log_interval: int = 4,
        tb_log_name: str = "AEDDPG",
        reset_num_timesteps: bool = True,
        progress_bar: bool = False,
    ) -> SelfAEDDPG:
        try:
            # torch's default threads (one per core) next to busy env processes would oversubscribe the CPUs
            self._ensure_env()
            with learner_cpu_settings(self._env_processes(), getattr(self, "torch_threads", None)):
                return super().learn(total_timesteps, callback, log_interval, tb_log_name, reset_num_timesteps, progress_bar)
        except BaseException:
            # An env error, Ctrl-C or a failing callback: the steps in flight are lost; close the pool's processes now.
            if self.env is not None:
                self.env.close()
                self.env = None
            raise

    def collect_rollouts(
        self,
        env: VecEnv,
        callback: BaseCallback,
        train_freq: TrainFreq,
        replay_buffer: ReplayBuffer,
        action_noise: ActionNoise | None = None,
        learning_starts: int = 0,
        log_interval: int | None = None,
    ) -> RolloutReturn:
        """SB3's ``collect_rollouts`` for the pool: receive the envs that are ready, store their transitions, act on
        them in one batched forward pass and send (they step while the learner trains), until ``train_freq``
        transitions (or episodes) were collected (:meth:`~sb3_async.ae_ddpg.collector.PoolCollector.collect`)."""
        pool = self._pool_env().pool
        return self._collector.collect(self, pool, env, callback, train_freq, learning_starts, log_interval)

    # ---------------------------------------------------------------- learning
    def train(self, gradient_steps: int, batch_size: int = 100) -> None:
        """DDPG's update (eq. 1-4: SB3's TD3 ``train()`` with one critic, no policy delay and no target smoothing), with a
        ``PrioritizedReplayBuffer`` the importance-weighted critic loss and priority updates. Runs while the envs sent
        last step.

        Written once for every replay (not SB3's ``train()``) for speed, the same update: the actor's backward pass
        computes its own parameters' gradients only (:func:`~sb3_async.common.dpg_update.dpg_update`, Ape-X DPG's update
        too), the target networks move in one multi-tensor call (:func:`~sb3_async.common.torch_utils.soft_update`).
        """
        start = time.perf_counter()
        gradient_steps = self._scaled_gradient_steps(gradient_steps)
        if gradient_steps == 0:
            return
        buffer: Any = self.replay_buffer  # a ReplayBuffer; a PrioritizedReplayBuffer's samples have weights and indices
        prioritized = isinstance(buffer, PrioritizedReplayBuffer)
        self.policy.set_training_mode(True)
        self._update_learning_rate([self.actor.optimizer, self.critic.optimizer])
        actor_params, critic_params = list(self.actor.parameters()), list(self.critic.parameters())
        actor_targets, critic_targets = list(self.actor_target.parameters()), list(self.critic_target.parameters())
        actor_losses, critic_losses = [], []
        learning_rate = float(self.lr_schedule(self._current_progress_remaining))
        if self._divergence is None:
            self._divergence = DivergenceGuard(type(self).__name__, actor_params + critic_params)
        for _ in range(gradient_steps):
            self._n_updates += 1
            if prioritized:
                data = buffer.sample(batch_size, env=self._vec_normalize_env, beta=self.per_beta())
            else:
                data = buffer.sample(batch_size, env=self._vec_normalize_env)
            discounts = getattr(data, "discounts", None)
            step = dpg_update(
                self.policy,
                data.observations,
                data.actions,
                data.rewards,
                data.dones,
                data.next_observations,
                self.gamma if discounts is None else discounts,
                weights=data.weights if prioritized else None,  # eq. 2, importance-weighted when prioritized
                actor_params=actor_params,
            )
            self._divergence.check_values(
                self._n_updates, self.num_timesteps, learning_rate, critic_loss=step.critic_loss, actor_loss=step.actor_loss
            )
            self._divergence.after_update(self._n_updates, self.num_timesteps, learning_rate)
            critic_losses.append(step.critic_loss)
            actor_losses.append(step.actor_loss)
            if prioritized:
                buffer.update_priorities(data.indices, step.priorities)
            soft_update(critic_params, critic_targets, self.tau)  # eq. 4
            soft_update(actor_params, actor_targets, self.tau)
            soft_update(self.critic_batch_norm_stats, self.critic_batch_norm_stats_target, 1.0)
            soft_update(self.actor_batch_norm_stats, self.actor_batch_norm_stats_target, 1.0)
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/actor_loss", np.mean(actor_losses))
        self.logger.record("train/critic_loss", np.mean(critic_losses))
        if prioritized:
            self.logger.record("train/per_beta", self.per_beta())
        self._collector.stats["train_seconds"] += time.perf_counter() - start

    def _scaled_gradient_steps(self, gradient_steps: int) -> int:
        """With ``gradient_steps=-1`` SB3 passes the transitions collected; scale by ``updates_per_transition``,
        carrying the fraction over so that ``n`` transitions always buy ``floor(n * updates_per_transition)`` steps."""
        ratio = getattr(self, "updates_per_transition", 1.0)  # models saved before it existed: 1.0
        if self.gradient_steps >= 0 or ratio == 1.0:
            return gradient_steps
        owed = getattr(self, "_update_credit", 0.0) + gradient_steps * ratio
        steps = int(owed + 1e-9)
        self._update_credit = max(owed - steps, 0.0)
        return steps

    def per_beta(self) -> float:
        """Prioritized replay's importance-sampling exponent, annealed linearly from the buffer's ``beta`` to 1 over the
        run (Schaul et al. 2016, §3.4)."""
        assert isinstance(self.replay_buffer, PrioritizedReplayBuffer)
        beta0 = self.replay_buffer.beta
        return beta0 + (1.0 - beta0) * (1.0 - self._current_progress_remaining)

    def overlap_stats(self) -> dict[str, float]:
        """How collection and learning overlapped since ``learn()`` started: the shares of wall-clock time spent waiting
        for envs (``recv``) and training, and the mean number of envs per receive."""
        return self._collector.overlap_stats()

    @property
    def collection_stats(self) -> dict[str, Any]:
        """Seconds waiting for envs (``recv_seconds``) and training (``train_seconds``), ``receives`` and
        ``transitions`` since ``learn()`` started."""
        return self._collector.stats

    @property
    def env_transitions(self) -> np.ndarray:
        """Transitions collected from each env since ``learn()`` started."""
        return self._collector.env_transitions

    def dump_logs(self) -> None:
        for key, value in self.overlap_stats().items():
            self.logger.record(key, value)
        metrics = getattr(self, "_async_metrics", None)
        if metrics is not None:
            ages = sample_ages_of(self.replay_buffer).take() if hasattr(self.replay_buffer, "sample_ages") else None
            metrics.record(self.logger, self.num_timesteps, self._async_counters(), ages)
        if isinstance(self.replay_buffer, EpisodicDualReplayBuffer):
            for key, value in self.replay_buffer.stats().items():
                self.logger.record(key, value)
        super().dump_logs()
