from __future__ import annotations

import pickle

import numpy as np
import pytest

from trio_rlmesh import SpaceError, SpecError
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
    validate,
)
from trio_rlmesh.spaces._dtypes import dtype_range, fits_dtype
from trio_rlmesh.spaces._spaces import iter_leaves, leaf_paths

from .catalogue import CATALOGUE, NESTED, SPEC_EXAMPLE

inf = np.inf

# --------------------------------------------------------------------------------------------
# DType


def test_dtype_wire_numbers() -> None:
    assert [(d.name, int(d)) for d in DType] == [
        ("UNSPECIFIED", 0),
        ("BOOL", 1),
        ("UINT8", 2),
        ("UINT16", 3),
        ("UINT32", 4),
        ("UINT64", 5),
        ("INT8", 6),
        ("INT16", 7),
        ("INT32", 8),
        ("INT64", 9),
        ("FLOAT16", 10),
        ("FLOAT32", 11),
        ("FLOAT64", 12),
    ]


@pytest.mark.parametrize(
    ("dtype", "width", "numpy"),
    [
        (DType.BOOL, 1, "|b1"),
        (DType.UINT8, 1, "|u1"),
        (DType.INT8, 1, "|i1"),
        (DType.UINT16, 2, "<u2"),
        (DType.INT16, 2, "<i2"),
        (DType.FLOAT16, 2, "<f2"),
        (DType.UINT32, 4, "<u4"),
        (DType.INT32, 4, "<i4"),
        (DType.FLOAT32, 4, "<f4"),
        (DType.UINT64, 8, "<u8"),
        (DType.INT64, 8, "<i8"),
        (DType.FLOAT64, 8, "<f8"),
    ],
)
def test_dtype_widths_and_numpy(dtype: DType, width: int, numpy: str) -> None:
    assert dtype.width == width
    assert dtype.numpy_dtype == np.dtype(numpy)
    assert dtype.numpy_dtype.str == numpy
    assert DType.from_numpy(numpy) is dtype
    assert DType.from_numpy(np.dtype(numpy).newbyteorder(">")) is dtype


def test_dtype_unspecified_and_unsupported() -> None:
    assert DType.UNSPECIFIED.width == 0
    with pytest.raises(SpaceError, match="no numpy dtype"):
        _ = DType.UNSPECIFIED.numpy_dtype
    for bad in ("complex64", "U3", "O"):
        with pytest.raises(SpaceError, match="no rlmesh-wire-v1 DataType"):
            DType.from_numpy(bad)


def test_dtype_ranges() -> None:
    assert dtype_range(DType.BOOL) == (0, 1)
    assert dtype_range(DType.INT8) == (-128, 127)
    assert dtype_range(DType.UINT64) == (0, 2**64 - 1)
    assert fits_dtype(DType.INT64, -(2**63))
    assert not fits_dtype(DType.INT64, 2**63)
    assert not fits_dtype(DType.UINT8, -1)
    with pytest.raises(SpaceError, match="not an integer type"):
        dtype_range(DType.FLOAT32)


def test_dtype_kinds() -> None:
    assert DType.UINT64.is_integer
    assert not DType.UINT64.is_signed
    assert DType.INT8.is_integer
    assert DType.INT8.is_signed
    assert DType.FLOAT16.is_float
    assert not DType.FLOAT16.is_integer
    assert DType.BOOL.is_bool
    assert not DType.BOOL.is_integer


# --------------------------------------------------------------------------------------------
# Construction, equality, hashing


@pytest.mark.parametrize("space", CATALOGUE)
def test_catalogue_is_valid_hashable_and_picklable(space: Space) -> None:
    validate(space)
    assert space == pickle.loads(pickle.dumps(space))
    assert hash(space) == hash(pickle.loads(pickle.dumps(space)))
    assert {space: 1}[space] == 1
    repr(space)


def test_box_bounds_are_read_only_full_shape_arrays() -> None:
    box = Box.from_bounds(-1, [1.0, 2.0], (3, 2), DType.FLOAT16)
    assert box.low.shape == box.high.shape == (3, 2)
    assert box.low.dtype == np.dtype("<f2")
    assert not box.low.flags.writeable
    assert not box.high.flags.writeable


def test_box_owns_its_bounds() -> None:
    low = np.zeros(2, np.float32)
    box = Box.from_bounds(low, 1.0, None, DType.FLOAT32)
    low[0] = 5.0
    assert box.low.tolist() == [0.0, 0.0]
    direct = Box(np.zeros(2, "<f4"), np.ones(2, "<f4"), (2,), DType.FLOAT32)
    assert not direct.low.flags.writeable


