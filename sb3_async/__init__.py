"""sb3-async: the asynchronous deep-RL algorithms for Stable-Baselines3.

Names are imported lazily (PEP 562), so that a process that only needs a torch-free part (an env worker of
:class:`AsyncEnvPool`) does not pay for importing torch.
"""

import os
from typing import TYPE_CHECKING

from sb3_async.lazy import lazy_exports

if TYPE_CHECKING:
    from sb3_async.a3c import A3C
    from sb3_async.ae_ddpg import AEDDPG
    from sb3_async.apex import ApeXDPG, ApeXDQN
    from sb3_async.async_q import AsyncNStepQ, AsyncOneStepQ, AsyncSarsa
    from sb3_async.common.buffers import (
        EpisodicDualReplayBuffer,
        PrioritizedReplayBuffer,
        PrioritizedReplayBufferSamples,
        ReplayStatsCallback,
    )
    from sb3_async.common.divergence import DivergenceError
    from sb3_async.common.noise import RandomWalkActionNoise
    from sb3_async.common.optimizers import MomentumSGD, SharedRMSprop
    from sb3_async.common.policies import MnihCNN
    from sb3_async.env_pool import AsyncEnvPool
    from sb3_async.env_pool.turns import TurnBasedGame
    from sb3_async.games import GameEvalCallback
    from sb3_async.runtime.processes import StepTimeout, WorkerError

with open(os.path.join(os.path.dirname(__file__), "version.txt")) as file_handler:
    __version__ = file_handler.read().strip()

#: Where each public name lives (imported on first access).
_LAZY = {
    "A3C": "sb3_async.a3c",
    "AEDDPG": "sb3_async.ae_ddpg",
    "ApeXDPG": "sb3_async.apex",
    "ApeXDQN": "sb3_async.apex",
    "AsyncNStepQ": "sb3_async.async_q",
    "AsyncOneStepQ": "sb3_async.async_q",
    "AsyncSarsa": "sb3_async.async_q",
    "AsyncEnvPool": "sb3_async.env_pool",
    "GameEvalCallback": "sb3_async.games",
    "TurnBasedGame": "sb3_async.env_pool.turns",
    "EpisodicDualReplayBuffer": "sb3_async.common.buffers",
    "PrioritizedReplayBuffer": "sb3_async.common.buffers",
    "PrioritizedReplayBufferSamples": "sb3_async.common.buffers",
    "RandomWalkActionNoise": "sb3_async.common.noise",
    "ReplayStatsCallback": "sb3_async.common.buffers",
    "MnihCNN": "sb3_async.common.policies",
    "MomentumSGD": "sb3_async.common.optimizers",
    "SharedRMSprop": "sb3_async.common.optimizers",
    "WorkerError": "sb3_async.runtime.processes",
    "StepTimeout": "sb3_async.runtime.processes",
    "DivergenceError": "sb3_async.common.divergence",
}

#: Subpackages reachable as attributes: ``import sb3_async; sb3_async.a3c`` worked when this module imported everything.
_SUBMODULES = ("a3c", "ae_ddpg", "apex", "async_q", "benchmark", "common", "enjoy", "record_video", "train", "zoo")

__getattr__, __dir__ = lazy_exports(globals(), _LAZY, _SUBMODULES)

__all__ = [
    "A3C",
    "AEDDPG",
    "ApeXDPG",
    "ApeXDQN",
    "AsyncEnvPool",
    "AsyncNStepQ",
    "AsyncOneStepQ",
    "AsyncSarsa",
    "EpisodicDualReplayBuffer",
    "GameEvalCallback",
    "MnihCNN",
    "MomentumSGD",
    "PrioritizedReplayBuffer",
    "PrioritizedReplayBufferSamples",
    "RandomWalkActionNoise",
    "ReplayStatsCallback",
    "SharedRMSprop",
    "StepTimeout",
    "DivergenceError",
    "TurnBasedGame",
    "WorkerError",
    "__version__",
]
