"""The protocol an external peer runs under, the same as ours (docs/benchmarks.md, "Protocol"), in the peer's process.

An adapter builds its library's env, model and collector with its library's own settings, then calls
:meth:`PeerRun.start` just before training (building is off the clock, as the zoo's ``setup_experiment`` is for
ours) and :meth:`PeerRun.step` wherever its training loop is between two batches, with the env steps so far and its
deterministic policy. :meth:`PeerRun.step` does what :class:`~sb3_async.benchmark.run_one.EvalClock` does for ours:

- every ``eval_interval`` env steps, ``n_eval_episodes`` episodes of the policy on a fresh ``gymnasium.make(env_id)``
  env, the evaluation time taken off the training clock. The policy is frozen meanwhile: the adapter calls
  :meth:`PeerRun.step` only where its own training waits for it (between a collection and the next update);
- it ends the run (raising :class:`StopRun`, which :func:`main` catches) at the first evaluation reaching the
  threshold (when the suite says so), when the training clock reaches the budget, or at ``max_steps`` env steps.

:func:`main` writes the record the runner parses, with the fields of :func:`sb3_async.benchmark.run_one.run`'s record
plus ``peer`` (the library, its version and the interpreter), the adapter's hyperparameters and their source.

This module imports neither SB3 nor the RL Zoo nor torch (it runs in environments that pin other versions).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from sb3_async.benchmark.plan import RunSpec
from sb3_async.benchmark.records import PeakMemory, emit, failed_record, identity, json_safe
from sb3_async.runtime.processes import watch_parent_from_env

#: A batch of observations -> a batch of actions, deterministic, from the policy as it is now.
Policy = Callable[[np.ndarray], np.ndarray]

#: Distributions whose versions every peer's record holds (besides the peer's own library and ``packages``).
COMMON_PACKAGES = ("torch", "gymnasium", "numpy")


class StopRun(Exception):
    """The run is over (``reason``: ``"threshold"``, ``"budget"`` or ``"max_steps"``): raised out of the adapter's
    training loop by :meth:`PeerRun.step`."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def evaluate(env: Any, policy: Policy, n_episodes: int, seed: int | None = None) -> list[float]:
    """Returns of ``n_episodes`` episodes of ``policy`` on the gymnasium env ``env`` (one observation at a time, as a
    batch of one). ``seed`` seeds the first reset (None: the env's generator carries on)."""
    returns = []
    for episode in range(n_episodes):
        obs, _ = env.reset(seed=seed if episode == 0 else None)
        total, done = 0.0, False
        while not done:
            action = np.asarray(policy(np.asarray(obs)[None]))[0]
            obs, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            done = bool(terminated or truncated)
        returns.append(total)
    return returns


