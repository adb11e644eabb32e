"""A3C actually learns: CartPole-v1 to a deterministic evaluation mean >= 475 (the zoo config's settings)."""

import gymnasium as gym
import numpy as np
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.evaluation import evaluate_policy

from sb3_async import A3C


class StopAtTrainingReturn(BaseCallback):
    def __init__(self, threshold: float):
        super().__init__()
        self.threshold = threshold

    def _on_step(self) -> bool:
        buffer = self.model.ep_info_buffer
        return not (len(buffer) == buffer.maxlen and np.mean([ep["r"] for ep in buffer]) >= self.threshold)


def test_a3c_learns_cartpole():
    model = A3C("MlpPolicy", "CartPole-v1", n_workers=2, n_envs_per_worker=8, learning_rate=1e-3, ent_coef=0.0, seed=0)
    model.learn(400_000, callback=StopAtTrainingReturn(490))
    mean, _ = evaluate_policy(model, gym.make("CartPole-v1"), n_eval_episodes=10, deterministic=True, warn=False)
    assert mean >= 475, f"deterministic evaluation mean {mean} after {model.num_timesteps} steps"
