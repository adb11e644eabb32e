"""SB3 callbacks and logging behave as with A2C."""

import time

import gymnasium as gym
import numpy as np
import pytest
import torch
from stable_baselines3.common.callbacks import (
    BaseCallback,
    CallbackList,
    EvalCallback,
    EveryNTimesteps,
    StopTrainingOnMaxEpisodes,
    StopTrainingOnRewardThreshold,
)
from stable_baselines3.common.logger import configure
from stable_baselines3.common.monitor import Monitor

from sb3_async import A3C
from sb3_async.runtime import Runtime
from tests.helpers import ALGORITHM_NAMES, small_model


class Recorder(BaseCallback):
    def __init__(self, stop_after: int | None = None):
        super().__init__()
        self.stop_after = stop_after
        self.timesteps: list[int] = []
        self.episodes = 0
        self.shapes = set()

    def _on_step(self) -> bool:
        assert set(("dones", "infos", "new_obs")) <= set(self.locals)
        dones, infos = self.locals["dones"], self.locals["infos"]
        assert len(dones) == len(infos) == self.training_env.num_envs
        self.episodes += int(np.sum(dones))
        if self.locals["new_obs"] is not None:
            self.shapes.add(self.locals["new_obs"].shape)
        self.timesteps.append(self.num_timesteps)
        return self.stop_after is None or self.n_calls < self.stop_after


def test_on_step_rate_and_locals():
    model = A3C("MlpPolicy", "CartPole-v1", n_workers=2, n_envs_per_worker=2, seed=0)
    recorder = Recorder()
    model.learn(2000, callback=recorder)
    assert recorder.timesteps[0] == 4 and np.all(np.diff(recorder.timesteps)[:-1] == 4)
    assert len(recorder.timesteps) >= 2000 // 4
    assert recorder.shapes == {(4, 4)}
    assert recorder.episodes == model._episode_num > 0


def test_callback_returning_false_stops_all_workers():
    model = A3C("MlpPolicy", "CartPole-v1", n_workers=2, seed=0)
    recorder = Recorder(stop_after=50)
    model.learn(1_000_000, callback=recorder)
    assert recorder.n_calls == 50
    assert model.num_timesteps < 10_000


def test_eval_stop_threshold_and_every_n():
    fired = []

    class Mark(BaseCallback):
        def _on_step(self) -> bool:
            fired.append(self.num_timesteps)
            return True

    eval_cb = EvalCallback(
        gym.make("CartPole-v1"),
        eval_freq=100,
        n_eval_episodes=2,
        callback_on_new_best=StopTrainingOnRewardThreshold(reward_threshold=0.0),
    )
    model = A3C("MlpPolicy", "CartPole-v1", n_workers=2, seed=0)
    model.learn(100_000, callback=CallbackList([eval_cb, EveryNTimesteps(50, Mark())]))
    assert eval_cb.n_calls == 100 and eval_cb.best_mean_reward > 0  # stopped at the first evaluation
    assert model.num_timesteps < 2000
    assert fired and fired[0] >= 50


def test_stop_on_max_episodes():
    stopper = StopTrainingOnMaxEpisodes(max_episodes=5)
    model = A3C("MlpPolicy", "CartPole-v1", n_workers=2, seed=0)
    model.learn(1_000_000, callback=stopper)
    # SB3's promise: training stops at the first step where the count reaches max_episodes * n_envs; one step ends at
    # most one episode per env (the exact count depends on how many envs finish in that step).
    assert 5 * model.n_envs <= stopper.n_episodes < 6 * model.n_envs
    assert model.num_timesteps < 100_000


def test_logger_keys_and_continued_counting(tmp_path):
    model = A3C("MlpPolicy", "CartPole-v1", n_workers=2, n_envs_per_worker=2, seed=0)
    model.set_logger(configure(str(tmp_path), ["csv"]))
    model.learn(3000, log_interval=10)
    first = model.num_timesteps
    model.learn(1000, reset_num_timesteps=False, log_interval=10)
    assert model.num_timesteps >= first + 1000
    header = (tmp_path / "progress.csv").read_text().splitlines()[0].split(",")
    for key in (
        "rollout/ep_rew_mean",
        "time/fps",
        "train/policy_loss",
        "train/value_loss",
        "train/entropy_loss",
        "train/learning_rate",
        "time/total_timesteps",
    ):
        assert key in header


def test_tensorboard_log(tmp_path):
    model = A3C("MlpPolicy", "CartPole-v1", n_workers=2, seed=0, tensorboard_log=str(tmp_path))
    model.learn(2000, log_interval=5)
    runs = list(tmp_path.iterdir())
    assert [run.name for run in runs] == ["A3C_1"]
    assert any(path.name.startswith("events.out.tfevents") for path in runs[0].iterdir())


