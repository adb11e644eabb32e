"""Slot steps/s on MPE's simple_spread_v3 (3 agents): AsyncEnvPool(...).as_vec_env() vs SuperSuit's
``concat_vec_envs_v1(num_cpus=2)`` at the same number of slots, random actions, paired bursts in random order
(docs/guide/pettingzoo.md). Needs ``pip install "sb3-async[pettingzoo]" "supersuit>=3.11"``.

    python benchmarks/scripts/pettingzoo_speed.py N_COPIES ROUNDS SECONDS_PER_BURST

Prints one JSON line: each side's median slot steps/s and the median ratio pool / SuperSuit.
"""

import json
import random
import statistics
import sys
import time

import numpy as np


def make():
    from mpe2 import simple_spread_v3

    return simple_spread_v3.parallel_env(max_cycles=25)


def supersuit_vec_env(n_copies):
    import supersuit as ss

    venv = ss.pettingzoo_env_to_vec_env_v1(make())
    return ss.concat_vec_envs_v1(venv, n_copies, num_cpus=2, base_class="stable_baselines3")


def pool_vec_env(n_copies):
    from sb3_async import AsyncEnvPool

    return AsyncEnvPool(make, n_envs=n_copies, n_workers=2).as_vec_env()


def burst(venv, actions, seconds):
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        venv.step(actions[n % len(actions)])
        n += 1
    return n * venv.num_envs / (time.perf_counter() - start)  # slot steps per second


def main():
    n_copies, rounds, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    envs = {"pool": pool_vec_env(n_copies), "supersuit": supersuit_vec_env(n_copies)}
    slots = {name: venv.num_envs for name, venv in envs.items()}
    assert len(set(slots.values())) == 1, slots
    rng = np.random.default_rng(0)
    actions = [rng.integers(0, 5, size=slots["pool"]) for _ in range(64)]
    for venv in envs.values():
        venv.reset()
        burst(venv, actions, min(seconds, 0.5))  # warm up
    rates = {name: [] for name in envs}
    ratios = []
    for _ in range(rounds):
        order = list(envs)
        random.shuffle(order)
        got = {name: burst(envs[name], actions, seconds) for name in order}
        for name in envs:
            rates[name].append(got[name])
        ratios.append(got["pool"] / got["supersuit"])
    for venv in envs.values():
        venv.close()
    print(
        json.dumps(
            {
                "env": "simple_spread_v3",
                "slots": slots["pool"],
                "rounds": rounds,
                "seconds": seconds,
                **{f"{name}_slot_steps_per_s": round(statistics.median(values), 1) for name, values in rates.items()},
                "ratio_pool_over_supersuit": round(statistics.median(ratios), 3),
            }
        )
    )


if __name__ == "__main__":
    main()
