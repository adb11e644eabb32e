"""The benchmark tool: the ``smoke`` suite end to end through the CLI, the aggregation rules on hand-made records,
the suites' plans, the evaluation clock (evaluation off the clock, async workers parked), failures reported."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from stable_baselines3 import A2C
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecEnvWrapper

from sb3_async import A3C
from sb3_async.benchmark import registry, report, suites
from sb3_async.benchmark.__main__ import main
from sb3_async.benchmark.plots import curve_band, plot_results
from sb3_async.benchmark.run_one import EvalClock, true_num_timesteps, worker_overrides, zoo_entry
from sb3_async.benchmark.runner import Progress, RunWatch, execute, load_results, machine_info, merge_results
from sb3_async.benchmark.stats import group_stats, median_to_threshold, ratio, ratio_rows

REPO = Path(__file__).resolve().parents[2]

RECORD_FIELDS = {
    "algo", "library", "env", "seed", "hyperparameters", "hyperparameters_source", "seconds_to_threshold",
    "steps_to_threshold", "final_eval_mean", "final_eval_std", "steps_per_second", "peak_rss_mb", "curve", "error",
}  # fmt: skip


@pytest.fixture
def restore_registry() -> Any:
    algorithms, table = dict(registry._ALGORITHMS), dict(suites._SUITES)
    yield
    registry._ALGORITHMS.clear()
    registry._ALGORITHMS.update(algorithms)
    suites._SUITES.clear()
    suites._SUITES.update(table)


# --- the smoke suite, through the CLI --------------------------------------------------------------------------------


def test_smoke_suite_through_the_cli(tmp_path: Path) -> None:
    out = tmp_path / "smoke"
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "sb3_async.benchmark", "--suite", "smoke", "--eval-interval", "8000", "--out", str(out)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    elapsed = time.perf_counter() - start
    assert result.returncode == 0, f"stdout:\n{result.stdout[-3000:]}\nstderr:\n{result.stderr[-5000:]}"
    assert elapsed < 120, f"the smoke suite took {elapsed:.0f} s (must stay under 2 minutes)"
    assert "smoke" in result.stderr and "run" in result.stderr  # the progress bar

    results = json.loads((out / "results.json").read_text())
    assert results["suite"]["name"] == "smoke" and results["machine"]["cpu_count"] >= 1
    assert results["suite"]["eval_interval"] == 8000  # --eval-interval, where the suite's is 10 000
    runs = results["runs"]
    assert [(run["algo"], run["library"]) for run in runs] == [("a3c", "sb3_async"), ("a2c", "sb3")]
    a3c_config = yaml.safe_load((REPO / "zoo_configs" / "a3c.yml").read_text())["CartPole-v1"]
    for run in runs:
        assert set(run) >= RECORD_FIELDS, RECORD_FIELDS - set(run)
        assert run["error"] is None and run["env"] == "CartPole-v1" and run["seed"] == 0
        curve = run["curve"]
        assert curve, "no evaluation point"
        assert [p["steps"] for p in curve] == sorted(p["steps"] for p in curve)
        assert run["eval_interval"] == 8000 and all(p["steps"] >= 8000 for p in curve)
        assert [p["seconds"] for p in curve] == sorted(p["seconds"] for p in curve)
        assert run["final_eval_mean"] == curve[-1]["mean"] and run["final_eval_std"] == curve[-1]["std"]
        assert 0 < run["train_seconds"] <= run["budget_seconds"] + 15
        assert run["steps_per_second"] == pytest.approx(run["env_steps"] / run["train_seconds"])
        assert run["peak_rss_mb"] > 50
        hit = next((p for p in curve if p["mean"] >= 475), None)
        if hit is None:
            assert not run["reached"] and run["seconds_to_threshold"] is None and run["steps_to_threshold"] is None
            assert run["stop_reason"] in ("budget", "max_steps")
        else:  # reached at an interval's evaluation (stop there) or at the final one (after the budget)
            assert run["reached"] and hit is curve[-1]
            assert (run["seconds_to_threshold"], run["steps_to_threshold"]) == (hit["seconds"], hit["steps"])
    a3c, a2c = runs
    # hyperparameters as the zoo read them: ours from zoo_configs/a3c.yml, the peer from the zoo's a2c.yml
    assert a3c["hyperparameters_source"] == "a3c.yml:CartPole-v1" and a2c["hyperparameters_source"] == "a2c.yml:CartPole-v1"
    for key in ("n_workers", "n_envs_per_worker", "learning_rate", "ent_coef"):
        assert a3c["hyperparameters"][key] == a3c_config[key]
    assert a2c["hyperparameters"]["n_envs"] == 8 and "n_workers" not in a2c["hyperparameters"]
    if sys.platform.startswith("linux"):  # PSS: Linux only
        assert a3c["peak_rss_mb"] > a3c["peak_pss_mb"] > 0  # workers share pages: RSS counts them per process

    markdown = (out / "results.md").read_text()
    assert markdown.index("## Ratios") < markdown.index("## CartPole-v1")
    seconds = {run["algo"]: run["seconds_to_threshold"] for run in runs}
    expected = report.describe_ratio(seconds["a3c"], seconds["a2c"])
    assert f"| CartPole-v1 | a3c | a2c | **{expected}** |" in markdown
    assert "| a3c (sb3_async) |" in markdown and "| a2c (sb3) |" in markdown
    png = out / "CartPole-v1.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert "![CartPole-v1](CartPole-v1.png)" in markdown
    assert not (out / "logs").exists()


def test_cli_rejects_unknown_names_saying_what_is_accepted(capsys: pytest.CaptureFixture[str]) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "sb3_async.benchmark", "--suite", "nope"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2 and "Unknown suite 'nope': expected one of smoke, cartpole" in result.stderr
    with pytest.raises(SystemExit) as exit_info:
        main(["--suite", "cartpole", "--eval-interval", "0"])
    assert exit_info.value.code == 2 and "Invalid --eval-interval 0" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"Unknown suite 'nope': expected one of .*optimizers"):
        suites.get_suite("nope")
    with pytest.raises(ValueError, match=r"Unknown algorithm 'nope': expected one of a2c, a3c"):
        suites.plan_runs(suites.get_suite("cartpole"), algos=["a3c", "nope"])
    with pytest.raises(ValueError, match=r"'td3' is not benchmarked on CartPole-v1.*expected one of .*a2c"):
        suites.plan_runs(suites.get_suite("cartpole"), algos=["td3"])


# --- aggregation on hand-made records ----------------------------------------------------------------------------


def test_median_counts_not_reached_as_infinitely_slow() -> None:
    assert median_to_threshold([3.0, 1.0, 2.0]) == 2.0
    assert median_to_threshold([3.0, None, 1.0]) == 3.0  # one of three failed: still measured
    assert median_to_threshold([1.0, None, None]) is None  # two of three failed: n/r
    assert median_to_threshold([1.0, 3.0]) == 2.0
    assert median_to_threshold([1.0, None]) is None  # half failed (even count): n/r
    assert median_to_threshold([]) is None


def test_ratio_and_its_description() -> None:
    assert ratio(5.0, 20.0) == 0.25
    assert report.describe_ratio(5.0, 20.0) == "0.25"
    assert report.describe_ratio(None, 20.0) == "ours n/r"
    assert report.describe_ratio(5.0, None) == "peer n/r"
    assert report.describe_ratio(None, None) == "both n/r"


def _record(algo: str, seed: int, seconds: float | None, steps: int | None, final: float, **extra: Any) -> dict[str, Any]:
    library = "sb3_async" if algo == "a3c" else "sb3"
    curve = [dict(seconds=1.0, steps=1000, mean=10.0, std=1.0)]
    if seconds is not None:
        curve.append(dict(seconds=seconds, steps=steps, mean=final, std=0.0))
    record = dict(
        run_id=f"CartPole-v1-{algo}-s{seed}", suite="handmade", algo=algo, library=library, env="CartPole-v1", seed=seed,
        variant="default", axes={}, overrides={}, threshold=475.0, hyperparameters={}, hyperparameters_source=f"{algo}.yml:x",
        reached=seconds is not None, seconds_to_threshold=seconds, steps_to_threshold=steps, final_eval_mean=final,
        final_eval_std=2.0, env_steps=steps or 5000, train_seconds=seconds or 30.0, steps_per_second=1000.0 * (seed + 1),
        steps_per_second_after_startup=None, startup_seconds=1.0, peak_rss_mb=100.0 + seed, peak_pss_mb=None,
        stop_reason="threshold" if seconds is not None else "budget", curve=curve, error=None,
    )  # fmt: skip
    record.update(extra)
    return record


def _results(runs: list[dict[str, Any]], kind: str = "race", **suite: Any) -> dict[str, Any]:
    return dict(
        suite=dict(name="handmade", description="hand-made records", kind=kind, seeds=[0, 1, 2], eval_interval=1000,
                   n_eval_episodes=10, max_steps=None, budget_seconds=30, stop_at_threshold=True, device="cpu",
                   torch_threads=1, peers={"a3c": ["a2c"], "a2c": []}, **suite),
        command=["python", "-m", "sb3_async.benchmark", "--suite", "handmade"],
        created="2025-01-01T00:00:00+00:00",
        machine=dict(cpu_model="test cpu", usable_cpus=2, memory_gb=1.0, platform="test", python="3", versions={"x": "1"}),
        wall_seconds=12.0,
        runs=runs,
    )  # fmt: skip


def test_group_stats_and_ratio_rows_on_hand_made_records() -> None:
    runs = [
        _record("a3c", 0, 10.0, 100_000, 500.0),
        _record("a2c", 0, 40.0, 200_000, 480.0),
        _record("a3c", 1, None, None, 300.0),
        _record("a2c", 1, 20.0, 100_000, 490.0),
        _record("a3c", 2, 6.0, 80_000, 500.0),
        _record("a2c", 2, None, None, 100.0, error="Traceback: boom"),  # crashed: left out of the medians
    ]
    stats = {s.algo: s for s in group_stats(runs)}
    a3c, a2c = stats["a3c"], stats["a2c"]
    assert (a3c.runs, a3c.reached, a3c.errors) == (3, 2, 0)
    assert a3c.median_seconds == 10.0 and a3c.median_steps == 100_000  # median of (6, 10, inf)
    assert (a2c.runs, a2c.reached, a2c.errors) == (3, 2, 1)
    assert a2c.median_seconds == 30.0 and a2c.median_steps == 150_000  # the two that ran
    assert a3c.final_mean == 500.0 and a3c.final_means == [500.0, 300.0, 500.0]
    assert a3c.steps_per_second == 2000.0 and a3c.peak_rss_mb == 101.0
    (row,) = ratio_rows(list(stats.values()), {"a3c": ["a2c"]})
    assert row.ours is a3c and row.peer is a2c
    assert row.seconds_ratio == pytest.approx(10.0 / 30.0) and row.steps_ratio == pytest.approx(100_000 / 150_000)

    markdown = report.render_markdown(_results(runs))
    assert markdown.index("## Ratios") < markdown.index("## CartPole-v1") < markdown.index("## Protocol")
    assert "| CartPole-v1 | a3c | a2c | **0.33** | 0.67 | 2/3, 2/2 (1 crashed) |" in markdown
    assert "| a3c (sb3_async) | 0.33 vs a2c | 10.0 | 100,000 | 2/3 | 500.0 ± 2.0 |" in markdown
    assert "## Errors" in markdown and "`CartPole-v1-a2c-s2`: Traceback: boom" in markdown


def test_each_variant_of_ours_is_paired_with_the_default_peer() -> None:
    runs = [
        _record("a3c", 0, 10.0, 100_000, 500.0),
        _record("a3c", 0, 5.0, 50_000, 500.0, variant="lr 1e-3", run_id="x"),
        _record("a2c", 0, 40.0, 200_000, 480.0),
        _record("a2c", 0, 1.0, 1000, 480.0, variant="tuned", run_id="y"),  # a peer's variant is not a reference
    ]
    rows = ratio_rows(group_stats(runs), {"a3c": ["a2c"]})
    assert [(row.ours.label, row.peer.label, row.seconds_ratio) for row in rows] == [
        ("a3c", "a2c", 0.25),
        ("a3c lr 1e-3", "a2c", 0.125),
    ]
    assert "| CartPole-v1 | a3c lr 1e-3 | a2c | **0.12** | 0.25 |" in report.render_markdown(_results(runs))


def test_not_reached_is_shown_as_such() -> None:
    runs = [
        _record("a3c", 0, 10.0, 100_000, 500.0),
        _record("a3c", 1, None, None, 200.0),
        _record("a2c", 0, None, None, 100.0),
        _record("a2c", 1, None, None, 150.0),
    ]
    markdown = report.render_markdown(_results(runs))
    assert "| CartPole-v1 | a3c | a2c | **both n/r** | both n/r | 1/2, 0/2 |" in markdown
    assert "| a2c (sb3) | peer | n/r | n/r | 0/2 |" in markdown
    assert "counts as infinitely slow" in markdown


def test_merge_reads_invocations_of_one_protocol_as_one_table(tmp_path: Path) -> None:
    first = _results([_record("a3c", 0, 10.0, 100_000, 500.0), _record("a2c", 0, 40.0, 200_000, 480.0)])
    second = _results([_record("a3c", 1, 30.0, 150_000, 490.0), _record("a2c", 1, 20.0, 100_000, 490.0)])
    first["suite"]["seeds"], second["suite"]["seeds"] = [0], [1]
    second["command"] = [*second["command"], "--first-seed", "1"]
    second["machine"]["load_average_at_start"] = [0.5, 0.25, 0.125]
    merged = merge_results([first, second])
    assert merged["suite"]["seeds"] == [0, 1] and len(merged["runs"]) == 4 and merged["wall_seconds"] == 24.0
    stats = {s.algo: s for s in group_stats(merged["runs"])}
    assert stats["a3c"].median_seconds == 20.0 and stats["a2c"].median_seconds == 30.0  # medians over both parts
    markdown = report.render_markdown(merged)
    assert "merged from 2 invocations" in markdown and "--first-seed 1`" in markdown and "0.50, 0.25, 0.12" in markdown

    # through the CLI, and a merged result merges again (its parts stay flat)
    dirs = []
    for index, part in enumerate((first, second)):
        folder = tmp_path / f"part{index}"
        folder.mkdir()
        (folder / "results.json").write_text(json.dumps(part))
        dirs.append(str(folder))
    assert main(["--merge", *dirs, "--out", str(tmp_path / "merged"), "--no-plots"]) == 0
    assert load_results(tmp_path / "merged") == json.loads(json.dumps(merged))
    assert "merged from 2 invocations" in (tmp_path / "merged" / "results.md").read_text()
    third = _results([_record("a3c", 2, 5.0, 50_000, 500.0)])
    third["suite"]["seeds"] = [2]
    assert len(merge_results([merged, third])["parts"]) == 3

    other_budget = _results([])
    other_budget["suite"]["budget_seconds"] = 60
    with pytest.raises(ValueError, match="budget_seconds"):
        merge_results([first, other_budget])
    other_processor = _results([])
    other_processor["machine"]["cpu_id"] = "family 25, model 17, stepping 1"  # one brand string, another processor
    with pytest.raises(ValueError, match="cpu_id"):
        merge_results([first, other_processor])
    with pytest.raises(ValueError, match="more than one part"):
        merge_results([first, first])
    with pytest.raises(ValueError, match="at least two"):
        merge_results([first])
    with pytest.raises(SystemExit):
        main(["--merge", *dirs])  # no --out


def test_machine_record_names_the_processor_behind_its_brand_string(monkeypatch: pytest.MonkeyPatch) -> None:
    cpuinfo = "".join(
        f"processor\t: {index}\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: {model}\n"
        f"model name\t: AMD EPYC\nstepping\t: 1\n\n"
        for index, model in enumerate((17, 99))  # the first processor's fields, not the last's
    )
    real_read_text = Path.read_text

    def read_text(path: Path, *args: Any, **kwargs: Any) -> str:
        return cpuinfo if str(path) == "/proc/cpuinfo" else real_read_text(path, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", read_text)
    machine = machine_info()
    assert machine["cpu_model"] == "AMD EPYC" and machine["cpu_id"] == "family 25, model 17, stepping 1"
    results = _results([])
    results["machine"].update(cpu_model=machine["cpu_model"], cpu_id=machine["cpu_id"])
    assert "- machine: AMD EPYC (family 25, model 17, stepping 1), 2 usable cores" in report.render_markdown(results)
    cpuinfo = "model name\t: Some CPU\n"
    assert machine_info()["cpu_id"] is None  # no family and model: nothing made up


def test_scaling_and_sweep_reports_on_hand_made_records(tmp_path: Path) -> None:
    scaling = []
    for n, seconds, fps in ((1, 20.0, 5000.0), (2, 10.0, 9000.0), (4, None, 9500.0)):
        for seed in (0, 1):
            scaling.append(
                _record(
                    "a3c",
                    seed,
                    seconds,
                    None if seconds is None else 50_000,
                    500.0,
                    variant=f"{n} workers",
                    axes={"n_workers": n},
                    steps_per_second_after_startup=fps,
                )
            )
    markdown = report.render_markdown(_results(scaling, kind="scaling"))
    assert "| 1 | 5,000 | 1.00x | 20.0 | 1.00x |" in markdown
    assert "| 2 | 9,000 | 1.80x | 10.0 | 2.00x |" in markdown
    assert "| 4 | 9,500 | 1.90x | n/r | n/r |" in markdown

    sweep = []
    for lr, shared, sgd in ((1e-4, 100.0, 20.0), (1e-3, 500.0, 40.0), (1e-2, 480.0, 500.0)):
        for optimizer, score in (("shared_rmsprop", shared), ("sgd", sgd)):
            sweep.append(
                _record(
                    "a3c",
                    0,
                    None,
                    None,
                    score,
                    variant=f"{optimizer} lr={lr}",
                    axes={"optimizer": optimizer, "learning_rate": lr},
                )
            )
    results = _results(sweep, kind="sweep")
    markdown = report.render_markdown(results)
    assert "| shared_rmsprop | 480.0 | 360.0 | 2/3 | 500.0 |" in markdown
    assert "| sgd | 40.0 | 186.7 | 1/3 | 500.0 |" in markdown
    assert "| 0.001 | 500.0 | 40.0 |" in markdown

    for kind, runs in (("scaling", scaling), ("sweep", sweep)):
        written = report.write_report(_results(runs, kind=kind), tmp_path)
        assert (tmp_path / "results.md").is_file()
        pngs = [path for path in written if path.suffix == ".png"]
        assert pngs and all(path.read_bytes()[:4] == b"\x89PNG" for path in pngs)
        assert all(f"]({path.name})" in (tmp_path / "results.md").read_text() for path in pngs)
    assert set(plot_results(results, tmp_path)) == {"CartPole-v1-a3c-sweep"}


def test_curve_band_holds_each_seed_from_its_first_to_after_its_last_evaluation() -> None:
    curves = [
        [dict(steps=10, mean=1.0), dict(steps=20, mean=5.0)],  # stopped at 20 (threshold): holds 5 afterwards
        [dict(steps=10, mean=3.0), dict(steps=20, mean=2.0), dict(steps=30, mean=4.0)],
        [dict(steps=20, mean=0.0), dict(steps=30, mean=6.0)],  # first evaluation at 20
    ]
    x, median, low, high = curve_band(curves, "steps")
    assert x.tolist() == [10, 20, 30]
    assert median.tolist() == [2.0, 2.0, 5.0]
    assert low.tolist() == [1.0, 0.0, 4.0] and high.tolist() == [3.0, 5.0, 6.0]
    assert all(len(a) == 0 for a in curve_band([], "steps"))


# --- suites and registry ------------------------------------------------------------------------------------------


def test_runs_are_interleaved_and_carry_the_suite_settings() -> None:
    assert suites.select_algorithms(suites.get_suite("cartpole")) == [
        "a3c", "async_one_step_q", "async_sarsa", "async_n_step_q", "apex_dqn", "a2c", "dqn"
    ]  # fmt: skip
    runs = suites.plan_runs(suites.get_suite("cartpole"), algos=["a3c", "a2c"], seeds=2, budget_seconds=33)
    assert [(run.seed, run.algo) for run in runs] == [(0, "a3c"), (0, "a2c"), (1, "a3c"), (1, "a2c")]
    assert all(run.budget_seconds == 33 and run.threshold == 475 and run.eval_interval == 10_000 for run in runs)
    assert runs[0].config == str(REPO / "zoo_configs" / "a3c.yml")
    assert runs[1].config.endswith(os.path.join("rl_zoo3", "hyperparams", "a2c.yml"))
    assert suites.RunSpec.from_dict(json.loads(json.dumps(runs[0].to_dict()))) == runs[0]
    later = suites.plan_runs(suites.get_suite("cartpole"), algos=["a3c"], seeds=2, first_seed=3)
    assert [(run.seed, run.run_id) for run in later] == [(3, "CartPole-v1-a3c-s3"), (4, "CartPole-v1-a3c-s4")]
    with pytest.raises(ValueError, match="Invalid first_seed=-1"):
        suites.plan_runs(suites.get_suite("cartpole"), algos=["a3c"], first_seed=-1)
    hopper = suites.plan_runs(suites.get_suite("mujoco"), algos=["ae_ddpg", "td3"], seeds=1, envs=["Hopper-v5"])
    assert [run.run_id for run in hopper] == ["Hopper-v5-ae_ddpg-s0", "Hopper-v5-td3-s0"]
    assert hopper[1].config_alias == "Hopper-v4"
    with pytest.raises(ValueError, match="Invalid envs=.*'mujoco' runs HalfCheetah-v5, Hopper-v5"):
        suites.plan_runs(suites.get_suite("mujoco"), envs=["Pendulum-v1"])


def test_a_new_algorithm_joins_by_registering(restore_registry: None) -> None:
    registry.register_algorithm("my_async_q", "sb3_async", peers="dqn", envs=("CartPole-v1",), optimizers=("sgd",))
    ours = ["a3c", "async_one_step_q", "async_sarsa", "async_n_step_q", "apex_dqn", "my_async_q"]
    assert suites.select_algorithms(suites.get_suite("cartpole")) == [*ours, "a2c", "dqn"]
    assert suites.select_algorithms(suites.get_suite("smoke")) == ["a3c", "a2c"]  # the smoke suite stays a3c vs a2c
    assert "my_async_q" in {run.algo for run in suites.plan_runs(suites.get_suite("scaling"))}
    sweep = [run for run in suites.plan_runs(suites.get_suite("optimizers")) if run.algo == "my_async_q"]
    assert [run.params["optimizer"] for run in sweep] == ["sgd"] * len(suites.SWEEP_LEARNING_RATES)
    with pytest.raises(ValueError, match="Invalid library='nope'.*sb3_async, sb3"):
        registry.register_algorithm("x", "nope", envs=("CartPole-v1",))
    with pytest.raises(ValueError, match="Unknown env.*Nope-v0"):
        registry.register_algorithm("x", "sb3", envs=("Nope-v0",))


def test_scaling_and_optimizer_variants() -> None:
    scaling = suites.plan_runs(suites.get_suite("scaling"))
    assert {run.algo for run in scaling} == {"a3c", "async_one_step_q", "async_sarsa", "async_n_step_q", "apex_dqn"}  # no peer
    assert [run.params for run in scaling[:3]] == [{"n_workers": 1}, {"n_workers": 2}, {"n_workers": 4}]
    config = yaml.safe_load((REPO / "zoo_configs" / "a3c.yml").read_text())["CartPole-v1"]
    assert worker_overrides(config, {"n_workers": 4}) == {
        "n_workers": 4, "n_envs": 4 * config["n_envs_per_worker"], "n_envs_per_worker": config["n_envs_per_worker"]
    }  # fmt: skip
    assert worker_overrides({"n_envs": 16}, {"n_workers": 4}) == {"n_workers": 4, "n_envs": 4, "n_envs_per_worker": 1}
    assert worker_overrides(config, {"learning_rate": 1e-3}) == {"learning_rate": 1e-3}

    sweep = suites.plan_runs(suites.get_suite("optimizers"), algos=["a3c"])
    rates = suites.SWEEP_LEARNING_RATES
    assert len(rates) >= 6 and rates[0] == pytest.approx(1e-4) and rates[-1] == pytest.approx(1e-2)
    assert np.allclose(np.diff(np.log(rates)), np.log(100) / (len(rates) - 1), rtol=0.01)
    assert len(sweep) == 3 * len(rates) and {run.params["optimizer"] for run in sweep} == {"shared_rmsprop", "rmsprop", "sgd"}
    assert all(run.params["learning_rate"] == f"lin_{run.axes['learning_rate']!r}" for run in sweep)
    assert not any(run.stop_at_threshold for run in sweep)
    assert len({run.run_id for run in sweep}) == len(sweep)


# --- the evaluation clock --------------------------------------------------------------------------------------------


class _SlowResets(VecEnvWrapper):
    """Evaluation env that takes 0.2 s per reset and records the model's step count at every step."""

    def __init__(self, venv: Any, model: Any = None):
        super().__init__(venv)
        self.model, self.seen = model, []

    def reset(self) -> Any:
        time.sleep(0.2)
        return self.venv.reset()

    def step_wait(self) -> Any:
        if self.model is not None:
            self.seen.append(true_num_timesteps(self.model))
        return self.venv.step_wait()


