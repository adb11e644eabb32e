"""What SB3 users call behaves as in SB3: each test here is a row of the audit table in docs/guide/sb3_compatibility.md."""

import functools
import importlib.util
import os
import re
import subprocess
import sys
import textwrap
import warnings
import zipfile
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from stable_baselines3 import A2C, DQN
from stable_baselines3.common.callbacks import (
    BaseCallback,
    CallbackList,
    CheckpointCallback,
    EvalCallback,
    LogEveryNTimesteps,
    ProgressBarCallback,
    StopTrainingOnNoModelImprovement,
)
from stable_baselines3.common.envs import FakeImageEnv, SimpleMultiObsEnv
from stable_baselines3.common.logger import configure
from stable_baselines3.common.vec_env import DummyVecEnv, VecFrameStack

from sb3_async import A3C, ApeXDQN, AsyncNStepQ, AsyncOneStepQ, AsyncSarsa
from tests.helpers import ALGORITHM_NAMES, small_model

Q_FAMILY = [AsyncOneStepQ, AsyncSarsa, AsyncNStepQ]
ALL = [A3C, *Q_FAMILY]
PEER = {A3C: A2C, AsyncOneStepQ: DQN, AsyncSarsa: DQN, AsyncNStepQ: DQN}
REPO = Path(__file__).resolve().parents[2]


def _image_env() -> gym.Env:
    return FakeImageEnv(screen_height=84, screen_width=84, n_channels=1, discrete=True)


def _dict_env() -> gym.Env:
    return SimpleMultiObsEnv(random_start=True)


ENVS = {
    "vector": ("MlpPolicy", lambda: gym.make("CartPole-v1")),
    "image": ("CnnPolicy", _image_env),
    "dict": ("MultiInputPolicy", _dict_env),
}


def _describe(value):
    """What a user can observe of a predict() result: type, dtype and shape (recursively for tuples)."""
    if value is None:
        return None
    if isinstance(value, tuple):
        return tuple(_describe(item) for item in value)
    return type(value).__name__, str(getattr(value, "dtype", None)), getattr(value, "shape", None)


def _observations(env: gym.Env):
    single = env.observation_space.sample()
    if isinstance(single, dict):
        batch = {key: np.stack([env.observation_space.sample()[key] for _ in range(3)]) for key in single}
    else:
        batch = np.stack([env.observation_space.sample() for _ in range(3)])
    return single, batch


@pytest.mark.parametrize("kind", list(ENVS))
@pytest.mark.parametrize("model_class", ALL)
def test_predict_returns_what_sb3_returns(model_class, kind):
    """Audit: predict() with one or a batch of observations, vector/image/dict observations, with and without
    state / episode_start, deterministic or not: the same types, dtypes and shapes as the SB3 peer (A2C, DQN)."""
    policy, make_env = ENVS[kind]
    ours = model_class(policy, make_env, n_workers=1, seed=0)
    peer = PEER[model_class](policy, DummyVecEnv([make_env]), seed=0)
    _check_predict_like(ours, peer, make_env)


@pytest.mark.parametrize("kind", ["vector", "image"])
def test_apex_dqn_predict_returns_what_dqn_returns(kind):
    """The same audit for Ape-X DQN, whose exploring branch (ε-greedy in predict) must keep DQN's 0-d array."""
    policy, make_env = ENVS[kind]
    ours = ApeXDQN(policy, make_env, n_actors=1, seed=0)
    peer = DQN(policy, DummyVecEnv([make_env]), buffer_size=100, seed=0)
    _check_predict_like(ours, peer, make_env)


def _check_predict_like(ours, peer, make_env) -> None:
    single, batch = _observations(make_env())
    for obs in (single, batch):
        n = 3 if obs is batch else 1
        for extra in ({}, {"state": None, "episode_start": np.ones(n, dtype=bool)}):
            for deterministic in (True, False):
                for _ in range(10):  # non-deterministic Q predictions take both branches of ε-greedy
                    got = ours.predict(obs, deterministic=deterministic, **extra)
                    expected = peer.predict(obs, deterministic=deterministic, **extra)
                    assert _describe(got) == _describe(expected), (obs is batch, extra, deterministic)
                    assert ours.action_space.contains(got[0] if obs is single else got[0][0])


def test_predict_continuous_actions_like_a2c():
    ours = A3C("MlpPolicy", "Pendulum-v1", n_workers=1, seed=0)
    peer = A2C("MlpPolicy", "Pendulum-v1", seed=0)
    for obs in (np.zeros(3, dtype=np.float32), np.zeros((4, 3), dtype=np.float32)):
        for deterministic in (True, False):
            got, expected = ours.predict(obs, deterministic=deterministic), peer.predict(obs, deterministic=deterministic)
            assert _describe(got) == _describe(expected)
            assert np.all(np.abs(got[0]) <= 2.0)  # clipped to the action space, as SB3 does


