"""save() and save_replay_buffer() replace the previous file only once the new one is complete: a process killed
mid-save (SIGKILL at a chosen moment, made reliable by a hook that parks the writer there) leaves the previous file."""

from __future__ import annotations

import io
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from sb3_async import A3C, AEDDPG, ApeXDQN, AsyncNStepQ
from sb3_async.common.save_util import atomic_write

# The child saves once (the previous file), then saves again with a hook that parks it at one moment of the write:
# "mid-write" (part of the bytes written) or "before-replace" (all written and flushed, not yet renamed).
CHILD = textwrap.dedent(
    """
    import os, pickle, sys, time
    import numpy as np
    import torch
    from sb3_async import A3C, ApeXDQN

    what, moment, path, marker = sys.argv[1:5]

    def park():
        open(marker, "w").close()
        time.sleep(600)

    if what == "model":
        model = A3C("MlpPolicy", "CartPole-v1", n_workers=1, seed=0)
        save = model.save
    else:
        model = ApeXDQN("MlpPolicy", "CartPole-v1", n_actors=1, buffer_size=50_000, seed=0)
        model._setup_replay()
        rng = np.random.default_rng(0)
        for _ in range(200):
            obs = rng.normal(size=(50, 1, 4)).astype(np.float32)
            model.replay_buffer.extend(obs, obs, np.zeros((50, 1, 1)), np.ones((50, 1)), np.zeros((50, 1)), None,
                                       priorities=rng.random((50, 1)))
        save = model.save_replay_buffer
    save(path)
    print("saved", flush=True)
    with torch.no_grad():  # the second save has different content
        for param in model.policy.parameters():
            param.add_(1.0)
    if what == "replay":
        model.replay_buffer.update_priorities(np.arange(10), np.full(10, 5.0))

    if moment == "before-replace":
        os.fsync = lambda fd: park()
    elif what == "model":
        original = torch.save
        def save_half(obj, file, *args, **kwargs):
            original(obj, file, *args, **kwargs)
            file.flush()
            park()
        torch.save = save_half
    else:
        def dump_half(obj, file, protocol=None):
            data = pickle.dumps(obj, protocol=protocol)
            file.write(data[: len(data) // 2])
            file.flush()
            park()
        pickle.dump = dump_half
    save(path)
    """
)


def _kill_mid_save(what: str, moment: str, path: Path, tmp_path: Path) -> bytes:
    """Run the child until it parks in its second save, SIGKILL it there; returns the bytes of the first save."""
    marker = tmp_path / "parked"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, what, moment, str(path), str(marker)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "saved"
        previous = path.read_bytes()
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert child.poll() is None, f"the child exited ({child.returncode}) before its second save parked"
            assert time.monotonic() < deadline, "the child's second save never reached the hook"
            time.sleep(0.05)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    return previous


@pytest.mark.parametrize("moment", ["mid-write", "before-replace"])
def test_model_killed_mid_save_keeps_the_previous_file(moment, tmp_path):
    path = tmp_path / "model.zip"
    previous = _kill_mid_save("model", moment, path, tmp_path)
    assert path.read_bytes() == previous
    loaded = A3C.load(path)
    assert loaded.predict(np.zeros(4, dtype=np.float32))[0] in (0, 1)


@pytest.mark.parametrize("moment", ["mid-write", "before-replace"])
def test_replay_killed_mid_save_keeps_the_previous_file(moment, tmp_path):
    path = tmp_path / "replay.pkl"
    previous = _kill_mid_save("replay", moment, path, tmp_path)
    assert path.read_bytes() == previous
    model = ApeXDQN("MlpPolicy", "CartPole-v1", n_actors=1)
    model.load_replay_buffer(path)
    assert model.replay_buffer is not None and model.replay_buffer.size() == 10_000


def test_the_next_save_removes_what_a_killed_save_left(tmp_path):
    path = tmp_path / "model.zip"
    _kill_mid_save("model", "mid-write", path, tmp_path)
    (left,) = tmp_path.glob(".model.zip.*.tmp")  # the killed save's temporary file
    in_progress = tmp_path / f".model.zip.{os.getpid()}-0123abcd.tmp"  # a save of a process that runs: kept
    other_target = tmp_path / ".replay.pkl.1-0123abcd.tmp"  # another file's: not this save's business
    for kept in (in_progress, other_target):
        kept.write_bytes(b"partial")
    A3C("MlpPolicy", "CartPole-v1", n_workers=1).save(path)
    assert not left.exists()
    assert sorted(tmp_path.glob(".*.tmp")) == sorted([in_progress, other_target])
    A3C.load(path)


