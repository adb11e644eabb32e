"""The shared buffers of an env pool: every env's observation, action, reward and end flags, in one shared mapping of an
anonymous file (``memfd``: nothing is ever named in ``/dev/shm``).

The main process writes actions and reads results; a host process maps the same file (its descriptor travels over the
host's pipe) and writes the results of the envs it steps into their slots, so a step's data never goes through a
pipe. Only a wake-up byte and the infos that are not empty do. A slot is written by one side at a time: the host
between a step's command and its reply, the main process otherwise.

Observations of any gymnasium space: their array parts (Box, Discrete, MultiDiscrete, MultiBinary, in Dicts and
Tuples at any depth) live in the mapping; their other parts (Text, Graph, Sequence, OneOf, custom spaces) travel
pickled with the host's reply, under the info key :data:`OBJECTS`. Actions alike: the other parts of the actions
written since the last step travel pickled with the step's command.
"""

from __future__ import annotations

import mmap
import os
import tempfile
from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium import spaces

__all__ = ["ARRAY_SPACES", "FINAL_INFO", "FINAL_OBS", "OBJECTS", "SharedBuffers", "SpaceArrays", "same_layout", "space_leaves"]

#: Keys the same-step autoreset adds to an ended env's info (gymnasium 1.x's names for its same-step vector mode):
#: the env hosts write them, the views read them.
FINAL_OBS, FINAL_INFO = "final_obs", "final_info"

#: The spaces whose values are one fixed-shape array: they live in the shared buffers. Any other space (Text, Graph,
#: Sequence, OneOf, a custom ``Space``) is an *object leaf*, whose values travel pickled (:class:`SpaceArrays`).
ARRAY_SPACES = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)

#: The info key under which a host process sends the values of the object leaves its envs' observations took
OBJECTS = "_sb3_async_objects"

#: Where a leaf sits in a value: the Dict keys and Tuple indices from the top (``()``: the value itself)
Path = tuple[Any, ...]
#: A node of a space's layout: ``("array", path)``, ``("object", path)``, ``("dict", ((key, node), ...))`` or
#: ``("tuple", (node, ...))``
Node = tuple[str, Any]


def _layout(space: spaces.Space, path: Path = ()) -> Node:
    if isinstance(space, spaces.Dict):
        return "dict", tuple((key, _layout(sub, (*path, key))) for key, sub in space.spaces.items())
    if isinstance(space, spaces.Tuple):
        return "tuple", tuple(_layout(sub, (*path, k)) for k, sub in enumerate(space.spaces))
    return ("array" if isinstance(space, ARRAY_SPACES) else "object"), path


def _leaves(node: Node, kind: str) -> list[Path]:
    """The paths of the leaves of ``kind`` ("array" or "object") under ``node``, in order."""
    if node[0] == "dict":
        return [path for _, child in node[1] for path in _leaves(child, kind)]
    if node[0] == "tuple":
        return [path for child in node[1] for path in _leaves(child, kind)]
    return [node[1]] if node[0] == kind else []


def _subspace(space: spaces.Space, path: Path) -> spaces.Space:
    for key in path:
        space = space[key]  # type: ignore[index]  # a Dict or Tuple: the layout walked it
    return space


def space_leaves(space: spaces.Space, what: str, objects: bool = True) -> list[tuple[Path, tuple[int, ...], np.dtype]]:
    """``(path, shape, dtype)`` of each array of a value of ``space``: its Box, Discrete, MultiDiscrete and
    MultiBinary parts, in Dicts and Tuples at any depth (``path``: the keys and indices that lead to it, ``()`` for a
    plain space).

    :param what: what the space is of ("observations", "actions"), for the error message
    :param objects: whether other parts (object leaves) are allowed; if not, one raises ``TypeError``
    """
    layout = _layout(space)
    if not objects and _leaves(layout, "object"):
        raise TypeError(
            f"AsyncEnvPool supports Box, Discrete, MultiDiscrete and MultiBinary {what}, alone or in Dicts and Tuples; "
            f"got {_subspace(space, _leaves(layout, 'object')[0])} in {space}"
        )
    leaves = []
    for path in _leaves(layout, "array"):
        sub = _subspace(space, path)
        leaves.append((path, tuple(sub.shape or ()), np.dtype(sub.dtype)))
    return leaves