def test_box_init_is_strict() -> None:
    with pytest.raises(TypeError, match="from_bounds"):
        Box(np.zeros(2), np.ones(2), (2,), DType.FLOAT32)  # float64 bounds for a float32 Box
    with pytest.raises(TypeError, match="shape"):
        Box(np.zeros(3, "<f4"), np.ones(3, "<f4"), (2,), DType.FLOAT32)


def test_box_from_bounds_shape_rules() -> None:
    assert Box.from_bounds(0.0, 1.0).shape == ()
    assert Box.from_bounds([0.0, 0.0], 1.0).shape == (2,)
    assert Box.from_bounds(0, 1, (2, 2), "uint8").dtype is DType.UINT8
    with pytest.raises(SpaceError, match="do not broadcast"):
        Box.from_bounds([0.0, 0.0], [1.0, 1.0, 1.0])


def test_box_from_bounds_integer_rules() -> None:
    box = Box.from_bounds(-inf, inf, (2,), DType.INT8)
    assert box.low.tolist() == [-128, -128]
    assert box.high.tolist() == [127, 127]
    assert Box.from_bounds(0.0, 3.0, (1,), DType.UINT8).high.tolist() == [3]
    with pytest.raises(SpaceError, match="non-integral"):
        Box.from_bounds(0.5, 3, (1,), DType.INT32)
    with pytest.raises(SpaceError, match="does not fit dtype UINT8"):
        Box.from_bounds(-1, 3, (1,), DType.UINT8)
    with pytest.raises(SpaceError, match="does not fit dtype INT64"):
        Box.from_bounds(0, 2**63, (1,), DType.INT64)
    with pytest.raises(SpaceError, match="NaN"):
        Box.from_bounds(np.nan, 3, (1,), DType.INT32)
    with pytest.raises(SpaceError, match="numeric"):
        Box.from_bounds("a", "b", (1,), DType.INT32)


@pytest.mark.parametrize(
    ("box", "kind"),
    [
        (Box.from_bounds(-inf, inf, (3,), DType.FLOAT32), "unbounded"),
        (Box.from_bounds(-inf, inf, (3,), DType.FLOAT16), "unbounded"),
        (Box.from_bounds(-inf, 0.0, (3,), DType.FLOAT32), "uniform"),
        (Box.from_bounds(0.0, inf, (3,), DType.FLOAT64), "uniform"),
        (Box.from_bounds([-inf, 0.0], inf, None, DType.FLOAT32), "elementwise"),
        (Box.from_bounds(-1.0, 1.0, (2, 2), DType.FLOAT32), "uniform"),
        (Box.from_bounds([0.0, -0.0], 1.0, None, DType.FLOAT32), "elementwise"),
        (Box.from_bounds([-1.0, -2.0], 1.0, None, DType.FLOAT32), "elementwise"),
        (Box.from_bounds(-inf, inf, (2,), DType.INT32), "uniform"),
        (Box.from_bounds(0, [1, 2], None, DType.UINT8), "elementwise"),
        (Box.from_bounds(False, True, (4,), DType.BOOL), "uniform"),
    ],
)
def test_bounds_kind(box: Box, kind: str) -> None:
    assert box.bounds_kind == kind


def test_box_equality_compares_bounds() -> None:
    a = Box.from_bounds(0.0, 1.0, (2,), DType.FLOAT32)
    assert a == Box.from_bounds([0.0, 0.0], [1.0, 1.0], None, DType.FLOAT32)
    assert a != Box.from_bounds(0.0, 2.0, (2,), DType.FLOAT32)
    assert a != Box.from_bounds(0.0, 1.0, (2,), DType.FLOAT64)
    assert a != Box.from_bounds(0.0, 1.0, (3,), DType.FLOAT32)
    assert Box.from_bounds(np.nan, 1.0, (1,)) == Box.from_bounds(np.nan, 1.0, (1,))
    assert a != Box.from_bounds([0.0, np.nan], 1.0, (2,), DType.FLOAT32)


