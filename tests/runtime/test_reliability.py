"""Nothing left behind, errors that name the worker, clear errors for bad input."""

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from sb3_async import A3C, WorkerError
from sb3_async.common.async_algorithm import max_local_workers
from sb3_async.runtime import MultiprocessingRuntime, WorkerSpec
from tests.helpers import ALGORITHM_NAMES, FailingEnv, ShmWatch, live_children, small_model


def processes_with_marker(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker.encode() in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def wait_until_gone(marker: str, timeout: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = processes_with_marker(marker)
        if not left:
            return []
        time.sleep(0.2)
    return processes_with_marker(marker)


@pytest.mark.parametrize("how,expected", [("raise", "boom in step"), ("kill", "SIGKILL")])
def test_dead_worker_is_reported_quickly(how, expected):
    model = A3C("MlpPolicy", lambda: FailingEnv(fail_at=30, how=how), n_workers=2, seed=0)
    start = time.monotonic()
    with pytest.raises(WorkerError, match=expected) as info:
        model.learn(1_000_000)
    assert time.monotonic() - start < 60  # never a hang; generous, as start-up alone takes seconds on a loaded machine
    assert "Worker" in str(info.value) and info.value.name.startswith("a3c-")
    if how == "raise":
        assert info.value.exitcode == 1 and "Traceback" in str(info.value)
    else:
        assert info.value.exitcode == -signal.SIGKILL


def test_exception_in_callback_stops_workers():
    watch = ShmWatch()

    def explode(_locals, _globals):
        watch.sample_self_and_children()
        if _locals["self"].num_timesteps > 500:
            raise KeyError("callback failure")
        return True

    with pytest.raises(KeyError, match="callback failure"):
        A3C("MlpPolicy", "CartPole-v1", n_workers=2, seed=0).learn(1_000_000, callback=explode)
    assert live_children() == []
    assert len(watch.pids) >= 3 and watch.leaked() == set()


def test_normal_end_leaves_nothing():
    watch = ShmWatch()

    def sample(_locals, _globals):
        watch.sample_self_and_children()
        return True

    A3C("MlpPolicy", "CartPole-v1", n_workers=2, seed=0).learn(1000, callback=sample)
    assert live_children() == []
    assert len(watch.pids) >= 3 and watch.leaked() == set()


def _report_threads(ctx, payload):
    ctx.send("threads", (torch.get_num_threads(), ctx.seed, os.getpid()))


def test_workers_single_threaded_and_seeded_by_rank():
    runtime = MultiprocessingRuntime("forkserver")
    with runtime:
        runtime.start(
            [WorkerSpec(_report_threads, name="probe") for _ in range(2)], seed=10, start_timesteps=0, total_timesteps=1
        )
        messages = []
        while runtime.running():
            messages += runtime.poll(0.1)
    assert sorted((rank, data[0], data[1]) for rank, kind, data in messages) == [(0, 1, 10), (1, 1, 11)]


SCRIPT = textwrap.dedent(
    """
    import signal
    import sys
    from sb3_async import A3C

    # Ctrl-C raises KeyboardInterrupt even when this test runs from a background job (which starts with SIGINT ignored)
    signal.signal(signal.SIGINT, signal.default_int_handler)

    def announce(_locals, _globals):
        if _locals["self"].num_timesteps > 200 and not getattr(announce, "done", False):
            announce.done = True
            print("training", flush=True)
        return True

    if __name__ == "__main__":
        A3C("MlpPolicy", "CartPole-v1", n_workers=2, seed=0, start_method=sys.argv[1]).learn(10_000_000, callback=announce)
    """
)


def _start_training(tmp_path: Path, start_method: str, watch: ShmWatch) -> tuple[subprocess.Popen, str]:
    marker = f"SB3_ASYNC_TEST_{uuid.uuid4().hex}"
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    proc = subprocess.Popen(
        [sys.executable, str(script), start_method],
        stdout=subprocess.PIPE,
        env={**os.environ, marker: "1"},
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == "training", line
    pids = processes_with_marker(marker)
    assert len(pids) >= 3  # the script, its workers (and the forkserver)
    watch.sample(pids)
    return proc, marker


@pytest.mark.parametrize("start_method", ["forkserver", "spawn"])
def test_parent_sigkill_leaves_no_orphan(tmp_path, start_method):
    watch = ShmWatch()
    proc, marker = _start_training(tmp_path, start_method, watch)
    proc.kill()
    proc.wait(timeout=10)
    assert wait_until_gone(marker) == []
    assert watch.leaked() == set()


def test_ctrl_c_stops_everything(tmp_path):
    watch = ShmWatch()
    proc, marker = _start_training(tmp_path, "forkserver", watch)
    proc.send_signal(signal.SIGINT)
    try:
        assert proc.wait(timeout=60) != 0  # KeyboardInterrupt
    finally:
        proc.kill()
    assert wait_until_gone(marker) == []
    assert watch.leaked() == set()


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(n_workers=0), "n_workers=0"),
        (dict(n_workers=1.5), "n_workers=1.5"),
        (dict(n_steps=0), "n_steps=0"),
        (dict(n_envs_per_worker=0), "n_envs_per_worker=0"),
        (dict(learning_rate=-1.0), "learning_rate=-1.0"),
        (dict(learning_rate=float("nan")), "learning_rate=nan"),
        (dict(learning_rate=float("inf")), "learning_rate=inf"),
        (dict(gamma=1.5), "gamma=1.5"),
        (dict(optimizer="adam"), "optimizer='adam'"),
        (dict(start_method="thread"), "start_method='thread'"),
        (dict(backend="mpi"), "backend='mpi'"),
        (dict(policy="FooPolicy"), "policy='FooPolicy'"),
        (dict(env=42), "env=42"),
    ],
)
def test_bad_input(kwargs, match):
    arguments = dict(policy="MlpPolicy", env="CartPole-v1", n_workers=1) | kwargs
    with pytest.raises((ValueError, TypeError), match=match):
        A3C(**arguments)


