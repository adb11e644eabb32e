"""How often episodes reach HMemory under AE-DDPG's storing rule (R_e >= R_max) and under ``hmemory_top_k``.

Pendulum-v1 episodes with a fixed policy (uniform random actions: returns depend on the initial state only, as for a
policy that has stopped improving), ``--episodes`` of them per seed; the admission rule is the library's own
``admits_episode`` / ``update_best_returns``. For i.i.d. returns the paper's rule admits the record-setting episodes
only: about ln(n) + 0.58 of n (the harmonic number), and the k-th-best rule about k (1 + ln(n / k)).

    python benchmarks/scripts/hmemory_admissions.py --episodes 300 --seeds 3
"""

from __future__ import annotations

import argparse

import gymnasium as gym
import numpy as np

from sb3_async.common.buffers.episodic import admits_episode, update_best_returns


def episode_returns(n: int, seed: int) -> np.ndarray:
    env = gym.make("Pendulum-v1")
    env.action_space.seed(seed)
    returns = []
    for i in range(n):
        env.reset(seed=seed * 100_000 + i)
        total, done = 0.0, False
        while not done:
            _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    return np.array(returns)


def admissions(returns: np.ndarray, top_k: int) -> np.ndarray:
    best = np.zeros(0)
    admitted = []
    for value in returns:
        admitted.append(admits_episode(value, best, top_k))
        best = update_best_returns(value, best, top_k)
    return np.array(admitted)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=300)
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    n = args.episodes
    print("| rule | seed | admitted / episodes | last admission | admitted in the 2nd half | i.i.d. expectation |")
    print("|---|---|---|---|---|---|")
    for seed in range(args.seeds):
        returns = episode_returns(n, seed)
        for k in (1, 10):
            admitted = admissions(returns, k)
            expected = sum(min(1.0, k / i) for i in range(1, n + 1))
            last = int(np.flatnonzero(admitted)[-1]) + 1
            rule = "paper (k = 1)" if k == 1 else f"hmemory_top_k = {k}"
            print(f"| {rule} | {seed} | {admitted.sum()} / {n} | {last} | {admitted[n // 2 :].sum()} | {expected:.1f} |")


if __name__ == "__main__":
    main()
