"""``python -m sb3_async.benchmark``: run a suite, list the suites, or re-render a report.

Examples::

    python -m sb3_async.benchmark --list
    python -m sb3_async.benchmark --suite smoke --out /tmp/smoke
    python -m sb3_async.benchmark --suite cartpole --out benchmarks/results/cartpole --seeds 5 --algos a3c,a2c
    python -m sb3_async.benchmark --report benchmarks/results/cartpole     # results.md and plots from results.json
    python -m sb3_async.benchmark --suite learners --out benchmarks/results/learners  # updates against the limit
    python -m sb3_async.benchmark --tensorboard benchmarks/results/monitoring --out docs/img  # async/ keys figures
    python -m sb3_async.benchmark --merge runs/s0 runs/s12 --out runs/cartpole  # seeds run apart, one table
    python -m sb3_async.benchmark --report benchmarks/results/env_pool_race --markdown --table script  # a script's table
    python -m sb3_async.benchmark --suite cartpole --algos a3c,torchrl_ppo --peer-python peers=.venv-peers/bin/python
    python -m sb3_async.benchmark --suite pong --peers-from benchmarks/peers --algos a3c,sf_appo,torchrl_ppo --seeds 3
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from sb3_async.benchmark.registry import get_algorithm, load_peers
from sb3_async.benchmark.suites import get_suite, list_suites, plan_runs, select_algorithms

#: The suite that times the learners' updates (:mod:`sb3_async.benchmark.learners`) rather than training runs.
LEARNERS_SUITE = "learners"


def _list() -> str:
    lines = [
        f"{LEARNERS_SUITE:<12} each learner's update timed against the same arithmetic alone (--budget-seconds: per "
        "timed part, default 2; --algos: learners whose name contains one of these words)"
    ]
    for suite in list_suites():
        try:
            runs = len(plan_runs(suite))
        except ValueError as error:  # e.g. a peer registered by --peers-from whose environment is not built
            runs, error_text = 0, f": {error}"
        else:
            error_text = ""
        budget = f", at most {suite.budget_seconds:g} s of training each" if suite.budget_seconds else ""
        algos = ", ".join(select_algorithms(suite))
        lines.append(f"{suite.name:<12} {suite.description}")
        lines.append(f"{'':<12} {runs} runs ({algos}; {suite.seeds} seed(s)){budget}{error_text}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m sb3_async.benchmark",
        description=(
            "Benchmark sb3_async's algorithms against their SB3 and external peers under one protocol (zoo hyperparameters,"
            " a fresh process per run, evaluation off the clock); see docs/benchmarks.md in the project's repository."
        ),
    )
    parser.add_argument("--suite", help="the suite to run (see --list)")
    parser.add_argument("--out", type=Path, help="output folder (default: benchmarks/results/<suite>)")
    parser.add_argument("--seeds", type=int, help="number of seeds (0 .. N-1; default: the suite's)")
    parser.add_argument(
        "--first-seed", type=int, default=0, help="first seed (seeds K .. K+N-1; to add seeds to an earlier run)"
    )
    parser.add_argument(
        "--algos",
        help="comma-separated algorithms (default: the suite's, with their SB3 peers; external peers run when named)",
    )
    parser.add_argument("--envs", help="comma-separated env ids: only these of the suite's envs (default: all)")
    parser.add_argument("--budget-seconds", type=float, help="training-clock budget per run (default: the suite's)")
    parser.add_argument(
        "--eval-interval",
        type=int,
        help="env steps between two evaluations (default: the suite's; a longer interval for fast runs of many steps)",
    )
    parser.add_argument(
        "--run-past-threshold",
        action="store_true",
        help="go on training after the threshold, to the budget or the step limit (the score at a fixed budget)",
    )
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=-1,
        help="torch threads of each run's main process (default: the suite's; 0: torch's default)",
    )
    parser.add_argument("--device", default="cpu", help="torch device of every model (default: cpu)")
    parser.add_argument(
        "--peer-python",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="the interpreter of an external peer's environment, by environment name (peers, sf) or peer name; "
        "repeatable (default: .venv-NAME/bin/python at the repository's root)",
    )
    parser.add_argument(
        "--peers-from",
        action="append",
        default=[],
        type=Path,
        metavar="DIR",
        help="register the external peers of DIR (its registry.py: adapters of other libraries; the repository's are "
        "in benchmarks/peers); repeatable",
    )
    parser.add_argument("--list", action="store_true", help="list the suites and exit")
    parser.add_argument(
        "--report",
        type=Path,
        nargs="+",
        metavar="DIR",
        help="re-render DIR/results.md and plots from DIR/results.json (with --markdown: print a published table; "
        "several DIRs for --table summary; a script's DIR/NAME.json for --table script)",
    )
    parser.add_argument(
        "--markdown", action="store_true", help="with --report: print a published table (Markdown) to stdout, write nothing"
    )
    parser.add_argument(
        "--table",
        choices=("ratios", "envs", "score", "final", "summary", "script"),
        help="with --report --markdown: which table (default: ratios for races to a threshold, score for fixed budgets)",
    )
    parser.add_argument(
        "--tensorboard",
        type=Path,
        metavar="DIR",
        help="draw monitoring_GROUP.png figures of the async/ keys of the TensorBoard runs in DIR into --out "
        "(default: DIR); examples/monitoring.py writes such runs",
    )
    parser.add_argument(
        "--sync-docs",
        action="store_true",
        help="rewrite every generated table of README.md and docs/ (<!-- generated: ... --> blocks) from its folder",
    )
    parser.add_argument(
        "--per-run-protocol",
        action="store_true",
        help="with --merge: let the parts' evaluation interval and budget differ (recorded per run)",
    )
    parser.add_argument(
        "--supersede",
        action="store_true",
        help="with --merge: a run id in several parts keeps the last part's run (an entry rerun after it changed)",
    )
    parser.add_argument(
        "--merge",
        type=Path,
        nargs="+",
        metavar="DIR",
        help="merge the results.json of several invocations of one suite (e.g. seeds added with --first-seed) into "
        "--out DIR, and render it",
    )
    parser.add_argument("--no-plots", action="store_true", help="write no PNG (matplotlib not needed)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


def parse_peer_pythons(values: Sequence[str]) -> dict[str, str]:
    """``["peers=/x/bin/python", ...]`` -> ``{"peers": "/x/bin/python"}``.

    :raises ValueError: for a value that is not ``NAME=PATH``
    """
    pythons = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise ValueError(f"Invalid --peer-python {value!r}: expected NAME=PATH (e.g. peers=.venv-peers/bin/python)")
        pythons[name.strip()] = path.strip()
    return pythons


@contextlib.contextmanager
def sigterm_as_exit() -> Iterator[None]:
    """Within the block, ``SIGTERM`` raises ``SystemExit`` (Python's default would end this process at once, leaving
    the run in progress, a process group of its own, running): the runner then kills the run's processes, as it does
    on Ctrl-C. Only in the main thread (where Python runs signal handlers); the previous handler is restored after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _learners(args: argparse.Namespace) -> int:
    """``--suite learners``: time each learner's update against its arithmetic alone; with ``--out``, write
    ``DIR/results.json`` (``--report DIR --markdown --table script`` prints its table)."""
    import json
    import os
    import platform
    from datetime import datetime, timezone

    import torch

    from sb3_async.benchmark.learners import measure_learners, table_of
    from sb3_async.benchmark.tables import render_script

    seconds = args.budget_seconds or 2.0
    only = [name.strip() for name in args.algos.split(",")] if args.algos else None
    record: dict = dict(
        command="python -m sb3_async.benchmark " + " ".join(sys.argv[1:]),
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        machine=dict(cpus=os.cpu_count(), python=platform.python_version(), torch=torch.__version__),
        args=dict(seconds=seconds),
        load_average_at_start=os.getloadavg()[0],
        **measure_learners(seconds, only),
    )
    record["table"] = table_of(record)
    print("\n".join(render_script(record)))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(record, indent=1))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    for folder in args.peers_from:  # before anything names an algorithm
        try:
            load_peers(folder)
        except ValueError as error:
            parser.error(str(error))
    from sb3_async.benchmark.report import write_report
    from sb3_async.benchmark.runner import load_results, merge_results, run_suite, write_results

    if args.list:
        print(_list())
        return 0
    if args.sync_docs:
        from sb3_async.benchmark.published import sync_docs

        print("\n".join(str(path) for path in sync_docs(Path.cwd())))
        return 0
    if args.suite == LEARNERS_SUITE:
        return _learners(args)
    if args.tensorboard is not None:
        from sb3_async.benchmark.tensorboard_plots import plot_tensorboard

        try:
            paths = plot_tensorboard(args.tensorboard, args.out or args.tensorboard)
        except ValueError as error:
            parser.error(str(error))
        print("\n".join(str(path) for path in paths))
        return 0
    if args.report is not None and args.markdown:
        from sb3_async.benchmark.tables import render_folders

        try:
            only = [name.strip() for name in args.algos.split(",") if name.strip()] if args.algos else None
            print(render_folders(args.report, args.table, algos=only), end="")
        except (FileNotFoundError, ValueError) as error:
            parser.error(str(error))
        return 0
    if args.report is not None:
        if len(args.report) > 1:
            parser.error("--report renders one folder (several only with --markdown --table summary)")
        if args.report[0].suffix == ".json":
            parser.error("--report FILE.json prints a script's table with --markdown; results.md and plots are a folder's")
        try:
            results = load_results(args.report[0])
        except FileNotFoundError as error:
            parser.error(str(error))
        written = write_report(results, args.report[0], plots=not args.no_plots)
        print("\n".join(str(path) for path in written))
        return 0
    if args.merge is not None:
        if args.out is None:
            parser.error("--merge needs --out DIR (the merged results.json and report go there)")
        try:
            from sb3_async.benchmark.merging import merge_per_run

            loaded = [load_results(folder) for folder in args.merge]
            if args.per_run_protocol or args.supersede:
                results = merge_per_run(loaded, supersede=args.supersede)
            else:
                results = merge_results(loaded)
        except (FileNotFoundError, ValueError) as error:
            parser.error(str(error))
        args.out.mkdir(parents=True, exist_ok=True)
        written = [write_results(results, args.out), *write_report(results, args.out, plots=not args.no_plots)]
        print("\n".join(str(path) for path in written))
        return 0
    if not args.suite:
        parser.error("--suite NAME is required (or --list, or --report DIR)")
    try:
        suite = get_suite(args.suite)
        if args.eval_interval is not None:
            if args.eval_interval < 1:
                raise ValueError(f"Invalid --eval-interval {args.eval_interval}: expected a positive number of env steps")
            suite = dataclasses.replace(suite, eval_interval=args.eval_interval, eval_intervals={}, evals_per_run=None)
        if args.run_past_threshold:
            suite = dataclasses.replace(suite, stop_at_threshold=False, evaluate_after_threshold=True)
        algos = None
        if args.algos:
            algos = [name.strip() for name in args.algos.split(",") if name.strip()]
            for name in algos:
                get_algorithm(name)
        envs = [env_id.strip() for env_id in args.envs.split(",") if env_id.strip()] if args.envs else None
        pythons = parse_peer_pythons(args.peer_python)
        # validate before running
        plan_runs(
            suite,
            algos=algos,
            seeds=args.seeds,
            budget_seconds=args.budget_seconds,
            first_seed=args.first_seed,
            envs=envs,
            pythons=pythons,
        )
    except ValueError as error:
        parser.error(str(error))
    if not args.no_plots and importlib.util.find_spec("matplotlib") is None:  # fail now, not after hours of runs
        parser.error("the plots need matplotlib: pip install 'sb3-async[benchmark]' (or pass --no-plots)")
    out = args.out if args.out is not None else Path("benchmarks") / "results" / suite.name
    command = ["python", "-m", "sb3_async.benchmark", *(sys.argv[1:] if argv is None else argv)]
    with sigterm_as_exit():  # a terminated benchmark ends its run's processes, as Ctrl-C does
        results = run_suite(
            suite,
            out,
            algos=algos,
            seeds=args.seeds,
            budget_seconds=args.budget_seconds,
            device=args.device,
            torch_threads=args.torch_threads,
            progress=not args.no_progress,
            command=command,
            first_seed=args.first_seed,
            envs=envs,
            pythons=pythons,
        )
    written = write_report(results, out, plots=not args.no_plots)
    failed = [run["run_id"] for run in results["runs"] if run.get("error")]
    print(
        f"{len(results['runs'])} runs in {results['wall_seconds']:.0f} s; wrote {out / 'results.json'}, "
        + ", ".join(str(path) for path in written)
    )
    if failed:
        print(f"{len(failed)} run(s) failed: {', '.join(failed)} (logs in {out / 'logs'})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # worker processes (forkserver) re-import the main module only under this guard
    sys.exit(main())
