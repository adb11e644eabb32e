"""The packed transport of step infos (sb3_async.env_pool.info_codec): exact values and types back, a schema announced
once, everything it cannot pack left to pickle."""

from __future__ import annotations

import enum
import pickle

import numpy as np
import pytest

from sb3_async.env_pool.info_codec import MAX_SCHEMAS, PACKED, InfoPacker, InfoUnpacker
from tests.space_envs import assert_same, scalar_info


def send(packer: InfoPacker, unpacker: InfoUnpacker, infos: dict) -> tuple[str, dict]:
    """What an env host sends and the pool rebuilds (as ProcessHosts.receive does): ``(how, infos)``."""
    packed = packer.pack(infos)
    if isinstance(packed, bytes):
        assert packed[:1] == PACKED
        return "packed", unpacker.unpack(packed)
    if packed is None:
        return "pickled", pickle.loads(pickle.dumps(infos))
    number, schema = pickle.loads(pickle.dumps(packed))  # the schema travels pickled, with the infos
    unpacker.learn(number, schema)
    return "announced", pickle.loads(pickle.dumps(infos))


def test_every_scalar_type_comes_back_with_its_value_and_type():
    packer, unpacker = InfoPacker(), InfoUnpacker()
    infos = {0: scalar_info(1, -0.25, 0.5, 0), 3: scalar_info(1, 0.75, -1.5, 2)}
    assert send(packer, unpacker, infos)[0] == "announced"
    for _ in range(3):
        how, back = send(packer, unpacker, infos)
        assert how == "packed"
        assert_same(back, infos)
    changed = {0: scalar_info(2, 0.125, 3.0, 0), 3: scalar_info(2, -0.5, 1e-3, 2)}  # same schema, new values
    how, back = send(packer, unpacker, changed)
    assert how == "packed"
    assert_same(back, changed)


def test_a_new_schema_is_announced_once_each_then_packed():
    packer, unpacker = InfoPacker(), InfoUnpacker()
    a = {0: {"x": np.float64(1.0)}}
    b = {0: {"x": np.float64(1.0)}, 1: {"x": np.float64(2.0)}}  # another env reports
    c = {0: {"x": np.float32(1.0)}}  # another type
    d = {0: {"y": np.float64(1.0)}}  # another key
    hows = [send(packer, unpacker, infos)[0] for infos in (a, a, b, b, c, d, a, b, c, d)]
    assert hows == ["announced", "packed", "announced", "packed", "announced", "announced", *["packed"] * 4]
    for infos in (a, b, c, d):
        assert_same(send(packer, unpacker, infos)[1], infos)


class Color(enum.IntEnum):
    RED = 1


@pytest.mark.parametrize(
    "value",
    [np.zeros(2), "text", None, Color.RED, {"nested": 1.0}, [1.0], np.complex128(1j), 2**64, -(2**63) - 1],
    ids=repr,
)
def test_what_cannot_be_packed_is_pickled(value):
    packer, unpacker = InfoPacker(), InfoUnpacker()
    infos = {0: {"x": np.float64(1.0), "other": value}}
    for _ in range(2):
        how, back = send(packer, unpacker, infos)
        assert how == "pickled"
        assert type(back[0]["other"]) is type(value)


def test_an_int_beyond_the_schemas_range_is_pickled_that_step():
    packer, unpacker = InfoPacker(), InfoUnpacker()
    small, huge = {0: {"n": 5}}, {0: {"n": 2**70}}
    assert [send(packer, unpacker, infos)[0] for infos in (small, small, huge, small)] == [
        "announced",
        "packed",
        "pickled",
        "packed",
    ]
    assert send(packer, unpacker, huge)[1] == huge


def test_schemas_are_bounded():
    packer, unpacker = InfoPacker(), InfoUnpacker()
    for k in range(MAX_SCHEMAS):
        assert send(packer, unpacker, {0: {f"key{k}": 1.0}})[0] == "announced"
    assert send(packer, unpacker, {0: {"one too many": 1.0}})[0] == "pickled"
    assert send(packer, unpacker, {0: {"key7": 2.0}}) == ("packed", {0: {"key7": 2.0}})
