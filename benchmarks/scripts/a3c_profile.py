"""Where an A3C worker's time goes: ``cProfile`` of one worker of a layout, run in this process on one torch thread
(as each worker runs on a machine with one core per worker).

The worker is the one the runtime starts (the same code, the same shared parameters and optimizer statistics), built
here instead of in a worker process so that the profiler sees it; the other workers of the layout are not started.
On Pong (the default) the model is A3C's zoo entry for PongNoFrameskip-v4 in the 2 workers x 8 envs layout::

    python benchmarks/scripts/a3c_profile.py                      # 40k env steps of Pong, 8 envs
    python benchmarks/scripts/a3c_profile.py --steps 20000 --envs-per-worker 4 --top 30
"""

from __future__ import annotations

import argparse
import cProfile
import multiprocessing as mp
import pstats
import threading
import time
from typing import Any

import torch

from sb3_async import A3C
from sb3_async.a3c import a3c as a3c_module
from sb3_async.runtime.base import WorkerContext


def pong_model(envs_per_worker: int, seed: int) -> A3C:
    """A3C on PongNoFrameskip-v4 with the zoo entry's settings (``zoo_configs/a3c.yml``: SB3's Atari wrappers with
    the frame skip of :mod:`sb3_async.common.atari_wrappers`, 4 stacked frames, ``n_steps`` 5, entropy 0.01, learning
    rate 7e-4, gradients clipped at 40), 2 workers."""
    import ale_py
    import gymnasium
    from stable_baselines3.common.vec_env import VecFrameStack

    from sb3_async.common.atari_wrappers import make_atari_env

    gymnasium.register_envs(ale_py)
    env = VecFrameStack(make_atari_env("PongNoFrameskip-v4", n_envs=1, seed=seed), 4)
    return A3C(
        "CnnPolicy",
        env,
        n_workers=2,
        n_envs_per_worker=envs_per_worker,
        n_steps=5,
        ent_coef=0.01,
        learning_rate=7e-4,
        max_grad_norm=40.0,
        seed=seed,
    )


def _drain(receiver: Any) -> None:
    """Read the worker's messages until it closes its end."""
    try:
        while True:
            receiver.recv()
    except EOFError:
        pass


def profile_worker(model: A3C, steps: int) -> tuple[cProfile.Profile, int, float]:
    """Run the rank-0 worker of ``model`` in this process until it has taken ``steps`` env steps; its profile, the env
    steps it took and the wall-clock seconds."""
    model._share_state()
    spec = model._worker_specs()[0]
    receiver, conn = mp.Pipe(duplex=False)
    # The worker reports (episode returns, its progress) to the main process: drain them as the runtime would.
    threading.Thread(target=_drain, args=(receiver,), daemon=True).start()
    n_workers = model.n_workers
    counters = [torch.zeros(n_workers, dtype=torch.int64) for _ in range(3)]
    context = WorkerContext(
        rank=0,
        name="worker-0",
        n_workers=n_workers,
        base_seed=model.seed or 0,
        steps=counters[0],
        control=counters[1],
        parked=counters[2],
        conn=conn,
        shared=spec.shared,
        start_timesteps=0,
        total_timesteps=steps,
    )
    profiler = cProfile.Profile()
    start = time.perf_counter()
    profiler.runcall(a3c_module._a3c_worker, context, spec.payload)
    return profiler, int(counters[0].sum()), time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=40_000, help="env steps of the profiled worker (default 40000)")
    parser.add_argument("--envs-per-worker", type=int, default=8, help="envs the worker steps (default 8)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--top", type=int, default=40, help="rows of each table (default 40)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    profiler, steps, seconds = profile_worker(pong_model(args.envs_per_worker, args.seed), args.steps)
    print(f"{steps} env steps in {seconds:.1f} s: {steps / seconds:.0f} env steps/s under the profiler")
    stats = pstats.Stats(profiler)
    stats.sort_stats("cumulative").print_stats(args.top)
    stats.sort_stats("tottime").print_stats(args.top // 2)


if __name__ == "__main__":
    main()
