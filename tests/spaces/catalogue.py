"""One shared catalogue of spaces every spaces test parametrizes over, and value strategies."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import numpy as np
import pytest
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

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

inf = np.inf

BOX_F32_UNIFORM = Box.from_bounds(-1.0, 1.0, (2, 3), DType.FLOAT32)

SPEC_EXAMPLE = Dict(
    {
        "a": Tuple([Discrete(4), Text(6)]),
        "b": Box.from_bounds(-inf, inf, (2,), DType.FLOAT32),
    }
)
"""The observation of spec §8.1, keys as a Python peer emits them (sorted)."""

NESTED = Dict(
    {
        "obs": Tuple(
            [
                Dict(
                    {
                        "pos": Box.from_bounds([-1.0, -2.0], [1.0, 2.0], None, DType.FLOAT32),
                        "tag": Text(3, charset="xyz"),
                    }
                ),
                MultiBinary((2, 2)),
            ]
        ),
        "id": Discrete(3, start=-1),
    }
)
"""Three levels deep: Dict -> Tuple -> Dict -> leaves."""

_BOXES = [
    pytest.param(Box.from_bounds(-inf, inf, (3,), DType.FLOAT32), id="box-f32-unbounded"),
    pytest.param(BOX_F32_UNIFORM, id="box-f32-uniform"),
    pytest.param(
        Box.from_bounds([-1.0, -2.0, -3.0], [1.0, 2.0, 3.0], None, DType.FLOAT32),
        id="box-f32-elementwise",
    ),
    pytest.param(Box.from_bounds(0.0, inf, (2,), DType.FLOAT32), id="box-f32-half-open"),
    pytest.param(
        Box.from_bounds([-inf, 0.0], [0.0, inf], None, DType.FLOAT64),
        id="box-f64-half-open-elementwise",
    ),
    pytest.param(
        Box.from_bounds([0.0, 1.0], [10.0, 1e6], None, DType.FLOAT64), id="box-f64-elementwise"
    ),
    pytest.param(Box.from_bounds(-inf, inf, (2, 2), DType.FLOAT16), id="box-f16-unbounded"),
    pytest.param(Box.from_bounds(-2.0, 2.0, (3,), DType.FLOAT16), id="box-f16-uniform"),
    pytest.param(Box.from_bounds(False, True, (4,), DType.BOOL), id="box-bool"),
    pytest.param(Box.from_bounds(0, 255, (4, 4, 3), DType.UINT8), id="box-u8-image"),
    pytest.param(Box.from_bounds(0, 1000, (2,), DType.UINT16), id="box-u16"),
    pytest.param(
        Box.from_bounds([0, 5], [7, 2**32 - 1], None, DType.UINT32), id="box-u32-elementwise"
    ),
    pytest.param(Box.from_bounds(0, 2**64 - 1, (2,), DType.UINT64), id="box-u64-full"),
    pytest.param(Box.from_bounds(-128, 127, (3,), DType.INT8), id="box-i8"),
    pytest.param(
        Box.from_bounds([-5, -300], [5, 300], None, DType.INT16), id="box-i16-elementwise"
    ),
    pytest.param(Box.from_bounds(-inf, inf, (2,), DType.INT32), id="box-i32-inf-to-limits"),
    pytest.param(Box.from_bounds(-(2**63), 2**63 - 1, (1,), DType.INT64), id="box-i64-full"),
]

_FUNDAMENTALS = [
    pytest.param(Discrete(5), id="discrete"),
    pytest.param(Discrete(3, start=-1), id="discrete-negative-start"),
    pytest.param(Discrete(4, start=10, dtype=DType.INT32), id="discrete-i32"),
    pytest.param(Discrete(7, dtype=DType.UINT8), id="discrete-u8"),
    pytest.param(MultiBinary((5,)), id="multibinary"),
    pytest.param(MultiBinary((2, 3)), id="multibinary-2d"),
    pytest.param(MultiBinary((3,), DType.BOOL), id="multibinary-bool"),
    pytest.param(MultiBinary((2,), DType.INT8), id="multibinary-i8"),
    pytest.param(MultiDiscrete([3, 4, 5]), id="multidiscrete"),
    pytest.param(MultiDiscrete([[2, 3], [4, 5]]), id="multidiscrete-2d"),
    pytest.param(MultiDiscrete([2, 256], DType.UINT8), id="multidiscrete-u8-edge"),
    pytest.param(MultiDiscrete([7, 9], DType.INT32), id="multidiscrete-i32"),
    pytest.param(Text(8), id="text"),
    pytest.param(Text(5, min_length=2, charset="abc"), id="text-charset"),
    pytest.param(Text(4, charset="héλ✓"), id="text-unicode-charset"),
]

_COMPOSITES = [
    pytest.param(
        Dict({"b": Box.from_bounds(0.0, 1.0, (2,), DType.FLOAT32), "a": Discrete(4)}),
        id="dict-declared-order",
    ),
    pytest.param(Dict({"two words": Text(3), "x": MultiBinary((1,))}), id="dict-odd-key"),
    pytest.param(SPEC_EXAMPLE, id="dict-spec-example"),
    pytest.param(Tuple([Discrete(2), Text(4), BOX_F32_UNIFORM]), id="tuple"),
    pytest.param(NESTED, id="nested-3-levels"),
    pytest.param(Dict({}), id="dict-empty"),
    pytest.param(Tuple([]), id="tuple-empty"),
    pytest.param(Dict({"empty": Tuple([]), "x": Discrete(2)}), id="dict-with-empty-tuple"),
]

CATALOGUE = _BOXES + _FUNDAMENTALS + _COMPOSITES
"""Every space kind and all twelve Box dtypes, as ``pytest.param(space, id=...)``."""


def catalogue_spaces() -> list[Space]:
    """The catalogue's spaces without the pytest wrappers."""
    return [param.values[0] for param in CATALOGUE]  # type: ignore[misc]


