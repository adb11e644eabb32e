"""The main process' side of ``learn()`` while the workers run: their messages turned into SB3's training loop.

:class:`WorkerSupervision` polls the runtime, turns the workers' global step count into one callback ``on_step()``
per ``n_envs`` steps (with the usual ``dones`` / ``infos`` / ``new_obs`` locals), fills the rollout statistics,
writes the logs, and stops the workers when a callback asks to. What an algorithm adds to this loop are hooks:
:meth:`~WorkerSupervision._learner_step` (Ape-X's learner), :meth:`~WorkerSupervision._on_message` (messages other
than ``"stats"``), :meth:`~WorkerSupervision._on_worker_error` (Ape-X restarts a dead actor) and
:meth:`~WorkerSupervision._log_extra` and :meth:`~WorkerSupervision._async_counters` (the algorithms'
update count, which turns on the ``async/`` keys of :mod:`sb3_async.common.async_metrics`).
"""

from __future__ import annotations

import math
import sys
import time
from collections import deque
from collections.abc import Iterable
from typing import Any

import numpy as np
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.utils import safe_mean

from sb3_async.common.async_metrics import AsyncMetrics
from sb3_async.common.worker_side import read_obs
from sb3_async.runtime import Runtime
from sb3_async.runtime.processes import WorkerError

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


class WorkerSupervision(BaseAlgorithm):
    """The supervision loop of :class:`~sb3_async.common.async_algorithm.AsyncAlgorithm` and its hooks; a mixin
    placed before the SB3 class."""

    #: The latest training metrics of each worker (``"stats"`` messages), averaged over the workers in the logs.
    _train_stats: dict[int, dict[str, float]]
    #: The ``async/`` metrics since the last log, during a ``learn()`` call of an algorithm that counts its updates.
    _async_metrics: AsyncMetrics | None = None

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
                messages = runtime.poll(timeout=0.02 if stopping else self._learner_step())
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

    def _learner_step(self) -> float:
        """Work of a learner in the main process (Ape-X), between two polls; returns how long the next poll may wait."""
        return 0.02

    def _on_worker_error(self, runtime: Runtime, error: WorkerError) -> None:
        """A worker died: raise (A3C, the async Q family), or restart it with ``runtime.restart`` (Ape-X's actors)."""
        raise error

    def _on_message(self, rank: int, kind: str, data: Any) -> None:
        raise RuntimeError(f"Unexpected message {kind!r} from worker {rank}")

    def _log_extra(self) -> None:
        """Record algorithm-specific values before a log dump."""

    def _async_counters(self) -> dict[str, float] | None:
        """The cumulative counters of :mod:`sb3_async.common.async_metrics` (``updates``, and ``replayed`` and
        ``learner_busy`` where there is a learner); None (default): the algorithm logs no ``async/`` keys."""
        return None

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
        self._log_extra()
        self.logger.dump(step=self.num_timesteps)

    def _update_info_buffer(self, infos: list[dict[str, Any]], dones: np.ndarray | None = None) -> None:
        assert self.ep_info_buffer is not None and self.ep_success_buffer is not None
        for info in infos:
            if "episode" in info:
                game = info.get("game")  # a turn-based game's episode: its seat and result go with it
                episode = (
                    info["episode"] if game is None else {**info["episode"], "seat": game["seat"], "result": game["result"]}
                )
                self.ep_info_buffer.append(episode)
            if "is_success" in info:
                self.ep_success_buffer.append(info["is_success"])
