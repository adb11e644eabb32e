"""One Ape-X run with hyperparameters given as JSON: SB3's ``EvalCallback`` (frozen policy, 10 deterministic episodes)
every ``EVAL_FREQ`` env steps, then the model ``learn()`` returned scored on 20 fresh deterministic episodes; prints the
curve, the training clock (evaluations excluded: the workers are parked meanwhile, as in the benchmark tool), the
learner's flow and the final score. With ``STOP_AT``, the run stops at its first evaluation reaching it (SB3's
``StopTrainingOnRewardThreshold``), as a benchmark race does. Used to choose the zoo configs' values.

    python benchmarks/scripts/apex_trial.py apex_dpg Pendulum-v1 '{"replay_ratio": 64}' SEED TOTAL_STEPS [EVAL_FREQ [STOP_AT]]
    python benchmarks/scripts/apex_trial.py apex_dqn CartPole-v1 '{"policy_kwargs": {"optimizer_class": "Adam"}}' \
        0 100000 5000 475
"""

from __future__ import annotations

import json
import sys
import time

import gymnasium as gym
import torch
from stable_baselines3.common.callbacks import EvalCallback, StopTrainingOnRewardThreshold
from stable_baselines3.common.evaluation import evaluate_policy

from sb3_async import ApeXDPG, ApeXDQN


class ClockedEval(EvalCallback):
    """SB3's ``EvalCallback`` that prints each evaluation with the training clock (its own time excluded)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.start, self.eval_seconds, self.curve = time.perf_counter(), 0.0, []

    def _on_step(self) -> bool:
        started = time.perf_counter()
        result = super()._on_step()
        if self.eval_freq > 0 and self.n_calls % self.eval_freq == 0:
            self.eval_seconds += time.perf_counter() - started
            mean = float(self.last_mean_reward)
            self.curve.append((self.num_timesteps, round(mean, 1)))
            print(f"{self.num_timesteps} steps, {self.train_clock():.1f} s, eval {mean:.0f}, updates {self.model._n_updates}")
        return result

    def train_clock(self) -> float:
        return time.perf_counter() - self.start - self.eval_seconds


if __name__ == "__main__":
    torch.set_num_threads(1)
    algo, env_id, kwargs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    seed, total = int(sys.argv[4]), int(sys.argv[5])
    eval_freq = int(sys.argv[6]) if len(sys.argv) > 6 else 2000
    stop_at = float(sys.argv[7]) if len(sys.argv) > 7 else None
    model_class = {"apex_dpg": ApeXDPG, "apex_dqn": ApeXDQN}[algo]
    policy_kwargs = dict(kwargs.get("policy_kwargs", {}))
    if "optimizer_class" in policy_kwargs:  # JSON names it: "Adam", "RMSprop", ...
        policy_kwargs["optimizer_class"] = getattr(torch.optim, policy_kwargs["optimizer_class"])
    model = model_class("MlpPolicy", env_id, seed=seed, **{**kwargs, "policy_kwargs": policy_kwargs})
    stop = None if stop_at is None else StopTrainingOnRewardThreshold(stop_at, verbose=0)
    eval_callback = ClockedEval(
        gym.make(env_id), eval_freq=max(1, eval_freq // model.n_envs), n_eval_episodes=10, callback_on_new_best=stop
    )
    model.learn(total, callback=eval_callback)
    train_clock = eval_callback.train_clock()
    final, std = evaluate_policy(model, gym.make(env_id), n_eval_episodes=20, deterministic=True, warn=False)
    reached = None if stop_at is None else next((steps for steps, mean in eval_callback.curve if mean >= stop_at), None)
    print(
        json.dumps(
            dict(
                algo=algo,
                env=env_id,
                kwargs=kwargs,
                seed=seed,
                steps=model.num_timesteps,
                train_clock=round(train_clock, 1),
                updates=model._n_updates,
                best_eval=max((mean for _, mean in eval_callback.curve), default=float("nan")),
                reached_at_steps=reached,
                curve=eval_callback.curve,
                final=round(final, 1),
                final_std=round(std, 1),
            )
        )
    )