@pytest.mark.parametrize("name", ALGORITHM_NAMES)
def test_worker_counts_are_bounded(name):
    """A worker count that would start processes without end is refused, naming the argument and the bound."""
    if name == "AEDDPG":  # its pool: at most one process per env
        with pytest.raises(ValueError, match=r"n_hosts=1000000: at most n_envs=2"):
            small_model(name, pool_kwargs=dict(n_hosts=10**6))
        return
    argument = "n_actors" if name.startswith("ApeX") else "n_workers"
    with pytest.raises(ValueError, match=rf"{argument}=1000000: at most {max_local_workers()} worker processes"):
        small_model(name, **{argument: 10**6})


def test_env_that_cannot_be_copied():
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecNormalize

    class Unpicklable(gym.Wrapper):
        def __reduce__(self):
            raise TypeError("no pickling here")

    with pytest.raises(TypeError, match="factory"):
        A3C("MlpPolicy", Unpicklable(gym.make("CartPole-v1")), n_workers=1)
    with pytest.raises(TypeError, match="Only one VecNormalize"):  # one set of shared statistics
        A3C("MlpPolicy", VecNormalize(VecNormalize(DummyVecEnv([lambda: gym.make("CartPole-v1")]))), n_workers=1)
    venv = SubprocVecEnv([lambda: gym.make("CartPole-v1")])
    try:
        with pytest.raises(TypeError, match="SubprocVecEnv"):
            A3C("MlpPolicy", venv, n_workers=1)
    finally:
        venv.close()


def test_predict_needs_no_workers():
    model = A3C("MlpPolicy", "CartPole-v1", n_workers=4)
    action, _ = model.predict(np.zeros(4, dtype=np.float32))
    assert live_children() == [] and action in (0, 1)


FORKSERVER_SCRIPT = textwrap.dedent(
    """
    import multiprocessing.forkserver as forkserver
    import sys
    from sb3_async import A3C

    if __name__ == "__main__":
        model = A3C("MlpPolicy", "CartPole-v1", n_workers=1, seed=0, start_method=sys.argv[1])
        built = forkserver._forkserver._forkserver_pid
        model.learn(200)
        print(built, forkserver._forkserver._forkserver_pid, model.num_timesteps)
    """
)


@pytest.mark.parametrize("start_method", ["forkserver", "spawn"])
def test_forkserver_starts_when_the_model_is_built(tmp_path, start_method):
    """A model built with an env starts the forkserver (its imports overlap with building the model); learn() then
    uses that same forkserver. Other start methods start none."""
    script = tmp_path / "build.py"
    script.write_text(FORKSERVER_SCRIPT)
    out = subprocess.run([sys.executable, str(script), start_method], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    built, after_learn, steps = out.stdout.split()
    assert int(steps) >= 200
    if start_method == "forkserver":
        assert built != "None" and built == after_learn
    else:
        assert built == "None" == after_learn


COMMAND_PARENT = textwrap.dedent(
    """
    import sys, time
    from sb3_async.runtime.processes import Launcher

    child = (
        "import subprocess, sys, time\\n"
        "from sb3_async.runtime.processes import watch_parent_from_env\\n"
        + ("watch_parent_from_env()\\n" if sys.argv[1] == "watch" else "")
        + "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\\n"
        "print('ready', flush=True)\\n"
        "time.sleep(120)\\n"
    )
    process = Launcher().command([sys.executable, "-c", child])
    print(process.stdout.readline().strip(), flush=True)
    time.sleep(120)
    """
)


@pytest.mark.parametrize("watch", [True, False])
def test_a_started_command_ends_with_its_killed_parent(tmp_path, watch):
    """``Launcher.command``'s child (a benchmark run) and what it started end when the parent is killed with SIGKILL, if the
    child watches its parent as it should; without the watch they would run on (the check can fail)."""
    marker = f"SB3_ASYNC_TEST_{uuid.uuid4().hex}"
    script = tmp_path / "parent.py"
    script.write_text(COMMAND_PARENT)
    parent = subprocess.Popen(
        [sys.executable, str(script), "watch" if watch else "no-watch"],
        stdout=subprocess.PIPE,
        env={**os.environ, marker: "1"},
        text=True,
    )
    try:
        assert parent.stdout is not None and parent.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 10.0  # the command's child may still be between its fork and its exec
        while len(processes_with_marker(marker)) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(processes_with_marker(marker)) == 3  # the parent, the command, the command's child
        parent.kill()
        parent.wait(timeout=10)
        left = wait_until_gone(marker, timeout=10.0 if watch else 2.0)
        assert (left == []) == watch
    finally:
        for pid in processes_with_marker(marker):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


class StuckOnceEnv(gym.Wrapper):
    """CartPole whose step blocks (10 minutes) at its ``at``-th step, in the first env copy to get there (a marker file
    decides); ``native=True`` blocks the way native code does (the watchdog's signal held back)."""

    def __init__(self, marker: str, at: int = 30, native: bool = False, env_id: str = "CartPole-v1"):
        super().__init__(gym.make(env_id))
        self.marker, self.at, self.native, self.count = Path(marker), at, native, 0

    def step(self, action):
        self.count += 1
        if self.count == self.at and self._first():
            if self.native:
                from sb3_async.runtime.processes import StepWatchdog

                StepWatchdog.GRACE = 1.0  # this worker's: a short grace, for the test
                signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR2})
            time.sleep(600)
        return self.env.step(action)

    def _first(self) -> bool:
        try:
            os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return False
        return True


