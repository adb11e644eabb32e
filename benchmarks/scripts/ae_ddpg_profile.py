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
import time
from pathlib import Path

import torch

from sb3_async import AEDDPG
from sb3_async.benchmark.run_one import zoo_entry

CONFIG = Path(__file__).resolve().parents[2] / "zoo_configs" / "ae_ddpg.yml"


def build(env_id: str, seed: int, updates_per_transition: float | None = None) -> AEDDPG:
    """AE-DDPG with the ``zoo_configs/ae_ddpg.yml`` entry of ``env_id`` (its values as the zoo passes them), its
    ``updates_per_transition`` replaced where one is given."""
    _, entry = zoo_entry(CONFIG, env_id, None)
    if updates_per_transition is not None:
        entry["updates_per_transition"] = updates_per_transition
    policy = entry.pop("policy")
    entry.pop("n_timesteps", None)
    for key in ("policy_kwargs", "replay_buffer_kwargs"):
        if isinstance(entry.get(key), str):
            entry[key] = eval(entry[key])  # the zoo's own convention for these strings
    return AEDDPG(policy, env_id, seed=seed, torch_threads=1, **entry)


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
    try:
        model = build(args.env, args.seed, args.updates_per_transition)
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
