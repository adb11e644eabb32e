"""What happens when AE-DDPG's Walker2d-v5 policy collapses: the critic's estimate, the actor's gradient and the
policy's change, measured at every evaluation of a run with the zoo's entry (zoo_configs/ae_ddpg.yml).

At each evaluation (every ``--eval-interval`` env steps, off the training clock) it records:

- **return**: the mean of ``--eval-episodes`` deterministic episodes;
- **Q(s0)** against **G(s0)**: the critic's estimate ``Q(s, pi(s))`` at the evaluation episodes' first states, and the
  discounted return those episodes collected from them (the critic's over- or under-estimate);
- **Q on fixed states**: the mean critic estimate on 1,000 states drawn from the replay at the first evaluation and
  kept for the whole run;
- **actor gradient norm**: the norm of the actor loss' gradient ``-Q(s, pi(s))`` on a batch of 256 replay states;
- **policy change**: the mean absolute change of ``pi(s)`` on the fixed states since the previous evaluation.

Usage: ``python benchmarks/scripts/walker2d_collapse.py [--seconds 300] [--seed 1] [--out DIR]``; with ``--out`` it
writes ``DIR/results.json`` (every evaluation's values, the command, the date).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3.common.callbacks import BaseCallback

from sb3_async import AEDDPG
from sb3_async.benchmark.run_one import zoo_entry
from sb3_async.zoo import CONFIG_DIR as ZOO_CONFIGS


class Probe(BaseCallback):
    """Evaluations and critic/actor measurements every ``interval`` steps; stops after ``seconds`` of training."""

    def __init__(self, interval: int, episodes: int, seconds: float, gamma: float, seed: int):
        super().__init__()
        self.interval, self.episodes, self.seconds, self.gamma = interval, episodes, seconds, gamma
        self.next, self.rows, self.seed = interval, [], seed
        self.fixed: torch.Tensor | None = None
        self.previous_actions: torch.Tensor | None = None
        self.env = gym.make("Walker2d-v5")
        self.training_seconds, self.resumed = 0.0, None

    def _on_training_start(self) -> None:
        self.resumed = time.perf_counter()

    def _on_step(self) -> bool:
        if self.num_timesteps < self.next:
            return True
        self.training_seconds += time.perf_counter() - self.resumed
        self.next += self.interval
        self.rows.append(self.measure())
        print(self.rows[-1], flush=True)
        self.resumed = time.perf_counter()
        return self.training_seconds < self.seconds

    def q(self, obs: torch.Tensor, actions: torch.Tensor | None = None) -> torch.Tensor:
        policy = self.model.policy
        with torch.no_grad():
            actions = policy.actor(obs) if actions is None else actions
            return policy.critic.q1_forward(obs, actions).flatten()

    def measure(self) -> dict[str, Any]:
        model, policy = self.model, self.model.policy
        buffer = model.replay_buffer
        if self.fixed is None:
            self.fixed = buffer.sample(1000).observations.clone()
        returns, starts, discounted = [], [], []
        for episode in range(self.episodes):
            obs, _ = self.env.reset(seed=10_000 * self.seed + len(self.rows) * self.episodes + episode)
            starts.append(obs)
            total, disc, k, done = 0.0, 0.0, 0, False
            while not done:
                action, _ = model.predict(obs, deterministic=True)
                obs, reward, terminated, truncated, _ = self.env.step(action)
                total, disc, k = total + reward, disc + self.gamma**k * reward, k + 1
                done = terminated or truncated
            returns.append(total)
            discounted.append(disc)
        q0 = self.q(torch.as_tensor(np.stack(starts), dtype=torch.float32))
        batch = buffer.sample(256).observations
        policy.actor.zero_grad(set_to_none=True)
        actor_loss = -policy.critic.q1_forward(batch, policy.actor(batch)).mean()
        actor_loss.backward()
        grad_norm = torch.norm(torch.stack([p.grad.norm() for p in policy.actor.parameters() if p.grad is not None]))
        policy.actor.zero_grad(set_to_none=True)
        policy.critic.zero_grad(set_to_none=True)
        with torch.no_grad():
            actions = policy.actor(self.fixed)
        change = None if self.previous_actions is None else float((actions - self.previous_actions).abs().mean())
        self.previous_actions = actions
        return dict(
            steps=self.num_timesteps,
            training_seconds=round(self.training_seconds, 1),
            return_mean=float(np.mean(returns)),
            q_start=float(q0.mean()),
            discounted_return_start=float(np.mean(discounted)),
            q_fixed=float(self.q(self.fixed).mean()),
            actor_grad_norm=float(grad_norm),
            policy_change=change,
        )


def entry_kwargs(learning_rate: float | None) -> dict[str, Any]:
    """AEDDPG's arguments from zoo_configs/ae_ddpg.yml's Walker2d-v5 entry (``learning_rate``: instead of its own)."""
    _, entry = zoo_entry(ZOO_CONFIGS / "ae_ddpg.yml", "Walker2d-v5", None)
    entry.pop("n_timesteps", None)
    for key in ("policy_kwargs", "replay_buffer_kwargs"):
        if isinstance(entry.get(key), str):
            entry[key] = eval(entry[key], {"dict": dict})  # the zoo's own reading of these strings
    if learning_rate is not None:
        entry["learning_rate"] = learning_rate
    return dict(policy=entry.pop("policy"), env="Walker2d-v5", **entry)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=300.0, help="training-clock budget")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--eval-interval", type=int, default=25_000)
    parser.add_argument("--eval-episodes", type=int, default=5)
    parser.add_argument("--learning-rate", type=float, help="instead of the zoo entry's")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = AEDDPG(seed=args.seed, torch_threads=1, **entry_kwargs(args.learning_rate))
    probe = Probe(args.eval_interval, args.eval_episodes, args.seconds, model.gamma, args.seed)
    model.learn(10**8, callback=probe)
    record = dict(
        command="python benchmarks/scripts/walker2d_collapse.py " + " ".join(os.sys.argv[1:]),
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        machine=dict(cpus=os.cpu_count(), python=platform.python_version(), torch=torch.__version__),
        args=vars(args) | {"out": None if args.out is None else str(args.out)},
        evaluations=probe.rows,
    )
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
