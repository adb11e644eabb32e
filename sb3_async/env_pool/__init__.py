"""The async env pool: many copies of a Gymnasium env stepped concurrently, as PettingZoo's ``ParallelEnv``, EnvPool's
``send``/``recv`` or an SB3 ``VecEnv``.

- :mod:`~sb3_async.env_pool.pool`: :class:`AsyncEnvPool`, the pool and its views;
- :mod:`~sb3_async.env_pool.core`: the engine-independent part (ids, steps in flight, errors, restarts);
- :mod:`~sb3_async.env_pool.buffers`: the shared buffers (observations, actions, rewards, flags);
- :mod:`~sb3_async.env_pool.worker`: a group of envs and the worker process's loop;
- :mod:`~sb3_async.env_pool.multi_agent`: a multi-agent PettingZoo env copy as one slot per agent;
- :mod:`~sb3_async.env_pool.processes`, :mod:`~sb3_async.env_pool.ray_hosts`,
  :mod:`~sb3_async.env_pool.envpool_engine`: the worker processes, the Ray hosts, EnvPool's threads;
- :mod:`~sb3_async.env_pool.vec_env`: the SB3 view; :mod:`~sb3_async.env_pool.gym_vector`: the gymnasium view.

Imports go one way: ``buffers`` <- ``multi_agent`` <- ``worker`` <- ``processes``/``ray_hosts``/``envpool_engine`` <-
``core`` <- ``vec_env``/``gym_vector`` <- ``pool``. Nothing here imports torch except the SB3 view; both views are
imported lazily (PEP 562), so that env workers importing this package stay torch-free.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from sb3_async.env_pool.core import EnvError, EnvPoolBase
from sb3_async.env_pool.pool import AsyncEnvPool
from sb3_async.env_pool.worker import FINAL_INFO, FINAL_OBS, EnvFactory

if TYPE_CHECKING:
    from sb3_async.env_pool.gym_vector import PoolVectorEnv
    from sb3_async.env_pool.vec_env import PoolVecEnv

_LAZY = {"PoolVecEnv": "sb3_async.env_pool.vec_env", "PoolVectorEnv": "sb3_async.env_pool.gym_vector"}

__all__ = [
    "FINAL_INFO",
    "FINAL_OBS",
    "AsyncEnvPool",
    "EnvError",
    "EnvFactory",
    "EnvPoolBase",
    "PoolVecEnv",
    "PoolVectorEnv",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