def test_evaluation_time_is_off_the_clock() -> None:
    model = A2C("MlpPolicy", make_vec_env("CartPole-v1", 4, seed=0), n_steps=5, seed=0)
    eval_env = _SlowResets(make_vec_env("CartPole-v1", 1, seed=1))
    start = time.perf_counter()
    clock = EvalClock(
        eval_env, interval=400, n_episodes=2, threshold=math.inf, stop_at_threshold=True, budget_seconds=None, start=start
    )
    model.learn(1200, callback=clock)
    wall = time.perf_counter() - start
    assert [point["steps"] for point in clock.curve] == [400, 800, 1200]
    assert clock.eval_seconds >= 3 * 0.2 and clock.clock() == pytest.approx(wall - clock.eval_seconds, abs=0.05)
    assert all(point["seconds"] < clock.clock() for point in clock.curve)
    assert clock.reached is None and clock.stop_reason is None

    # reached at the first evaluation, not stopping, no evaluation after it (the final one is run_one's)
    clock = EvalClock(eval_env, 400, 2, -math.inf, False, None, time.perf_counter(), evaluate_after_threshold=False)
    model.learn(1200, callback=clock)
    assert [point["steps"] for point in clock.curve] == [400] and clock.reached == clock.curve[0]
    assert clock.stop_reason is None and model.num_timesteps == 1200


