"""One Ape-X run with hyperparameters given as JSON: SB3's ``EvalCallback`` (frozen policy, 10 deterministic episodes)
every ``EVAL_FREQ`` env steps, then the model ``learn()`` returned scored on 20 fresh deterministic episodes; prints the
curve, the training clock, the learner's flow and the final score. Used to choose the zoo configs' values.

    python scripts/apex_trial.py apex_dpg Pendulum-v1 '{"replay_ratio": 64}' SEED TOTAL_STEPS [EVAL_FREQ]
    python scripts/apex_trial.py apex_dqn CartPole-v1 '{"policy_kwargs": {"optimizer_class": "Adam"}}' 0 100000 5000
"""

from __future__ import annotations

import json
import sys
import time

import gymnasium as gym
import torch
from stable_baselines3.common.callbacks import BaseCallback, EvalCallback
from stable_baselines3.common.evaluation import evaluate_policy

from sb3_async import ApeXDPG, ApeXDQN


class Clock(BaseCallback):
    """Prints each evaluation with the training clock (evaluations excluded: the workers are parked meanwhile)."""

    def __init__(self, eval_callback: EvalCallback):
        super().__init__()
        self.eval_callback, self.start, self.curve = eval_callback, time.perf_counter(), []

    def _on_step(self) -> bool:
        if self.eval_callback.n_calls % self.eval_callback.eval_freq == 0:
            mean = float(self.eval_callback.last_mean_reward)
            self.curve.append(mean)
            elapsed = time.perf_counter() - self.start
            print(f"{self.num_timesteps} steps, {elapsed:.0f} s, eval {mean:.0f}, updates {self.model._n_updates}", flush=True)
        return True


if __name__ == "__main__":
    torch.set_num_threads(1)
    algo, env_id, kwargs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    seed, total = int(sys.argv[4]), int(sys.argv[5])
    eval_freq = int(sys.argv[6]) if len(sys.argv) > 6 else 2000
    model_class = {"apex_dpg": ApeXDPG, "apex_dqn": ApeXDQN}[algo]
    policy_kwargs = dict(kwargs.get("policy_kwargs", {}))
    if "optimizer_class" in policy_kwargs:  # JSON names it: "Adam", "RMSprop", ...
        policy_kwargs["optimizer_class"] = getattr(torch.optim, policy_kwargs["optimizer_class"])
    model = model_class("MlpPolicy", env_id, seed=seed, **{**kwargs, "policy_kwargs": policy_kwargs})
    eval_callback = EvalCallback(gym.make(env_id), eval_freq=max(1, eval_freq // model.n_envs), n_eval_episodes=10, verbose=0)
    start = time.perf_counter()
    clock_callback = Clock(eval_callback)
    model.learn(total, callback=[eval_callback, clock_callback])
    clock = time.perf_counter() - start
    final, std = evaluate_policy(model, gym.make(env_id), n_eval_episodes=20, deterministic=True, warn=False)
    best = max(clock_callback.curve, default=float("nan"))
    print(
        json.dumps(
            dict(
                algo=algo,
                env=env_id,
                kwargs=kwargs,
                seed=seed,
                steps=model.num_timesteps,
                clock=round(clock, 1),
                updates=model._n_updates,
                best_eval=best,
                final=round(final, 1),
                final_std=round(std, 1),
            )
        )
    )
