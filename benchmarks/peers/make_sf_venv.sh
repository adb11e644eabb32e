#!/usr/bin/env bash
# Build the virtual environment of the Sample Factory peer (sf_appo): .venv-sf at the repository's root, with Sample
# Factory 2.1.1. It cannot share .venv-peers: Sample Factory 2.1.1 pins gymnasium<1.0 and numpy<2. sb3-async goes in
# without its dependencies (no SB3, no RL Zoo): the adapter needs only sb3_async.benchmark.peers.protocol, which imports
# numpy and gymnasium alone. `python -m sb3_async.benchmark --peers-from benchmarks/peers --algos a3c,sf_appo` finds it
# there (or pass --peer-python sf=PATH).
#
#   benchmarks/peers/make_sf_venv.sh
#
# Environment variables:
#   PYTHON          the interpreter the venv is made from (default: python3; Python 3.11 is what it was tested with)
#   TORCH_PIP_ARGS  pip arguments for torch, installed first so that Sample Factory keeps it (default, as in the
#                   README: PyTorch's CPU index; without it pip installs the multi-GB CUDA build). Set it empty where
#                   your pip index already serves the build you want (TORCH_PIP_ARGS= ...).
set -euo pipefail
cd "$(dirname "$0")/../.."

PYTHON="${PYTHON:-python3}"
TORCH_PIP_ARGS="${TORCH_PIP_ARGS-"--index-url https://download.pytorch.org/whl/cpu"}"  # unset: the default; empty: none
VENV=.venv-sf
ALE_PY=0.12.1

"$PYTHON" -m venv "$VENV"
# shellcheck disable=SC2086  # TORCH_PIP_ARGS is a list of arguments
"$VENV/bin/pip" install $TORCH_PIP_ARGS torch==2.13.0
# ale-py: Pong (its wheels ship the ROMs); gymnasium's mujoco extra: HalfCheetah
"$VENV/bin/pip" install sample-factory==2.1.1 psutil "ale-py==$ALE_PY" "gymnasium[mujoco]==0.29.1"
"$VENV/bin/pip" install --no-deps -e .
"$VENV/bin/python" - <<'PY'
from importlib.metadata import version

import sb3_async.benchmark.peers.protocol  # noqa: F401  (the adapter's protocol imports here, without SB3)

names = ("sample-factory", "torch", "gymnasium", "numpy", "faster-fifo", "signal-slot-mp", "psutil", "ale-py", "mujoco")
print(".venv-sf:", ", ".join(f"{name} {version(name)}" for name in names))
PY