def test_async_workers_are_parked_during_evaluation_and_budget_stops() -> None:
    model = A3C("MlpPolicy", "CartPole-v1", n_workers=2, n_envs_per_worker=2, seed=0)
    eval_env = _SlowResets(make_vec_env("CartPole-v1", 1, seed=1), model)
    clock = EvalClock(
        eval_env,
        interval=2000,
        n_episodes=3,
        threshold=math.inf,
        stop_at_threshold=True,
        budget_seconds=None,
        start=time.perf_counter(),
    )
    evaluations: list[tuple[int, int]] = []

    def on_eval(point: dict[str, Any]) -> None:
        evaluations.append((int(point["steps"]), len(eval_env.seen)))
        if len(evaluations) == 2:
            clock.budget_seconds = 0.0  # stop at the next step: the budget path

    clock.on_eval = on_eval
    model.learn(1_000_000, callback=clock)
    assert len(evaluations) == 2 and clock.stop_reason == "budget"
    start = 0
    for steps, end in evaluations:
        during = eval_env.seen[start:end]
        assert during and set(during) == {steps}, "workers trained while the policy was evaluated"
        start = end
    assert clock.steps_at_stop is not None and clock.steps_at_stop >= evaluations[-1][0]


def test_zoo_entry_lookup_follows_the_zoo_and_aliases() -> None:
    a2c = registry.get_algorithm("a2c").config_path()
    key, entry = zoo_entry(a2c, "PongNoFrameskip-v4", None)
    assert key == "atari" and entry["frame_stack"] == 4
    key, entry = zoo_entry(a2c, "HalfCheetah-v5", registry.get_algorithm("a2c").config_aliases["HalfCheetah-v5"])
    assert key == "HalfCheetah-v4" and entry["normalize"] is True
    key, entry = zoo_entry(registry.get_algorithm("a3c").config_path(), "CartPole-v1", None)
    assert key == "CartPole-v1" and entry["n_workers"] == 2


