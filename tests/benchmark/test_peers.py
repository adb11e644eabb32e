"""External peers in the benchmark: the peer protocol (clock, evaluation off the clock, stop rules), a peer run end to
end through the CLI in a fresh process (``fixed_policy``, a real adapter that learns nothing: no library needed),
failures recorded, the interpreters resolved, the repository's peers registered by ``--peers-from benchmarks/peers``
only, and the adapters never imported by the benchmark. The real peers' runs need their own environments
(``benchmarks/peers/make_peer_venvs.sh``, ``benchmarks/peers/make_sf_venv.sh``) and skip without them."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import json
import signal
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sb3_async.benchmark import registry, report, suites
from sb3_async.benchmark.__main__ import main, parse_peer_pythons
from sb3_async.benchmark.peers.fixed_policy import cartpole_controller
from sb3_async.benchmark.peers.protocol import PeerRun, StopRun
from sb3_async.benchmark.runner import Progress, execute, machine_info, run_command, suite_info
from sb3_async.benchmark.stats import group_stats, ratio_rows

REPO = Path(__file__).resolve().parents[2]
#: The repository's external peers: adapters of other libraries, out of the package, and their registry.py.
PEERS = REPO / "benchmarks" / "peers"
PEERS_PYTHON = REPO / ".venv-peers" / "bin" / "python"
SF_PYTHON = REPO / ".venv-sf" / "bin" / "python"
#: A suite of each env a peer is registered for (the real peers' short runs take its protocol).
SUITE_OF = {
    "CartPole-v1": "cartpole",
    "LunarLander-v3": "lunarlander",
    "Pendulum-v1": "pendulum",
    "HalfCheetah-v5": "mujoco",
    "Hopper-v5": "mujoco",
    "Walker2d-v5": "mujoco",
    "PongNoFrameskip-v4": "atari",
}


def _repository_peers() -> dict[str, registry.AlgorithmEntry]:
    """The entries ``--peers-from benchmarks/peers`` registers, read with the registry restored after."""
    algorithms = dict(registry._ALGORITHMS)
    try:
        return {name: registry.get_algorithm(name) for name in registry.load_peers(PEERS)}
    finally:
        registry._ALGORITHMS.clear()
        registry._ALGORITHMS.update(algorithms)


REPOSITORY_PEERS = _repository_peers()


@pytest.fixture
def repository_peers() -> Any:
    """The repository's peers registered (as ``--peers-from benchmarks/peers`` does), for one test."""
    algorithms = dict(registry._ALGORITHMS)
    registry.load_peers(PEERS)
    yield
    registry._ALGORITHMS.clear()
    registry._ALGORITHMS.update(algorithms)


def _adapter(name: str) -> Any:
    """An adapter script of ``benchmarks/peers`` imported as a module (its library is imported only when it trains)."""
    if str(PEERS) not in sys.path:
        sys.path.insert(0, str(PEERS))  # as when it runs: its folder on the path (its helpers, e.g. _tianshou)
    return importlib.import_module(name)


@pytest.fixture
def fixed_policy() -> Any:
    """``fixed_policy`` registered as an external peer of A3C on CartPole-v1, for one test."""
    algorithms, a3c = dict(registry._ALGORITHMS), registry.get_algorithm("a3c")
    registry.register_algorithm(
        "fixed_policy", "external", envs=("CartPole-v1", "Pendulum-v1"), adapter="sb3_async.benchmark.peers.fixed_policy"
    )
    registry._ALGORITHMS["a3c"] = dataclasses.replace(a3c, peers=(*a3c.peers, "fixed_policy"))
    yield registry.get_algorithm("fixed_policy")
    registry._ALGORITHMS.clear()
    registry._ALGORITHMS.update(algorithms)


def _spec(**changes: Any) -> suites.RunSpec:
    (spec,) = suites.plan_runs(
        suites.get_suite("cartpole"), algos=["fixed_policy"], seeds=1, pythons={"peers": sys.executable}
    )
    return suites.RunSpec.from_dict({**spec.to_dict(), **changes})


# --- the protocol, in this process ---------------------------------------------------------------------------------


