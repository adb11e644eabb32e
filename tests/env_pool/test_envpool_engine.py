"""AsyncEnvPool(engine="envpool"): EnvPool's C++ envs behind the pool's API, and the differences its docstring lists."""

import numpy as np
import pytest
from stable_baselines3 import PPO, TD3

from sb3_async import AsyncEnvPool
from sb3_async.env_pool import FINAL_INFO, FINAL_OBS, EnvError

pytest.importorskip("envpool", reason='engine="envpool" needs EnvPool (pip install "sb3-async[envpool]", Python 3.11-3.14)')


def pool(env_id: str = "CartPole-v1", n_envs: int = 3, **kwargs) -> AsyncEnvPool:
    return AsyncEnvPool(env_id, n_envs, engine="envpool", **kwargs)


def trajectory(seed: int, steps: int = 40) -> np.ndarray:
    with pool() as envs:
        obs, _ = envs.reset(seed=seed)
        frames = [np.stack([obs[i] for i in range(3)])]
        for t in range(steps):
            obs, *_ = envs.step({i: (t + i) % 2 for i in range(3)})
            frames.append(np.stack([obs[i] for i in range(3)]))
    return np.stack(frames)


def test_parallel_env_api_spaces_and_seeding():
    with pool(n_envs=4) as envs:
        assert envs.possible_agents == [0, 1, 2, 3] and envs.engine == "envpool"
        assert envs.observation_space(2) is envs.observation_space(0) and envs.observation_space(0).shape == (4,)
        assert envs.action_space(1).n == 2
        obs, infos = envs.reset(seed=7)
        assert sorted(obs) == [0, 1, 2, 3] and infos[0]["elapsed_step"] == 0
        obs, rewards, terminations, truncations, infos = envs.step({1: 0, 3: 1})  # a subset of the envs
        assert sorted(obs) == [1, 3] and rewards == {1: 1.0, 3: 1.0} and infos[3]["elapsed_step"] == 1
        assert not any(terminations.values()) and not any(truncations.values())
    # the same seed gives the same trajectories, another seed others
    np.testing.assert_array_equal(trajectory(3), trajectory(3))
    assert not np.allclose(trajectory(3), trajectory(4))


def test_same_step_autoreset_on_truncation_and_termination():
    with pool(env_kwargs={"max_episode_steps": 5}) as envs:
        envs.reset(seed=0)
        for _ in range(4):
            _, _, terminations, truncations, _ = envs.step({0: 0, 1: 1, 2: 0})
            assert not any(truncations.values())
        obs, rewards, terminations, truncations, infos = envs.step({0: 0, 1: 1, 2: 0})
        assert all(truncations.values()) and not any(terminations.values())  # a time limit stays a truncation
        assert rewards[0] == 1.0  # no fake reward-0 transition: the step itself, then the reset
        for i in range(3):
            assert infos[i]["elapsed_step"] == 0 and infos[i][FINAL_INFO]["elapsed_step"] == 5
            assert not np.allclose(infos[i][FINAL_OBS], obs[i])
        _, _, _, _, infos = envs.step({0: 0, 1: 1, 2: 0})
        assert infos[0]["elapsed_step"] == 1  # the next step is the new episode's first: no action was discarded
    with pool(n_envs=2) as envs:  # pushing right only: the pole falls, terminated
        envs.reset(seed=1)
        for _ in range(100):
            obs, _, terminations, truncations, infos = envs.step({0: 1, 1: 1})
            if terminations[0]:
                break
        assert terminations[0] and not truncations[0]
        assert abs(infos[0][FINAL_OBS][2]) > 0.2 and abs(obs[0][2]) < 0.06  # the fallen pole, then a fresh one


def test_autoreset_off_follows_pettingzoo():
    with pool(n_envs=2, autoreset=False, env_kwargs={"max_episode_steps": 3}) as envs:
        envs.reset(seed=0)
        for _ in range(3):
            _, _, _, truncations, infos = envs.step({0: 0, 1: 1})
        assert truncations == {0: True, 1: True} and FINAL_OBS not in infos[0] and envs.agents == []
        with pytest.raises(ValueError, match="Env 0 has ended"):
            envs.step({0: 0})
        obs, infos = envs.reset(ids=[0])
        assert envs.agents == [0] and sorted(obs) == [0] and infos[0]["elapsed_step"] == 0
        envs.step({0: 1})


