"""AsyncEnvPool: the PettingZoo, send/recv and SB3 VecEnv semantics, errors and cleanup."""

import gc
import os
import signal
import subprocess
import sys
import textwrap
import time

import cloudpickle
import gymnasium as gym
import numpy as np
import pytest
from gymnasium.wrappers import RecordEpisodeStatistics
from stable_baselines3 import PPO, TD3
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecFrameStack, VecMonitor, VecNormalize

import sb3_async
from sb3_async import AsyncEnvPool, WorkerError
from sb3_async.env_pool import EnvError
from sb3_async.env_pool.vec_env import PoolVecEnv
from tests.helpers import FailingEnv, check_env_1_error_spares_the_others

# The helpers below travel to the workers by value, so the workers never import this module (nor torch through it).
cloudpickle.register_pickle_by_value(sys.modules[__name__])

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class SleepyEnv(gym.Wrapper):
    """Sleeps ``delay`` seconds per step, or a random 0-5 ms when ``delay`` is None (uneven step times)."""

    def __init__(self, env: gym.Env, delay: float | None = None):
        super().__init__(env)
        self.delay, self.rng = delay, np.random.default_rng()

    def step(self, action):
        time.sleep(self.rng.uniform(0.0, 0.005) if self.delay is None else self.delay)
        return self.env.step(action)


class ResetFailingEnv(gym.Wrapper):
    """Raises in its second ``reset``."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.resets = 0

    def reset(self, **kwargs):
        self.resets += 1
        if self.resets == 2:
            raise RuntimeError("boom in reset")
        return self.env.reset(**kwargs)


def broken_factory():
    raise RuntimeError("no env here")


def cartpole(max_episode_steps: int | None = None):
    return lambda: gym.make("CartPole-v1", max_episode_steps=max_episode_steps)


def failing(fail_at: int):
    return lambda: FailingEnv(gym.make("CartPole-v1"), fail_at)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_gone(pids: list[int], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(alive(pid) for pid in pids)


def run_script(code: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout, env=env
    )


# ---------------------------------------------------------------------------------------------------- imports
def test_import_exposes_every_name_and_the_pool_module_is_torch_free():
    for name in sb3_async.__all__:
        assert getattr(sb3_async, name) is not None
    namespace: dict = {}
    exec("from sb3_async import *", namespace)
    assert set(sb3_async.__all__) <= set(namespace) | {"__version__"}

    result = run_script(
        """
        import sys
        import sb3_async
        from sb3_async.env_pool import AsyncEnvPool
        print("torch" in sys.modules, sb3_async.__version__)
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[0] == "False"


def test_lazy_exports_import_a_name_on_first_access_and_keep_it():
    from sb3_async.lazy import lazy_exports

    namespace = {"__name__": "sb3_async", "here": 1}
    getattr_, dir_ = lazy_exports(namespace, {"check_int": "sb3_async.validation"}, ["zoo"])
    assert "check_int" not in namespace and dir_() == ["__name__", "check_int", "here"]
    from sb3_async.validation import check_int

    assert getattr_("check_int") is check_int and namespace["check_int"] is check_int  # kept: no second lookup
    assert getattr_("zoo") is sys.modules["sb3_async.zoo"]
    with pytest.raises(AttributeError, match="module 'sb3_async' has no attribute 'nothing'"):
        getattr_("nothing")


