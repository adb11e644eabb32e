""":func:`make_runtime`: the runtime for a ``backend`` name, the one module that knows every backend.

Kept apart from the backends so that imports go one way: :mod:`~sb3_async.runtime.ray_backend` builds on
:mod:`~sb3_async.runtime.mp` (each Ray host runs a ``MultiprocessingRuntime``), and this module imports every backend,
Ray's only when asked for (Ray is optional).
"""

from __future__ import annotations

from typing import Any

from sb3_async.runtime.base import Runtime
from sb3_async.runtime.mp import MultiprocessingRuntime
from sb3_async.runtime.serial import SerialRuntime
from sb3_async.validation import BACKENDS

__all__ = ["make_runtime"]


def make_runtime(backend: str, start_method: str, backend_kwargs: dict[str, Any] | None = None) -> Runtime:
    """The runtime for ``backend``: ``"mp"`` (:class:`MultiprocessingRuntime`), ``"ray"``
    (:class:`~sb3_async.runtime.ray_backend.RayRuntime`, its options in ``backend_kwargs``) or ``"serial"``
    (:class:`~sb3_async.runtime.serial.SerialRuntime`: every worker in this process, for debugging)."""
    backend_kwargs = dict(backend_kwargs or {})
    if backend == "mp":
        if backend_kwargs:
            raise ValueError(f"Invalid backend_kwargs={backend_kwargs!r}: backend='mp' takes none")
        return MultiprocessingRuntime(start_method)
    if backend == "serial":
        if backend_kwargs:
            raise ValueError(f"Invalid backend_kwargs={backend_kwargs!r}: backend='serial' takes none")
        return SerialRuntime()
    if backend == "ray":
        from sb3_async.runtime.ray_backend import RayRuntime  # Ray is optional: imported only when asked for

        return RayRuntime(start_method=start_method, **backend_kwargs)
    raise ValueError(f"Invalid backend={backend!r}: expected one of {', '.join(BACKENDS)}")
