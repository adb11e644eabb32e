"""The ``final_policy`` benchmark suite: its plan, and its report on hand-made records (no process started)."""

from __future__ import annotations

from typing import Any

from sb3_async.benchmark import report, suites
from sb3_async.benchmark.stats import best_evaluation


def _record(algo: str, seed: int, final: float, curve_means: list[float], train_seconds: float) -> dict[str, Any]:
    library = "sb3" if algo == "dqn" else "sb3_async"
    curve = [dict(seconds=float(i + 1), steps=1000 * (i + 1), mean=mean, std=0.0) for i, mean in enumerate(curve_means)]
    reached = next((point for point in curve if point["mean"] >= 475), None)
    return dict(
        run_id=f"CartPole-v1-{algo}-s{seed}", suite="final_policy", algo=algo, library=library, env="CartPole-v1",
        seed=seed, variant="default", axes={}, overrides={}, threshold=475.0, hyperparameters={},
        hyperparameters_source=f"{algo}.yml:CartPole-v1", reached=reached is not None,
        seconds_to_threshold=None if reached is None else reached["seconds"],
        steps_to_threshold=None if reached is None else reached["steps"], final_eval_mean=curve_means[-1],
        final_eval_std=0.0, env_steps=1000 * len(curve_means), train_seconds=train_seconds, steps_per_second=1000.0,
        steps_per_second_after_startup=None, startup_seconds=1.0, peak_rss_mb=100.0, peak_pss_mb=None,
        stop_reason="max_steps", curve=curve, final_policy=dict(mean=final, std=1.0, rewards=[final]), error=None,
    )  # fmt: skip


def _results(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return dict(
        suite=dict(name="final_policy", description="hand-made records", kind="final", seeds=[0, 1], eval_interval=10_000,
                   n_eval_episodes=10, max_steps=None, budget_seconds=None, stop_at_threshold=False, device="cpu",
                   torch_threads=1, peers={"async_n_step_q": ["dqn"], "dqn": []}, evals_per_run=10,
                   final_eval_episodes=20),
        command=["python", "-m", "sb3_async.benchmark", "--suite", "final_policy"],
        created="2025-01-01T00:00:00+00:00",
        machine=dict(cpu_model="test cpu", usable_cpus=2, memory_gb=1.0, platform="test", python="3", versions={"x": "1"}),
        wall_seconds=12.0,
        runs=runs,
    )  # fmt: skip


def test_final_policy_suite_plan() -> None:
    suite = suites.get_suite("final_policy")
    assert suite.kind == "final" and not suite.stop_at_threshold and suite.budget_seconds is None
    runs = suites.plan_runs(suite)
    algos = list(dict.fromkeys(run.algo for run in runs))
    assert algos == ["async_one_step_q", "async_sarsa", "async_n_step_q", "dqn"]
    assert {run.seed for run in runs} == set(range(5))
    assert all(run.evals_per_run == 10 and run.final_eval_episodes == 20 and run.max_steps is None for run in runs)


def test_best_evaluation_is_the_first_highest() -> None:
    run = _record("dqn", 0, 100.0, [10.0, 300.0, 120.0, 300.0], 5.0)
    assert best_evaluation(run) == run["curve"][1]
    assert best_evaluation(dict(curve=[])) is None


def test_final_report_puts_the_final_policy_next_to_the_best_evaluation() -> None:
    runs = [
        _record("async_n_step_q", 0, 500.0, [100.0, 500.0, 480.0], 20.0),
        _record("dqn", 0, 120.0, [50.0, 480.0, 100.0], 100.0),
        _record("async_n_step_q", 1, 410.0, [200.0, 300.0, 490.0], 30.0),
        _record("dqn", 1, 500.0, [60.0, 500.0, 500.0], 80.0),
    ]
    markdown = report.render_markdown(_results(runs))
    assert markdown.index("## CartPole-v1: the final policy") < markdown.index("## Protocol")
    # median final (500, 410) = 455, worst 410, 1 seed >= 475, 2 >= 400, median best (500, 490) = 495,
    # median time to threshold (2, 3) = 2.5 s, median training (20, 30) = 25 s, against DQN's 90 s
    assert "| async_n_step_q (sb3_async) | 455.0 | 410.0 | 1/2 | 2/2 | 495.0 | 2.5 | 25.0 | 0.28 vs dqn | 1,000 |" in markdown
    assert "| dqn (sb3) | 310.0 | 120.0 | 1/2 | 1/2 | 490.0 | 2.0 | 90.0 | — | 1,000 |" in markdown
    assert "| async_n_step_q | 1 | 410.0 ± 1.0 | 490.0 at 3,000 | 490.0 | 3.0 | 30.0 | 3,000 |" in markdown
    assert "| dqn | 0 | 120.0 ± 1.0 | 480.0 at 2,000 | 100.0 | 2.0 | 100.0 | 3,000 |" in markdown
    assert "every n_timesteps / 10 env steps" in markdown
