"""Loading files from others: replays through a restricted unpickler, models with ``trusted=False`` (no entry of
``data`` unpickled), the constructor's checks on a model's saved arguments, and the integrity digests of a zip's
parts."""

from __future__ import annotations

import base64
import io
import json
import pickle
import zipfile
from pathlib import Path

import cloudpickle
import gymnasium as gym
import numpy as np
import pytest
import torch
from stable_baselines3.common.save_util import load_from_zip_file

from sb3_async import A3C, AEDDPG, ApeXDPG, ApeXDQN, AsyncNStepQ
from sb3_async.common.safe_loading import DIGESTS_ENTRY, add_digests
from tests.algorithms.test_saved_models import DATA, SAVED

OBS = np.linspace(-0.2, 0.2, 4 * 8, dtype=np.float32).reshape(8, 4)


class _Payload:
    """An object whose unpickling creates ``marker``: what a crafted file could run instead."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def _replay_model(model_class):
    if model_class is AEDDPG:
        return AEDDPG("MlpPolicy", "Pendulum-v1", n_envs=1, buffer_size=1000, seed=0)
    env = "Pendulum-v1" if model_class is ApeXDPG else "CartPole-v1"
    model = model_class("MlpPolicy", env, n_actors=1, buffer_size=1000, seed=0)
    model._setup_replay()
    return model


def _fill(model) -> None:
    buffer = model.replay_buffer
    buffer.observation_space.seed(0)  # a generator in the pickle, as a buffer that sampled its spaces holds
    for step in range(20):
        obs = np.array([buffer.observation_space.sample()])
        action = np.array([buffer.action_space.sample()])
        buffer.add(obs, obs, action, np.array([1.0]), np.array([step % 7 == 6]), [{}])


def _close(model) -> None:
    env = model.get_env()
    if env is not None:
        env.close()


# --- replays ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("model_class", [ApeXDQN, ApeXDPG, AEDDPG])
def test_a_replay_holding_more_than_a_buffer_is_refused_before_it_runs(model_class, tmp_path):
    """The first class of the pickle is the buffer's, so a check of that class alone passes; the unpickler refuses
    the name after it before calling it."""
    marker, path = tmp_path / "ran", tmp_path / "replay.pkl"
    model = _replay_model(model_class)
    try:
        _fill(model)
        path.write_bytes(pickle.dumps((model.replay_buffer, _Payload(marker)), protocol=pickle.HIGHEST_PROTOCOL))
        with pytest.raises(ValueError, match=r"replay\.pkl.*names io\.open, which is not part of a replay buffer"):
            model.load_replay_buffer(path)
        assert not marker.exists()
    finally:
        _close(model)


@pytest.mark.parametrize("model_class", [ApeXDQN, ApeXDPG, AEDDPG])
def test_a_saved_replay_still_round_trips(model_class, tmp_path):
    model = _replay_model(model_class)
    try:
        _fill(model)
        saved = model.replay_buffer
        model.save_replay_buffer(tmp_path / "replay")
        model.replay_buffer = None
        model.load_replay_buffer(tmp_path / "replay")
        loaded = model.replay_buffer
        assert type(loaded) is type(saved) and loaded.size() == saved.size() == 20
        np.testing.assert_array_equal(loaded.observations, saved.observations)
        np.testing.assert_array_equal(loaded.actions, saved.actions)
        if hasattr(saved, "tree"):
            assert loaded.tree.total == saved.tree.total > 0
    finally:
        _close(model)


# --- model zips: helpers -----------------------------------------------------------------------------------------------


def _rewrite(path: Path, change_data=None, change_entry=None, digests: str = "recompute") -> None:
    """Rewrite the model zip ``path`` as a file someone changed: ``change_data(data)`` edits its data (as JSON),
    ``change_entry(name, bytes)`` its other parts; the digests recomputed (they prove integrity, not authorship),
    kept as saved, or left out."""
    with zipfile.ZipFile(path) as archive:
        entries = {name: archive.read(name) for name in archive.namelist()}
    kept = entries.pop(DIGESTS_ENTRY, None)
    if change_data is not None:
        data = json.loads(entries["data"])
        change_data(data)
        entries["data"] = json.dumps(data).encode()
    if change_entry is not None:
        entries = {name: change_entry(name, content) for name, content in entries.items()}
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, content in entries.items():
            archive.writestr(name, content)
        if digests == "keep" and kept is not None:
            archive.writestr(DIGESTS_ENTRY, kept)
    if digests == "recompute":
        add_digests(buffer)
    path.write_bytes(buffer.getvalue())


def _serialized(value) -> dict[str, str]:
    """``value`` as SB3 writes an entry it cannot write as JSON."""
    return {":type:": str(type(value)), ":serialized:": base64.b64encode(cloudpickle.dumps(value)).decode()}


# --- load(..., trusted=False) --------------------------------------------------------------------------------------------


def test_safe_load_runs_nothing_a_model_file_holds_and_the_model_predicts(tmp_path):
    marker, path = tmp_path / "ran", tmp_path / "model.zip"
    model = A3C("MlpPolicy", "CartPole-v1", n_workers=1, seed=0)
    model.save(path)
    expected, _ = model.predict(OBS, deterministic=True)

    def plant(data):
        data["lr_schedule"] = _serialized(_Payload(marker))
        data["evil"] = _serialized(_Payload(marker))

    _rewrite(path, plant)
    with pytest.warns(UserWarning, match=r"trusted=False.*left out the pickled entries .*evil"):
        safe = A3C.load(path, trusted=False)
    assert not marker.exists()
    actions, _ = safe.predict(OBS, deterministic=True)
    np.testing.assert_array_equal(actions, expected)
    assert safe.lr_schedule(1.0) == model.lr_schedule(1.0)  # rebuilt from the saved learning_rate
    assert (safe.observation_space, safe.action_space) == (model.observation_space, model.action_space)
    assert safe.gradient_sharing.max_grad_norm == model.gradient_sharing.max_grad_norm  # from its plain fields

    A3C.load(path)  # trusted (the default): SB3's behaviour, the file's objects unpickled
    assert marker.exists()


def test_safe_load_takes_the_spaces_of_the_env_given_when_the_file_does_not_describe_them(tmp_path):
    marker, path = tmp_path / "ran", tmp_path / "model.zip"
    A3C("MlpPolicy", "CartPole-v1", n_workers=1, seed=0).save(path)

    def plant(data):
        del data["_plain_description"]
        data["observation_space"] = _serialized(_Payload(marker))

    _rewrite(path, plant)
    with pytest.raises(ValueError, match=r"its observation_space cannot be rebuilt without unpickling; pass the env"):
        A3C.load(path, trusted=False)
    env = gym.make("CartPole-v1")
    safe = A3C.load(path, env=env, trusted=False)
    assert not marker.exists()
    assert safe.observation_space == env.observation_space
    assert safe.predict(OBS[0], deterministic=True)[0] in (0, 1)
    safe.get_env().close()


@pytest.mark.parametrize(
    ("model_class", "env", "kwargs"),
    [
        (AsyncNStepQ, "CartPole-v1", {"n_workers": 1, "learning_rate": 0.0}),
        (ApeXDQN, "CartPole-v1", {"n_actors": 1}),
        (ApeXDPG, "Pendulum-v1", {"n_actors": 1, "policy_kwargs": {"net_arch": [8], "activation_fn": torch.nn.Tanh}}),
        (AEDDPG, "Pendulum-v1", {"n_envs": 1, "buffer_size": 200}),
    ],
)
def test_safe_load_rebuilds_what_each_algorithm_saves(model_class, env, kwargs, tmp_path):
    model = model_class("MlpPolicy", env, seed=0, **kwargs)
    try:
        model.save(tmp_path / "model.zip")
        obs = OBS[:, :3] if env == "Pendulum-v1" else OBS
        expected, _ = model.predict(obs, deterministic=True)
    finally:
        _close(model)
    safe = model_class.load(tmp_path / "model.zip", trusted=False)
    actions, _ = safe.predict(obs, deterministic=True)
    np.testing.assert_allclose(actions, expected, rtol=1e-6)
    assert safe.policy_class is model.policy_class
    assert safe.observation_space == model.observation_space and safe.action_space == model.action_space
    assert safe.policy_kwargs == model.policy_kwargs  # classes (optimizer_class, activation_fn) found by name
    if model_class is AEDDPG:
        assert safe.train_freq == model.train_freq and safe.replay_buffer_class is model.replay_buffer_class
    else:  # trained on an env id: learn() needs no env
        assert safe._env_recipe.env_id == env


@pytest.mark.parametrize("name", sorted(SAVED))
def test_safe_load_of_a_file_saved_by_an_earlier_release(name):
    """Files without the plain description: the policy class and the spaces from what SB3 wrote beside them."""
    recorded = np.load(DATA / "0.2.0" / f"{name}.npz")
    model = SAVED[name].load(DATA / "0.2.0" / f"{name}.zip", device="cpu", trusted=False)
    actions, _ = model.predict(recorded["obs"], deterministic=True)
    np.testing.assert_allclose(actions, recorded["actions"], rtol=1e-5, atol=1e-6)


def test_trusted_takes_a_bool(tmp_path):
    A3C("MlpPolicy", "CartPole-v1", n_workers=1).save(tmp_path / "model.zip")
    with pytest.raises(TypeError, match="Invalid trusted='no'"):
        A3C.load(tmp_path / "model.zip", trusted="no")


# --- the constructor's checks on the saved arguments -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value", "error", "match"),
    [
        ("n_workers", -3, ValueError, r"Invalid n_workers=-3: expected an integer >= 1"),
        ("n_steps", "abc", TypeError, r"Invalid n_steps='abc'"),
    ],
)
def test_load_checks_the_saved_arguments_as_the_constructor(name, value, error, match, tmp_path):
    path = tmp_path / "model.zip"
    A3C("MlpPolicy", "CartPole-v1", n_workers=1).save(path)
    _rewrite(path, lambda data: data.update({name: value}))
    with pytest.raises(error, match=match) as raised:
        A3C.load(path)
    assert "model.zip" in str(raised.value)
    with pytest.raises(error, match=match):  # the constructor's own message
        A3C("MlpPolicy", "CartPole-v1", **{name: value})


def test_ape_x_saved_worker_count_is_checked_under_its_constructor_name(tmp_path):
    path = tmp_path / "model.zip"
    ApeXDQN("MlpPolicy", "CartPole-v1", n_actors=1).save(path)
    _rewrite(path, lambda data: data.update(n_workers=0))
    with pytest.raises(ValueError, match=r"Invalid n_actors=0"):
        ApeXDQN.load(path)


# --- integrity digests ---------------------------------------------------------------------------------------------------


def _flip_policy(name: str, content: bytes) -> bytes:
    if name != "policy.pth":
        return content
    middle = len(content) // 2
    return content[:middle] + bytes(byte ^ 0xFF for byte in content[middle : middle + 64]) + content[middle + 64 :]


def test_a_changed_part_fails_load_naming_it(tmp_path):
    path = tmp_path / "model.zip"
    A3C("MlpPolicy", "CartPole-v1", n_workers=1).save(path)
    _rewrite(path, change_entry=_flip_policy, digests="keep")  # the zip's own checksums are right again
    with pytest.raises(ValueError, match=r"model\.zip.*part 'policy\.pth' does not match the SHA-256 digest"):
        A3C.load(path)
    with pytest.raises(ValueError, match=r"part 'policy\.pth' does not match"):
        A3C.load(path, trusted=False)


def test_digests_are_saved_for_every_part_and_sb3_still_reads_the_zip(tmp_path):
    path = tmp_path / "model.zip"
    model = ApeXDQN("MlpPolicy", "CartPole-v1", n_actors=1, seed=0)
    model.save(path)
    with zipfile.ZipFile(path) as archive:
        digests = json.loads(archive.read(DIGESTS_ENTRY))["sha256"]
        assert sorted(digests) == sorted(set(archive.namelist()) - {DIGESTS_ENTRY})
        assert {"data", "policy.pth", "policy.optimizer.pth"} <= set(digests)
    data, params, _ = load_from_zip_file(path, device="cpu")  # SB3's own reader ignores the extra entry
    assert data is not None and set(params) == {"policy", "policy.optimizer"}
    model.set_parameters(str(path), exact_match=True)


def test_a_file_without_digests_loads_and_a_removed_part_is_named(tmp_path):
    path = tmp_path / "model.zip"
    A3C("MlpPolicy", "CartPole-v1", n_workers=1).save(path)
    _rewrite(path, digests="none")
    A3C.load(path)  # as files saved before digests
    A3C("MlpPolicy", "CartPole-v1", n_workers=1).save(path)
    with zipfile.ZipFile(path) as archive:
        kept = {name: archive.read(name) for name in archive.namelist() if name != "system_info.txt"}
    with zipfile.ZipFile(path, "w") as archive:
        for name, content in kept.items():
            archive.writestr(name, content)
    with pytest.raises(ValueError, match=r"part 'system_info\.txt' is missing"):
        A3C.load(path)
