"""Load a saved A3C model and evaluate it, with SB3's ``evaluate_policy``.

Works with a model saved by ``model.save()`` (e.g. by ``examples/a3c_cartpole.py``) or by the RL Zoo
(``logs/a3c/CartPole-v1_1/CartPole-v1.zip``, ``best_model.zip``, ``rl_model_<steps>_steps.zip``). Loading starts no
worker process; ``predict()`` runs in this process.

    python examples/load_and_evaluate.py a3c_cartpole.zip --env CartPole-v1 --episodes 10

For a model trained by the zoo, ``python -m sb3_async.enjoy --algo a3c --env CartPole-v1 --no-render`` does the same
with the zoo's own env wrappers (``env_wrapper``, ``frame_stack``) restored from the run's config.
"""

from __future__ import annotations

import argparse

import gymnasium as gym
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.monitor import Monitor

from sb3_async import A3C


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_path", help="a saved A3C model (.zip)")
    parser.add_argument("--env", default="CartPole-v1", help="env id the model was trained on")
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--stochastic", action="store_true", help="sample actions instead of taking the most likely")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    model = A3C.load(args.model_path)
    env = Monitor(gym.make(args.env))
    env.reset(seed=args.seed)
    rewards, lengths = evaluate_policy(
        model, env, n_eval_episodes=args.episodes, deterministic=not args.stochastic, return_episode_rewards=True
    )
    mean_reward = sum(rewards) / len(rewards)
    print(f"{model.num_timesteps} training steps; {len(rewards)} episodes: mean reward {mean_reward:.2f}, lengths {lengths}")


if __name__ == "__main__":
    main()
