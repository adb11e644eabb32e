"""``backend="serial"``: every worker in the test's process, one at a time, reproducible with a seed."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pandas as pd
import pytest
import torch
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import configure

from sb3_async import A3C
from sb3_async.runtime import WorkerError
from sb3_async.runtime.serial import SerialRuntime
from tests.helpers import FailingEnv, live_children, small_model

pytestmark = pytest.mark.usefixtures("one_torch_thread")

#: What the recorded envs saw: the pids and threads that stepped them, and the most steps in progress at once.
SEEN: dict[str, Any] = {"pids": set(), "threads": set(), "active": 0, "most_active": 0}
SEEN_LOCK = threading.Lock()


class RecordingEnv(gym.Wrapper):
    """Records where and how concurrently it is stepped (the step lasts a little, so that overlaps would show)."""

    def step(self, action):
        with SEEN_LOCK:
            SEEN["pids"].add(os.getpid())
            SEEN["threads"].add(threading.current_thread().name)
            SEEN["active"] += 1
            SEEN["most_active"] = max(SEEN["most_active"], SEEN["active"])
        try:
            time.sleep(0.0002)
            return self.env.step(action)
        finally:
            with SEEN_LOCK:
                SEEN["active"] -= 1


def recorded_cartpole() -> gym.Env:
    return RecordingEnv(gym.make("CartPole-v1"))


def recorded_pendulum() -> gym.Env:
    return RecordingEnv(gym.make("Pendulum-v1"))


#: The algorithms tested, with settings that learn at once (Ape-X: a replay ratio, so that the learner's work between
#: two polls depends on the data, not on the clock).
SERIAL: dict[str, dict[str, Any]] = {
    "A3C": {},
    "AsyncNStepQ": {},
    "ApeXDQN": dict(buffer_size=2000, replay_ratio=1.0),
    "AEDDPG": {},
}


def serial_model(name: str, env: Any = None, **kwargs: Any) -> Any:
    continuous = name == "AEDDPG"
    env = env or (recorded_pendulum if continuous else recorded_cartpole)
    return small_model(name, env, backend="serial", **{**SERIAL[name], **kwargs})


_BEFORE: set[threading.Thread] = set()


@pytest.fixture(autouse=True)
def _threads_before() -> None:
    """The threads alive before the test (another test of this process may have left its own)."""
    _BEFORE.clear()
    _BEFORE.update(threading.enumerate())


def our_threads() -> list[str]:
    """The sb3_async threads this test started that are still alive."""
    return [thread.name for thread in threading.enumerate() if thread.name.startswith("sb3_async-") and thread not in _BEFORE]


@pytest.mark.parametrize("name", list(SERIAL))
def test_workers_step_in_this_process_one_at_a_time(name: str) -> None:
    SEEN.update(pids=set(), threads=set(), active=0, most_active=0)
    children = set(live_children())
    model = serial_model(name)
    model.learn(600)
    assert SEEN["pids"] == {os.getpid()}
    assert SEEN["most_active"] == 1
    if name != "AEDDPG":  # AE-DDPG's pool steps its envs in the main thread; the others in one thread per worker
        assert len(SEEN["threads"]) == 2, SEEN["threads"]
    assert set(live_children()) <= children, "a process was started"
    assert our_threads() == []
    assert torch.get_num_threads() == 1  # the one_torch_thread fixture's count, restored


@pytest.mark.parametrize("name", list(SERIAL))
def test_two_runs_with_one_seed_are_identical(name: str) -> None:
    first, second = (serial_model(name, seed=0).learn(800) for _ in range(2))
    assert first.num_timesteps == second.num_timesteps
    for (key, a), b in zip(first.policy.state_dict().items(), second.policy.state_dict().values()):
        assert torch.equal(a, b), key
    other = serial_model(name, seed=1).learn(800)
    assert not all(torch.equal(a, b) for a, b in zip(first.policy.parameters(), other.policy.parameters()))


#: The ``async/`` keys each family logs (docs: "Debugging and monitoring an async run").
RATES = ["async/env_steps_per_s", "async/updates_per_s"]
ASYNC_KEYS = {
    "A3C": [*RATES, "async/policy_lag_mean", "async/policy_lag_max", "async/worker_env_steps_per_s_min"],
    "AsyncNStepQ": [*RATES, "async/policy_lag_mean", "async/policy_lag_max", "async/worker_env_steps_per_s_max"],
    "ApeXDQN": [
        *RATES,
        "async/param_age_mean",
        "async/param_age_max",
        "async/sample_age_mean",
        "async/sample_age_max",
        "async/replay_ratio",
        "async/blocks_in_flight",
        "async/learner_wait_share",
        "async/actor_wait_share",
        "async/worker_env_steps_per_s_min",
    ],
    "AEDDPG": [*RATES, "async/sample_age_mean", "async/sample_age_max", "async/replay_ratio", "async/learner_wait_share"],
}


@pytest.mark.parametrize("name", list(SERIAL))
def test_logs_fps_and_async_keys(name: str, tmp_path: Path) -> None:
    env = "Pendulum-v1" if name == "AEDDPG" else "CartPole-v1"
    model = serial_model(name, env=env)
    model.set_logger(configure(str(tmp_path), ["csv"]))
    model.learn(3000, log_interval=1 if name == "AEDDPG" else 50)
    progress = pd.read_csv(tmp_path / "progress.csv")
    for key in ["time/fps", *ASYNC_KEYS[name]]:
        assert key in progress.columns, f"{key} not logged: {list(progress.columns)}"
        assert (progress[key].dropna() >= 0).all(), (key, progress[key].tolist())
    assert (progress["time/fps"] > 0).all()
    if "async/policy_lag_max" in progress.columns:
        # Workers take turns, one update each: no update ever lands between another's snapshot and its update.
        lags = progress["async/policy_lag_max"].dropna()
        assert len(lags) >= 1 and (lags == 0).all(), lags.tolist()
    for share in ("async/learner_wait_share", "async/actor_wait_share"):
        if share in progress.columns:
            assert (progress[share].dropna() <= 1).all(), progress[share].tolist()
    if "async/sample_age_max" in progress.columns:
        ages = progress[["async/sample_age_mean", "async/sample_age_max"]].dropna()
        assert (ages["async/sample_age_mean"] <= ages["async/sample_age_max"]).all()
        assert (ages["async/sample_age_max"] < model.num_timesteps).all()  # HMemory keeps copies past Memory's size


def failing_cartpole() -> gym.Env:
    return FailingEnv(fail_at=40)


def test_a_worker_that_raises_fails_learn_with_its_traceback() -> None:
    model = small_model("A3C", failing_cartpole, backend="serial")
    with pytest.raises(WorkerError) as caught:
        model.learn(5000)
    assert caught.value.worker_traceback is not None and "boom in step" in caught.value.worker_traceback
    assert "FailingEnv" in caught.value.worker_traceback or "step" in caught.value.worker_traceback
    assert caught.value.lost is False
    assert our_threads() == []


def test_close_ends_every_thread_after_an_interrupt_in_the_main_thread() -> None:
    class Interrupt(BaseCallback):
        def _on_step(self) -> bool:
            if self.model.num_timesteps >= 200:
                raise KeyboardInterrupt
            return True

    model = serial_model("A3C")
    with pytest.raises(KeyboardInterrupt):
        model.learn(10_000, callback=Interrupt())
    assert model.num_timesteps < 10_000
    assert our_threads() == []


class CtrlCEnv(gym.Wrapper):
    """Sends this process SIGINT (Ctrl-C) in its 100th step: the main thread is then waiting for a worker's turn."""

    def __init__(self) -> None:
        super().__init__(gym.make("CartPole-v1"))
        self.count = 0

    def step(self, action):
        self.count += 1
        if self.count == 100:
            os.kill(os.getpid(), signal.SIGINT)
        return self.env.step(action)