def test_peer_run_evaluates_off_the_clock_and_stops_by_the_rules(fixed_policy: Any) -> None:
    spec = _spec(eval_interval=1000, budget_seconds=100.0)
    run = PeerRun(spec, {"n_timesteps": 3000})
    assert (run.max_steps, run.interval) == (3000, 1000)

    def slow_policy(obs: np.ndarray) -> np.ndarray:  # a falling pole: 10 short episodes, each step 1 ms
        time.sleep(0.001)
        return np.zeros(len(obs), dtype=np.int64)

    run.start()
    run.step(500, slow_policy)
    assert run.curve == []  # no evaluation before the interval
    run.step(1000, slow_policy)
    (point,) = run.curve
    assert point["steps"] == 1000 and point["mean"] < 100 and run.reached is None
    assert run.eval_seconds > 0.05 and point["seconds"] < run.eval_seconds  # the evaluation is not on the clock
    assert run.clock() < time.perf_counter() - run.started - 0.05
    with pytest.raises(StopRun) as stop:
        run.step(2000, cartpole_controller)  # holds the pole: reaches 475
    assert stop.value.reason == "threshold" and run.reached == run.curve[-1] and run.curve[-1]["mean"] == 500.0
    run.finish()
    assert len(run.curve) == 2  # reached at an interval's evaluation: no final one
    record = run.record()
    assert (record["seconds_to_threshold"], record["steps_to_threshold"]) == (run.curve[-1]["seconds"], 2000)
    assert record["stop_reason"] == "threshold" and record["env_steps"] == 2000 and record["library"] == "external"

    at_limit = PeerRun(_spec(eval_interval=10_000), {"n_timesteps": 3000})
    at_limit.start()
    at_limit.step(1000, slow_policy)
    with pytest.raises(StopRun, match="max_steps"):
        at_limit.step(3000, slow_policy)
    at_limit.finish()  # trained since the last evaluation (none): a final one
    assert [p["steps"] for p in at_limit.curve] == [3000] and at_limit.record()["stop_reason"] == "max_steps"

    over_budget = PeerRun(_spec(budget_seconds=0.01), {"n_timesteps": 10**6})
    over_budget.start()
    time.sleep(0.02)
    with pytest.raises(StopRun, match="budget"):
        over_budget.step(10, slow_policy)


def test_peer_run_evaluates_on_the_adapters_env(fixed_policy: Any) -> None:
    """An adapter whose policy sees its own preprocessing (Atari frames) evaluates on its own env, set before the first
    evaluation only."""
    import gymnasium

    built: list[Any] = []

    def make_env() -> Any:
        env = gymnasium.wrappers.TimeLimit(gymnasium.make("CartPole-v1").unwrapped, max_episode_steps=50)
        built.append(env)
        return env

    run = PeerRun(_spec(eval_interval=1000, n_eval_episodes=2), {"n_timesteps": 3000})
    run.use_eval_env(make_env)
    run.start()
    run.step(1000, cartpole_controller)
    assert len(built) == 1 and run.curve[0]["mean"] == 50.0  # the adapter's env: episodes cut at 50 steps
    with pytest.raises(RuntimeError, match="after the first evaluation"):
        run.use_eval_env(make_env)


def test_sample_factory_command_line_leaves_out_the_examples_defaults() -> None:
    """Settings equal to the example parser's defaults stay off the command line (Sample Factory's parser rejects some
    of them, ``lr_schedule=linear_decay``); lists are space-separated; the adapter's own settings never go."""
    sf_argv = _adapter("sf_appo").sf_argv

    settings = dict(lr_schedule="linear_decay", encoder_mlp_layers=[64, 64], num_workers=2, n_timesteps=10)
    argv = sf_argv("Pendulum-v1", settings, 3, "/tmp/td", defaults=dict(lr_schedule="linear_decay", num_workers=8))
    assert argv == [
        "--env=Pendulum-v1", "--experiment=sf_appo", "--train_dir=/tmp/td", "--seed=3",
        "--encoder_mlp_layers", "64", "64", "--num_workers=2",
    ]  # fmt: skip
    assert "--lr_schedule=linear_decay" in sf_argv("Pendulum-v1", settings, 3, "/tmp/td")


def test_sample_factory_heartbeats_do_not_count_the_time_we_suspended_its_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """While an evaluation runs, Sample Factory's processes are suspended; its runner then checks their heartbeats and
    stops the training as stuck if none came for ``heartbeat_reporting_interval`` (180 s), as it did after a
    4-minute evaluation on Pong. Thawing returns how long they were suspended, and each recorded heartbeat moves by
    that much (one not yet received stays ``None``)."""
    sf_appo = _adapter("sf_appo")

    heartbeats: dict[Any, dict[str, float | None]] = {"Rollout": {"w0": 100.0, "w1": None}, "Learner": {"l": 90.0}}
    sf_appo.excuse_suspension(heartbeats, 240.0)
    assert heartbeats == {"Rollout": {"w0": 340.0, "w1": None}, "Learner": {"l": 330.0}}

    signalled: list[int] = []
    monkeypatch.setattr(sf_appo, "signal_all", lambda processes, signum: signalled.append(signum))
    policy = sf_appo.FrozenPolicy(model=None, lock=None)
    assert policy.thaw() == 0.0  # never suspended
    policy.suspended_at, policy.fresh = time.time() - 240.0, True  # what freeze() leaves, 240 s ago
    assert policy.thaw() == pytest.approx(240.0, abs=30.0) and policy.suspended_at is None and not policy.fresh
    assert policy.thaw() == 0.0 and signalled == [signal.SIGCONT] * 3


