#!/usr/bin/env bash
# Build the virtual environment the benchmark's external peers run in: .venv-peers at the repository's root, with
# TorchRL 0.14 and Tianshou 2.0.1 beside sb3-async (gymnasium 1.x). `python -m sb3_async.benchmark --peers-from
# benchmarks/peers --algos torchrl_ppo,...` finds it there (or pass --peer-python peers=PATH).
#
#   benchmarks/peers/make_peer_venvs.sh
#
# Environment variables:
#   PYTHON          the interpreter the venv is made from (default: python3)
#   TORCH_PIP_ARGS  pip arguments for torch, installed first so that the peers' libraries keep it (default, as in
#                   the README: PyTorch's CPU index; without it pip installs the multi-GB CUDA build). Set it empty
#                   where your pip index already serves the build you want (TORCH_PIP_ARGS= ...).
set -euo pipefail
cd "$(dirname "$0")/../.."

PYTHON="${PYTHON:-python3}"
TORCH_PIP_ARGS="${TORCH_PIP_ARGS-"--index-url https://download.pytorch.org/whl/cpu"}"  # unset: the default; empty: none
VENV=.venv-peers

"$PYTHON" -m venv "$VENV"
# shellcheck disable=SC2086  # TORCH_PIP_ARGS is a list of arguments
"$VENV/bin/pip" install $TORCH_PIP_ARGS torch==2.13.0
"$VENV/bin/pip" install -e ".[atari,box2d,mujoco]"  # Pong for PPO, LunarLander-v3 for the DQN peers, MuJoCo for TD3
"$VENV/bin/pip" install tianshou==2.0.1 "torchrl==0.14.*" tensordict
"$VENV/bin/python" - <<'PY'
from importlib.metadata import version

print(".venv-peers:", ", ".join(f"{name} {version(name)}" for name in ("torch", "tianshou", "torchrl", "tensordict", "gymnasium", "numpy")))
PY