@pytest.mark.parametrize("model_class", ALL)
def test_log_every_n_timesteps_dumps_logs(model_class, tmp_path):
    """Audit: LogEveryNTimesteps calls model.dump_logs(); the rows carry the usual keys."""
    model = model_class("MlpPolicy", "CartPole-v1", n_workers=2, n_envs_per_worker=2, seed=0)
    model.set_logger(configure(str(tmp_path), ["csv"]))
    model.learn(4000, callback=LogEveryNTimesteps(n_steps=1000), log_interval=1_000_000)
    rows = (tmp_path / "progress.csv").read_text().splitlines()
    header = rows[0].split(",")
    assert len(rows) - 1 >= 3  # one dump per 1000 steps (the last may coincide with the end)
    assert {"time/fps", "time/total_timesteps", "rollout/ep_rew_mean"} <= set(header)


def test_eval_callback_sees_the_same_env_type_as_with_a2c(tmp_path):
    """Audit: EvalCallback warns when the training and eval env types differ; with our training env it must not
    (it did: "TemplateVecEnv != DummyVecEnv"). Checked for a plain env and for a VecFrameStack stack."""

    def stacked_images():  # channel-first images: SB3 adds no VecTransposeImage (it would warn for A2C too)
        env = lambda: FakeImageEnv(screen_height=84, screen_width=84, n_channels=1, discrete=True, channel_first=True)  # noqa: E731
        return VecFrameStack(DummyVecEnv([env]), 2)

    cases = [
        (A3C("MlpPolicy", "CartPole-v1", n_workers=2, seed=0), gym.make("CartPole-v1"), DummyVecEnv),
        (AsyncNStepQ("CnnPolicy", stacked_images(), n_workers=1, seed=0), stacked_images(), VecFrameStack),
    ]
    for model, eval_env, expected_type in cases:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model.learn(600, callback=EvalCallback(eval_env, eval_freq=100, n_eval_episodes=1, warn=True))
        assert not [w for w in caught if "not of the same type" in str(w.message)]
        assert isinstance(model.get_env(), expected_type)


def test_training_env_reports_all_workers_envs():
    model = A3C("MlpPolicy", "CartPole-v1", n_workers=2, n_envs_per_worker=3, seed=0)
    env = model.get_env()
    assert env.num_envs == 6 == model.n_envs
    assert env.reset().shape == (6, 4)
    assert [spec.id for spec in env.get_attr("spec")] == ["CartPole-v1"] * 6
    assert env.env_is_wrapped(gym.wrappers.TimeLimit, indices=[0, 5]) == [True, True]
    with pytest.raises(RuntimeError, match="inside the workers"):
        env.step(np.zeros(6, dtype=np.int64))
    with pytest.raises(RuntimeError, match="inside the workers"):
        env.set_attr("foo", 1)


class _Calls(BaseCallback):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def _on_step(self) -> bool:
        self.calls += 1
        return True


@pytest.mark.parametrize("model_class", [A3C, AsyncNStepQ])
def test_progress_bar_ends_at_total_timesteps(model_class):
    """Audit: ProgressBarCallback counts num_envs per on_step(); it ended at 200,048/200,000. SB3's loop calls
    callbacks while num_timesteps < total_timesteps: with total a multiple of n_envs the bar ends exactly at total."""
    model = model_class("MlpPolicy", "CartPole-v1", n_workers=2, n_envs_per_worker=4, seed=0)
    bar, calls = ProgressBarCallback(), _Calls()
    model.learn(6000, callback=[bar, calls])
    assert calls.calls == 6000 // 8
    assert bar.pbar.n == 6000
    assert model.num_timesteps >= 6000  # the steps the workers really took (the end of their last segment)


def test_every_callback_sb3_ships_runs(tmp_path):
    """Audit: CheckpointCallback, StopTrainingOnNoModelImprovement (in EvalCallback), CallbackList."""
    model = AsyncOneStepQ("MlpPolicy", "CartPole-v1", n_workers=2, seed=0)
    stop = StopTrainingOnNoModelImprovement(max_no_improvement_evals=1, min_evals=0)
    eval_callback = EvalCallback(gym.make("CartPole-v1"), eval_freq=200, n_eval_episodes=1, callback_after_eval=stop)
    checkpoint = CheckpointCallback(save_freq=500, save_path=str(tmp_path), name_prefix="q")
    model.learn(100_000, callback=CallbackList([checkpoint, eval_callback]))
    assert model.num_timesteps < 100_000  # stopped by the no-improvement rule
    assert sorted(tmp_path.glob("q_*_steps.zip"))
    AsyncOneStepQ.load(sorted(tmp_path.glob("q_*_steps.zip"))[0])