def same_layout(a: spaces.Space, b: spaces.Space) -> bool:
    """Whether values of ``a`` and ``b`` have the same layout: the same Dict keys and Tuple lengths, the same shapes
    and dtypes of their array parts and the same places of their other parts (they may differ in bounds, counts...)."""
    return _layout(a) == _layout(b) and space_leaves(a, "observations") == space_leaves(b, "observations")


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
    """``n_envs`` values of a space: the arrays of its array leaves with one row per env, and a Python list per object
    leaf (Text, Graph, Sequence, OneOf, custom spaces). Batches are gymnasium's (``batch_space``): a dict for a Dict,
    a tuple for a Tuple, an array per array leaf, a tuple of values per object leaf.

    The arrays are shared with the host processes; the object leaves are not. A host's buffers record the object
    values its envs write (``track_objects``), which it sends with its reply (:meth:`take_objects`), and the pool puts
    them into its own (:meth:`put_objects`).

    :param space: the space of one value
    :param arrays: the arrays, keyed by the paths of :func:`space_leaves`
    :param n_envs: number of rows
    :param track_objects: whether to record the object values written, for :meth:`take_objects`
    """

    def __init__(self, space: spaces.Space, arrays: dict[Path, np.ndarray], n_envs: int, track_objects: bool = False):
        self.space, self.arrays, self.n_envs = space, arrays, n_envs
        self._layout = _layout(space)
        #: The values of each object leaf, one per env (None until an env wrote one)
        self.objects: dict[Path, list[Any]] = {path: [None] * n_envs for path in _leaves(self._layout, "object")}
        self._written: dict[int, dict[Path, Any]] | None = {} if track_objects and self.objects else None
        self._plain = arrays[()] if self._layout == ("array", ()) else None
        # A Box value is a view into the buffer: its reader gets a copy (the slot is written again at the next step)
        self._copy_item = self._plain is not None and self._plain.ndim > 1

    def write(self, index: int | Sequence[int] | slice, value: Any) -> None:
        """Write ``value`` into row ``index`` (or a batch of values into the rows ``index``)."""
        try:
            if self._plain is not None:
                self._plain[index] = value
            elif isinstance(index, (int, np.integer)):
                self._write_one(self._layout, int(index), value)
            else:
                rows = range(self.n_envs)[index] if isinstance(index, slice) else np.asarray(index).tolist()
                self._write_rows(self._layout, index, rows, value)
        except (ValueError, TypeError, KeyError, IndexError) as error:
            which = f"Env {index}'s value" if isinstance(index, (int, np.integer)) else "A value"
            raise ValueError(
                f"{which} does not fit the space {self.space}: got {_describe(value)}. An env must return values of its "
                f"declared space ({type(error).__name__}: {error})"
            ) from error

    def _write_one(self, node: Node, i: int, value: Any) -> None:
        kind, content = node
        if kind == "array":
            self.arrays[content][i] = value
        elif kind == "object":
            self.objects[content][i] = value
            if self._written is not None:
                self._written.setdefault(i, {})[content] = value
        elif kind == "dict":
            for key, child in content:
                self._write_one(child, i, value[key])
        else:
            for k, child in enumerate(content):
                self._write_one(child, i, value[k])

    def _write_rows(self, node: Node, index: Any, rows: Sequence[int], batch: Any) -> None:
        kind, content = node
        if kind == "array":
            self.arrays[content][index] = batch
        elif kind == "object":
            if len(batch) != len(rows):
                raise ValueError(f"{len(batch)} values for {len(rows)} envs")
            for i, value in zip(rows, batch):
                self._write_one(node, i, value)
        elif kind == "dict":
            for key, child in content:
                self._write_rows(child, index, rows, batch[key])
        else:
            for k, child in enumerate(content):
                self._write_rows(child, index, rows, batch[k])

    def read(self, indices: int | Sequence[int] | slice | np.ndarray) -> Any:
        """A copy of the rows ``indices`` as a batch (gymnasium's and SB3's for the spaces SB3 supports: a dict of
        arrays for a Dict space, a tuple of arrays for a Tuple space); one value for an int."""
        if self._plain is not None:  # one array (at every step: the short way)
            return self._plain[indices].copy() if isinstance(indices, (int, slice)) else self._plain[indices]
        if isinstance(indices, (int, np.integer)):
            return self.item(int(indices))
        rows = range(self.n_envs)[indices] if isinstance(indices, slice) else np.asarray(indices).tolist()
        return self._read(self._layout, indices, rows)

    def _read(self, node: Node, indices: Any, rows: Sequence[int]) -> Any:
        kind, content = node
        if kind == "array":  # a slice gives a view: copy it (fancy indexing copies already)
            return self.arrays[content][indices].copy() if isinstance(indices, slice) else self.arrays[content][indices]
        if kind == "object":
            values = self.objects[content]
            return tuple(values[i] for i in rows)
        if kind == "dict":
            return {key: self._read(child, indices, rows) for key, child in content}
        return tuple(self._read(child, indices, rows) for child in content)

    def item(self, i: int) -> Any:
        """Row ``i`` as one value of the space (a copy of the arrays: the row is rewritten later)."""
        if self._plain is not None:
            return self._plain[i].copy() if self._copy_item else self._plain[i]
        return self._item(self._layout, i)

    def _item(self, node: Node, i: int) -> Any:
        kind, content = node
        if kind == "array":
            return self.arrays[content][i].copy()
        if kind == "object":
            return self.objects[content][i]
        if kind == "dict":
            return {key: self._item(child, i) for key, child in content}
        return tuple(self._item(child, i) for child in content)

    def row(self, batch: Any, k: int) -> Any:
        """Value ``k`` of a batch that :meth:`read` returned."""
        if self._plain is not None:
            return batch[k]
        return _row(self._layout, batch, k)

    def with_row(self, batch: Any, k: int, value: Any) -> Any:
        """``batch`` (from :meth:`read`) with value ``k`` replaced by ``value``: the same arrays and dicts, written
        in place, and new tuples."""
        if self._plain is not None:
            batch[k] = value
            return batch
        return _with_row(self._layout, batch, k, value)

    def with_stored_objects(self, value: Any, i: int) -> Any:
        """``value`` with each of its object leaves replaced by the one stored for env ``i`` (its arrays kept)."""
        return _with_objects(self._layout, value, self.objects, i)

    def take_objects(self, ids: Sequence[int] | None = None) -> dict[int, dict[Path, Any]]:
        """The object values written since they were last taken, per env (``track_objects``), of the envs ``ids``
        (default: all): what a host sends with its reply, and the pool with a step."""
        if not self._written:
            return {}
        if ids is None:
            written, self._written = self._written, {}
            return written
        return {i: self._written.pop(i) for i in ids if i in self._written}

    def put_objects(self, i: int, values: dict[Path, Any]) -> None:
        """Store env ``i``'s object values that its host sent (:meth:`take_objects`)."""
        for path, value in values.items():
            self.objects[path][i] = value