def test_pong_suite_races_a3c_zoo_entry_as_written() -> None:
    """The published Pong race describes what ``python -m sb3_async.train --algo a3c --env PongNoFrameskip-v4``
    trains: the suite's A3C layout is the entry's own, so its overrides change nothing."""
    key, entry = zoo_entry(registry.get_algorithm("a3c").config_path(), "PongNoFrameskip-v4", None)
    (variant,) = suites.get_suite("pong").variants(registry.get_algorithm("a3c"))
    assert key == "PongNoFrameskip-v4"
    assert {name: entry[name] for name in variant.params} == variant.params == {
        "n_envs": 16, "n_workers": 2, "n_envs_per_worker": 8
    }  # fmt: skip


# --- failures are reported, not hidden ---------------------------------------------------------------------------


def test_a_failing_run_is_recorded_with_its_error(tmp_path: Path) -> None:
    (spec,) = [run for run in suites.plan_runs(suites.get_suite("smoke"), seeds=1) if run.algo == "a2c"]
    broken = suites.RunSpec.from_dict({**spec.to_dict(), "config": str(tmp_path / "missing.yml")})
    record = execute(broken, tmp_path, Progress(1, enabled=False, desc="test"), tmp_path / "logs")
    assert record["error"] and "missing.yml" in record["error"] and record["stop_reason"] == "error"
    assert record["seconds_to_threshold"] is None and record["curve"] == []
    assert (tmp_path / "logs" / f"{spec.run_id}.log").is_file()
    markdown = report.render_markdown(_results([record]))
    assert "## Errors" in markdown and spec.run_id in markdown


