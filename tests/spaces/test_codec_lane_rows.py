"""Rows cut from one array (``unstack_rows``) stack back to that array, and only while the
list still holds exactly those rows: the same bytes, values and errors as the lane path."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from trio_rlmesh import CodecError
from trio_rlmesh.spaces import (
    Box,
    Dict,
    Discrete,
    DType,
    MultiBinary,
    MultiDiscrete,
    Space,
    encode_lanes,
    stack_lanes,
    unstack,
)
from trio_rlmesh.spaces._internal import LaneRows, carry_lanes, unstack_rows

FLOAT_BOX = Box.from_bounds(-1.0, 1.0, (3,), DType.FLOAT32)
CASES: list[tuple[Space, Any]] = [
    (FLOAT_BOX, np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)),
    (FLOAT_BOX, np.linspace(-1, 1, 12).reshape(4, 3)),  # float64, converted on stacking
    (FLOAT_BOX, np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4).T),  # not C-ordered
    (Discrete(3), np.array([0, 2, 1, 2])),
    (Discrete(5, dtype=DType.INT32), np.array([4.0, 0.0, 1.0, 3.0])),
    (MultiBinary((2,)), np.array([[1, 0], [0, 1], [1, 1], [0, 0]], np.int8)),
    (MultiDiscrete([3, 4]), np.array([[2, 3], [0, 0], [1, 2], [2, 1]])),
]


@pytest.mark.parametrize(("space", "batch"), CASES)
def test_rows_stack_encode_and_carry_like_plain_lanes(space: Space, batch: Any) -> None:
    rows = unstack_rows(space, batch, 4)
    assert type(rows) is LaneRows
    plain = list(unstack(space, batch, 4))
    assert [np.asarray(r).tolist() for r in rows] == [np.asarray(r).tolist() for r in plain]
    assert encode_lanes(space, rows) == encode_lanes(space, plain)
    stacked, expected = stack_lanes(space, rows), stack_lanes(space, plain)
    assert stacked.dtype == expected.dtype
    assert stacked.tolist() == expected.tolist()
    assert not np.shares_memory(stacked, batch)  # copy=True copies, as np.stack does
    carried = carry_lanes(space, rows)
    assert carried.tolist() == carry_lanes(space, plain).tolist()
    assert not carried.flags.writeable


def test_a_changed_list_is_stacked_lane_by_lane() -> None:
    batch = np.array([0, 1, 2, 1])
    space = Discrete(3)
    rows = unstack_rows(space, batch, 4)
    assert rows.source() is batch
    rows[2] = np.int64(0)
    assert rows.source() is None
    assert stack_lanes(space, rows).tolist() == [0, 1, 0, 1]
    rows[2] = np.int64(7)  # out of the domain: the lane path's error
    with pytest.raises(CodecError) as caught:
        encode_lanes(space, rows)
    with pytest.raises(CodecError) as plain:
        encode_lanes(space, list(rows))
    assert str(caught.value) == str(plain.value)
    grown = unstack_rows(space, batch, 4)
    grown.append(np.int64(1))
    assert grown.source() is None
    assert stack_lanes(space, grown).tolist() == [0, 1, 2, 1, 1]


def test_out_of_domain_rows_fail_as_plain_lanes_do() -> None:
    space = Discrete(3)
    rows = unstack_rows(space, np.array([0, 5, 1]), 3)
    with pytest.raises(CodecError) as caught:
        encode_lanes(space, rows)
    with pytest.raises(CodecError) as plain:
        encode_lanes(space, list(rows))
    assert str(caught.value) == str(plain.value)


def test_wrong_shape_is_refused_and_other_spaces_get_plain_lists() -> None:
    with pytest.raises(CodecError):
        unstack_rows(Discrete(3), np.array([0, 1]), 3)
    one = unstack_rows(Discrete(3), np.array([2]), 1)
    assert type(one) is list
    nested = Dict({"a": Discrete(2)})
    assert type(unstack_rows(nested, {"a": np.array([0, 1])}, 2)) is list
