"""The models of tests/algorithms/test_saved_models.py, saved by the installed sb3-async: ``python make.py OUT_DIR``
(OUT_DIR: the release's folder here, e.g. ``0.2.0``)."""

import sys
from pathlib import Path

import gymnasium as gym
import numpy as np

from sb3_async import A3C, AEDDPG, ApeXDPG, ApeXDQN, AsyncNStepQ, AsyncOneStepQ, AsyncSarsa

out = Path(sys.argv[1])
CASES = {
    "a3c": (A3C, "MlpPolicy", "CartPole-v1", dict(n_workers=1, n_envs_per_worker=2), 500),
    "a3c_lstm": (A3C, "MlpLstmPolicy", "CartPole-v1", dict(n_workers=1, n_envs_per_worker=2), 500),
    "async_one_step_q": (AsyncOneStepQ, "MlpPolicy", "CartPole-v1", dict(n_workers=1, n_envs_per_worker=2), 500),
    "async_sarsa": (AsyncSarsa, "MlpPolicy", "CartPole-v1", dict(n_workers=1, n_envs_per_worker=2), 500),
    "async_n_step_q": (AsyncNStepQ, "MlpPolicy", "CartPole-v1", dict(n_workers=1, n_envs_per_worker=2), 500),
    "apex_dqn": (ApeXDQN, "MlpPolicy", "CartPole-v1", dict(n_actors=1, learning_starts=100), 500),
    "apex_dpg": (ApeXDPG, "MlpPolicy", "Pendulum-v1", dict(n_actors=1, learning_starts=100), 500),
    "ae_ddpg": (AEDDPG, "MlpPolicy", "Pendulum-v1", dict(learning_starts=100), 300),
}
if __name__ == "__main__":
    for name, (cls, policy, env_id, kwargs, steps) in CASES.items():
        extra = {"lstm_hidden_size": 16} if "Lstm" in policy else {}
        model = cls(policy, env_id, seed=0, policy_kwargs=dict(net_arch=[16], **extra), **kwargs)
        model.learn(steps)
        model.save(out / f"{name}.zip")
        space = gym.make(env_id).observation_space
        space.seed(1)
        obs = np.stack([space.sample() for _ in range(16)]).astype(np.float32)
        actions, _ = model.predict(obs, deterministic=True)
        np.savez(out / f"{name}.npz", obs=obs, actions=actions)
        print(name, actions[:5])
