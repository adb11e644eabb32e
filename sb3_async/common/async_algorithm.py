"""``AsyncAlgorithm``: the SB3 side of every sb3_async algorithm.

``learn()`` runs in the main process exactly as SB3 users expect: ``num_timesteps`` is the global step count of all
workers, callbacks get ``on_step()`` once per ``n_envs`` steps of progress with the usual locals, episode statistics
fill ``ep_info_buffer``, and the logger writes ``rollout/``, ``time/`` and ``train/`` keys. The workers themselves
are started, supervised and stopped by :mod:`sb3_async.runtime`; an algorithm only says what its workers run
(:meth:`AsyncAlgorithm._worker_specs`).

This module holds the model: construction, ``save()`` / ``load()``, the env, and ``learn()``, which starts the workers
and runs the supervision loop (:meth:`AsyncAlgorithm._supervise`): it polls the runtime, turns the workers' global
step count into one callback ``on_step()`` per ``n_envs`` steps, fills the rollout statistics, writes the logs, and
stops the workers when a callback asks to. What an algorithm adds to this loop are hooks:
:meth:`~AsyncAlgorithm._train_between_polls` (Ape-X's learner), :meth:`~AsyncAlgorithm._on_message` (messages other
than ``"stats"``), :meth:`~AsyncAlgorithm._on_worker_error` (Ape-X restarts a dead actor), and
:meth:`~AsyncAlgorithm._log_extra` and :meth:`~AsyncAlgorithm._async_counters` (the algorithms' update count, which
turns on the ``async/`` keys of :mod:`sb3_async.common.async_metrics`). The ``VecNormalize`` statistics the workers
share are in :mod:`sb3_async.common.normalization`; what runs in the workers is in :mod:`sb3_async.common.worker_side`.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import math
import os
import sys
import time
from abc import abstractmethod
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any, ClassVar, TypeVar

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.type_aliases import GymEnv, MaybeCallback, Schedule
from stable_baselines3.common.utils import safe_mean
from stable_baselines3.common.vec_env import VecEnv, VecNormalize, unwrap_vec_normalize

from sb3_async.common.async_metrics import AsyncMetrics
from sb3_async.common.callbacks import frozen_evaluations, show_final_timesteps, with_live_progress_bar
from sb3_async.common.divergence import warn_if_learning_rate_too_high
from sb3_async.common.epsilon_greedy import epsilon_greedy_predict
from sb3_async.common.gradient_sharing import GradientSharing
from sb3_async.common.league_record import LeagueRecord
from sb3_async.common.masks import check_masked_action_space, masked_policy, predict_masks
from sb3_async.common.normalization import (
    freeze_main,
    load_statistics_state,
    main_vec_normalizes,
    share_with_main,
    statistics_state,
)
from sb3_async.common.observations import SB3_OBSERVATION_SPACES, check_observation_space
from sb3_async.common.save_util import PathLike, backend_checked_apart, load_checked, save_model_atomically
from sb3_async.common.torch_utils import check_torch_threads, learner_cpu_settings, usable_cpus
from sb3_async.common.worker_envs import EnvRecipe, TemplateVecEnv
from sb3_async.common.worker_side import read_obs, shared_obs_buffer
from sb3_async.runtime import Runtime, WorkerSpec, make_runtime, worker_seed
from sb3_async.runtime.mp import start_forkserver
from sb3_async.runtime.processes import START_METHODS, WorkerError
from sb3_async.validation import check_backend, check_float, check_int, check_seed

SelfAsyncAlgorithm = TypeVar("SelfAsyncAlgorithm", bound="AsyncAlgorithm")
PolicyT = TypeVar("PolicyT", bound=BasePolicy)

#: Worker processes accepted on this machine (backend="mp"): the larger of MIN_WORKER_BOUND (the paper's 16 threads
#: and more run on a small machine too) and MAX_WORKERS_PER_CPU per CPU; beyond, they only take turns on the cores.
MAX_WORKERS_PER_CPU = 4
MIN_WORKER_BOUND = 64


def forwarded_arguments(scope: dict[str, Any], *constructors: Callable[..., Any], **overrides: Any) -> dict[str, Any]:
    """The arguments a subclass's constructor passes on to its base class: each parameter of ``constructors`` (the
    base class's ``__init__``, and the one its ``**kwargs`` go to) found by name in ``scope`` (the subclass
    constructor's ``locals()``, with the values it checked or completed), then ``overrides``. A parameter the subclass
    does not take keeps the base class's default."""
    names = {name for constructor in constructors for name in inspect.signature(constructor).parameters}
    names -= {"self", "args", "kwargs"}
    return {**{name: value for name, value in scope.items() if name in names}, **overrides}


def max_local_workers() -> int:
    """The most worker processes an algorithm starts on this machine."""
    return max(MIN_WORKER_BOUND, MAX_WORKERS_PER_CPU * usable_cpus())