class PeerRun:
    """The clock, the evaluations and the stop rules of one peer run (see the module docstring).

    :param spec: the run
    :param hyperparameters: the adapter's settings for ``spec.env_id`` (``n_timesteps``: its own step budget, used
        when the suite fixes none)
    :param memory: sampled (PSS included) at each evaluation
    :param make_env: builds the evaluation env (default: ``gymnasium.make(spec.env_id)``)
    """

    def __init__(
        self,
        spec: RunSpec,
        hyperparameters: Mapping[str, Any],
        memory: PeakMemory | None = None,
        make_env: Callable[[], Any] | None = None,
    ):
        self.spec = spec
        self.hyperparameters = dict(hyperparameters)
        self.max_steps = int(spec.max_steps or self.hyperparameters["n_timesteps"])
        self.interval = spec.eval_interval if not spec.evals_per_run else max(1, self.max_steps // spec.evals_per_run)
        self.memory = memory
        self._make_env = make_env if make_env is not None else self._gymnasium_env
        self.eval_env: Any = None
        self.created = time.perf_counter()
        self.setup_seconds: float | None = None
        self.started: float | None = None
        self.eval_seconds = 0.0
        self.next_eval = self.interval
        self.curve: list[dict[str, float]] = []
        self.reached: dict[str, float] | None = None
        self.stop_reason: str | None = None
        self.steps = 0
        self.policy: Policy | None = None
        self.first_step: tuple[float, int] | None = None
        self.last_step: tuple[float, int] | None = None
        self.train_seconds: float | None = None  # the clock when training ended (finish())

    def use_eval_env(self, make_env: Callable[[], Any]) -> None:
        """Evaluate on the envs ``make_env`` builds (the peer's own pipeline: Atari preprocessing, say) instead of
        ``gymnasium.make(env_id)``; before the first evaluation."""
        if self.eval_env is not None:
            raise RuntimeError("use_eval_env() after the first evaluation: the evaluation env is built already")
        self._make_env = make_env

    def _gymnasium_env(self) -> Any:
        import gymnasium

        return gymnasium.make(self.spec.env_id)

    @property
    def env_id(self) -> str:
        return self.spec.env_id

    @property
    def seed(self) -> int:
        return self.spec.seed

    def start(self) -> None:
        """Start the training clock (call it just before the training loop)."""
        self.started = time.perf_counter()
        self.setup_seconds = self.started - self.created
        emit(dict(kind="start", total=self.max_steps))

    def clock(self, now: float | None = None) -> float:
        """Training seconds so far: wall-clock since :meth:`start`, evaluations excluded."""
        if self.started is None:
            raise RuntimeError("PeerRun.clock() before PeerRun.start(): the adapter must start the clock first")
        if self.train_seconds is not None:
            return self.train_seconds
        return (time.perf_counter() if now is None else now) - self.started - self.eval_seconds

    def step(self, steps: int, policy: Policy) -> None:
        """Where the adapter's training is between two batches: ``steps`` env steps so far, ``policy`` its
        deterministic policy. Evaluates when an interval is due; raises :class:`StopRun` when the run is over."""
        now = time.perf_counter()
        self.steps, self.policy = int(steps), policy
        self.last_step = (self.clock(now), self.steps)
        if self.first_step is None:
            self.first_step = self.last_step
        if self.steps >= self.next_eval and (self.reached is None or self.spec.evaluate_after_threshold):
            while self.next_eval <= self.steps:
                self.next_eval += self.interval
            self.evaluate_now()
            if self.reached is not None and self.spec.stop_at_threshold:
                self._stop("threshold")
        if self.spec.budget_seconds is not None and self.clock() >= self.spec.budget_seconds:
            self._stop("budget")
        if self.steps >= self.max_steps:
            self._stop("max_steps")

    def _stop(self, reason: str) -> None:
        self.stop_reason = reason
        raise StopRun(reason)

    def evaluate_now(self) -> dict[str, float]:
        """One evaluation point of the last policy given to :meth:`step`, off the clock."""
        if self.policy is None:
            raise RuntimeError("No policy to evaluate: the adapter never called PeerRun.step()")
        paused = time.perf_counter()
        clock = self.clock(paused)
        if self.memory is not None:
            self.memory.sample(pss=True)
        first = self.eval_env is None
        if first:
            self.eval_env = self._make_env()
        returns = evaluate(self.eval_env, self.policy, self.spec.n_eval_episodes, seed=self.seed if first else None)
        self.eval_seconds += time.perf_counter() - paused
        point = dict(seconds=clock, steps=self.steps, mean=float(np.mean(returns)), std=float(np.std(returns)))
        self.curve.append(point)
        if self.reached is None and point["mean"] >= self.spec.threshold:
            self.reached = point
        emit(dict(kind="eval", total=self.max_steps, eval_seconds=self.eval_seconds, **point))
        return point

    def finish(self) -> None:
        """Stop the clock (training is over) and evaluate once more if training went on since the last evaluation."""
        if self.started is None:
            raise RuntimeError("The adapter returned without starting the clock (PeerRun.start())")
        self.train_seconds = self.clock()
        if self.stop_reason != "threshold" and (not self.curve or self.curve[-1]["steps"] < self.steps):
            self.evaluate_now()

    def record(self) -> dict[str, Any]:
        """The run's record (the fields of ``run_one``'s); after :meth:`finish`."""
        train_seconds = self.clock()
        final = self.curve[-1]
        final_policy = None
        if self.spec.final_eval_episodes and self.policy is not None:  # the policy training ended with, a fresh env
            env = self._make_env()
            rewards = evaluate(env, self.policy, self.spec.final_eval_episodes, seed=self.seed + 1)
            env.close()
            final_policy = dict(mean=float(np.mean(rewards)), std=float(np.std(rewards)), rewards=rewards)
        after_startup = None
        if self.first_step is not None and self.last_step is not None and self.last_step[0] > self.first_step[0]:
            after_startup = (self.last_step[1] - self.first_step[1]) / (self.last_step[0] - self.first_step[0])
        return dict(
            **identity(self.spec),
            hyperparameters=json_safe(self.hyperparameters),
            reached=self.reached is not None,
            seconds_to_threshold=None if self.reached is None else self.reached["seconds"],
            steps_to_threshold=None if self.reached is None else int(self.reached["steps"]),
            final_eval_mean=final["mean"],
            final_eval_std=final["std"],
            env_steps=self.steps,
            train_seconds=train_seconds,
            eval_seconds=self.eval_seconds,
            startup_seconds=None if self.first_step is None else self.first_step[0],
            setup_seconds=self.setup_seconds,
            steps_per_second=self.steps / train_seconds if train_seconds > 0 else None,
            steps_per_second_after_startup=after_startup,
            stop_reason=self.stop_reason or "max_steps",
            curve=self.curve,
            eval_interval_steps=self.interval,
            final_policy=final_policy,
            error=None,
        )


def versions(packages: Iterable[str]) -> dict[str, str | None]:
    """The installed version of each distribution (None: not installed)."""
    found: dict[str, str | None] = {}
    for package in packages:
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            found[package] = None
    return found


def set_torch_threads(threads: int | None) -> int | None:
    """The suite's torch threads for this process, as for ours (None: torch's default); torch's count after, or None
    without torch."""
    try:
        import torch
    except ImportError:
        return None
    if threads:
        torch.set_num_threads(threads)
    return int(torch.get_num_threads())


def main(
    train: Callable[[PeerRun], None],
    library: str,
    hyperparameters: Mapping[str, Mapping[str, Any]],
    sources: Mapping[str, str],
    packages: Iterable[str] = (),
    argv: list[str] | None = None,
) -> int:
    """An adapter's entry point: ``python ADAPTER.py SPEC.json RESULT.json`` (or ``python -m ADAPTER ...``).

    :param train: builds the peer for ``run.env_id`` and trains it, calling ``run.start()`` then ``run.step()``
    :param library: the distribution the peer comes from (its version is recorded)
    :param hyperparameters: env id -> the peer's settings (``n_timesteps`` included), as the adapter uses them
    :param sources: env id -> where those settings come from (the library's example or config file, its version)
    :param packages: other distributions whose versions matter (recorded)
    """
    parser = argparse.ArgumentParser(description="Run one benchmark run of an external peer")
    parser.add_argument("spec", type=Path, help="JSON file of a RunSpec")
    parser.add_argument("result", type=Path, help="where to write the run's record (JSON)")
    args = parser.parse_args(argv)
    watch_parent_from_env()  # this run, and what it started, end with the benchmark
    spec = RunSpec.from_dict(json.loads(args.spec.read_text()))
    result_path, home = args.result.absolute(), Path.cwd()
    adapter = Path(sys.modules[train.__module__].__file__ or spec.adapter or "adapter").name
    peer: dict[str, Any] = dict(
        library=library,
        adapter=spec.adapter,
        python=sys.executable,
        python_version=platform.python_version(),
        versions=versions([library, *packages, *COMMON_PACKAGES]),
        omp_num_threads=os.environ.get("OMP_NUM_THREADS"),
    )
    memory = PeakMemory()
    memory.start()
    try:
        if spec.env_id not in hyperparameters:
            raise ValueError(
                f"Invalid env {spec.env_id!r} for {spec.algo!r}: its adapter has settings for {', '.join(hyperparameters)}"
            )
        if spec.params:
            raise ValueError(f"Invalid overrides {spec.params!r} for {spec.algo!r}: a peer runs its library's settings")
        peer["torch_threads"] = set_torch_threads(spec.torch_threads)
        run = PeerRun(spec, hyperparameters[spec.env_id], memory)
        with tempfile.TemporaryDirectory(prefix="sb3_async_peer_") as workdir:
            os.chdir(workdir)  # whatever the library writes (logs, checkpoints) stays out of the caller's folder
            try:
                train(run)
            except StopRun:
                pass
            finally:
                os.chdir(home)
            run.finish()
            record = run.record()
            if run.eval_env is not None:
                run.eval_env.close()
        memory.stop()
        record.update(
            hyperparameters_source=f"{adapter}:{spec.env_id} ({sources[spec.env_id]})",
            peak_rss_mb=memory.peak_rss / 2**20,
            peak_pss_mb=memory.peak_pss / 2**20 if memory.peak_pss else None,
            peer=peer,
        )
    except Exception:
        record = dict(failed_record(spec, traceback.format_exc()), peer=peer)
        result_path.write_text(json.dumps(record, indent=1))
        print(record["error"], file=sys.stderr)
        return 1
    result_path.write_text(json.dumps(record, indent=1))
    return 0
