"""What the workers run of the framework, and the channel they report through.

A worker gets a :class:`WorkerPolicyConfig` (each algorithm's worker config extends it) and reports back through a
:class:`StatsReporter`: episode and training statistics as ``"stats"`` messages, the latest observation of each of
its envs in a shared buffer (:func:`shared_obs_buffer`), which the main process reads (:func:`read_obs`) as the
callbacks' ``new_obs``. Both ends of that buffer live here, so its layout is defined once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.type_aliases import Schedule
from stable_baselines3.common.vec_env import VecEnv

from sb3_async.common.worker_envs import EnvRecipe, WorkerVecEnv
from sb3_async.runtime import WorkerContext

__all__ = ["StatsReporter", "WorkerPolicyConfig", "make_worker_envs", "read_obs", "shared_obs_buffer", "write_obs"]


@dataclass
class WorkerPolicyConfig:
    """What every worker needs to rebuild its envs and its copy of the policy; each algorithm's worker config adds its
    own hyperparameters (gradient-sharing workers: ``GradientWorkerConfig``; Ape-X actors: ``ApeXActorConfig``)."""

    env_recipe: EnvRecipe
    n_envs: int
    policy_class: type
    observation_space: spaces.Space
    action_space: spaces.Space
    policy_kwargs: dict[str, Any]
    lr_schedule: Schedule
    n_steps: int
    gamma: float
    #: Seconds an env step may take before the worker fails with its traceback (None: no limit)
    step_timeout: float | None = field(default=None, kw_only=True)
    #: The algorithm's name, for the workers' messages (a divergence names it)
    algorithm: str = field(default="the algorithm", kw_only=True)
    #: What the workers' leagues of past selves start from (``LeagueSeed``; None: no league yet)
    league: Any = field(default=None, kw_only=True)


def shared_obs_buffer(space: spaces.Space, n_envs: int) -> Any:
    """Shared tensors holding the latest observation of every env (dict observations key by key)."""
    if isinstance(space, spaces.Dict):
        return {key: shared_obs_buffer(sub, n_envs) for key, sub in space.spaces.items()}
    return torch.from_numpy(np.zeros((n_envs, *(space.shape or ())), dtype=space.dtype)).share_memory_()


def write_obs(buffer: Any, offset: int, obs: Any) -> None:
    """Write a worker's observations (``len(obs)`` envs) into ``buffer`` from env ``offset`` on."""
    if isinstance(buffer, dict):
        for key, value in buffer.items():
            write_obs(value, offset, obs[key])
        return
    obs = np.asarray(obs)
    buffer[offset : offset + len(obs)].copy_(torch.from_numpy(obs).reshape(len(obs), *buffer.shape[1:]))


def read_obs(buffer: Any) -> Any:
    """A private copy of every env's latest observation: the workers keep writing the buffer."""
    if isinstance(buffer, dict):
        return {key: read_obs(value) for key, value in buffer.items()}
    return buffer.numpy().copy()


class StatsReporter:
    """Worker side of the statistics flow: episodes, training metrics, the worker's own step count, the policy lag of
    its updates (:meth:`record_update`) and its other ``async/`` values (:meth:`record_worker`) sent in batches, the
    latest observation written to shared memory (``ctx.shared["latest_obs"]``, the callbacks' ``new_obs``) at the same
    rhythm.

    :param ctx: the worker's context
    :param env_offset: global index of this worker's first env
    :param interval: seconds between two messages
    """

    def __init__(self, ctx: WorkerContext, env_offset: int, interval: float = 0.05):
        self.ctx, self.env_offset, self.interval = ctx, env_offset, interval
        self._episodes: list[tuple[int, dict[str, Any]]] = []
        self._train: dict[str, float] = {}
        self._counts: dict[str, int] = {}
        self._lags = [0, 0, 0]  # updates applied, sum and max of their policy lags, since the last message
        self._worker: dict[str, float] = {}
        self._next = time.monotonic() + interval
        self._obs_buffer = ctx.shared.get("latest_obs")

    def record_infos(self, dones: np.ndarray, infos: list[dict[str, Any]]) -> None:
        for i in np.flatnonzero(dones):
            info = infos[i]
            episode = info.get("episode")
            if episode is not None:
                entry = dict(episode=episode)
                for key in ("is_success", "game"):  # a turn-based game's seat and result (per-seat statistics)
                    if key in info:
                        entry[key] = info[key]
                self._episodes.append((self.env_offset + int(i), entry))

    def record_train(self, **metrics: float) -> None:
        for key, value in metrics.items():
            self._train[key] = self._train.get(key, 0.0) + float(value)
            self._counts[key] = self._counts.get(key, 0) + 1

    def record_update(self, lag: int) -> None:
        """Count one update applied to the shared parameters, ``lag`` shared updates after its parameter snapshot."""
        self._lags[0] += 1
        self._lags[1] += lag
        self._lags[2] = max(self._lags[2], lag)

    def record_worker(self, **values: float) -> None:
        """Set the worker's latest cumulative ``async/`` values (:mod:`sb3_async.common.async_metrics`): ``wait``,
        seconds it waited for the learner, ``in_flight``, blocks sent and not yet inserted."""
        self._worker.update(values)

    def maybe_flush(self, obs: Any, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now < self._next:
            return
        self._next = now + self.interval
        train = {key: value / self._counts[key] for key, value in self._train.items()}
        if self._obs_buffer is not None:
            write_obs(self._obs_buffer, self.env_offset, obs)
        message: dict[str, Any] = dict(
            episodes=self._episodes, train=train, worker=dict(self._worker, steps=self.ctx.own_steps)
        )
        if self._lags[0]:
            message["lags"] = self._lags
        self.ctx.send("stats", message)
        self._episodes, self._train, self._counts, self._lags = [], {}, {}, [0, 0, 0]


def make_worker_envs(ctx: WorkerContext, cfg: WorkerPolicyConfig) -> VecEnv:
    """This worker's env copies (``cfg.n_envs``, seeded by rank; a ``VecNormalize`` among the wrappers updates the
    statistics all workers share, in slot ``rank + 1``), their steps watched for ``cfg.step_timeout`` (in a worker
    process by a watchdog that interrupts the stuck step; with ``backend="serial"`` by the main thread, which fails the
    run)."""
    env = cfg.env_recipe.make_vec_env(
        cfg.n_envs, ctx.base_seed + ctx.rank * cfg.n_envs, ctx.shared.get("normalization"), slot=ctx.rank + 1
    )
    inner = env.unwrapped
    if cfg.step_timeout is not None and isinstance(inner, WorkerVecEnv):
        watch = ctx.step_watch(cfg.step_timeout)
        if watch is not None:
            first = ctx.rank * cfg.n_envs  # the global index of the worker's first env
            labels = [f"Env {first + i} (worker {ctx.rank}, {ctx.name})" for i in range(cfg.n_envs)]
            inner.watch_steps(watch, labels)
    return env
