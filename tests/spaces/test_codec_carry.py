"""Carried values: ``carry_batch`` is ``decode_batch(encode_batch(...))`` without the bytes,
and a ``CarriedValue`` behaves as the ``SpaceValue`` of its leaves."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trio_rlmesh import CodecError
from trio_rlmesh.protocol import spaces_v1
from trio_rlmesh.protocol._internal import CarriedValue, carried_batch
from trio_rlmesh.spaces import (
    Box,
    Discrete,
    DType,
    MultiBinary,
    Space,
    Text,
    decode_batch,
    encode_batch,
    encode_lanes,
    unstack,
)
from trio_rlmesh.spaces._internal import carry_batch, carry_lanes

from .catalogue import CATALOGUE, NESTED, assert_same, values_for

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def assert_carried(expected: Any, actual: Any) -> None:
    """``assert_same``, plus the container types and read-only arrays a decode gives."""
    assert_same(expected, actual)
    assert type(actual) is type(expected)
    if isinstance(expected, np.ndarray):
        assert not actual.flags.writeable
    elif isinstance(expected, Mapping):
        for key in expected:
            assert_carried(expected[key], actual[key])
    elif isinstance(expected, tuple):
        for want, got in zip(expected, actual, strict=True):
            assert_carried(want, got)


def _arrays(value: Any) -> list[np.ndarray]:
    if isinstance(value, np.ndarray):
        return [value]
    if isinstance(value, Mapping):
        return [a for item in value.values() for a in _arrays(item)]
    if isinstance(value, tuple | list):
        return [a for item in value for a in _arrays(item)]
    return []


@pytest.mark.parametrize("space", CATALOGUE)
@SETTINGS
@given(data=st.data())
def test_carry_batch_is_the_round_trip(space: Space, data: st.DataObject) -> None:
    n = data.draw(st.integers(0, 6), label="n")
    value = data.draw(values_for(space, n), label="value")
    carried = carry_batch(space, value, n)
    assert_carried(decode_batch(space, encode_batch(space, value, n), n), carried)
    # A snapshot: nothing the caller still holds shares memory with it.
    for mine in _arrays(carried):
        assert not any(np.shares_memory(mine, theirs) for theirs in _arrays(value))
    # And its bytes are the value's.
    assert CarriedValue(space, carried, n).leaves == encode_batch(space, value, n)


@pytest.mark.parametrize("space", CATALOGUE)
@SETTINGS
@given(data=st.data())
def test_carry_lanes_is_the_lanes_round_trip(space: Space, data: st.DataObject) -> None:
    n = data.draw(st.integers(1, 6), label="n")
    lanes = unstack(space, data.draw(values_for(space, n), label="batch"), n)
    assert_carried(decode_batch(space, encode_lanes(space, lanes), n), carry_lanes(space, lanes))


@pytest.mark.parametrize(
    ("space", "value", "n"),
    [
        pytest.param(Box.from_bounds(-1.0, 1.0, (2,), DType.FLOAT32), [0.5, 2.0], 2, id="shape"),
        pytest.param(Discrete(3), [3], 1, id="discrete-domain"),
        pytest.param(Discrete(3, dtype=DType.UINT8), [1.5], 1, id="fractional-int"),
        pytest.param(MultiBinary((2,), DType.UINT8), [[0, 2]], 1, id="multibinary-domain"),
        pytest.param(Text(4), ["a\ud800"], 1, id="text-surrogate"),
        pytest.param(NESTED, {"id": [0]}, 1, id="dict-keys"),
    ],
)
def test_carry_refuses_what_encode_refuses(space: Space, value: Any, n: int) -> None:
    with pytest.raises(CodecError) as encoded:
        encode_batch(space, value, n)
    with pytest.raises(CodecError) as carried:
        carry_batch(space, value, n)
    assert str(carried.value) == str(encoded.value)


def test_carry_converts_like_encode() -> None:
    space = Box.from_bounds(-10.0, 10.0, (3,), DType.FLOAT32)
    source = np.array([[1.0, 2.5, -3.0]])  # float64, writable
    carried = carry_batch(space, source, 1)
    assert carried.dtype == np.float32
    source[0, 0] = 9.0
    assert carried[0, 0] == 1.0


def test_carried_value_is_the_space_value_of_its_leaves() -> None:
    space = Discrete(4)
    value = CarriedValue(space, carry_batch(space, [3, 1], 2), 2)
    plain = spaces_v1.SpaceValue(leaves=encode_batch(space, [3, 1], 2))
    assert value.leaves == plain.leaves
    assert value == plain
    assert value.leaves is value.leaves  # encoded once
    assert bytes(value) == bytes(plain)
    for clone in (pickle.loads(pickle.dumps(value)), copy.copy(value), copy.deepcopy(value)):
        assert type(clone) is spaces_v1.SpaceValue
        assert clone == plain
    assert type(value.plain()) is spaces_v1.SpaceValue


def test_carried_batch_only_for_its_space_and_lane_count() -> None:
    space = Box.from_bounds(-1.0, 1.0, (2,), DType.FLOAT32)
    batch = carry_batch(space, [[0.5, -0.5]], 1)
    value = CarriedValue(space, batch, 1)
    assert carried_batch(value, space, 1) is batch
    # An equal space (a contract decoded again) is the same space.
    twin = Box.from_bounds(-1.0, 1.0, (2,), DType.FLOAT32)
    assert carried_batch(value, twin, 1) is batch
    assert carried_batch(value, space, 2) is None
    assert carried_batch(value, Box.from_bounds(-2.0, 2.0, (2,), DType.FLOAT32), 1) is None
    assert carried_batch(value.plain(), space, 1) is None
    assert carried_batch(None, space, 1) is None


@pytest.mark.parametrize(
    ("space", "lane"),
    [
        pytest.param(Discrete(3), 2, id="python-int"),
        pytest.param(Discrete(3), np.int32(1), id="numpy-int32"),
        pytest.param(Box.from_bounds(-1.0, 1.0, (2,), DType.FLOAT32), [0.5, 2.0], id="list"),
        pytest.param(Box.from_bounds(-1.0, 1.0, (2,), DType.FLOAT32), np.ones(2), id="float64"),
    ],
)
def test_one_lane_converts_like_encode_lanes(space: Space, lane: Any) -> None:
    assert_carried(decode_batch(space, encode_lanes(space, [lane]), 1), carry_lanes(space, [lane]))


@pytest.mark.parametrize(
    ("space", "lane"),
    [
        pytest.param(Discrete(3), 3, id="domain"),
        pytest.param(Discrete(3), [1], id="shape"),
        pytest.param(Discrete(3, dtype=DType.UINT8), 1.5, id="fractional"),
    ],
)
def test_one_lane_refuses_what_encode_lanes_refuses(space: Space, lane: Any) -> None:
    with pytest.raises(CodecError) as encoded:
        encode_lanes(space, [lane])
    with pytest.raises(CodecError) as carried:
        carry_lanes(space, [lane])
    assert str(carried.value) == str(encoded.value)
