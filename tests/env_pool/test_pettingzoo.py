"""Multi-agent PettingZoo envs in the AsyncEnvPool: one slot per (env copy, agent), per-agent ends, dead agents padded,
heterogeneous spaces padded, AEC conversion, and training with parameter sharing on MPE's simple_spread."""

import sys

import cloudpickle
import numpy as np
import pytest
from gymnasium import spaces

pettingzoo = pytest.importorskip("pettingzoo")
from pettingzoo import AECEnv, ParallelEnv  # noqa: E402
from pettingzoo.utils.conversions import parallel_to_aec  # noqa: E402

from sb3_async import WorkerError  # noqa: E402
from sb3_async.env_pool import AsyncEnvPool, EnvError  # noqa: E402

# The envs below travel to the workers by value, so the workers never import this module (nor torch through it).
cloudpickle.register_pickle_by_value(sys.modules[__name__])


class RaceEnv(ParallelEnv):
    """A small ParallelEnv whose every value is known: agent ``k`` observes ``10 * (k + 1) + t`` (``t``: steps since
    reset) in each of its ``obs_sizes[k]`` entries, gets its action as reward, terminates at step ``lifetimes[k]``
    (None: never), and every agent still there is truncated at step ``max_cycles``. ``actions_seen`` records the
    actions each step received (a dead agent must get none)."""

    metadata = {"name": "race_v0", "is_parallelizable": True, "render_modes": []}

    def __init__(self, lifetimes=(None, None, None), max_cycles=4, obs_sizes=None, action_ns=None):
        self.possible_agents = [f"a_{k}" for k in range(len(lifetimes))]
        self.lifetimes, self.max_cycles = lifetimes, max_cycles
        obs_sizes = obs_sizes or [2] * len(lifetimes)
        action_ns = action_ns or [8] * len(lifetimes)
        self._obs_spaces = {
            agent: spaces.Box(-1e3, 1e3, (size,), np.float32) for agent, size in zip(self.possible_agents, obs_sizes)
        }
        self._act_spaces = {agent: spaces.Discrete(n) for agent, n in zip(self.possible_agents, action_ns)}
        self.render_mode = None
        self.actions_seen = []
        self.t = 0

    def observation_space(self, agent):
        return self._obs_spaces[agent]

    def action_space(self, agent):
        return self._act_spaces[agent]

    def _observe(self, agent):
        k = self.possible_agents.index(agent)
        return np.full(self._obs_spaces[agent].shape, 10 * (k + 1) + self.t, dtype=np.float32)

    def reset(self, seed=None, options=None):
        self.t = 0
        self.agents = list(self.possible_agents)
        return {agent: self._observe(agent) for agent in self.agents}, {agent: {"seed": seed} for agent in self.agents}

    def step(self, actions):
        assert set(actions) == set(self.agents), (actions, self.agents)
        self.actions_seen.append({agent: int(action) for agent, action in actions.items()})
        self.t += 1
        agents = self.agents
        observations = {agent: self._observe(agent) for agent in agents}
        rewards = {agent: float(actions[agent]) for agent in agents}
        lifetime = dict(zip(self.possible_agents, self.lifetimes))
        terminations = {agent: lifetime[agent] is not None and self.t >= lifetime[agent] for agent in agents}
        truncations = {agent: self.t >= self.max_cycles for agent in agents}
        infos = {agent: {"t": self.t} for agent in agents}
        self.agents = [agent for agent in agents if not (terminations[agent] or truncations[agent])]
        return observations, rewards, terminations, truncations, infos


class TurnBasedEnv(AECEnv):
    """An AEC env whose agents act in turns (as pettingzoo.classic's games): not convertible to a ParallelEnv."""

    metadata = {"name": "turns_v0", "is_parallelizable": False, "render_modes": []}

    def __init__(self):
        self.possible_agents = ["p_0", "p_1"]

    def observation_space(self, agent):
        return spaces.Box(0, 1, (2,), np.float32)

    def action_space(self, agent):
        return spaces.Discrete(2)


class MixedSpacesEnv(RaceEnv):
    """Agent a_1 observes a Discrete value, the others a Box: no padding holds both."""

    def observation_space(self, agent):
        return spaces.Discrete(3) if agent == "a_1" else super().observation_space(agent)


def race(**kwargs):
    return lambda: RaceEnv(**kwargs)


