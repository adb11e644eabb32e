"""The runtime: the one place sb3_async starts, supervises and stops processes, for every algorithm and backend.

- :mod:`~sb3_async.common.runtime.processes`: the torch-free core every process goes through (the start method,
  ``start_process``, the parent-death watch, error reports, stopping); the env pool's workers use it without torch.
- :mod:`~sb3_async.common.runtime.mp`: the ``Runtime`` seam, ``WorkerSpec``/``WorkerContext`` and the default
  ``MultiprocessingRuntime`` (``backend="mp"``).
- :mod:`~sb3_async.common.runtime.ray_backend`: ``RayRuntime`` (``backend="ray"``), one Ray actor per node, each
  running the ``MultiprocessingRuntime``.

Names are imported lazily (PEP 562), so that importing :mod:`~sb3_async.common.runtime.processes` does not import
torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sb3_async.common.runtime.mp import (
        BACKENDS,
        MultiprocessingRuntime,
        Runtime,
        WorkerContext,
        WorkerSpec,
        make_runtime,
        restart_seed,
        worker_seed,
    )
    from sb3_async.common.runtime.processes import START_METHODS, WorkerError

_LAZY = {
    **dict.fromkeys(
        (
            "BACKENDS",
            "MultiprocessingRuntime",
            "Runtime",
            "WorkerContext",
            "WorkerSpec",
            "make_runtime",
            "restart_seed",
            "worker_seed",
        ),
        "sb3_async.common.runtime.mp",
    ),
    **dict.fromkeys(("START_METHODS", "WorkerError"), "sb3_async.common.runtime.processes"),
}

__all__ = [
    "BACKENDS",
    "START_METHODS",
    "MultiprocessingRuntime",
    "Runtime",
    "WorkerContext",
    "WorkerError",
    "WorkerSpec",
    "make_runtime",
    "restart_seed",
    "worker_seed",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