def _model(model_class):
    if model_class is AEDDPG:
        return AEDDPG("MlpPolicy", "Pendulum-v1", n_envs=1, buffer_size=1000)
    if model_class is ApeXDQN:
        model = ApeXDQN("MlpPolicy", "CartPole-v1", n_actors=1, buffer_size=1000)
        model._setup_replay()
        return model
    return model_class("MlpPolicy", "CartPole-v1", n_workers=1)


@pytest.mark.parametrize("model_class", [A3C, AsyncNStepQ, ApeXDQN, AEDDPG])
def test_failed_save_leaves_the_previous_file_and_no_temporary(model_class, tmp_path, monkeypatch):
    model = _model(model_class)
    try:
        model.save(tmp_path / "model")  # SB3's convention: .zip added
        assert (tmp_path / "model.zip").exists()
        previous = (tmp_path / "model.zip").read_bytes()
        has_replay = getattr(model, "replay_buffer", None) is not None
        if has_replay:
            model.save_replay_buffer(tmp_path / "replay")
            previous_replay = (tmp_path / "replay.pkl").read_bytes()

        def fail(*args, **kwargs):
            raise OSError("disk full")

        monkeypatch.setattr(torch, "save", fail)
        monkeypatch.setattr(pickle, "dump", fail)
        with pytest.raises(OSError, match="disk full"):
            model.save(tmp_path / "model.zip")
        assert (tmp_path / "model.zip").read_bytes() == previous
        if has_replay:
            with pytest.raises(OSError, match="disk full"):
                model.save_replay_buffer(tmp_path / "replay.pkl")
            assert (tmp_path / "replay.pkl").read_bytes() == previous_replay
        assert sorted(os.listdir(tmp_path)) == sorted(["model.zip", *(["replay.pkl"] if has_replay else [])])
    finally:
        if model.env is not None:
            model.env.close()


def test_save_to_an_open_file_and_in_a_new_folder(tmp_path):
    model = A3C("MlpPolicy", "CartPole-v1", n_workers=1)
    buffer = io.BytesIO()
    model.save(buffer)
    buffer.seek(0)
    assert A3C.load(buffer).n_workers == 1
    model.save(str(tmp_path / "new" / "folder" / "m"))
    assert os.listdir(tmp_path / "new" / "folder") == ["m.zip"]


def test_atomic_write_keeps_the_target_on_error(tmp_path):
    target = tmp_path / "file.bin"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic_write(target, "bin") as file:
        file.write(b"new, half")
        raise RuntimeError
    assert target.read_bytes() == b"old"
    with atomic_write(target, "bin") as file:
        file.write(b"new")
    assert target.read_bytes() == b"new"
    assert os.listdir(tmp_path) == ["file.bin"]


@pytest.mark.parametrize("size", ["empty", "half"])
def test_truncated_replay_file_error_names_the_file(size, tmp_path):
    model = ApeXDQN("MlpPolicy", "CartPole-v1", n_actors=1, buffer_size=1000)
    model._setup_replay()
    model.save_replay_buffer(tmp_path / "replay.pkl")
    data = (tmp_path / "replay.pkl").read_bytes()
    (tmp_path / "replay.pkl").write_bytes(b"" if size == "empty" else data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"replay\.pkl.*truncated or corrupt"):
        model.load_replay_buffer(tmp_path / "replay.pkl")
    ae = AEDDPG("MlpPolicy", "Pendulum-v1", n_envs=1, buffer_size=1000)
    try:
        with pytest.raises(ValueError, match=r"replay\.pkl.*truncated or corrupt"):
            ae.load_replay_buffer(tmp_path / "replay.pkl")
    finally:
        if ae.env is not None:
            ae.env.close()


class _Payload:
    """A pickle that creates ``marker`` when unpickled: what a crafted file could run instead."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


@pytest.mark.parametrize("model_class", [ApeXDQN, AEDDPG])
def test_load_replay_buffer_refuses_another_pickle_without_running_it(model_class, tmp_path):
    marker, path = tmp_path / "ran", tmp_path / "replay.pkl"
    path.write_bytes(pickle.dumps(_Payload(marker)))
    model = _model(model_class)
    try:
        with pytest.raises(ValueError, match=r"replay\.pkl.*holds io\.open"):
            model.load_replay_buffer(path)
        assert not marker.exists()
        model.save_replay_buffer(tmp_path / "saved")  # a file it saved itself still loads (suffix added, as SB3)
        model.load_replay_buffer(tmp_path / "saved")
    finally:
        if model.get_env() is not None:
            model.get_env().close()
