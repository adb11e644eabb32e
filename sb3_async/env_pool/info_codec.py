"""Step infos from a host process to the pool without pickling, when they are flat dicts of scalars.

Most envs return the same keys with numbers at every step (MuJoCo's ``x_position``, ``reward_ctrl``...; Atari's
``lives``, ``frame_number``). Pickling numpy scalars costs far more than stepping a small env does (each one pickles its
dtype), and sits on the critical path of every synchronous step. Such a batch of infos has a *schema*: which envs, their
keys and the exact type of each value. The host announces a schema once (pickled, with the infos of that step); after
that, a step with the same schema travels as the schema's number and the values packed with :mod:`struct`, and the
pool rebuilds dicts with values of the same types (``np.float32`` stays ``np.float32``, ``int`` stays ``int``).

Everything else (episode ends with their final observation, nested values, strings, a batch with too many different
schemas) is pickled, as before. This module does not import torch.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

__all__ = ["MAX_SCHEMAS", "PACKED", "InfoPacker", "InfoUnpacker"]

#: First byte of a packed step reply (a pickle starts with b"\x80", an empty reply is b"")
PACKED = b"P"
#: Schemas a host announces at most; past them, new ones are pickled (an env whose info keys vary without bound)
MAX_SCHEMAS = 256

#: Exact type of a value -> its struct code. Types only: a subclass (an enum of int, say) is pickled, as it must be
_CODES: dict[type, str] = {
    float: "d",
    int: "q",
    bool: "?",
    np.float64: "d",
    np.float32: "f",
    np.float16: "e",
    np.int64: "q",
    np.int32: "i",
    np.int16: "h",
    np.int8: "b",
    np.uint64: "Q",
    np.uint32: "I",
    np.uint16: "H",
    np.uint8: "B",
    np.bool_: "?",
}
_HEADER = struct.Struct("=I")

#: A schema: ((env id, keys, value types), ...) in the order of the batch
Schema = tuple[tuple[int, tuple[str, ...], tuple[type, ...]], ...]


def schema_of(infos: dict[int, dict[str, Any]]) -> Schema | None:
    """The schema of a batch of infos, or None when one of its values cannot be packed."""
    schema = []
    for i, info in infos.items():
        types = tuple(map(type, info.values()))
        for kind in types:
            if kind not in _CODES:
                return None
        schema.append((i, tuple(info), types))
    return tuple(schema)


class InfoPacker:
    """The host's side: packs a batch of infos whose schema is known, else says it must be pickled."""

    def __init__(self) -> None:
        self._known: dict[Schema, tuple[int, struct.Struct]] = {}

    def pack(self, infos: dict[int, dict[str, Any]]) -> bytes | tuple[int, Schema] | None:
        """``infos`` as bytes (:data:`PACKED`, the schema's number, the values), or ``(number, schema)``: a schema to
        announce with these infos pickled, or None: pickle them (not packable, or too many schemas)."""
        schema = schema_of(infos)
        if schema is None:
            return None
        known = self._known.get(schema)
        if known is None:
            if len(self._known) >= MAX_SCHEMAS:
                return None
            codes = "".join(_CODES[kind] for _, _, types in schema for kind in types)
            number = len(self._known)
            layout = struct.Struct("=" + codes)
            try:  # a Python int beyond 64 bits cannot be packed: such a schema is never announced
                layout.pack(*[value for info in infos.values() for value in info.values()])
            except (struct.error, OverflowError):
                return None
            self._known[schema] = (number, layout)
            return number, schema
        number, layout = known
        try:
            return PACKED + _HEADER.pack(number) + layout.pack(*[value for info in infos.values() for value in info.values()])
        except (struct.error, OverflowError):  # an int of this step beyond the schema's range: pickled this once
            return None


class InfoUnpacker:
    """The pool's side, one per host: learns the schemas the host announces, rebuilds the packed infos."""

    def __init__(self) -> None:
        self._schemas: dict[int, tuple[Schema, struct.Struct]] = {}

    def learn(self, number: int, schema: Schema) -> None:
        codes = "".join(_CODES[kind] for _, _, types in schema for kind in types)
        self._schemas[number] = (schema, struct.Struct("=" + codes))

    def unpack(self, data: bytes) -> dict[int, dict[str, Any]]:
        """The infos of a packed reply (``data`` starts with :data:`PACKED`)."""
        (number,) = _HEADER.unpack_from(data, 1)
        schema, layout = self._schemas[number]
        values = iter(layout.unpack_from(data, 1 + _HEADER.size))
        return {i: {key: kind(next(values)) for key, kind in zip(keys, types)} for i, keys, types in schema}