_FLOAT_WIDTHS: dict[DType, Literal[16, 32, 64]] = {
    DType.FLOAT16: 16,
    DType.FLOAT32: 32,
    DType.FLOAT64: 64,
}


def _box_values(space: Box, n: int) -> st.SearchStrategy[Any]:
    np_dtype = space.dtype.numpy_dtype
    shape = (n, *space.shape)
    if space.dtype is DType.BOOL:
        elements: st.SearchStrategy[Any] = st.booleans()
    elif space.dtype.is_float:
        low, high = float(space.low.min()), float(space.high.max())
        elements = st.floats(
            min_value=low if np.isfinite(low) else None,
            max_value=high if np.isfinite(high) else None,
            width=_FLOAT_WIDTHS[space.dtype],
            allow_nan=False,
            allow_infinity=False,
        )
    else:
        elements = st.integers(int(space.low.min()), int(space.high.max()))
    arrays = hnp.arrays(np_dtype, shape, elements=elements)
    # Element-wise bounds: pull each element inside its own bounds.
    return arrays.map(lambda a: np.minimum(np.maximum(a, space.low), space.high).astype(np_dtype))


def values_for(space: Space, n: int) -> st.SearchStrategy[Any]:
    """Valid batched values of ``n`` lanes for ``space``, in the declared dtypes."""
    if isinstance(space, Box):
        return _box_values(space, n)
    if isinstance(space, Discrete):
        return hnp.arrays(
            space.dtype.numpy_dtype,
            (n,),
            elements=st.integers(space.start, space.start + space.n - 1),
        )
    if isinstance(space, MultiBinary):
        elements = st.booleans() if space.dtype is DType.BOOL else st.integers(0, 1)
        return hnp.arrays(space.dtype.numpy_dtype, (n, *space.shape), elements=elements)
    if isinstance(space, MultiDiscrete):
        np_dtype = space.dtype.numpy_dtype
        raw = hnp.arrays(
            np_dtype, (n, *space.shape), elements=st.integers(0, int(space.nvec.max()) - 1)
        )
        return raw.map(lambda a: (a % space.nvec).astype(np_dtype))
    if isinstance(space, Text):
        alphabet = space.charset or st.characters(codec="utf-8")
        text = st.text(alphabet, min_size=space.min_length, max_size=space.max_length)
        return st.lists(text, min_size=n, max_size=n).map(tuple)
    if isinstance(space, Dict):
        keys = space.keys()
        children = st.tuples(*(values_for(child, n) for child in space.values()))
        return children.map(lambda values: dict(zip(keys, values, strict=True)))
    if isinstance(space, Tuple):
        return st.tuples(*(values_for(child, n) for child in space.spaces))
    raise TypeError(space)


def assert_same(expected: Any, actual: Any) -> None:
    """Exact equality of (batched or lane) values: same types, dtypes, shapes and bytes."""
    if isinstance(expected, np.ndarray | np.generic):
        assert isinstance(actual, np.ndarray | np.generic), type(actual)
        assert actual.dtype == expected.dtype
        assert actual.shape == expected.shape
        assert np.array_equal(actual, expected)
        assert np.asarray(actual).tobytes() == np.asarray(expected).tobytes()
    elif isinstance(expected, Mapping):
        assert isinstance(actual, dict)
        assert list(actual) == list(expected)
        for key in expected:
            assert_same(expected[key], actual[key])
    elif isinstance(expected, tuple | list):
        assert isinstance(actual, tuple | list)
        assert len(actual) == len(expected)
        for want, got in zip(expected, actual, strict=True):
            assert_same(want, got)
    else:
        assert type(actual) is type(expected)
        assert actual == expected
