"""Rows with one writer each, guarded by a sequence lock: how workers share statistics without a lock.

A *group* is a dict of tensors with the same first dimension, one row per writer, plus ``versions`` (int64, one
per row): the writer of row ``r`` makes ``versions[r]`` odd, writes the row, and makes it even again; a reader copies
the rows and keeps the copy only if every version it covers was even and unchanged across the copy (else it reads
again). No process ever waits on a lock, and since each row has a single writer no update is lost.

:class:`~sb3_async.common.normalization.SharedRunningMeanStd` keeps its statistics this way (row ``rank + 1`` is
worker ``rank``'s accumulator). :class:`~sb3_async.runtime.ray_backend.RayRuntime` carries such groups between
machines (``WorkerSpec.owned``): each row is copied from the machine of its writer to every other machine, read and
written under the same protocol, so a copy is never torn and, one writer per row, the copies agree exactly.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

VERSIONS = "versions"


def seqlock_groups(entry: Any) -> list[dict[str, torch.Tensor]]:
    """The groups (dicts holding a ``versions`` tensor) inside a ``shared`` entry, in a fixed order."""
    if isinstance(entry, dict):
        if isinstance(entry.get(VERSIONS), torch.Tensor):
            return [entry]
        return [group for key in sorted(entry) for group in seqlock_groups(entry[key])]
    if isinstance(entry, (list, tuple)):
        return [group for value in entry for group in seqlock_groups(value)]
    return []


def read_rows(group: dict[str, torch.Tensor], rows: np.ndarray | slice | int | None = None) -> dict[str, np.ndarray]:
    """A consistent copy of ``rows`` (all of them if None) of every tensor of ``group`` but ``versions``."""
    index = slice(None) if rows is None else rows
    versions = group[VERSIONS].numpy()
    arrays = {name: tensor.numpy() for name, tensor in group.items() if name != VERSIONS}
    while True:
        before = versions[index].copy()
        copy = {name: array[index].copy() for name, array in arrays.items()}
        if not (before & 1).any() and np.array_equal(before, versions[index]):
            return copy
        time.sleep(0)  # a writer is mid-update: let it finish


def write_rows(group: dict[str, torch.Tensor], rows: np.ndarray | slice | int, values: dict[str, np.ndarray]) -> None:
    """Write ``values`` (from :func:`read_rows`) into ``rows`` of ``group``, as their one writer (odd while writing)."""
    versions = group[VERSIONS].numpy()
    versions[rows] += 1
    for name, value in values.items():
        group[name].numpy()[rows] = value
    versions[rows] += 1
