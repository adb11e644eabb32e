"""Lazy re-exports for a package's ``__init__`` (PEP 562): a name is imported from its module on first access.

The packages re-export names whose modules import torch or optional libraries; importing them lazily keeps a process
that needs only a torch-free part (an env worker of the async env pool) from paying for torch. This module imports
nothing of sb3_async, so every layer may use it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    namespace: dict[str, Any], table: Mapping[str, str], submodules: Iterable[str] = ()
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of a package that re-exports the names of ``table`` lazily.

    Use as ``__getattr__, __dir__ = lazy_exports(globals(), {"Name": "package.module"})``.

    :param namespace: the package's ``globals()``: a name, once imported, is stored there, so that later accesses
        skip ``__getattr__``
    :param table: each re-exported name and the module it lives in
    :param submodules: subpackages or submodules reachable as attributes without an import of their own
        (``import pkg; pkg.sub``), as they were when the package imported them eagerly
    :return: ``(__getattr__, __dir__)``
    """
    package = namespace["__name__"]
    names = dict(table)
    children = frozenset(submodules)

    def __getattr__(name: str) -> Any:
        if name in names:
            value = getattr(importlib.import_module(names[name]), name)
            namespace[name] = value
            return value
        if name in children:
            return importlib.import_module(f"{package}.{name}")
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(names))

    return __getattr__, __dir__
