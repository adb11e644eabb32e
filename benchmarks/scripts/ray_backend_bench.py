"""backend="ray" against backend="mp" on one machine, and start-up on a two-node cluster (the figures of docs/guide/ray.md).

Each measured run is a fresh process (``--one``); the main process interleaves them (mp, ray, ray, mp, ...), so a
change of the machine's load hits both backends alike. A run trains for ``--seconds`` after a warm-up and reports:

* env steps/s over the window (and Ape-X's learner batches/s);
* start-up: ``ray.init`` (a local Ray, 2 logical CPUs), the runtime's start (hosts and their workers running), and
  the time from ``learn()`` to the first env steps reaching the driver;
* memory: PSS of the whole process tree (driver, Ray's daemons and actors, the workers) at the end of the window.

``--cluster`` measures a two-node ``ray.cluster_utils.Cluster`` on this machine: its start, the runtime's start, the
nodes the workers ran on, and a Ray actor round trip carrying an A3C CartPole gradient (the parameter-server-per-update
design's cost per update) against the local update time.

    python benchmarks/scripts/ray_backend_bench.py --rounds 2 --seconds 40 [--out DIR]

Without ``--out`` it prints its tables only; with ``--out DIR`` it also writes ``DIR/runs.json`` (every run's
measurements) and ``DIR/results.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np


def tree_pss_mib() -> float:
    """PSS of this process and all its descendants (MiB)."""
    import psutil

    total = 0
    for proc in [psutil.Process(), *psutil.Process().children(recursive=True)]:
        try:
            total += proc.memory_full_info().pss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return total / 2**20


def tree_nice_values() -> list[int]:
    """The distinct nice values in this process tree (a Ray started here must keep the driver's priority)."""
    import psutil

    values = set()
    for proc in [psutil.Process(), *psutil.Process().children(recursive=True)]:
        try:
            values.add(proc.nice())
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return sorted(values)


def cpu_seconds() -> tuple[float, float]:
    """CPU seconds used so far by this process, and by its live descendants (Ray's daemons and workers included)."""
    import psutil

    own = sum(psutil.Process().cpu_times()[:2])
    others = 0.0
    for proc in psutil.Process().children(recursive=True):
        try:
            others += sum(proc.cpu_times()[:2])
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return own, others


def make_model(algo: str, backend: str, seed: int = 0) -> Any:
    from sb3_async import A3C, ApeXDQN

    if algo == "a3c":
        return A3C("MlpPolicy", "CartPole-v1", n_workers=2, seed=seed, backend=backend)
    # "apex": learner and actors as fast as they can (the paper), so the backend also moves the CPU split between
    # them on a shared machine; "apex_ratio8": the zoo's fixed replay ratio (the learner's work per env step fixed);
    # "apex_idle": the learner never starts (the actors' steps and the transport of their blocks only).
    extra = dict(apex_ratio8=dict(replay_ratio=8), apex_idle=dict(learning_starts=10**9)).get(algo, {})
    kwargs = {**dict(learning_starts=1000, batch_size=64, buffer_size=100_000, seed=seed, backend=backend), **extra}
    return ApeXDQN("MlpPolicy", "CartPole-v1", n_actors=2, **kwargs)


def run_one(algo: str, backend: str, seconds: float, warmup: float) -> dict[str, Any]:
    import torch
    from stable_baselines3.common.callbacks import BaseCallback

    torch.set_num_threads(1)  # the learner shares the cores with the workers (tests/algorithms/test_apex.py)
    result: dict[str, Any] = dict(algo=algo, backend=backend)
    if backend == "ray":
        import ray

        start = time.perf_counter()
        ray.init(num_cpus=2, include_dashboard=False)
        result["ray_init_s"] = time.perf_counter() - start
    model = make_model(algo, backend)

    class Window(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.learn_start = time.perf_counter()
            self.window_start: float | None = None

        def _on_step(self) -> bool:
            now = time.perf_counter()
            if "first_steps_s" not in result:
                result["first_steps_s"] = now - self.learn_start
                runtime = self.model._runtime
                result["runtime_start_s"] = getattr(runtime, "startup_seconds", None)
            if self.window_start is None and now - self.learn_start >= warmup:
                self.window_start, self.steps0 = now, self.num_timesteps
                self.updates0 = self.model._n_updates
                self.cpu0 = cpu_seconds()
            if self.window_start is not None and now - self.window_start >= seconds:
                elapsed = now - self.window_start
                result["env_steps_per_s"] = (self.num_timesteps - self.steps0) / elapsed
                result["updates_per_s"] = (self.model._n_updates - self.updates0) / elapsed
                result["pss_mib"] = tree_pss_mib()
                result["nice_values"] = tree_nice_values()
                cpu = cpu_seconds()
                result["driver_cpu_per_s"] = (cpu[0] - self.cpu0[0]) / elapsed
                result["descendants_cpu_per_s"] = (cpu[1] - self.cpu0[1]) / elapsed
                return False
            return True

    model.learn(10_000_000, callback=Window())
    if backend == "ray":
        import ray

        ray.shutdown()
    return result


def run_cluster() -> dict[str, Any]:
    import ray
    from ray.cluster_utils import Cluster
    from stable_baselines3.common.callbacks import BaseCallback

    result: dict[str, Any] = {}
    start = time.perf_counter()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    cluster.add_node(num_cpus=2)
    ray.init(address=cluster.address)
    result["cluster_start_s"] = time.perf_counter() - start
    try:
        model = make_model("apex", "ray")

        class First(BaseCallback):
            def __init__(self) -> None:
                super().__init__()
                self.learn_start = time.perf_counter()

            def _on_step(self) -> bool:
                result["first_steps_s"] = time.perf_counter() - self.learn_start
                result["runtime_start_s"] = self.model._runtime.startup_seconds
                result["nodes_used"] = len(set(self.model._runtime.worker_nodes().values()))
                return False

        model.learn(10_000_000, callback=First())

        # The rejected design, a parameter-server actor applying every gradient: its round trip per update.
        from sb3_async import A3C

        a3c = A3C("MlpPolicy", "CartPole-v1", n_workers=1)
        n_params = sum(param.numel() for param in a3c.policy.parameters())

        @ray.remote(num_cpus=0)
        class ParameterServer:
            def __init__(self, n: int) -> None:
                self.params = np.zeros(n, dtype=np.float32)

            def apply(self, grad: np.ndarray) -> np.ndarray:
                self.params -= 1e-3 * grad
                return self.params

        other = next(node["NodeID"] for node in ray.nodes() if node["NodeID"] != ray.get_runtime_context().get_node_id())
        strategy = ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(other, soft=False)
        server = ParameterServer.options(scheduling_strategy=strategy).remote(n_params)
        grad = np.ones(n_params, dtype=np.float32)
        ray.get(server.apply.remote(grad))
        times = []
        for _ in range(200):
            start = time.perf_counter()
            ray.get(server.apply.remote(grad))
            times.append(time.perf_counter() - start)
        result["a3c_cartpole_params"] = n_params
        result["ps_round_trip_ms"] = 1e3 * float(np.median(times))
    finally:
        ray.shutdown()
        cluster.shutdown()
    return result


def run_replay(rounds: int = 20) -> dict[str, Any]:
    """What one learner's replay can insert and replay (docs/guide/ray.md): a block of 50 transitions added with
    priorities, and a batch of 512 sampled with IS weights plus its priority update, for CartPole-sized vectors and
    Atari frames (uint8 4x84x84, 20k capacity). Process CPU time (a busy shared core does not inflate it), medians."""
    from gymnasium import spaces

    from sb3_async import PrioritizedReplayBuffer

    rng = np.random.default_rng(0)
    out: dict[str, Any] = {}
    for label, shape, dtype, capacity in (("vector", (4,), np.float32, 100_000), ("atari", (4, 84, 84), np.uint8, 20_000)):
        space = spaces.Box(0, 255, shape, dtype=dtype)
        buffer = PrioritizedReplayBuffer(capacity, space, spaces.Discrete(6), device="cpu", n_envs=1)
        obs = rng.integers(0, 255, (50, 1, *shape)).astype(dtype)

        def add(buffer: PrioritizedReplayBuffer = buffer, obs: np.ndarray = obs) -> None:
            buffer.extend(obs, obs, rng.integers(0, 6, (50, 1, 1)), rng.random((50, 1)), np.zeros((50, 1)), None,
                          priorities=rng.random((50, 1)) + 0.01)  # fmt: skip

        while buffer.size() < capacity:
            add()
        adds, samples = [], []
        for _ in range(rounds):
            start = time.process_time()
            for _ in range(20):
                add()
            adds.append((time.process_time() - start) / 20)
            start = time.process_time()
            for _ in range(5):
                batch = buffer.sample_arrays(512)
                buffer.update_priorities(batch.indices, rng.random(512) + 0.01)
            samples.append((time.process_time() - start) / 5)
        out[f"{label}_add50_ms"] = 1e3 * float(np.median(adds))
        out[f"{label}_sample512_update_ms"] = 1e3 * float(np.median(samples))
        out[f"{label}_insert_per_s"] = 50 / float(np.median(adds))
        out[f"{label}_replay_per_s"] = 512 / float(np.median(samples))
    return out


def run_ingest(seconds: float = 20.0, producers: int = 2) -> dict[str, Any]:
    """How many Atari transitions one driver can take in from Ray actors and insert into its replay (a simulation of
    many actors: ``producers`` Ray actors hand out ready-made blocks of 50 transitions, obs and next obs uint8
    4x84x84 as ApeX actors send them, one request in flight each, as RayRuntime does)."""
    import ray
    from gymnasium import spaces

    from sb3_async import PrioritizedReplayBuffer

    ray.init(num_cpus=2, include_dashboard=False)
    try:

        @ray.remote(num_cpus=0)
        class Producer:
            def __init__(self) -> None:
                rng = np.random.default_rng(0)
                self.block = dict(
                    obs=rng.integers(0, 255, (50, 4, 84, 84), dtype=np.uint8),
                    next_obs=rng.integers(0, 255, (50, 4, 84, 84), dtype=np.uint8),
                    actions=np.zeros((50, 1), dtype=np.int64),
                    returns=np.zeros(50, dtype=np.float32),
                    dones=np.zeros(50, dtype=np.float32),
                    priorities=np.ones(50),
                )

            def block_(self) -> dict[str, np.ndarray]:
                return self.block

        space = spaces.Box(0, 255, (4, 84, 84), dtype=np.uint8)
        buffer = PrioritizedReplayBuffer(20_000, space, spaces.Discrete(6), device="cpu", n_envs=1)
        actors = [Producer.remote() for _ in range(producers)]
        inflight = {actor.block_.remote(): actor for actor in actors}
        inserted, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            ready, _ = ray.wait(list(inflight), num_returns=1)
            for ref in ready:
                actor = inflight.pop(ref)
                block = ray.get(ref)
                buffer.extend(block["obs"][:, None], block["next_obs"][:, None], block["actions"][:, None],
                              block["returns"][:, None], block["dones"][:, None], None,
                              priorities=block["priorities"][:, None])  # fmt: skip
                inserted += 50
                inflight[actor.block_.remote()] = actor
        elapsed = time.perf_counter() - start
        per_transition = 2 * 4 * 84 * 84
        return dict(
            atari_ingest_transitions_per_s=inserted / elapsed,
            atari_ingest_mb_per_s=inserted * per_transition / elapsed / 1e6,
            producers=producers,
        )
    finally:
        ray.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--one", nargs=2, metavar=("ALGO", "BACKEND"), help="one run in this process (internal)")
    parser.add_argument("--cluster", action="store_true", help="the two-node measurements only, in this process")
    parser.add_argument("--replay", action="store_true", help="the replay's insert and replay rates only")
    parser.add_argument("--ingest", action="store_true", help="the driver's Atari block intake through Ray only")
    parser.add_argument("--algos", nargs="+", default=["apex", "a3c"])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--warmup", type=float, default=15.0)
    parser.add_argument("--out", type=Path, help="write runs.json and results.md to this folder (default: print only)")
    args = parser.parse_args()
    if args.one:
        print("RESULT " + json.dumps(run_one(*args.one, args.seconds, args.warmup)), flush=True)
        return
    if args.cluster:
        print("RESULT " + json.dumps(run_cluster()), flush=True)
        return
    if args.replay:
        print("RESULT " + json.dumps(run_replay()), flush=True)
        return
    if args.ingest:
        print("RESULT " + json.dumps(run_ingest()), flush=True)
        return
    runs = []

    def fresh(*extra: str) -> dict[str, Any]:
        command = [sys.executable, __file__, *extra, "--seconds", str(args.seconds), "--warmup", str(args.warmup)]
        output = subprocess.run(command, capture_output=True, text=True, env=os.environ.copy(), check=True).stdout
        return json.loads(next(line for line in output.splitlines() if line.startswith("RESULT "))[len("RESULT ") :])

    for round_ in range(args.rounds):
        for algo in args.algos:
            order = ["mp", "ray"] if round_ % 2 == 0 else ["ray", "mp"]
            for backend in order:
                run = fresh("--one", algo, backend)
                run["round"] = round_
                print(json.dumps(run), flush=True)
                runs.append(run)
    cluster = fresh("--cluster")
    print(json.dumps(cluster), flush=True)
    replay = fresh("--replay")
    print(json.dumps(replay), flush=True)

    lines = [
        "| algo | backend | env steps/s | learner updates/s | ray.init (s) | runtime start (s) | learn() to first steps (s) "
        "| PSS of the tree (MiB) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        lines.append(
            f"| {run['algo']} (round {run['round']}) | {run['backend']} | {run['env_steps_per_s']:.0f} "
            f"| {run['updates_per_s']:.1f} "
            f"| {run.get('ray_init_s', float('nan')):.1f} | {run.get('runtime_start_s') or float('nan'):.1f} "
            f"| {run['first_steps_s']:.1f} | {run['pss_mib']:.0f} |"
        )
    lines += ["", "| algo | ray / mp env steps/s, per round |", "|---|---|"]
    for algo in args.algos:
        ratios = []
        for round_ in range(args.rounds):
            by = {run["backend"]: run for run in runs if run["algo"] == algo and run["round"] == round_}
            ratios.append(by["ray"]["env_steps_per_s"] / by["mp"]["env_steps_per_s"])
        lines.append(f"| {algo} | {', '.join(f'{ratio:.2f}' for ratio in ratios)} |")
    lines += ["", "Two-node cluster on this machine: " + json.dumps(cluster)]
    lines += ["", "Replay (PrioritizedReplayBuffer, CPU time): " + json.dumps(replay)]
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "runs.json").write_text(json.dumps(dict(runs=runs, cluster=cluster, replay=replay), indent=1))
        (args.out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
