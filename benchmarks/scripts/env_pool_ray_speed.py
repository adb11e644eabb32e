"""Env steps/s of AsyncEnvPool(...).as_vec_env(), Pendulum-v1, 4 envs, random actions: backend mp vs ray, paired bursts
(docs/guide/ray.md, "AE-DDPG's envs on a cluster").

    python benchmarks/scripts/env_pool_ray_speed.py ROUNDS SECONDS_PER_BURST
"""

import json
import random
import statistics
import sys
import time

import numpy as np

from sb3_async import AsyncEnvPool


def burst(env, actions, seconds):
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        env.step(actions[n % len(actions)])
        n += 1
    return n / (time.perf_counter() - start)  # vec steps per second


def main():
    rounds, seconds = int(sys.argv[1]), float(sys.argv[2])
    envs = {b: AsyncEnvPool("Pendulum-v1", n_envs=4, backend=b).as_vec_env() for b in ("mp", "ray")}
    rng = np.random.default_rng(0)
    actions = [rng.uniform(-2, 2, size=(4, 1)).astype(np.float32) for _ in range(64)]
    for env in envs.values():
        env.seed(0)
        env.reset()
        burst(env, actions, 0.5)  # warm up
    rates = {b: [] for b in envs}
    ratios = []
    for _ in range(rounds):
        order = list(envs)
        random.shuffle(order)
        got = {b: burst(envs[b], actions, seconds) for b in order}
        for b in envs:
            rates[b].append(got[b])
        ratios.append(got["ray"] / got["mp"])
    for env in envs.values():
        env.close()
    # one env: the round trip of a single step
    single = {b: AsyncEnvPool("Pendulum-v1", n_envs=1, backend=b) for b in ("mp", "ray")}
    rtt = {b: [] for b in single}
    for pool in single.values():
        pool.reset(seed=0)
    for _ in range(rounds):
        for b in random.sample(list(single), 2):
            t, n = time.perf_counter(), 0
            while time.perf_counter() - t < seconds / 2:
                single[b].step({0: np.zeros(1, dtype=np.float32)})
                n += 1
            rtt[b].append((time.perf_counter() - t) / n * 1e3)
    out = {
        b: dict(
            env_steps_per_s=4 * statistics.median(rates[b]),
            ms_per_vec_step=1e3 / statistics.median(rates[b]),
            single_env_round_trip_ms=statistics.median(rtt[b]),
        )
        for b in envs
    }
    out["ray_over_mp_median_paired_ratio"] = statistics.median(ratios)
    out["ratio_min_max"] = (min(ratios), max(ratios))
    print(json.dumps(out, indent=1))
    for e in single.values():
        e.close()


if __name__ == "__main__":
    main()
