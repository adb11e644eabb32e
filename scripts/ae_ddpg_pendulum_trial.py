"""One AEDDPG run on Pendulum-v1 with hyperparameters given as JSON, evaluated (10 deterministic episodes) every 2000
env steps until the mean reaches -200; prints the env steps, the training clock, HMemory's statistics and how collection
and learning overlapped (``AEDDPG.overlap_stats``).

    python scripts/ae_ddpg_pendulum_trial.py '{"n_envs": 4, "learning_starts": 10000}' SEED MAX_STEPS

docs/benchmarks.md (AE-DDPG) uses it to run the zoo config with the zoo's TD3/DDPG ``learning_starts`` (1e4).
"""

from __future__ import annotations

import json
import sys
import time

import gymnasium as gym
import torch
from stable_baselines3.common.evaluation import evaluate_policy

from sb3_async import AEDDPG

if __name__ == "__main__":
    torch.set_num_threads(1)
    kwargs, seed, total = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    model = AEDDPG("MlpPolicy", "Pendulum-v1", seed=seed, **kwargs)
    eval_env = gym.make("Pendulum-v1")
    clock = 0.0
    while model.num_timesteps < total:
        start = time.perf_counter()
        model.learn(2000, reset_num_timesteps=model.num_timesteps == 0)
        clock += time.perf_counter() - start
        mean, _ = evaluate_policy(model, eval_env, 10, warn=False)
        replay = model.replay_buffer.stats() if hasattr(model.replay_buffer, "stats") else {}
        print(
            f"{model.num_timesteps} steps, clock {clock:.0f} s, eval {mean:.0f}, {replay}, {model.overlap_stats()}", flush=True
        )
        if mean >= -200:
            break
    model.env.close()