def test_ctrl_c_during_a_worker_turn_ends_every_thread() -> None:
    model = small_model("A3C", CtrlCEnv, backend="serial")
    with pytest.raises(KeyboardInterrupt):
        model.learn(50_000)
    assert model.num_timesteps < 50_000
    assert our_threads() == []


#: Holds a BlockingEnv's step until the test lets it go (so the test leaves no thread behind in pytest's process).
RELEASE = threading.Event()


class BlockingEnv(gym.Wrapper):
    """CartPole whose 30th step blocks in a call Python cannot interrupt (a lock's wait), until ``RELEASE`` is set;
    with ``interrupt=True`` it first asks for Ctrl-C in the main thread (SIGINT in 0.3 s)."""

    def __init__(self, interrupt: bool = False) -> None:
        super().__init__(gym.make("CartPole-v1"))
        self.count, self.interrupt = 0, interrupt

    def step(self, action):
        self.count += 1
        if self.count == 30:
            if self.interrupt:
                threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
            RELEASE.wait()
        return self.env.step(action)


def _run_threads() -> set[threading.Thread]:
    return {thread for thread in threading.enumerate() if thread.name.startswith("sb3_async-") and thread not in _BEFORE}


def _release_and_check_the_stuck_thread(left: set[threading.Thread]) -> None:
    RELEASE.set()  # the stuck step returns: its thread ends at its next should_stop()
    try:
        for thread in left:
            thread.join(10)
        assert not any(thread.is_alive() for thread in left)
    finally:
        RELEASE.clear()


