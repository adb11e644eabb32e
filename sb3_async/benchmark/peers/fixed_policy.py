"""The smallest adapter: no RL library and no learning. It steps the env with random actions (its "training",
so that env steps and the clock advance) and is evaluated on a fixed controller: on CartPole-v1 the pole-balancing
linear rule "push toward where the pole is falling, and back toward the centre" (it holds the pole for the whole 500
steps: tested on 60 seeds), elsewhere zero actions.

It is the template of an adapter (build, ``run.start()``, then ``run.step(steps, policy)`` between batches) and the
test of the peer protocol end to end, runnable under any Python with gymnasium:
``python -m sb3_async.benchmark.peers.fixed_policy SPEC.json RESULT.json``.
"""

from __future__ import annotations

import sys

import numpy as np

from sb3_async.benchmark.peers.protocol import PeerRun, Policy, main

LIBRARY = "gymnasium"
#: Written for this adapter (no library's example: it learns nothing).
HYPERPARAMETERS = {
    "CartPole-v1": dict(n_timesteps=20_000, steps_per_batch=1_000),
    "Pendulum-v1": dict(n_timesteps=20_000, steps_per_batch=1_000),
}
SOURCES = {env_id: "fixed controller, no training: the protocol's own test peer" for env_id in HYPERPARAMETERS}


def cartpole_controller(obs: np.ndarray) -> np.ndarray:
    """Push right (1) when ``0.1 x + 0.5 x' + θ + θ'`` is positive: the pole falls right, or the cart drifts right
    (without the cart's terms the cart leaves the track in some episodes)."""
    return (obs @ np.array([0.1, 0.5, 1.0, 1.0]) > 0).astype(np.int64)


def zero_actions(shape: tuple[int, ...]) -> Policy:
    """The policy that always acts 0 (no torque, no force)."""

    def policy(obs: np.ndarray) -> np.ndarray:
        return np.zeros((len(obs), *shape), dtype=np.float32)

    return policy


def train(run: PeerRun) -> None:
    import gymnasium

    env = gymnasium.make(run.env_id)
    env.reset(seed=run.seed)
    env.action_space.seed(run.seed)
    policy = cartpole_controller if run.env_id == "CartPole-v1" else zero_actions(env.action_space.shape or ())
    batch = int(run.hyperparameters["steps_per_batch"])
    steps = 0
    run.start()
    try:
        while True:  # until run.step() ends the run (at the latest at run.max_steps)
            for _ in range(batch):
                _, _, terminated, truncated, _ = env.step(env.action_space.sample())
                if terminated or truncated:
                    env.reset()
            steps += batch
            run.step(steps, policy)
    finally:
        env.close()


if __name__ == "__main__":
    sys.exit(main(train, LIBRARY, HYPERPARAMETERS, SOURCES))
