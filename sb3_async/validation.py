"""Argument checks shared by every part of sb3_async: one rule per kind of argument, the same errors everywhere.

A value of the wrong type raises ``TypeError``, a value of the right type outside what is accepted raises
``ValueError``; either message names the argument, the value given and what is accepted. This module imports neither
torch nor NumPy: the env pool (:mod:`sb3_async.env_pool`), which env worker processes import without torch, uses
it too. NumPy's integers and floats pass as integers and numbers (they are registered as ``numbers.Integral`` and
``numbers.Real``); ``bool`` is refused wherever a number is expected.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

__all__ = ["BACKENDS", "check_backend", "check_float", "check_int", "check_nonnegative", "check_replay_sizes"]

#: Where the workers (or the env pool's envs) run: processes on this machine, Ray actors on a Ray cluster, or (for
#: debugging) every worker in the caller's process, one after another.
BACKENDS = ("mp", "ray", "serial")


def check_int(name: str, value: Any, minimum: int = 1, maximum: int | None = None, why: str = "") -> int:
    """``value`` as an int >= ``minimum`` (and <= ``maximum``, if given): ``TypeError`` if it is not an integer,
    ``ValueError`` if it is out of range (the message ends with ``why``, when given)."""
    expected = f"an integer >= {minimum}" if maximum is None else f"an integer in [{minimum}, {maximum}]"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"Invalid {name}={value!r}: expected {expected}")
    number = int(value)
    if number < minimum or (maximum is not None and number > maximum):
        raise ValueError(f"Invalid {name}={value!r}: expected {expected}" + (f" ({why})" if why else ""))
    return number


def check_float(name: str, value: Any, low: float = 0.0, high: float = math.inf, high_inclusive: bool = True) -> float:
    """``value`` as a finite float in ``[low, high]`` (``[low, high)`` unless ``high_inclusive``): ``TypeError`` if it
    is not a number, ``ValueError`` if it is outside."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"Invalid {name}={value!r}: expected a number")
    value = float(value)
    if not math.isfinite(value) or value < low or value > high or (value == high and not high_inclusive):
        bracket = "]" if high_inclusive else ")"
        raise ValueError(f"Invalid {name}={value!r}: expected a finite number in [{low}, {high}{bracket}")
    return value


def check_nonnegative(name: str, value: Any) -> float:
    """``value`` as a finite float >= 0 (a duration, a CPU count): ``TypeError`` if it is not a number,
    ``ValueError`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"Invalid {name}={value!r}: expected a finite number >= 0")
    number = float(value)
    if not 0 <= number < math.inf:
        raise ValueError(f"Invalid {name}={value!r}: expected a finite number >= 0")
    return number


def check_backend(backend: Any, backend_kwargs: Any) -> None:
    """``backend`` one of :data:`BACKENDS` (else ``ValueError``) and ``backend_kwargs`` a dict or None (else
    ``TypeError``); ``"mp"`` and ``"serial"`` take no ``backend_kwargs`` (``ValueError``)."""
    if backend not in BACKENDS:
        raise ValueError(f"Invalid backend={backend!r}: expected one of {', '.join(BACKENDS)}")
    if backend_kwargs is not None and not isinstance(backend_kwargs, dict):
        raise TypeError(f"Invalid backend_kwargs={backend_kwargs!r}: expected a dict or None")
    if backend in ("mp", "serial") and backend_kwargs:
        names = ", ".join(map(str, backend_kwargs))
        raise ValueError(
            f"Invalid backend_kwargs={backend_kwargs!r}: backend={backend!r} takes none ({names}: options of backend='ray')"
        )


def check_replay_sizes(buffer_size: Any, batch_size: Any) -> tuple[int, int]:
    """``(buffer_size, batch_size)`` of a replay learner: integers >= 1, a batch no larger than the buffer (it could
    never be sampled), else ``ValueError`` naming both."""
    buffer_size, batch_size = check_int("buffer_size", buffer_size), check_int("batch_size", batch_size)
    if batch_size > buffer_size:
        raise ValueError(f"Invalid batch_size={batch_size}: larger than buffer_size={buffer_size}, it could never be sampled")
    return buffer_size, batch_size


def check_seed(seed: Any) -> int | None:
    """``seed`` as given to an algorithm: None, or an integer in [0, 2**32) (NumPy's seeds): ``TypeError`` if it is not
    an integer, ``ValueError`` if it is outside."""
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"Invalid seed={seed!r}: expected an integer in [0, 2**32) or None")
    value = int(seed)
    if not 0 <= value < 2**32:
        raise ValueError(f"Invalid seed={seed!r}: expected an integer in [0, 2**32) or None")
    return value