def test_slots_are_copies_times_agents_in_order():
    with AsyncEnvPool(race(), n_envs=2, n_hosts=2) as pool:
        assert (pool.n_envs, pool.n_env_copies, pool.agents_per_env) == (6, 2, 3)
        assert pool.env_agents == ["a_0", "a_1", "a_2"] and pool.possible_agents == list(range(6))
        venv = pool.as_vec_env()
        assert venv.num_envs == 6 and venv.observation_space == spaces.Box(-1e3, 1e3, (2,), np.float32)
        obs = venv.reset()
        np.testing.assert_array_equal(obs[:, 0], [10, 20, 30, 10, 20, 30])
        venv.step_async(np.arange(6))
        obs, rewards, dones, infos = venv.step_wait()
        np.testing.assert_array_equal(rewards, np.arange(6))  # slot i's action reached agent i % 3 of copy i // 3
        np.testing.assert_array_equal(obs[:, 0], [11, 21, 31, 11, 21, 31])
        assert not dones.any() and [info["t"] for info in infos] == [1] * 6
        assert pool.get_attr("actions_seen", [0])[0] == [{"a_0": 0, "a_1": 1, "a_2": 2}]
        assert pool.get_attr("actions_seen", [3])[0] == [{"a_0": 3, "a_1": 4, "a_2": 5}]
        venv.seed(7)
        venv.reset()
        assert [info["seed"] for info in venv.reset_infos] == [7, 7, 7, 10, 10, 10]  # copy c: the seed of its slot 3c
        venv.close()


def test_termination_truncation_and_dead_agents_per_slot():
    """Agent 0 terminates at step 2, the others are truncated at step 4: slot 0's episode ends terminated at step 2,
    then it observes zeros (flagged dead, reward 0, its actions dropped) until the copy's episode ends at step 4."""
    with AsyncEnvPool(race(lifetimes=(2, None, None), max_cycles=4), n_envs=1, n_hosts=1) as pool:
        venv = pool.as_vec_env()
        venv.reset()
        actions = np.array([5, 6, 7])
        venv.step_async(actions)
        venv.step_wait()
        venv.step_async(actions)
        obs, rewards, dones, infos = venv.step_wait()  # step 2: agent 0 terminates
        assert dones.tolist() == [True, False, False] and infos[0]["TimeLimit.truncated"] is False
        np.testing.assert_array_equal(infos[0]["terminal_observation"], [12, 12])
        assert infos[0]["episode"]["r"] == 10.0 and infos[0]["episode"]["l"] == 2
        np.testing.assert_array_equal(obs[0], [0, 0])
        assert venv.reset_infos[0] == {"dead": True} and rewards.tolist() == [5, 6, 7]
        venv.step_async(actions)
        obs, rewards, dones, infos = venv.step_wait()  # step 3: slot 0 is padding
        assert rewards.tolist() == [0, 6, 7] and not dones.any() and infos[0]["dead"] is True and "dead" not in infos[1]
        np.testing.assert_array_equal(obs[0], [0, 0])
        venv.step_async(actions)
        obs, rewards, dones, infos = venv.step_wait()  # step 4: the others are truncated, the copy starts again
        assert dones.all()
        assert [info["TimeLimit.truncated"] for info in infos] == [False, True, True]
        assert infos[0]["dead"] is True and "episode" not in infos[0]  # the padding stretch ends, terminated
        np.testing.assert_array_equal(infos[0]["terminal_observation"], [0, 0])
        np.testing.assert_array_equal(infos[1]["terminal_observation"], [24, 24])
        assert infos[1]["episode"] == {**infos[1]["episode"], "r": 24.0, "l": 4}
        np.testing.assert_array_equal(obs[:, 0], [10, 20, 30])  # the next episode's first observations
        seen = pool.get_attr("actions_seen", [0])[0]
        assert [sorted(step) for step in seen] == [["a_0", "a_1", "a_2"]] * 2 + [["a_1", "a_2"]] * 2
        venv.close()


def test_the_pool_dialect_steps_whole_copies():
    with AsyncEnvPool(race(lifetimes=(1, None, None)), n_envs=2, n_hosts=0) as pool:
        pool.reset()
        with pytest.raises(ValueError, match=r"slots \[4, 5\] of env copy 1 are missing"):
            pool.send({0: 1, 1: 1, 2: 1, 3: 1})
        with pytest.raises(ValueError, match="slots \\[1, 2\\] of env copy 0"):
            pool.reset(ids=[0])
        obs, rewards, terminations, truncations, infos = pool.step({i: 2 for i in range(6)})
        assert terminations == {0: True, 1: False, 2: False, 3: True, 4: False, 5: False} and not any(truncations.values())
        np.testing.assert_array_equal(infos[0]["final_obs"], [11, 11])
        assert infos[0]["dead"] is True and infos[0]["final_info"]["t"] == 1
        np.testing.assert_array_equal(obs[0], [0, 0])


