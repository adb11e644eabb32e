"""The ``async/`` log keys of the gradient-sharing algorithms (policy lag, env steps and updates per second)."""

from __future__ import annotations

import math
import multiprocessing as mp
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from gymnasium import spaces
from stable_baselines3.common.logger import Logger, configure

from sb3_async.common.async_metrics import AsyncMetrics
from sb3_async.common.buffers.ages import SampleAges, ring_ages, sample_ages_of
from sb3_async.common.buffers.episodic import EpisodicDualReplayBuffer
from sb3_async.common.buffers.prioritized import PrioritizedReplayBuffer
from sb3_async.common.gradient_sharing import GradientWorker
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
    worker = GradientWorker(in_process_context(conn, spec.shared), spec.payload)  # rank 0

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
    assert model._async_counters() == {"updates": 10}
    worker.reporter.maybe_flush(worker.obs, force=True)  # no update since: no lag report
    assert "lags" not in receiver.recv()[1]
    worker.env.close()
    receiver.close()


def test_metrics_window_mean_and_max_over_reports() -> None:
    logger = Logger(folder=None, output_formats=[])
    metrics = AsyncMetrics(timesteps=100, counters={"updates": 10})
    metrics.add_lags([2, 3, 2])
    metrics.add_lags([1, 4, 4])
    metrics.record(logger, timesteps=1100, counters={"updates": 210})
    values = dict(logger.name_to_value)
    assert values["async/policy_lag_mean"] == pytest.approx(7 / 3)
    assert values["async/policy_lag_max"] == 4
    assert values["async/env_steps_per_s"] > 0
    assert values["async/updates_per_s"] == pytest.approx(values["async/env_steps_per_s"] / 5)
    logger.dump()
    metrics.record(logger, timesteps=1100, counters={"updates": 210})  # a new window: nothing since
    values = dict(logger.name_to_value)
    assert "async/policy_lag_mean" not in values and "async/policy_lag_max" not in values
    assert values["async/env_steps_per_s"] == 0 and values["async/updates_per_s"] == 0


