"""Throughput under contention: every algorithm's env steps per second (learning included) on an idle machine and
with two CPU-bound processes beside it (another training run, a test suite).

Each run is the benchmark tool's own runner (``python -m sb3_async.benchmark.run_one``) in a fresh process, with the
zoo settings of the algorithm for the task (``zoo_configs/`` for ours, the RL Zoo's shipped files for SB3's), a
wall-clock budget of ``--seconds`` and torch's threads left to the algorithm: ours choose them from the CPUs their
workers leave free (``torch_threads=None``), stock SB3 runs at torch's default. The rate is the runner's
``steps_per_second_after_startup`` (from the first callback step to the last). Conditions alternate per algorithm:
idle, then busy, ``--rounds`` times; the table gives medians and the ratio busy / idle.

Usage: ``python benchmarks/scripts/contention.py [--seconds 20] [--rounds 1] [--busy 2]
[--algos a3c,ae_ddpg,...] [--out benchmarks/results/contention]``
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from sb3_async.benchmark.registry import get_algorithm
from sb3_async.benchmark.suites import RunSpec

#: (algorithm, env) pairs: ours on the task of its learning test, and the stock SB3 peers it is raced against.
RUNS = {
    "a3c": "CartPole-v1",
    "async_one_step_q": "CartPole-v1",
    "async_sarsa": "CartPole-v1",
    "async_n_step_q": "CartPole-v1",
    "apex_dqn": "CartPole-v1",
    "apex_dpg": "Pendulum-v1",
    "ae_ddpg": "Pendulum-v1",
    "a2c": "CartPole-v1",
    "dqn": "CartPole-v1",
    "td3": "Pendulum-v1",
}


def busy_loop() -> None:
    while True:
        pass


def one_run(algo: str, env_id: str, seconds: float, workdir: Path) -> dict[str, Any]:
    entry = get_algorithm(algo)
    spec = RunSpec(
        suite="contention", run_id=f"{algo}-{env_id}", algo=algo, library=entry.library, env_id=env_id, seed=0,
        variant="default", params={}, axes={}, threshold=float("inf"), eval_interval=10**9, n_eval_episodes=1,
        max_steps=10**8, budget_seconds=seconds, stop_at_threshold=False, config=str(entry.config_path()),
        config_alias=entry.config_aliases.get(env_id), torch_threads=None,
    )  # fmt: skip
    spec_file, result_file = workdir / "spec.json", workdir / "result.json"
    spec_file.write_text(json.dumps(spec.to_dict()))
    command = [sys.executable, "-m", "sb3_async.benchmark.run_one", str(spec_file), str(result_file)]
    out = subprocess.run(command, capture_output=True, text=True, timeout=seconds * 10 + 300)
    record = json.loads(result_file.read_text())
    if out.returncode != 0 or record.get("error"):
        raise RuntimeError(f"{algo} on {env_id} failed:\n{record.get('error') or out.stderr[-3000:]}")
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20.0, help="training budget of each run")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--busy", type=int, default=2, help="CPU-bound processes beside the busy runs")
    parser.add_argument("--algos", default=",".join(RUNS))
    parser.add_argument("--out", default="benchmarks/results/contention")
    args = parser.parse_args()
    algos = args.algos.split(",")
    load = os.getloadavg()[0]
    rates: dict[str, dict[str, list[float]]] = {algo: {"idle": [], "busy": []} for algo in algos}
    records = []
    with tempfile.TemporaryDirectory(prefix="contention_") as tmp:
        for _ in range(args.rounds):
            for algo in algos:
                for condition in ("idle", "busy"):
                    hogs = []
                    if condition == "busy":
                        context = multiprocessing.get_context("fork")
                        hogs = [context.Process(target=busy_loop, daemon=True) for _ in range(args.busy)]
                        for hog in hogs:
                            hog.start()
                    try:
                        record = one_run(algo, RUNS[algo], args.seconds, Path(tmp))
                    finally:
                        for hog in hogs:
                            hog.kill()
                            hog.join()
                    rate = record["steps_per_second_after_startup"] or record["steps_per_second"]
                    rates[algo][condition].append(rate)
                    records.append(dict(algo=algo, env_id=RUNS[algo], condition=condition, steps_per_second=rate,
                                        env_steps=record["env_steps"], train_seconds=record["train_seconds"]))  # fmt: skip
                    print(algo, condition, round(rate), flush=True)
    lines = [
        "# Throughput under contention (benchmarks/scripts/contention.py)",
        "",
        f"Env steps per second with learning, after start-up, {args.seconds:.0f} s budget per run (zoo settings, seed 0),"
        f" idle and with {args.busy} CPU-bound processes beside the run; medians of {args.rounds} round(s). Ours choose"
        f" their torch threads from the CPUs their workers leave free; stock SB3 runs at torch's default."
        f" {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; load average at start"
        f" {load:.2f}.",
        "",
        "| algorithm | env | idle steps/s | busy steps/s | busy / idle |",
        "|---|---|---|---|---|",
    ]
    for algo in algos:
        idle, busy = statistics.median(rates[algo]["idle"]), statistics.median(rates[algo]["busy"])
        lines.append(f"| {algo} | {RUNS[algo]} | {idle:,.0f} | {busy:,.0f} | {busy / idle:.2f} |")
    lines += ["", f"Command: `python benchmarks/scripts/contention.py --seconds {args.seconds:g} --rounds {args.rounds}"
              f" --busy {args.busy}`", ""]  # fmt: skip
    text = "\n".join(lines)
    os.makedirs(args.out, exist_ok=True)
    Path(args.out, "results.json").write_text(json.dumps(dict(args=vars(args), load=load, runs=records), indent=1))
    Path(args.out, "README.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
