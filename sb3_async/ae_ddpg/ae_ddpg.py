"""AE-DDPG (Zhang et al., "Asynchronous Episodic Deep Deterministic Policy Gradient", https://arxiv.org/abs/1903.00827).

One actor-critic pair (SB3's ``TD3Policy`` with DDPG settings, trained by TD3's ``train()``) and many envs stepped
asynchronously in an :class:`~sb3_async.env_pool.AsyncEnvPool` (§IV-A): the actor acts, in one batched forward
pass, on whichever envs have finished their step, sends them their next actions, and the learner runs its gradient
steps while those envs step. Each transition goes to the replay as it arrives; the episodic dual replay's per-env
caches (Algorithm 1's ``B_i``) are kept here, since the envs' transitions arrive interleaved.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

import gymnasium as gym
import numpy as np
import torch as th
import torch.nn.functional as F
from gymnasium import spaces
from stable_baselines3.common.buffers import ReplayBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.noise import ActionNoise, VectorizedActionNoise
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.type_aliases import GymEnv, MaybeCallback, RolloutReturn, Schedule, TrainFreq
from stable_baselines3.common.utils import should_collect_more_steps
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv, VecTransposeImage
from stable_baselines3.td3.policies import CnnPolicy, MlpPolicy, TD3Policy
from stable_baselines3.td3.td3 import TD3

from sb3_async.common.buffers.episodic import EpisodicDualReplayBuffer
from sb3_async.common.buffers.prioritized import PrioritizedReplayBuffer
from sb3_async.common.callbacks import show_final_timesteps
from sb3_async.common.noise import RandomWalkActionNoise
from sb3_async.common.observations import SB3_OBSERVATION_SPACES, check_finite_observations, check_observation_space
from sb3_async.common.returns import bootstrapped_targets, weighted_squared_loss
from sb3_async.common.save_util import AtomicReplaySaves, replay_file_errors
from sb3_async.common.torch_utils import check_torch_threads, learner_cpu_settings, prefer_fused_adam, soft_update
from sb3_async.env_pool import AsyncEnvPool, EnvPoolBase
from sb3_async.env_pool.core import load_pickled_env, pickled_env_factory
from sb3_async.env_pool.vec_env import PoolVecEnv
from sb3_async.env_pool.worker import FINAL_INFO, FINAL_OBS
from sb3_async.validation import check_backend, check_float, check_int, check_replay_sizes

SelfAEDDPG = TypeVar("SelfAEDDPG", bound="AEDDPG")

#: Number of envs of the paper's MuJoCo and L2R runs: 16 interaction threads (§V-B, §V-C).
PAPER_N_ENVS = 16
#: The paper's range of rho, the probability of sampling from HMemory, "tuned according to the number of interaction
#: threads" (§V-B).
RHO_RANGE = (0.05, 0.25)


def rho_for_n_envs(n_envs: int) -> float:
    """Our mapping of the number of envs to rho (the paper gives the range [0.05, 0.25] and says it grows with the
    number of threads, not the values): linear from 0.05 with 1 env to 0.25 with 16 envs (the paper's count), 0.25 above.

    :param n_envs: number of envs stepped asynchronously
    """
    if isinstance(n_envs, bool) or not isinstance(n_envs, (int, np.integer)) or n_envs < 1:
        raise ValueError(f"Invalid n_envs={n_envs!r}: expected a positive integer")
    low, high = RHO_RANGE
    return low + (high - low) * (min(int(n_envs), PAPER_N_ENVS) - 1) / (PAPER_N_ENVS - 1)


def ddpg_targets(rewards: th.Tensor, dones: th.Tensor, next_q_values: th.Tensor, discounts: th.Tensor | float) -> th.Tensor:
    """Eq. 3: ``y_i = r_i + gamma Q'(s_{i+1}, mu'(s_{i+1}))``, with no bootstrap past a terminal state (the replay
    learners' one target, :func:`~sb3_async.common.returns.bootstrapped_targets`).

    :param rewards: ``r_i``
    :param dones: 1 where ``s_{i+1}`` is terminal (time-limit truncations are not: SB3's replay clears them)
    :param next_q_values: ``Q'(s_{i+1}, mu'(s_{i+1}))`` from the target networks
    :param discounts: ``gamma`` (or the n-step discounts a replay returns)
    """
    return bootstrapped_targets(rewards, dones, next_q_values, discounts)


def weighted_critic_loss(q_values: th.Tensor, targets: th.Tensor, weights: th.Tensor) -> th.Tensor:
    """Eq. 2 with prioritized replay's importance-sampling weights (Schaul et al. 2016, Alg. 1):
    ``(1/n) sum_i w_i (y_i - Q(s_i, a_i))^2``; with all ``w_i = 1`` it is TD3's ``F.mse_loss``, so the prioritized
    ablation differs from the others by its sampling and weights only.

    :param q_values: ``Q(s_i, a_i)``
    :param targets: ``y_i`` (eq. 3)
    :param weights: ``w_i``, max-normalised
    """
    return weighted_squared_loss(targets - q_values, weights, scale=1.0)


class EpisodeCaches:
    """Algorithm 1's per-env cache buffers ``B_i`` when every env writes into one Memory in arrival order: for each env,
    the Memory rows of its running episode and its return. A row is forgotten once ``capacity`` later writes have
    overwritten it (an episode longer than Memory loses its start, as in :class:`EpisodicDualReplayBuffer`).

    :param n_envs: number of envs
    :param capacity: Memory's capacity (transitions)
    """

    def __init__(self, n_envs: int, capacity: int):
        self.capacity = int(capacity)
        self.rows: list[list[tuple[int, int]]] = [[] for _ in range(n_envs)]  # (Memory row, write number) per env
        self.returns = np.zeros(n_envs, dtype=np.float64)
        self.writes = 0

    def record(self, env_idx: int, row: int, reward: float) -> None:
        """Line 7: env ``env_idx``'s transition was written to Memory's row ``row``."""
        self.rows[env_idx].append((int(row), self.writes))
        self.returns[env_idx] += float(reward)
        self.writes += 1

    def finish(self, env_idx: int) -> tuple[np.ndarray, float]:
        """Lines 9-10: the Memory rows still holding env ``env_idx``'s finished episode (in order) and its return
        ``R_e``; the cache is emptied for the next episode."""
        oldest = self.writes - self.capacity
        rows = np.array([row for row, write in self.rows[env_idx] if write >= oldest], dtype=np.int64)
        episodic_return = float(self.returns[env_idx])
        self.clear(env_idx)
        return rows, episodic_return

    def clear(self, env_idx: int | None = None) -> None:
        """Drop the running episode of one env (or of all: an env reset cuts them)."""
        for i in range(len(self.rows)) if env_idx is None else [env_idx]:
            self.rows[i] = []
            self.returns[i] = 0.0


#: Models saved by earlier versions rebuild their pickled env through this name.
_load_pickled_env = load_pickled_env


def make_pool_vec_env(
    env: Any, n_envs: int | None, pool_kwargs: dict[str, Any]
) -> tuple[PoolVecEnv, Callable[[], gym.Env] | str | None]:
    """The user's env as a :class:`PoolVecEnv` over an :class:`AsyncEnvPool`, and what rebuilds it after ``load()``.

    :param env: an env id, a factory, a ``gym.Env`` (copied by pickling), a ``DummyVecEnv`` (its first env copied, as
        many copies as it has envs), an ``AsyncEnvPool`` or its ``as_vec_env()``
    :param n_envs: number of envs; None: 16 (the paper) for ids, factories and envs, the given count for pools/VecEnvs
    :param pool_kwargs: for :class:`AsyncEnvPool` (``n_workers``, ``start_method``, ``on_error``, ``env_kwargs``,
        ``backend``, ``backend_kwargs``)
    """
    source: Callable[[], gym.Env] | str | None
    if isinstance(env, EnvPoolBase):
        env = PoolVecEnv(env)
    if isinstance(env, PoolVecEnv):
        given, source = env, None
    elif isinstance(env, VecEnv):
        if type(env) is not DummyVecEnv:
            raise ValueError(
                f"Invalid env={env!r}: AEDDPG steps its envs asynchronously in an AsyncEnvPool and can take a plain "
                "DummyVecEnv (copied into the pool), an AsyncEnvPool (or its as_vec_env()), an env id or a factory; "
                f"not a {type(env).__name__} (VecEnv wrappers such as VecNormalize are not supported)"
            )
        factory = pickled_env_factory(env.envs[0])
        given = AsyncEnvPool(factory, n_envs or env.num_envs, **pool_kwargs).as_vec_env()
        source = factory
    elif isinstance(env, str) or callable(env) and not isinstance(env, gym.Env):
        given = AsyncEnvPool(env, n_envs or PAPER_N_ENVS, **pool_kwargs).as_vec_env()
        source = env
    elif isinstance(env, gym.Env):
        factory = pickled_env_factory(env)
        given = AsyncEnvPool(factory, n_envs or PAPER_N_ENVS, **pool_kwargs).as_vec_env()
        source = factory
    else:
        raise TypeError(f"Invalid env={env!r}: expected an env id, a factory, a gym.Env, a DummyVecEnv or an AsyncEnvPool")
    copies = given.pool.n_env_copies  # a multi-agent env's copies (a slot per agent each), else its envs
    if n_envs is not None and copies != n_envs:
        if source is not None:  # built here: nobody else will close it
            given.close()
        raise ValueError(f"Invalid n_envs={n_envs}: the env given has {copies} envs")
    return given, source


def _transposed(
    env: VecTransposeImage, obs: dict[int, Any], infos: dict[int, dict[str, Any]]
) -> tuple[dict[int, Any], dict[int, dict[str, Any]]]:
    """The pool's observations (and final observations) as SB3's ``VecTransposeImage`` gives them: channel-first."""
    obs = {i: env.transpose_observations(value) for i, value in obs.items()}
    infos = {
        i: {**info, FINAL_OBS: env.transpose_observations(info[FINAL_OBS])} if FINAL_OBS in info else info
        for i, info in infos.items()
    }
    return obs, infos


class AEDDPG(AtomicReplaySaves, TD3):
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
    :param pool_kwargs: for the :class:`AsyncEnvPool` built from an id, factory or env (``n_workers``, ``start_method``,
        ``on_error``, ``env_kwargs``)
    :param backend: where the pool built from an id, factory or env steps its envs: ``"mp"`` (default), worker
        processes on this machine; ``"ray"``, Ray actors anywhere in a Ray cluster (``pip install "sb3-async[ray]"``),
        the learner and the actor-critic staying in this process (see the pool's ``backend`` and docs/guide/ray.md). A
        given pool keeps its own
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
    _buffer_actions: np.ndarray  # the scaled actions of the steps in flight, per env

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
        _init_setup_model: bool = True,
    ):
        self.torch_threads = check_torch_threads(torch_threads)
        buffer_size, batch_size = check_replay_sizes(buffer_size, batch_size)
        gamma = check_float("gamma", gamma, 0.0, 1.0)
        tau = check_float("tau", tau, 0.0, 1.0)
        learning_starts = check_int("learning_starts", learning_starts, minimum=0)
        if n_envs is not None and (isinstance(n_envs, bool) or not isinstance(n_envs, (int, np.integer)) or n_envs < 1):
            raise ValueError(f"Invalid n_envs={n_envs!r}: expected a positive integer or None")
        if isinstance(min_ready, bool) or not isinstance(min_ready, (int, np.integer)) or min_ready < 1:
            raise ValueError(f"Invalid min_ready={min_ready!r}: expected a positive integer")
        if pool_kwargs is not None and not isinstance(pool_kwargs, dict):
            raise TypeError(f"Invalid pool_kwargs={pool_kwargs!r}: expected a dict or None")
        if policy_kwargs is not None and not isinstance(policy_kwargs, dict):
            raise TypeError(f"Invalid policy_kwargs={policy_kwargs!r}: expected a dict or None")
        check_backend(backend, backend_kwargs)
        if (
            isinstance(updates_per_transition, bool)
            or not isinstance(updates_per_transition, (int, float, np.integer, np.floating))
            or not np.isfinite(updates_per_transition)
            or updates_per_transition <= 0
        ):
            raise ValueError(f"Invalid updates_per_transition={updates_per_transition!r}: expected a positive finite number")
        if updates_per_transition != 1.0 and not (isinstance(gradient_steps, (int, np.integer)) and gradient_steps < 0):
            raise ValueError(
                f"Invalid updates_per_transition={updates_per_transition!r} with gradient_steps={gradient_steps!r}: "
                "it scales gradient_steps=-1 (one update per transition) only"
            )
        self.updates_per_transition = float(updates_per_transition)
        self._update_credit = 0.0  # fraction of a gradient step owed to the next training
        if pool_kwargs and {"backend", "backend_kwargs"} & set(pool_kwargs):
            raise ValueError("Invalid pool_kwargs: pass backend and backend_kwargs to AEDDPG itself, not in pool_kwargs")
        if backend == "ray":  # say what to install now, not at the first learn()
            from sb3_async.runtime.ray_connect import import_ray

            import_ray()
        if replay_buffer_class is None:
            replay_buffer_class = EpisodicDualReplayBuffer
        if not isinstance(replay_buffer_class, type) or not issubclass(replay_buffer_class, ReplayBuffer):
            raise TypeError(f"Invalid replay_buffer_class={replay_buffer_class!r}: expected a ReplayBuffer subclass")
        if isinstance(action_noise, str) and action_noise != "random_walk":
            raise ValueError(f"Invalid action_noise={action_noise!r}: expected 'random_walk', an SB3 ActionNoise or None")
        self.pool_kwargs = dict(pool_kwargs or {})
        self.backend, self.backend_kwargs = backend, dict(backend_kwargs or {})
        self.min_ready = int(min_ready)
        self.env_source: Callable[[], gym.Env] | str | None = None
        if env is not None:
            env, self.env_source = make_pool_vec_env(env, None if n_envs is None else int(n_envs), self._pool_arguments())
            try:
                check_observation_space(type(self).__name__, env.observation_space, self.supported_observation_spaces)
            except ValueError:
                if self.env_source is not None:  # built here: nobody else will close it
                    env.close()
                raise
        policy_kwargs = dict(policy_kwargs or {})
        policy_kwargs.setdefault("net_arch", dict(pi=[256, 256, 128], qf=[256, 128]))  # §V-B, MuJoCo
        policy_kwargs.setdefault("n_critics", 1)  # DDPG: one critic
        prefer_fused_adam(policy_kwargs)
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
            self._reset_collection_stats()
        if _init_setup_model:
            self._setup_model()

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
        self._caches = EpisodeCaches(self.n_envs, self.replay_buffer.buffer_size)

    def load_replay_buffer(self, path: Any, truncate_last_traj: bool = True) -> None:
        """SB3's ``load_replay_buffer``, for a buffer with one Memory column (the one AEDDPG saves); the running
        episodes' caches are dropped (their rows were in the replaced Memory)."""
        previous = self.replay_buffer
        with replay_file_errors(path):
            super().load_replay_buffer(path, truncate_last_traj)
        assert self.replay_buffer is not None
        if self.replay_buffer.n_envs != 1:
            n_columns, self.replay_buffer = self.replay_buffer.n_envs, previous
            raise ValueError(
                f"Invalid replay buffer at {path!r}: it has {n_columns} env columns; AEDDPG writes every env into one "
                "Memory column (n_envs=1), as the buffers it saves"
            )
        if isinstance(self.replay_buffer, EpisodicDualReplayBuffer):
            self.replay_buffer.episode_caches = False
        self._caches = EpisodeCaches(self.n_envs, self.replay_buffer.buffer_size)

    def _pool_arguments(self) -> dict[str, Any]:
        """The :class:`AsyncEnvPool` arguments of the pools built here: ``pool_kwargs`` and the backend (a model saved
        before AEDDPG had a backend loads as ``"mp"``)."""
        backend = getattr(self, "backend", "mp")
        return dict(self.pool_kwargs, backend=backend, backend_kwargs=getattr(self, "backend_kwargs", None) or None)

    def _excluded_save_params(self) -> list[str]:
        return [*super()._excluded_save_params(), "_caches", "_in_flight", "_episode_stats", "_pending", "_buffer_actions"]

    # ---------------------------------------------------------------- envs
    def set_env(self, env: GymEnv | str | AsyncEnvPool | Callable[[], gym.Env], force_reset: bool = True) -> None:
        """Replace the training envs (an env id, a factory, an env, a ``DummyVecEnv`` or an ``AsyncEnvPool``); the
        number of envs must stay ``n_envs``."""
        pool_env, source = make_pool_vec_env(env, self.n_envs, self._pool_arguments())
        if source is not None:
            self.env_source = source
        super().set_env(pool_env, force_reset=force_reset)

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
        if self._last_obs is not last_obs or not hasattr(self, "_in_flight"):  # the envs were reset: episodes cut
            self._in_flight: set[int] = set()
            self._caches = EpisodeCaches(self.n_envs, self.replay_buffer.buffer_size)  # type: ignore[union-attr]
            self._episode_stats = np.zeros((self.n_envs, 2), dtype=np.float64)  # return, length of the running episode
            if self.action_noise is not None:
                self.action_noise.reset()
        self._pending = self._empty_pending()
        self._reset_collection_stats()
        self.logger.record("config/torch_threads", th.get_num_threads())
        return result

    def _ensure_env(self) -> None:
        if self.env is None and self.env_source is not None:  # learn() after load(): rebuild the saved env
            self.set_env(self.env_source)

    def _env_processes(self) -> int:
        """The env processes stepping on this machine (none for a pool of Ray actors or envs stepped in this process)."""
        if self.env is None:
            return 0
        pool = self._pool_env().pool
        return pool.n_workers if pool.backend == "mp" else 0

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

    # ---------------------------------------------------------------- collection (§IV-A)
    def _reset_collection_stats(self) -> None:
        self.collection_stats = dict(
            recv_seconds=0.0, train_seconds=0.0, receives=0, transitions=0, started=time.perf_counter()
        )
        self.env_transitions = np.zeros(self.n_envs, dtype=np.int64)

    def _empty_pending(self) -> dict[str, Any]:
        """What the next callback call sees: the transitions since the last one, per env index."""
        return dict(dones=np.zeros(self.n_envs, dtype=bool), infos=[{} for _ in range(self.n_envs)], count=0)

    def _noise(self, ids: list[int]) -> np.ndarray | None:
        """One noise sample per env in ``ids``, advancing only their streams."""
        noise = self.action_noise
        if noise is None:
            return None
        if isinstance(noise, RandomWalkActionNoise):
            return noise.sample(ids)
        if isinstance(noise, VectorizedActionNoise):
            return np.stack([noise.noises[i]() for i in ids])
        return np.stack([noise() for _ in ids])  # one env

    def _act_and_send(self, ids: list[int], learning_starts: int) -> None:
        """SB3's ``_sample_action`` for the envs in ``ids`` (one batched forward pass), then ``send``."""
        assert self._last_obs is not None
        obs = self._last_obs[ids]  # type: ignore[index]
        if self.num_timesteps < learning_starts:
            unscaled = np.array([self.action_space.sample() for _ in ids])
        else:
            unscaled, _ = self.predict(obs, deterministic=False)
        scaled = self.policy.scale_action(unscaled)
        noise = self._noise(ids)
        if noise is not None:
            scaled = np.clip(scaled + noise, -1, 1)
        self._buffer_actions[ids] = scaled
        actions = self.policy.unscale_action(scaled)
        self._pool_env().pool.send({i: actions[k] for k, i in enumerate(ids)})
        self._in_flight.update(ids)

    def _store_transition_of(
        self, i: int, next_obs: np.ndarray, reward: float, terminated: bool, truncated: bool, info: dict[str, Any]
    ) -> None:
        """Algorithm 1, line 7: env ``i``'s transition to Memory and to its cache ``B_i``; lines 9-14 when its episode
        ended. Time-limit truncations are stored as SB3 stores them (not terminal for the critic's target)."""
        assert self.replay_buffer is not None and self._last_obs is not None
        done = terminated or truncated
        step_info = dict(info[FINAL_INFO]) if done else dict(info)
        step_info["TimeLimit.truncated"] = truncated and not terminated
        real_next = info[FINAL_OBS] if done else next_obs
        row = self.replay_buffer.pos
        self.replay_buffer.add(
            self._last_obs[i][None],  # type: ignore[index]
            np.asarray(real_next)[None],
            self._buffer_actions[i][None],
            np.array([reward], dtype=np.float32),
            np.array([done]),
            [step_info],
        )
        self._caches.record(i, row, reward)
        self._episode_stats[i] += (reward, 1)
        if done:
            rows, episodic_return = self._caches.finish(i)
            if isinstance(self.replay_buffer, EpisodicDualReplayBuffer):
                self.replay_buffer.store_episode(rows, 0, episodic_return)
            episode = step_info.get("episode")  # a Monitor-wrapped env reports its own
            if episode is None:
                episode = {"r": self._episode_stats[i, 0], "l": int(self._episode_stats[i, 1]), "t": time.time()}
            self.ep_info_buffer.append(episode)  # type: ignore[union-attr]
            if "is_success" in step_info:
                self.ep_success_buffer.append(step_info["is_success"])  # type: ignore[union-attr]
            self._episode_stats[i] = 0.0
            step_info["terminal_observation"] = real_next  # SB3 VecEnv's key, for callbacks
        pending = self._pending
        if done or not pending["dones"][i]:  # an episode end shown to the callbacks is kept until their next call
            pending["infos"][i] = step_info
        pending["dones"][i] |= done
        self._last_obs[i] = next_obs  # type: ignore[index]

    def _callbacks(self, callback: BaseCallback, rewards: dict[int, float]) -> bool:
        """One ``on_step()`` per ``n_envs`` transitions collected (SB3's rhythm), with the transitions since the last
        call: ``dones``/``infos`` of length ``n_envs``, each finished episode at its env's index."""
        pending = self._pending
        pending["count"] += len(rewards)
        if pending["count"] < self.n_envs:
            return True
        step_rewards = np.zeros(self.n_envs, dtype=np.float32)
        step_rewards[list(rewards)] = list(rewards.values())
        callback.update_locals(
            dict(
                self=self,
                env=self.env,
                new_obs=self._last_obs,
                rewards=step_rewards,
                dones=pending["dones"],
                infos=pending["infos"],
                actions=self._buffer_actions,
            )
        )
        count = pending["count"] - self.n_envs
        self._pending = self._empty_pending()
        self._pending["count"] = count
        return bool(callback.on_step())

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
        """Receive the envs that are ready, store their transitions, act on them and send (they step while the learner
        trains), until ``train_freq`` transitions (or episodes) were collected."""
        pool = self._pool_env().pool
        self.policy.set_training_mode(False)
        if not hasattr(self, "_buffer_actions") or len(self._buffer_actions) != self.n_envs:
            shape = self.action_space.shape or ()
            self._buffer_actions = np.zeros((self.n_envs, *shape), dtype=np.float32)
        if not self._in_flight:  # first collection after a reset: act on every env
            self._act_and_send(list(range(self.n_envs)), learning_starts)
        n_transitions, n_episodes = 0, 0
        stats = self.collection_stats
        callback.on_rollout_start()
        while should_collect_more_steps(train_freq, n_transitions, n_episodes):
            start = time.perf_counter()
            new_obs, rewards, terminations, truncations, infos = pool.recv(min_ready=min(self.min_ready, len(self._in_flight)))
            if isinstance(env, VecTransposeImage):  # the pool's envs are channel-last, the policy's space channel-first
                new_obs, infos = _transposed(env, new_obs, infos)
            stats["recv_seconds"] += time.perf_counter() - start
            ids = list(new_obs)
            self._in_flight.difference_update(ids)
            ended = [i for i in ids if terminations[i] or truncations[i]]
            check_finite_observations([new_obs[i] for i in ids], ids)
            check_finite_observations([infos[i][FINAL_OBS] for i in ended], ended)
            for i in ids:
                self._store_transition_of(i, new_obs[i], rewards[i], terminations[i], truncations[i], infos[i])
            self.num_timesteps += len(ids)
            n_transitions += len(ids)
            n_episodes += len(ended)
            stats["receives"] += 1
            stats["transitions"] += len(ids)
            self.env_transitions[ids] += 1
            if self.action_noise is not None and ended:  # the noise restarts with each episode (eq. 10: y_0 = 0)
                vectorized = isinstance(self.action_noise, VectorizedActionNoise)
                self.action_noise.reset(**(dict(indices=ended) if vectorized else {}))
            # Act on the ready envs at once, so that they step during the callbacks and the gradient steps.
            self._act_and_send(ids, learning_starts)
            self._update_current_progress_remaining(self.num_timesteps, self._total_timesteps)
            if not self._callbacks(callback, rewards):
                show_final_timesteps(callback, self.num_timesteps)
                return RolloutReturn(n_transitions, n_episodes, continue_training=False)
            for _ in ended:
                self._episode_num += 1
                if log_interval is not None and self._episode_num % log_interval == 0:
                    self.dump_logs()
        callback.on_rollout_end()
        # Callbacks are called once per n_envs transitions: the transitions since the last call count too.
        show_final_timesteps(callback, self.num_timesteps)
        return RolloutReturn(n_transitions, n_episodes, continue_training=True)

    def _pool_env(self) -> PoolVecEnv:
        """The :class:`PoolVecEnv` being trained on, under SB3's ``VecTransposeImage`` for image observations."""
        env = self.env.venv if isinstance(self.env, VecTransposeImage) else self.env
        if not isinstance(env, PoolVecEnv):
            raise RuntimeError(f"AEDDPG trains on an AsyncEnvPool's PoolVecEnv, got {self.env!r}")
        return env

    # ---------------------------------------------------------------- learning
    def train(self, gradient_steps: int, batch_size: int = 100) -> None:
        """DDPG's update (eq. 1-4: SB3's TD3 ``train()`` with one critic, no policy delay and no target smoothing), with a
        ``PrioritizedReplayBuffer`` the importance-weighted critic loss and priority updates. Runs while the envs sent
        last step.

        Written once for every replay (not SB3's ``train()``) for speed, the same update: the actor's backward pass
        computes its own parameters' gradients only (the critic's would be discarded), the target networks move in one
        multi-tensor call (:func:`~sb3_async.common.torch_utils.soft_update`).
        """
        start = time.perf_counter()
        gradient_steps = self._scaled_gradient_steps(gradient_steps)
        if gradient_steps == 0:
            return
        buffer: Any = self.replay_buffer  # a ReplayBuffer; a PrioritizedReplayBuffer's samples have weights and indices
        prioritized = isinstance(buffer, PrioritizedReplayBuffer)
        self.policy.set_training_mode(True)
        self._update_learning_rate([self.actor.optimizer, self.critic.optimizer])
        actor, critic = self.actor, self.critic
        actor_params, critic_params = list(actor.parameters()), list(critic.parameters())
        actor_targets, critic_targets = list(self.actor_target.parameters()), list(self.critic_target.parameters())
        actor_losses, critic_losses = [], []
        for _ in range(gradient_steps):
            self._n_updates += 1
            if prioritized:
                data = buffer.sample(batch_size, env=self._vec_normalize_env, beta=self.per_beta())
            else:
                data = buffer.sample(batch_size, env=self._vec_normalize_env)
            discounts = getattr(data, "discounts", None)
            with th.no_grad():
                next_q = self.critic_target(data.next_observations, self.actor_target(data.next_observations))[0]
                targets = ddpg_targets(data.rewards, data.dones, next_q, self.gamma if discounts is None else discounts)
            q_values = critic(data.observations, data.actions)[0]
            if prioritized:
                critic_loss = weighted_critic_loss(q_values, targets, data.weights)
            else:
                critic_loss = F.mse_loss(q_values, targets)  # eq. 2
            critic_losses.append(critic_loss.item())
            critic.optimizer.zero_grad()
            critic_loss.backward()
            critic.optimizer.step()
            if prioritized:
                buffer.update_priorities(data.indices, (targets - q_values).abs().detach().cpu().numpy().ravel())
            actor_loss = -critic.q1_forward(data.observations, actor(data.observations)).mean()  # eq. 1
            actor_losses.append(actor_loss.item())
            actor.optimizer.zero_grad()
            actor_loss.backward(inputs=actor_params)
            actor.optimizer.step()
            soft_update(critic_params, critic_targets, self.tau)  # eq. 4
            soft_update(actor_params, actor_targets, self.tau)
            soft_update(self.critic_batch_norm_stats, self.critic_batch_norm_stats_target, 1.0)
            soft_update(self.actor_batch_norm_stats, self.actor_batch_norm_stats_target, 1.0)
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/actor_loss", np.mean(actor_losses))
        self.logger.record("train/critic_loss", np.mean(critic_losses))
        if prioritized:
            self.logger.record("train/per_beta", self.per_beta())
        self.collection_stats["train_seconds"] += time.perf_counter() - start

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
        stats = self.collection_stats
        elapsed = max(time.perf_counter() - stats["started"], 1e-9)
        return {
            "time/recv_wait_fraction": stats["recv_seconds"] / elapsed,
            "time/train_fraction": stats["train_seconds"] / elapsed,
            "rollout/envs_per_receive": stats["transitions"] / max(stats["receives"], 1),
        }

    def dump_logs(self) -> None:
        for key, value in self.overlap_stats().items():
            self.logger.record(key, value)
        if isinstance(self.replay_buffer, EpisodicDualReplayBuffer):
            for key, value in self.replay_buffer.stats().items():
                self.logger.record(key, value)
        super().dump_logs()