def test_autoreset_off_follows_pettingzoo_per_slot():
    """autoreset=False: agent 0 terminates at step 2, agent 2 at step 3, agent 1 is truncated at step 4. Each slot
    leaves ``agents`` after the step that ends it (which still returns it, with its last observation), stepping it
    raises, its copy steps on with its live slots only (no padding), and the copy is not reset until ``reset`` of all
    its slots."""
    with AsyncEnvPool(race(lifetimes=(2, None, 3)), n_envs=2, n_hosts=1, local_envs=1, autoreset=False) as pool:
        with pytest.raises(ValueError, match="needs an AsyncEnvPool with autoreset=True"):
            pool.as_vec_env()
        obs, infos = pool.reset(seed=0)
        assert pool.agents == list(range(6)) and sorted(obs) == sorted(infos) == list(range(6))
        pool.step({i: 1 for i in range(6)})
        obs, rewards, terminations, truncations, infos = pool.step({i: 1 for i in range(6)})  # step 2
        assert terminations == {0: True, 1: False, 2: False, 3: True, 4: False, 5: False} and not any(truncations.values())
        np.testing.assert_array_equal(obs[0], [12, 12])  # the last observation itself, as a gymnasium env's
        assert "final_obs" not in infos[0] and "dead" not in infos[0] and infos[0]["t"] == 2
        assert infos[0]["episode"]["r"] == 2.0 and infos[0]["episode"]["l"] == 2
        assert pool.agents == [1, 2, 4, 5]
        with pytest.raises(
            ValueError, match=r"Env 0 has ended .* reset\(\) it first \(with every slot of its env copy, 0..2\)"
        ):
            pool.step({i: 1 for i in range(6)})
        with pytest.raises(ValueError, match=r"slots \[2\] of env copy 0 are missing"):
            pool.step({1: 1})
        obs, rewards, terminations, truncations, infos = pool.step({1: 3, 2: 4, 4: 1, 5: 1})  # step 3
        assert sorted(obs) == sorted(rewards) == sorted(infos) == [1, 2, 4, 5] and rewards[1] == 3.0
        assert terminations == {1: False, 2: True, 4: False, 5: True} and pool.agents == [1, 4]
        np.testing.assert_array_equal(obs[1], [23, 23])
        _, _, terminations, truncations, infos = pool.step({1: 1})  # step 4 of copy 0 only
        assert (terminations, truncations, pool.agents) == ({1: False}, {1: True}, [4])
        assert infos[1]["episode"]["l"] == 4
        _, _, _, truncations, _ = pool.step({4: 1})
        assert truncations == {4: True} and pool.agents == []
        seen = pool.get_attr("actions_seen", [0])[0]
        assert [sorted(step) for step in seen] == [["a_0", "a_1", "a_2"]] * 2 + [["a_1", "a_2"], ["a_1"]]  # never reset
        with pytest.raises(ValueError, match=r"slots \[1, 2\] of env copy 0 are missing"):
            pool.reset(ids=[0])
        obs, infos = pool.reset(ids=[0, 1, 2])
        assert pool.agents == [0, 1, 2] and sorted(obs) == [0, 1, 2]
        np.testing.assert_array_equal(obs[0], [10, 10])
        obs, *_ = pool.step({0: 1, 1: 1, 2: 1})
        np.testing.assert_array_equal(obs[0], [11, 11])
        pool.reset()
        assert pool.agents == list(range(6))


class CrashingRaceEnv(RaceEnv):
    """RaceEnv whose third step raises."""

    def step(self, actions):
        if self.t == 2:
            raise RuntimeError("the env broke")
        return super().step(actions)


class LateRaceEnv(RaceEnv):
    """RaceEnv whose last agent is absent at reset."""

    def reset(self, seed=None, options=None):
        observations, infos = super().reset(seed, options)
        self.agents = self.agents[:-1]
        return {a: observations[a] for a in self.agents}, {a: infos[a] for a in self.agents}


def test_autoreset_off_restart_and_absent_agents():
    """autoreset=False, on_error="restart": a copy that raised is rebuilt, its live slots report their episode
    truncated with the error and leave ``agents``; it starts again at ``reset``. An env with an agent absent at reset
    is refused (the pool's ``agents`` after a reset are all the copy's slots)."""
    with AsyncEnvPool(
        lambda: CrashingRaceEnv(lifetimes=(1, None, None)), n_hosts=1, on_error="restart", autoreset=False
    ) as pool:
        pool.reset()
        pool.step({0: 1, 1: 1, 2: 1})
        assert pool.agents == [1, 2]
        pool.step({1: 1, 2: 1})
        _, _, terminations, truncations, infos = pool.step({1: 1, 2: 1})
        assert truncations == {1: True, 2: True} and not any(terminations.values()) and pool.agents == []
        assert "the env broke" in infos[1]["error"]
        obs, _ = pool.reset()
        np.testing.assert_array_equal(obs[0], [10, 10])
        assert pool.agents == [0, 1, 2] and pool.get_attr("actions_seen", [0])[0] == []  # the rebuilt copy
    with (
        AsyncEnvPool(LateRaceEnv, n_hosts=0, autoreset=False) as pool,
        pytest.raises(EnvError, match=r"no agent 'a_2' \(or no observation for it\) at reset"),
    ):
        pool.reset()


