"""The async env pool: many copies of a Gymnasium env stepped concurrently, as PettingZoo's ``ParallelEnv``, EnvPool's
``send``/``recv`` or an SB3 ``VecEnv``.

- :mod:`~sb3_async.env_pool.pool`: :class:`AsyncEnvPool`, the pool and its views;
- :mod:`~sb3_async.env_pool.core`: the engine-independent part, built in layers: the groups of envs and the pool's
  state (:mod:`~sb3_async.env_pool.groups`), a worker's start, death and respawn (:mod:`~sb3_async.env_pool.crashes`),
  the steps in flight (:mod:`~sb3_async.env_pool.steps`), resets and method calls (:mod:`~sb3_async.env_pool.remote`),
  then construction and lifecycle (``core``);
- :mod:`~sb3_async.env_pool.buffers`: the shared buffers (observations, actions, rewards, flags);
- :mod:`~sb3_async.env_pool.worker`: a group of envs and the worker process's loop;
- :mod:`~sb3_async.env_pool.multi_agent`: a multi-agent PettingZoo env copy as one slot per agent;
- :mod:`~sb3_async.env_pool.processes`, :mod:`~sb3_async.env_pool.ray_hosts`,
  :mod:`~sb3_async.env_pool.envpool_engine`: the worker processes, the Ray hosts, EnvPool's threads;
- :mod:`~sb3_async.env_pool.vec_env`: the SB3 view; :mod:`~sb3_async.env_pool.gym_vector`: the gymnasium view.

Imports go one way: ``buffers`` <- ``multi_agent`` <- ``worker`` <- ``processes``/``ray_hosts``/``envpool_engine`` <-
``core`` <- ``vec_env``/``gym_vector`` <- ``pool``, and ``buffers`` <- ``groups`` <- ``crashes`` <- ``steps`` <- ``remote``
<- ``core``. Nothing here imports torch except the SB3 view; both views are imported lazily (PEP 562,
:mod:`sb3_async.lazy`), so that env workers importing this package stay torch-free.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sb3_async.env_pool.core import EnvError, EnvPoolBase
from sb3_async.env_pool.groups import PoolClosedError, SpacesDifferError
from sb3_async.env_pool.pool import AsyncEnvPool
from sb3_async.env_pool.worker import FINAL_INFO, FINAL_OBS, EnvFactory
from sb3_async.lazy import lazy_exports

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
    "PoolClosedError",
    "PoolVecEnv",
    "PoolVectorEnv",
    "SpacesDifferError",
]


__getattr__, __dir__ = lazy_exports(globals(), _LAZY)
