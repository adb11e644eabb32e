"""``python -m sb3_async.benchmark --suite learners``: an update timed against its arithmetic alone."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from sb3_async.benchmark.learners import LEARNERS, measure_learner, table_of
from sb3_async.benchmark.tables import render_script


@pytest.fixture(autouse=True)
def _restore_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_an_update_is_timed_against_the_arithmetic_it_ran() -> None:
    learner = next(learner for learner in LEARNERS if learner.name == "A3C CartPole-v1")
    row = measure_learner(learner, seconds=0.05)
    assert row["update_ms"] > 0 and row["arithmetic_ms_1"] > 0 and row["arithmetic_ms_2"] > 0
    # the MLP's forward and backward: 3 layers' products forward, their input and weight gradients backward
    assert row["operators"] >= 6
    # 2 x batch x in x out per product of the policy's first layer alone: 2 * 40 * 4 * 64
    assert row["flops"] >= 2 * 40 * 4 * 64
    assert row["profile"] and all(0 <= entry["share"] <= 1 for entry in row["profile"])
    assert row["before_ms"] is None  # no speedup applies to this update
    record = {"learners": {learner.name: row}, "peak_gflops": {"1": 100.0, "2": 190.0}, "args": {"seconds": 0.05}}
    lines = render_script({**record, "table": table_of(record)})
    assert any(line.startswith("| A3C CartPole-v1 | none | = |") for line in lines)


def test_a_speedup_is_timed_against_the_update_without_it() -> None:
    learner = next(learner for learner in LEARNERS if learner.name == "A3C Pong")
    row = measure_learner(learner, seconds=0.05)
    assert row["speedups"] == "backward through the acting passes" and row["before_ms"] > 0
    # Mnih's network forward on one frame: 2 x (conv1 20*20*16 outputs x 8*8*4, conv2 9*9*32 x 4*4*16, 2592 x 256)
    forward = 2 * (400 * 16 * 256 + 81 * 32 * 256 + 2592 * 256)
    # through the acting passes: the segment's 40 frames' backward (about 1.5 forwards each: 8 envs x 5 steps, the
    # zoo entry's) without a forward pass (2.5 with it)
    assert 40 * forward < row["flops"] < 2 * 40 * forward
    record = {"learners": {learner.name: row}, "peak_gflops": {"1": 100.0, "2": 190.0}, "args": {"seconds": 0.05}}
    (line,) = [line for line in render_script({**record, "table": table_of(record)}) if line.startswith("| A3C Pong |")]
    cells = [cell.strip() for cell in line.strip("|").split("|")]
    assert cells[1] == row["speedups"] and float(cells[2]) == pytest.approx(row["before_ms"], abs=0.01)
    assert float(cells[8]) == pytest.approx(row["arithmetic_ms_1"] / row["before_ms"], abs=0.01)


def test_the_cli_writes_a_report_the_tables_render(tmp_path: Path) -> None:
    out = tmp_path / "learners"
    command = [sys.executable, "-m", "sb3_async.benchmark", "--suite", "learners", "--algos", "A3C CartPole"]
    result = subprocess.run([*command, "--budget-seconds", "0.05", "--out", str(out)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads((out / "results.json").read_text())
    assert list(record["learners"]) == ["A3C CartPole-v1"]
    report = [sys.executable, "-m", "sb3_async.benchmark", "--report", str(out), "--markdown", "--table", "script"]
    table = subprocess.run(report, capture_output=True, text=True, check=True).stdout
    assert "| A3C CartPole-v1 |" in table and "share of the limit" in table