# --- a peer end to end, in a fresh process -----------------------------------------------------------------------


def test_fixed_policy_peer_through_the_cli(fixed_policy: Any, tmp_path: Path) -> None:
    out = tmp_path / "peers"
    start = time.perf_counter()
    argv = ["--suite", "cartpole", "--algos", "fixed_policy", "--seeds", "1", "--budget-seconds", "30"]
    code = main([*argv, "--peer-python", f"peers={sys.executable}", "--no-plots", "--no-progress", "--out", str(out)])
    logs = sorted((out / "logs").glob("*.log")) if (out / "logs").exists() else []
    assert code == 0, "\n".join(log.read_text()[-3000:] for log in logs)
    assert time.perf_counter() - start < 20

    results = json.loads((out / "results.json").read_text())
    assert results["suite"]["peer_pythons"] == {"fixed_policy": sys.executable}
    (run,) = results["runs"]
    assert run["error"] is None and (run["algo"], run["library"], run["env"]) == ("fixed_policy", "external", "CartPole-v1")
    # the controller holds the pole: the first evaluation (10k env steps, 10 episodes) reaches the threshold
    assert run["curve"] == [dict(seconds=run["seconds_to_threshold"], steps=10_000, mean=500.0, std=0.0)]
    assert run["reached"] and run["steps_to_threshold"] == 10_000 and run["stop_reason"] == "threshold"
    assert 0 < run["seconds_to_threshold"] <= run["train_seconds"] < 30
    assert run["eval_seconds"] > 0 and run["env_steps"] == 10_000 and run["n_eval_episodes"] == 10
    assert run["steps_per_second"] == pytest.approx(10_000 / run["train_seconds"])
    assert run["peak_rss_mb"] > 20 and run["torch_threads"] == 1
    assert run["hyperparameters"] == {"n_timesteps": 20_000, "steps_per_batch": 1_000}
    assert run["hyperparameters_source"].startswith("fixed_policy.py:CartPole-v1 (fixed controller")
    peer = run["peer"]
    assert peer["python"] == sys.executable and peer["adapter"] == "sb3_async.benchmark.peers.fixed_policy"
    assert peer["versions"]["gymnasium"] == metadata.version("gymnasium") and peer["torch_threads"] == 1

    markdown = (out / "results.md").read_text()
    assert "| fixed_policy (external) |" in markdown and "external peers:" in markdown
    assert f"gymnasium {metadata.version('gymnasium')}" in markdown


def test_a_failing_peer_is_recorded_with_its_error(fixed_policy: Any, tmp_path: Path) -> None:
    spec = _spec(env_id="LunarLander-v3")  # no settings for it in the adapter
    record = execute(spec, tmp_path, Progress(1, enabled=False, desc="test"), tmp_path / "logs")
    assert record["stop_reason"] == "error" and "Invalid env 'LunarLander-v3' for 'fixed_policy'" in record["error"]
    assert record["peer"]["python"] == sys.executable and record["curve"] == []
    assert (tmp_path / "logs" / f"{spec.run_id}.log").is_file()
    assert "## Errors" in report.render_markdown(
        dict(
            suite=dict(
                name="t",
                description="t",
                kind="race",
                seeds=[0],
                eval_interval=1,
                n_eval_episodes=10,
                max_steps=None,
                budget_seconds=1,
                stop_at_threshold=True,
                device="cpu",
                torch_threads=1,
            ),
            command=None,
            created="x",
            machine=dict(cpu_model="c", usable_cpus=1, memory_gb=1, platform="p", python="3", versions={}),
            wall_seconds=1.0,
            runs=[record],
        )  # fmt: skip
    )


# --- the plan: interpreters, pairing, nothing imported -----------------------------------------------------------