@pytest.mark.parametrize("model_class", Q_FAMILY)
def test_dqn_attributes(model_class, tmp_path):
    """Audit: what DQN users touch: q_net, q_net_target, exploration_rate; replay-buffer methods say why not."""
    model = model_class("MlpPolicy", "CartPole-v1", n_workers=1, seed=0)
    assert model.q_net is model.policy.q_net and model.q_net_target is model.policy.q_net_target
    assert 0.0 <= model.exploration_rate <= 1.0
    model.save(tmp_path / "m")
    loaded = model_class.load(tmp_path / "m")
    assert loaded.q_net is loaded.policy.q_net
    with pytest.raises(TypeError, match="no replay buffer"):
        model.save_replay_buffer(tmp_path / "buffer")
    with pytest.raises(TypeError, match="no replay buffer"):
        model.load_replay_buffer(tmp_path / "buffer")


def _run(args, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=240, cwd=kwargs.pop("cwd", None), **kwargs)


TRAIN_SCRIPT = textwrap.dedent(
    """
    import gymnasium as gym
    from sb3_async import A3C

    class Wrapped(gym.Wrapper):  # a class of the main script: it must reach the workers too
        pass

    {guard}model = A3C("MlpPolicy", lambda: Wrapped(gym.make("CartPole-v1")), n_workers=2, seed=0)
    {guard}model.learn(2000)
    {guard}print("trained", model.num_timesteps)
    """
)


