"""The RL Zoo integration: every YAML entry builds its model through the zoo's own ExperimentManager, the CLI trains
into the zoo's folder layout, ``enjoy`` loads what it saved, ``-optimize`` runs with our sampler."""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import optuna
import pytest
import yaml
from huggingface_sb3 import EnvironmentName
from rl_zoo3 import hyperparams_opt
from rl_zoo3.utils import ALGOS, SimpleLinearSchedule
from stable_baselines3.common import atari_wrappers as sb3_atari
from stable_baselines3.common.callbacks import CheckpointCallback
from stable_baselines3.common.vec_env import DummyVecEnv, VecFrameStack

from sb3_async import A3C, AEDDPG, AsyncNStepQ, zoo
from sb3_async.common.atari_wrappers import MaxAndSkipEnv
from sb3_async.env_pool.multi_agent import PettingZooEnv
from tests.helpers import zoo_build

REPO = Path(__file__).resolve().parents[2]
# n_envs, n_workers and n_envs_per_worker of the CLI runs: 2 workers on the 2 cores of CI
SMALL = ["n_envs:2", "n_workers:2", "n_envs_per_worker:1"]


def _entries() -> list[tuple[str, str]]:
    """The entries of the algorithms that run workers (AEDDPG steps its envs in a pool: tests/algorithms/test_ae_ddpg.py)."""
    entries = []
    for path in sorted(zoo.CONFIG_DIR.glob("*.yml")):
        entry = zoo.zoo_algorithm(path.stem)
        if entry is None or entry.worker_names is not None:
            entries += [(path.stem, key) for key in yaml.safe_load(path.read_text())]
    return entries


# The `atari` fallback is built for an Atari game that has no entry of its own.
ENV_OF_KEY = {"atari": "SeaquestNoFrameskip-v4", "default": "CartPole-v1"}


@pytest.fixture(autouse=True)
def registered() -> None:
    zoo.register()


def build(algo: str, env_id: str, log_folder: Path, hyperparams: dict[str, Any] | None = None, **kwargs: Any) -> Any:
    """The model the zoo's train() would build (same ExperimentManager, our registration and config), untrained."""
    return zoo_build(algo, env_id, log_folder, hyperparams, **kwargs)


def run_cli(module: str, *args: str, cwd: Path) -> str:
    result = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert result.returncode == 0, f"{module} {' '.join(args)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    return result.stdout


def test_registered_in_the_zoo_tables() -> None:
    for entry in zoo.ZOO_ALGORITHMS:
        assert ALGOS[entry.name] is entry
        assert entry.__name__ == entry.algo_class.__name__  # push_to_hub reads it
        if entry.sampler is not None:
            assert hyperparams_opt.HYPERPARAMS_SAMPLER[entry.name] is entry.sampler
            assert hyperparams_opt.HYPERPARAMS_CONVERTER[entry.name] is entry.converter
    assert ALGOS["a3c"].algo_class is A3C  # type: ignore[attr-defined]
    zoo.register()  # idempotent
    assert "ppo" in ALGOS  # the zoo's own algorithms stay


def test_every_config_file_has_an_algorithm_and_back() -> None:
    files = {path.stem for path in zoo.CONFIG_DIR.glob("*.yml")}
    names = {entry.name for entry in zoo.ZOO_ALGORITHMS}
    assert files - names == set(), "config files without an entry in sb3_async.zoo.ZOO_ALGORITHMS"
    assert names - files == set(), "algorithms without zoo_configs/<algo>.yml"


def test_every_entry_says_where_its_values_come_from() -> None:
    for path in sorted(zoo.CONFIG_DIR.glob("*.yml")):
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if line and not line[0].isspace() and not line.startswith("#"):
                previous = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
                assert previous.startswith("#"), f"{path.name}: {line!r} has no comment on its sources"


