"""The one-lane shortcuts of the codec give the bytes, values and errors of the batch path."""

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
    Tuple,
    decode_batch,
    decode_lanes,
    encode_batch,
    encode_lanes,
    encode_value,
    stack_lanes,
    unstack,
)
from trio_rlmesh.spaces._codec import _min_max

FLOAT_BOX = Box.from_bounds(-1.0, 1.0, (4,), DType.FLOAT32)
CASES: list[tuple[Space, Any]] = [
    (FLOAT_BOX, np.array([0.5, -0.5, 0.25, 1.0], np.float32)),
    (FLOAT_BOX, [0.5, -0.5, 0.25, 1.0]),  # float64 list, converted
    (Box.from_bounds(0, 255, (2, 2), DType.UINT8), np.array([[1, 2], [3, 4]])),
    (Discrete(3), np.int64(2)),
    (Discrete(3, start=-1), -1),
    (Discrete(5, dtype=DType.INT32), np.float64(4.0)),
    (MultiBinary((3,)), np.array([1, 0, 1], np.int8)),
    (MultiDiscrete([3, 4]), np.array([2, 3])),
    (Dict({"a": Discrete(2), "b": FLOAT_BOX}), {"a": 1, "b": np.zeros(4, np.float32)}),
    (Tuple((Discrete(2), MultiBinary((2,)))), (np.int64(0), np.array([1, 1], np.int8))),
]


@pytest.mark.parametrize(("space", "value"), CASES)
def test_one_lane_encodes_like_a_batch_of_one(space: Space, value: Any) -> None:
    leaves = encode_lanes(space, [value])
    assert leaves == encode_batch(space, stack_lanes(space, [value]), 1)
    assert encode_value(space, value) == leaves
    (decoded,) = decode_lanes(space, leaves, 1)
    (expected,) = unstack(space, decode_batch(space, leaves, 1), 1)
    assert repr(decoded) == repr(expected)


def _error(call: Any) -> tuple[str, str | None]:
    with pytest.raises(CodecError) as caught:
        call()
    return str(caught.value), caught.value.path


@pytest.mark.parametrize(
    ("space", "value"),
    [
        (FLOAT_BOX, np.zeros(3, np.float32)),  # wrong shape
        (Discrete(3), np.int64(3)),  # outside the domain
        (Discrete(3, start=-1), -2),
        (Discrete(3), 1.5),  # not a whole number
        (Discrete(3), np.float64(np.nan)),
        (Box.from_bounds(0, 255, (1,), DType.UINT8), np.array([300])),  # outside uint8
        (MultiBinary((2,)), np.array([0, 2], np.int8)),
        (MultiDiscrete([3, 4]), np.array([1, 4])),
        (Discrete(3), "left"),
    ],
)
def test_one_lane_errors_match_the_batch_path(space: Space, value: Any) -> None:
    message, path = _error(lambda: encode_lanes(space, [value]))
    assert "lane 0" in message or "numeric" in message
    expected = _error(lambda: encode_batch(space, stack_lanes(space, [value]), 1))
    if "shape" in message:  # stack_lanes itself refuses it, with the same words
        expected = _error(lambda: stack_lanes(space, [value]))
    assert (message, path) == expected


def test_stack_lanes_still_returns_a_fresh_batch() -> None:
    lane = np.array([0.5, 0.5, 0.5, 0.5], np.float32)
    batch = stack_lanes(FLOAT_BOX, [lane])
    batch[0, 0] = 0.0
    assert lane[0] == 0.5


def test_decoded_lanes_are_rows_of_the_decoded_batch() -> None:
    leaves = encode_batch(Discrete(4), np.array([3, 1, 0]), 3)
    lanes = decode_lanes(Discrete(4), leaves, 3)
    assert [type(v) for v in lanes] == [np.int64] * 3
    assert [int(v) for v in lanes] == [3, 1, 0]


@pytest.mark.parametrize(
    "array",
    [
        np.array([5]),
        np.array([-3.5, 2.25, 7.0]),
        np.array([np.iinfo(np.uint64).max, 0], np.uint64),
        np.array([np.iinfo(np.int64).min, np.iinfo(np.int64).max], np.int64),
        np.arange(40).reshape(2, 20),
        np.array([[True, False]]),
    ],
)
def test_min_max_scans_small_arrays_exactly_like_numpy(array: Any) -> None:
    assert _min_max(array) == (int(array.min()), int(array.max()))
