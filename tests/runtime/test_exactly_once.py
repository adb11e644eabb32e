"""Every message a worker sends reaches the main process exactly once: numbered messages counted across pauses, stops,
killed and restarted workers, on both backends; episodes counted by the envs against those the model saw; Ape-X
transitions traced from the env that produced them to the replay."""

import collections
import contextlib
import os
import signal
import sys
import time
from pathlib import Path

import cloudpickle
import gymnasium as gym
import numpy as np
import psutil
import pytest
import torch
from gymnasium import spaces
from stable_baselines3.common.callbacks import BaseCallback, EvalCallback, StopTrainingOnMaxEpisodes
from stable_baselines3.common.monitor import Monitor

from sb3_async import A3C, ApeXDQN, AsyncNStepQ, WorkerError
from sb3_async.runtime import MultiprocessingRuntime, WorkerSpec
from tests.conftest import two_node_cluster

# The workers below run in Ray's processes too, which cannot import this test module: ship its functions by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

N_WORKERS = 2


# --- the runtime alone: numbered messages --------------------------------------------------------------------------


def numbered_sender(ctx, payload):
    """Sends ``(rank, i)`` for i = 0, 1, 2, ... ``nap`` seconds apart, looking for a stop or pause every 5, and writes
    how many it has sent to ``shared["sent"][rank]`` after each send; a restarted worker goes on from its predecessor's
    count. With ``kill_at``, worker 0 kills itself (SIGKILL) right after sending message ``kill_at``, once."""
    kill_at, nap = payload
    sent = ctx.shared["sent"]
    i = int(sent[ctx.rank])
    first_life = i == 0
    while not ctx.should_stop():
        for _ in range(5):
            ctx.send("msg", (ctx.rank, i))
            i += 1
            sent[ctx.rank] = i
            if kill_at is not None and first_life and ctx.rank == 0 and i == kill_at + 1:
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(nap)


def _make_runtime(backend: str):
    if backend == "mp":
        return MultiprocessingRuntime()
    from sb3_async.runtime.ray_backend import RayRuntime

    return RayRuntime()


def _start(runtime, kill_at=None, nap=0.0005) -> torch.Tensor:
    sent = torch.zeros(N_WORKERS, dtype=torch.int64).share_memory_()
    # "synced": on Ray the driver's copy gets each host's counts (one writer per slot: the merge is exact)
    specs = [
        WorkerSpec(numbered_sender, (kill_at, nap), {"sent": sent}, name=f"sender-{rank}", synced=("sent",))
        for rank in range(N_WORKERS)
    ]
    runtime.start(specs, seed=0, start_timesteps=0, total_timesteps=10**12)
    return sent