def test_a_stuck_env_step_fails_learn_with_step_timeout() -> None:
    """With backend="serial", an env whose step blocks fails learn() after step_timeout with StepTimeout (the mp
    backend's exception) naming the env, its worker, the seconds and where it is stuck; the other worker's thread
    ends, and the stuck one, which Python cannot stop, is reported by name."""
    from sb3_async.runtime.processes import StepTimeout

    model = small_model("A3C", BlockingEnv, backend="serial", step_timeout=2)
    start = time.monotonic()
    warned = r"Worker 0 \(a3c-0\) could not be stopped: its thread sb3_async-a3c-0"
    with pytest.warns(RuntimeWarning, match=warned) as caught, pytest.raises(StepTimeout) as info:
        model.learn(1_000_000)
    assert time.monotonic() - start < 10
    message = str(info.value)
    assert re.match(r"Env 0 \(worker 0, a3c-0\) has been stuck in a step for [23] s \(step_timeout=2 s\)", message), message
    assert "RELEASE.wait()" in message  # where it is stuck
    assert "RELEASE.wait()" in str(caught[0].message)
    left = _run_threads()
    assert [thread.name for thread in left] == ["sb3_async-a3c-0"]  # the reported one only
    _release_and_check_the_stuck_thread(left)


def test_ctrl_c_during_a_stuck_env_step_ends_every_thread_it_can() -> None:
    """Ctrl-C while a worker is stuck in a step (no step_timeout): learn() raises KeyboardInterrupt, the other worker's
    thread ends, and the stuck one is reported by name rather than left silently."""
    model = small_model("A3C", lambda: BlockingEnv(interrupt=True), backend="serial", step_timeout=None)
    warned = r"Worker 0 \(a3c-0\) could not be stopped"
    with pytest.warns(RuntimeWarning, match=warned), pytest.raises(KeyboardInterrupt):
        model.learn(1_000_000)
    left = _run_threads()
    assert [thread.name for thread in left] == ["sb3_async-a3c-0"]
    _release_and_check_the_stuck_thread(left)


def test_a_slow_step_within_step_timeout_is_not_stopped() -> None:
    """A step slower than the main thread's look (0.25 s) but within step_timeout goes on."""

    class SlowEnv(gym.Wrapper):
        def __init__(self) -> None:
            super().__init__(gym.make("CartPole-v1"))
            self.count = 0

        def step(self, action):
            self.count += 1
            if self.count == 5:
                time.sleep(0.6)
            return self.env.step(action)

    model = small_model("A3C", SlowEnv, backend="serial", step_timeout=1)
    model.learn(100)
    assert model.num_timesteps >= 100
    assert our_threads() == []


def test_backend_kwargs_are_refused() -> None:
    with pytest.raises(ValueError, match=r"backend='serial' takes none \(address"):
        small_model("A3C", backend="serial", backend_kwargs={"address": "x"})
    with pytest.raises(ValueError, match="n_hosts=2 with backend='serial'"):
        small_model("AEDDPG", backend="serial", pool_kwargs=dict(n_hosts=2))


def test_a_pool_refuses_the_serial_backend() -> None:
    from sb3_async import AsyncEnvPool

    with pytest.raises(ValueError, match="n_hosts=0"):
        AsyncEnvPool("CartPole-v1", n_envs=2, backend="serial")


