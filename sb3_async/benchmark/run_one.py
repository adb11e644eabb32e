"""One benchmark run, in a fresh process: ``python -m sb3_async.benchmark.run_one SPEC.json RESULT.json``.

The model and the evaluation env are built by the RL Zoo's own ``ExperimentManager`` from the algorithm's YAML entry
(plus the suite's overrides), so both libraries get their hyperparameters, wrappers, frame stacking, schedules and
``VecNormalize`` exactly as the zoo's ``train`` would. Then:

- the training clock starts just before ``learn()`` (worker start-up of the async algorithms included);
- every ``eval_interval`` env steps :class:`EvalClock` evaluates the deterministic policy for ``n_eval_episodes``
  episodes on the eval env. The async algorithms' workers are parked meanwhile (``model.pause_workers()``), SB3's
  algorithms pause by construction, and the evaluation time is taken off the clock;
- the run stops at the first evaluation reaching the threshold (when the suite says so), at ``max_steps`` or when
  the training clock reaches ``budget_seconds``, and ends with a final evaluation if training went on since the last;
- a thread samples the memory of the whole process tree (this process, the forkserver and the workers).

Progress lines (``EVENT_PREFIX`` + JSON) go to stdout for the runner's progress bar; the record goes to RESULT.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.vec_env import VecEnv, sync_envs_normalization

from sb3_async.benchmark.plan import RunSpec
from sb3_async.benchmark.records import EVENT_PREFIX, PeakMemory, emit, failed_record, identity, json_safe
from sb3_async.runtime.processes import watch_parent_from_env

__all__ = ["EVENT_PREFIX", "EvalClock", "failed_record", "run", "true_num_timesteps", "worker_overrides", "zoo_entry"]


def true_num_timesteps(model: BaseAlgorithm) -> int:
    """Env steps done so far. For the async algorithms, the workers' own count when it is ahead of
    ``model.num_timesteps`` (the main process turns the workers' progress into callback calls a few milliseconds
    late); exact while the workers are parked."""
    steps = int(model.num_timesteps)
    runtime = getattr(model, "_runtime", None)
    if runtime is not None and hasattr(runtime, "steps"):
        with contextlib.suppress(Exception):
            steps = max(steps, int(getattr(model, "_num_timesteps_at_start", 0)) + int(runtime.steps()))
    return steps


class EvalClock(BaseCallback):
    """Evaluates every ``interval`` steps off the clock, stops at the threshold or the time budget.

    :param eval_env: built by the zoo with the training env's wrappers
    :param start: ``time.perf_counter()`` just before ``learn()``
    :param on_eval: called with each evaluation point
    :param memory: sampled (PSS included) at each evaluation, off the clock, while the workers are alive and parked
    :param evaluate_after_threshold: keep evaluating every ``interval`` once the threshold is reached (when the run
        goes on); False: only the final evaluation (fewer pauses of the workers, e.g. for throughput)
    """

    def __init__(
        self,
        eval_env: VecEnv,
        interval: int,
        n_episodes: int,
        threshold: float,
        stop_at_threshold: bool,
        budget_seconds: float | None,
        start: float,
        on_eval: Callable[[dict[str, Any]], None] = lambda point: None,
        memory: PeakMemory | None = None,
        evaluate_after_threshold: bool = True,
    ):
        super().__init__()
        self.evaluate_after_threshold = evaluate_after_threshold
        self.eval_env, self.interval, self.n_episodes = eval_env, interval, n_episodes
        self.threshold, self.stop_at_threshold, self.budget_seconds = threshold, stop_at_threshold, budget_seconds
        self.start, self.on_eval, self.memory = start, on_eval, memory
        self.eval_seconds = 0.0
        self.next_eval = interval
        self.curve: list[dict[str, float]] = []
        self.reached: dict[str, float] | None = None
        self.stop_reason: str | None = None
        self.first_step: tuple[float, int] | None = None  # (clock, steps) at the first callback: start-up done
        self.last_step: tuple[float, int] | None = None
        self.steps_at_stop: int | None = None  # the workers' count when this callback stopped training

    def clock(self, now: float | None = None) -> float:
        """Training seconds so far: wall-clock since ``learn()`` started, evaluations excluded."""
        return (time.perf_counter() if now is None else now) - self.start - self.eval_seconds

    def evaluate(self, model: BaseAlgorithm) -> dict[str, float]:
        """One evaluation point; the async algorithms' workers are parked while it runs."""
        pause = getattr(model, "pause_workers", None)
        with pause() if pause is not None else contextlib.nullcontext():
            parked = time.perf_counter()
            clock, steps = self.clock(parked), true_num_timesteps(model)
            if self.memory is not None:
                self.memory.sample(pss=True)
            train_env = model.get_env()
            if train_env is not None and model.get_vec_normalize_env() is not None:
                sync_envs_normalization(train_env, self.eval_env)
            rewards, _ = evaluate_policy(
                model, self.eval_env, n_eval_episodes=self.n_episodes, deterministic=True, return_episode_rewards=True
            )
        self.eval_seconds += time.perf_counter() - parked
        point = dict(seconds=clock, steps=steps, mean=float(np.mean(rewards)), std=float(np.std(rewards)))
        self.curve.append(point)
        if self.reached is None and point["mean"] >= self.threshold:
            self.reached = point
        self.on_eval(point)
        return point

    def _on_step(self) -> bool:
        now = time.perf_counter()
        self.last_step = (self.clock(now), self.num_timesteps)
        if self.first_step is None:
            self.first_step = self.last_step
        if self.num_timesteps >= self.next_eval and (self.reached is None or self.evaluate_after_threshold):
            while self.next_eval <= self.num_timesteps:
                self.next_eval += self.interval
            self.evaluate(self.model)
            if self.reached is not None and self.stop_at_threshold:
                return self._stop("threshold")
        if self.budget_seconds is not None and self.clock() >= self.budget_seconds:
            return self._stop("budget")
        return True

    def _stop(self, reason: str) -> bool:
        self.stop_reason = reason
        self.steps_at_stop = true_num_timesteps(self.model)
        return False


