"""The ``async/`` log keys of the gradient-sharing algorithms (policy lag, env steps and updates per second)."""

from __future__ import annotations

import math
import multiprocessing as mp
from pathlib import Path

import pandas as pd
import pytest
import torch
from stable_baselines3.common.logger import Logger, configure

from sb3_async.common.async_metrics import AsyncMetrics
from sb3_async.common.hogwild import HogwildWorker
from tests.helpers import in_process_context, small_model

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ASYNC_KEYS = ("async/policy_lag_mean", "async/policy_lag_max", "async/env_steps_per_s", "async/updates_per_s")


def _progress(name: str, n_workers: int, tmp_path: Path) -> pd.DataFrame:
    """progress.csv of a short CartPole run of ``name`` with ``n_workers`` workers, logged every 500 steps or so."""
    model = small_model(name, n_workers=n_workers)
    model.set_logger(configure(str(tmp_path), ["csv"]))
    model.learn(4000, log_interval=100 // n_workers)  # n_steps=5, one env per worker: a log per ~500 steps
    progress = pd.read_csv(tmp_path / "progress.csv")
    for key in (*ASYNC_KEYS, "time/fps"):
        assert key in progress.columns, f"{key} not logged: {list(progress.columns)}"
    assert len(progress) >= 3
    return progress


@pytest.mark.parametrize("name", ["A3C", "AsyncNStepQ"])
def test_one_worker_has_no_policy_lag(name: str, tmp_path: Path) -> None:
    progress = _progress(name, 1, tmp_path)
    lag_max, lag_mean = progress["async/policy_lag_max"].dropna(), progress["async/policy_lag_mean"].dropna()
    assert len(lag_max) >= 2 and len(lag_mean) == len(lag_max)
    assert (lag_max == 0).all(), lag_max.tolist()
    assert (lag_mean == 0).all(), lag_mean.tolist()
    assert (progress["async/env_steps_per_s"] > 0).all()
    assert (progress["async/updates_per_s"] > 0).all()


@pytest.mark.parametrize("name", ["A3C", "AsyncNStepQ"])
def test_two_workers_log_finite_lags_and_rates(name: str, tmp_path: Path) -> None:
    progress = _progress(name, 2, tmp_path)
    lag_max, lag_mean = progress["async/policy_lag_max"].dropna(), progress["async/policy_lag_mean"].dropna()
    assert len(lag_max) >= 2 and len(lag_mean) == len(lag_max)
    for mean, largest in zip(lag_mean, lag_max):
        assert math.isfinite(mean) and math.isfinite(largest)
        assert 0 <= mean <= largest
        assert largest == int(largest)
    steps_per_s, updates_per_s = progress["async/env_steps_per_s"], progress["async/updates_per_s"]
    assert (steps_per_s > 0).all() and steps_per_s.map(math.isfinite).all()
    assert (updates_per_s > 0).all() and updates_per_s.map(math.isfinite).all()


def test_a_worker_reports_the_updates_applied_since_its_snapshot() -> None:
    model = small_model("A3C", n_workers=3)
    model._share_state()
    spec = model._worker_specs()[0]
    receiver, conn = mp.Pipe(duplex=False)
    worker = HogwildWorker(in_process_context(conn, spec.shared), spec.payload)  # rank 0

    def update() -> None:
        loss = sum((param**2).sum() for param in worker.local_params)
        assert isinstance(loss, torch.Tensor)
        worker.apply_gradients(loss, 1)

    worker.synchronize()
    worker.update_counts[1] += 2  # workers 1 and 2 apply 3 updates meanwhile
    worker.update_counts[2] += 1
    update()
    worker.synchronize()
    update()  # no other update in between
    worker.synchronize()
    worker.update_counts[2] += 4
    update()
    worker.reporter.maybe_flush(worker.obs, force=True)
    kind, data = receiver.recv()
    assert kind == "stats"
    assert data["lags"] == [3, 3 + 0 + 4, 4]  # updates, sum and max of their lags
    assert worker.update_counts.tolist() == [3, 2, 5]  # this worker counted its own 3 updates in its slot
    assert model._shared_updates() == 10
    worker.reporter.maybe_flush(worker.obs, force=True)  # no update since: no lag report
    assert "lags" not in receiver.recv()[1]
    worker.env.close()
    receiver.close()


def test_metrics_window_mean_and_max_over_reports() -> None:
    logger = Logger(folder=None, output_formats=[])
    metrics = AsyncMetrics(timesteps=100, updates=10)
    metrics.add_lags([2, 3, 2])
    metrics.add_lags([1, 4, 4])
    metrics.record(logger, timesteps=1100, updates=210)
    values = dict(logger.name_to_value)
    assert values["async/policy_lag_mean"] == pytest.approx(7 / 3)
    assert values["async/policy_lag_max"] == 4
    assert values["async/env_steps_per_s"] > 0
    assert values["async/updates_per_s"] == pytest.approx(values["async/env_steps_per_s"] / 5)
    logger.dump()
    metrics.record(logger, timesteps=1100, updates=210)  # a new window: nothing since
    values = dict(logger.name_to_value)
    assert "async/policy_lag_mean" not in values and "async/policy_lag_max" not in values
    assert values["async/env_steps_per_s"] == 0 and values["async/updates_per_s"] == 0