def test_box_equality_is_by_value_as_array_equal_with_nans_alike() -> None:
    """Bounds compare by value: every NaN alike (whatever its payload), -0.0 equal to 0.0,
    and equal spaces hash alike, so they share one key in a dict."""
    other_nan = np.frombuffer(np.array([0x7FF8_0000_0000_0001], np.uint64).tobytes(), np.float64)
    assert np.isnan(other_nan[0])
    assert other_nan.tobytes() != np.array([np.nan]).tobytes()
    signed = Box.from_bounds([-0.0, np.nan], [1.0, 2.0], None, DType.FLOAT64)
    plain = Box.from_bounds([0.0, other_nan[0]], [1.0, 2.0], None, DType.FLOAT64)
    assert signed == plain
    assert hash(signed) == hash(plain)
    assert {signed: "first"}[plain] == "first"
    assert signed != Box.from_bounds([0.0, 0.0], [1.0, 2.0], None, DType.FLOAT64)
    ints = Box.from_bounds([0, 1], [5, 6], None, DType.INT64)
    assert ints == Box.from_bounds([0, 1], [5, 6], None, DType.INT64)
    assert ints != Box.from_bounds([0, 1], [5, 7], None, DType.INT64)


def test_multidiscrete_nvec() -> None:
    space = MultiDiscrete([[2, 3], [4, 5]])
    assert space.shape == (2, 2)
    assert space.nvec.dtype == np.int64
    assert not space.nvec.flags.writeable
    assert space == MultiDiscrete(np.array([[2, 3], [4, 5]], np.uint8))
    assert space != MultiDiscrete([2, 3, 4, 5])
    assert space != MultiDiscrete([[2, 3], [4, 6]])
    assert hash(space) == hash(MultiDiscrete([[2, 3], [4, 5]]))
    with pytest.raises(TypeError, match="integers"):
        MultiDiscrete([1.5, 2.0])


def test_wire_shapes_and_dtypes() -> None:
    assert (Discrete(3).shape, Discrete(3).dtype) == ((), DType.INT64)
    assert (Text(3).shape, Text(3).dtype) == ((), DType.UINT8)
    assert (Dict({}).shape, Dict({}).dtype) == ((), DType.UNSPECIFIED)
    assert (Tuple([]).shape, Tuple([]).dtype) == ((), DType.UNSPECIFIED)
    assert MultiBinary((2,)).dtype is DType.UINT8
    assert MultiDiscrete([2]).dtype is DType.INT64


def test_dict_keeps_declared_order() -> None:
    space = Dict({"b": Discrete(2), "a": Discrete(3)})
    assert space.keys() == ("b", "a")
    assert list(space) == ["b", "a"]
    assert space["a"] == Discrete(3)
    assert "a" in space
    assert "c" not in space
    assert len(space) == 2
    assert space != Dict({"a": Discrete(3), "b": Discrete(2)})
    with pytest.raises(KeyError):
        space["c"]
    assert Dict.from_pairs(["x", "y"], [Text(1), Text(2)]).keys() == ("x", "y")
    with pytest.raises(SpaceError, match="2 keys but 1 spaces"):
        Dict.from_pairs(["x", "y"], [Text(1)])


def test_tuple_access() -> None:
    space = Tuple([Discrete(2), Text(3)])
    assert space[1] == Text(3)
    assert len(space) == 2
    assert list(space) == [Discrete(2), Text(3)]


# --------------------------------------------------------------------------------------------
# Leaves (spec §8.1)


def test_leaf_order_spec_example() -> None:
    assert leaf_paths(SPEC_EXAMPLE) == ["$.a[0]", "$.a[1]", "$.b"]
    kinds = [type(leaf).__name__ for _, leaf in iter_leaves(SPEC_EXAMPLE)]
    assert kinds == ["Discrete", "Text", "Box"]


def test_leaf_order_nested_and_empty() -> None:
    assert leaf_paths(NESTED) == ["$.obs[0].pos", "$.obs[0].tag", "$.obs[1]", "$.id"]
    assert leaf_paths(Dict({})) == []
    assert leaf_paths(Tuple([Dict({}), Tuple([])])) == []
    assert leaf_paths(Discrete(2)) == ["$"]
    assert leaf_paths(Dict({"two words": Discrete(2), "ok": Discrete(2)})) == [
        '$["two words"]',
        "$.ok",
    ]


# --------------------------------------------------------------------------------------------
# Validation (spec §7.3): one test per rule


def _invalid(space: Space, path: str, problem: str) -> None:
    with pytest.raises(SpaceError, match=problem) as info:
        validate(Dict({"x": Tuple([Discrete(2), space])}))
    assert info.value.path == f"$.x[1]{path}"
    assert str(info.value).startswith(f"$.x[1]{path}: ")
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, SpecError)


def test_box_rank_at_least_one() -> None:
    _invalid(Box.from_bounds(0.0, 1.0, ()), "", r"rank >= 1, got shape \(\); use shape \(1,\)")


