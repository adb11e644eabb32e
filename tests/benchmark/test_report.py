"""The published tables (``--report DIR... --markdown --table KIND``), the generated blocks of the pages
(``--sync-docs``) and the per-run-protocol merge, on hand-made records: no training."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from sb3_async.benchmark import published, tables
from sb3_async.benchmark.__main__ import main
from sb3_async.benchmark.merging import merge_per_run
from sb3_async.benchmark.report import render_markdown


def _record(
    algo: str, seed: int, seconds: float | None, final: float, env: str = "CartPole-v1", **extra: Any
) -> dict[str, Any]:
    library = "sb3_async" if algo in ("a3c", "ae_ddpg") else "sb3"
    return dict(
        run_id=f"{env}-{algo}-{seed}", algo=algo, library=library, env=env, seed=seed, variant="default", axes={},
        threshold=475.0, reached=seconds is not None, seconds_to_threshold=seconds,
        steps_to_threshold=None if seconds is None else seconds * 1000, final_eval_mean=final, final_eval_std=1.0,
        env_steps=10_000, train_seconds=seconds or 30.0, steps_per_second=1000.0, peak_rss_mb=100.0, curve=[],
        error=None, eval_interval=1000, budget_seconds=30.0, hyperparameters_source=f"{algo}.yml", **extra,
    )  # fmt: skip


def _results(runs: list[dict[str, Any]], stop_at_threshold: bool = True, **suite: Any) -> dict[str, Any]:
    base = dict(
        name="handmade", description="hand-made records", kind="race", seeds=[0, 1, 2], eval_interval=1000,
        n_eval_episodes=10, max_steps=None, budget_seconds=30.0, stop_at_threshold=stop_at_threshold, device="cpu",
        torch_threads=1, peers={"a3c": ["a2c", "ppo"], "ae_ddpg": ["td3"]},
    )  # fmt: skip
    base.update(suite)
    return dict(
        suite=base,
        command=["python", "-m", "sb3_async.benchmark", "--suite", "handmade"],
        created="2026-01-01T00:00:00+00:00",
        machine=dict(cpu_model="test cpu", usable_cpus=2, memory_gb=1.0, platform="test", python="3", versions={"x": "1"}),
        wall_seconds=12.0,
        runs=runs,
    )


RACE = _results(
    [
        *(_record("a3c", seed, seconds, 490.0) for seed, seconds in enumerate((10.0, 12.0, None))),
        *(_record("a2c", seed, seconds, 480.0) for seed, seconds in enumerate((20.0, 40.0, 30.0))),
        *(_record("ppo", seed, seconds, 480.0) for seed, seconds in enumerate((5.0, 6.0, 7.0))),
    ]
)


def _write(folder: Path, results: dict[str, Any]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.json").write_text(json.dumps(results))
    return folder


def test_ratios_table_pairs_ours_with_each_peer() -> None:
    text = tables.render_results([RACE], "ratios")
    lines = text.splitlines()
    assert lines[0].startswith("| env (threshold) | ours | peer |")
    assert "| CartPole-v1 (475) | a3c | a2c | 12.0 s | 30.0 s | **0.40** |" in text
    assert "| CartPole-v1 (475) | a3c | ppo | 12.0 s | 6.0 s | **2.00** |" in text  # a loss shows as such
    assert text.endswith("|\n") and "2/3, 3/3" in text


def test_envs_and_score_tables() -> None:
    envs = tables.render_results([RACE], "envs")
    assert "| CartPole-v1 (475) | a3c | sb3_async | 12.0 s | 12,000 | 2/3 | 490.0 | 1,000 |" in envs
    budget = _results([_record("ae_ddpg", 0, None, 900.0), _record("td3", 0, None, 1200.0)], stop_at_threshold=False)
    score = tables.render_results([budget])  # the default table of a fixed-budget race
    rows = score.splitlines()[2:]
    assert rows[0].startswith("| CartPole-v1 | td3 | sb3 | 30 s | **1,200** |")  # best first, in bold
    assert rows[1].startswith("| CartPole-v1 | ae_ddpg | sb3_async | 30 s | 900 |")


def test_summary_keeps_the_toughest_peer_and_shows_losses() -> None:
    budget = _results([_record("ae_ddpg", 0, None, 900.0), _record("td3", 0, None, 1200.0)], stop_at_threshold=False)
    text = tables.render_results([RACE, budget], "summary")
    assert (
        "| CartPole-v1: time to 475 | a3c | ppo | 12.0 s (2/3) | 6.0 s (3/3) | 2.00 | no | test cpu, 2 cores, 2026-01-01 |"
        in text
    )
    assert "| a3c | a2c |" not in text  # one row per (task, ours)
    assert "| CartPole-v1: score after 30 s | ae_ddpg | td3 | 900 | 1,200 | 0.75 | no |" in text


def test_one_folder_kinds_refuse_several_folders_and_unknown_kinds() -> None:
    with pytest.raises(ValueError, match="one results folder"):
        tables.render_results([RACE, RACE], "ratios")
    with pytest.raises(ValueError, match="Invalid table"):
        tables.render_results([RACE], "pie")


def test_cli_markdown_prints_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _write(tmp_path / "race", RACE)
    assert main(["--report", str(folder), "--markdown", "--table", "ratios"]) == 0
    assert capsys.readouterr().out == tables.render_results([RACE], "ratios")
    assert sorted(path.name for path in folder.iterdir()) == ["results.json"]
    assert main(["--report", str(folder), str(folder), "--markdown", "--table", "summary"]) == 0
    assert "| CartPole-v1: time to 475 | a3c | ppo |" in capsys.readouterr().out


SCRIPT = {
    "command": "python benchmarks/scripts/some_race.py --out benchmarks/results/some_race",
    "created": "2026-12-01T10:00:00",
    "machine": {"cpus": 2},
    "rates": {"a": [1.0, 2.0]},
    "table": {"title": "A race", "columns": ["engine", "steps/s"], "rows": [["a", "1,500"], ["b", 2]], "notes": "Medians."},
}


def test_script_table_renders_the_stored_table_and_refuses_bad_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = "**A race**\n\n| engine | steps/s |\n|---|---|\n| a | 1,500 |\n| b | 2 |\n\nMedians.\n"
    assert tables.render_results([SCRIPT], "script") == expected
    assert tables.render_results([SCRIPT]) == expected  # a folder without a suite publishes its script's table
    folder = _write(tmp_path / "some_race", SCRIPT)
    assert main(["--report", str(folder), "--markdown", "--table", "script"]) == 0
    assert capsys.readouterr().out == expected
    beside = tmp_path / "some_race" / "other_script.json"  # a second script's table in the same folder
    beside.write_text(json.dumps({**SCRIPT, "table": {**SCRIPT["table"], "title": "Another race"}}))
    assert main(["--report", str(beside), "--markdown", "--table", "script"]) == 0
    assert capsys.readouterr().out == expected.replace("A race", "Another race")
    with pytest.raises(SystemExit):
        main(["--report", str(beside)])  # results.md and plots are written for a folder only
    with pytest.raises(ValueError, match="No 'table'"):
        tables.render_results([RACE], "script")
    with pytest.raises(ValueError, match="2 cells"):
        tables.render_results([{**SCRIPT, "table": {**SCRIPT["table"], "rows": [["a"]]}}], "script")
    with pytest.raises(ValueError, match="--algos"):
        tables.render_results([SCRIPT], "script", algos=["a3c"])


def _page(command: str) -> str:
    return f"# Page\n\nIntro.\n\n<!-- generated: {command} -->\n| stale |\n<!-- end generated -->\n\nAfter.\n"


def test_sync_docs_rewrites_blocks_and_check_finds_hand_edits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path / "results" / "race", RACE)
    (tmp_path / "docs").mkdir()
    page = tmp_path / "docs" / "page.md"
    page.write_text(_page("--report results/race --markdown --table ratios"))
    assert published.check_docs(tmp_path)  # stale
    monkeypatch.chdir(tmp_path)
    assert main(["--sync-docs"]) == 0
    synced = page.read_text()
    assert "| stale |" not in synced and "**0.40**" in synced and synced.endswith("After.\n")
    assert published.check_docs(tmp_path) == []
    page.write_text(synced.replace("**0.40**", "**0.39**"))
    (problem,) = published.check_docs(tmp_path)
    line = synced.splitlines().index(next(row for row in synced.splitlines() if "**0.40**" in row)) + 1
    assert problem.startswith(f"{page}:{line}: ") and "**0.39**" in problem and "**0.40**" in problem


def test_blocks_must_close_and_name_a_report_command(tmp_path: Path) -> None:
    path = tmp_path / "page.md"
    with pytest.raises(ValueError, match="not closed"):
        list(published.find_blocks(path, ["<!-- generated: --report x --markdown -->", "| a |"]))
    with pytest.raises(ValueError, match="without its"):
        list(published.find_blocks(path, ["| a |", "<!-- end generated -->"]))
    with pytest.raises(ValueError, match="Invalid generated command"):
        published.render_command("--suite cartpole", tmp_path)


def test_merge_per_run_lets_interval_and_budget_differ() -> None:
    first = _results([_record("a3c", 0, 10.0, 490.0)])
    second = _results([_record("a2c", 0, 20.0, 480.0)], eval_interval=5000, budget_seconds=60.0)
    merged = merge_per_run([first, second])
    assert merged["suite"]["per_run"] == {"eval_interval": [1000, 5000], "budget_seconds": [30.0, 60.0]}
    assert merged["suite"]["eval_interval"] is None and len(merged["runs"]) == 2 and len(merged["parts"]) == 2
    markdown = render_markdown(merged)
    assert "every 1,000 env steps or 5,000 env steps (per run" in markdown and "after 30 or 60 (per run" in markdown
    other_host = copy.deepcopy(second)
    other_host["machine"]["cpu_model"] = "another cpu"
    with pytest.raises(ValueError, match="cpu_model"):
        merge_per_run([first, other_host])


def test_merge_per_run_supersede_keeps_the_later_run_of_an_id() -> None:
    old = _results([_record("a3c", 0, 10.0, 400.0), _record("a2c", 0, 20.0, 480.0)])
    new = _results([_record("a3c", 0, 8.0, 495.0)], budget_seconds=60.0)
    with pytest.raises(ValueError, match="more than one part"):
        merge_per_run([old, new])
    merged = merge_per_run([old, new], supersede=True)
    assert merged["superseded"] == ["CartPole-v1-a3c-0"]
    assert [(run["algo"], run["final_eval_mean"]) for run in merged["runs"]] == [("a2c", 480.0), ("a3c", 495.0)]
    assert "runs replaced by a later part's run of the same id: CartPole-v1-a3c-0" in render_markdown(merged)


def test_summary_counts_only_races_of_the_newest_entry() -> None:
    def entry(records: list[dict[str, Any]], n_timesteps: int) -> list[dict[str, Any]]:
        return [{**record, "hyperparameters": {"n_timesteps": n_timesteps}} for record in records]

    old = _results(entry([_record("a3c", 0, None, 100.0), _record("a2c", 0, 20.0, 480.0)], 1000))
    new = _results(entry([_record("a3c", 0, 5.0, 490.0), _record("ppo", 0, 10.0, 480.0)], 2000))
    new["created"] = "2026-02-01T00:00:00+00:00"
    text = tables.render_results([old, new], "summary")
    assert "| CartPole-v1: time to 475 | a3c | ppo | 5.0 s (1/1) | 10.0 s (1/1) | 0.50 | yes |" in text
    assert "| a2c |" not in text  # the race of the older entry, lost, does not describe today's entry
    assert "Raced only against an earlier entry of ours, so not shown: a3c against a2c on CartPole-v1." in text
    same_entry = _results(entry([_record("a3c", 0, None, 100.0), _record("a2c", 0, 20.0, 480.0)], 2000))
    assert "| a3c | a2c | n/r (1/1) |" not in tables.render_results([same_entry, new], "summary")
    assert "| a3c | a2c |" in tables.render_results([same_entry, new], "summary")  # a loss of today's entry shows


def test_summary_says_where_each_row_was_measured_and_when_hosts_differ() -> None:
    other = copy.deepcopy(RACE)
    other["machine"]["cpu_model"] = "other cpu"
    budget = _results([_record("ae_ddpg", 0, None, 900.0), _record("td3", 0, None, 1200.0)], stop_at_threshold=False)
    assert "kinds of host" not in tables.render_results([RACE, budget], "summary")
    text = tables.render_results([other, budget], "summary")
    assert "| 2.00 | no | other cpu, 2 cores, 2026-01-01 |" in text and "| 0.75 | no | test cpu, 2 cores, 2026-01-01 |" in text
    assert "The rows were measured on 2 kinds of host (other cpu, 2 cores; test cpu, 2 cores)" in text


def test_algos_keep_their_rows_and_their_peers() -> None:
    text = tables.render_results([RACE], "envs", algos=["a3c"])
    assert "| a3c |" in text and "| a2c |" in text and "| ppo |" in text
    with pytest.raises(ValueError, match="None of ae_ddpg"):
        tables.render_results([RACE], "envs", algos=["ae_ddpg"])