def test_save_serial_load_mp_and_back(tmp_path: Path) -> None:
    model = small_model("A3C", backend="serial").learn(300)
    model.save(tmp_path / "serial")
    loaded = A3C.load(tmp_path / "serial", backend="mp")
    assert loaded.backend == "mp"
    loaded.learn(300, reset_num_timesteps=False)
    assert loaded.num_timesteps >= 600
    loaded.save(tmp_path / "mp")
    again = A3C.load(tmp_path / "mp", backend="serial")
    assert again.backend == "serial"
    children = set(live_children())
    again.learn(300, reset_num_timesteps=False)
    assert again.num_timesteps >= 900
    assert set(live_children()) <= children
    assert our_threads() == []


def test_a_failed_worker_restarts_with_a_fresh_seed() -> None:
    from sb3_async.runtime import WorkerSpec

    runtime = SerialRuntime()
    seeds: list[int] = []
    runtime.start([WorkerSpec(_fails_once, seeds, name="flaky")], seed=7, start_timesteps=0, total_timesteps=10**6)
    try:
        with pytest.raises(WorkerError, match="first start"):
            for _ in range(3):
                runtime.poll(0.0)
        runtime.restart(0)
        messages = runtime.poll(0.0)
        runtime.request_stop()
        messages += runtime.poll(0.0)
        assert not runtime.running()
    finally:
        runtime.close()
    assert [data for _, kind, data in messages if kind == "seed"] == [7 + 1000]
    assert our_threads() == []


def _fails_once(ctx: Any, seeds: list[int]) -> None:
    if ctx.base_seed == 7:
        raise RuntimeError("first start")
    ctx.send("seed", ctx.base_seed)
    while not ctx.should_stop():
        pass


@pytest.mark.parametrize("name", ["A3C", "AsyncNStepQ"])
def test_one_worker_computes_the_same_gradients_with_mp_and_serial(name: str) -> None:
    """With one worker nothing interleaves: each segment's gradient, hence every parameter and optimizer statistic
    after ``learn()``, must be the same bit for bit whether the worker is a process or a thread of this one."""
    models = {backend: small_model(name, n_workers=1, seed=3, backend=backend).learn(600) for backend in ("mp", "serial")}
    mp_model, serial_model_ = models["mp"], models["serial"]
    assert mp_model.num_timesteps == serial_model_.num_timesteps
    for (key, a), b in zip(mp_model.policy.state_dict().items(), serial_model_.policy.state_dict().values()):
        assert torch.equal(a, b), key
    for a, b in zip(
        mp_model.policy.optimizer.state_dict()["state"].values(), serial_model_.policy.optimizer.state_dict()["state"].values()
    ):
        for key in a:
            assert torch.equal(torch.as_tensor(a[key]), torch.as_tensor(b[key])), key


@pytest.mark.filterwarnings("ignore:ApeXDQN.learn\\(\\) ends after")
def test_one_apex_actor_sends_the_same_blocks_with_mp_and_serial() -> None:
    """An actor's transitions and their initial priorities (computed with its copy of the networks) are the same
    whether it runs in a process or in this one."""
    replays = {}
    for backend in ("mp", "serial"):
        model = small_model("ApeXDQN", n_actors=1, seed=3, learning_starts=10**6, buffer_size=2000, backend=backend)
        replays[backend] = model.learn(700).replay_buffer
    mp_replay, serial_replay = replays["mp"], replays["serial"]
    size = mp_replay.size()
    assert size == serial_replay.size() > 600
    for field in ("observations", "next_observations", "actions", "rewards", "dones"):
        assert np.array_equal(getattr(mp_replay, field)[:size], getattr(serial_replay, field)[:size]), field
    assert np.array_equal(mp_replay.tree.leaves(np.arange(size)), serial_replay.tree.leaves(np.arange(size)))


def test_torch_profiler_sees_every_worker() -> None:
    from torch._C._profiler import _ExperimentalConfig

    model = serial_model("A3C", env="CartPole-v1")
    every_thread = _ExperimentalConfig(profile_all_threads=True)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], experimental_config=every_thread) as prof:
        model.learn(600)
    # The workers' forward and backward passes (their threads), not only the main process' bookkeeping
    threads_with_matmuls = {event.thread for event in prof.events() if event.name == "aten::addmm"}
    assert len(threads_with_matmuls) >= 2, threads_with_matmuls