def zoo_entry(config: Path, env_id: str, alias: str | None) -> tuple[str, dict[str, Any]]:
    """The YAML entry the zoo will use for ``env_id`` (its own lookup: the id, else ``atari``, else ``default``),
    or the ``alias`` entry when the file has none of the id."""
    from rl_zoo3.exp_manager import ExperimentManager

    entries = yaml.safe_load(config.read_text())
    for key in (env_id, alias):
        if key is not None and key in entries:
            return key, dict(entries[key])
    if ExperimentManager.is_atari(env_id) and "atari" in entries:
        return "atari", dict(entries["atari"])
    if "default" in entries:
        return "default", dict(entries["default"])
    raise ValueError(f"No hyperparameters for {env_id} in {config}")


def worker_overrides(entry: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """A worker-count override with the config's envs per worker: ``n_envs`` follows (the zoo requires
    ``n_envs == n_workers * n_envs_per_worker`` for our algorithms)."""
    if "n_workers" not in params or "n_envs" in params:
        return params
    from sb3_async.zoo import resolve_worker_counts

    _, per_worker = resolve_worker_counts(int(entry.get("n_envs", 1)), entry.get("n_workers"), entry.get("n_envs_per_worker"))
    per_worker = int(params.get("n_envs_per_worker", per_worker))
    return {**params, "n_envs": int(params["n_workers"]) * per_worker, "n_envs_per_worker": per_worker}


def run(spec: RunSpec, workdir: Path) -> dict[str, Any]:
    """Execute ``spec``; return its record (see the module docstring)."""
    memory = PeakMemory()
    memory.start()
    import rl_zoo3.import_envs  # noqa: F401  (registers the Atari ids, as the zoo's train does)
    from rl_zoo3.exp_manager import ExperimentManager

    from sb3_async import zoo

    zoo.register()
    if spec.torch_threads:
        import torch

        torch.set_num_threads(spec.torch_threads)
    config = Path(spec.config)
    key, entry = zoo_entry(config, spec.env_id, spec.config_alias)
    if key == spec.config_alias:  # the zoo looks entries up by env id: give it the alias entry under that id
        config = workdir / f"{spec.algo}.yml"
        config.write_text(yaml.safe_dump({spec.env_id: entry}))
    params = worker_overrides(entry, dict(spec.params))
    manager = ExperimentManager(
        argparse.Namespace(),
        spec.algo,
        spec.env_id,
        str(workdir / "logs"),
        n_timesteps=spec.max_steps or 0,
        eval_freq=-1,
        save_freq=-1,
        hyperparams=params or None,
        seed=spec.seed,
        verbose=0,
        device=spec.device,
        config=str(config),
    )
    setup_start = time.perf_counter()
    result = manager.setup_experiment()
    setup_seconds = time.perf_counter() - setup_start  # building the env and the model: off the race clock, both sides
    assert result is not None
    model, saved_hyperparams = result
    eval_env = manager.create_envs(1, eval_env=True)
    total_timesteps = manager.n_timesteps
    hyperparameters = json_safe(dict(saved_hyperparams))
    hyperparameters["n_timesteps"] = total_timesteps
    for name in ("n_workers", "n_envs_per_worker"):
        if hasattr(model, name):
            hyperparameters[name] = int(getattr(model, name))

    def on_eval(point: dict[str, Any]) -> None:
        emit(dict(kind="eval", total=total_timesteps, eval_seconds=clock.eval_seconds, **point))

    emit(dict(kind="start", total=total_timesteps))
    interval = spec.eval_interval if not spec.evals_per_run else max(1, total_timesteps // spec.evals_per_run)
    start = time.perf_counter()
    clock = EvalClock(
        eval_env,
        interval,
        spec.n_eval_episodes,
        spec.threshold,
        spec.stop_at_threshold,
        spec.budget_seconds,
        start,
        on_eval,
        memory,
        spec.evaluate_after_threshold,
    )
    model.learn(total_timesteps, callback=clock)
    train_seconds = clock.clock()
    steps = max(int(model.num_timesteps), clock.steps_at_stop or 0)
    if clock.stop_reason != "threshold" and (not clock.curve or clock.curve[-1]["steps"] < steps):
        clock.evaluate(model)
        clock.curve[-1]["seconds"] = train_seconds  # the clock stopped when learn() returned
    final = clock.curve[-1]
    final_policy = None
    if spec.final_eval_episodes:  # the model learn() returned, on a fresh eval env (workers stopped: nothing moves)
        final_env = manager.create_envs(1, eval_env=True)
        train_env = model.get_env()
        if train_env is not None and model.get_vec_normalize_env() is not None:
            sync_envs_normalization(train_env, final_env)
        final_rewards, _ = evaluate_policy(
            model, final_env, n_eval_episodes=spec.final_eval_episodes, deterministic=True, return_episode_rewards=True
        )
        final_env.close()
        final_policy = dict(mean=float(np.mean(final_rewards)), std=float(np.std(final_rewards)), rewards=final_rewards)
    with contextlib.suppress(Exception):
        model.env.close()  # type: ignore[union-attr]
    eval_env.close()
    memory.stop()
    after_startup = None
    if clock.first_step is not None and clock.last_step is not None and clock.last_step[0] > clock.first_step[0]:
        after_startup = (clock.last_step[1] - clock.first_step[1]) / (clock.last_step[0] - clock.first_step[0])
    return dict(
        **identity(spec),
        hyperparameters=hyperparameters,
        hyperparameters_source=f"{Path(spec.config).name}:{key}",
        reached=clock.reached is not None,
        seconds_to_threshold=None if clock.reached is None else clock.reached["seconds"],
        steps_to_threshold=None if clock.reached is None else int(clock.reached["steps"]),
        final_eval_mean=final["mean"],
        final_eval_std=final["std"],
        env_steps=steps,
        train_seconds=train_seconds,
        eval_seconds=clock.eval_seconds,
        startup_seconds=None if clock.first_step is None else clock.first_step[0],
        setup_seconds=setup_seconds,
        steps_per_second=steps / train_seconds if train_seconds > 0 else None,
        steps_per_second_after_startup=after_startup,
        peak_rss_mb=memory.peak_rss / 2**20,
        peak_pss_mb=memory.peak_pss / 2**20 if memory.peak_pss else None,
        stop_reason=clock.stop_reason or "max_steps",
        curve=clock.curve,
        eval_interval_steps=interval,
        final_policy=final_policy,
        error=None,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec", type=Path, help="JSON file of a RunSpec")
    parser.add_argument("result", type=Path, help="where to write the run's record (JSON)")
    args = parser.parse_args(argv)
    watch_parent_from_env()  # this run, and what it started, end with the benchmark
    spec = RunSpec.from_dict(json.loads(args.spec.read_text()))
    os.environ.setdefault("PYTHONWARNINGS", "ignore::DeprecationWarning")
    try:
        with tempfile.TemporaryDirectory(prefix="sb3_async_bench_") as workdir:
            record = run(spec, Path(workdir))
    except Exception:
        record = failed_record(spec, traceback.format_exc())
        args.result.write_text(json.dumps(record, indent=1))
        print(record["error"], file=sys.stderr)
        return 1
    args.result.write_text(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":  # the workers' forkserver re-imports the main module only under this guard
    sys.exit(main())
