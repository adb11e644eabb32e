"""Restarting a dead worker (``Runtime.restart``): Ape-X's actors are restarted and learning goes on, up to
``max_actor_restarts``; gradient-sharing workers still fail ``learn()`` (tests/runtime/test_reliability.py)."""

import os
import signal
import warnings
from pathlib import Path

import gymnasium as gym
import pytest
from stable_baselines3.common.logger import configure

from sb3_async import ApeXDQN, WorkerError
from sb3_async.runtime import MultiprocessingRuntime, WorkerSpec, restart_seed
from tests.helpers import FAST_DQN, FailingEnv, ShmWatch, live_children


class DiesOnceEnv(gym.Wrapper):
    """CartPole whose process dies (SIGKILL or exception) at its ``after``-th step, once per marker file: the restarted
    actor finds the marker and lives."""

    def __init__(self, marker: str, after: int = 150, how: str = "kill"):
        super().__init__(gym.make("CartPole-v1"))
        self.marker, self.after, self.how, self.steps = Path(marker), after, how, 0

    def step(self, action):
        self.steps += 1
        if self.steps == self.after and self._first_to_die():
            if self.how == "raise":
                raise RuntimeError("boom once")
            os.kill(os.getpid(), signal.SIGKILL)
        return self.env.step(action)

    def _first_to_die(self) -> bool:
        """Create the marker atomically: of several actors reaching ``after`` at once, only one dies (a check then a
        touch let two actors die in one CI run)."""
        try:
            os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return False
        return True


def test_restart_seed_moves_past_every_env_seed():
    assert restart_seed(100, 4, 0) == 100
    assert restart_seed(100, 4, 1) == 4100 and restart_seed(100, 4, 2) == 8100
    assert restart_seed(2**31 - 10, 4, 1) == 3990  # kept below 2**31 (NumPy's legacy seeding)


def _count_steps(ctx, payload):
    while not ctx.should_stop():
        ctx.add_steps(1)
        if ctx.num_timesteps >= payload:
            os.kill(os.getpid(), signal.SIGKILL)


def test_runtime_restart_keeps_the_step_count_and_changes_the_seed():
    runtime = MultiprocessingRuntime()
    try:
        runtime.start([WorkerSpec(_count_steps, 50, name="counter")], seed=7, start_timesteps=0, total_timesteps=200)
        with pytest.raises(WorkerError, match="SIGKILL"):
            for _ in range(500):
                runtime.poll(0.02)
        assert runtime.steps() == 50
        runtime.restart(0)
        # The restarted worker counts on from 50; with payload 50 it would die at once, so it is killed again.
        with pytest.raises(WorkerError, match="SIGKILL"):
            for _ in range(500):
                runtime.poll(0.02)
        assert runtime.steps() == 51  # one more step, not a count started over from 0
        with pytest.raises(ValueError, match="rank=3"):
            runtime.restart(3)
    finally:
        runtime.close()
    assert live_children() == []


def test_dead_apex_actor_is_restarted_and_learning_goes_on(tmp_path):
    marker = str(tmp_path / "died")
    watch = ShmWatch()

    def sample(_locals, _globals):
        watch.sample_self_and_children()
        return True

    model = ApeXDQN("MlpPolicy", lambda: DiesOnceEnv(marker, how="kill"), **FAST_DQN)
    model.set_logger(configure(str(tmp_path / "log"), ["csv"]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.learn(1000, callback=sample, log_interval=1)
    restarts = [w for w in caught if "restarting it (1/3)" in str(w.message)]
    assert len(restarts) == 1 and "apex-actor-" in str(restarts[0].message)
    assert model.num_timesteps >= 1000 and model._n_updates > 0
    log = (tmp_path / "log" / "progress.csv").read_text().splitlines()
    column = log[0].split(",").index("rollout/actor_restarts")
    assert log[-1].split(",")[column] == "1"
    assert live_children() == []
    assert watch.leaked() == set()


def test_actor_restarts_are_bounded():
    """An actor whose process is killed every time: restarted once, then ``learn()`` raises."""
    model = ApeXDQN("MlpPolicy", lambda: FailingEnv(fail_at=50, how="kill"), max_actor_restarts=1, **FAST_DQN)
    with pytest.warns(RuntimeWarning, match=r"restarting it \(1/1\)"), pytest.raises(WorkerError, match="SIGKILL"):
        model.learn(1_000_000)
    assert live_children() == []


def test_an_actor_that_raises_fails_learn_at_once():
    """An env that raises (a deterministic failure) is not restarted: the same error would come back each time."""
    model = ApeXDQN("MlpPolicy", lambda: FailingEnv(fail_at=50, how="raise"), max_actor_restarts=3, **FAST_DQN)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(WorkerError, match="boom in step"):
            model.learn(1_000_000)
    assert [str(w.message) for w in caught if "restarting it" in str(w.message)] == []
    assert live_children() == []


def test_max_actor_restarts_is_checked():
    with pytest.raises(ValueError, match="max_actor_restarts=-1"):
        ApeXDQN("MlpPolicy", "CartPole-v1", max_actor_restarts=-1)
