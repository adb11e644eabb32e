"""Tianshou 2.0 DDPG on Pendulum-v1, as Tianshou's own Pendulum test builds and trains it: the peer of AE-DDPG and
Ape-X DPG. Every setting is the test's (see ``SOURCES``)."""

from __future__ import annotations

import sys

from _tianshou import PACKAGES, PENDULUM_ACTOR_CRITIC, deterministic_actor_critic

from sb3_async.benchmark.peers.protocol import PeerRun, main

LIBRARY = "tianshou"
HYPERPARAMETERS = {"Pendulum-v1": dict(PENDULUM_ACTOR_CRITIC)}
SOURCES = {"Pendulum-v1": "Tianshou's test/continuous/test_ddpg.py (Pendulum-v1)"}


def train(run: PeerRun) -> None:
    from tianshou.algorithm import DDPG

    deterministic_actor_critic(run, DDPG)


if __name__ == "__main__":
    sys.exit(main(train, LIBRARY, HYPERPARAMETERS, SOURCES, packages=PACKAGES))