def test_peers_run_under_their_own_python_and_pair_with_ours(
    fixed_policy: Any, repository_peers: None, tmp_path: Path
) -> None:
    spec = _spec()
    assert (spec.adapter, spec.python, spec.library) == ("sb3_async.benchmark.peers.fixed_policy", sys.executable, "external")
    command, env = run_command(spec, tmp_path / "s.json", tmp_path / "r.json")
    assert command[:3] == [sys.executable, "-m", "sb3_async.benchmark.peers.fixed_policy"]
    assert env["PYTHONPATH"].split(":")[0] == str(REPO)  # this checkout's protocol, whatever the peer's env holds
    ours, _ = run_command(suites.RunSpec.from_dict({**spec.to_dict(), "adapter": None}), tmp_path / "s", tmp_path / "r")
    assert ours[1:3] == ["-m", "sb3_async.benchmark.run_one"]
    # an adapter script: run as a script, its folder on the path after this checkout
    script = str(PEERS / "torchrl_ppo.py")
    command, env = run_command(suites.RunSpec.from_dict({**spec.to_dict(), "adapter": script}), tmp_path / "s", tmp_path / "r")
    assert command == [sys.executable, script, str(tmp_path / "s"), str(tmp_path / "r")]
    assert env["PYTHONPATH"].split(":")[:2] == [str(REPO), str(PEERS)]
    # by peer name before environment name; a missing interpreter names the option and the script
    other = suites.peer_python(fixed_policy, {"peers": "/nope/python", "fixed_policy": sys.executable})
    assert other == sys.executable
    with pytest.raises(ValueError, match=r"No Python for peer 'fixed_policy'.*make_peer_venvs.sh.*--peer-python peers=PATH"):
        suites.peer_python(fixed_policy, {"peers": str(tmp_path / "missing")})
    sf_appo = registry.get_algorithm("sf_appo")  # Sample Factory: an environment of its own
    assert (sf_appo.python_env, sf_appo.is_external) == ("sf", True) and "sf_appo" in registry.peers_of("a3c")
    with pytest.raises(ValueError, match=r"No Python for peer 'sf_appo'.*make_sf_venv.sh.*--peer-python sf=PATH"):
        suites.peer_python(sf_appo, {"sf": str(tmp_path / "missing")})
    assert parse_peer_pythons(["peers=/a/python", "sf = /b/python"]) == {"peers": "/a/python", "sf": "/b/python"}
    with pytest.raises(ValueError, match="Invalid --peer-python 'peers': expected NAME=PATH"):
        parse_peer_pythons(["peers"])
    # external peers run when named: the suite's default stays ours and the SB3 peers
    default = suites.select_algorithms(suites.get_suite("cartpole"))
    assert "fixed_policy" not in default and "sf_appo" not in default and "torchrl_ppo" not in default
    assert suites.select_algorithms(suites.get_suite("cartpole"), ["a3c", "sf_appo"]) == ["a3c", "sf_appo"]
    tuned = suites.Suite("tuned", "a suite overriding settings", "race", ("CartPole-v1",),
                         variants=lambda entry: [suites.Variant("lr", {"learning_rate": 1e-3}, {})])  # fmt: skip
    with pytest.raises(ValueError, match="overrides learning_rate of 'fixed_policy': an external peer runs with its own"):
        suites.plan_runs(tuned, algos=["fixed_policy"], pythons={"peers": sys.executable})
    with pytest.raises(ValueError, match="an external peer needs one"):
        registry.register_algorithm("x", "external", envs=("CartPole-v1",))
    with pytest.raises(ValueError, match="only sb3_async algorithms have peers"):
        registry.register_algorithm("x", "external", envs=("CartPole-v1",), peers="a2c", adapter="m")

    records = [
        dict(run_id=f"{algo}-{seed}", algo=algo, library=library, env="CartPole-v1", variant="default", threshold=475.0,
             reached=True, seconds_to_threshold=seconds, steps_to_threshold=1000, final_eval_mean=500.0, final_eval_std=0.0,
             steps_per_second=1.0, peak_rss_mb=1.0, error=None)
        for algo, library, seconds in (("a3c", "sb3_async", 2.0), ("fixed_policy", "external", 8.0))
        for seed in (0, 1)
    ]  # fmt: skip
    (row,) = ratio_rows(group_stats(records), {"a3c": list(registry.peers_of("a3c"))})
    assert (row.ours.algo, row.peer.algo, row.seconds_ratio) == ("a3c", "fixed_policy", 0.25)


