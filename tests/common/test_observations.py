"""What the algorithms refuse to learn from: observation spaces they cannot take, a CnnPolicy on vectors, and NaN or
infinite observations (the shared checks of sb3_async.common.observations, and each algorithm family using them)."""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from sb3_async.common.observations import (
    SB3_OBSERVATION_SPACES,
    check_finite_observations,
    check_finite_rewards,
    check_observation_space,
)
from sb3_async.runtime.processes import WorkerError
from tests.helpers import ALGORITHM_NAMES, NaNObservationEnv, small_model

NON_FINITE = r"Env {} returned a non-finite observation \(NaN or inf\)"


def test_finite_observations_pass():
    check_finite_observations(np.zeros((3, 2), np.float32))
    check_finite_observations({"x": np.ones((2, 2)), "n": np.array([[1], [2]])})
    check_finite_observations(np.full((2, 84, 84), 255, np.uint8))  # integers are not looked at
    check_finite_observations([], [])


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_a_non_finite_observation_names_its_env(value):
    batch = np.zeros((3, 2), np.float32)
    batch[1, 0] = value
    with pytest.raises(ValueError, match=NON_FINITE.format(5)):  # rows are envs 4, 5, 6
        check_finite_observations(batch, 4)
    with pytest.raises(ValueError, match=NON_FINITE.format(7)):
        check_finite_observations(list(batch), [2, 7, 9])
    with pytest.raises(ValueError, match=r"non-finite observation \(key 'x'\)"):
        check_finite_observations({"x": batch, "n": np.zeros((3, 1), np.int64)})


def test_observation_space_check():
    check_observation_space("A3C", spaces.Dict({"x": spaces.Box(-1, 1, (2,))}), SB3_OBSERVATION_SPACES)
    tuple_space = spaces.Tuple((spaces.Box(-1, 1, (2,)), spaces.Discrete(3)))
    with pytest.raises(ValueError, match=r"A3C supports Box, .* observation spaces, got Tuple\(.*FlattenObservation"):
        check_observation_space("A3C", tuple_space, SB3_OBSERVATION_SPACES)
    with pytest.raises(ValueError, match=r"its subspace Tuple"):
        check_observation_space("A3C", spaces.Dict({"t": tuple_space}), SB3_OBSERVATION_SPACES)


class TupleObservationEnv(gym.Env):
    observation_space = spaces.Tuple((spaces.Box(-1, 1, (2,)), spaces.Discrete(3)))

    def __init__(self, continuous: bool):
        self.action_space = spaces.Box(-1, 1, (1,)) if continuous else spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        return (np.zeros(2, np.float32), 0), {}

    def step(self, action):
        return (np.zeros(2, np.float32), 0), 0.0, False, False, {}


@pytest.mark.parametrize("name", ALGORITHM_NAMES)
def test_tuple_observation_space_is_refused_at_construction(name):
    env = TupleObservationEnv(continuous=name in ("ApeXDPG", "AEDDPG"))
    with pytest.raises(ValueError, match=rf"Invalid env: {name} supports .* observation spaces, got Tuple\("):
        small_model(name, (lambda: env) if name == "AEDDPG" else env)


@pytest.mark.parametrize("name", ["A3C", "AsyncOneStepQ", "AsyncNStepQ"])
def test_cnn_policy_on_vectors_is_refused_at_construction(name):
    with pytest.raises(ValueError, match=r"Invalid policy='CnnPolicy' for the observation space Box\(.*\(4,\).*MlpPolicy"):
        small_model(name, "CartPole-v1", policy="CnnPolicy", policy_kwargs=None)


def test_cnn_lstm_policy_on_vectors_is_refused_at_construction():
    with pytest.raises(ValueError, match=r"Invalid policy='CnnLstmPolicy' for the observation space Box"):
        small_model("A3C", "CartPole-v1", policy="CnnLstmPolicy", policy_kwargs=None)


@pytest.mark.parametrize("nan_at", [0, 5], ids=["reset", "step"])
@pytest.mark.parametrize("name", ["A3C", "AsyncNStepQ", "ApeXDQN"])
def test_worker_stops_at_a_nan_observation(name, nan_at):
    model = small_model(name, NaNObservationEnv(nan_at=nan_at))  # Ape-X does not restart an actor that raised
    with pytest.raises(WorkerError, match=NON_FINITE.format(r"[01]") + r": array\(\[nan, nan, nan, nan\]"):
        model.learn(5_000)


@pytest.mark.parametrize("nan_at", [0, 5], ids=["reset", "step"])
def test_ae_ddpg_stops_at_a_nan_observation(nan_at):
    model = small_model("AEDDPG", lambda: NaNObservationEnv(gym.make("Pendulum-v1"), nan_at=nan_at))
    with pytest.raises(ValueError, match=NON_FINITE.format(r"[01]") + r": array\(\[nan, nan, nan\]"):
        model.learn(500)
    assert model.env is None  # the pool was closed


class NaNRewardEnv(gym.Wrapper):
    """An env whose reward is ``value`` at its ``at``-th step (counted over episodes)."""

    def __init__(self, env: gym.Env | None = None, at: int = 5, value: float = float("nan")):
        super().__init__(gym.make("CartPole-v1") if env is None else env)
        self.at, self.value, self.count = at, value, 0

    def step(self, action):
        self.count += 1
        obs, reward, *rest = self.env.step(action)
        return obs, (self.value if self.count == self.at else reward), *rest


NON_FINITE_REWARD = r"Env {} returned a non-finite reward \(NaN or inf\) at global step \d+: {}"


def test_a_non_finite_reward_names_its_env_and_step():
    check_finite_rewards(np.zeros(3, np.float32), 4)
    with pytest.raises(ValueError, match=NON_FINITE_REWARD.format(5, "nan")):
        check_finite_rewards(np.array([0.0, np.nan, 1.0]), 4, step=lambda: 120)
    with pytest.raises(ValueError, match=r"Env 9 returned a non-finite reward \(NaN or inf\): -inf"):
        check_finite_rewards([1.0, 2.0, -np.inf], [2, 7, 9])


@pytest.mark.parametrize("name", ["A3C", "AsyncNStepQ", "ApeXDQN"])
def test_worker_stops_at_a_nan_reward_before_learning_from_it(name):
    model = small_model(name, NaNRewardEnv(at=50), backend="serial")  # the worker's check: the same in a thread
    with pytest.raises(WorkerError, match=NON_FINITE_REWARD.format(r"[01]", "nan")):
        model.learn(5_000)
    parameters = np.concatenate([p.detach().numpy().ravel() for p in model.policy.parameters()])
    assert np.isfinite(parameters).all()


def test_ae_ddpg_stops_at_an_infinite_reward_before_storing_it():
    model = small_model("AEDDPG", lambda: NaNRewardEnv(gym.make("Pendulum-v1"), at=50, value=float("inf")))
    with pytest.raises(ValueError, match=NON_FINITE_REWARD.format(r"\d+", "inf")):
        model.learn(2_000)
    assert model.env is None  # the pool was closed
    assert np.isfinite(model.replay_buffer.rewards).all()
