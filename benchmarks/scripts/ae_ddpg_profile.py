"""Where AE-DDPG's time goes on a MuJoCo task: its zoo entry trained in this process under ``cProfile``, one torch
thread (the benchmark's setting), the envs in the pool's worker processes as in any run.

The learner (the gradient steps), waiting for the envs and the rest of the loop (storing transitions, choosing the
ready envs' actions, callbacks) are timed by the model itself (``collection_stats``, the ``time/`` keys of its
logger); the profile breaks them down. The first ``learning_starts`` env steps (random actions, no updates) run
before the clock::

    python benchmarks/scripts/ae_ddpg_profile.py                          # Walker2d-v5, 10k env steps of learning
    python benchmarks/scripts/ae_ddpg_profile.py --updates-per-transition 1   # one update per env step instead
    python benchmarks/scripts/ae_ddpg_profile.py --env HalfCheetah-v5 --steps 20000 --top 40
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import tempfile
import time
from typing import Any

import torch
from rl_zoo3.exp_manager import ExperimentManager

from sb3_async import AEDDPG, zoo


def build(env_id: str, seed: int, log_folder: str, updates_per_transition: float | None = None, **hyperparams: Any) -> AEDDPG:
    """AE-DDPG as ``python -m sb3_async.train --algo ae_ddpg --env ENV_ID`` builds it (the RL Zoo's own loader and its
    ``zoo_configs/ae_ddpg.yml`` entry), one torch thread, its ``updates_per_transition`` replaced where one is given
    and ``hyperparams`` over the entry's (as ``--hyperparams`` would)."""
    zoo.register()
    entry = zoo.zoo_algorithm("ae_ddpg")
    assert entry is not None
    overrides: dict[str, Any] = dict(hyperparams, torch_threads=1)
    if updates_per_transition is not None:
        overrides["updates_per_transition"] = updates_per_transition
    manager = ExperimentManager(
        argparse.Namespace(), "ae_ddpg", env_id, log_folder, n_timesteps=0, eval_freq=-1, seed=seed,
        config=str(entry.config_path), hyperparams=overrides,
    )  # fmt: skip
    result = manager.setup_experiment()
    assert result is not None
    return result[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="Walker2d-v5")
    parser.add_argument("--steps", type=int, default=10_000, help="env steps profiled after learning_starts")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--updates-per-transition", type=float, help="instead of the entry's (its default: 1.0)")
    parser.add_argument("--top", type=int, default=30, help="functions listed, by cumulative then own time")
    args = parser.parse_args()
    if args.steps <= 0:
        parser.error(f"--steps: expected a positive number of env steps, got {args.steps}")
    torch.set_num_threads(1)
    log_folder = tempfile.TemporaryDirectory()
    try:
        model = build(args.env, args.seed, log_folder.name, args.updates_per_transition)
    except KeyError:  # the zoo's lookup of an id gymnasium does not know
        parser.error(f"--env {args.env}: not a registered gymnasium env id")
    except ValueError as error:  # no entry for the env in the zoo file, or a value the model rejects
        parser.error(f"--env {args.env}: {error}")
    try:
        model.learn(model.learning_starts)  # random actions, no updates: not profiled
        profiler = cProfile.Profile()
        start = time.perf_counter()
        profiler.enable()
        model.learn(args.steps, reset_num_timesteps=False)
        profiler.disable()
        elapsed = time.perf_counter() - start
        stats = model.collection_stats
    finally:
        model.env.close()
        log_folder.cleanup()
    steps = stats["transitions"]
    print(f"{args.env}: {steps} env steps in {elapsed:.1f} s under the profiler, {steps / elapsed:.0f} env steps/s")
    loop = elapsed - stats["train_seconds"] - stats["recv_seconds"]
    for name, seconds in (
        ("gradient steps", stats["train_seconds"]),
        ("waiting for envs", stats["recv_seconds"]),
        ("rest of the loop", loop),
    ):
        print(f"  {name:17s} {seconds:7.1f} s  {100 * seconds / elapsed:5.1f} %  {1e3 * seconds / steps:.2f} ms per env step")
    print(f"  envs per receive: {stats['transitions'] / max(stats['receives'], 1):.2f}")
    for order in ("cumulative", "tottime"):
        pstats.Stats(profiler).sort_stats(order).print_stats(args.top)


if __name__ == "__main__":
    main()
