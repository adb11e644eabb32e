"""sb3-async: the asynchronous deep-RL algorithms for Stable-Baselines3."""

import os

from sb3_async.a3c import A3C
from sb3_async.apex import ApeXDPG, ApeXDQN
from sb3_async.async_q import AsyncNStepQ, AsyncOneStepQ, AsyncSarsa
from sb3_async.common.buffers import (
    EpisodicDualReplayBuffer,
    PrioritizedReplayBuffer,
    PrioritizedReplayBufferSamples,
    ReplayStatsCallback,
)
from sb3_async.common.noise import RandomWalkActionNoise
from sb3_async.common.optimizers import MomentumSGD, SharedRMSprop
from sb3_async.common.policies import MnihCNN
from sb3_async.common.runtime import WorkerError

with open(os.path.join(os.path.dirname(__file__), "version.txt")) as file_handler:
    __version__ = file_handler.read().strip()

__all__ = [
    "A3C",
    "ApeXDPG",
    "ApeXDQN",
    "AsyncNStepQ",
    "AsyncOneStepQ",
    "AsyncSarsa",
    "EpisodicDualReplayBuffer",
    "MnihCNN",
    "MomentumSGD",
    "PrioritizedReplayBuffer",
    "PrioritizedReplayBufferSamples",
    "RandomWalkActionNoise",
    "ReplayStatsCallback",
    "SharedRMSprop",
    "WorkerError",
    "__version__",
]
