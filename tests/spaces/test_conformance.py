from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_rlmesh.spaces import (
    Box,
    Dict,
    Discrete,
    DType,
    MultiBinary,
    MultiDiscrete,
    Space,
    Text,
    Tuple,
)
from trio_rlmesh.spaces._conformance import Deviation, check_batch

from .catalogue import CATALOGUE, NESTED, values_for

inf = np.inf


@pytest.mark.parametrize("space", CATALOGUE)
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_valid_values_conform(space: Space, data: st.DataObject) -> None:
    n = data.draw(st.integers(1, 5), label="n")
    assert check_batch(space, data.draw(values_for(space, n)), n) == []


def _kinds(space: Space, batch: Any, n: int = 1) -> list[tuple[str, str]]:
    return [(d.kind, d.path) for d in check_batch(space, batch, n)]


BOX = Box.from_bounds([-1.0, 0.0], [1.0, inf], None, DType.FLOAT32)


def test_box_range() -> None:
    deviations = check_batch(BOX, np.array([[0.0, 5.0], [2.0, -1.0], [3.0, 0.0]]), 3)
    assert deviations == [
        Deviation(
            "range",
            "$",
            "3 value(s) outside the Box bounds; first: lane 1 element (0,) = 2.0 beyond high 1.0",
        )
    ]
    assert _kinds(BOX, [[-2.0, 0.0]]) == [("range", "$")]
    assert check_batch(BOX, [[-1.0, 1e30]], 1) == []


@pytest.mark.parametrize("n", [1, 3])
def test_small_box_batches_of_the_declared_dtype_are_checked_element_by_element(n: int) -> None:
    # Batches of the Box's own dtype with few elements take the scan in Python; it must
    # judge every lane's every element against that element's bounds, as numpy would.
    inside = np.tile(np.array([[-1.0, 0.0]], np.float32), (n, 1))
    assert check_batch(BOX, inside, n) == []
    for lane in range(n):
        for element, value in ((0, 1.5), (0, -1.5), (1, -0.5)):
            batch = inside.copy()
            batch[lane, element] = value
            assert _kinds(BOX, batch, n) == [("range", "$")], (lane, element, value)
    batch = inside.copy()
    batch[n - 1, 1] = np.nan
    assert _kinds(BOX, batch, n) == [("structural", "$")]
    space = Box.from_bounds(0, 10, (2,), DType.UINT8)
    assert check_batch(space, np.array([[0, 10]] * n, np.uint8), n) == []
    assert _kinds(space, np.array([[0, 10]] * (n - 1) + [[11, 0]], np.uint8), n) == [("range", "$")]


def test_box_nan_is_structural() -> None:
    (deviation,) = check_batch(BOX, [[np.nan, 0.0]], 1)
    assert (deviation.kind, deviation.path) == ("structural", "$")
    assert "NaN" in deviation.detail


def test_box_shape_is_structural() -> None:
    (deviation,) = check_batch(BOX, np.zeros((2, 3)), 2)
    assert deviation.kind == "structural"
    assert "expected shape (2, 2), got (2, 3)" in deviation.detail
    assert _kinds(BOX, np.zeros((1, 2)), 2) == [("structural", "$")]
    assert _kinds(BOX, [["a", "b"]]) == [("structural", "$")]
    assert _kinds(BOX, [[1.0], [1.0, 2.0]], 2) == [("structural", "$")]


def test_integer_box_range() -> None:
    space = Box.from_bounds(0, 10, (2,), DType.UINT8)
    assert _kinds(space, [[0, 11]]) == [("range", "$")]
    assert check_batch(space, [[0, 10]], 1) == []


def test_discrete_domain_is_structural() -> None:
    space = Discrete(3, start=-1)
    assert check_batch(space, [-1, 0, 1], 3) == []
    assert _kinds(space, [2]) == [("structural", "$")]
    assert _kinds(space, [-2]) == [("structural", "$")]
    assert _kinds(space, [0.5]) == [("structural", "$")]
    assert _kinds(space, [0, 1]) == [("structural", "$")]


def test_multidiscrete_and_multibinary_domains() -> None:
    assert _kinds(MultiDiscrete([2, 3]), [[1, 3]]) == [("structural", "$")]
    assert _kinds(MultiDiscrete([2, 3]), [[-1, 0]]) == [("structural", "$")]
    assert check_batch(MultiDiscrete([2, 3]), [[1, 2]], 1) == []
    assert _kinds(MultiBinary((2,)), [[0, 2]]) == [("structural", "$")]
    assert check_batch(MultiBinary((2,)), [[True, False]], 1) == []


def test_text_length_and_charset_are_range() -> None:
    space = Text(3, min_length=2, charset="ab")
    assert check_batch(space, ["ab", "bab"], 2) == []
    (short,) = check_batch(space, ["ab", "a"], 2)
    assert (short.kind, short.detail) == ("range", "lane 1 has length 1, outside 2..3")
    (stray,) = check_batch(space, ["abc"], 1)
    assert (stray.kind, stray.detail) == ("range", "lane 0 has characters outside the charset: 'c'")
    assert check_batch(Text(3), ["\u00e9\u00e9\u00e9"], 1) == []


def test_text_structure() -> None:
    assert _kinds(Text(3), "abc") == [("structural", "$")]
    assert _kinds(Text(3), ["a", "b"]) == [("structural", "$")]
    assert _kinds(Text(3), [b"a"]) == [("structural", "$")]


def test_dict_keys_are_structural() -> None:
    space = Dict({"a": Discrete(2), "b": Text(3)})
    assert _kinds(space, {"a": [0]}) == [("structural", "$.b")]
    assert _kinds(space, {"a": [0], "b": ["x"], "c": 1}) == [("structural", "$")]
    assert _kinds(space, [0]) == [("structural", "$")]


def test_tuple_arity_is_structural() -> None:
    space = Tuple([Discrete(2), Text(3)])
    assert _kinds(space, ([0],)) == [("structural", "$")]
    assert _kinds(space, "ab") == [("structural", "$")]


def test_nested_paths_and_one_deviation_per_kind_and_path() -> None:
    batch = {
        "obs": (
            {"pos": np.array([[5.0, 5.0], [9.0, 0.0]]), "tag": ["xyzw", "q"]},
            np.array([[[0, 1], [1, 3]], [[0, 0], [0, 0]]]),
        ),
        "id": [-1, 7],
    }
    assert _kinds(NESTED, batch, 2) == [
        ("range", "$.obs[0].pos"),
        ("range", "$.obs[0].tag"),
        ("structural", "$.obs[1]"),
        ("structural", "$.id"),
    ]
    pos = check_batch(NESTED, batch, 2)[0]
    assert pos.detail.startswith("3 value(s) outside the Box bounds; first: lane 0 element (0,)")