def test_a_run_past_its_limit_is_killed_and_keeps_its_evaluations(tmp_path: Path) -> None:
    (spec,) = [run for run in suites.plan_runs(suites.get_suite("smoke"), seeds=1) if run.algo == "a2c"]
    short = suites.RunSpec.from_dict({**spec.to_dict(), "budget_seconds": 0.5})
    start = time.monotonic()
    record = execute(short, tmp_path, Progress(1, enabled=False, desc="test"), tmp_path / "logs", timeout_margin=0.0)
    assert time.monotonic() - start < 60  # killed while it starts (imports alone take longer than 0.5 s)
    assert record["stop_reason"] == "error" and record["curve"] == []
    assert record["error"].splitlines()[-1].startswith("run killed: still running after its budget (0.5 s)")

    # the limit grows with the evaluations the run reports (off its training clock), which its record keeps
    watch = RunWatch(short, margin=10.0, start=100.0)
    assert not watch.overdue(110.4) and watch.overdue(110.6)
    for steps, mean in ((1000, 20.0), (2000, 480.0), (3000, 500.0)):
        event = dict(kind="eval", total=5000, eval_seconds=steps / 100, seconds=steps / 1000, steps=steps, mean=mean, std=1.0)
        watch.on_event(event)
    watch.on_event(dict(kind="start", total=5000))
    assert not watch.overdue(140.4) and watch.overdue(140.6)  # 0.5 + 30 s of evaluations + 10
    killed = watch.record("run killed", peer=None)
    assert [point["steps"] for point in killed["curve"]] == [1000, 2000, 3000] and killed["error"] == "run killed"
    assert killed["reached"] and killed["steps_to_threshold"] == 2000 and killed["seconds_to_threshold"] == 2.0
    assert killed["final_eval_mean"] is None  # no final evaluation was made: none is made up
    markdown = report.render_markdown(_results([killed]))
    assert "## Errors" in markdown and "run killed" in markdown