def test_a_race_evaluates_each_side_at_its_own_interval(fixed_policy: Any) -> None:
    """A suite's ``eval_intervals`` give an algorithm its own spacing (a peer stepping an order slower), recorded per
    run as merged parts record theirs; ``--eval-interval`` sets one spacing for all."""
    race = suites.Suite("race", "two rates", "race", ("CartPole-v1",), eval_intervals={"fixed_policy": 2000})
    runs = suites.plan_runs(race, algos=["a3c", "fixed_policy"], seeds=2, pythons={"peers": sys.executable})
    assert [(run.algo, run.eval_interval) for run in runs] == [("a3c", 10_000), ("fixed_policy", 2000)] * 2
    info = suite_info(race, runs)
    assert info["eval_interval"] is None and info["per_run"] == {"eval_interval": [2000, 10_000]}
    assert "every 2,000 env steps or 10,000 env steps (per run" in report.render_markdown(
        dict(suite=info, runs=[], machine=machine_info(), wall_seconds=1.0, created="now", command=["x"])
    )
    alone = suite_info(race, runs[:1])  # one interval: the suite's field, as before
    assert alone["eval_interval"] == 10_000 and "per_run" not in alone
    pong = suites.get_suite("pong")
    assert (pong.eval_interval, dict(pong.eval_intervals)) == (250_000, {"sf_appo": 25_000})


def test_the_repository_peers_join_with_peers_from_only(capsys: pytest.CaptureFixture[str]) -> None:
    """Without ``--peers-from`` the adapters of other libraries are unknown, and the error says how to register them;
    with it, the ``pong`` suite races A3C in 2 workers x 8 envs against Sample Factory and TorchRL."""
    assert not any(entry.is_external for entry in registry.ALGORITHMS.values())
    with pytest.raises(SystemExit) as exit_info:
        main(["--suite", "pong", "--algos", "a3c,sf_appo,torchrl_ppo", "--no-plots"])
    error = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Unknown algorithm 'sf_appo'" in error and "--peers-from benchmarks/peers" in error
    with pytest.raises(SystemExit):
        main(["--peers-from", str(PEERS.parent), "--list"])  # a folder without registry.py
    assert "Invalid --peers-from" in capsys.readouterr().err
    (alone,) = suites.plan_runs(suites.get_suite("pong"), seeds=1)  # no peer registered: A3C alone
    assert (alone.algo, alone.variant) == ("a3c", "2 workers x 8 envs")

    algorithms = dict(registry._ALGORITHMS)
    try:
        assert main(["--peers-from", str(PEERS), "--list"]) == 0  # their venvs are not needed to list the suites
        assert "pong" in capsys.readouterr().out
        pythons = {"peers": sys.executable, "sf": sys.executable}
        runs = suites.plan_runs(suites.get_suite("pong"), seeds=2, pythons=pythons)
    finally:
        registry._ALGORITHMS.clear()
        registry._ALGORITHMS.update(algorithms)
    assert [(run.seed, run.algo) for run in runs] == [
        (seed, algo) for seed in (0, 1) for algo in ("a3c", "torchrl_ppo", "sf_appo")
    ]  # fmt: skip
    a3c, torchrl_ppo, sf_appo = runs[:3]
    assert a3c.params == {"n_envs": 16, "n_workers": 2, "n_envs_per_worker": 8} and a3c.axes == {"layout": "2x8"}
    assert a3c.run_id == "PongNoFrameskip-v4-a3c-2_workers_x_8_envs-s0" and a3c.threshold == 18
    assert all(run.torch_threads is None and run.stop_at_threshold for run in runs)
    assert [run.eval_interval for run in runs[:3]] == [250_000, 250_000, 25_000]  # APPO's own, an order slower
    assert (torchrl_ppo.adapter, sf_appo.adapter) == (str(PEERS / "torchrl_ppo.py"), str(PEERS / "sf_appo.py"))
    assert torchrl_ppo.params == {} and sf_appo.python == sys.executable


def test_a_folder_of_peers_runs_its_adapter_script(tmp_path: Path) -> None:
    """``--peers-from DIR``: DIR/registry.py registers an adapter script of DIR, which runs as a script in a fresh
    process and imports a helper module of its own folder and the protocol from this checkout."""
    folder = tmp_path / "my_peers"
    folder.mkdir()
    (folder / "registry.py").write_text(
        "from pathlib import Path\n"
        "from sb3_async.benchmark.registry import register_algorithm\n"
        "register_algorithm('my_peer', 'external', envs=('CartPole-v1',),"
        " adapter=str(Path(__file__).parent / 'my_peer.py'))\n"
    )
    (folder / "_helper.py").write_text("LIBRARY = 'gymnasium'\n")
    (folder / "my_peer.py").write_text(
        "import sys\n"
        "from _helper import LIBRARY\n"
        "from sb3_async.benchmark.peers.fixed_policy import HYPERPARAMETERS, SOURCES, train\n"
        "from sb3_async.benchmark.peers.protocol import main\n"
        "if __name__ == '__main__':\n"
        "    sys.exit(main(train, LIBRARY, HYPERPARAMETERS, SOURCES))\n"
    )
    out = tmp_path / "out"
    argv = ["--peers-from", str(folder), "--suite", "cartpole", "--algos", "my_peer", "--seeds", "1"]
    argv += ["--budget-seconds", "30", "--peer-python", f"peers={sys.executable}", "--no-plots", "--no-progress"]
    algorithms = dict(registry._ALGORITHMS)
    try:
        code = main([*argv, "--out", str(out)])
    finally:
        registry._ALGORITHMS.clear()
        registry._ALGORITHMS.update(algorithms)
    logs = sorted((out / "logs").glob("*.log")) if (out / "logs").exists() else []
    assert code == 0, "\n".join(log.read_text()[-3000:] for log in logs)
    (run,) = json.loads((out / "results.json").read_text())["runs"]
    assert run["error"] is None and run["reached"] and run["peer"]["adapter"] == str(folder / "my_peer.py")