def test_send_recv_and_stock_sb3_on_the_vec_env():
    with pool(n_envs=4) as envs:
        envs.reset(seed=0)
        assert envs.send({2: 0, 0: 1}) == [2, 0]
        obs, *_ = envs.recv(min_ready=1)  # synchronous: every env sent is ready
        assert sorted(obs) == [0, 2]
    small = {"net_arch": [16]}
    ppo = PPO("MlpPolicy", pool(n_envs=4).as_vec_env(), n_steps=16, n_epochs=1, policy_kwargs=small)
    ppo.learn(64)
    ppo.env.close()
    td3 = TD3("MlpPolicy", pool("Pendulum-v1", 2).as_vec_env(), learning_starts=40, train_freq=8, policy_kwargs=small)
    td3.learn(80)
    td3.env.close()
    assert ppo.num_timesteps >= 64 and td3.num_timesteps >= 80 and td3._n_updates > 0


def test_vec_env_reports_terminal_observations_and_truncations():
    vec = pool(n_envs=2, env_kwargs={"max_episode_steps": 4}).as_vec_env()
    vec.seed(5)
    first = vec.reset()
    for _ in range(4):
        obs, rewards, dones, infos = vec.step(np.zeros(2, dtype=np.int64))
    assert dones.all() and all(info["TimeLimit.truncated"] for info in infos)
    assert all(info["terminal_observation"].shape == (4,) for info in infos)
    assert vec.reset_infos[0]["elapsed_step"] == 0 and not np.allclose(obs, first)
    assert vec.render_mode is None and vec.env_is_wrapped(object) == [False, False]
    with pytest.raises(AttributeError, match="no attribute 'spec'"):
        vec.get_attr("spec")
    with pytest.raises(EnvError, match="no Python env objects"):
        vec.env_method("seed", 0)
    vec.close()


def test_mujoco_and_atari_envs():
    with pool("HalfCheetah-v5", 2) as envs:
        obs, _ = envs.reset(seed=0)
        assert obs[0].shape == (17,) and envs.action_space(0).shape == (6,)
        _, rewards, *_ = envs.step({0: np.zeros(6, np.float32), 1: np.ones(6, np.float32)})
        assert rewards[0] != rewards[1]
    with pool("Pong-v5", 2) as envs:  # EnvPool's Atari defaults: 4 stacked 84x84 grey frames
        obs, infos = envs.reset(seed=0)
        assert obs[0].shape == (4, 84, 84) and obs[0].dtype == np.uint8 and "lives" in infos[0]
        envs.step({0: 0, 1: 1})


def test_bad_input_gives_clear_errors():
    with pytest.raises(TypeError, match="env id"):
        AsyncEnvPool(lambda: None, 2, engine="envpool")
    with pytest.raises(ValueError, match="Unknown EnvPool env id"):
        pool("NoSuchEnv-v0")
    for bad in ({"n_hosts": 2}, {"on_error": "restart"}, {"backend": "ray"}, {"local_envs": 1}):
        with pytest.raises(ValueError, match=f"Invalid {next(iter(bad))}=.*engine='envpool'"):
            pool(**bad)
    with pytest.raises(ValueError, match="env_kwargs may not set 'num_envs'"):
        pool(env_kwargs={"num_envs": 2})
    with pytest.raises(ValueError, match="Invalid engine='nope'"):
        AsyncEnvPool("CartPole-v1", 2, engine="nope")
    with pool() as envs:
        with pytest.raises(ValueError, match="must reset every env"):
            envs.reset(seed=1, ids=[0])
        with pytest.raises(ValueError, match="no reset options"):
            envs.reset(options={"low": 0})
        envs.reset()
        with pytest.raises(ValueError, match="not in the action space"):
            envs.step({0: 5})
        with pytest.raises(KeyError, match="Unknown env id 3"):
            envs.step({3: 0})