def test_learner_and_actor_metrics_of_a_window(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [0.0]
    monkeypatch.setattr("sb3_async.common.async_metrics.time.monotonic", lambda: clock[0])
    logger = Logger(folder=None, output_formats=[])
    metrics = AsyncMetrics(timesteps=0, counters={"updates": 0, "replayed": 0, "learner_busy": 0.0})
    metrics.add_worker(0, {"steps": 300, "wait": 0.5, "in_flight": 2})
    metrics.add_worker(1, {"steps": 100, "wait": 1.5, "in_flight": 1})
    for age in (0, 4, 8):
        metrics.add_param_age(age)
    clock[0] = 2.0
    metrics.record(logger, 400, {"updates": 50, "replayed": 800, "learner_busy": 1.5}, sample_ages=(12.5, 40))
    values = dict(logger.name_to_value)
    assert values["async/param_age_mean"] == 4 and values["async/param_age_max"] == 8
    assert values["async/sample_age_mean"] == 12.5 and values["async/sample_age_max"] == 40
    assert values["async/env_steps_per_s"] == 200
    assert values["async/worker_env_steps_per_s_min"] == 50 and values["async/worker_env_steps_per_s_max"] == 150
    assert values["async/updates_per_s"] == 25
    assert values["async/replay_ratio"] == 2  # 800 transitions learned from, 400 env steps
    assert values["async/blocks_in_flight"] == 3
    assert values["async/learner_wait_share"] == pytest.approx(0.25)  # busy 1.5 s of 2 s
    assert values["async/actor_wait_share"] == pytest.approx(0.5)  # (0.25 + 0.75) / 2
    logger.dump()
    # The next window counts from the values at this log; worker 1 was restarted and counts its waits from 0.
    metrics.add_worker(0, {"steps": 500, "wait": 1.5, "in_flight": 0})
    metrics.add_worker(1, {"steps": 200, "wait": 0.5, "in_flight": 0})
    clock[0] = 4.0
    metrics.record(logger, 700, {"updates": 60, "replayed": 900, "learner_busy": 1.5})
    values = dict(logger.name_to_value)
    assert "async/param_age_mean" not in values and "async/sample_age_mean" not in values
    assert values["async/worker_env_steps_per_s_min"] == 50 and values["async/worker_env_steps_per_s_max"] == 100
    assert values["async/replay_ratio"] == pytest.approx(100 / 300)
    assert values["async/learner_wait_share"] == 1.0
    assert values["async/actor_wait_share"] == pytest.approx((0.5 + 0.25) / 2)


def test_a_learner_waiting_for_envs_reports_its_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [0.0]
    monkeypatch.setattr("sb3_async.common.async_metrics.time.monotonic", lambda: clock[0])
    logger = Logger(folder=None, output_formats=[])
    metrics = AsyncMetrics(timesteps=0, counters={"updates": 0, "learner_wait": 1.0})
    clock[0] = 4.0
    metrics.record(logger, 100, {"updates": 10, "learner_wait": 2.0})
    assert logger.name_to_value["async/learner_wait_share"] == 0.25


def test_ring_ages_and_stamped_copies() -> None:
    # A ring of 5 rows whose next write goes to row 2: row 1 is the newest (age 0), row 2 the oldest (age 4).
    np.testing.assert_array_equal(ring_ages(np.array([1, 0, 4, 3, 2]), pos=2, buffer_size=5), [0, 1, 2, 3, 4])
    ages = SampleAges(n_envs=2)
    ages.stored(7)  # rows 0..6 written: the newest has stamp 6
    stamps = ages.stamp(np.array([0, 3]))  # copies of the newest row and of the row 3 rows older
    np.testing.assert_array_equal(stamps, [6, 3])
    ages.stored(2)
    np.testing.assert_array_equal(ages.since(stamps), [2, 5])
    assert ages.take() is None
    ages.add(np.array([2, 5]))
    ages.add(np.array([0]))
    assert ages.take() == (pytest.approx(2 * 7 / 3), 10)  # in transitions: two per row
    assert ages.take() is None


def test_prioritized_replay_measures_the_age_of_its_samples() -> None:
    buffer = PrioritizedReplayBuffer(8, spaces.Box(-1, 1, (2,)), spaces.Discrete(2), n_envs=1)
    for step in range(11):  # rows 0..7 then 0..2 again: the newest transition sits in row 2
        obs = np.full((1, 2), step, dtype=np.float32)
        buffer.add(obs, obs, np.zeros((1, 1)), np.zeros(1), np.zeros(1), [{}], priorities=np.ones(1))
    batch = buffer.sample_arrays(64)
    steps = batch.observations[:, 0].astype(int)  # each observation is the step that stored it
    mean, largest = sample_ages_of(buffer).take()
    assert mean == pytest.approx(np.mean(10 - steps)) and largest == np.max(10 - steps)


def test_dual_replay_ages_an_hmemory_copy_from_its_original() -> None:
    buffer = EpisodicDualReplayBuffer(4, spaces.Box(-1, 1, (1,)), spaces.Box(-1, 1, (1,)), hmemory_size=4, rho=1.0)
    for step in range(10):  # one-step episodes of return `step`: each one better than the last enters HMemory
        obs = np.full((1, 1), step, dtype=np.float32)
        buffer.add(obs, obs, np.zeros((1, 1)), np.full(1, float(step)), np.ones(1), [{}])
    batch = buffer.sample(64)  # rho=1: every transition from HMemory
    steps = batch.observations[:, 0].numpy().astype(int)
    mean, largest = sample_ages_of(buffer).take()
    assert mean == pytest.approx(np.mean(9 - steps)) and largest == np.max(9 - steps)
