"""Runs a suite: every run in a fresh process, one after the other, with a progress bar; writes ``results.json``.

Each run is ``python -m sb3_async.benchmark.run_one`` in its own process (an external peer's: its adapter,
``PYTHON ADAPTER.py`` or ``PYTHON -m ADAPTER``, under the interpreter of the peer's own environment), so that every
algorithm pays its own process start-up and memory is measured for that run alone. Runs are sequential (they share the
same cores and nothing else runs beside them) and interleaved by :func:`sb3_async.benchmark.plan.plan_runs`.
``results.json`` is rewritten after every run, so an interrupted suite keeps what it measured.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil

from sb3_async.benchmark.plan import REPO_ROOT, RunSpec, Suite, plan_runs
from sb3_async.benchmark.records import EVENT_PREFIX, failed_record
from sb3_async.benchmark.registry import ENVS, is_adapter_file, peers_of
from sb3_async.common.torch_utils import usable_cpus
from sb3_async.runtime.processes import Launcher

#: Extra seconds a run may take beyond its budget and the evaluations it reported (process start-up, the evaluation in
#: progress, worker shutdown) before it is killed.
TIMEOUT_MARGIN_SECONDS = 600.0


class RunWatch:
    """What the runner knows of a run in progress from its events: the evaluations it reported and when it is overdue.

    Evaluations are off the training clock, so the wall-clock limit is the budget, plus the evaluation seconds the run
    reported, plus ``margin``. A run killed or failed keeps the evaluations it reported (:meth:`record`).

    :param spec: the run
    :param margin: seconds beyond the budget and the reported evaluations
    :param start: ``time.monotonic()`` when the run's process started
    """

    def __init__(self, spec: RunSpec, margin: float, start: float):
        self.spec, self.margin, self.start = spec, margin, start
        self.curve: list[dict[str, float]] = []
        self.eval_seconds = 0.0

    def on_event(self, event: dict[str, Any]) -> None:
        if event.get("kind") == "eval":
            self.curve.append({key: float(event[key]) for key in ("seconds", "steps", "mean", "std")})
            self.curve[-1]["steps"] = int(event["steps"])
            self.eval_seconds = float(event.get("eval_seconds", self.eval_seconds))

    def overdue(self, now: float) -> bool:
        if self.spec.budget_seconds is None:
            return False
        return now - self.start > self.spec.budget_seconds + self.eval_seconds + self.margin

    def describe_limit(self) -> str:
        return (
            f"still running after its budget ({self.spec.budget_seconds:g} s), its evaluations ({self.eval_seconds:.0f} s"
            f" in {len(self.curve)}, kept in its curve) and {self.margin:g} s more"
        )

    def record(self, error: str, peer: dict[str, Any] | None) -> dict[str, Any]:
        """The failed record of the run, with the evaluations it reported (and the threshold, if one reached it)."""
        record = failed_record(spec=self.spec, error=error) | ({"peer": peer} if peer else {})
        record["curve"] = list(self.curve)
        reached = next((point for point in self.curve if point["mean"] >= self.spec.threshold), None)
        if reached is not None:
            record.update(reached=True, seconds_to_threshold=reached["seconds"], steps_to_threshold=reached["steps"])
        return record


def machine_info() -> dict[str, Any]:
    """The machine and the software the results were measured with."""
    cpu_model, cpu_id = platform.processor(), None
    try:
        cpuinfo = _first_processor(Path("/proc/cpuinfo").read_text())
    except OSError:
        cpuinfo = {}
    cpu_model = cpuinfo.get("model name", cpu_model)
    if "cpu family" in cpuinfo and "model" in cpuinfo:
        # virtual machines often show one brand string ("AMD EPYC") for processors of different speeds
        cpu_id = f"family {cpuinfo['cpu family']}, model {cpuinfo['model']}, stepping {cpuinfo.get('stepping', '?')}"
    versions: dict[str, str | None] = {}
    for package in ("sb3-async", "stable-baselines3", "rl_zoo3", "torch", "gymnasium", "numpy"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return dict(
        cpu_model=cpu_model,
        cpu_id=cpu_id,
        cpu_count=os.cpu_count(),
        usable_cpus=usable_cpus(),
        memory_gb=round(psutil.virtual_memory().total / 2**30, 1),
        platform=platform.platform(),
        python=platform.python_version(),
        versions=versions,
        git_commit=_git_commit(),
        load_average_at_start=list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    )


def _first_processor(cpuinfo: str) -> dict[str, str]:
    """The ``key: value`` fields of the first processor in the text of ``/proc/cpuinfo``."""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        if not line.strip():
            if fields:
                break
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def _git_commit() -> str | None:
    repo = Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if commit.returncode != 0:
        return None
    return commit.stdout.strip() + (" (with uncommitted changes)" if dirty.stdout.strip() else "")


def suite_info(suite: Suite, runs: Sequence[RunSpec]) -> dict[str, Any]:
    """The protocol of this invocation, as run (after the command line's overrides)."""
    first = runs[0]
    algos = list(dict.fromkeys(run.algo for run in runs))
    intervals = sorted({run.eval_interval for run in runs})
    # per algorithm (the suite's eval_intervals): recorded as merged parts record theirs, each run's value in its record
    per_run = {"per_run": {"eval_interval": intervals}} if len(intervals) > 1 else {}
    return dict(
        name=suite.name,
        description=suite.description,
        kind=suite.kind,
        envs={env_id: dict(threshold=ENVS[env_id].threshold) for env_id in suite.envs},
        algos=algos,
        peers={algo: [peer for peer in peers_of(algo) if peer in algos] for algo in algos},
        seeds=sorted({run.seed for run in runs}),
        eval_interval=None if per_run else first.eval_interval,
        n_eval_episodes=suite.n_eval_episodes,
        deterministic_eval=True,
        max_steps=suite.max_steps,
        budget_seconds=first.budget_seconds,
        stop_at_threshold=suite.stop_at_threshold,
        device=first.device,
        torch_threads=first.torch_threads,
        evals_per_run=suite.evals_per_run,
        final_eval_episodes=suite.final_eval_episodes,
        peer_pythons={run.algo: run.python for run in runs if run.python is not None},
        **per_run,
    )


def run_command(spec: RunSpec, spec_path: Path, result_path: Path) -> tuple[list[str], dict[str, str]]:
    """The command line and environment variables of a run. An external peer runs its adapter under its own
    interpreter, with this checkout first on ``PYTHONPATH`` (the adapter imports the protocol from it; the peer's
    environment need not have sb3_async installed), then an adapter script's folder (its helper modules, and the
    processes a library spawns, find it there)."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "PYTHONUNBUFFERED": "1"}
    if spec.adapter is None:
        return [sys.executable, "-m", "sb3_async.benchmark.run_one", str(spec_path), str(result_path)], env
    if spec.python is None:
        raise ValueError(f"Invalid spec for {spec.run_id!r}: adapter={spec.adapter!r} without its python")
    if is_adapter_file(spec.adapter):
        folder, command = str(Path(spec.adapter).resolve().parent), [spec.python, spec.adapter]
    else:
        folder, command = None, [spec.python, "-m", spec.adapter]
    path = os.pathsep.join(filter(None, [str(REPO_ROOT), folder, os.environ.get("PYTHONPATH")]))
    return [*command, str(spec_path), str(result_path)], {**env, "PYTHONPATH": path}


class Progress:
    """A tqdm bar over the runs, its postfix following the run in progress."""

    def __init__(self, total: int, enabled: bool, desc: str):
        self.bar: Any = None
        if enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, unit="run", desc=desc, dynamic_ncols=True, file=sys.stderr)

    def status(self, text: str) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(text, refresh=True)

    def advance(self) -> None:
        if self.bar is not None:
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _describe(spec: RunSpec, event: dict[str, Any]) -> str:
    head = f"{spec.run_id}"
    if event.get("kind") == "eval":
        return f"{head}: {event['steps']:,} steps, {event['seconds']:.0f} s, eval {event['mean']:.1f}"
    return f"{head}: started"


def execute(
    spec: RunSpec, workdir: Path, progress: Progress, log_dir: Path, timeout_margin: float = TIMEOUT_MARGIN_SECONDS
) -> dict[str, Any]:
    """Run ``spec`` in a fresh process; its record (a failed record, with the evaluations the run reported, if the
    process failed or was killed for running past its budget, its reported evaluations and ``timeout_margin``)."""
    spec_path, result_path = workdir / f"{spec.run_id}.spec.json", workdir / f"{spec.run_id}.result.json"
    spec_path.write_text(json.dumps(spec.to_dict()))
    result_path.unlink(missing_ok=True)
    command, env = run_command(spec, spec_path, result_path)
    launcher = Launcher()
    process = launcher.command(command, env)
    timed_out, finished = threading.Event(), threading.Event()
    watch = RunWatch(spec, timeout_margin, time.monotonic())

    def kill() -> None:
        timed_out.set()
        launcher.kill(process)  # the run's own process group: its workers and forkserver

    def watchdog() -> None:
        while not finished.wait(1.0):
            if watch.overdue(time.monotonic()):
                kill()
                return

    timer = threading.Thread(target=watchdog, daemon=True)
    timer.start()
    log: list[str] = []
    progress.status(_describe(spec, {}))
    try:
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith(EVENT_PREFIX):
                try:
                    event = json.loads(line[len(EVENT_PREFIX) :])
                    watch.on_event(event)
                    progress.status(_describe(spec, event))
                except (ValueError, KeyError, TypeError):
                    log.append(line)
            else:
                log.append(line)
        returncode = process.wait()
    except BaseException:
        kill()
        process.wait()
        raise
    finally:
        finished.set()
        timer.join()
        launcher.close()  # what the run left in its group (a forkserver still shutting down) ends with it
    record: dict[str, Any] | None = None
    if result_path.exists():
        try:
            record = json.loads(result_path.read_text())
        except ValueError:
            record = None
    if record is None or returncode != 0 or timed_out.is_set():
        tail = "".join(log[-60:])
        if timed_out.is_set():  # the reason last: the report lists each error's last line
            error = "\n".join(filter(None, [tail.rstrip("\n"), f"run killed: {watch.describe_limit()}"]))
        else:
            error = (record or {}).get("error") or f"run exited with code {returncode}:\n{tail}"
        peer = (record or {}).get("peer")  # an external peer's library and interpreter, known even when it failed
        record = watch.record(error, peer)
        log_dir.mkdir(parents=True, exist_ok=True)
        (log_dir / f"{spec.run_id}.log").write_text("".join(log))
    return record


def run_suite(
    suite: Suite,
    out_dir: str | Path,
    algos: Sequence[str] | None = None,
    seeds: int | None = None,
    budget_seconds: float | None = None,
    device: str = "cpu",
    torch_threads: int | None = -1,
    progress: bool = True,
    command: Sequence[str] | None = None,
    first_seed: int = 0,
    envs: Sequence[str] | None = None,
    pythons: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Run ``suite`` (see :func:`~sb3_async.benchmark.plan.plan_runs` for the arguments) and write
    ``out_dir/results.json``; logs of failed runs go to ``out_dir/logs/``. Returns the results."""
    runs = plan_runs(
        suite,
        algos=algos,
        seeds=seeds,
        budget_seconds=budget_seconds,
        device=device,
        torch_threads=torch_threads,
        first_seed=first_seed,
        envs=envs,
        pythons=pythons,
    )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = dict(
        suite=suite_info(suite, runs),
        command=list(command) if command is not None else None,
        created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        machine=machine_info(),
        wall_seconds=None,
        runs=[],
    )
    start = time.perf_counter()
    bar = Progress(len(runs), progress, f"{suite.name}")
    try:
        with tempfile.TemporaryDirectory(prefix="sb3_async_benchmark_") as workdir:
            for spec in runs:
                results["runs"].append(execute(spec, Path(workdir), bar, out / "logs"))
                results["wall_seconds"] = time.perf_counter() - start
                write_results(results, out)
                bar.advance()
    finally:
        bar.close()
    return results


def write_results(results: dict[str, Any], out_dir: Path) -> Path:
    """``results.json``, written atomically."""
    path = out_dir / "results.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(results, indent=1) + "\n")
    tmp.replace(path)
    return path


def load_results(out_dir: str | Path) -> dict[str, Any]:
    """The ``results.json`` of a previous invocation in the folder ``out_dir``, or the file ``out_dir`` itself where it
    ends in ``.json`` (a measurement script's results stored beside another table's, e.g. ``learners/apex_capacity.json``)."""
    path = Path(out_dir)
    if path.suffix != ".json":
        path = path / "results.json"
    if not path.is_file():
        raise FileNotFoundError(f"No results file {path}: run a suite or a script with --out {Path(out_dir)} first")
    return json.loads(path.read_text())


# the protocol fields two invocations must share to be read as one (seeds, algorithms and envs may differ)
_PROTOCOL_FIELDS = (
    "name", "kind", "eval_interval", "n_eval_episodes", "deterministic_eval", "max_steps", "budget_seconds",
    "stop_at_threshold", "device", "torch_threads", "evals_per_run", "final_eval_episodes",
)  # fmt: skip
_MACHINE_FIELDS = ("cpu_model", "cpu_id", "usable_cpus", "python", "versions")


def merge_results(parts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One ``results.json`` from several invocations of one suite under one protocol (e.g. seeds added later with
    ``--first-seed``): the runs side by side, each invocation's command, date, load and commit kept in ``parts``.

    :raises ValueError: fewer than two parts, a protocol field or the machine/software differing between them, or a
        run id present twice
    """
    if len(parts) < 2:
        raise ValueError(f"Invalid parts: expected at least two results to merge, got {len(parts)}")
    first = parts[0]
    for index, part in enumerate(parts[1:], start=1):
        for field in _PROTOCOL_FIELDS:
            if part["suite"].get(field) != first["suite"].get(field):
                raise ValueError(
                    f"Cannot merge part {index}: suite field {field!r} is {part['suite'].get(field)!r} there and "
                    f"{first['suite'].get(field)!r} in part 0 (only runs under one protocol read as one table)"
                )
        for field in _MACHINE_FIELDS:
            if part["machine"].get(field) != first["machine"].get(field):
                raise ValueError(
                    f"Cannot merge part {index}: machine field {field!r} is {part['machine'].get(field)!r} there and "
                    f"{first['machine'].get(field)!r} in part 0"
                )
    runs: list[dict[str, Any]] = []
    seen: set[str] = set()
    for part in parts:
        for run in part["runs"]:
            if run["run_id"] in seen:
                raise ValueError(f"Cannot merge: run {run['run_id']!r} is in more than one part")
            seen.add(run["run_id"])
            runs.append(run)
    suite = dict(first["suite"])
    suite["envs"] = {env_id: info for part in parts for env_id, info in part["suite"].get("envs", {}).items()}
    suite["algos"] = list(dict.fromkeys(run["algo"] for run in runs))
    suite["peers"] = {
        algo: list(dict.fromkeys(peer for part in parts for peer in part["suite"].get("peers", {}).get(algo, [])))
        for algo in suite["algos"]
    }
    suite["seeds"] = sorted({seed for part in parts for seed in part["suite"]["seeds"]})
    flat = [piece for part in parts for piece in (part.get("parts") or [_part_info(part)])]
    return dict(
        suite=suite,
        command=None,
        parts=flat,
        created=first["created"],
        machine=first["machine"],
        wall_seconds=sum(piece["wall_seconds"] or 0.0 for piece in flat),
        runs=runs,
    )


def _part_info(results: dict[str, Any]) -> dict[str, Any]:
    machine = results["machine"]
    return dict(
        command=results.get("command"),
        created=results["created"],
        wall_seconds=results.get("wall_seconds"),
        git_commit=machine.get("git_commit"),
        load_average_at_start=machine.get("load_average_at_start"),
    )