def test_run_past_threshold_trains_to_the_step_limit(fixed_policy: Any, tmp_path: Path) -> None:
    """``--run-past-threshold``: the fixed controller reaches 475 at the first evaluation and trains on to its 20k
    steps, evaluated again there (the score at a fixed budget)."""
    argv = ["--suite", "cartpole", "--algos", "fixed_policy", "--seeds", "1", "--budget-seconds", "30"]
    out = tmp_path / "past"
    argv += ["--run-past-threshold", "--peer-python", f"peers={sys.executable}", "--no-plots", "--no-progress"]
    assert main([*argv, "--out", str(out)]) == 0
    (run,) = json.loads((out / "results.json").read_text())["runs"]
    assert [point["steps"] for point in run["curve"]] == [10_000, 20_000] and run["steps_to_threshold"] == 10_000
    assert run["stop_reason"] == "max_steps" and not run["stop_at_threshold"]


@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGKILL"])
def test_a_terminated_or_killed_benchmark_leaves_no_run_behind(tmp_path: Path, signal_name: str) -> None:
    """``SIGTERM`` to the benchmark (a run in progress, in a process group of its own): the runner stops the run.
    ``SIGKILL``: the run notices that its parent is gone and ends itself, with its process group."""
    import psutil

    code = (
        "import sys\n"
        "from sb3_async.benchmark import registry, suites\n"
        "from sb3_async.benchmark.__main__ import main\n"
        "registry.register_algorithm('fixed_policy', 'external', envs=('Pendulum-v1',),"
        " adapter='sb3_async.benchmark.peers.fixed_policy')\n"
        "suites.register_suite(suites.Suite('endless', 'a run that does not end by itself', 'race', ('Pendulum-v1',),"
        " seeds=1, eval_interval=10**9, max_steps=10**9, budget_seconds=120, include_peers=False,"
        " algos=('fixed_policy',)))\n"
        f"sys.exit(main(['--suite', 'endless', '--peer-python', 'peers={sys.executable}', '--no-plots',"
        f" '--no-progress', '--out', {str(tmp_path)!r}]))\n"
    )
    process = subprocess.Popen([sys.executable, "-c", code], cwd=REPO)
    try:
        benchmark, runs, deadline = psutil.Process(process.pid), [], time.monotonic() + 60
        while not runs and time.monotonic() < deadline and process.poll() is None:
            for child in benchmark.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    if "fixed_policy" in " ".join(child.cmdline()):
                        runs.append(child)
            time.sleep(0.05)
        assert runs, "the run never started"
        process.send_signal(getattr(signal, signal_name))
        assert process.wait(timeout=30) != 0
        deadline = time.monotonic() + 10
        while [run for run in runs if _alive(run)] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [run.pid for run in runs if _alive(run)] == []
    finally:
        process.kill()
        process.wait()