class Received:
    """What ``poll`` returned, per rank, in order."""

    def __init__(self, runtime):
        self.runtime, self.by_rank = runtime, collections.defaultdict(list)

    def poll(self, seconds: float, allow_error: bool = False) -> WorkerError | None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                messages = self.runtime.poll(0.01)
            except WorkerError as error:
                if not allow_error:
                    raise
                return error
            for rank, kind, (sender, i) in messages:
                assert kind == "msg" and sender == rank
                self.by_rank[rank].append(i)
        return None

    def poll_until(self, done, timeout: float = 30.0) -> None:
        """Poll until ``done()`` (a machine under load may take seconds to restart a worker)."""
        deadline = time.monotonic() + timeout
        while not done():
            assert time.monotonic() < deadline, "the condition was not met in time"
            self.poll(0.05)

    def until_finished(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while self.runtime.running():
            assert time.monotonic() < deadline, "the workers did not finish after a stop"
            self.poll(0.05)
        self.poll(0.05)  # nothing may come after the end

    def assert_exactly_once(self, sent: torch.Tensor) -> None:
        for rank in range(N_WORKERS):
            n = int(sent[rank])
            got = self.by_rank[rank]
            counts = collections.Counter(got)
            duplicated = {i: c for i, c in counts.items() if c > 1}
            assert not duplicated, f"rank {rank}: {len(duplicated)} messages arrived more than once"
            assert got == list(range(n)), f"rank {rank}: {len(got)} received in order for {n} sent"
            assert n > 0


BACKENDS = ["mp", pytest.param("ray", marks=pytest.mark.ray)]


@pytest.fixture(scope="module")
def ray_cluster():
    """A two-node Ray cluster for the Ray cases of this module (started only if one of them runs)."""
    with two_node_cluster() as cluster:
        yield cluster


@pytest.fixture
def backend(request):
    if request.param == "ray":
        request.getfixturevalue("ray_cluster")
    return request.param


@contextlib.contextmanager
def numbered_run(backend: str, **start_kwargs):
    """Two numbered senders for the block to act on; after it, a stop, every message received, and the check that each
    arrived exactly once."""
    runtime = _make_runtime(backend)
    try:
        sent = _start(runtime, **start_kwargs)
        received = Received(runtime)
        if start_kwargs.get("kill_at") is None:  # both workers started (a loaded machine starts them in seconds)
            received.poll_until(lambda: all(received.by_rank[rank] for rank in range(N_WORKERS)))
        yield runtime, received
        runtime.request_stop()
        received.until_finished()
        received.assert_exactly_once(sent)
    finally:
        runtime.close()
    if start_kwargs.get("kill_at") is not None:
        assert int(sent[0]) > start_kwargs["kill_at"] + 1  # the restarted worker sent more


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_pauses_short_and_long_deliver_each_message_once(backend):
    with numbered_run(backend) as (runtime, received):
        received.poll(0.5)
        for k in range(30):
            runtime.pause()
            if k % 10 == 9:  # a long pause, as an evaluation's
                time.sleep(0.5)
            runtime.resume()
            received.poll(0.03)


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_stop_requested_during_a_pause_delivers_each_message_once(backend):
    with numbered_run(backend, nap=0.01) as (runtime, received):  # slow to park: pause() waits, taking messages
        received.poll(0.5)
        runtime.pause()


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_killed_and_restarted_worker_loses_nothing_it_sent(backend):
    """Worker 0 is killed right after its message 300: the error comes once every message it sent has arrived (none
    lost with its pipe), the other worker's messages held across the error arrive once, and the restarted worker's
    numbering goes on."""
    with numbered_run(backend, kill_at=300) as (runtime, received):
        error = received.poll(30.0, allow_error=True)
        assert isinstance(error, WorkerError) and error.rank == 0 and "SIGKILL" in str(error)
        received.poll(0.2, allow_error=True)  # on Ray the same error may be reported by the next exchange
        runtime.restart(0)
        received.poll_until(lambda: len(received.by_rank[0]) > 301 + 5)  # the restarted worker's first messages


def _dies_at_once(ctx, payload):
    ctx.send("msg", (ctx.rank, 0))
    Path(payload).write_text(repr(time.time()))
    os.kill(os.getpid(), signal.SIGKILL)


def test_dead_worker_is_reported_within_a_second_with_memory_flat(tmp_path):
    """The kill is seen through the end of the worker's pipe, at the next poll: no wait on a traceback that cannot
    come, and the messages already held do not grow meanwhile."""
    marker = tmp_path / "killed_at"
    runtime = MultiprocessingRuntime()
    rss_before = psutil.Process().memory_info().rss
    try:
        specs = [WorkerSpec(numbered_sender, (None, 0.0005), {"sent": torch.zeros(2, dtype=torch.int64).share_memory_()}, "s")]
        specs.append(WorkerSpec(_dies_at_once, str(marker), name="dies"))
        runtime.start(specs, seed=0, start_timesteps=0, total_timesteps=10**12)
        with pytest.raises(WorkerError, match="SIGKILL") as info:
            for _ in range(3000):
                runtime.poll(0.01)
        reported = time.time()
        assert info.value.rank == 1
        assert reported - float(marker.read_text()) < 1.5
    finally:
        runtime.close()
    assert psutil.Process().memory_info().rss - rss_before < 200 * 2**20


# --- algorithms: episodes counted by the envs ----------------------------------------------------------------------


class EpisodeLog(gym.Wrapper):
    """CartPole that appends the length of every episode it finishes to a file of its own in ``folder``."""

    def __init__(self, folder: str):
        super().__init__(gym.make("CartPole-v1"))
        self.path = Path(folder) / f"{os.getpid()}-{id(self)}.txt"
        self.length = 0

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.length += 1
        if terminated or truncated:
            with self.path.open("a") as file:
                file.write(f"{self.length}\n")
            self.length = 0
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs):
        self.length = 0
        return self.env.reset(**kwargs)


def finished_episodes(folder: Path) -> list[int]:
    return sorted(int(line) for path in folder.glob("*.txt") for line in path.read_text().split())


class SeenEpisodes(BaseCallback):
    """The episodes shown to the callbacks (``dones`` and ``infos`` of each ``on_step``)."""

    def __init__(self):
        super().__init__()
        self.lengths: list[int] = []

    def _on_step(self) -> bool:
        for done, info in zip(self.locals["dones"], self.locals["infos"]):
            if done:
                self.lengths.append(int(info["episode"]["l"]))
        return True


def _episodes_exactly_once(model, folder: Path, seen: SeenEpisodes) -> None:
    """Every episode the envs finished is in the rollout statistics once; the callbacks saw a part of them, each
    once, and ``_episode_num`` counts those."""
    finished = finished_episodes(folder)
    in_buffer = sorted(int(episode["l"]) for episode in model.ep_info_buffer)
    assert len(finished) > 0
    assert in_buffer == finished, f"{len(in_buffer)} episodes in the statistics for {len(finished)} finished"
    assert len(seen.lengths) == model._episode_num <= len(finished)
    assert not collections.Counter(seen.lengths) - collections.Counter(finished)  # a sub-multiset: nothing twice
    assert sum(finished) <= model.num_timesteps