def test_env_workers_do_not_import_torch():
    result = run_script(
        """
        import sys
        import gymnasium as gym
        from sb3_async import AsyncEnvPool

        class Probe(gym.Wrapper):
            def torch_loaded(self):
                return "torch" in sys.modules

        if __name__ == "__main__":
            with AsyncEnvPool(lambda: Probe(gym.make("CartPole-v1")), n_envs=2, n_hosts=2) as pool:
                print(pool.call("torch_loaded"))
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[False, False]"


# ---------------------------------------------------------------------------------------------------- PettingZoo
def test_parallel_env_api_and_seeding():
    with AsyncEnvPool("CartPole-v1", n_envs=4) as pool:
        assert pool.possible_agents == pool.agents == [0, 1, 2, 3]
        assert pool.num_agents == pool.max_num_agents == 4
        assert pool.observation_space(2) is pool.observation_space(2) is pool.observation_space(0)
        assert pool.action_space(3) is pool.action_space(3)
        obs, infos = pool.reset(seed=10)
        assert sorted(obs) == sorted(infos) == [0, 1, 2, 3]
        for i in range(4):  # env i is seeded with seed + i
            np.testing.assert_array_equal(obs[i], gym.make("CartPole-v1").reset(seed=10 + i)[0])
        obs, rewards, terminations, truncations, infos = pool.step({1: 0, 3: 1})
        assert list(obs) == list(rewards) == list(terminations) == list(truncations) == list(infos) == [1, 3]
        reference = gym.make("CartPole-v1")
        reference.reset(seed=13)
        np.testing.assert_array_equal(obs[3], reference.step(1)[0])
        again, _ = pool.reset(seed=10)
        np.testing.assert_array_equal(again[2], gym.make("CartPole-v1").reset(seed=12)[0])
        subset, _ = pool.reset(seed=[5, None], ids=[0, 2])
        assert list(subset) == [0, 2]
        np.testing.assert_array_equal(subset[0], gym.make("CartPole-v1").reset(seed=5)[0])


@pytest.mark.parametrize("layout", [dict(n_hosts=0), dict(n_hosts=2), dict(n_hosts=1, local_envs=1)])
def test_same_step_autoreset_matches_a_local_env(layout):
    with AsyncEnvPool(cartpole(), n_envs=2, **layout) as pool:
        pool.reset(seed=3)
        reference = gym.make("CartPole-v1")
        reference.reset(seed=4)  # env 1
        ended = False
        for _ in range(60):
            obs, rewards, terminations, truncations, infos = pool.step({0: 1, 1: 1})
            ref_obs, ref_reward, ref_terminated, ref_truncated, ref_info = reference.step(1)
            assert (rewards[1], terminations[1], truncations[1]) == (ref_reward, ref_terminated, ref_truncated)
            if ref_terminated or ref_truncated:
                np.testing.assert_array_equal(infos[1]["final_obs"], ref_obs)
                assert infos[1]["final_info"] == ref_info
                ref_obs, _ = reference.reset()  # same-step: the new episode's first observation comes back now
                ended = True
            else:
                assert "final_obs" not in infos[1]
            np.testing.assert_array_equal(obs[1], ref_obs)
            if ended:
                break
        assert ended and pool.agents == [0, 1]


def test_autoreset_off_follows_pettingzoo_and_keeps_truncation_apart():
    with AsyncEnvPool(cartpole(max_episode_steps=3), n_envs=2, autoreset=False) as pool:
        pool.reset(seed=0)
        for _ in range(2):
            pool.step({0: 0, 1: 1})
        obs, _, terminations, truncations, infos = pool.step({0: 0, 1: 1})
        assert truncations == {0: True, 1: True} and terminations == {0: False, 1: False}
        assert "final_obs" not in infos[0]
        assert pool.agents == []
        with pytest.raises(ValueError, match="Env 0 has ended"):
            pool.step({0: 0})
        pool.reset(ids=[1])
        assert pool.agents == [1]
        pool.reset()
        assert pool.agents == [0, 1]


# ---------------------------------------------------------------------------------------------------- send / recv
def test_recv_returns_the_ready_envs_first_and_oldest_first():
    factories = [lambda: SleepyEnv(gym.make("CartPole-v1"), 1.0)] + [lambda: SleepyEnv(gym.make("CartPole-v1"), 0.0)] * 3
    with AsyncEnvPool(factories, n_hosts=4) as pool:
        pool.reset(seed=0)
        pool.send({0: 0, 1: 0, 2: 0, 3: 0})
        obs, *_ = pool.recv(min_ready=3)
        assert sorted(obs) == [1, 2, 3]  # env 0 is still sleeping
        pool.send({2: 0})
        pool.send({1: 0})
        time.sleep(0.2)
        obs, *_ = pool.recv(min_ready=2)
        assert list(obs)[:2] == [2, 1]  # sent first, returned first
        with pytest.raises(ValueError, match="min_ready"):
            pool.recv(min_ready=2)  # only env 0 is in flight
        obs, *_ = pool.recv(min_ready=1, timeout=5.0)
        assert list(obs) == [0]


def test_recv_with_uneven_step_times_serves_every_env():
    with AsyncEnvPool(lambda: SleepyEnv(gym.make("CartPole-v1")), n_envs=6, n_hosts=6) as pool:
        pool.reset(seed=0)
        pool.send({i: 0 for i in range(6)})
        steps = dict.fromkeys(range(6), 0)
        for _ in range(40):
            obs, *_ = pool.recv(min_ready=3)
            assert len(obs) >= 3
            for i in obs:
                steps[i] += 1
            pool.send({i: pool.action_space(i).sample() for i in obs})
        assert min(steps.values()) > 0


def test_recv_timeout_keeps_the_results():
    with AsyncEnvPool(lambda: SleepyEnv(gym.make("CartPole-v1"), 0.5), n_envs=1, n_hosts=1) as pool:
        pool.reset(seed=0)
        pool.send({0: 1})
        with pytest.raises(TimeoutError):
            pool.recv(timeout=0.01)
        obs, rewards, *_ = pool.recv(timeout=5.0)
        assert list(obs) == [0] and rewards[0] == 1.0


# ---------------------------------------------------------------------------------------------------- SB3 VecEnv
@pytest.mark.parametrize("layout", [{}, {"n_hosts": 0}])  # n_hosts=0: PoolVecEnv steps the envs directly
def test_vec_env_gives_the_transitions_of_subproc_vec_env(layout):
    factories = [lambda: RecordEpisodeStatistics(gym.make("CartPole-v1", max_episode_steps=20))] * 2
    pool_env = AsyncEnvPool(factories, **layout).as_vec_env()
    subproc = SubprocVecEnv(factories, start_method="fork")  # fork: its workers skip importing SB3 and torch again
    rng = np.random.default_rng(0)
    try:
        for venv in (pool_env, subproc):
            venv.seed(7)
        np.testing.assert_array_equal(pool_env.reset(), subproc.reset())
        assert list(pool_env.reset_infos) == list(subproc.reset_infos)
        for _ in range(50):
            actions = rng.integers(0, 2, size=2)
            ours, theirs = pool_env.step(actions), subproc.step(actions)
            for mine, other in zip(ours[:3], theirs[:3]):
                np.testing.assert_array_equal(mine, other)
            for mine, other in zip(ours[3], theirs[3]):
                assert mine.keys() == other.keys()
                assert mine["TimeLimit.truncated"] == other["TimeLimit.truncated"]
                if "terminal_observation" in other:
                    np.testing.assert_array_equal(mine["terminal_observation"], other["terminal_observation"])
                    assert mine["episode"]["r"] == other["episode"]["r"]
        assert list(pool_env.reset_infos) == list(subproc.reset_infos)
    finally:
        pool_env.close()
        subproc.close()


def test_local_envs_step_in_this_process_alongside_the_hosts():
    """n_hosts=1, local_envs=2: envs 2 and 3 live here, 0 and 1 in the env host; every dialect sees one pool."""

    def make():
        env = RecordEpisodeStatistics(gym.make("CartPole-v1"))
        env.pid = os.getpid()  # where it was built
        return env

    with AsyncEnvPool(make, n_envs=4, n_hosts=1, local_envs=2) as pool:
        assert pool.local_envs == 2 and "local_envs=2" in repr(pool)
        pids = pool.get_attr("pid")
        assert pids[2] == pids[3] == os.getpid() and pids[0] == pids[1] != os.getpid()
        obs, _ = pool.reset(seed=10)
        for i in range(4):
            np.testing.assert_array_equal(obs[i], gym.make("CartPole-v1").reset(seed=10 + i)[0])
        references = [gym.make("CartPole-v1") for _ in range(4)]
        for i, reference in enumerate(references):
            reference.reset(seed=10 + i)
        pool.send({0: 1, 3: 0})  # env 3 (local) has stepped when send returns, env 0 may still be stepping
        obs, rewards, *_ = pool.recv(min_ready=2)
        assert sorted(obs) == [0, 3]
        for i, action in ((0, 1), (3, 0)):
            np.testing.assert_array_equal(obs[i], references[i].step(action)[0])
        assert pool.get_attr("spec", [1, 2])[1].id == "CartPole-v1"
        pool.set_attr("marker", 7, [2])
        assert pool.get_attr("marker", [2]) == [7]
        assert pool.env_is_wrapped(RecordEpisodeStatistics) == [True] * 4
    venv = AsyncEnvPool(cartpole(max_episode_steps=20), n_envs=4, n_hosts=1, local_envs=2).as_vec_env()
    reference = DummyVecEnv([cartpole(max_episode_steps=20)] * 4)
    try:
        venv.seed(3)
        reference.seed(3)
        np.testing.assert_array_equal(venv.reset(), reference.reset())
        for _ in range(30):
            actions = np.array([1, 0, 1, 1])
            ours, theirs = venv.step(actions), reference.step(actions)
            for mine, other in zip(ours[:3], theirs[:3]):
                np.testing.assert_array_equal(mine, other)
    finally:
        venv.close()
    with AsyncEnvPool([cartpole(), failing(2), cartpole()], n_hosts=1, local_envs=2) as pool:  # env 1 is local
        check_env_1_error_spares_the_others(pool)
        obs, *_ = pool.step({0: 1, 2: 1})
        assert sorted(obs) == [0, 2]


def test_vec_env_methods_and_wrappers():
    make = lambda: RecordEpisodeStatistics(FailingEnv(gym.make("CartPole-v1", render_mode="rgb_array"), 10**6))  # noqa: E731
    venv = AsyncEnvPool(make, n_envs=3, n_hosts=2).as_vec_env()  # envs 0 and 1 in worker processes
    try:
        assert venv.render_mode == "rgb_array"
        assert venv.get_attr("spec", indices=[1])[0].id == "CartPole-v1"
        venv.set_attr("custom", 5, indices=2)
        assert venv.get_attr("custom", indices=[2]) == [5]
        pids = venv.env_method("pid", indices=[0, 1])
        assert len(pids) == 2 and os.getpid() not in pids
        assert venv.env_is_wrapped(RecordEpisodeStatistics) == [True, True, True]
        # OrderEnforcing, not TimeLimit: rl_zoo3 (imported by other tests) patches gym.wrappers.TimeLimit in this process only
        assert venv.env_is_wrapped(gym.wrappers.OrderEnforcing, indices=[0]) == [True]
        assert venv.has_attr("spec") and not venv.has_attr("nope")
        with pytest.raises(AttributeError):
            venv.get_attr("nope")
        venv.reset()
        assert venv.get_images()[0].shape[-1] == 3
        wrapped = VecFrameStack(VecNormalize(VecMonitor(venv)), n_stack=2)
        obs = wrapped.reset()
        assert obs.shape == (3, 8)
        obs, rewards, dones, infos = wrapped.step(np.array([0, 1, 0]))
        assert obs.shape == (3, 8) and rewards.shape == dones.shape == (3,)
    finally:
        venv.close()


@pytest.mark.parametrize(
    "n_envs, cpus, expected",
    [(8, 2, (1, 4)), (7, 2, (1, 3)), (2, 2, (1, 1)), (1, 2, (0, 1)), (8, 1, (0, 8)), (8, 4, (3, 2)), (3, 8, (2, 1))],
)
def test_synchronous_layout_one_process_per_core_main_included(n_envs, cpus, expected):
    from sb3_async.env_pool.layout import synchronous_layout

    assert synchronous_layout(n_envs, cpus) == expected


@pytest.mark.parametrize("kwargs, name", [(dict(n_envs=0), "n_envs"), (dict(n_envs=4, cpus=0), "cpus")])
def test_synchronous_layout_names_a_bad_argument(kwargs, name):
    from sb3_async.env_pool.layout import synchronous_layout

    with pytest.raises(ValueError, match=name):
        synchronous_layout(**kwargs)


def test_pool_vec_env_from_factories_takes_the_default_layout_unless_told():
    from sb3_async.env_pool.layout import synchronous_layout

    venv = make_vec_env("CartPole-v1", n_envs=4, seed=3, vec_env_cls=PoolVecEnv)
    reference = make_vec_env("CartPole-v1", n_envs=4, seed=3)
    try:  # CartPole's steps are about as cheap as a handover: either layout, by the probe's timing
        assert (venv.pool.n_hosts, venv.pool.local_envs) in (synchronous_layout(4), (0, 4))
        np.testing.assert_array_equal(venv.reset(), reference.reset())
        actions = np.array([0, 1, 1, 0])
        for _ in range(30):  # through episode ends: the same transitions as DummyVecEnv
            obs, rewards, dones, _ = venv.step(actions)
            ref_obs, ref_rewards, ref_dones, _ = reference.step(actions)
            np.testing.assert_array_equal(obs, ref_obs)
            np.testing.assert_array_equal(dones, ref_dones)
    finally:
        venv.close()
        reference.close()
    venv = make_vec_env("CartPole-v1", n_envs=4, vec_env_cls=PoolVecEnv, vec_env_kwargs={"n_hosts": 2})
    assert (venv.pool.n_hosts, venv.pool.local_envs) == (2, 0)
    venv.close()


def test_pool_vec_env_as_make_vec_env_class():
    venv = make_vec_env("CartPole-v1", n_envs=2, seed=3, vec_env_cls=PoolVecEnv, vec_env_kwargs={"n_hosts": 0})
    reference = make_vec_env("CartPole-v1", n_envs=2, seed=3)
    try:
        assert venv.env_is_wrapped(Monitor) == [True, True]
        np.testing.assert_array_equal(venv.reset(), reference.reset())
    finally:
        venv.close()
        reference.close()


def test_stock_ppo_and_td3_train_on_the_pool():
    small = {"net_arch": [16]}
    ppo = PPO("MlpPolicy", AsyncEnvPool("CartPole-v1", n_envs=4).as_vec_env(), n_steps=16, n_epochs=1, policy_kwargs=small)
    ppo.learn(64)
    ppo.env.close()
    td3 = TD3(
        "MlpPolicy", AsyncEnvPool("Pendulum-v1", n_envs=2).as_vec_env(), learning_starts=40, train_freq=8, policy_kwargs=small
    )
    td3.learn(80)
    td3.env.close()
    assert ppo.num_timesteps >= 64 and td3.num_timesteps >= 80 and td3._n_updates > 0


# ---------------------------------------------------------------------------------------------------- errors
def test_an_env_error_names_the_env_and_spares_the_others():
    with AsyncEnvPool([cartpole(), failing(2), cartpole()], n_hosts=2) as pool:
        check_env_1_error_spares_the_others(pool)
        obs, *_ = pool.step({0: 1, 2: 1})
        assert sorted(obs) == [0, 2]


def test_in_process_vec_env_reports_errors_and_restarts():
    """n_hosts=0: the VecEnv steps the envs directly; errors and restarts read as through the env hosts."""
    venv = AsyncEnvPool([cartpole(), failing(2), cartpole()], n_hosts=0).as_vec_env()
    try:
        venv.reset()
        venv.step(np.array([0, 0, 0]))
        with pytest.raises(EnvError, match="(?s)Env 1 of the AsyncEnvPool raised in step.*boom in step"):
            venv.step(np.array([0, 0, 0]))
        with pytest.raises(RuntimeError, match="step_wait\\(\\) without step_async"):
            venv.step_wait()
    finally:
        venv.close()
    with pytest.raises(RuntimeError, match="closed"):
        venv.step(np.array([0, 0, 0]))
    venv = AsyncEnvPool([failing(2), cartpole()], n_hosts=0, on_error="restart").as_vec_env()
    try:
        first = venv.reset()
        first, *_ = venv.step(np.array([0, 0]))
        _, _, dones, infos = venv.step(np.array([0, 0]))
        assert dones[0] and not dones[1] and infos[0]["TimeLimit.truncated"] and "boom in step" in infos[0]["error"]
        np.testing.assert_array_equal(infos[0]["terminal_observation"], first[0])
    finally:
        venv.close()


def test_reset_errors_and_factory_errors_are_reported():
    with AsyncEnvPool([cartpole(), lambda: ResetFailingEnv(gym.make("CartPole-v1"))], n_hosts=2) as pool:
        pool.reset(seed=0)
        with pytest.raises(EnvError, match="(?s)Env 1 of the AsyncEnvPool raised in reset.*boom in reset"):
            pool.reset(seed=0)
        obs, _ = pool.reset(seed=0)  # its third reset works again
        assert sorted(obs) == [0, 1]
    with AsyncEnvPool(lambda: ResetFailingEnv(gym.make("CartPole-v1")), n_envs=1, on_error="restart") as pool:
        pool.reset(seed=0)
        obs, _ = pool.reset(seed=0)  # rebuilt and retried once
        assert list(obs) == [0]
    with pytest.raises(WorkerError, match="(?s)env host of env 1.*no env here"):
        AsyncEnvPool([cartpole(), broken_factory], n_hosts=2)


def test_restart_rebuilds_the_env_and_reports_a_truncation():
    with AsyncEnvPool([failing(2), cartpole()], on_error="restart", n_hosts=1) as pool:
        pool.reset(seed=0)
        first, *_ = pool.step({0: 0, 1: 0})
        obs, rewards, terminations, truncations, infos = pool.step({0: 0, 1: 0})
        assert truncations[0] and not terminations[0] and "boom in step" in infos[0]["error"]
        np.testing.assert_array_equal(infos[0]["final_obs"], first[0])
        obs, rewards, terminations, truncations, infos = pool.step({0: 0, 1: 0})
        assert not truncations[0] and "error" not in infos[0]


def test_a_killed_worker_is_reported_within_a_second():
    with AsyncEnvPool(lambda: SleepyEnv(gym.make("CartPole-v1"), 30.0), n_envs=2, n_hosts=2) as pool:
        pool.reset(seed=0)
        pool.send({0: 0, 1: 0})
        victim = pool.host_pids()[1]
        os.kill(victim, signal.SIGKILL)
        start = time.monotonic()
        with pytest.raises(WorkerError, match="killed by SIGKILL") as info:
            pool.recv(min_ready=2)
        assert time.monotonic() - start < 1.0
        assert "env 1" in str(info.value)


@pytest.mark.parametrize("victim", [0, 1])
def test_restart_respawns_a_killed_worker(victim):
    other = 1 - victim
    with AsyncEnvPool(failing(10**6), n_envs=2, n_hosts=2, on_error="restart") as pool:
        pool.reset(seed=0)
        before, *_ = pool.step({0: 0, 1: 0})
        old_pid = pool.call("pid", ids=[victim])[0]
        os.kill(old_pid, signal.SIGKILL)
        obs, _, terminations, truncations, infos = pool.step({0: 0, 1: 0})
        assert truncations[victim] and not terminations[victim] and "SIGKILL" in infos[victim]["error"]
        np.testing.assert_array_equal(infos[victim]["final_obs"], before[victim])
        assert not truncations[other]
        assert pool.call("pid", ids=[victim])[0] != old_pid
        obs, _, _, truncations, infos = pool.step({0: 0, 1: 0})
        assert not truncations[victim] and "error" not in infos[victim]
        assert obs[victim].shape == (4,) and pool.reset(seed=1)[0][victim].shape == (4,)


def test_n_workers_is_a_deprecated_name_of_n_hosts():
    """The pool's processes are env hosts: ``n_workers=`` still builds the same pool, with a DeprecationWarning naming
    ``n_hosts``, and giving both is an error."""
    with AsyncEnvPool("CartPole-v1", n_envs=3, n_hosts=1, local_envs=1) as expected:
        with pytest.warns(DeprecationWarning, match="n_hosts"):
            pool = AsyncEnvPool("CartPole-v1", n_envs=3, n_workers=1, local_envs=1)
        with pool:
            assert repr(pool) == repr(expected)
            assert (pool.n_hosts, pool.local_envs, len(pool.host_pids())) == (1, 1, 1)
            with pytest.warns(DeprecationWarning, match="n_hosts"):
                assert pool.n_workers == 1
            with pytest.warns(DeprecationWarning, match="host_pids"):
                assert pool.worker_pids() == pool.host_pids()
    with pytest.raises(ValueError, match="n_hosts=1 only: n_workers=1 is its deprecated name"):
        AsyncEnvPool("CartPole-v1", n_envs=2, n_hosts=1, n_workers=1)


def test_bad_input_gives_clear_errors():
    with pytest.raises(ValueError, match="n_envs"):
        AsyncEnvPool("CartPole-v1", n_envs=0)
    with pytest.raises(ValueError, match="on_error"):
        AsyncEnvPool("CartPole-v1", on_error="ignore")
    with pytest.raises(ValueError, match="start_method"):
        AsyncEnvPool("CartPole-v1", start_method="thread")
    with pytest.raises(ValueError, match="n_hosts"):
        AsyncEnvPool("CartPole-v1", n_envs=2, n_hosts=3)
    with pytest.raises(ValueError, match="n_envs=3 but 2"):
        AsyncEnvPool([cartpole(), cartpole()], n_envs=3)
    with pytest.raises(TypeError, match="env must be"):
        AsyncEnvPool(3)
    with pytest.raises(ValueError, match="observation space"):
        AsyncEnvPool([cartpole(), lambda: gym.make("Pendulum-v1")], n_hosts=1)
    with pytest.raises(ValueError, match="observation space"):
        AsyncEnvPool([cartpole(), lambda: gym.make("Pendulum-v1")], n_hosts=1, local_envs=1)
    with pytest.raises(ValueError, match="local_envs=1 with n_hosts=0"):
        AsyncEnvPool("CartPole-v1", n_envs=2, n_hosts=0, local_envs=1)
    with pytest.raises(ValueError, match="local_envs=2: at most n_envs - n_hosts = 1"):
        AsyncEnvPool("CartPole-v1", n_envs=3, n_hosts=2, local_envs=2)
    with pytest.raises(ValueError, match="local_envs"):
        AsyncEnvPool("CartPole-v1", n_envs=3, n_hosts=1, local_envs=-1)
    with AsyncEnvPool("CartPole-v1", n_envs=2) as pool:
        pool.reset()
        with pytest.raises(KeyError, match="Unknown env id 5"):
            pool.step({5: 0})
        with pytest.raises(KeyError, match="Unknown env id 'a'"):
            pool.observation_space("a")
        with pytest.raises(ValueError, match="Invalid action 2 for env 1"):
            pool.step({1: 2})
        with pytest.raises(ValueError, match="non-empty dict"):
            pool.step({})
        with pytest.raises(ValueError, match=r"recv\(\) with no step in flight: send\(\) actions first"):
            pool.recv()
        pool.send({0: 1})
        with pytest.raises(ValueError, match="Invalid min_ready=2: expected 1..1"):
            pool.recv(min_ready=2)
        with pytest.raises(ValueError, match="Env 0 has a step not received"):
            pool.send({0: 1})
        venv = pool.as_vec_env()
        with pytest.raises(ValueError, match="Invalid action"):
            venv.step(np.array([0, 7]))
    with pytest.raises(ValueError, match="autoreset=True"):
        AsyncEnvPool("CartPole-v1", autoreset=False, n_hosts=0).as_vec_env()
    with pytest.raises(RuntimeError, match="closed"):
        pool.reset()


# ---------------------------------------------------------------------------------------------------- cleanup
def test_close_and_garbage_collection_leave_no_process_and_no_named_memory():
    pool = AsyncEnvPool("CartPole-v1", n_envs=2, n_hosts=2)
    fd = pool.buffers.fd
    assert os.readlink(f"/proc/self/fd/{fd}").startswith("/memfd:")  # anonymous: never a name in /dev/shm
    pids = pool.host_pids()
    pool.close()
    pool.close()
    assert wait_gone(pids, 1.0)
    pool = AsyncEnvPool("CartPole-v1", n_envs=2, n_hosts=2)
    pids = pool.host_pids()
    del pool
    gc.collect()
    assert wait_gone(pids, 5.0)


@pytest.mark.parametrize("how", ["SIGKILL", "Ctrl-C"])
def test_parent_death_or_ctrl_c_leaves_no_process(how):
    result = run_script(
        f"""
        import os, signal, sys, time
        import gymnasium as gym
        from sb3_async import AsyncEnvPool

        # Ctrl-C raises KeyboardInterrupt even when the tests run from a background job (SIGINT ignored there)
        signal.signal(signal.SIGINT, signal.default_int_handler)

        class Slow(gym.Wrapper):
            def step(self, action):
                time.sleep(30)

        if __name__ == "__main__":
            pool = AsyncEnvPool(lambda: Slow(gym.make("CartPole-v1")), n_envs=2, n_hosts=2)
            pool.reset()
            print(*pool.host_pids(), flush=True)
            pool.send({{0: 0, 1: 0}})
            if "{how}" == "SIGKILL":
                os.kill(os.getpid(), signal.SIGKILL)
            signal.setitimer(signal.ITIMER_REAL, 0.2)
            signal.signal(signal.SIGALRM, lambda *_: os.kill(os.getpid(), signal.SIGINT))
            pool.recv(min_ready=2)
        """
    )
    pids = [int(pid) for pid in result.stdout.split()]
    assert len(pids) == 2, result.stderr
    if how == "Ctrl-C":
        assert "KeyboardInterrupt" in result.stderr
    assert wait_gone(pids, 2.0)


def test_pettingzoo_parallel_api_test_passes_with_autoreset_off():
    test = pytest.importorskip("pettingzoo.test", reason="pettingzoo is optional: not a dependency")
    with AsyncEnvPool("CartPole-v1", n_envs=3, autoreset=False) as pool:
        test.parallel_api_test(pool, num_cycles=200)


class SlowStepEnv(gym.Wrapper):
    """CartPole whose steps last ``seconds`` (an env dearer than a message between processes)."""

    def __init__(self, seconds: float = 0.002):
        super().__init__(gym.make("CartPole-v1"))
        self.seconds, self.steps, self.closed = seconds, 0, False

    def step(self, action):
        time.sleep(self.seconds)
        self.steps += 1
        return self.env.step(action)

    def close(self):
        self.closed = True
        super().close()


@pytest.mark.parametrize(
    "n_envs, step_seconds, cpus, expected",
    [
        (8, 0.002, 2, (1, 4)),  # dear steps: one process per core, this one included
        (8, 1e-6, 2, (0, 8)),  # the workers' share steps faster than a handover: every env here
        (64, 5e-6, 2, (1, 32)),  # 32 cheap steps outweigh the handover
        (8, None, 2, (1, 4)),  # step time unknown (a multi-agent env): one process per core
        (8, 1e-6, 1, (0, 8)),
    ],
)
def test_default_layout_weighs_the_workers_share_against_a_handover(n_envs, step_seconds, cpus, expected):
    from sb3_async.env_pool.layout import default_layout

    assert default_layout(n_envs, step_seconds, cpus) == expected


def test_the_probe_times_a_step_and_closes_its_env():
    from sb3_async.env_pool.layout import probe_step_seconds

    built = []

    def factory():
        built.append(SlowStepEnv(0.003))
        return built[-1]

    assert probe_step_seconds(factory) >= 0.003
    assert len(built) == 1 and built[0].steps >= 2 and built[0].closed
    assert probe_step_seconds(lambda: object()) is None  # not a gymnasium env: unknown

    def failing():
        raise RuntimeError("cannot build")

    assert probe_step_seconds(failing) is None  # the pool's own build reports it


def test_a_pool_takes_the_default_layout_unless_told(monkeypatch):
    from sb3_async.env_pool import options
    from sb3_async.env_pool.layout import synchronous_layout

    with AsyncEnvPool(SlowStepEnv, n_envs=4) as pool:  # dear steps
        assert (pool.n_hosts, pool.local_envs) == synchronous_layout(4)
    if synchronous_layout(4)[0]:  # several cores: steps cheaper than a handover stay here
        monkeypatch.setattr(options, "probe_step_seconds", lambda factory: 1e-7)
        with AsyncEnvPool("CartPole-v1", n_envs=4) as pool:
            assert (pool.n_hosts, pool.local_envs) == (0, 4)
    with AsyncEnvPool("CartPole-v1", n_envs=4, n_hosts=2) as pool:  # an explicit n_hosts keeps its meaning
        assert (pool.n_hosts, pool.local_envs) == (2, 0)
    with AsyncEnvPool("CartPole-v1", n_envs=4, local_envs=0) as pool:  # env hosts only: min(n_envs, cores)
        assert (pool.n_hosts, pool.local_envs) == (min(4, os.cpu_count() or 1), 0)


def test_ae_ddpg_keeps_every_env_in_hosts_by_default():
    from sb3_async import AEDDPG

    model = AEDDPG("MlpPolicy", "Pendulum-v1", n_envs=4, learning_starts=10)
    try:
        assert (model.env.pool.n_hosts, model.env.pool.local_envs) == (min(4, os.cpu_count() or 1), 0)
    finally:
        model.env.close()


def test_workers_wait_awake_only_when_this_process_steps_envs_too():
    from sb3_async.env_pool.host import SPIN_SECONDS

    with AsyncEnvPool("CartPole-v1", n_envs=4, n_hosts=1, local_envs=2) as pool:  # the split layout
        assert pool.hosts.spin_seconds == SPIN_SECONDS
        pool.reset(seed=0)
        for _ in range(20):  # steps as usual
            pool.step({i: 0 for i in range(4)})
    with AsyncEnvPool("CartPole-v1", n_envs=4, n_hosts=2) as pool:  # env hosts only: they block at once
        assert pool.hosts.spin_seconds == 0.0
