"""Bad input gets a clear error naming the argument, and a run that cannot learn says so."""

import functools
import warnings

import gymnasium as gym
import numpy as np
import pytest

from sb3_async import A3C, AEDDPG, ApeXDQN, AsyncEnvPool, AsyncNStepQ


@pytest.mark.parametrize("seed,error", [("abc", TypeError), (1.5, TypeError), (-1, ValueError), (2**32, ValueError)])
def test_a_bad_seed_is_named(seed, error):
    with pytest.raises(error, match=r"Invalid seed="):
        A3C("MlpPolicy", "CartPole-v1", n_workers=1, seed=seed)
    with pytest.raises(error, match=r"Invalid seed="):
        AEDDPG("MlpPolicy", "Pendulum-v1", n_envs=1, pool_kwargs=dict(n_hosts=0), seed=seed)


def test_apex_names_its_worker_arguments():
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'n_workers': Ape-X calls it 'n_actors'"):
        ApeXDQN("MlpPolicy", "CartPole-v1", n_workers=2)
    with pytest.raises(TypeError, match=r"'n_envs_per_worker': Ape-X calls it 'n_envs_per_actor'"):
        ApeXDQN("MlpPolicy", "CartPole-v1", n_envs_per_worker=2)
    model = ApeXDQN("MlpPolicy", "CartPole-v1", n_actors=1, n_envs_per_actor=3)
    assert (model.n_actors, model.n_envs_per_actor) == (1, 3)


def test_a_million_envs_per_worker_is_refused_at_construction():
    """Building them would take minutes and gigabytes before any step; the error names the argument, also on load."""
    with pytest.raises(ValueError, match=r"Invalid n_envs_per_worker=1000000: expected an integer in \[1, 4096\]"):
        A3C("MlpPolicy", "CartPole-v1", n_workers=1, n_envs_per_worker=10**6)
    with pytest.raises(ValueError, match=r"Invalid n_envs_per_actor=1000000: .*use more workers"):
        ApeXDQN("MlpPolicy", "CartPole-v1", n_actors=1, n_envs_per_actor=10**6)
    assert A3C("MlpPolicy", "CartPole-v1", n_workers=1, n_envs_per_worker=4096).n_envs_per_worker == 4096


def test_a_refused_action_space_names_the_algorithms_that_take_it():
    with pytest.raises(ValueError, match=r"got Box\(.*\(for Box actions: A3C, ApeXDPG or AEDDPG\)"):
        AsyncNStepQ("MlpPolicy", "Pendulum-v1", n_workers=1)


def test_min_ready_above_the_envs_is_refused():
    with pytest.raises(ValueError, match=r"Invalid min_ready=3: at most the 2 envs"):
        AEDDPG("MlpPolicy", "Pendulum-v1", n_envs=2, min_ready=3, pool_kwargs=dict(n_hosts=0))


@pytest.mark.parametrize("timeout,error", [(-1, ValueError), ("1", TypeError), (float("nan"), ValueError)])
def test_a_bad_recv_timeout_is_named(timeout, error):
    pool = AsyncEnvPool([functools.partial(gym.make, "CartPole-v1")] * 2, n_hosts=0)
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


class WrongShapeEnv(gym.Env):
    observation_space = gym.spaces.Box(-1, 1, (4,))
    action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        return self.observation_space.sample(), {}

    def step(self, action):
        return np.zeros(5, np.float32), 0.0, False, False, {}


@pytest.mark.parametrize("n_hosts", [0, 1])
def test_an_observation_outside_its_space_is_named(n_hosts):
    pool = AsyncEnvPool([WrongShapeEnv] * 2, n_hosts=n_hosts)
    try:
        pool.reset(seed=0)
        with pytest.raises(Exception, match=r"(?s)Env 0's value does not fit the space Box\(.*\(4,\).*got shape \(5,\)"):
            pool.step({0: 0, 1: 0})
    finally:
        pool.close()


def _damaged_copies(path, tmp_path):
    """The model zip at ``path`` without its ``policy.pth``, and with bytes of ``policy.pth``'s data flipped."""
    import zipfile

    missing = tmp_path / "missing.zip"
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(missing, "w") as target:
        for info in source.infolist():
            if info.filename != "policy.pth":
                target.writestr(info, source.read(info.filename))
    raw = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as source:
        info = source.getinfo("policy.pth")
    name_and_extra = int.from_bytes(raw[info.header_offset + 26 : info.header_offset + 28], "little") + int.from_bytes(
        raw[info.header_offset + 28 : info.header_offset + 30], "little"
    )
    start = info.header_offset + 30 + name_and_extra + info.compress_size // 2
    raw[start : start + 16] = bytes(255 - b for b in raw[start : start + 16])
    corrupt = tmp_path / "corrupt.zip"
    corrupt.write_bytes(bytes(raw))
    return missing, corrupt


def test_a_damaged_model_file_is_named(tmp_path):
    path = tmp_path / "model.zip"
    A3C("MlpPolicy", "CartPole-v1", n_workers=1).save(path)
    missing, corrupt = _damaged_copies(path, tmp_path)
    with pytest.raises(ValueError, match=r"missing\.zip.*no 'policy\.pth' entry"):
        A3C.load(missing)
    with pytest.raises(ValueError, match=r"corrupt\.zip.*(entry 'policy\.pth' is corrupt|not a complete model zip)"):
        A3C.load(corrupt)
    A3C.load(path)


def test_a_replay_that_cannot_fit_is_refused_at_construction():
    with pytest.raises(ValueError, match=r"Invalid buffer_size=1000000000000: its replay would need at least [\d,.]+ GiB"):
        ApeXDQN("MlpPolicy", "CartPole-v1", n_actors=1, buffer_size=10**12)


class CloseFails(gym.Wrapper):
    """CartPole whose close() raises: a clean-up error that must not hide the cause of a failed start."""

    def __init__(self) -> None:
        super().__init__(gym.make("CartPole-v1"))

    def close(self):
        super().close()
        raise RuntimeError("close failed")


@pytest.mark.parametrize("n_hosts", [0, 1])
def test_a_factory_that_returns_no_env_is_named_with_what_it_returned(n_hosts):
    """The error names the factory and what it returned (type and repr), not an AttributeError of the clean-up."""
    expected = r"The env factory of env \d \(<function .*<lambda>.*\) returned NoneType None, not an env"
    with pytest.raises(Exception, match=expected):
        AsyncEnvPool(lambda: None, n_envs=2, n_hosts=n_hosts)
    with pytest.raises(TypeError, match=r"returned str 'CartPole-v1', not an env"):
        AsyncEnvPool([CloseFails, lambda: "CartPole-v1"], n_hosts=0)  # the first env's failing close() hides nothing


def test_a_failing_close_does_not_hide_why_the_pool_could_not_start():
    from sb3_async.env_pool.errors import SpacesDifferError

    with pytest.raises(SpacesDifferError) as info:
        AsyncEnvPool([CloseFails, functools.partial(gym.make, "Pendulum-v1")], n_hosts=0)
    if hasattr(info.value, "add_note"):  # Python 3.11 and later: the clean-up's failure is noted on the cause
        assert "Closing the pool after this error also failed: RuntimeError('close failed')" in info.value.__notes__
