"""The ``async/`` log keys: how stale the workers' gradients are and how fast the run goes, since the last log.

Gradient-sharing workers (A3C, the async Q family) count every update they apply to the shared parameters θ in a
shared counter (one slot per worker, :class:`~sb3_async.common.hogwild.HogwildWorker`). A worker notes the count when
it copies θ (θ' = θ) and again when it applies the gradient it computed on θ': the difference is that gradient's
*policy lag*, the shared updates other workers applied in between (0 with one worker). Workers send the count, sum and
maximum of their lags with their batched ``"stats"`` messages (no message per update); :class:`AsyncMetrics` gathers
them in the main process and writes, at each log:

* ``async/policy_lag_mean``, ``async/policy_lag_max``: over the gradients reported since the last log (absent when
  none was);
* ``async/env_steps_per_s``: env steps of all workers per second since the last log;
* ``async/updates_per_s``: shared updates per second since the last log (read from the shared counter).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from stable_baselines3.common.logger import Logger

__all__ = ["AsyncMetrics"]


class AsyncMetrics:
    """The main process' window of ``async/`` metrics, from one log to the next.

    :param timesteps: the model's ``num_timesteps`` at the start of the window
    :param updates: the shared update count at the start of the window
    """

    def __init__(self, timesteps: int, updates: int):
        self._restart(timesteps, updates)

    def _restart(self, timesteps: int, updates: int) -> None:
        self._time, self._timesteps, self._updates = time.monotonic(), timesteps, updates
        self._lag_count, self._lag_sum, self._lag_max = 0, 0, 0

    def add_lags(self, lags: Sequence[int]) -> None:
        """Add a worker's report: ``(updates, sum of their lags, max of their lags)``."""
        count, total, largest = (int(value) for value in lags)
        self._lag_count += count
        self._lag_sum += total
        self._lag_max = max(self._lag_max, largest) if count else self._lag_max

    def record(self, logger: Logger, timesteps: int, updates: int) -> None:
        """Record the window's ``async/`` values in ``logger`` and start a new window."""
        elapsed = max(time.monotonic() - self._time, 1e-9)
        if self._lag_count:
            logger.record("async/policy_lag_mean", self._lag_sum / self._lag_count)
            logger.record("async/policy_lag_max", self._lag_max)
        logger.record("async/env_steps_per_s", (timesteps - self._timesteps) / elapsed)
        logger.record("async/updates_per_s", (updates - self._updates) / elapsed)
        self._restart(timesteps, updates)
