"""The external peers of the benchmark, registered with ``python -m sb3_async.benchmark --peers-from benchmarks/peers``.

The benchmark imports this file (:func:`sb3_async.benchmark.registry.load_peers`) and nothing else of this folder: each
peer is an adapter script here, run as ``PYTHON ADAPTER.py SPEC.json RESULT.json`` in a fresh process under the
interpreter of its own virtual environment (``.venv-peers``: ``make_peer_venvs.sh``; ``.venv-sf``:
``make_sf_venv.sh``), with this folder and the sb3_async checkout on its ``PYTHONPATH``. An adapter follows the
protocol of :mod:`sb3_async.benchmark.peers.protocol` (``fixed_policy.py`` there is the smallest one).

A new peer: its adapter script here, one :func:`register_algorithm` call below (and its name in the ``peers`` of the
algorithms of ours it is compared with, in :mod:`sb3_async.benchmark.registry`).
"""

from __future__ import annotations

from pathlib import Path

from sb3_async.benchmark.registry import PONG, register_algorithm

HERE = Path(__file__).resolve().parent
_MUJOCO = ("HalfCheetah-v5", "Hopper-v5", "Walker2d-v5")


def _adapter(name: str) -> str:
    return str(HERE / f"{name}.py")


# TorchRL 0.14 and Tianshou 2.0.1: .venv-peers (make_peer_venvs.sh), the default python_env
register_algorithm(
    "torchrl_ppo", "external", envs=("CartPole-v1", "Pendulum-v1", "HalfCheetah-v5", PONG), adapter=_adapter("torchrl_ppo")
)
register_algorithm("torchrl_dqn", "external", envs=("CartPole-v1", "LunarLander-v3"), adapter=_adapter("torchrl_dqn"))
register_algorithm("tianshou_dqn", "external", envs=("CartPole-v1", "LunarLander-v3"), adapter=_adapter("tianshou_dqn"))
register_algorithm("tianshou_td3", "external", envs=("Pendulum-v1", *_MUJOCO), adapter=_adapter("tianshou_td3"))
register_algorithm("tianshou_ddpg", "external", envs=("Pendulum-v1",), adapter=_adapter("tianshou_ddpg"))
register_algorithm("torchrl_td3", "external", envs=("Pendulum-v1", *_MUJOCO), adapter=_adapter("torchrl_td3"))
# Sample Factory 2.1.1 pins gymnasium<1.0 and numpy<2: its own environment, .venv-sf (make_sf_venv.sh)
register_algorithm(
    "sf_appo",
    "external",
    envs=("CartPole-v1", "Pendulum-v1", "HalfCheetah-v5", PONG),
    adapter=_adapter("sf_appo"),
    python_env="sf",
)