def test_heterogeneous_spaces_are_padded():
    env = race(obs_sizes=[2, 3, 4], action_ns=[3, 4, 5])
    with AsyncEnvPool(env, n_envs=1, n_hosts=1) as pool:
        assert pool.observation_space(0).shape == (4,) and pool.action_space(0) == spaces.Discrete(5)
        obs, _ = pool.reset()
        np.testing.assert_array_equal(obs[0], [10, 10, 0, 0])  # zero-padded, as SuperSuit's pad_observations_v0
        np.testing.assert_array_equal(obs[2], [30, 30, 30, 30])
        _, rewards, *_ = pool.step({0: 4, 1: 3, 2: 4})
        assert rewards == {0: 0.0, 1: 3.0, 2: 4.0}  # agent 0 has 3 actions: action 4 became 0 (pad_action_space_v0)


def test_agent_id_one_hot():
    with AsyncEnvPool(race(), n_envs=1, n_hosts=0, agent_id=True) as pool:
        assert pool.observation_space(0).shape == (5,)
        obs, _ = pool.reset()
        np.testing.assert_array_equal(obs[1], [20, 20, 0, 1, 0])


def test_spaces_that_cannot_be_padded_are_refused_naming_the_agents():
    with pytest.raises(ValueError, match=r"different observation spaces.*'a_0': Box.*'a_1': Discrete\(3\)"):
        AsyncEnvPool(MixedSpacesEnv, n_hosts=0)
    with pytest.raises(WorkerError, match="different observation spaces"):  # raised in the worker, its traceback shown
        AsyncEnvPool(MixedSpacesEnv, n_hosts=1)


def test_invalid_options_are_refused():
    with pytest.raises(ValueError, match="Invalid dead_agents='mask'"):
        AsyncEnvPool(race(), dead_agents="mask")
    with pytest.raises(ValueError, match="agent_id=True applies to multi-agent PettingZoo envs only"):
        AsyncEnvPool("CartPole-v1", n_hosts=0, agent_id=True)


def test_aec_envs_are_converted_and_turn_based_ones_are_one_slot_per_copy():
    with AsyncEnvPool(lambda: parallel_to_aec(RaceEnv()), n_envs=2, n_hosts=1) as pool:
        assert pool.n_envs == 6
        pool.reset()
        _, rewards, *_ = pool.step({i: i for i in range(6)})
        assert rewards == {i: float(i) for i in range(6)}
    from pettingzoo.classic import tictactoe_v3

    with AsyncEnvPool(tictactoe_v3.env, n_envs=2, n_hosts=0) as pool:  # the learner's seat of each copy
        assert (pool.n_envs, pool.agents_per_env) == (2, 1)
    with pytest.raises(ValueError, match="turn-based game"):  # agent slots step every agent at once: not a game's
        AsyncEnvPool(TurnBasedEnv, n_hosts=0, agent_id=True)


def test_mpe_aec_env_is_converted():
    simple_spread_v3 = pytest.importorskip("mpe2.simple_spread_v3")
    with AsyncEnvPool(lambda: simple_spread_v3.env(max_cycles=5), n_envs=2, n_hosts=1) as pool:
        venv = pool.as_vec_env()
        assert venv.num_envs == 6 and venv.reset().shape == (6, 18)
        for _ in range(5):
            venv.step_async(np.zeros(6, dtype=np.int64))
            _, _, dones, infos = venv.step_wait()
        assert dones.all() and all(info["TimeLimit.truncated"] for info in infos)