def _alive(process: Any) -> bool:
    """Whether a process still runs (a zombie, dead but not yet reaped by whoever adopted it, does not)."""
    import psutil

    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_the_benchmark_imports_no_adapter_nor_peer_library() -> None:
    code = (
        "import sys\n"
        "from sb3_async.benchmark import registry, suites\n"
        "import sb3_async.benchmark.runner, sb3_async.benchmark.report\n"
        "assert not [n for n, e in registry.ALGORITHMS.items() if e.is_external], 'a peer registered without --peers-from'\n"
        f"registry.load_peers({str(PEERS)!r})\n"
        "names = [n for n, e in registry.ALGORITHMS.items() if e.is_external]\n"
        "assert names, 'no external peer registered'\n"
        "for name in names: registry.get_algorithm(name).config_path()\n"
        "suites.plan_runs(suites.get_suite('pong'), pythons={'peers': sys.executable, 'sf': sys.executable})\n"
        "adapters = {'_tianshou', *names}\n"
        "loaded = [m for m in sys.modules if m.startswith(('sb3_async.benchmark.peers.', 'tianshou', 'torchrl',"
        " 'sample_factory')) or m in adapters]\n"
        "assert not loaded, loaded\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert result.returncode == 0, result.stderr


def test_every_registered_peer_has_settings_and_sources() -> None:
    """Each adapter's text names its settings' sources (read, not imported: its library may be absent); every one is a
    script of benchmarks/peers, none a module of the package."""
    assert set(REPOSITORY_PEERS) == {
        "torchrl_ppo", "torchrl_dqn", "torchrl_td3", "tianshou_dqn", "tianshou_td3", "tianshou_ddpg", "sf_appo"
    }  # fmt: skip
    for name, entry in REPOSITORY_PEERS.items():
        assert entry.is_external and entry.adapter == str(PEERS / f"{name}.py"), name
        text = entry.config_path().read_text()
        assert "HYPERPARAMETERS = {" in text and "SOURCES = {" in text and "sys.exit(main(train" in text, name
        assert entry.python_env in ("peers", "sf"), name


# --- the real peers: only where their environment was built, and only with -m peers (about 14 minutes on 2 cores) -


@pytest.mark.peers
@pytest.mark.skipif(not PEERS_PYTHON.is_file(), reason="no .venv-peers (benchmarks/peers/make_peer_venvs.sh builds it)")
@pytest.mark.parametrize(
    "name, env_id",
    [
        (name, env_id)
        for name in ("torchrl_ppo", "torchrl_dqn", "torchrl_td3", "tianshou_dqn", "tianshou_td3", "tianshou_ddpg")
        for env_id in REPOSITORY_PEERS[name].envs
    ],
)
def test_a_real_peer_runs_end_to_end(name: str, env_id: str, repository_peers: None, tmp_path: Path) -> None:
    """A short run of each peer on each of its envs (not a measurement): it builds, trains, is evaluated and its record
    parses."""
    suite = suites.get_suite(SUITE_OF[env_id])
    (spec,) = suites.plan_runs(suite, algos=[name], envs=[env_id], seeds=1, pythons={"peers": str(PEERS_PYTHON)})
    # Tianshou's MuJoCo examples take 25k random env steps in one collection before training: the run starts after
    settings = _adapter(name).HYPERPARAMETERS[env_id]
    warm = int(settings.get("start_timesteps", 0))
    span = 1000 if warm else 4000  # after the warm-up: one gradient step per env step, ~20 ms each on HalfCheetah
    changes = dict(max_steps=warm + span, eval_interval=warm + span // 2, budget_seconds=120)
    spec = suites.RunSpec.from_dict({**spec.to_dict(), **changes})
    record = execute(spec, tmp_path, Progress(1, enabled=False, desc="test"), tmp_path / "logs")
    assert record["error"] is None, record["error"]
    steps = [point["steps"] for point in record["curve"]]
    assert warm + span // 2 <= steps[0] < warm + span <= record["env_steps"] == steps[-1]
    assert record["stop_reason"] == "max_steps" and record["train_seconds"] > 0
    assert record["peer"]["versions"][name.split("_")[0]] is not None and record["peer"]["python"] == str(PEERS_PYTHON)


@pytest.mark.skipif(not SF_PYTHON.is_file(), reason="no .venv-sf (benchmarks/peers/make_sf_venv.sh builds it)")
def test_the_protocol_imports_in_the_sample_factory_environment() -> None:
    """numpy 1.x, gymnasium 0.29, no SB3 nor the RL Zoo there: the protocol imports none of them, nor torch."""
    code = (
        "import sys, numpy, gymnasium\n"
        "import sb3_async.benchmark.peers.protocol\n"
        "assert numpy.__version__.startswith('1.') and gymnasium.__version__.startswith('0.29'), sys.modules\n"
        "loaded = [m for m in ('torch', 'stable_baselines3', 'rl_zoo3', 'sample_factory') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    result = subprocess.run(
        [str(SF_PYTHON), "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO, env={"PYTHONPATH": str(REPO)}
    )
    assert result.returncode == 0, result.stderr


def _sf_processes() -> list[int]:
    """Processes of .venv-sf's interpreter still running (Sample Factory's workers, left behind)."""
    import psutil

    found = []
    for process in psutil.process_iter(["pid", "cmdline"]):
        if any(str(SF_PYTHON.parent) in part for part in process.info["cmdline"] or ()):
            found.append(process.info["pid"])
    return found


@pytest.mark.peers
@pytest.mark.skipif(not SF_PYTHON.is_file(), reason="no .venv-sf (benchmarks/peers/make_sf_venv.sh builds it)")
@pytest.mark.parametrize("env_id", REPOSITORY_PEERS["sf_appo"].envs)
def test_sample_factory_appo_runs_end_to_end(env_id: str, repository_peers: None, tmp_path: Path) -> None:
    """A short run of Sample Factory's APPO on each of its envs (not a measurement): it trains in its processes, is
    evaluated frozen, its record parses, and none of its processes outlives it."""
    suite = suites.get_suite(SUITE_OF[env_id])
    (spec,) = suites.plan_runs(suite, algos=["sf_appo"], envs=[env_id], seeds=1, pythons={"sf": str(SF_PYTHON)})
    changes = dict(max_steps=6000, eval_interval=1500, budget_seconds=150, n_eval_episodes=1, stop_at_threshold=False)
    spec = suites.RunSpec.from_dict({**spec.to_dict(), **changes})
    record = execute(spec, tmp_path, Progress(1, enabled=False, desc="test"), tmp_path / "logs")
    assert record["error"] is None, record["error"]
    batch = record["hyperparameters"]["batch_size"]
    steps = [point["steps"] for point in record["curve"]]  # the learner counts env steps by batches
    assert 1500 <= steps[0] < 6000 <= record["env_steps"] == steps[-1]
    assert all(step % batch == 0 for step in steps) and np.isfinite([p["mean"] for p in record["curve"]]).all()
    assert record["stop_reason"] == "max_steps" and 0 < record["curve"][0]["seconds"] < record["train_seconds"]
    assert record["eval_seconds"] > 0 and record["hyperparameters"]["device"] == "cpu"
    assert record["hyperparameters_source"].startswith(f"sf_appo.py:{env_id} (Sample Factory 2.1.1")
    peer = record["peer"]
    assert peer["versions"]["sample-factory"] == "2.1.1" and peer["python"] == str(SF_PYTHON)
    assert peer["versions"]["numpy"].startswith("1.") and peer["versions"]["gymnasium"].startswith("0.29")
    assert _sf_processes() == []


def test_tianshou_dqn_epsilon_follows_each_example_schedule() -> None:
    """The adapter's epsilon, hand-computed from each example's train_fn (read without Tianshou: imported lazily)."""
    tianshou_dqn = _adapter("tianshou_dqn")
    settings, epsilon = tianshou_dqn.HYPERPARAMETERS, tianshou_dqn.epsilon

    lunar, cartpole = settings["LunarLander-v3"], settings["CartPole-v1"]
    # lunarlander_dqn.py: max(0.73 * (1 - 5e-6) ** t, 0.01)
    assert epsilon(lunar, 0) == pytest.approx(0.73)
    assert epsilon(lunar, 100_000) == pytest.approx(0.4428, abs=1e-4)  # 0.73 * (1 - 5e-6)^1e5, about 0.73 * e^-0.5
    assert epsilon(lunar, 1_000_000) == 0.01  # 0.73 * e^-5 = 0.0049, below eps_test
    # test_dqn.py: 0.1 until 10k env steps, linear to 0.01 at 50k
    assert epsilon(cartpole, 10_000) == pytest.approx(0.1)
    assert epsilon(cartpole, 30_000) == pytest.approx(0.055)
    assert epsilon(cartpole, 60_000) == pytest.approx(0.01)


def test_tianshou_td3_noises_follow_each_examples_action_bound() -> None:
    """The MuJoCo example multiplies its three noises by the action bound (``max_action``); the Pendulum test does not."""
    scaled_noises, settings = _adapter("_tianshou").scaled_noises, _adapter("tianshou_td3").HYPERPARAMETERS

    hopper, pendulum = settings["Hopper-v5"], settings["Pendulum-v1"]
    scaled = scaled_noises(hopper, hopper, max_action=0.4)
    assert (scaled["exploration_noise"], scaled["policy_noise"], scaled["noise_clip"]) == pytest.approx((0.04, 0.08, 0.2))
    assert scaled["actor_lr"] == hopper["actor_lr"] and scaled_noises(hopper, hopper, 1.0) == hopper
    kwargs = scaled_noises(dict(policy_noise=0.2, noise_clip=0.5, update_actor_freq=2), pendulum, max_action=2.0)
    assert kwargs == dict(policy_noise=0.2, noise_clip=0.5, update_actor_freq=2)  # test_td3.py: the values as given