@pytest.mark.parametrize("name", ["A3C", "AsyncNStepQ", "ApeXDQN"])
def test_a_stuck_env_step_fails_learn_naming_the_env(tmp_path, name):
    """One env of one of two workers blocks in step(): learn() fails after step_timeout with the env, its worker and
    the traceback of where it was stuck, instead of waiting forever."""
    marker = str(tmp_path / "stuck")
    model = small_model(name, lambda: StuckOnceEnv(marker), step_timeout=2)  # two workers
    start = time.monotonic()
    stuck = r"StepTimeout: Env \d+ \(worker \d, .*\) has been stuck in a step for \d+ s"
    with pytest.raises(WorkerError, match=stuck) as info:
        model.learn(10_000_000)
    assert time.monotonic() - start < 60
    assert "time.sleep(600)" in (info.value.worker_traceback or "")  # where it was stuck
    assert live_children() == []


def test_a_step_stuck_in_native_code_ends_its_worker():
    marker = f"/tmp/sb3_async_stuck_{uuid.uuid4().hex}"
    model = A3C("MlpPolicy", lambda: StuckOnceEnv(marker, native=True), n_workers=2, seed=0, step_timeout=1)
    try:
        with pytest.raises(WorkerError, match="stayed stuck in a step past step_timeout"):
            model.learn(10_000_000)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(marker)
    assert live_children() == []


def test_step_timeout_is_checked():
    for bad, error in (("1", TypeError), (-1, ValueError), (0, ValueError)):
        with pytest.raises(error, match="step_timeout"):
            A3C("MlpPolicy", "CartPole-v1", n_workers=1, step_timeout=bad)


def test_ae_ddpg_fails_on_a_stuck_env_while_the_others_go_on(tmp_path):
    """One of AE-DDPG's two envs blocks in its pool worker, the other keeps stepping: learn() fails after step_timeout
    naming the env, and closes the pool."""
    from sb3_async.runtime.processes import StepTimeout

    marker = str(tmp_path / "stuck")
    model = small_model(
        "AEDDPG", lambda: StuckOnceEnv(marker, env_id="Pendulum-v1"), pool_kwargs=dict(n_hosts=2), step_timeout=2
    )
    pids = model.get_env().pool.host_pids()
    start = time.monotonic()
    with pytest.raises(StepTimeout, match=r"Env [01] of the AsyncEnvPool has been stuck in a step for \d+ s"):
        model.learn(1_000_000)
    assert time.monotonic() - start < 60
    assert model.env is None  # the pool was closed
    deadline = time.monotonic() + 10
    while any(_running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [pid for pid in pids if _running(pid)] == []


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_launcher_stops_everything_it_started():
    """The one object every start goes through keeps what it started, and its close() ends all of it: a worker
    process that never returns, and a command (SIGKILLed with its process group)."""
    from sb3_async.runtime.processes import Launcher

    launcher = Launcher("spawn")
    proc = launcher.process(time.sleep, "sb3_async-test-sleeper", (600,))
    command = launcher.command([sys.executable, "-c", "import time; time.sleep(600)"])
    assert launcher.processes == [proc] and launcher.commands == [command]
    launcher.close(timeout=0.5)
    assert not proc.is_alive() and command.wait(timeout=10) == -signal.SIGKILL
    assert launcher.processes == [] and launcher.commands == []