def test_script_from_standard_input(tmp_path):
    """`python - < train.py` (and a heredoc in a shell script): workers must not try to re-import '<stdin>'."""
    script = TRAIN_SCRIPT.format(guard="")
    result = _run([sys.executable, "-"], input=script, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "trained" in result.stdout


def test_script_without_main_guard_fails_once_with_the_cause(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(TRAIN_SCRIPT.format(guard=""))
    result = _run([sys.executable, str(path)], cwd=tmp_path)
    assert result.returncode != 0
    assert 'if __name__ == "__main__":' in result.stderr
    assert "WorkerError" in result.stderr
    assert result.stderr.count("Traceback") == 1, result.stderr  # one traceback, not one per worker
    assert len(result.stderr.splitlines()) < 40


def test_apex_script_without_main_guard_fails_at_once(tmp_path):
    """Ape-X restarts actors that die, but not one that could not start for want of a ``__main__`` guard."""
    path = tmp_path / "train.py"
    path.write_text("from sb3_async import ApeXDQN\nApeXDQN('MlpPolicy', 'CartPole-v1', n_actors=2).learn(2000)\n")
    result = _run([sys.executable, str(path)], cwd=tmp_path)
    assert result.returncode != 0
    assert 'if __name__ == "__main__":' in result.stderr and "restarting" not in result.stderr, result.stderr
    assert result.stderr.count("Traceback") == 1, result.stderr


def test_notebook_runs_training(tmp_path):
    """A Jupyter notebook (its main module has no file) trains with workers: executed with a real kernel."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    code = TRAIN_SCRIPT.format(guard="")
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    client = nbclient.NotebookClient(notebook, timeout=240, kernel_name="python3", resources={"metadata": {"path": tmp_path}})
    client.execute()
    outputs = "".join(output.get("text", "") for output in notebook.cells[0].outputs)
    assert "trained" in outputs


def test_installed_wheel_finds_its_zoo_configs(tmp_path):
    """`pip install .` / a wheel: `python -m sb3_async.train --algo a3c` must find zoo_configs/a3c.yml in the package."""
    wheel_dir, target = tmp_path / "dist", tmp_path / "site"
    # Build with this environment's setuptools when it has one (no download); else pip's isolated build.
    isolation = ["--no-build-isolation"] if importlib.util.find_spec("setuptools") else []
    wheel_command = [sys.executable, "-m", "pip", "wheel", "--no-deps", *isolation, "-w", str(wheel_dir), str(REPO)]
    build = _run(wheel_command, cwd=tmp_path)
    assert build.returncode == 0, build.stderr
    (wheel,) = wheel_dir.glob("sb3_async-*.whl")
    with zipfile.ZipFile(wheel) as archive:  # the wheel holds what a user runs: no other framework's benchmark adapter
        assert not [name for name in archive.namelist() if re.search(r"sf_appo|torchrl|tianshou", name)]
    install = _run([sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(target), str(wheel)], cwd=tmp_path)
    assert install.returncode == 0, install.stderr
    env = {**os.environ, "PYTHONPATH": str(target)}  # the wheel's copy wins over the source checkout
    where = _run(
        [sys.executable, "-c", "import sb3_async.zoo as z; print(z.__file__); print(z.CONFIG_DIR)"], cwd=tmp_path, env=env
    )
    assert where.stdout.splitlines() == [
        str(target / "sb3_async" / "zoo" / "__init__.py"),
        str(target / "sb3_async" / "zoo_configs"),
    ]
    train = _run(
        [
            sys.executable,
            "-m",
            "sb3_async.train",
            "--algo",
            "a3c",
            "--env",
            "CartPole-v1",
            "-n",
            "2000",
            "-f",
            str(tmp_path / "logs"),
        ],
        cwd=tmp_path,
        env=env,
    )
    assert train.returncode == 0, train.stderr[-3000:]
    assert f"Loading hyperparameters from: {target / 'sb3_async' / 'zoo_configs' / 'a3c.yml'}" in train.stdout


def test_cli_help_says_what_is_ours():
    train = _run([sys.executable, "-m", "sb3_async.train", "--help"])
    assert train.returncode == 0
    for text in ("zoo_configs/<algo>.yml", "n_workers x n_envs_per_worker", "--vec-env subproc becomes dummy", "logs/"):
        assert text in train.stdout
    assert "--algo" in train.stdout  # the zoo's own help follows
    benchmark = _run([sys.executable, "-m", "sb3_async.benchmark", "--help"])
    assert benchmark.returncode == 0 and "DESIGN.md" not in benchmark.stdout and "docs/benchmarks.md" in benchmark.stdout


def test_readme_snippet_runs_and_prints_its_evaluation(tmp_path):
    readme = (REPO / "README.md").read_text()
    snippet = readme.split("```python\n", 1)[1].split("```", 1)[0]
    assert "model.learn(200_000, progress_bar=True)" in snippet
    result = _run([sys.executable, "-c", snippet.replace("200_000", "20_000")], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1].startswith("evaluation: ")


def test_base_algorithm_methods(tmp_path):
    """Audit: get_env / set_env (spaces checked), get_vec_normalize_env, set_random_seed, get/set_parameters, load(env=)."""
    model = A3C("MlpPolicy", "CartPole-v1", n_workers=2, seed=0)
    assert model.get_vec_normalize_env() is None
    model.set_env(gym.make("CartPole-v1"))
    assert model.get_env().num_envs == model.n_envs == 2
    with pytest.raises(ValueError, match="Observation spaces do not match"):
        model.set_env(gym.make("Pendulum-v1"))
    obs = np.zeros((8, 4), dtype=np.float32)
    model.set_random_seed(3)
    first = model.predict(obs, deterministic=False)[0]
    model.set_random_seed(3)
    assert np.array_equal(model.predict(obs, deterministic=False)[0], first)
    other = A3C("MlpPolicy", "CartPole-v1", n_workers=1, seed=1)
    other.set_parameters(model.get_parameters())
    assert np.array_equal(other.predict(obs, deterministic=True)[0], model.predict(obs, deterministic=True)[0])
    model.save(tmp_path / "m")
    loaded = A3C.load(tmp_path / "m", env=gym.make("CartPole-v1"), n_workers=1)
    assert loaded.n_workers == 1 and loaded.get_env().num_envs == 1
    assert np.array_equal(loaded.predict(obs, deterministic=True)[0], model.predict(obs, deterministic=True)[0])


def _small_image_env(continuous: bool) -> gym.Env:
    return FakeImageEnv(screen_height=36, screen_width=36, n_channels=3, discrete=not continuous)


@pytest.mark.parametrize("name", ALGORITHM_NAMES)
def test_cnn_policy_learns_from_channel_last_images(name):
    """A DummyVecEnv of channel-last uint8 images, which SB3 wraps in VecTransposeImage: every algorithm taking
    CnnPolicy trains on it, its policy and replay see the channel-first images SB3 would give, and predict() takes the
    env's own observations."""
    continuous = name in ("ApeXDPG", "AEDDPG")
    make_env = functools.partial(_small_image_env, continuous)
    model = small_model(
        name, DummyVecEnv([make_env]), "CnnPolicy", policy_kwargs=dict(features_extractor_kwargs=dict(features_dim=16))
    )
    assert model.observation_space.shape == (3, 36, 36)
    model.learn(96)
    assert model.num_timesteps >= 96
    obs = make_env().observation_space.sample()
    assert model.action_space.contains(model.predict(obs, deterministic=True)[0])
    if name == "AEDDPG":
        stored = model.replay_buffer.observations[: model.replay_buffer.pos, 0]
        assert stored.shape[1:] == (3, 36, 36) and stored.dtype == np.uint8
        model.env.close()