def test_ae_ddpg_trains_on_continuous_simple_spread_and_saves(tmp_path):
    simple_spread_v3 = pytest.importorskip("mpe2.simple_spread_v3")
    from sb3_async import AEDDPG

    def make():
        return simple_spread_v3.parallel_env(max_cycles=25, continuous_actions=True)

    pool = AsyncEnvPool(make, n_envs=2, n_hosts=1)
    model = AEDDPG(
        "MlpPolicy", pool, learning_starts=200, batch_size=32, buffer_size=5000, seed=0,
        policy_kwargs=dict(net_arch=dict(pi=[32], qf=[32])),
    )  # fmt: skip
    assert model.n_envs == 6 and model.action_space == spaces.Box(0.0, 1.0, (5,), np.float32)
    model.learn(2000)
    assert model.num_timesteps >= 2000 and len(model.ep_info_buffer) >= 12  # 25-step episodes of 6 slots, logged
    model.save(tmp_path / "ae_ddpg")
    obs = pool.as_vec_env().reset()
    loaded = AEDDPG.load(tmp_path / "ae_ddpg", env=pool.as_vec_env())
    np.testing.assert_allclose(loaded.predict(obs, deterministic=True)[0], model.predict(obs, deterministic=True)[0])
    pool.close()
    # From a factory, n_envs counts env copies, as AsyncEnvPool's n_envs does (a slot per agent each)
    from_factory = AEDDPG("MlpPolicy", make, n_envs=2, learning_starts=100)
    assert from_factory.n_envs == 6
    with AsyncEnvPool(make, n_envs=2, n_hosts=0) as given, pytest.raises(ValueError, match="n_envs=3: the env given has 2"):
        AEDDPG("MlpPolicy", given, n_envs=3)
    from_factory.env.close()


def _score(model, make) -> float:
    """Mean return per agent of the model, 60 deterministic slot episodes on a fresh pool."""
    from stable_baselines3.common.evaluation import evaluate_policy

    with AsyncEnvPool(make, n_envs=2, n_hosts=0) as eval_pool:
        eval_env = eval_pool.as_vec_env()
        eval_env.seed(123)
        return evaluate_policy(model, eval_env, n_eval_episodes=60)[0]


@pytest.mark.slow
def test_ae_ddpg_learns_continuous_simple_spread():
    """Parameter sharing learns: the model ``learn()`` returns after 12k slot steps scores above -24 per agent, where
    uniformly random actions score about -26 and the untrained policy -27 to -29."""
    simple_spread_v3 = pytest.importorskip("mpe2.simple_spread_v3")
    from sb3_async import AEDDPG

    def make():
        return simple_spread_v3.parallel_env(max_cycles=25, continuous_actions=True)

    with AsyncEnvPool(make, n_envs=2, n_hosts=1) as pool:
        model = AEDDPG(
            "MlpPolicy", pool, learning_starts=200, batch_size=32, buffer_size=50_000, seed=0,
            policy_kwargs=dict(net_arch=dict(pi=[32], qf=[32])),
        ).learn(12_000)  # fmt: skip
        score = _score(model, make)
    assert score >= -24, score


@pytest.mark.slow
def test_a3c_learns_discrete_simple_spread():
    """A3C with its zoo entry's settings (2 workers of 2 copies, 12 slots): the model ``learn()`` returns after 270k
    slot steps scores above -23.5 per agent (-20.3 to -22.5 in six runs of the PettingZoo race; PPO through SuperSuit
    scored -22.6 to -28.6 at 200k steps)."""
    simple_spread_v3 = pytest.importorskip("mpe2.simple_spread_v3")

    def make():
        return simple_spread_v3.parallel_env(max_cycles=25)

    from sb3_async import A3C

    model = A3C(
        "MlpPolicy", make, n_workers=2, n_envs_per_worker=2, n_steps=25, ent_coef=0.01, learning_rate=7e-4, seed=0
    ).learn(270_000)
    score = _score(model, make)
    assert score >= -23.5, score


def test_stock_sb3_ppo_trains_on_discrete_simple_spread():
    simple_spread_v3 = pytest.importorskip("mpe2.simple_spread_v3")
    from stable_baselines3 import PPO

    venv = AsyncEnvPool(lambda: simple_spread_v3.parallel_env(max_cycles=25), n_envs=2, n_hosts=1).as_vec_env()
    model = PPO("MlpPolicy", venv, n_steps=64, batch_size=64, n_epochs=1, policy_kwargs=dict(net_arch=[32]), seed=0)
    model.learn(2000)
    assert model.num_timesteps >= 2000 and len(model.ep_info_buffer) > 0
    venv.close()


