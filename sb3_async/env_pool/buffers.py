"""The shared buffers of an env pool: every env's observation, action, reward and end flags, in one shared mapping of an
anonymous file (``memfd``: nothing is ever named in ``/dev/shm``).

The main process writes actions and reads results; a worker process maps the same file (its descriptor travels over the
worker's pipe) and writes the results of the envs it steps into their slots, so a step's data never goes through a
pipe. Only a wake-up byte and the infos that are not empty do. A slot is written by one side at a time: the worker
between a step's command and its reply, the main process otherwise.
"""

from __future__ import annotations

import mmap
import os
import tempfile
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces

__all__ = ["FINAL_INFO", "FINAL_OBS", "SharedBuffers", "SpaceArrays", "space_leaves"]

#: Keys the same-step autoreset adds to an ended env's info (gymnasium 1.x's names for its same-step vector mode):
#: the env workers write them, the views read them.
FINAL_OBS, FINAL_INFO = "final_obs", "final_info"

#: The spaces whose values are one fixed-shape array, the leaves of the Dict and Tuple spaces the pool supports.
_FLAT_SPACES = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)


def space_leaves(space: spaces.Space, what: str) -> list[tuple[Any, tuple[int, ...], np.dtype]]:
    """``(key, shape, dtype)`` of each array of a value of ``space``: ``key`` None for a plain space, the Dict key or
    the Tuple index otherwise (the spaces SB3's VecEnvs support).

    :param what: what the space is of ("observations", "actions"), for the error message
    """
    if isinstance(space, spaces.Dict):
        items: Iterable[tuple[Any, spaces.Space]] = space.spaces.items()
    elif isinstance(space, spaces.Tuple):
        items = enumerate(space.spaces)
    else:
        items = [(None, space)]
    leaves = []
    for key, sub in items:
        if not isinstance(sub, _FLAT_SPACES):
            raise TypeError(
                f"AsyncEnvPool supports Box, Discrete, MultiDiscrete and MultiBinary {what} (alone or in a Dict or Tuple),"
                f" as SB3's VecEnvs do; got {sub}"
            )
        leaves.append((key, tuple(sub.shape or ()), np.dtype(sub.dtype)))
    return leaves


def _anonymous_fd(size: int) -> int:
    """A file descriptor of ``size`` zeroed bytes with no name anywhere, so nothing can leak into /dev/shm."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("sb3_async-env-pool", os.MFD_CLOEXEC)
    else:  # pragma: no cover - macOS: an unlinked temporary file
        with tempfile.TemporaryFile() as file:
            fd = os.dup(file.fileno())
    os.ftruncate(fd, size)
    return fd


def _describe(value: Any) -> str:
    if isinstance(value, dict):
        return "a dict with keys " + ", ".join(map(repr, value))
    shape = np.shape(value) if not isinstance(value, (tuple, list)) or not value or np.ndim(value[0]) == 0 else None
    return f"shape {shape}" if shape is not None else f"a {type(value).__name__}"


class SpaceArrays:
    """``n_envs`` values of a space as arrays with one row per env (one array per Dict key or Tuple index).

    :param space: the space of one value
    :param arrays: the arrays, keyed as :func:`space_leaves` keys them
    """

    def __init__(self, space: spaces.Space, arrays: dict[Any, np.ndarray]):
        self.space, self.arrays = space, arrays
        self._plain = arrays.get(None) if len(arrays) == 1 else None
        # A Box value is a view into the buffer: its reader gets a copy (the slot is written again at the next step)
        self._copy_item = self._plain is not None and self._plain.ndim > 1

    def write(self, index: int | Sequence[int] | slice, value: Any) -> None:
        """Write ``value`` into row ``index`` (or a batch of values into the rows ``index``)."""
        try:
            if self._plain is not None:
                self._plain[index] = value
                return
            for key, array in self.arrays.items():
                array[index] = value[key]
        except (ValueError, TypeError, KeyError, IndexError) as error:
            which = f"Env {index}'s value" if isinstance(index, (int, np.integer)) else "A value"
            raise ValueError(
                f"{which} does not fit the space {self.space}: got {_describe(value)}. An env must return values of its "
                f"declared space ({type(error).__name__}: {error})"
            ) from error

    def read(self, indices: int | Sequence[int] | slice | np.ndarray) -> Any:
        """A copy of the rows ``indices``, batched as SB3's VecEnvs batch them (a dict of arrays for a Dict space, a
        tuple of arrays for a Tuple space)."""
        if self._plain is not None:  # one array (at every step: the short way)
            return self._plain[indices].copy() if isinstance(indices, (int, slice)) else self._plain[indices]
        if isinstance(indices, (int, slice)):  # views: copy them
            arrays = {key: array[indices].copy() for key, array in self.arrays.items()}
        else:  # fancy indexing copies already
            arrays = {key: array[indices] for key, array in self.arrays.items()}
        return self._batch(arrays)

    def item(self, i: int) -> Any:
        """Row ``i`` as one value of the space (a copy: the row is rewritten later)."""
        if self._plain is not None:
            return self._plain[i].copy() if self._copy_item else self._plain[i]
        values = {key: array[i].copy() for key, array in self.arrays.items()}
        if isinstance(self.space, spaces.Dict):
            return values
        return tuple(values.values())

    def _batch(self, arrays: dict[Any, np.ndarray]) -> Any:
        if isinstance(self.space, spaces.Dict):
            return arrays
        if isinstance(self.space, spaces.Tuple):
            return tuple(arrays.values())
        return arrays[None]


class SharedBuffers:
    """Every env's observation, action, reward and end flags, in one shared mapping of an anonymous file.

    :param observation_space: the observation space of one env
    :param action_space: the action space of one env
    :param n_envs: number of envs (rows)
    :param fd: an existing mapping's file descriptor (in a worker); None creates one
    """

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space, n_envs: int, fd: int | None = None):
        self.n_envs = n_envs
        fields: dict[str, list[tuple[Any, tuple[int, ...], np.dtype]]] = {
            "obs": space_leaves(observation_space, "observations"),
            "actions": space_leaves(action_space, "actions"),
            "scalars": [
                ("rewards", (), np.dtype(np.float64)),
                ("terminated", (), np.dtype(np.bool_)),
                ("truncated", (), np.dtype(np.bool_)),
            ],
        }
        offsets: dict[str, list[int]] = {}
        size = 0
        for name, leaves in fields.items():
            offsets[name] = []
            for _, shape, dtype in leaves:
                size = -(-size // 64) * 64  # 64-byte alignment for every array
                offsets[name].append(size)
                size += n_envs * int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        size = max(size, 1)
        self.fd = _anonymous_fd(size) if fd is None else fd
        self._mmap = mmap.mmap(self.fd, size)

        def arrays(name: str) -> dict[Any, np.ndarray]:
            return {
                key: np.ndarray((n_envs, *shape), dtype=dtype, buffer=self._mmap, offset=offset)
                for (key, shape, dtype), offset in zip(fields[name], offsets[name])
            }

        self.obs = SpaceArrays(observation_space, arrays("obs"))
        self.actions = SpaceArrays(action_space, arrays("actions"))
        scalars = arrays("scalars")
        self.rewards, self.terminated, self.truncated = scalars["rewards"], scalars["terminated"], scalars["truncated"]
        #: ``(rewards, terminated, truncated)``, in that order
        self.scalars = (self.rewards, self.terminated, self.truncated)

    def close(self) -> None:
        """Close this side's descriptor; the memory goes once every process has unmapped it."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
