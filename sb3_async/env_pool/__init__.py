"""The async env pool: many copies of a Gymnasium env stepped concurrently, as PettingZoo's ``ParallelEnv``, EnvPool's
``send``/``recv`` or an SB3 ``VecEnv``.

:class:`AsyncEnvPool` (:mod:`~sb3_async.env_pool.pool`) is one object that holds its collaborators, one module each:

- :mod:`~sb3_async.env_pool.groups`: which envs each env host holds, the spaces, the shared buffers
  (:mod:`~sb3_async.env_pool.shared_buffers`: observations, actions, rewards, flags);
- :mod:`~sb3_async.env_pool.host`: a group of envs and the loop of an env host process;
  :mod:`~sb3_async.env_pool.process_hosts`, :mod:`~sb3_async.env_pool.ray_hosts`: the hosts as processes or Ray actors;
  :mod:`~sb3_async.env_pool.envpool_engine`: EnvPool's threads instead;
- :mod:`~sb3_async.env_pool.supervisor`: a host's start, messages, death and respawn;
- :mod:`~sb3_async.env_pool.step_book`, :mod:`~sb3_async.env_pool.steps`: the steps in flight, sent and collected;
- :mod:`~sb3_async.env_pool.remote`: resets and method calls;
- :mod:`~sb3_async.env_pool.multi_agent`: a multi-agent PettingZoo env copy as one slot per agent;
- :mod:`~sb3_async.env_pool.vec_env`: the SB3 view; :mod:`~sb3_async.env_pool.gym_vector`: the gymnasium view.

Imports go one way: ``shared_buffers`` <- ``multi_agent`` <- ``host`` <- ``process_hosts``/``ray_hosts``/
``envpool_engine``; ``errors`` <- ``groups`` <- ``step_book`` <- ``supervisor`` <- ``steps`` <- ``remote``; all of them
<- ``pool`` <- ``vec_env``/``gym_vector`` (the pool imports its views by name when asked for one). Nothing here imports
torch except the SB3 view; both views are imported lazily (PEP 562, :mod:`sb3_async.lazy`), so that env hosts
importing this package stay torch-free.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sb3_async.env_pool.errors import EnvError, PoolClosedError, SpacesDifferError
from sb3_async.env_pool.host import EnvFactory
from sb3_async.env_pool.pool import AsyncEnvPool
from sb3_async.env_pool.shared_buffers import FINAL_INFO, FINAL_OBS
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
    "PoolClosedError",
    "PoolVecEnv",
    "PoolVectorEnv",
    "SpacesDifferError",
]


__getattr__, __dir__ = lazy_exports(globals(), _LAZY)