@pytest.mark.parametrize(("algo", "key"), _entries())
def test_entry_builds_its_model(algo: str, key: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # MuJoCo writes MUJOCO_LOG.TXT into the working directory
    env_id = ENV_OF_KEY.get(key, key)
    config = yaml.safe_load((zoo.CONFIG_DIR / f"{algo}.yml").read_text())[key]
    if env_id.startswith("mpe2/"):  # a PettingZoo env (the "pettingzoo" extra)
        pytest.importorskip("mpe2")
    try:
        model = build(algo, env_id, tmp_path)
    except gym.error.DependencyNotInstalled as error:
        pytest.skip(f"{env_id} needs an optional dependency: {error}")
    try:
        entry = zoo.zoo_algorithm(algo)
        assert entry is not None and type(model) is entry.algo_class
        agents = model._env_recipe.agents_per_env  # a PettingZoo env: n_envs counts env copies, the model slots
        assert model.n_envs == config.get("n_envs", 1) * agents == model.n_workers * model.n_envs_per_worker
        for name in ("n_workers", "n_envs_per_worker"):
            if name in config:
                assert getattr(model, name) == config[name] * (agents if name == "n_envs_per_worker" else 1)
        assert model.policy_class is entry.algo_class.policy_aliases[config["policy"]]
        for name in ("n_steps", "gamma", "ent_coef", "vf_coef", "max_grad_norm"):
            if name in config:
                assert getattr(model, name) == pytest.approx(config[name]), name
        learning_rate = config.get("learning_rate")
        if isinstance(learning_rate, str):
            assert isinstance(model.learning_rate, SimpleLinearSchedule)
            assert model.learning_rate.initial_value == pytest.approx(float(learning_rate.split("_")[1]))
        # What each worker will build from the zoo's env: same spaces, wrappers and frame stack, no file handle.
        worker_env = model._env_recipe.make_vec_env(agents, seed=0)
        try:
            assert worker_env.observation_space == model.observation_space
            assert worker_env.action_space == model.action_space
            assert worker_env.reset().shape == (agents, *model.observation_space.shape)
            if "frame_stack" in config:
                assert model.observation_space.shape[0] == config["frame_stack"]  # channel-first after VecTransposeImage
                assert any(cls is VecFrameStack for cls, _ in model._env_recipe.vec_wrappers)
            if "sb3_async.common.atari_wrappers.AtariWrapper" in config.get("env_wrapper", []):
                env = worker_env.unwrapped.envs[0]  # type: ignore[attr-defined]
                while not isinstance(env, sb3_atari.MaxAndSkipEnv):
                    env = env.env
                assert isinstance(env, MaxAndSkipEnv) and env._atari_env is not None  # its frames' screen reads spared
        finally:
            worker_env.close()
        name = EnvironmentName(env_id)  # "mpe2/simple_spread_v3" -> "mpe2-simple_spread_v3"
        saved = yaml.load((tmp_path / algo / f"{name}_1" / name / "config.yml").read_text(), Loader=yaml.UnsafeLoader)
        assert dict(saved)["n_envs"] * agents == model.n_envs
    finally:
        model.env.close()


def test_resolve_worker_counts() -> None:
    assert zoo.resolve_worker_counts(16, None, None) == (16, 1)
    assert zoo.resolve_worker_counts(16, 2, None) == (2, 8)
    assert zoo.resolve_worker_counts(16, None, 4) == (4, 4)
    assert zoo.resolve_worker_counts(16, 2, 8) == (2, 8)
    with pytest.raises(ValueError, match=r"-params n_envs:4"):
        zoo.resolve_worker_counts(16, 2, 2)
    with pytest.raises(ValueError, match="not a multiple of n_workers=3"):
        zoo.resolve_worker_counts(16, 3, None)
    with pytest.raises(ValueError, match=r"Invalid n_workers=-3: expected an integer >= 1"):  # not "n_envs:-24"
        zoo.resolve_worker_counts(16, -3, 8)
    with pytest.raises(TypeError, match=r"Invalid n_envs_per_worker='2'"):
        zoo.resolve_worker_counts(16, None, "2")


def test_inconsistent_n_envs_fails_saying_what_to_pass(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"n_envs=4 but n_workers=2 x n_envs_per_worker=8 = 16.*-params n_envs:16"):
        build("a3c", "CartPole-v1", tmp_path, hyperparams={"n_envs": 4})


def test_worker_counts_derived_from_n_envs(tmp_path: Path) -> None:
    conf = tmp_path / "conf.yml"
    conf.write_text("CartPole-v1:\n  n_envs: 4\n  n_envs_per_worker: 2\n  n_timesteps: 1000\n  policy: 'MlpPolicy'\n")
    model = build("a3c", "CartPole-v1", tmp_path, config=str(conf))
    assert (model.n_workers, model.n_envs_per_worker, model.n_envs) == (2, 2, 4)
    model.env.close()


def test_normalize_gives_the_workers_shared_statistics(tmp_path: Path) -> None:
    from stable_baselines3.common.vec_env import VecNormalize

    model = build("a3c", "Pendulum-v1", tmp_path)  # `normalize: true` in its entry; the zoo passes gamma along
    venv = model.get_vec_normalize_env()
    assert isinstance(venv, VecNormalize) and venv.gamma == 0.9 and venv.norm_reward
    assert model._env_recipe.normalizes and (model.gae_lambda, model.use_sde) == (0.9, True)
    model.env.close()
    model = build("a3c", "CartPole-v1", tmp_path, hyperparams={"normalize": "{'norm_obs': True, 'norm_reward': False}"})
    venv = model.get_vec_normalize_env()
    assert isinstance(venv, VecNormalize) and venv.norm_obs and not venv.norm_reward
    model.env.close()


def test_normalize_train_then_enjoy_through_the_cli(tmp_path: Path) -> None:
    """The zoo saves the shared statistics as vecnormalize.pkl (at the end and with the best model); enjoy loads them."""
    run_cli(
        "sb3_async.train",
        *("--algo", "a3c", "--env", "Pendulum-v1", "-n", "1600", "--seed", "1"),
        *("--eval-freq", "800", "--eval-episodes", "1", "-params", *SMALL),
        cwd=tmp_path,
    )
    stats = tmp_path / "logs" / "a3c" / "Pendulum-v1_1" / "Pendulum-v1" / "vecnormalize.pkl"
    with stats.open("rb") as file:
        saved = pickle.load(file)
    assert type(saved.obs_rms).__module__.startswith("stable_baselines3")  # loads without sb3_async
    assert saved.obs_rms.count > 1600  # the workers' steps, not the main process' template
    out = run_cli("sb3_async.enjoy", *("--algo", "a3c", "--env", "Pendulum-v1", "-n", "250", "--no-render"), cwd=tmp_path)
    assert "Loading running average" in out and "Episode Reward" in out


def test_subproc_vec_env_fails_clearly(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot take a SubprocVecEnv.*--vec-env dummy"):
        build(
            "a3c",
            "CartPole-v1",
            tmp_path,
            hyperparams={"n_envs": 2, "n_workers": 2, "n_envs_per_worker": 1},
            vec_env_type="subproc",
        )


def test_zoo_argv_defaults() -> None:
    conf = str(REPO / "zoo_configs" / "a3c.yml")
    assert zoo.zoo_argv(["--algo", "a3c", "--env", "CartPole-v1"], "train")[-2:] == ["--conf-file", conf]
    for given in (["-conf", "x.yml"], ["--conf-file", "x.yml"], ["--conf-file=x.yml"]):
        argv = ["--algo", "a3c", *given]
        assert zoo.zoo_argv(argv, "train") == argv
    assert zoo.zoo_argv(["--algo", "ppo"], "train") == ["--algo", "ppo"]
    assert zoo.zoo_argv(["--algo", "a3c", "--vec-env", "subproc"], "train")[-4:] == ["--vec-env", "dummy", "--conf-file", conf]
    assert zoo.zoo_argv(["--algo", "ppo", "--vec-env", "subproc"], "train") == ["--algo", "ppo", "--vec-env", "subproc"]
    assert zoo.zoo_argv(["--algo", "a3c"], "enjoy") == ["--algo", "a3c", "--folder", "logs"]
    assert zoo.zoo_argv(["--algo", "a3c", "-f", "runs"], "enjoy") == ["--algo", "a3c", "-f", "runs"]
    assert zoo.zoo_argv(["--algo", "ppo"], "enjoy") == ["--algo", "ppo"]


def test_sampler_and_converter(tmp_path: Path) -> None:
    params = dict(
        learning_rate=3e-3,
        n_steps=8,
        one_minus_gamma=0.01,
        ent_coef=1e-3,
        vf_coef=0.5,
        max_grad_norm=1.0,
        net_arch="tiny",
        activation_fn="relu",
    )
    sampled = zoo.sample_a3c_params(optuna.trial.FixedTrial(params), 0, 2, {})
    assert sampled == zoo.convert_a3c_params(params)
    assert sampled["gamma"] == pytest.approx(0.99) and "one_minus_gamma" not in sampled
    model = A3C("MlpPolicy", "CartPole-v1", n_workers=1, **sampled)
    assert [layer.out_features for layer in model.policy.mlp_extractor.policy_net if hasattr(layer, "out_features")] == [64]


def test_console_scripts_declared() -> None:
    scripts = {ep.name: ep.value for ep in importlib.metadata.entry_points(group="console_scripts")}
    assert scripts.get("sb3-async-train") == "sb3_async.train:main"
    assert scripts.get("sb3-async-enjoy") == "sb3_async.enjoy:main"
    assert scripts.get("sb3-async-record-video") == "sb3_async.record_video:main"


def test_train_then_enjoy_through_the_cli(tmp_path: Path) -> None:
    out = run_cli(
        "sb3_async.train",
        "--algo",
        "a3c",
        "--env",
        "CartPole-v1",
        "-n",
        "3000",
        "--seed",
        "1",
        "--eval-freq",
        "1000",
        "--eval-episodes",
        "2",
        "--save-freq",
        "1000",
        "-tb",
        "tb",
        "-params",
        *SMALL,
        cwd=tmp_path,
    )
    assert f"Loading hyperparameters from: {zoo.CONFIG_DIR / 'a3c.yml'}" in out
    run = tmp_path / "logs" / "a3c" / "CartPole-v1_1"  # the zoo's layout, default log folder
    for name in (
        "CartPole-v1.zip",
        "best_model.zip",
        "evaluations.npz",
        "rl_model_1000_steps.zip",
        "CartPole-v1/config.yml",
        "CartPole-v1/args.yml",
        "CartPole-v1/command.txt",
    ):
        assert (run / name).is_file(), name
    config = dict(yaml.load((run / "CartPole-v1" / "config.yml").read_text(), Loader=yaml.UnsafeLoader))
    assert (config["n_workers"], config["n_envs"], config["learning_rate"]) == (2, 2, 1e-3)
    assert list((tmp_path / "tb" / "CartPole-v1").glob("A3C_1/events.out.tfevents.*"))
    model = A3C.load(run / "CartPole-v1.zip")
    assert model.num_timesteps >= 3000 and model.n_workers == 2

    # enjoy: finds the latest run under ./logs by default, loads it, runs episodes
    # 1200 steps: CartPole-v1 truncates at 500, so episodes end even if the short training balanced the pole
    out = run_cli("sb3_async.enjoy", "--algo", "a3c", "--env", "CartPole-v1", "-n", "1200", "--no-render", cwd=tmp_path)
    assert f"Loading {Path('logs/a3c/CartPole-v1_1/CartPole-v1.zip')}" in out
    assert "Mean reward:" in out and "Episodes" in out
    out = run_cli(
        "sb3_async.enjoy",
        "--algo",
        "a3c",
        "--env",
        "CartPole-v1",
        "-n",
        "300",
        "--no-render",
        "--load-checkpoint",
        "1000",
        "-f",
        "logs",
        cwd=tmp_path,
    )
    assert "rl_model_1000_steps.zip" in out

    # record_video: the zoo's script, finding the same run; the video lands in the run folder
    run_cli("sb3_async.record_video", "--algo", "a3c", "--env", "CartPole-v1", "-n", "50", cwd=tmp_path)
    assert list((tmp_path / "logs" / "a3c" / "CartPole-v1_1" / "videos").glob("*.mp4"))

    # continue training from the saved model (-i): loaded with the zoo's env, written to a new run folder
    run_cli(
        "sb3_async.train",
        "--algo",
        "a3c",
        "--env",
        "CartPole-v1",
        "-n",
        "1000",
        "--eval-freq",
        "-1",
        "-i",
        str(run / "CartPole-v1.zip"),
        "-params",
        *SMALL,
        cwd=tmp_path,
    )
    continued = A3C.load(tmp_path / "logs" / "a3c" / "CartPole-v1_2" / "CartPole-v1.zip")
    assert continued.num_timesteps >= model.num_timesteps + 1000  # -n counts more steps: the step count goes on


def test_no_test_doubles_in_the_package() -> None:
    """The zoo integration changes the zoo through a subclass and its tables, not with a test-double library."""
    offenders = [
        str(path.relative_to(REPO))
        for path in sorted((REPO / "sb3_async").rglob("*.py"))
        if "unittest.mock" in (text := path.read_text()) or "from unittest import mock" in text
    ]
    assert offenders == []


def test_train_runs_the_zoo_with_our_manager_and_restores_the_zoo(capsys: pytest.CaptureFixture[str]) -> None:
    import rl_zoo3.train
    from rl_zoo3.exp_manager import ExperimentManager

    with pytest.raises(SystemExit):  # the zoo's --help: its parser, every flag, then exit
        zoo.run_zoo("train", ["--algo", "a3c", "--help"])
    out = capsys.readouterr().out
    assert "sb3_async: the RL Zoo's own train script" in out and "--save-replay-buffer" in out
    assert rl_zoo3.train.ExperimentManager is ExperimentManager  # as it was, even after an exit
    assert issubclass(zoo.ZooExperimentManager, ExperimentManager)


@pytest.mark.parametrize("algo", ["a3c", "ppo"])
def test_checkpoints_of_our_algorithms_save_replay_and_normalization(algo: str, tmp_path: Path) -> None:
    hyperparams: dict[str, Any] = {"normalize": True}
    entry = zoo.zoo_algorithm(algo)
    if entry is not None:
        hyperparams.update(n_envs=2, n_workers=2, n_envs_per_worker=1)
    manager = zoo.ZooExperimentManager(
        argparse.Namespace(), algo, "CartPole-v1", str(tmp_path), n_timesteps=0, eval_freq=-1, save_freq=1000,
        save_replay_buffer=True, hyperparams=hyperparams, seed=0, verbose=0,
        config=str(entry.config_path) if entry is not None else None,
    )  # fmt: skip
    model, _ = manager.setup_experiment() or (None, None)
    assert model is not None
    try:
        (checkpoint,) = [callback for callback in manager.callbacks if isinstance(callback, CheckpointCallback)]
        n_envs = 2 if algo == "a3c" else 8  # the zoo's ppo entry for CartPole-v1: 8 envs
        assert checkpoint.save_freq == 1000 // n_envs
        ours = algo == "a3c"  # the zoo's own algorithms keep the zoo's checkpoints
        assert (checkpoint.save_replay_buffer, checkpoint.save_vecnormalize) == (ours, ours)
    finally:
        model.env.close()


class _RecordsLearn:
    """A model stand-in for ExperimentManager.learn: records learn()'s arguments."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, dict[str, Any]]] = []
        self.env = DummyVecEnv([lambda: gym.make("CartPole-v1")])

    def learn(self, total_timesteps: int, **kwargs: Any) -> _RecordsLearn:
        self.calls.append((total_timesteps, kwargs))
        return self


@pytest.mark.parametrize(
    ("algo", "continue_training", "resets"), [("a3c", True, False), ("a3c", False, None), ("ppo", True, None)]
)
def test_continued_training_of_our_algorithms_continues_the_step_count(
    algo: str, continue_training: bool, resets: bool | None, tmp_path: Path
) -> None:
    manager = zoo.ZooExperimentManager(argparse.Namespace(), algo, "CartPole-v1", str(tmp_path), n_timesteps=500)
    manager.continue_training = continue_training  # what -i <existing .zip> sets
    model = _RecordsLearn()
    manager.learn(model)  # type: ignore[arg-type]
    ((steps, kwargs),) = model.calls
    assert steps == 500 and kwargs.get("reset_num_timesteps") is resets


def test_optimize_through_the_cli(tmp_path: Path) -> None:
    out = run_cli(
        "sb3_async.train",
        "--algo",
        "a3c",
        "--env",
        "CartPole-v1",
        "-optimize",
        "--n-trials",
        "2",
        "-n",
        "1500",
        "--n-evaluations",
        "1",
        "--eval-episodes",
        "2",
        "--no-optim-plots",
        "--seed",
        "0",
        "-params",
        *SMALL,
        cwd=tmp_path,
    )
    assert "Number of finished trials:  2" in out
    assert list((tmp_path / "logs" / "a3c").glob("report_CartPole-v1_2-trials-1500-tpe-median_*.csv"))


def test_async_q_sampler_and_converter() -> None:
    params = dict(
        learning_rate=3e-3,
        n_steps=8,
        one_minus_gamma=0.01,
        target_update_interval=1000,
        exploration_fraction=0.1,
        loss="huber",
        net_arch="tiny",
    )
    sampled = zoo.sample_async_q_params(optuna.trial.FixedTrial(params), 2, 2, {})
    assert sampled == zoo.convert_async_q_params(params)
    model = AsyncNStepQ("MlpPolicy", "CartPole-v1", n_workers=1, **sampled)
    assert (model.gamma, model.loss, model.target_update_interval) == (pytest.approx(0.99), "huber", 1000)
    assert [m.out_features for m in model.policy.q_net.q_net if hasattr(m, "out_features")] == [64, 2]


def test_ae_ddpg_sampler_and_converter() -> None:
    params = dict(learning_rate=3e-4, tau=0.005, batch_size=96, rho=0.2, updates_per_transition=0.5, learning_starts=1000)
    sampled = zoo.sample_ae_ddpg_params(optuna.trial.FixedTrial(params), 1, 2, {})
    assert sampled == zoo.convert_ae_ddpg_params(params)
    assert ALGOS["ae_ddpg"].sampler is hyperparams_opt.HYPERPARAMS_SAMPLER["ae_ddpg"]  # registered for -optimize
    model = AEDDPG("MlpPolicy", "Pendulum-v1", n_envs=1, pool_kwargs=dict(n_hosts=0), **sampled)
    assert (model.tau, model.batch_size, model.learning_starts, model.updates_per_transition) == (0.005, 96, 1000, 0.5)
    assert model.replay_buffer.rho == 0.2 and model.learning_rate == 3e-4
    model.env.close()


def test_trial_seconds_is_each_trials_training_budget(tmp_path: Path) -> None:
    """``-optimize --trial-seconds 2``: the trial trains for about 2 s of a 10⁸-step budget, then the policy it ends
    with is evaluated, and that evaluation is the trial's value."""
    out = run_cli(
        "sb3_async.train",
        *("--algo", "a3c", "--env", "CartPole-v1", "-optimize", "--n-trials", "1", "-n", "100000000"),
        *("--trial-seconds", "2", "--n-evaluations", "1", "--eval-episodes", "2", "--no-optim-plots", "--seed", "0"),
        *("--optimization-log-path", "trials", "-params", *SMALL),
        cwd=tmp_path,
    )
    assert "Number of finished trials:  1" in out
    with np.load(tmp_path / "trials" / "trial_0" / "evaluations.npz") as saved:
        steps, results = saved["timesteps"], saved["results"]
    assert len(steps) == 1 and 0 < steps[0] < 100_000_000  # one evaluation, where the budget stopped training
    value = float(out.split("Value:")[1].split()[0])
    assert value == pytest.approx(results[-1].mean())


def test_a_trial_budget_ends_with_one_evaluation_also_at_a_periodic_one() -> None:
    """The budget is spent at a step where the periodic evaluation falls too: the policy is evaluated once there,
    that evaluation is reported to the trial, and training stops."""
    from sb3_async.zoo.experiment import BudgetedTrialEvalCallback

    model = A3C("MlpPolicy", "CartPole-v1", n_workers=1, backend="serial", seed=0)
    eval_env = DummyVecEnv([lambda: gym.make("CartPole-v1")])
    trial = optuna.trial.FixedTrial({})
    callback = BudgetedTrialEvalCallback(eval_env, trial, n_eval_episodes=1, eval_freq=1, train_seconds=1e-9)
    model.learn(10_000, callback=callback)
    assert callback.eval_idx == 1 and callback.n_calls == 1 and model.num_timesteps < 10_000
    assert callback.eval_freq == 1 and callback.last_mean_reward > 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-optimize", "--trial-seconds", "0"], "Invalid --trial-seconds='0'"),
        (["-optimize", "--trial-seconds", "soon"], "Invalid --trial-seconds='soon'"),
        (["--trial-seconds", "30"], "pass -optimize too"),
    ],
)
def test_bad_trial_seconds(argv: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        zoo.run_zoo("train", ["--algo", "ae_ddpg", "--env", "Pendulum-v1", *argv])


@pytest.mark.parametrize("algo", ["async_one_step_q", "async_sarsa", "async_n_step_q"])
def test_async_q_train_optimize_and_enjoy_through_the_cli(algo: str, tmp_path: Path) -> None:
    run_cli("sb3_async.train", "--algo", algo, "--env", "CartPole-v1", "-n", "2000", "--seed", "0", "-params", *SMALL,
            cwd=tmp_path)  # fmt: skip
    assert (tmp_path / "logs" / algo / "CartPole-v1_1" / "CartPole-v1.zip").is_file()
    out = run_cli("sb3_async.enjoy", "--algo", algo, "--env", "CartPole-v1", "-n", "1200", "--no-render", cwd=tmp_path)
    assert "Mean reward:" in out or "Episodes" in out
    if algo == "async_n_step_q":
        out = run_cli("sb3_async.train", "--algo", algo, "--env", "CartPole-v1", "-optimize", "--n-trials", "2", "-n", "1500",
                      "--n-evaluations", "1", "--eval-episodes", "2", "--no-optim-plots", "--seed", "0", "-params", *SMALL,
                      cwd=tmp_path)  # fmt: skip
        assert "Number of finished trials:  2" in out


@pytest.mark.slow  # three CLI processes: 30-45 s on 2 busy cores (the build alone: test_entry_builds_its_model)
def test_pettingzoo_env_through_the_cli(tmp_path: Path) -> None:
    """A PettingZoo env named "<package>/<module>" (its arguments from the YAML's env_kwargs): the zoo builds its env
    copies, one slot per agent, for training and evaluation; the model is saved in the zoo's layout (the "/" becomes
    "-"), enjoy reads it back and plays one env copy, and -i continues its training."""
    pytest.importorskip("mpe2")
    out = run_cli(
        "sb3_async.train",
        *("--algo", "a3c", "--env", "mpe2/simple_spread_v3", "-n", "2000", "--seed", "1"),
        *("--eval-freq", "1000", "--eval-episodes", "3", "--save-freq", "1000"),
        *("-params", "n_envs:2", "n_workers:2", "n_envs_per_worker:1", "policy_kwargs:dict(net_arch=[32])"),
        cwd=tmp_path,
    )
    assert "env_kwargs={'max_cycles': 25}" in out
    assert out.count("Eval num_timesteps=") == 2  # --eval-freq counts the steps of all the slots
    run = tmp_path / "logs" / "a3c" / "mpe2-simple_spread_v3_1"
    for name in ("mpe2-simple_spread_v3.zip", "best_model.zip", "mpe2-simple_spread_v3/config.yml"):
        assert (run / name).is_file(), name
    assert len(list(run.glob("rl_model_*_steps.zip"))) == 2  # --save-freq too counts the steps of all the slots
    model = A3C.load(run / "mpe2-simple_spread_v3.zip")
    assert model.num_timesteps >= 2000 and model.n_envs == 2 * 3 and model.observation_space.shape == (18,)
    out = run_cli(
        "sb3_async.enjoy", *("--algo", "a3c", "--env", "mpe2/simple_spread_v3", "-n", "60", "--no-render"), cwd=tmp_path
    )
    assert "Episode Length 25" in out and "2 Episodes" in out and "Mean reward:" in out
    run_cli(  # continued training: -params count env copies, as for the first run
        "sb3_async.train",
        *("--algo", "a3c", "--env", "mpe2/simple_spread_v3", "-n", "500", "--seed", "1"),
        *("-i", str(run / "mpe2-simple_spread_v3.zip"), "-params", "n_envs:2", "n_workers:2", "n_envs_per_worker:1"),
        cwd=tmp_path,
    )
    model = A3C.load(tmp_path / "logs" / "a3c" / "mpe2-simple_spread_v3_2" / "mpe2-simple_spread_v3.zip")
    assert model.num_timesteps >= 2500 and (model.n_workers, model.n_envs_per_worker) == (2, 3)


MASKED_GAME = '''
import gymnasium as gym
import numpy as np


class LegalSubset(gym.Env):
    """Each step a random subset of 4 actions is legal; an illegal action raises (as a board game's rules would)."""

    observation_space = gym.spaces.Box(0.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(4)

    def _draw(self):
        self.legal = self.np_random.random(4) < 0.5
        self.legal[self.np_random.integers(4)] = True
        return self.legal.astype(np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._draw(), {}

    def step(self, action):
        if not self.legal[int(action)]:
            raise ValueError(f"illegal action {int(action)}")
        self.t += 1
        return self._draw(), float(action == 0), False, self.t >= 20, {}

    def action_masks(self):
        return self.legal.copy()


gym.register("LegalSubset-v0", entry_point=LegalSubset)
'''


def test_a_masked_env_trains_and_evaluates_with_its_masks_through_the_cli(tmp_path: Path) -> None:
    """The zoo's evaluations of an env with ``action_masks()`` use the masks (sb3-contrib's MaskableEvalCallback):
    the env raises on an illegal action, in training and evaluation alike."""
    (tmp_path / "masked_game.py").write_text(MASKED_GAME)
    (tmp_path / "masked.yml").write_text(
        "LegalSubset-v0:\n  policy: 'MlpPolicy'\n  n_envs: 2\n  n_workers: 2\n  n_envs_per_worker: 1\n  n_timesteps: 2000\n"
    )
    out = run_cli(
        "sb3_async.train",
        *("--algo", "async_n_step_q", "--env", "LegalSubset-v0", "--gym-packages", "masked_game"),
        *("-conf", "masked.yml", "--eval-freq", "1000", "--eval-episodes", "3", "--seed", "0"),
        cwd=tmp_path,
    )
    assert out.count("Eval num_timesteps=") == 2
    # enjoy passes the env's masks to predict (the zoo's loop passes none): an illegal action would raise
    out = run_cli(
        "sb3_async.enjoy",
        *("--algo", "async_n_step_q", "--env", "LegalSubset-v0", "--gym-packages", "masked_game"),
        *("-n", "100", "--no-render", "--deterministic"),
        cwd=tmp_path,
    )
    assert "Episode Reward" in out


def test_a_game_trains_from_the_cli_and_enjoy_plays_it(tmp_path: Path) -> None:
    """A turn-based PettingZoo game named by PettingZoo's registry: self-play training from a YAML entry, evaluated
    against a random legal player with its masks, then played by enjoy."""
    (tmp_path / "games.yml").write_text(
        "classic/tictactoe-v3:\n  policy: 'MlpPolicy'\n  n_envs: 4\n  n_workers: 2\n  n_envs_per_worker: 2\n"
        "  n_timesteps: 2000\n"
    )
    out = run_cli(
        "sb3_async.train",
        *("--algo", "async_n_step_q", "--env", "classic/tictactoe-v3", "-conf", "games.yml"),
        *("--eval-freq", "1000", "--eval-episodes", "4", "--seed", "0"),
        cwd=tmp_path,
    )
    assert out.count("Eval num_timesteps=") == 2
    model = AsyncNStepQ.load(tmp_path / "logs" / "async_n_step_q" / "classic-tictactoe-v3_1" / "classic-tictactoe-v3.zip")
    assert model.num_timesteps >= 2000 and model.observation_space.shape == (3, 3, 2)
    out = run_cli(
        "sb3_async.enjoy",
        *("--algo", "async_n_step_q", "--env", "classic/tictactoe-v3", "-n", "60", "--no-render"),
        cwd=tmp_path,
    )
    assert "Episode Reward" in out and "Mean reward:" in out


def test_the_opponent_hyperparameter_chooses_a_league_for_the_training_games(tmp_path: Path) -> None:
    """``opponent`` in a game's entry (here from ``--hyperparams``) is the training games' ``TurnBasedGame`` opponent,
    not an argument of the algorithm: a dict is an OpponentPool, whose snapshots the saved model's league keeps."""
    (tmp_path / "games.yml").write_text(
        "classic/tictactoe-v3:\n  policy: 'MlpPolicy'\n  n_envs: 2\n  n_workers: 2\n  n_envs_per_worker: 1\n"
        "  n_timesteps: 3000\n  opponent: 'random'\n"
    )
    run_cli(
        "sb3_async.train",
        *("--algo", "a3c", "--env", "classic/tictactoe-v3", "-conf", "games.yml", "--eval-freq", "-1", "--seed", "0"),
        *("--hyperparams", "opponent:dict(snapshot_interval=20,size=2)"),
        cwd=tmp_path,
    )
    model = A3C.load(tmp_path / "logs" / "a3c" / "classic-tictactoe-v3_1" / "classic-tictactoe-v3.zip")
    assert model.league is not None
    assert 1 <= len(model.league.snapshots) <= 4  # 2 workers keep 2 each
    assert sum(sum(results) for name, results in model.league.results.items() if name != "latest") > 0


def test_the_opponent_hyperparameter_is_refused_where_it_does_not_apply(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="opponent='league'.*gymnasium env"):
        zoo.experiment.zoo_opponent("league", None)
    with pytest.raises(ValueError, match="opponent='me'.*expected one of"):
        zoo.experiment.zoo_opponent("me", "classic/tictactoe-v3")
    with pytest.raises(ValueError, match="OpponentPool's arguments"):
        zoo.experiment.zoo_opponent({"every": 3}, "classic/tictactoe-v3")
    assert zoo.experiment.zoo_opponent({"size": 3}, "classic/tictactoe-v3").size == 3
    factory = PettingZooEnv("mpe2/simple_spread_v3", opponent="random")
    pytest.importorskip("mpe2")
    with pytest.raises(ValueError, match="opponent='random' for mpe2/simple_spread_v3.*not one"):
        factory()