def test_a3c_trains_on_simple_spread_with_parameter_sharing_and_saves(tmp_path):
    simple_spread_v3 = pytest.importorskip("mpe2.simple_spread_v3")
    from sb3_async import A3C

    def make():
        return simple_spread_v3.parallel_env(max_cycles=25)

    with AsyncEnvPool(make, n_envs=2, n_hosts=1) as pool:
        model = A3C("MlpPolicy", pool.as_vec_env(), n_workers=2, seed=0, policy_kwargs=dict(net_arch=[32]))
        assert model.n_envs_per_worker == 3 and model.n_envs == 6  # one env copy per worker, a slot per agent
        model.learn(3000)
        assert model.num_timesteps >= 3000 and len(model.ep_info_buffer) > 0
        assert model.ep_info_buffer[-1]["l"] == 25
    model.save(tmp_path / "a3c")
    obs = np.zeros((3, 18), dtype=np.float32)
    loaded = A3C.load(tmp_path / "a3c")
    np.testing.assert_allclose(loaded.predict(obs, deterministic=True)[0], model.predict(obs, deterministic=True)[0])
    loaded.learn(500, reset_num_timesteps=False)  # rebuilds the env from the saved recipe: the pool's factory
    assert loaded.num_timesteps >= 3500
    # Counts given to load() mean what they mean in the constructor: env copies per worker, a slot per agent
    resized = A3C.load(tmp_path / "a3c", n_workers=1, n_envs_per_worker=2)
    assert (resized.n_workers, resized.n_envs_per_worker, resized.n_envs) == (1, 6, 6)
    with AsyncEnvPool(make, n_envs=1, n_hosts=0) as pool:
        assert A3C.load(tmp_path / "a3c", env=pool.as_vec_env(), n_envs_per_worker=1).n_envs_per_worker == 3


def test_a3c_takes_a_pettingzoo_factory():
    simple_spread_v3 = pytest.importorskip("mpe2.simple_spread_v3")
    from sb3_async import A3C

    model = A3C("MlpPolicy", lambda: simple_spread_v3.parallel_env(max_cycles=25), n_workers=2, n_envs_per_worker=2, seed=0)
    assert model.n_envs_per_worker == 6 and model.observation_space.shape == (18,)
    model.learn(1000)
    assert model.num_timesteps >= 1000


def test_same_observations_and_rewards_as_supersuit():
    """SuperSuit's pettingzoo_env_to_vec_env_v1 on the same env, seed and actions: the same slots, observations and
    rewards; the pool also sets TimeLimit.truncated where the agents are cut by max_cycles."""
    simple_spread_v3 = pytest.importorskip("mpe2.simple_spread_v3")
    supersuit = pytest.importorskip("supersuit")
    reference = supersuit.pettingzoo_env_to_vec_env_v1(simple_spread_v3.parallel_env(max_cycles=25))
    expected_obs, _ = reference.reset(seed=3)
    with AsyncEnvPool(lambda: simple_spread_v3.parallel_env(max_cycles=25), n_hosts=1) as pool:
        venv = pool.as_vec_env()
        venv.seed(3)
        np.testing.assert_allclose(venv.reset(), expected_obs)
        rng = np.random.default_rng(0)
        for _ in range(25):
            actions = rng.integers(0, 5, size=3)
            expected_obs, expected_rewards, _, truncations, _ = reference.step(actions)
            obs, rewards, dones, infos = venv.step(actions)
            np.testing.assert_allclose(rewards, expected_rewards, rtol=1e-6)
            if dones.any():
                assert np.all(truncations) and all(info["TimeLimit.truncated"] for info in infos)
            else:
                np.testing.assert_allclose(obs, expected_obs)
        assert dones.all()
        venv.close()


def _simple_spread(continuous_actions=False):
    from mpe2 import simple_spread_v3

    return simple_spread_v3.parallel_env(max_cycles=25, continuous_actions=continuous_actions)


def _as_given(form, make):
    """The env as an algorithm takes it: the factory, an AsyncEnvPool of it (2 copies) or the pool's VecEnv view."""
    if form == "factory":
        return make, None
    pool = AsyncEnvPool(make, n_envs=2, n_hosts=1)
    return (pool if form == "pool" else pool.as_vec_env()), pool


_SMALL_Q = dict(n_workers=2, target_update_interval=500, policy_kwargs=dict(net_arch=[32]))
_SMALL_APEX = dict(n_actors=2, learning_starts=200, buffer_size=5000, batch_size=32, target_update_interval=200, block_size=25)


