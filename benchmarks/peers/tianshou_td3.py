"""Tianshou 2.0 TD3 on Pendulum-v1 and the MuJoCo tasks (HalfCheetah-v5, Hopper-v5, Walker2d-v5), as Tianshou's own
Pendulum test and MuJoCo example build and train it: the peer of AE-DDPG and Ape-X DPG. Every setting is the test's or
the example's (see ``SOURCES``); the one difference: the MuJoCo example's single training env steps in this process
(``DummyVectorEnv``) where the example puts it in a subprocess (``SubprocVectorEnv``, or EnvPool where installed), which
changes no value it collects."""

from __future__ import annotations

import sys

from _tianshou import MUJOCO_TD3, PACKAGES, PENDULUM_ACTOR_CRITIC, deterministic_actor_critic

from sb3_async.benchmark.peers.protocol import PeerRun, main

LIBRARY = "tianshou"
MUJOCO_ENVS = ("HalfCheetah-v5", "Hopper-v5", "Walker2d-v5")
HYPERPARAMETERS = {
    "Pendulum-v1": dict(PENDULUM_ACTOR_CRITIC, policy_noise=0.2, noise_clip=0.5, update_actor_freq=2),
    **{env_id: dict(MUJOCO_TD3) for env_id in MUJOCO_ENVS},
}
SOURCES = {
    "Pendulum-v1": "Tianshou's test/continuous/test_td3.py (Pendulum-v1)",
    **{env_id: "Tianshou's examples/mujoco/mujoco_td3.py (its defaults, for every MuJoCo task)" for env_id in MUJOCO_ENVS},
}


def train(run: PeerRun) -> None:
    from tianshou.algorithm import TD3

    settings = run.hyperparameters
    deterministic_actor_critic(
        run,
        TD3,
        policy_noise=settings["policy_noise"],
        noise_clip=settings["noise_clip"],
        update_actor_freq=settings["update_actor_freq"],
    )


if __name__ == "__main__":
    sys.exit(main(train, LIBRARY, HYPERPARAMETERS, SOURCES, packages=PACKAGES))