def _row(node: Node, batch: Any, k: int) -> Any:
    kind, content = node
    if kind in ("array", "object"):
        return batch[k]
    if kind == "dict":
        return {key: _row(child, batch[key], k) for key, child in content}
    return tuple(_row(child, batch[j], k) for j, child in enumerate(content))


def _with_objects(node: Node, value: Any, objects: dict[Path, list[Any]], i: int) -> Any:
    kind, content = node
    if kind == "object":
        return objects[content][i]
    if kind == "array":
        return value
    if kind == "dict":
        return {key: _with_objects(child, value[key], objects, i) for key, child in content}
    return tuple(_with_objects(child, value[k], objects, i) for k, child in enumerate(content))


def _with_row(node: Node, batch: Any, k: int, value: Any) -> Any:
    kind, content = node
    if kind == "array":
        batch[k] = value
        return batch
    if kind == "object":
        return (*batch[:k], value, *batch[k + 1 :])
    if kind == "dict":
        for key, child in content:
            batch[key] = _with_row(child, batch[key], k, value[key])
        return batch
    return tuple(_with_row(child, batch[j], k, value[j]) for j, child in enumerate(content))


class SharedBuffers:
    """Every env's observation, action, reward and end flags, in one shared mapping of an anonymous file.

    :param observation_space: the observation space of one env
    :param action_space: the action space of one env
    :param n_envs: number of envs (rows)
    :param fd: an existing mapping's file descriptor (in a host); None creates one
    :param track_objects: record the values of the observations' object leaves that the envs write, for the host
        process to send them (:meth:`SpaceArrays.take_objects`)
    :param track_actions: record the values of the actions' object leaves written, for the pool to send them to the
        hosts with the step
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        n_envs: int,
        fd: int | None = None,
        track_objects: bool = False,
        track_actions: bool = False,
    ):
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

        self.obs = SpaceArrays(observation_space, arrays("obs"), n_envs, track_objects)
        self.actions = SpaceArrays(action_space, arrays("actions"), n_envs, track_actions)
        scalars = arrays("scalars")
        self.rewards, self.terminated, self.truncated = scalars["rewards"], scalars["terminated"], scalars["truncated"]
        #: ``(rewards, terminated, truncated)``, in that order
        self.scalars = (self.rewards, self.terminated, self.truncated)

    def close(self) -> None:
        """Close this side's descriptor; the memory goes once every process has unmapped it."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