@pytest.mark.parametrize(
    "algo, form, continuous, kwargs",
    [
        ("AsyncOneStepQ", "factory", False, _SMALL_Q),
        ("AsyncSarsa", "pool", False, _SMALL_Q),
        ("AsyncNStepQ", "vec", False, _SMALL_Q),
        ("ApeXDQN", "vec", False, {**_SMALL_APEX, "policy_kwargs": dict(net_arch=[32])}),
        ("ApeXDPG", "pool", True, {**_SMALL_APEX, "policy_kwargs": dict(net_arch=dict(pi=[32], qf=[32]))}),
    ],
    ids=["AsyncOneStepQ-factory", "AsyncSarsa-pool", "AsyncNStepQ-vec_env", "ApeXDQN-vec_env", "ApeXDPG-pool"],
)
def test_async_q_and_apex_train_on_simple_spread_and_save(algo, form, continuous, kwargs, tmp_path, one_torch_thread):
    """Parameter sharing for every worker-stepped algorithm, given the factory, the pool or its VecEnv view: each
    worker (actor) steps one env copy, a slot per agent; the agents' episodes are logged; save/load round-trips."""
    pytest.importorskip("mpe2.simple_spread_v3")
    import sb3_async

    cls = getattr(sb3_async, algo)
    make = (lambda: _simple_spread(continuous_actions=True)) if continuous else _simple_spread
    env, pool = _as_given(form, make)
    try:
        model = cls("MlpPolicy", env, seed=0, **kwargs)
        assert model.n_envs == 2 * 3  # 2 workers x 1 env copy x 3 agents
        assert model.observation_space.shape == (18,)
        if continuous:
            assert model.action_space == spaces.Box(0.0, 1.0, (5,), np.float32)
        else:
            assert model.action_space == spaces.Discrete(5)
        model.learn(2000)
        assert model.num_timesteps >= 2000 and len(model.ep_info_buffer) >= 12  # 25-step episodes of 6 slots
        assert {info["l"] for info in model.ep_info_buffer} == {25}
        model.save(tmp_path / algo)
    finally:
        if pool is not None:
            pool.close()
    obs = np.random.default_rng(0).normal(size=(6, 18)).astype(np.float32)
    loaded = cls.load(tmp_path / algo)
    assert loaded.n_envs == 6
    np.testing.assert_allclose(loaded.predict(obs, deterministic=True)[0], model.predict(obs, deterministic=True)[0])
    if form != "factory":  # the saved recipe is the pool's factory: the loaded model trains on in new workers
        loaded.learn(300, reset_num_timesteps=False)
        assert loaded.num_timesteps >= 2300


def test_pettingzoo_env_ids():
    """A PettingZoo env by name: '<package>/<module>' (the module's parallel_env) or an id of PettingZoo's registry;
    the factory pickles by that name and its arguments."""
    pytest.importorskip("mpe2.simple_spread_v3")
    from sb3_async.env_pool.multi_agent import PettingZooEnv, pettingzoo_env_id

    assert pettingzoo_env_id("mpe2/simple_spread_v3") == "mpe2/simple_spread_v3"
    assert pettingzoo_env_id("mpe2/no_such_env_v0") is None and pettingzoo_env_id("CartPole-v1") is None
    factory = PettingZooEnv("mpe2/simple_spread_v3", {"max_cycles": 5, "continuous_actions": True})
    assert cloudpickle.loads(cloudpickle.dumps(factory)) == factory
    with AsyncEnvPool(factory, n_envs=2, n_hosts=1) as pool:
        assert pool.n_envs == 6 and pool.action_space(0) == spaces.Box(0.0, 1.0, (5,), np.float32)
    if hasattr(pettingzoo, "parallel_registry"):  # PettingZoo 1.27 and later
        assert pettingzoo_env_id("classic/rps-v2") == "classic/rps-v2"
        with AsyncEnvPool(PettingZooEnv("classic/rps-v2"), n_envs=2, n_hosts=0) as pool:
            assert pool.env_agents == ["player_0", "player_1"] and pool.n_envs == 4
    with pytest.raises(ValueError, match="Invalid env id 'mpe2/no_such_env_v0'"):
        PettingZooEnv("mpe2/no_such_env_v0")()


def test_vec_normalize_over_the_pool_reaches_the_workers(one_torch_thread):
    """A VecNormalize over the pool's VecEnv (what the zoo's `normalize` builds): the workers rebuild it over their
    own env copies and share its statistics."""
    pytest.importorskip("mpe2.simple_spread_v3")
    from stable_baselines3.common.vec_env import VecNormalize

    from sb3_async import A3C

    with AsyncEnvPool(_simple_spread, n_envs=1, n_hosts=0) as pool:
        venv = VecNormalize(pool.as_vec_env())
        model = A3C("MlpPolicy", venv, n_workers=2, seed=0, policy_kwargs=dict(net_arch=[32]))
        assert model._env_recipe.multi_agent and model._env_recipe.normalizes and model.n_envs == 6
        model.learn(600)
        assert model.get_vec_normalize_env().obs_rms.count > 600  # the workers' steps


