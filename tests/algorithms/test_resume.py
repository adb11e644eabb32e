"""Resuming from a checkpoint: SB3's CheckpointCallback (model, replay buffer, VecNormalize statistics) saves, for
every algorithm, what load() + load_replay_buffer() + learn(reset_num_timesteps=False) need to continue where the run
was: the step count, the replay (priorities included), the normalization statistics and the optimizer state."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from stable_baselines3.common.callbacks import BaseCallback, CheckpointCallback
from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

import sb3_async
from sb3_async import A3C, AEDDPG, ApeXDPG, ApeXDQN, AsyncNStepQ
from sb3_async.common.buffers.sum_tree import SumTree

SMALL_NET = dict(net_arch=[32, 32])


def _flat_state(value: Any) -> list[Any]:
    """Every tensor, array and number of a (nested) state dict, copied, in a fixed order."""
    if isinstance(value, torch.Tensor):
        return [value.detach().clone()]
    if isinstance(value, np.ndarray):
        return [value.copy()]
    if isinstance(value, dict):
        return [item for key in sorted(value, key=str) for item in _flat_state(value[key])]
    if isinstance(value, (list, tuple)):
        return [item for entry in value for item in _flat_state(entry)]
    if isinstance(value, SumTree):
        return _flat_state(value.sums) + [value.min]
    if isinstance(value, (int, float, bool, np.number)):
        return [value]
    return []


def _replay_state(buffer: Any) -> list[Any]:
    skip = {"device", "observation_space", "action_space", "_outputs"}
    return _flat_state({key: value for key, value in vars(buffer).items() if key not in skip})


def _assert_same(a: list[Any], b: list[Any], what: str) -> None:
    assert len(a) == len(b), what
    for x, y in zip(a, b):
        if isinstance(x, torch.Tensor):
            torch.testing.assert_close(x, y, rtol=0, atol=0, msg=what)
        else:
            np.testing.assert_array_equal(x, y, err_msg=what)


def snapshot(model: Any) -> dict[str, Any]:
    """What a resumed run must get back."""
    names = [name for name in model._get_torch_save_params()[0] if name != "policy"]
    optimizers = [model.policy.optimizer if name == "policy.optimizer" else _attr(model, name) for name in names]
    state = dict(
        num_timesteps=model.num_timesteps,
        parameters=_flat_state(model.policy.state_dict()),
        optimizers=_flat_state([optimizer.state_dict() for optimizer in optimizers]),
    )
    assert any(isinstance(x, torch.Tensor) and x.abs().sum() > 0 for x in state["optimizers"]), "untrained optimizer"
    if getattr(model, "replay_buffer", None) is not None:
        state["replay"] = _replay_state(model.replay_buffer)
    venv = model.get_vec_normalize_env()
    if venv is not None:
        state["normalization"] = _normalization(venv)
    return state


def _attr(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def _normalization(venv: VecNormalize) -> list[Any]:
    return [
        np.array(getattr(rms, name), dtype=np.float64)
        for rms in (venv.obs_rms, venv.ret_rms)
        for name in ("mean", "var", "count")
    ]


class SnapshotCheckpoint(CheckpointCallback):
    """CheckpointCallback that also records what each checkpoint must hold, workers parked meanwhile (so that what is
    recorded is what is saved)."""

    snapshots: dict[int, dict[str, Any]]

    def _on_step(self) -> bool:
        if self.n_calls % self.save_freq != 0:
            return True
        pause = getattr(self.model, "pause_workers", contextlib.nullcontext)
        with pause():
            self.snapshots = getattr(self, "snapshots", {})
            self.snapshots[self.num_timesteps] = snapshot(self.model)
            return super()._on_step()


def _normalized(env_id: str) -> VecNormalize:
    return VecNormalize(DummyVecEnv([lambda: gym.make(env_id)]))


CASES = {
    "A3C": lambda: A3C("MlpPolicy", _normalized("CartPole-v1"), n_workers=2, policy_kwargs=SMALL_NET, seed=0),
    "AsyncNStepQ": lambda: AsyncNStepQ("MlpPolicy", _normalized("CartPole-v1"), n_workers=2, policy_kwargs=SMALL_NET, seed=0),
    "ApeXDQN": lambda: ApeXDQN(
        "MlpPolicy",
        _normalized("CartPole-v1"),
        n_actors=2,
        learning_starts=100,
        batch_size=32,
        block_size=20,
        policy_kwargs=SMALL_NET,
        seed=0,
    ),  # fmt: skip
    "ApeXDPG": lambda: ApeXDPG(
        "MlpPolicy",
        _normalized("Pendulum-v1"),
        n_actors=2,
        learning_starts=100,
        batch_size=32,
        block_size=20,
        policy_kwargs=SMALL_NET,
        seed=0,
    ),  # fmt: skip
    "AEDDPG": lambda: AEDDPG(
        "MlpPolicy",
        "Pendulum-v1",
        n_envs=2,
        pool_kwargs=dict(n_hosts=0),
        learning_starts=100,
        buffer_size=5000,
        policy_kwargs=SMALL_NET,
        seed=0,
    ),  # fmt: skip
}


@pytest.mark.parametrize("case", list(CASES))
def test_checkpoint_resumes_steps_replay_normalization_and_optimizer(case: str, tmp_path: Path) -> None:
    model = CASES[case]()
    cls = type(model)
    checkpoint = SnapshotCheckpoint(
        save_freq=max(400 // model.n_envs, 1), save_path=str(tmp_path), save_replay_buffer=True, save_vecnormalize=True
    )
    model.learn(1300, callback=checkpoint)
    if model.env is not None:
        model.env.close()
    steps = max(checkpoint.snapshots)
    expected = checkpoint.snapshots[steps]
    assert steps == expected["num_timesteps"] >= 1200
    path = tmp_path / f"rl_model_{steps}_steps.zip"

    loaded = cls.load(path)  # no env: rebuilt from the saved one, with the saved normalization statistics
    assert loaded.num_timesteps == steps
    if "replay" in expected:
        loaded.load_replay_buffer(tmp_path / f"rl_model_replay_buffer_{steps}_steps.pkl")
    else:
        assert not (tmp_path / f"rl_model_replay_buffer_{steps}_steps.pkl").exists()
    got = snapshot(loaded)  # after load, before any training
    _assert_same(got["parameters"], expected["parameters"], "parameters")
    _assert_same(got["optimizers"], expected["optimizers"], "optimizer state")
    assert ("replay" in got) == ("replay" in expected) == (cls in (ApeXDQN, ApeXDPG, AEDDPG))
    if "replay" in expected:
        _assert_same(got["replay"], expected["replay"], "replay")
    assert ("normalization" in expected) == (cls is not AEDDPG)
    if "normalization" in expected:
        _assert_same(got["normalization"], expected["normalization"], "normalization (model)")
        env_id = "Pendulum-v1" if cls is ApeXDPG else "CartPole-v1"
        from_pkl = VecNormalize.load(str(tmp_path / f"rl_model_vecnormalize_{steps}_steps.pkl"), _normalized(env_id))
        _assert_same(_normalization(from_pkl), expected["normalization"], "normalization (vecnormalize.pkl)")

    loaded.learn(400, reset_num_timesteps=False)
    assert loaded.num_timesteps >= steps + 400
    if "normalization" in expected:
        assert loaded.get_vec_normalize_env().obs_rms.count > expected["normalization"][2]
    if loaded.env is not None:
        loaded.env.close()


class _InterruptAt(BaseCallback):
    def __init__(self, steps: int):
        super().__init__()
        self.steps = steps

    def _on_step(self) -> bool:
        if self.num_timesteps >= self.steps:
            raise KeyboardInterrupt
        return True


def test_blocks_held_back_by_replay_ratio_are_inserted_when_learn_ends() -> None:
    # The learner cannot keep a ratio of 64 replayed per inserted: blocks wait in _held, their actors with them.
    model = ApeXDQN(
        "MlpPolicy", "CartPole-v1", n_actors=2, learning_starts=50, batch_size=32, block_size=10, replay_ratio=64.0,
        max_blocks_in_flight=4, policy_kwargs=SMALL_NET, seed=0,
    )  # fmt: skip
    with pytest.raises(KeyboardInterrupt):
        model.learn(100_000, callback=_InterruptAt(1500))
    assert not model._held
    assert model.replay_buffer.size() == model._flow["received"] == model._flow["inserted"] > 1000
    model.learn(500)  # and a normal end
    assert not model._held and model._flow["received"] == model._flow["inserted"]


def _train_cli(*args: str, cwd: Path) -> str:
    command = [sys.executable, "-m", "sb3_async.train", *args]
    root = str(Path(sb3_async.__file__).resolve().parents[1])  # the sb3_async under test, whatever cwd is
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=cwd, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout + result.stderr


def test_zoo_checkpoints_resume_with_replay_and_normalization(tmp_path: Path) -> None:
    params = ("-params", "n_timesteps:3000", "learning_starts:200", "normalize:True", "replay_ratio:None")
    common = ("--algo", "apex_dqn", "--env", "CartPole-v1", "--seed", "1", "--save-freq", "1000")
    _train_cli(*common, "-n", "2000", "--save-replay-buffer", *params, cwd=tmp_path)
    run = tmp_path / "logs" / "apex_dqn" / "CartPole-v1_1"
    names = {path.name for path in run.iterdir()}
    steps = max(int(m.group(1)) for name in names if (m := re.fullmatch(r"rl_model_(\d+)_steps\.zip", name)))
    assert {f"rl_model_replay_buffer_{steps}_steps.pkl", f"rl_model_vecnormalize_{steps}_steps.pkl"} <= names

    from sb3_async import zoo

    saved = ApeXDQN.load(run / f"rl_model_{steps}_steps.zip")
    saved.load_replay_buffer(run / f"rl_model_replay_buffer_{steps}_steps.pkl")
    fresh_env = _normalized("CartPole-v1")  # what the zoo gives load() when no vecnormalize.pkl is beside the model
    loaded = zoo.zoo_algorithm("apex_dqn").load(run / f"rl_model_{steps}_steps.zip", env=fresh_env)
    assert loaded.replay_buffer is not None and loaded.replay_buffer.size() == saved.replay_buffer.size() > 0
    _assert_same(_replay_state(loaded.replay_buffer), _replay_state(saved.replay_buffer), "replay")
    _assert_same(_normalization(fresh_env), _normalization(saved.get_vec_normalize_env()), "normalization")

    out = _train_cli(*common, "-n", "600", "-i", str(run / f"rl_model_{steps}_steps.zip"), *params, cwd=tmp_path)
    assert "Loading pretrained agent" in out
    resumed = ApeXDQN.load(tmp_path / "logs" / "apex_dqn" / "CartPole-v1_2" / "CartPole-v1.zip")
    assert resumed.num_timesteps >= steps + 600


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_soak_killed_runs_resume_and_still_learn(tmp_path: Path) -> None:
    """benchmarks/scripts/soak_resume.py: ApeXDQN on CartPole-v1 killed with SIGKILL at 5 random moments, resumed each
    time from its last checkpoint, still reaches the threshold."""
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "scripts" / "soak_resume.py"
    command = [sys.executable, str(script), "--kills", "5", "--seed", "0", "--folder", str(tmp_path / "soak")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=1700)
    print(result.stdout)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert result.stdout.count("start: resumed at") == 5 and "kills: 5" in result.stdout
