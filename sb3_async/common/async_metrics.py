"""The ``async/`` log keys: how stale the data and parameters of a run are, and how fast each side of it goes, over the
window since the last log (docs: "Debugging and monitoring an async run").

Where they come from:

* Workers send, with their batched ``"stats"`` messages (no message per step), their own env step count and, for
  Ape-X's actors, the seconds they waited for the learner and their blocks in flight
  (:meth:`~sb3_async.common.worker_side.StatsReporter.record_worker`).
* Gradient-sharing workers (A3C, the async Q family) count every update they apply to the shared parameters θ in a
  shared counter (one slot per worker, :class:`~sb3_async.common.gradient_sharing.GradientWorker`). A worker notes the
  count when it copies θ (θ' = θ) and again when it applies the gradient it computed on θ': the difference is that
  gradient's *policy lag*, the shared updates other workers applied in between (0 with one worker). Workers send the
  count, sum and maximum of their lags (:meth:`~sb3_async.common.worker_side.StatsReporter.record_update`).
* Ape-X's actors send with each block the learner update count of the parameters they acted with; the learner notes
  the block's *parameter age* (:meth:`AsyncMetrics.add_param_age`) when it arrives.
* Replays (:class:`~sb3_async.common.buffers.prioritized.PrioritizedReplayBuffer`,
  :class:`~sb3_async.common.buffers.episodic.EpisodicDualReplayBuffer`) measure the *sample age* of each batch
  (:class:`~sb3_async.common.buffers.ages.SampleAges`).
* The main process keeps cumulative counters: ``updates`` (gradient steps), ``replayed`` (transitions learned from)
  and ``learner_busy`` (seconds the learner computed) or ``learner_wait`` (seconds it waited for data).

Keys (each only where its source exists):

* ``async/policy_lag_mean``, ``async/policy_lag_max``: shared updates between a gradient's snapshot and its application;
* ``async/param_age_mean``, ``async/param_age_max``: learner updates between the parameters an Ape-X block was acted
  with and its arrival at the learner;
* ``async/sample_age_mean``, ``async/sample_age_max``: transitions stored after a sampled transition, when sampled;
* ``async/env_steps_per_s``: env steps of all workers per second;
* ``async/worker_env_steps_per_s_min``, ``async/worker_env_steps_per_s_max``: the slowest and fastest worker's rate;
* ``async/updates_per_s``: gradient steps per second;
* ``async/replay_ratio``: transitions learned from per env step;
* ``async/blocks_in_flight``: Ape-X blocks sent by the actors and not yet in the replay;
* ``async/learner_wait_share``: share of the time the learner waited for data;
* ``async/actor_wait_share``: mean share of the time an actor waited for the learner.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from stable_baselines3.common.logger import Logger

__all__ = ["AsyncMetrics"]


class _Extremes:
    """Count, sum and maximum of integer samples."""

    def __init__(self) -> None:
        self.count, self.total, self.largest = 0, 0, 0

    def add(self, count: int, total: int, largest: int) -> None:
        if count:
            self.count += count
            self.total += total
            self.largest = max(self.largest, largest) if self.count > count else largest

    def record(self, logger: Logger, name: str) -> None:
        if self.count:
            logger.record(f"async/{name}_mean", self.total / self.count)
            logger.record(f"async/{name}_max", self.largest)


class AsyncMetrics:
    """The main process' window of ``async/`` metrics, from one log to the next.

    :param timesteps: the model's ``num_timesteps`` at the start of the window
    :param counters: the main process' cumulative counters at the start of the window (``updates``, and where the
        algorithm has them ``replayed`` and ``learner_busy``)
    """

    def __init__(self, timesteps: int, counters: Mapping[str, float]):
        self._worker_start: dict[int, dict[str, float]] = {}  # each worker's cumulative values at the window's start
        self._worker_now: dict[int, dict[str, Any]] = {}
        self._restart(timesteps, counters)

    def _restart(self, timesteps: int, counters: Mapping[str, float]) -> None:
        self._time, self._timesteps, self._counters = time.monotonic(), timesteps, dict(counters)
        self._lags, self._param_ages = _Extremes(), _Extremes()
        for rank, report in self._worker_now.items():
            self._worker_start[rank] = {key: report[key] for key in ("steps", "wait") if key in report}

    def add_lags(self, lags: Sequence[int]) -> None:
        """Add a worker's report: ``(updates, sum of their lags, max of their lags)``."""
        count, total, largest = (int(value) for value in lags)
        self._lags.add(count, total, largest)

    def add_param_age(self, age: int) -> None:
        """Add the parameter age (learner updates) of one block that reached the learner."""
        self._param_ages.add(1, int(age), int(age))

    def add_worker(self, rank: int, report: Mapping[str, Any]) -> None:
        """Add a worker's latest cumulative ``steps`` (its own env steps), ``wait`` (seconds it waited for the
        learner) and ``in_flight`` (blocks sent and not yet inserted)."""
        previous = self._worker_now.get(rank)
        if previous is not None and report.get("steps", 0) < previous.get("steps", 0):
            self._worker_start.pop(rank, None)  # a restarted worker
        if previous is not None and report.get("wait", 0.0) < previous.get("wait", 0.0):
            self._worker_start.setdefault(rank, {})["wait"] = 0.0  # a restarted actor counts its waits from 0
        self._worker_now[rank] = dict(report)

    def record(
        self, logger: Logger, timesteps: int, counters: Mapping[str, float], sample_ages: tuple[float, int] | None = None
    ) -> None:
        """Record the window's ``async/`` values in ``logger`` and start a new window.

        :param timesteps: the model's ``num_timesteps`` now
        :param counters: the cumulative counters now (the keys given at the start)
        :param sample_ages: mean and max sample age over the window's batches (None: no batch, or a replay that does
            not measure them)
        """
        elapsed = max(time.monotonic() - self._time, 1e-9)
        self._lags.record(logger, "policy_lag")
        self._param_ages.record(logger, "param_age")
        if sample_ages is not None:
            logger.record("async/sample_age_mean", sample_ages[0])
            logger.record("async/sample_age_max", sample_ages[1])
        steps = timesteps - self._timesteps
        logger.record("async/env_steps_per_s", steps / elapsed)
        rates, waits = [], []
        for rank, report in self._worker_now.items():
            start = self._worker_start.get(rank, {})
            if "steps" in report:
                rates.append((report["steps"] - start.get("steps", 0)) / elapsed)
            if "wait" in report:
                waits.append(min(1.0, (report["wait"] - start.get("wait", 0.0)) / elapsed))
        if rates:
            logger.record("async/worker_env_steps_per_s_min", min(rates))
            logger.record("async/worker_env_steps_per_s_max", max(rates))
        delta = {key: counters[key] - self._counters.get(key, 0) for key in counters}
        logger.record("async/updates_per_s", delta.get("updates", 0) / elapsed)
        if "replayed" in delta and steps > 0:
            logger.record("async/replay_ratio", delta["replayed"] / steps)
        in_flight = [report["in_flight"] for report in self._worker_now.values() if "in_flight" in report]
        if in_flight:
            logger.record("async/blocks_in_flight", sum(in_flight))
        if "learner_wait" in delta:
            logger.record("async/learner_wait_share", min(1.0, delta["learner_wait"] / elapsed))
        elif "learner_busy" in delta:
            logger.record("async/learner_wait_share", max(0.0, 1.0 - delta["learner_busy"] / elapsed))
        if waits:
            logger.record("async/actor_wait_share", sum(waits) / len(waits))
        self._restart(timesteps, counters)