def test_workers_keep_training_while_a_callback_is_busy():
    from stable_baselines3.common.envs import FakeImageEnv

    class SlowOnce(BaseCallback):
        def __init__(self):
            super().__init__()
            self.after_pause = None
            self.deadline = None

        def _on_step(self) -> bool:
            import time

            if self.deadline is None:
                # A long callback (e.g. an evaluation) that reads nothing: the workers must not wait on the main
                # process meanwhile (image observations would fill the pipes within ~0.1 s). Wait until they have
                # taken 1000 more steps, however loaded the machine; a blocked worker never gets there.
                self.start_steps = self.num_timesteps
                first = self.model._runtime.steps()
                give_up = time.monotonic() + 60
                while self.model._runtime.steps() - first < 1000 and time.monotonic() < give_up:
                    time.sleep(0.05)
                self.deadline = time.monotonic() + 0.5
                return True
            if time.monotonic() > self.deadline:
                self.after_pause = self.num_timesteps
                return False
            return True

    callback = SlowOnce()
    model = A3C(
        "CnnPolicy",
        lambda: FakeImageEnv(screen_height=84, screen_width=84, n_channels=4, discrete=True),
        n_workers=2,
        n_envs_per_worker=4,
        seed=0,
    )
    model.learn(1_000_000, callback=callback)
    assert callback.after_pause is not None and callback.after_pause - callback.start_steps >= 1000
    assert callback.locals["new_obs"].shape == (8, 4, 84, 84)


def test_pause_workers_freezes_steps_and_parameters():
    """``pause_workers()`` parks every worker: no env step and no parameter change until the block ends."""
    observed = []

    class PauseOnce(BaseCallback):
        def _on_step(self) -> bool:
            if self.num_timesteps >= 2000 and not observed:
                with self.model.pause_workers():
                    runtime = self.model._runtime
                    steps = runtime.steps()
                    params = [p.detach().clone() for p in self.model.policy.parameters()]
                    import time

                    time.sleep(0.3)
                    observed.append(runtime.steps() == steps)
                    observed.append(all(torch.equal(p, q) for p, q in zip(params, self.model.policy.parameters())))
            return True

    import torch

    model = A3C("MlpPolicy", "CartPole-v1", n_workers=2, n_envs_per_worker=2, seed=0)
    model.learn(6000, callback=PauseOnce())
    assert observed == [True, True]
    assert model.num_timesteps >= 6000  # workers resumed after the block
    with model.pause_workers():  # outside learn(): nothing to pause
        pass


class _BacklogRuntime(Runtime):
    """A finished run whose main process fell far behind: every episode arrives in one message."""

    def __init__(self, n_envs: int, episodes: int, steps: int):
        entries = [(i % n_envs, {"episode": {"r": float(i), "l": 1, "t": 0.0}}) for i in range(episodes)]
        self._messages, self._steps = [(0, "stats", {"episodes": entries, "train": {}})], steps

    def start(self, specs, seed, start_timesteps, total_timesteps):
        pass

    def poll(self, timeout):
        messages, self._messages = self._messages, []
        return messages

    def steps(self):
        return self._steps

    def running(self):
        return False

    def request_stop(self):
        pass

    def pause(self, timeout=30.0):
        pass

    def resume(self):
        pass

    def close(self, timeout=5.0):
        pass


def test_a_backlog_of_episodes_drains_in_linear_time():
    """Each callback step shows at most one episode per env; 40,000 queued episodes must not cost O(backlog²)
    (a run once sat 18 minutes in this loop after its workers had finished)."""
    model = A3C("MlpPolicy", "CartPole-v1", n_workers=2, n_envs_per_worker=2, seed=0)
    recorder = Recorder()
    total, callback = model._setup_learn(40_000, recorder, True, "A3C", False)
    callback.on_training_start(locals(), globals())
    latest_obs = np.zeros((4, 4), dtype=np.float32)
    start = time.monotonic()
    model._supervise(_BacklogRuntime(4, 40_000, steps=40_000), callback, total, 100, torch.from_numpy(latest_obs))
    assert time.monotonic() - start < 30  # about 1 s; the quadratic scan took minutes
    assert recorder.episodes == 40_000 == model._episode_num  # 10,000 steps of 4 envs: every env done at every step


class EndCount(BaseCallback):
    """Records the ``num_timesteps`` it holds when training ends."""

    at_end: int | None = None

    def _on_step(self) -> bool:
        return True

    def _on_training_end(self) -> None:
        self.at_end = self.num_timesteps


@pytest.mark.parametrize("name", ALGORITHM_NAMES)
def test_callbacks_see_the_final_step_count(name):
    """After learn(), the callbacks hold model.num_timesteps (as with SB3's algorithms), also the steps the workers took
    after the last on_step(); and when an evaluation stopped training, in the whole callback tree."""
    # AEDDPG: 3 envs in 3 processes, received as they become ready: the last callback call can leave steps unshown
    model = small_model(name, **(dict(n_envs=3, pool_kwargs=dict(n_hosts=3)) if name == "AEDDPG" else {}))
    count = EndCount()
    model.learn(200, callback=count)
    assert count.num_timesteps == count.at_end == model.num_timesteps >= 200
    stop = StopTrainingOnRewardThreshold(reward_threshold=-1e9, verbose=0)  # stops at the first evaluation
    env_id = "Pendulum-v1" if name in ("ApeXDPG", "AEDDPG") else "CartPole-v1"
    every = 40 // model.n_envs
    evaluation = EvalCallback(Monitor(gym.make(env_id)), eval_freq=every, n_eval_episodes=1, callback_on_new_best=stop)
    count = EndCount()
    model.learn(100_000, callback=CallbackList([evaluation, count]))
    assert model.num_timesteps < 100_000
    assert count.at_end == evaluation.num_timesteps == stop.num_timesteps == model.num_timesteps
    if name == "AEDDPG":
        model.env.close()
