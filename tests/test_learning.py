"""A3C actually learns: CartPole-v1 to a deterministic evaluation mean >= 475 (zoo_configs/a3c.yml's CartPole-v1 entry)."""

import gymnasium as gym
import numpy as np
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.evaluation import evaluate_policy

from tests.helpers import zoo_model


class StopAtTrainingReturn(BaseCallback):
    def __init__(self, threshold: float):
        super().__init__()
        self.threshold = threshold

    def _on_step(self) -> bool:
        buffer = self.model.ep_info_buffer
        return not (len(buffer) == buffer.maxlen and np.mean([ep["r"] for ep in buffer]) >= self.threshold)


def test_a3c_learns_cartpole(tmp_path):
    model = zoo_model("a3c", "CartPole-v1", tmp_path, seed=0)  # 2 workers x 8 envs
    model.learn(400_000, callback=StopAtTrainingReturn(490))
    mean, _ = evaluate_policy(model, gym.make("CartPole-v1"), n_eval_episodes=10, deterministic=True, warn=False)
    assert mean >= 475, f"deterministic evaluation mean {mean} after {model.num_timesteps} steps"