def test_box_dims_positive() -> None:
    _invalid(Box.from_bounds(0.0, 1.0, (2, 0)), "", r"dims must all be > 0, got shape \(2, 0\)")


def test_box_no_nan_bounds() -> None:
    _invalid(Box.from_bounds([0.0, np.nan], 1.0), "", "must not be NaN; use -inf/")
    _invalid(Box.from_bounds(0.0, np.nan, (1,)), "", "must not be NaN")


def test_box_low_le_high() -> None:
    _invalid(
        Box.from_bounds([0.0, 2.0], 1.0), "", r"low must be <= high everywhere; at index \(1,\)"
    )
    _invalid(Box.from_bounds(5, 1, (1,), DType.INT8), "", "low must be <= high")
    validate(Box.from_bounds(1.0, 1.0, (1,)))


def test_box_integer_bounds_must_be_integral() -> None:
    # Integer bounds are stored in the dtype, so the rule is enforced at construction.
    with pytest.raises(SpaceError, match="non-integral"):
        Box.from_bounds(0, 2.5, (1,), DType.INT16)


def test_box_dtype_unspecified() -> None:
    with pytest.raises(SpaceError, match="UNSPECIFIED"):
        Box(np.zeros(1), np.ones(1), (1,), DType.UNSPECIFIED)


def test_discrete_dtype() -> None:
    _invalid(Discrete(2, dtype=DType.INT16), "", "dtype must be INT64, INT32 or UINT8, got INT16")
    for dtype in (DType.INT64, DType.INT32, DType.UINT8):
        validate(Discrete(2, dtype=dtype))


def test_discrete_n_positive() -> None:
    _invalid(Discrete(0), "", "n must be > 0, got 0")


def test_discrete_start_fits() -> None:
    _invalid(Discrete(2, start=-1, dtype=DType.UINT8), "", r"start = -1 does not fit dtype UINT8")
    _invalid(Discrete(2, start=255, dtype=DType.UINT8), "", r"start \+ n - 1 = 256 does not fit")
    validate(Discrete(256, dtype=DType.UINT8))
    validate(Discrete(1, start=2**31 - 1, dtype=DType.INT32))


def test_multibinary_rules() -> None:
    _invalid(MultiBinary(()), "", "rank >= 1")
    _invalid(MultiBinary((3, 0)), "", "dims must all be > 0")
    _invalid(MultiBinary((3,), DType.UINT16), "", "one byte wide")
    for dtype in (DType.UINT8, DType.INT8, DType.BOOL):
        validate(MultiBinary((3,), dtype))


def test_multidiscrete_rules() -> None:
    _invalid(MultiDiscrete(np.zeros((0,), np.int64)), "", "dims must all be > 0")
    _invalid(MultiDiscrete(np.array(3)), "", "rank >= 1")
    _invalid(MultiDiscrete([2, 3], DType.FLOAT32), "", "integer type, got FLOAT32")
    _invalid(MultiDiscrete([2, 3], DType.BOOL), "", "integer type, got BOOL")
    _invalid(MultiDiscrete([2, 0]), "", r"nvec must all be > 0, got \[2, 0\]")
    _invalid(MultiDiscrete([2, 257], DType.UINT8), "", r"value 256 .* does not fit dtype UINT8")
    validate(MultiDiscrete([2, 256], DType.UINT8))


def test_text_rules() -> None:
    _invalid(Text(3, min_length=0), "", "0 < min_length <= max_length, got min_length=0")
    _invalid(Text(2, min_length=3), "", "min_length=3, max_length=2")
    validate(Text(1))


def test_dict_rules() -> None:
    _invalid(Dict({"": Discrete(2)}), "", "non-empty strings, got ''")
    _invalid(Dict([("a", Discrete(2)), ("a", Text(1))]), "", "key 'a' appears twice")
    _invalid(Dict({"a": Discrete(0)}), ".a", "n must be > 0")
    validate(Dict({}))


def test_tuple_children_are_validated() -> None:
    _invalid(Tuple([Text(1), Tuple([Discrete(0)])]), "[1][0]", "n must be > 0")
    validate(Tuple([]))


def test_non_space_child() -> None:
    with pytest.raises(SpaceError, match=r"^\$\[0\]: int is not a space"):
        validate(Tuple([1]))  # type: ignore[list-item]


def test_space_error_pickles() -> None:
    error = SpaceError("bad", path="$.a")
    copy = pickle.loads(pickle.dumps(error))
    assert (type(copy), copy.path, copy.problem, str(copy)) == (
        SpaceError,
        "$.a",
        "bad",
        str(error),
    )
