"""Screening of candidate fixes for the async Q family's final policy on CartPole-v1 (issue 17), one run per call.

Trains one model with the CartPole-v1 settings of ``zoo_configs/async_*.yml`` (2 workers x 8 envs, target refreshed
every 2000 steps, exploration over the first 10%) plus the given overrides, evaluates it every 50k steps (10
deterministic episodes, workers parked) and, after ``learn()``, evaluates the model it returned (20 deterministic
episodes). Prints one ``RESULT {json}`` line. Run each call in a fresh process, e.g.::

    for seed in 0 1; do for lr in 1e-3 lin_1e-3; do
        nice -n 10 python scripts/final_policy_screen.py n_step_q $seed $lr
    done; done
    python scripts/final_policy_screen.py one_step_q 0 lin_1e-3 '{"loss": "huber"}'
    python scripts/final_policy_screen.py n_step_q 0 lin_1e-3 '{"n_workers": 1, "n_envs_per_worker": 16}'
    python scripts/final_policy_screen.py sarsa 0 lin_2e-3 '{"per_worker_eps": true}'  # one final ε per worker

The lines of the screening behind the zoo configs are in ``benchmarks/results/final_policy/screening.jsonl``; the
5-seed measurement is the benchmark suite ``final_policy``.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.utils import LinearSchedule
from stable_baselines3.common.vec_env import VecEnv

from sb3_async import AsyncNStepQ, AsyncOneStepQ, AsyncSarsa
from sb3_async.async_q.async_q import AsyncQLearning
from sb3_async.common.exploration import sample_final_epsilons

CLASSES = {"n_step_q": AsyncNStepQ, "one_step_q": AsyncOneStepQ, "sarsa": AsyncSarsa}


class PeriodicEval(BaseCallback):
    """10 deterministic episodes every ``interval`` env steps, workers parked."""

    def __init__(self, async_model: AsyncQLearning, eval_env: VecEnv, interval: int = 50_000):
        super().__init__()
        self.async_model, self.eval_env, self.interval, self.next = async_model, eval_env, interval, interval
        self.curve: list[tuple[int, float]] = []

    def _on_step(self) -> bool:
        if self.num_timesteps >= self.next:
            self.next += self.interval
            with self.async_model.pause_workers():
                rewards, _ = evaluate_policy(self.model, self.eval_env, 10, deterministic=True, return_episode_rewards=True)
            self.curve.append((self.num_timesteps, round(float(np.mean(rewards)), 1)))
        return True


def main(argv: list[str]) -> None:
    if len(argv) not in (3, 4) or argv[0] not in CLASSES:
        raise SystemExit(f"usage: final_policy_screen.py {{{','.join(CLASSES)}}} SEED LR [JSON_OVERRIDES]")
    name, seed, lr = argv[0], int(argv[1]), argv[2]
    overrides = json.loads(argv[3]) if len(argv) == 4 else {}
    n_timesteps = int(overrides.pop("n_timesteps", 500_000))
    learning_rate = LinearSchedule(float(lr[4:]), 0.0, 1.0) if lr.startswith("lin_") else float(lr)
    kwargs = dict(n_workers=2, n_envs_per_worker=8, target_update_interval=2000, exploration_fraction=0.1, **overrides)
    per_worker_eps = bool(kwargs.pop("per_worker_eps", False))
    model = CLASSES[name]("MlpPolicy", "CartPole-v1", learning_rate=learning_rate, seed=seed, **kwargs)
    if per_worker_eps:  # before issue 17: one final ε per worker, shared by its envs
        draws = sample_final_epsilons(
            model.n_workers, model.exploration_final_eps, model.exploration_final_eps_probs, np.random.default_rng(seed)
        )
        model.worker_final_eps = np.repeat(draws[:, None], model.n_envs_per_worker, axis=1)
    periodic = PeriodicEval(model, make_vec_env("CartPole-v1", n_envs=1, seed=1000 + seed))
    start = time.perf_counter()
    model.learn(n_timesteps, callback=periodic)
    seconds = time.perf_counter() - start
    final_env = make_vec_env("CartPole-v1", n_envs=1, seed=2000 + seed)
    final_rewards, _ = evaluate_policy(model, final_env, 20, deterministic=True, return_episode_rewards=True)
    final = float(np.mean(final_rewards))
    worker_eps = None if model.worker_final_eps is None else model.worker_final_eps.tolist()
    record = dict(
        algo=name,
        seed=seed,
        lr=lr,
        overrides=overrides,
        n_timesteps=n_timesteps,
        final=round(final, 1),
        best=max((mean for _, mean in periodic.curve), default=None),
        curve=periodic.curve,
        seconds_with_evaluations=round(seconds, 1),
        worker_final_eps=worker_eps,
    )
    print("RESULT", json.dumps(record), flush=True)


if __name__ == "__main__":  # the workers' forkserver re-imports the main module only under this guard
    main(sys.argv[1:])