def test_knights_archers_zombies_agents_killed_early_are_padded():
    """A real env whose agents die before the others (zombies kill knights and archers), vector observations: stepped
    side by side with the raw ParallelEnv on the same seed and actions, every live agent's slot has the env's
    observation and reward; a killed agent's slot ends terminated with its last observation, then observes zeros,
    earns 0 and is flagged dead until the copy's episode ends."""
    pytest.importorskip("pygame")
    from pettingzoo.butterfly import knights_archers_zombies_v11 as kaz

    kwargs = dict(obs_method="vector", max_cycles=400, spawn_delay=2, max_zombies=12)
    raw = kaz.parallel_env(**kwargs)
    expected, _ = raw.reset(seed=7)
    names = list(raw.possible_agents)
    rng = np.random.default_rng(0)
    with AsyncEnvPool(lambda: kaz.parallel_env(**kwargs), n_envs=1, n_hosts=1) as pool:
        venv = pool.as_vec_env()
        assert venv.num_envs == len(names) == 4
        venv.seed(7)
        obs = venv.reset()
        for k, name in enumerate(names):
            np.testing.assert_allclose(obs[k], expected[name], rtol=1e-6)
        dead: set[str] = set()
        padded = 0
        for _ in range(400):
            actions = rng.integers(0, 6, size=len(names))
            live = {name: int(actions[k]) for k, name in enumerate(names) if name in raw.agents}
            expected, rewards_raw, terminations, truncations, _ = raw.step(live)
            obs, rewards, dones, infos = venv.step(actions)
            if not raw.agents:  # the copy's episode ended: the pool starts the next one
                assert dones.all()
                break
            for k, name in enumerate(names):
                if name in dead:
                    padded += 1
                    assert infos[k]["dead"] is True and rewards[k] == 0 and not dones[k]
                    np.testing.assert_array_equal(obs[k], 0)
                elif terminations.get(name):  # killed at this step
                    dead.add(name)
                    assert dones[k] and infos[k]["TimeLimit.truncated"] is False
                    np.testing.assert_allclose(infos[k]["terminal_observation"], expected[name], rtol=1e-6)
                    assert rewards[k] == pytest.approx(rewards_raw[name])
                else:
                    np.testing.assert_allclose(obs[k], expected[name], rtol=1e-6)
                    assert rewards[k] == pytest.approx(rewards_raw[name]) and not dones[k]
        assert dead and padded, "no agent was killed before the others: the test did not see what it checks"
    raw.close()


def test_pistonball_image_observations_match_the_raw_env():
    """Butterfly's pistonball (image observations, continuous actions): the pool's slots give the raw ParallelEnv's
    observations and rewards for the same seed and actions up to the episode's end (the ball reaching the wall, or
    ``max_cycles``), where every piston's slot ends with the env's last observation."""
    pytest.importorskip("pymunk")
    from pettingzoo.butterfly import pistonball_v6

    kwargs = dict(n_pistons=4, max_cycles=40)
    raw = pistonball_v6.parallel_env(**kwargs)
    expected, _ = raw.reset(seed=1)
    names = list(raw.possible_agents)
    rng = np.random.default_rng(3)
    with AsyncEnvPool(lambda: pistonball_v6.parallel_env(**kwargs), n_envs=1, n_hosts=1) as pool:
        venv = pool.as_vec_env()
        assert venv.num_envs == 4 and venv.observation_space.shape == (457, 120, 3)
        venv.seed(1)
        obs = venv.reset()
        np.testing.assert_array_equal(obs, np.stack([expected[name] for name in names]))
        for _ in range(40):
            actions = rng.uniform(-1, 1, size=(4, 1)).astype(np.float32)
            expected, rewards_raw, terminations, truncations, _ = raw.step({name: actions[k] for k, name in enumerate(names)})
            obs, rewards, dones, infos = venv.step(actions)
            np.testing.assert_allclose(rewards, [rewards_raw[name] for name in names], rtol=1e-5)
            if raw.agents:
                np.testing.assert_array_equal(obs, np.stack([expected[name] for name in names]))
                assert not dones.any()
                continue
            assert dones.all()  # the episode ended for every piston at once: the copy starts again
            cut = [bool(truncations[name] and not terminations[name]) for name in names]
            assert [info["TimeLimit.truncated"] for info in infos] == cut
            for k, name in enumerate(names):
                np.testing.assert_array_equal(infos[k]["terminal_observation"], expected[name])
            break
        else:
            raise AssertionError("the episode did not end within max_cycles")
    raw.close()


class StrangerEnv(RaceEnv):
    """RaceEnv whose step 2 brings an agent that is not among its possible_agents."""

    def step(self, actions):
        result = super().step(actions)
        if self.t == 2:
            self.agents = [*self.agents, "stranger"]
            result[0]["stranger"] = np.zeros(2, np.float32)
        return result


def test_an_agent_outside_possible_agents_is_named():
    pool = AsyncEnvPool([StrangerEnv] * 1, n_hosts=0)
    try:
        pool.reset(seed=0)
        pool.step({i: 0 for i in pool.agents})
        with pytest.raises(Exception, match=r"returned agent 'stranger', not among its possible_agents"):
            pool.step({i: 0 for i in pool.agents})
    finally:
        pool.close()