#: Env copies one worker steps at most: each is a Python object stepped after the others, and building a million of
#: them takes minutes and gigabytes before the first step. More envs go to more workers (or to Ray's nodes).
MAX_ENVS_PER_WORKER = 4096


def check_envs_per_worker(name: str, value: Any) -> int:
    """``value`` as a count of env copies per worker in [1, :data:`MAX_ENVS_PER_WORKER`], errors naming ``name``."""
    return check_int(name, value, 1, MAX_ENVS_PER_WORKER, "envs in one worker are stepped one after another: use more workers")


def check_learning_rate(value: Any) -> float | Schedule:
    if callable(value):
        return value
    return check_float("learning_rate", value)


#: Seconds the workers have to finish after a callback stopped training (their last messages are received meanwhile).
_STOP_SECONDS = 30.0


def record_seat_statistics(logger: Any, episodes: Iterable[dict[str, Any]]) -> None:
    """Log ``rollout/seat_<k>_ep_rew_mean``, ``_win_rate`` and ``_loss_rate`` over the episodes of turn-based games in
    ``episodes`` (SB3's ``ep_info_buffer``: those with a ``"seat"``), one set per seat."""
    by_seat: dict[int, list[dict[str, Any]]] = {}
    for episode in episodes:
        if "seat" in episode:
            by_seat.setdefault(int(episode["seat"]), []).append(episode)
    for seat, played in sorted(by_seat.items()):
        results = np.array([episode["result"] for episode in played])
        logger.record(f"rollout/seat_{seat}_ep_rew_mean", float(np.mean([episode["r"] for episode in played])))
        logger.record(f"rollout/seat_{seat}_win_rate", float(np.mean(results == 1)))
        logger.record(f"rollout/seat_{seat}_loss_rate", float(np.mean(results == -1)))


