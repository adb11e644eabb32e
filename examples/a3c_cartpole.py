"""A3C on CartPole-v1 with the settings of ``zoo_configs/a3c.yml`` (2 workers x 8 envs), then a deterministic evaluation.

    python examples/a3c_cartpole.py                       # 200k steps, about a minute on 2 cores
    python examples/a3c_cartpole.py --timesteps 5000 --save-path /tmp/a3c_cartpole

The same run through the RL Zoo: ``python -m sb3_async.train --algo a3c --env CartPole-v1 -n 200000``.
"""

from __future__ import annotations

import argparse

import gymnasium as gym
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.monitor import Monitor

from sb3_async import A3C


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--timesteps", type=int, default=200_000, help="env steps, all workers together")
    parser.add_argument("--n-workers", type=int, default=2, help="worker processes")
    parser.add_argument("--n-envs-per-worker", type=int, default=8, help="envs stepped by each worker")
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--save-path", default="a3c_cartpole", help="where to save the model (.zip added)")
    args = parser.parse_args()

    model = A3C(
        "MlpPolicy",
        "CartPole-v1",
        n_workers=args.n_workers,
        n_envs_per_worker=args.n_envs_per_worker,
        learning_rate=1e-3,
        ent_coef=0.0,
        seed=args.seed,
        verbose=1,
    )
    model.learn(args.timesteps)
    model.save(args.save_path)

    eval_env = Monitor(gym.make("CartPole-v1"))
    mean_reward, std_reward = evaluate_policy(model, eval_env, n_eval_episodes=args.eval_episodes, deterministic=True)
    print(
        f"Saved to {args.save_path}.zip; evaluation over {args.eval_episodes} episodes: {mean_reward:.1f} +/- {std_reward:.1f}"
    )


if __name__ == "__main__":  # workers are separate processes (forkserver): the guard is required
    main()