@pytest.mark.parametrize("algo", [A3C, AsyncNStepQ])
def test_episodes_across_evaluations_are_seen_once(tmp_path, algo):
    """Every evaluation parks the workers (the pause that used to duplicate held messages)."""
    folder = tmp_path / "episodes"
    folder.mkdir()
    model = algo("MlpPolicy", lambda: EpisodeLog(str(folder)), n_workers=N_WORKERS, seed=0, stats_window_size=10**6)
    evaluations = EvalCallback(Monitor(gym.make("CartPole-v1")), eval_freq=25, n_eval_episodes=1, log_path=str(tmp_path))
    seen = SeenEpisodes()
    model.learn(3000, callback=[seen, evaluations])
    assert len(evaluations.evaluations_timesteps) >= 20
    _episodes_exactly_once(model, folder, seen)


def test_stop_by_a_callback_and_a_second_learn_lose_no_episode(tmp_path):
    """A callback stops training: the workers' last episodes still reach the statistics; a second ``learn()``
    (continuing the count) adds its own, each once."""
    folder = tmp_path / "episodes"
    folder.mkdir()
    model = A3C("MlpPolicy", lambda: EpisodeLog(str(folder)), n_workers=N_WORKERS, seed=0, stats_window_size=10**6)
    seen = SeenEpisodes()
    model.learn(10**6, callback=[seen, StopTrainingOnMaxEpisodes(max_episodes=40)])
    assert model._episode_num >= 40 and model.num_timesteps < 10**6
    _episodes_exactly_once(model, folder, seen)
    model.learn(2000, callback=seen, reset_num_timesteps=False)
    _episodes_exactly_once(model, folder, seen)


# --- Ape-X: transitions traced from the env to the replay ----------------------------------------------------------

EPISODE = 10


