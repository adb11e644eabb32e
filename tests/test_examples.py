"""Each script of examples/ runs, with a tiny budget, as a user would run it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run_example(name: str, *args: str, cwd: Path) -> str:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert result.returncode == 0, f"{name} failed:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    return result.stdout


def test_cartpole_then_load_and_evaluate(tmp_path: Path) -> None:
    out = run_example(
        "a3c_cartpole.py",
        "--timesteps",
        "3000",
        "--n-workers",
        "1",
        "--n-envs-per-worker",
        "4",
        "--eval-episodes",
        "2",
        "--save-path",
        "model",
        cwd=tmp_path,
    )
    assert "evaluation over 2 episodes" in out
    assert (tmp_path / "model.zip").is_file()
    out = run_example("load_and_evaluate.py", "model.zip", "--env", "CartPole-v1", "--episodes", "3", cwd=tmp_path)
    assert "3 episodes: mean reward" in out
    assert int(out.split(" training steps")[0].split()[-1]) >= 3000


def test_pong_with_the_paper_settings(tmp_path: Path) -> None:
    out = run_example("a3c_pong.py", "--n-workers", "1", "--timesteps", "200", "--save-path", "pong", cwd=tmp_path)
    assert "Saved to pong.zip after" in out
    assert (tmp_path / "pong.zip").is_file()


def test_monitoring_runs_and_their_figures(tmp_path: Path) -> None:
    run_example("monitoring.py", "--a3c-timesteps", "30000", "--apex-timesteps", "4000", "--log-dir", "logs", cwd=tmp_path)
    from sb3_async.benchmark.tensorboard_plots import read_scalars

    runs = {path.name: read_scalars(path) for path in (tmp_path / "logs").iterdir()}
    assert sorted(runs) == ["a3c_2_workers_1", "a3c_8_workers_1", "apex_free_1", "apex_ratio_32_1"]
    assert "async/policy_lag_mean" in runs["a3c_8_workers_1"]
    assert "async/param_age_mean" in runs["apex_ratio_32_1"] and "async/replay_ratio" in runs["apex_free_1"]
    result = subprocess.run(
        [sys.executable, "-m", "sb3_async.benchmark", "--tensorboard", "logs", "--out", "figures"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(path.name for path in (tmp_path / "figures").iterdir()) == ["monitoring_a3c.png", "monitoring_apex.png"]
