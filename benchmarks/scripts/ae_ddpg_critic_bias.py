"""How far AE-DDPG's critic is from the returns its policy gets, against the same run with TD3's update.

Trains AE-DDPG's zoo entry (as ``python -m sb3_async.train --algo ae_ddpg`` builds it, one torch thread) for a fixed
number of env steps, then plays ``--episodes`` episodes with the frozen deterministic policy and compares, on every
state visited, the critic's ``Q(s, mu(s))`` with the discounted return that followed (states within 460 steps of a
time-limit truncation are left out: gamma**460 < 0.01 of the return is cut there). ``--update td3`` trains the same
model, envs, noise and replay with TD3's update instead of DDPG's (Fujimoto et al. 2018: twin critics and the smaller
of their targets, target policy smoothing with noise 0.2 clipped at 0.5, the actor and the targets updated every
second critic update), to see how much of a gap to a TD3 peer comes from the update rule::

    python benchmarks/scripts/ae_ddpg_critic_bias.py --env Walker2d-v5 --steps 60000 --seeds 0 1 2
    python benchmarks/scripts/ae_ddpg_critic_bias.py --env Walker2d-v5 --steps 60000 --seeds 0 1 2 --update td3

One JSON line per seed: the final evaluation (mean return of the episodes), the mean critic estimate and the mean
discounted return over the states compared, their difference (the bias, positive: an over-estimate) and its ratio to
the mean return.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ae_ddpg_profile import build  # noqa: E402  (the zoo entry, built as the CLI builds it)

from sb3_async import AEDDPG  # noqa: E402
from sb3_async.common.returns import nstep_returns  # noqa: E402
from sb3_async.common.torch_utils import soft_update  # noqa: E402

HORIZON_CUT = 460  # steps before a truncation left out: 0.99**460 < 0.01


class TD3Update(AEDDPG):
    """AE-DDPG's model, pool, noise and dual replay with TD3's update (two critics, clipped double-Q targets, target
    policy smoothing, delayed actor and target updates) in place of DDPG's; for this comparison only."""

    def train(self, gradient_steps: int, batch_size: int = 100) -> None:
        gradient_steps = self._scaled_gradient_steps(gradient_steps)
        if gradient_steps == 0:
            return
        start = time.perf_counter()
        self.policy.set_training_mode(True)
        actor, critic = self.actor, self.critic
        actor_params, critic_params = list(actor.parameters()), list(critic.parameters())
        actor_targets, critic_targets = list(self.actor_target.parameters()), list(self.critic_target.parameters())
        for _ in range(gradient_steps):
            self._n_updates += 1
            data = self.replay_buffer.sample(batch_size, env=self._vec_normalize_env)  # type: ignore[union-attr]
            with torch.no_grad():
                noise = (torch.randn_like(data.actions) * 0.2).clamp(-0.5, 0.5)
                next_actions = (self.actor_target(data.next_observations) + noise).clamp(-1, 1)
                next_q = torch.min(*self.critic_target(data.next_observations, next_actions))
                targets = data.rewards + (1 - data.dones) * self.gamma * next_q
            q1, q2 = critic(data.observations, data.actions)
            critic_loss = F.mse_loss(q1, targets) + F.mse_loss(q2, targets)
            critic.optimizer.zero_grad()
            critic_loss.backward()
            critic.optimizer.step()
            if self._n_updates % 2 == 0:
                actor_loss = -critic.q1_forward(data.observations, actor(data.observations)).mean()
                actor.optimizer.zero_grad()
                actor_loss.backward(inputs=actor_params)
                actor.optimizer.step()
                soft_update(critic_params, critic_targets, self.tau)
                soft_update(actor_params, actor_targets, self.tau)
        self.collection_stats["train_seconds"] += time.perf_counter() - start


def critic_bias(model: AEDDPG, env_id: str, episodes: int, seed: int) -> dict[str, float]:
    """The frozen policy's episodes, and its critic's estimates against the discounted returns that followed."""
    env = gym.make(env_id)
    estimates, returns, scores = [], [], []
    try:
        for k in range(episodes):
            obs, _ = env.reset(seed=seed + k)
            observations, rewards = [], []
            terminated = truncated = False
            while not (terminated or truncated):
                observations.append(obs)
                action, _ = model.predict(obs, deterministic=True)
                obs, reward, terminated, truncated, _ = env.step(action)
                rewards.append(float(reward))
            scores.append(sum(rewards))
            column = np.array(rewards)[:, None]  # the whole episode as one segment, nothing after its end
            discounted = nstep_returns(column, np.zeros_like(column, dtype=bool), np.zeros(1), model.gamma)[:, 0]
            kept = len(rewards) if terminated else max(len(rewards) - HORIZON_CUT, 0)
            if kept == 0:
                continue
            states = torch.as_tensor(np.array(observations[:kept]), dtype=torch.float32)
            with torch.no_grad():
                q = model.critic.q1_forward(states, model.actor(states)).squeeze(-1).numpy()
            estimates.append(q)
            returns.append(discounted[:kept])
    finally:
        env.close()
    q_all, g_all = np.concatenate(estimates), np.concatenate(returns)
    return dict(
        final_eval=float(np.mean(scores)),
        states=int(len(q_all)),
        mean_q=float(q_all.mean()),
        mean_return=float(g_all.mean()),
        bias=float((q_all - g_all).mean()),
        relative_bias=float((q_all - g_all).mean() / abs(g_all.mean())),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="Walker2d-v5")
    parser.add_argument("--steps", type=int, default=60_000, help="env steps of training, learning_starts included")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--episodes", type=int, default=10, help="episodes of the frozen policy")
    parser.add_argument("--update", choices=("ddpg", "td3"), default="ddpg", help="ddpg: AE-DDPG's own (the paper's)")
    args = parser.parse_args()
    if args.steps <= 0:
        parser.error(f"--steps: expected a positive number of env steps, got {args.steps}")
    if args.episodes <= 0:
        parser.error(f"--episodes: expected a positive number, got {args.episodes}")
    torch.set_num_threads(1)
    for seed in args.seeds:
        with tempfile.TemporaryDirectory() as log_folder:
            extra: dict[str, Any] = {}
            if args.update == "td3":
                extra = dict(policy_kwargs=dict(net_arch=dict(pi=[256, 256, 128], qf=[256, 128]), n_critics=2))
            try:
                model = build(args.env, seed, log_folder, **extra)
            except KeyError:  # the zoo's lookup of an id gymnasium does not know
                parser.error(f"--env {args.env}: not a registered gymnasium env id")
            except ValueError as error:  # no entry for the env in the zoo file
                parser.error(f"--env {args.env}: {error}")
            if args.update == "td3":
                model.__class__ = TD3Update
            start = time.perf_counter()
            try:
                model.learn(args.steps)
            finally:
                model.env.close()
            seconds = time.perf_counter() - start
            result = critic_bias(model, args.env, args.episodes, 10_000 + 100 * seed)
        record = dict(env=args.env, update=args.update, seed=seed, env_steps=model.num_timesteps, updates=model._n_updates)
        print(json.dumps(dict(record, train_seconds=round(seconds, 1), **result)), flush=True)


if __name__ == "__main__":
    main()
