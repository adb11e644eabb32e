"""save/load round trips: identical actions in a fresh process, optimizer state, continued training."""

import os
import subprocess
import sys
import textwrap

import gymnasium as gym
import numpy as np
import pytest
import torch
from stable_baselines3 import A2C, DQN, TD3
from stable_baselines3.common.callbacks import CheckpointCallback

import sb3_async
from sb3_async import A3C, AsyncNStepQ, AsyncOneStepQ, AsyncSarsa

MODEL_LIST = [A3C, AsyncOneStepQ, AsyncSarsa, AsyncNStepQ]


@pytest.mark.parametrize("model_class", MODEL_LIST)
def test_round_trip_in_fresh_process(model_class, tmp_path):
    model = model_class("MlpPolicy", "CartPole-v1", n_workers=2, n_envs_per_worker=2, seed=0).learn(2000)
    path = tmp_path / "model.zip"
    model.save(path)
    observations = np.stack([gym.make("CartPole-v1").observation_space.sample() for _ in range(20)])
    np.save(tmp_path / "obs.npy", observations)
    expected, _ = model.predict(observations, deterministic=True)
    script = textwrap.dedent(
        f"""
        import numpy as np
        from sb3_async import {model_class.__name__} as Model
        model = Model.load({str(path)!r})
        actions, _ = model.predict(np.load({str(tmp_path / "obs.npy")!r}), deterministic=True)
        np.save({str(tmp_path / "actions.npy")!r}, actions)
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    np.testing.assert_array_equal(np.load(tmp_path / "actions.npy"), expected)


def test_parameters_and_optimizer_state_round_trip(tmp_path):
    model = A3C("MlpPolicy", "CartPole-v1", n_workers=2, seed=0).learn(1000)
    model.save(tmp_path / "m")
    loaded = A3C.load(tmp_path / "m")
    for p, q in zip(model.policy.parameters(), loaded.policy.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0)
    for s, t in zip(model.policy.optimizer.state_tensors(), loaded.policy.optimizer.state_tensors()):
        torch.testing.assert_close(s, t, rtol=0, atol=0)
    assert loaded.policy.optimizer.state_tensors()[0].abs().sum() > 0  # statistics were trained, not fresh
    assert (loaded.n_workers, loaded.n_envs_per_worker, loaded.n_steps) == (2, 1, 5)


def test_learn_after_load_continues(tmp_path):
    model = A3C("MlpPolicy", "CartPole-v1", n_workers=2, seed=0).learn(1000)
    model.save(tmp_path / "m")
    loaded = A3C.load(tmp_path / "m")  # no env given: rebuilt from the saved recipe
    before = [p.clone() for p in loaded.policy.parameters()]
    loaded.learn(1000, reset_num_timesteps=False)
    assert loaded.num_timesteps >= model.num_timesteps + 1000
    assert any(not torch.equal(a, b) for a, b in zip(before, loaded.policy.parameters()))
    with_env = A3C.load(tmp_path / "m", env=gym.make("CartPole-v1"))
    with_env.learn(500)
    assert with_env.n_envs == 2


def test_checkpoint_while_workers_train(tmp_path):
    model = A3C("MlpPolicy", "CartPole-v1", n_workers=2, n_envs_per_worker=2, seed=0)
    model.learn(10_000, callback=CheckpointCallback(save_freq=100, save_path=str(tmp_path), name_prefix="a3c"))
    saved = sorted(os.listdir(tmp_path))
    assert len(saved) >= 20, saved
    for name in saved:  # every checkpoint written while workers update the parameters must load
        loaded = A3C.load(tmp_path / name)
        assert loaded.predict(np.zeros(4, dtype=np.float32))[0] in (0, 1)


def test_load_of_a_file_that_is_not_a_model(tmp_path):
    bad = tmp_path / "notes.zip"
    bad.write_text("not a model")
    with pytest.raises(ValueError, match="zip"):
        A3C.load(bad)


@pytest.mark.parametrize(
    "ours, theirs",
    [("A3C", lambda: A2C("MlpPolicy", "CartPole-v1")), ("ApeXDQN", lambda: DQN("MlpPolicy", "CartPole-v1", buffer_size=100))]
    + [("AEDDPG", lambda: TD3("MlpPolicy", "Pendulum-v1", buffer_size=100))],
)
def test_load_of_another_algorithms_file_names_the_file(ours, theirs, tmp_path):
    theirs().save(tmp_path / "other.zip")
    with pytest.raises(ValueError, match=rf"other\.zip.*not saved by {ours}"):
        getattr(sb3_async, ours).load(tmp_path / "other.zip")


def test_load_of_our_own_other_algorithm_and_of_a_truncated_file(tmp_path):
    A3C("MlpPolicy", "CartPole-v1", n_workers=1).save(tmp_path / "a3c.zip")
    with pytest.raises(ValueError, match=r"a3c\.zip.*saved by A3C, not AsyncNStepQ"):
        AsyncNStepQ.load(tmp_path / "a3c")  # SB3's missing .zip suffix too
    data = (tmp_path / "a3c.zip").read_bytes()
    (tmp_path / "cut.zip").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"cut\.zip.*not a complete model zip"):
        A3C.load(tmp_path / "cut.zip")
    assert A3C.load(tmp_path / "a3c.zip").n_workers == 1


def test_worker_counts_given_to_load_are_the_constructors(tmp_path):
    """``load(path, n_workers=...)`` as SB3's ``load(path, n_envs=...)``: under the constructor's names (Ape-X's
    ``n_actors``, which is read-only on the model), checked as the constructor checks them."""
    A3C("MlpPolicy", "CartPole-v1", n_workers=1).save(tmp_path / "a3c.zip")
    loaded = A3C.load(tmp_path / "a3c.zip", n_workers=2, n_envs_per_worker=3)
    assert (loaded.n_workers, loaded.n_envs_per_worker, loaded.n_envs) == (2, 3, 6)
    with_env = A3C.load(tmp_path / "a3c.zip", env=gym.make("CartPole-v1"), n_workers=2, n_envs_per_worker=3)
    assert with_env.get_env().num_envs == 6
    with pytest.raises(ValueError, match="n_workers"):
        A3C.load(tmp_path / "a3c.zip", n_workers=0)
    sb3_async.ApeXDQN("MlpPolicy", "CartPole-v1", n_actors=1, buffer_size=1000, batch_size=32).save(tmp_path / "apex.zip")
    apex = sb3_async.ApeXDQN.load(tmp_path / "apex.zip", n_actors=2, n_envs_per_actor=2)
    assert (apex.n_actors, apex.n_envs_per_worker, apex.n_envs) == (2, 2, 4)
    with pytest.raises(ValueError, match="n_envs_per_actor"):
        sb3_async.ApeXDQN.load(tmp_path / "apex.zip", n_envs_per_actor=-1)