def _snapshot(value: Any) -> Any:
    """A private copy of every tensor in a (nested) state dict."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, dict):
        return {key: _snapshot(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_snapshot(item) for item in value)
    return value


class AsyncAlgorithm(BaseAlgorithm):
    """Base class of the asynchronous algorithms: SB3's ``learn()`` contract on top of the runtime.

    :param policy: policy class or alias (``"MlpPolicy"``, ``"CnnPolicy"``, ...)
    :param env: an env id, a factory returning a ``gym.Env``, a ``gym.Env`` or a ``VecEnv``; each worker builds
        ``n_envs_per_worker`` copies of it. A multi-agent PettingZoo env (a factory returning one, or an
        ``AsyncEnvPool`` of one): each worker steps ``n_envs_per_worker`` copies, one env slot per agent, so
        :attr:`n_envs_per_worker` becomes the number of slots (parameter sharing: one policy for every agent)
    :param learning_rate: learning rate, constant or a schedule of the progress remaining (1 → 0), global progress
    :param n_workers: worker processes (the paper's actor-learner threads); default: the number of CPU cores
    :param n_envs_per_worker: envs stepped by each worker, their inference batched (1 as in the paper)
    :param backend: ``"mp"``: processes on this machine; ``"ray"``: Ray actors on a Ray cluster (``pip install
        "sb3-async[ray]"``; see :class:`~sb3_async.runtime.ray_backend.RayRuntime`); ``"serial"``: every worker
        in this process, one after another in a fixed order, for debugging (see
        :class:`~sb3_async.runtime.serial.SerialRuntime`)
    :param backend_kwargs: options of the backend (``"ray"``: ``address``, ``init_kwargs``, ``num_cpus_per_worker``,
        ``workers_per_actor``, ``sync_interval``, ``publish_interval``); default: none
    :param start_method: ``"forkserver"`` (default), ``"spawn"`` or ``"fork"``
    :param policy_kwargs: passed to the policy on creation
    :param stats_window_size: episodes averaged for ``rollout/`` logging
    :param tensorboard_log: TensorBoard log folder
    :param verbose: 0 silent, 1 training info, 2 debug
    :param seed: base seed; worker ``i`` uses ``seed + i``
    :param device: device of the main process' networks; workers always run on CPU
    :param supported_action_spaces: action spaces the algorithm accepts
    :param pause_for_eval: park the workers while an ``EvalCallback`` evaluates inside ``learn()``, so it scores and
        saves one frozen policy, as with SB3's algorithms (default True; False: evaluations run while workers train)
    :param torch_threads: torch threads of the main process during ``learn()``; None (default): the CPUs the workers on
        this machine leave free, at least 1 (logged as ``config/torch_threads``); the caller's count is restored after
    :param step_timeout: seconds one env step (or the reset after an episode) may take in a worker; a step stuck longer
        is interrupted and ``learn()`` raises a ``WorkerError`` naming the env, its worker and how long it was stuck,
        with the traceback of where it was stuck (``backend="serial"``: a ``StepTimeout`` naming them) (default 60;
        None: no limit)
    """

    policy_aliases: ClassVar[dict[str, type[BasePolicy]]] = {}
    policy: BasePolicy
    #: The observation spaces the algorithm accepts (SB3's; a ``Dict``'s subspaces among the others).
    supported_observation_spaces: ClassVar[tuple[type[spaces.Space], ...]] = SB3_OBSERVATION_SPACES
    #: The constructor's names for ``n_workers`` and ``n_envs_per_worker`` (Ape-X: ``n_actors``, ``n_envs_per_actor``).
    workers_argument: ClassVar[str] = "n_workers"
    envs_argument: ClassVar[str] = "n_envs_per_worker"
    saved_class_marker: ClassVar[str | None] = "n_envs_per_worker"  # only this family saves it
    #: Where the action spaces this algorithm refuses are taken (ends the message refusing an env)
    other_action_spaces: ClassVar[str] = ""
    #: Whether ``predict()`` is ε-greedy on a Q-network with ε the class's ``exploration_rate``, logged as
    #: ``rollout/exploration_rate`` (the value-based algorithms: ``class ApeXDQN(ApeXAlgorithm, epsilon_greedy=True)``)
    epsilon_greedy: ClassVar[bool] = False
    #: The lock-free optimizer and what the workers share, for the algorithms whose workers apply their gradients to
    #: shared parameters (A3C, the async Q family); None for Ape-X, whose learner alone updates θ
    gradient_sharing: GradientSharing | None = None
    #: How the workers rebuild the training env (None: a model without env).
    _env_recipe: EnvRecipe | None
    #: ``VecNormalize`` statistics saved with the model (:func:`~sb3_async.common.normalization.statistics_state`).
    _normalization_state: dict[str, Any] | None
    #: The latest training metrics of each worker (``"stats"`` messages), averaged over the workers in the logs.
    _train_stats: dict[int, dict[str, float]]
    #: The ``async/`` metrics since the last log, during a ``learn()`` call of an algorithm that counts its updates.
    _async_metrics: AsyncMetrics | None = None
    #: The record of a league of past selves (``opponent="league"``): snapshots, results and Elo ratings, saved with
    #: the model; the workers of the next ``learn()`` call start from it (None: never trained against a league)
    league: LeagueRecord | None = None

    def __init_subclass__(cls, epsilon_greedy: bool | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if epsilon_greedy is not None:
            cls.epsilon_greedy = epsilon_greedy

    def __init__(
        self,
        policy: str | type[BasePolicy],
        env: GymEnv | str | Any | None,
        learning_rate: float | Schedule,
        n_workers: int | None = None,
        n_envs_per_worker: int = 1,
        backend: str = "mp",
        start_method: str = "forkserver",
        backend_kwargs: dict[str, Any] | None = None,
        policy_kwargs: dict[str, Any] | None = None,
        stats_window_size: int = 100,
        tensorboard_log: str | None = None,
        verbose: int = 0,
        seed: int | None = None,
        device: torch.device | str = "auto",
        supported_action_spaces: tuple[type[spaces.Space], ...] | None = None,
        pause_for_eval: bool = True,
        torch_threads: int | None = None,
        step_timeout: float | None = 60.0,
    ):
        self.torch_threads = check_torch_threads(torch_threads)
        seed = check_seed(seed)
        self.step_timeout = None if step_timeout is None else check_float("step_timeout", step_timeout, 0.0)
        if self.step_timeout == 0:
            raise ValueError("Invalid step_timeout=0: expected a positive number of seconds, or None (no limit)")
        if not isinstance(pause_for_eval, bool):
            raise TypeError(f"Invalid pause_for_eval={pause_for_eval!r}: expected True or False")
        self.pause_for_eval = pause_for_eval
        check_backend(backend, backend_kwargs)
        self.n_workers = self._check_n_workers((os.cpu_count() or 1) if n_workers is None else n_workers, backend)
        self.n_envs_per_worker = check_envs_per_worker(self.envs_argument, n_envs_per_worker)
        if start_method not in START_METHODS:
            raise ValueError(f"Invalid start_method={start_method!r}: expected one of {', '.join(START_METHODS)}")
        self.backend, self.start_method = backend, start_method
        self.backend_kwargs = dict(backend_kwargs or {})
        if backend == "ray":  # say what to install now, not at the first learn()
            from sb3_async.runtime.ray_backend import import_ray

            import_ray()
        if backend == "mp" and start_method == "forkserver" and env is not None:
            start_forkserver()  # its imports overlap with building the model (a model loaded without env: not needed)
        if isinstance(policy, str) and policy not in self.policy_aliases:
            raise ValueError(f"Invalid policy={policy!r}: expected one of {', '.join(self.policy_aliases)} or a policy class")
        learning_rate = check_learning_rate(learning_rate)
        warn_if_learning_rate_too_high(type(self).__name__, learning_rate)

        self._env_recipe: EnvRecipe | None = None
        self._normalization_state: dict[str, Any] | None = None  # VecNormalize statistics saved with the model
        self._given_env_recipe: EnvRecipe | None = None
        template: GymEnv | None = None
        if env is not None:
            self._given_env_recipe = self._env_recipe = EnvRecipe(env)
            template = env if isinstance(env, VecEnv) else self._env_recipe.make_env()
            # A multi-agent env: each worker steps n_envs_per_worker env copies, one env slot per agent
            self.n_envs_per_worker *= self._env_recipe.agents_per_env

        super().__init__(
            policy=policy,
            env=template,
            learning_rate=learning_rate,
            policy_kwargs=policy_kwargs,
            stats_window_size=stats_window_size,
            tensorboard_log=tensorboard_log,
            verbose=verbose,
            device=device,
            support_multi_env=True,
            seed=seed,
        )
        if env is not None:
            check_observation_space(type(self).__name__, self.observation_space, self.supported_observation_spaces)
        supported = supported_action_spaces
        if env is not None and supported is not None and not isinstance(self.action_space, supported):
            accepted = ", ".join(cls.__name__ for cls in supported)
            raise ValueError(
                f"Invalid env: {type(self).__name__} supports {accepted} action spaces, got {self.action_space}"
                f"{self.other_action_spaces}"
            )
        if env is not None:  # masks: Discrete actions only
            check_masked_action_space(type(self).__name__, self.env, self.action_space)
        self._use_worker_view()
        self._train_stats: dict[int, dict[str, float]] = {}
        self._runtime: Runtime | None = None

    @classmethod
    def _check_n_workers(cls, n_workers: Any, backend: str) -> int:
        name = cls.workers_argument
        n_workers = check_int(name, n_workers)
        bound = max_local_workers()
        if backend == "mp" and n_workers > bound:
            raise ValueError(
                f"Invalid {name}={n_workers}: at most {bound} worker processes on this machine (the larger of "
                f"{MIN_WORKER_BOUND} and {MAX_WORKERS_PER_CPU} per CPU, {usable_cpus()} CPUs); more only take turns on the "
                "cores (backend='ray' spreads workers over several machines)"
            )
        return n_workers

    @classmethod
    def _pop_load_options(cls, kwargs: dict[str, Any]) -> dict[str, Any]:
        """``load()`` takes the worker counts under the constructor's names (``n_workers`` and ``n_envs_per_worker``;
        Ape-X: ``n_actors`` and ``n_envs_per_actor``), checks them as the constructor does, and they mean what they
        mean there: with a multi-agent env, ``n_envs_per_worker`` env copies per worker, one slot per agent each.
        Without them, the saved counts stay."""
        names = (cls.workers_argument, cls.envs_argument, "n_workers", "n_envs_per_worker")
        return {name: kwargs.pop(name) for name in names if name in kwargs}

    def _apply_load_options(self, options: dict[str, Any]) -> None:
        workers = options.get(self.workers_argument, options.get("n_workers"))
        if workers is not None:
            self.n_workers = self._check_n_workers(workers, self.backend)
        copies = options.get(self.envs_argument, options.get("n_envs_per_worker"))
        if copies is not None:
            agents = self._env_recipe.agents_per_env if self._env_recipe is not None else 1
            self.n_envs_per_worker = check_envs_per_worker(self.envs_argument, copies) * agents
        self._use_worker_view()

    @property
    def n_envs_total(self) -> int:
        return self.n_workers * self.n_envs_per_worker

    def _use_worker_view(self) -> None:
        self.n_envs = self.n_envs_total
        if isinstance(self.env, TemplateVecEnv) and self.env.num_envs != self.n_envs_total:  # load(..., n_workers=k)
            self.env = self.env.template
        if self.env is not None and not isinstance(self.env, TemplateVecEnv):
            self.env = TemplateVecEnv(self.env, self.n_envs_total)

    def get_parameters(self) -> dict[str, dict]:
        # Workers keep writing the shared tensors while a callback saves the model: without a snapshot, the bytes the
        # zip file checksums and the bytes it writes can differ, and the checkpoint fails to load ("Bad CRC-32").
        return _snapshot(super().get_parameters())

    def _excluded_save_params(self) -> list[str]:
        return [*super()._excluded_save_params(), "_given_env_recipe", "_train_stats", "_async_metrics", "_runtime"]

    def _setup_model(self) -> None:
        # Runs again in load(), after the saved attributes replaced ours: an env given to load() wins.
        if getattr(self, "_given_env_recipe", None) is not None:
            self._env_recipe = self._given_env_recipe
        self._use_worker_view()
        self._train_stats = {}
        self._runtime = None
        self._setup_lr_schedule()
        self.set_random_seed(self.seed)
        if self.gradient_sharing is not None and "optimizer_name" in self.__dict__:
            # a model saved when these hyperparameters were the model's own attributes
            self.gradient_sharing = GradientSharing.from_saved_attributes(self.__dict__)

    def set_env(self, env: GymEnv, force_reset: bool = True) -> None:
        recipe = EnvRecipe(env)
        template = env if isinstance(env, VecEnv) else recipe.make_env()
        wrapped = self._wrap_env(template, self.verbose)
        from stable_baselines3.common.utils import check_for_correct_spaces

        check_for_correct_spaces(wrapped, self.observation_space, self.action_space)
        check_masked_action_space(type(self).__name__, wrapped, self.action_space)
        self._env_recipe = self._given_env_recipe = recipe
        self._vec_normalize_env = unwrap_vec_normalize(wrapped)
        self.env = TemplateVecEnv(wrapped, self.n_envs_total)
        self.n_envs = self.n_envs_total
        if force_reset:
            self._last_obs = None

    def _make_policy(self, required: type[PolicyT]) -> PolicyT:
        """A new ``policy_class`` policy for this model's spaces; ``TypeError`` unless it is a ``required`` (a custom
        policy class must have the heads the algorithm's loss uses)."""
        policy = self.policy_class(self.observation_space, self.action_space, self.lr_schedule, **self.policy_kwargs)
        if not isinstance(policy, required):
            name = self.policy_class.__name__
            raise TypeError(f"Invalid policy={name}: {type(self).__name__} needs a subclass of {required.__name__}")
        return policy

    def save(self, path: PathLike | io.BufferedIOBase, exclude: Any = None, include: Any = None) -> None:
        """Save the model to a zip file (SB3's ``save``); a path is replaced only once the new file is complete
        (:func:`~sb3_async.common.save_util.atomic_write`). The ``VecNormalize`` statistics go with it, so that a
        model loaded without an env rebuilds its env with the statistics it was trained with.

        :param path: the file (``.zip`` added when the name has no suffix), or an open binary file
        :param exclude: attributes not to save, in addition to the default ones
        :param include: attributes to save that would otherwise be excluded
        """
        if self._vec_normalize_env is not None:
            self._normalization_state = statistics_state(self._vec_normalize_env)
        save_model_atomically(self, super().save, path, exclude, include)

    #: SB3's ``load()`` after checks of the file and of its saved arguments, with ``trusted=False`` for files from others
    load = classmethod(load_checked)  # type: ignore[assignment]

    @classmethod
    def _arguments_checked_on_load(cls, arguments: dict[str, Any]) -> dict[str, Any]:
        """The saved constructor arguments that ``load()`` checks (:func:`~sb3_async.common.save_util.check_saved_arguments`),
        without what depends on this machine: the backend and its options are checked here, and the worker count is
        not bounded by this machine's CPUs (a model trained on a larger machine still loads)."""
        return backend_checked_apart(arguments, stand_in="serial")

    def get_vec_normalize_env(self) -> VecNormalize | None:
        """The ``VecNormalize`` of the training env (live shared statistics during ``learn()``); for a model loaded
        without an env, one rebuilt from the saved env and statistics."""
        if (
            self._vec_normalize_env is None
            and self.env is None
            and self._env_recipe is not None
            and self._env_recipe.normalizes
        ):
            self._ensure_env()
        return self._vec_normalize_env

    def load_saved_normalization(self) -> bool:
        """Copy the ``VecNormalize`` statistics saved with the model into the training env's ``VecNormalize``.

        ``load(path)`` without an env does this itself; ``load(path, env=...)`` keeps the statistics of the env given
        (SB3's convention). Call this after it to resume from the model's own statistics instead (those of the moment
        it was saved, e.g. a checkpoint's). Returns whether there were statistics to copy and an env to copy them to.
        """
        if self._vec_normalize_env is None or self._normalization_state is None:
            return False
        load_statistics_state(self._vec_normalize_env, self._normalization_state)
        return True

    def predict(  # type: ignore[override]
        self,
        observation: np.ndarray | dict[str, np.ndarray],
        state: tuple[np.ndarray, ...] | None = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = False,
        action_masks: np.ndarray | None = None,
    ) -> tuple[np.ndarray, tuple[np.ndarray, ...] | None]:
        """SB3's ``predict()``; for the value-based algorithms (:attr:`epsilon_greedy`), SB3's ``DQN.predict``:
        greedy actions, each replaced by a random one with probability ``exploration_rate`` unless ``deterministic``
        (:func:`~sb3_async.common.epsilon_greedy.epsilon_greedy_predict`). ``action_masks`` (sb3-contrib's
        ``MaskablePPO.predict`` convention: bools of shape ``(n_actions,)`` for every observation, or
        ``(n_envs, n_actions)``) restrict the actions to the legal ones: the greedy and the random actions of the
        value-based algorithms, the masked categorical of an actor-critic policy (sampled or deterministic)."""
        if self.epsilon_greedy:
            epsilon = self.exploration_rate  # type: ignore[attr-defined]
            actions = epsilon_greedy_predict(self.policy, self.action_space, epsilon, observation, deterministic, action_masks)
            return actions, state
        if action_masks is None:
            return super().predict(observation, state, episode_start, deterministic)
        with masked_policy(self.policy, predict_masks(action_masks, self.action_space)):
            return super().predict(observation, state, episode_start, deterministic)

    def _init_callback(self, callback: MaybeCallback, progress_bar: bool = False) -> BaseCallback:
        # progress_bar=True: the live bar (env steps per second, mean episode return) in place of SB3's
        if progress_bar:
            callback = with_live_progress_bar(callback)
        return super()._init_callback(callback, progress_bar=False)

    # --- what each algorithm provides -------------------------------------------------------------------------------

    @abstractmethod
    def _worker_specs(self) -> list[WorkerSpec]:
        """The workers to run for one ``learn()`` call (after :meth:`_share_state`)."""

    def _share_state(self) -> None:
        """Move everything the workers update (parameters, optimizer statistics) to shared memory: by default, what
        :attr:`gradient_sharing` shares."""
        if self.gradient_sharing is None:
            raise NotImplementedError(f"{type(self).__name__} shares no gradients: it must say what its workers share")
        self.gradient_sharing.share(self.policy, self.n_workers)

    def _get_torch_save_params(self) -> tuple[list[str], list[str]]:
        return ["policy", "policy.optimizer"], []

    # --- learn --------------------------------------------------------------------------------------------------

    def _ensure_env(self) -> None:
        if self.env is None:
            if self._env_recipe is None:
                raise ValueError("This model has no env: pass one to load(path, env=...) or set_env(env) before learn()")
            recipe = self._env_recipe
            template = self._wrap_env(recipe.make_vec_env(1) if recipe.normalizes else recipe.make_env(), self.verbose)
            self._vec_normalize_env = unwrap_vec_normalize(template)
            if self._vec_normalize_env is not None and self._normalization_state is not None:
                load_statistics_state(self._vec_normalize_env, self._normalization_state)
            self.env = TemplateVecEnv(template, self.n_envs_total)

    def learn(
        self: SelfAsyncAlgorithm,
        total_timesteps: int,
        callback: MaybeCallback = None,
        log_interval: int = 100,
        tb_log_name: str | None = None,
        reset_num_timesteps: bool = True,
        progress_bar: bool = False,
    ) -> SelfAsyncAlgorithm:
        """Train with ``n_workers`` asynchronous workers until ``total_timesteps`` global env steps.

        :param total_timesteps: env steps, all workers together
        :param callback: callback(s) called every ``n_envs`` steps of progress, with the usual locals
        :param log_interval: log every ``log_interval`` iterations of ``n_steps * n_envs`` global steps
        :param tb_log_name: TensorBoard run name (default: the class name)
        :param reset_num_timesteps: whether to restart the step count (False: continue it)
        :param progress_bar: show a progress bar (tqdm and rich)
        """
        check_int("total_timesteps", total_timesteps, minimum=1)
        self._ensure_env()
        total_timesteps, callback = self._setup_learn(
            total_timesteps, callback, reset_num_timesteps, tb_log_name or type(self).__name__, progress_bar
        )
        callback.on_training_start(locals(), globals())
        self._share_state()
        specs = self._worker_specs()
        latest_obs = shared_obs_buffer(self.observation_space, self.n_envs)
        normalization = None
        venv = self._vec_normalize_env
        if venv is not None and self._env_recipe is not None and self._env_recipe.normalizes:
            normalization = share_with_main(venv, main_vec_normalizes(self.env, venv), len(specs))
        for spec in specs:
            spec.shared["latest_obs"] = latest_obs
            spec.synced = (*spec.synced, "latest_obs")  # each env's slot has one writer: merging changes is exact
            if normalization is not None:
                spec.shared["normalization"] = normalization
                spec.owned = (*spec.owned, "normalization")  # slot rank + 1 is worker rank's (one writer per slot)
        runtime = self._runtime = make_runtime(self.backend, self.start_method, getattr(self, "backend_kwargs", None))
        try:
            runtime.start(specs, worker_seed(self.seed), self.num_timesteps, total_timesteps)
            # torch's default threads (one per core) next to busy workers would oversubscribe the CPUs
            requested = getattr(self, "torch_threads", None)  # models saved before it existed: None
            with learner_cpu_settings(runtime.local_workers(), requested) as threads, frozen_evaluations(self, callback):
                self.logger.record("config/torch_threads", threads)
                self._supervise(runtime, callback, total_timesteps, log_interval, latest_obs)
        finally:
            self._runtime = None
            runtime.close()
            if self._vec_normalize_env is not None:
                freeze_main(self._vec_normalize_env, main_vec_normalizes(self.env, self._vec_normalize_env))
        show_final_timesteps(callback, self.num_timesteps)
        callback.on_training_end()
        return self

    @contextlib.contextmanager
    def pause_workers(self, timeout: float = 30.0) -> Iterator[None]:
        """Park every worker while the block runs, e.g. to evaluate a frozen policy from a callback::

            with model.pause_workers():
                mean, std = evaluate_policy(model, eval_env)

        Workers park between two updates (never mid-update) and resume when the block ends. Outside ``learn()``
        there are no workers and this does nothing. Without it, workers keep training while callbacks run.
        """
        runtime = self._runtime
        if runtime is None:
            yield
            return
        while True:
            try:
                runtime.pause(timeout)
                break
            except WorkerError as error:  # a worker found dead here is handled as the main loop would (Ape-X restarts)
                self._on_worker_error(runtime, error)
        try:
            yield
        finally:
            runtime.resume()

    def _worker_policy_config(self, n_steps: int, gamma: float) -> dict[str, Any]:
        """The fields of :class:`WorkerPolicyConfig` for this model's workers."""
        return dict(
            env_recipe=self._env_recipe,
            n_envs=self.n_envs_per_worker,
            policy_class=self.policy_class,
            observation_space=self.observation_space,
            action_space=self.action_space,
            policy_kwargs=self.policy_kwargs,
            lr_schedule=self.lr_schedule,
            n_steps=n_steps,
            gamma=gamma,
            step_timeout=self.step_timeout,
            algorithm=type(self).__name__,
            league=None if self.league is None else self.league.seed(),
        )

    # --- the supervision loop ----------------------------------------------------------------------------------

    def _supervise(
        self, runtime: Runtime, callback: BaseCallback, total_timesteps: int, log_interval: int, latest_obs: Any
    ) -> None:
        """Turn the workers' progress into SB3's ``learn()`` loop: one ``on_step()`` per ``n_envs`` global steps while
        ``num_timesteps < total_timesteps`` (SB3's loop condition, so a progress bar ends at ``total_timesteps``). Steps
        the workers take after that (the end of their last segment) are counted once they have finished.

        When a callback stops training, the workers are asked to stop and their last messages are still received
        (every message exactly once): the learner no longer updates, but its replay gets every transition sent and
        the rollout statistics every episode finished."""
        n_envs = self.n_envs
        start = self.num_timesteps
        # Episodes the workers reported, per env, oldest first: each callback step shows at most one per env (SB3's
        # `dones` are per env), so a backlog drains in O(n_envs) per step, however far the main process lags behind.
        pending: list[deque[dict[str, Any]]] = [deque() for _ in range(n_envs)]
        waiting: set[int] = set()
        iteration_steps = self._iteration_steps()
        next_log = start + iteration_steps * log_interval
        self._train_stats = {}
        counters = self._async_counters()
        self._async_metrics = None if counters is None else AsyncMetrics(start, counters)
        stopping, stop_deadline = False, math.inf
        while True:
            try:
                wait = 0.02 if stopping else self._train_between_polls()
                messages = runtime.poll(timeout=wait)
            except WorkerError as error:
                self._on_worker_error(runtime, error)
                messages = []
            for rank, kind, data in messages:
                if kind == "stats":
                    for env_index, entry in data["episodes"]:
                        pending[env_index].append(entry)
                        waiting.add(env_index)
                    if data["train"]:
                        self._train_stats[rank] = data["train"]
                    if self._async_metrics is not None:
                        if "lags" in data:
                            self._async_metrics.add_lags(data["lags"])
                        if "worker" in data:
                            self._async_metrics.add_worker(rank, data["worker"])
                else:
                    self._on_message(rank, kind, data)
            target = start + runtime.steps()
            finished = not runtime.running()
            if stopping:
                if finished or time.monotonic() > stop_deadline:  # past the deadline, close() ends them
                    break
                continue
            new_obs = read_obs(latest_obs) if self._callback_step_due(target, finished, total_timesteps) else None
            keep_going = True
            while keep_going and self._callback_step_due(target, finished, total_timesteps):
                self.num_timesteps = min(self.num_timesteps + n_envs, target) if finished else self.num_timesteps + n_envs
                dones = np.zeros(n_envs, dtype=bool)
                infos: list[dict[str, Any]] = [{} for _ in range(n_envs)]
                for env_index in list(waiting):
                    dones[env_index] = True
                    infos[env_index] = pending[env_index].popleft()
                    if not pending[env_index]:
                        waiting.discard(env_index)
                self._update_info_buffer(infos, dones)
                self._episode_num += int(dones.sum())
                callback.update_locals(dict(dones=dones, infos=infos, new_obs=new_obs, rewards=None))
                keep_going = callback.on_step()
                if self.num_timesteps >= next_log:
                    next_log += iteration_steps * log_interval
                    self.dump_logs()
            self._current_progress_remaining = max(0.0, 1.0 - self.num_timesteps / total_timesteps)
            if not keep_going:
                runtime.request_stop()
                stopping, stop_deadline = True, time.monotonic() + _STOP_SECONDS
                continue
            if finished:
                break
        # Episodes that ended in the workers' last segments (after the last callback) still count in the rollout
        # statistics, and their steps in num_timesteps; _episode_num stays the count the callbacks saw.
        self._update_info_buffer([entry for queue in pending for entry in queue])
        self.num_timesteps = max(self.num_timesteps, start + runtime.steps())

    def _callback_step_due(self, target: int, finished: bool, total_timesteps: int) -> bool:
        """Whether the workers' ``target`` global steps owe the callbacks another ``on_step()``."""
        if self.num_timesteps >= total_timesteps:
            return False
        return target >= self.num_timesteps + self.n_envs or (finished and target > self.num_timesteps)

    def _iteration_steps(self) -> int:
        """Global steps of one SB3 iteration (``n_steps * n_envs``): ``log_interval`` counts these."""
        return self.n_envs * int(getattr(self, "n_steps", 1))

    # --- hooks of the algorithms --------------------------------------------------------------------------------

    def _train_between_polls(self) -> float:
        """Work of a learner in the main process (Ape-X), between two polls; returns how long the next poll may wait."""
        return 0.02

    def _on_worker_error(self, runtime: Runtime, error: WorkerError) -> None:
        """A worker died: raise (A3C, the async Q family), or restart it with ``runtime.restart`` (Ape-X's actors)."""
        raise error

    def _on_message(self, rank: int, kind: str, data: Any) -> None:
        raise RuntimeError(f"Unexpected message {kind!r} from worker {rank}")

    def _log_extra(self) -> None:
        """Record algorithm-specific values before a log dump."""
        if self.epsilon_greedy:
            self.logger.record("rollout/exploration_rate", self.exploration_rate)  # type: ignore[attr-defined]

    def _async_counters(self) -> dict[str, float] | None:
        """The cumulative counters of :mod:`sb3_async.common.async_metrics` (``updates``, and ``replayed`` and
        ``learner_busy`` where there is a learner); by default those of :attr:`gradient_sharing`, None without one (no
        ``async/`` keys)."""
        return None if self.gradient_sharing is None else self.gradient_sharing.counters()

    def _sample_ages(self) -> tuple[float, int] | None:
        """Mean and max age of the transitions sampled since the last log (None: no replay, or no batch)."""
        return None

    # --- statistics and logs ------------------------------------------------------------------------------------

    def dump_logs(self) -> None:
        """Write the log (SB3's ``dump_logs()``, which ``LogEveryNTimesteps`` calls): rollout statistics, fps since
        the start of this ``learn()`` call, the workers' latest training metrics and the ``async/`` metrics since the
        last log."""
        elapsed = max((time.time_ns() - self.start_time) / 1e9, sys.float_info.epsilon)
        fps = int((self.num_timesteps - self._num_timesteps_at_start) / elapsed)
        assert self.ep_info_buffer is not None
        if len(self.ep_info_buffer) > 0:
            self.logger.record("rollout/ep_rew_mean", safe_mean([ep["r"] for ep in self.ep_info_buffer]))
            self.logger.record("rollout/ep_len_mean", safe_mean([ep["l"] for ep in self.ep_info_buffer]))
            record_seat_statistics(self.logger, self.ep_info_buffer)
        if self.ep_success_buffer:
            self.logger.record("rollout/success_rate", safe_mean(self.ep_success_buffer))
        self.logger.record("time/fps", fps)
        self.logger.record("time/time_elapsed", int(elapsed), exclude="tensorboard")
        self.logger.record("time/total_timesteps", self.num_timesteps, exclude="tensorboard")
        self.logger.record("train/learning_rate", self.lr_schedule(self._current_progress_remaining))
        keys = sorted({key for stats in self._train_stats.values() for key in stats})
        for key in keys:
            values = [stats[key] for stats in self._train_stats.values() if key in stats]
            self.logger.record(f"train/{key}", float(np.mean(values)))
        if self._async_metrics is not None:
            self._async_metrics.record(self.logger, self.num_timesteps, self._async_counters() or {}, self._sample_ages())
        if self.league is not None:
            self.league.record(self.logger)
        self._log_extra()
        self.logger.dump(step=self.num_timesteps)

    def _update_info_buffer(self, infos: list[dict[str, Any]], dones: np.ndarray | None = None) -> None:
        assert self.ep_info_buffer is not None and self.ep_success_buffer is not None
        for info in infos:
            if "episode" in info:
                game = info.get("game")  # a turn-based game's episode: its seat and result go with it
                # the games that ended before the learner's first move (episodes of no step), then this one
                games = [] if game is None else [*game.get("ended_at_reset", ()), game]
                for played in games:
                    if "opponent" in played:  # a game against the league
                        if self.league is None:
                            self.league = LeagueRecord()
                        self.league.add_game(played)
                episode = (
                    info["episode"] if game is None else {**info["episode"], "seat": game["seat"], "result": game["result"]}
                )
                for ended in games[:-1]:
                    self.ep_info_buffer.append(
                        {"r": ended["r"], "l": 0, "t": episode.get("t", 0.0), "seat": ended["seat"], "result": ended["result"]}
                    )
                self.ep_info_buffer.append(episode)
            if "is_success" in info:
                self.ep_success_buffer.append(info["is_success"])
