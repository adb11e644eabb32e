"""The runtime: the one place sb3_async starts, supervises and stops processes, for every algorithm and backend.

- :mod:`~sb3_async.runtime.processes`: the torch-free core every process goes through: the ``Launcher`` that starts,
  keeps and stops processes, commands and Ray actors, the parent-death watch, error reports; the env pool's workers
  use it without torch.
- :mod:`~sb3_async.runtime.base`: the ``Runtime`` seam, ``WorkerSpec``/``WorkerContext`` and the workers'
  seeds (``worker_seed``, ``restart_seed``), shared by every backend.
- :mod:`~sb3_async.runtime.mp`: the default ``MultiprocessingRuntime`` (``backend="mp"``), its worker entry
  point and the forkserver.
- :mod:`~sb3_async.runtime.ray_backend`: ``RayRuntime`` (``backend="ray"``), one Ray actor per node, each
  running the ``MultiprocessingRuntime`` (the actor: :mod:`~sb3_async.runtime.ray_host`).
- :mod:`~sb3_async.runtime.serial`: ``SerialRuntime`` (``backend="serial"``): every worker a thread of this
  process, one at a time in rank order, for debugging.
- :mod:`~sb3_async.runtime.factory`: ``make_runtime``, the runtime for a backend name.

Imports go one way: ``processes`` <- ``base`` <- ``mp`` <- ``ray_host`` <- ``ray_backend``, ``base`` <- ``serial``, and
``factory`` imports ``mp`` and ``serial`` (and ``ray_backend`` when asked for Ray).

Names are imported lazily (PEP 562), so that importing :mod:`~sb3_async.runtime.processes` does not import
torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sb3_async.lazy import lazy_exports

if TYPE_CHECKING:
    from sb3_async.runtime.base import Runtime, WorkerContext, WorkerSpec, restart_seed, worker_seed
    from sb3_async.runtime.factory import make_runtime
    from sb3_async.runtime.mp import MultiprocessingRuntime
    from sb3_async.runtime.processes import START_METHODS, WorkerError
    from sb3_async.runtime.serial import SerialRuntime
    from sb3_async.validation import BACKENDS

_LAZY = {
    **dict.fromkeys(("Runtime", "WorkerContext", "WorkerSpec", "restart_seed", "worker_seed"), "sb3_async.runtime.base"),
    "make_runtime": "sb3_async.runtime.factory",
    "MultiprocessingRuntime": "sb3_async.runtime.mp",
    "SerialRuntime": "sb3_async.runtime.serial",
    "BACKENDS": "sb3_async.validation",
    **dict.fromkeys(("START_METHODS", "WorkerError"), "sb3_async.runtime.processes"),
}

__all__ = [
    "BACKENDS",
    "START_METHODS",
    "MultiprocessingRuntime",
    "Runtime",
    "SerialRuntime",
    "WorkerContext",
    "WorkerError",
    "WorkerSpec",
    "make_runtime",
    "restart_seed",
    "worker_seed",
]


__getattr__, __dir__ = lazy_exports(globals(), _LAZY)