class TracedEnv(gym.Env):
    """Observations that name themselves: ``(pid, copy, episode, step)``. Episodes end after ``EPISODE`` steps."""

    copies = 0
    observation_space = spaces.Box(0, 2**24, (4,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self):
        TracedEnv.copies += 1
        self.copy, self.episode, self.t = TracedEnv.copies, -1, 0

    def _obs(self):
        return np.array([os.getpid(), self.copy, self.episode, self.t], dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        self.episode, self.t = self.episode + 1, 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        return self._obs(), 1.0, self.t == EPISODE, False, {}


def _apex_rows(model) -> np.ndarray:
    """The observations of every transition the learner received: in the replay, or held back."""
    buffer = model.replay_buffer
    rows = [buffer.observations[: buffer.size(), 0]]
    rows += [block.obs for _, block, _ in model._held]
    return np.concatenate(rows)


def _transitions_exactly_once(model) -> None:
    rows = _apex_rows(model)
    flow = model._flow
    assert flow["received"] == flow["inserted"] + sum(len(block.obs) for _, block, _ in model._held) == len(rows)
    keys = [tuple(row) for row in rows.astype(np.int64)]
    duplicated = [key for key, count in collections.Counter(keys).items() if count > 1]
    assert not duplicated, f"{len(duplicated)} transitions are in the replay more than once (of {len(keys)})"
    # None lost on the way: each env copy's episodes are complete (every step 0..EPISODE-1 starts a transition), but
    # for its last one, whose tail was still in the actor's n-step window or local buffer when it stopped or died.
    steps_by_episode = collections.defaultdict(set)
    for pid, copy, episode, t in keys:
        steps_by_episode[(pid, copy, episode)].add(t)
    by_copy = collections.defaultdict(list)
    for pid, copy, episode in steps_by_episode:
        by_copy[(pid, copy)].append(episode)
    for (pid, copy), episodes in by_copy.items():
        last = max(episodes)
        assert sorted(episodes) == list(range(min(episodes), last + 1)), f"copy {(pid, copy)} lost whole episodes"
        for episode in episodes:
            steps = steps_by_episode[(pid, copy, episode)]
            expected = set(range(EPISODE)) if episode < last else set(range(max(steps) + 1))
            assert steps == expected, f"copy {(pid, copy)} episode {episode}: {sorted(expected - steps)} lost"


APEX = dict(n_actors=N_WORKERS, n_envs_per_actor=2, learning_starts=64, batch_size=32, block_size=10, buffer_size=10**5)


def test_apex_replay_holds_each_transition_once_across_evaluations(tmp_path):
    model = ApeXDQN("MlpPolicy", TracedEnv, seed=0, **APEX)
    evaluations = EvalCallback(Monitor(TracedEnv()), eval_freq=25, n_eval_episodes=1, log_path=str(tmp_path))
    model.learn(8000, callback=evaluations)
    assert len(evaluations.evaluations_timesteps) >= 20
    _transitions_exactly_once(model)
    # Each env step starts one transition: all are here but those still in an n-step window at the end (n - 1 at
    # most per env copy).
    copies = APEX["n_actors"] * APEX["n_envs_per_actor"]
    assert model.num_timesteps - copies * (model.n_steps - 1) <= model._flow["received"] <= model.num_timesteps


def test_apex_stop_by_a_callback_inserts_every_transition_sent():
    """The actors' last blocks (sent after the stop was asked) reach the replay."""
    model = ApeXDQN("MlpPolicy", TracedEnv, seed=0, **APEX)
    model.learn(10**6, callback=StopTrainingOnMaxEpisodes(max_episodes=100))
    _transitions_exactly_once(model)
    copies = APEX["n_actors"] * APEX["n_envs_per_actor"]
    assert model.num_timesteps - copies * (model.n_steps - 1) <= model._flow["received"] <= model.num_timesteps


class KilledOnceEnv(TracedEnv):
    """A traced env whose process dies (SIGKILL) at its 300th step, once per marker file."""

    marker = ""

    def step(self, action):
        self.steps = getattr(self, "steps", 0) + 1
        if self.steps == 300:
            try:
                os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                pass
            else:
                os.kill(os.getpid(), signal.SIGKILL)
        return super().step(action)


def test_apex_actor_killed_and_restarted_leaves_each_transition_once(tmp_path):
    marker = str(tmp_path / "died")

    def make():
        env = KilledOnceEnv()
        env.marker = marker
        return env

    model = ApeXDQN("MlpPolicy", make, seed=0, **APEX)
    with pytest.warns(RuntimeWarning, match=r"restarting it \(1/3\)"):
        model.learn(6000, callback=EvalCallback(Monitor(TracedEnv()), eval_freq=50, n_eval_episodes=1))
    assert Path(marker).exists()
    _transitions_exactly_once(model)


class KillActorThenPause(BaseCallback):
    """Once, between two polls of the main loop: SIGKILL the process of the actor whose env fills slot 0 of the latest
    observations (``TracedEnv`` observations carry their pid), wait until it is gone, then pause the workers."""

    def __init__(self) -> None:
        super().__init__()
        self.killed: int | None = None

    def _on_step(self) -> bool:
        if self.killed is None and self.num_timesteps >= 1000:
            self.killed = pid = int(self.locals["new_obs"][0][0])
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                assert time.monotonic() < deadline, f"actor process {pid} still alive 10 s after SIGKILL"
                time.sleep(0.01)
            with self.model.pause_workers():
                pass
        return True


def test_apex_actor_found_dead_by_a_pause_is_restarted():
    """An actor that dies while an evaluation pauses the workers is restarted, as when the main loop finds it dead."""
    model = ApeXDQN("MlpPolicy", TracedEnv, seed=0, **APEX)
    callback = KillActorThenPause()
    with pytest.warns(RuntimeWarning, match=r"restarting it \(1/3\)"):
        model.learn(3000, callback=callback)
    assert callback.killed is not None and model._restarts == {0: 1}
    _transitions_exactly_once(model)


# --- the env pool: step results counted ----------------------------------------------------------------------------


class CountingEnv(gym.Env):
    """Its observation is the number of steps it has taken (episodes never end)."""

    observation_space = spaces.Box(0, 2**24, (1,), np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        if self.t % 7 == 0:
            time.sleep(0.002)  # uneven step times: results come back in another order than sent
        return np.array([self.t], np.float32), 0.0, False, False, {}


def test_env_pool_returns_each_step_result_once():
    """Asynchronous ``send``/``recv`` with partial receives: every env's results come back once each, in its order."""
    from sb3_async import AsyncEnvPool

    rng = np.random.default_rng(0)
    with AsyncEnvPool(CountingEnv, n_envs=6, n_hosts=2, local_envs=1) as pool:
        pool.reset(seed=0)
        seen = collections.defaultdict(list)
        idle = set(range(6))
        for _ in range(400):
            pool.send({i: 0 for i in idle})
            in_flight = 6
            obs = pool.recv(min_ready=int(rng.integers(1, in_flight + 1)))[0]
            for i, value in obs.items():
                seen[i].append(int(value[0]))
            idle = set(obs)
        while len(idle) < 6:
            obs = pool.recv(min_ready=6 - len(idle))[0]
            for i, value in obs.items():
                seen[i].append(int(value[0]))
            idle |= set(obs)
    for i in range(6):
        assert seen[i] == list(range(1, len(seen[i]) + 1)), f"env {i}: results lost, repeated or out of order"
    assert sum(len(values) for values in seen.values()) >= 400
