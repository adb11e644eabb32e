"""Bad input gets a clear error naming the argument, and a run that cannot learn says so."""

import functools
import warnings

import gymnasium as gym
import pytest

from sb3_async import A3C, AEDDPG, ApeXDQN, AsyncEnvPool, AsyncNStepQ


@pytest.mark.parametrize("seed,error", [("abc", TypeError), (1.5, TypeError), (-1, ValueError), (2**32, ValueError)])
def test_a_bad_seed_is_named(seed, error):
    with pytest.raises(error, match=r"Invalid seed="):
        A3C("MlpPolicy", "CartPole-v1", n_workers=1, seed=seed)
    with pytest.raises(error, match=r"Invalid seed="):
        AEDDPG("MlpPolicy", "Pendulum-v1", n_envs=1, pool_kwargs=dict(n_workers=0), seed=seed)


def test_apex_names_its_worker_arguments():
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'n_workers': Ape-X calls it 'n_actors'"):
        ApeXDQN("MlpPolicy", "CartPole-v1", n_workers=2)
    with pytest.raises(TypeError, match=r"'n_envs_per_worker': Ape-X calls it 'n_envs_per_actor'"):
        ApeXDQN("MlpPolicy", "CartPole-v1", n_envs_per_worker=2)
    model = ApeXDQN("MlpPolicy", "CartPole-v1", n_actors=1, n_envs_per_actor=3)
    assert (model.n_actors, model.n_envs_per_actor) == (1, 3)


def test_a_refused_action_space_names_the_algorithms_that_take_it():
    with pytest.raises(ValueError, match=r"got Box\(.*\(for Box actions: A3C, ApeXDPG or AEDDPG\)"):
        AsyncNStepQ("MlpPolicy", "Pendulum-v1", n_workers=1)


def test_min_ready_above_the_envs_is_refused():
    with pytest.raises(ValueError, match=r"Invalid min_ready=3: at most the 2 envs"):
        AEDDPG("MlpPolicy", "Pendulum-v1", n_envs=2, min_ready=3, pool_kwargs=dict(n_workers=0))


@pytest.mark.parametrize("timeout,error", [(-1, ValueError), ("1", TypeError), (float("nan"), ValueError)])
def test_a_bad_recv_timeout_is_named(timeout, error):
    pool = AsyncEnvPool([functools.partial(gym.make, "CartPole-v1")] * 2, n_workers=0)
    try:
        pool.reset(seed=0)
        pool.send({0: 0, 1: 0})
        with pytest.raises(error, match=r"Invalid timeout="):
            pool.recv(timeout=timeout)
        assert len(pool.recv()[0]) >= 1  # the steps in flight are still there
    finally:
        pool.close()


def test_apex_warns_when_learn_ends_before_learning_starts():
    model = ApeXDQN("MlpPolicy", "CartPole-v1", n_actors=1, learning_starts=5_000)
    with pytest.warns(UserWarning, match=r"ends after 300 env steps, before the replay holds learning_starts=5000"):
        model.learn(300)
    assert model._n_updates == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ApeXDQN("MlpPolicy", "CartPole-v1", n_actors=1, learning_starts=100).learn(300)