def test_envs_have_the_protocol_thresholds() -> None:
    thresholds = {env_id: entry.threshold for env_id, entry in registry.ENVS.items()}
    assert thresholds == {"CartPole-v1": 475, "LunarLander-v3": 200, "Pendulum-v1": -200, "HalfCheetah-v5": 3000,
                          "Hopper-v5": 3000, "Walker2d-v5": 3000, "PongNoFrameskip-v4": 18,
                          "CartPoleNoVel-v1": 475}  # fmt: skip
    algorithms = dict(registry._ALGORITHMS)
    try:
        external = set(registry.load_peers(REPO / "benchmarks" / "peers"))  # --peers-from benchmarks/peers
        for entry in registry.ALGORITHMS.values():
            assert set(entry.envs) <= set(registry.ENVS)
            assert entry.config_path().is_file(), entry
            for peer in entry.peers:  # every peer named is SB3's, or one of the repository's external peers
                assert registry.get_algorithm(peer).library == ("external" if peer in external else "sb3"), peer
    finally:
        registry._ALGORITHMS.clear()
        registry._ALGORITHMS.update(algorithms)
    assert not external & set(registry.ALGORITHMS)  # the package itself registers none of them


def test_suites_of_former_scripts_are_registered() -> None:
    """The AE-DDPG sample-efficiency questions and the Pong race are suites of the tool (no script registers them)."""
    efficiency = suites.plan_runs(suites.get_suite("ae_ddpg_sample_efficiency"), seeds=1)
    assert [(run.algo, run.params) for run in efficiency] == [
        (algo, {"learning_starts": n}) for algo in ("ae_ddpg", "ddpg") for n in (1000, 10_000)
    ]  # fmt: skip
    assert all(run.eval_interval == 1000 and run.threshold == -200 for run in efficiency)
    cheetah = suites.plan_runs(suites.get_suite("ae_ddpg_halfcheetah_sample_efficiency"), seeds=1)
    assert [run.algo for run in cheetah] == ["ae_ddpg", "ddpg"] and cheetah[1].config_alias == "HalfCheetah-v4"
    updates = suites.plan_runs(suites.get_suite("ae_ddpg_halfcheetah_updates"), algos=["ae_ddpg", "ddpg"], seeds=1)
    assert [(run.algo, run.params) for run in updates] == [
        ("ae_ddpg", {"updates_per_transition": 2.0}), ("ae_ddpg", {"updates_per_transition": 4.0}), ("ddpg", {})
    ]  # fmt: skip
    pong = suites.get_suite("pong")
    assert (pong.envs, pong.eval_interval, pong.kind) == (("PongNoFrameskip-v4",), 250_000, "race")
    assert suites.select_algorithms(pong, ["a3c", "a2c"]) == ["a3c", "a2c"]  # SB3's A2C when named
