from __future__ import annotations

import contextlib
import pickle
import struct
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trio_rlmesh import CodecError, SpaceError
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
    decode_batch,
    decode_lanes,
    decode_value,
    encode_batch,
    encode_lanes,
    encode_value,
    stack_lanes,
    unstack,
)
from trio_rlmesh.spaces._spaces import leaf_paths

from .catalogue import BOX_F32_UNIFORM, CATALOGUE, NESTED, SPEC_EXAMPLE, assert_same, values_for

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _u64(*values: int) -> bytes:
    return struct.pack(f"<{len(values)}Q", *values)


# --------------------------------------------------------------------------------------------
# Round trips over the catalogue


@pytest.mark.parametrize("space", CATALOGUE)
@SETTINGS
@given(data=st.data())
def test_batch_round_trip(space: Space, data: st.DataObject) -> None:
    n = data.draw(st.integers(1, 8), label="n")
    value = data.draw(values_for(space, n), label="value")
    leaves = encode_batch(space, value, n)
    assert len(leaves) == len(leaf_paths(space))
    assert all(type(leaf) is bytes for leaf in leaves)
    assert_same(value, decode_batch(space, leaves, n))


@pytest.mark.parametrize("space", CATALOGUE)
@SETTINGS
@given(data=st.data())
def test_lanes_round_trip(space: Space, data: st.DataObject) -> None:
    n = data.draw(st.integers(1, 8), label="n")
    batch = data.draw(values_for(space, n), label="batch")
    lanes = unstack(space, batch, n)
    assert len(lanes) == n
    leaves = encode_lanes(space, lanes)
    # The lanes form is the batched form: same bytes.
    assert leaves == encode_batch(space, batch, n)
    assert_same(batch, stack_lanes(space, lanes))
    assert_same(lanes, decode_lanes(space, leaves, n))


@pytest.mark.parametrize("space", CATALOGUE)
@SETTINGS
@given(data=st.data())
def test_single_value_round_trip(space: Space, data: st.DataObject) -> None:
    batch = data.draw(values_for(space, 1), label="batch")
    (value,) = unstack(space, batch, 1)
    leaves = encode_value(space, value)
    assert_same(value, decode_value(space, leaves))
    # Identical to a one-lane batch except for Text leaves, which carry no header.
    batched = encode_batch(space, batch, 1)
    for single, framed, (path, leaf) in zip(leaves, batched, _leaves(space), strict=True):
        if isinstance(leaf, Text):
            assert framed == _u64(1, len(single)) + single, path
        else:
            assert framed == single, path


def _leaves(space: Space) -> list[tuple[str, Space]]:
    from trio_rlmesh.spaces._spaces import iter_leaves

    return list(iter_leaves(space))


@pytest.mark.parametrize("space", CATALOGUE)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_decode_garbage_raises_only_codec_error(space: Space, data: st.DataObject) -> None:
    n = data.draw(st.integers(0, 4), label="n")
    count = len(leaf_paths(space))
    leaves = data.draw(
        st.lists(st.binary(max_size=64), min_size=max(count - 1, 0), max_size=count + 1),
        label="leaves",
    )
    with contextlib.suppress(CodecError):
        decode_batch(space, leaves, n)


@pytest.mark.parametrize("space", CATALOGUE)
def test_zero_lanes(space: Space) -> None:
    leaves = encode_lanes(space, [])
    assert decode_lanes(space, leaves, 0) == []


# --------------------------------------------------------------------------------------------
# Golden bytes (spec §8.2, §8.1, §17)


def test_golden_text_batch() -> None:
    expected = bytes.fromhex("020000000000000002000000000000000600000000000000686968c3a96c6c6f")
    assert encode_batch(Text(8), ["hi", "héllo"], 2) == [expected]
    assert decode_batch(Text(8), [expected], 2) == ("hi", "héllo")


def test_golden_discrete_batch() -> None:
    space = Discrete(3, start=-1)
    expected = bytes.fromhex("0100000000000000ffffffffffffffff")
    assert encode_batch(space, [1, -1], 2) == [expected]
    decoded = decode_batch(space, [expected], 2)
    assert decoded.dtype == np.dtype("<i8")
    assert decoded.tolist() == [1, -1]


def test_spec_leaf_order_example() -> None:
    assert leaf_paths(SPEC_EXAMPLE) == ["$.a[0]", "$.a[1]", "$.b"]
    leaves = encode_batch(
        SPEC_EXAMPLE, {"a": ([3], ["x"]), "b": np.array([[1.0, 2.0]], np.float32)}, 1
    )
    assert leaves == [
        _u64(3),
        _u64(1, 1) + b"x",
        np.array([1.0, 2.0], "<f4").tobytes(),
    ]


def test_box_encodes_little_endian_in_declared_dtype() -> None:
    leaves = encode_batch(BOX_F32_UNIFORM, np.full((1, 2, 3), -1.0, ">f8"), 1)
    assert leaves == [bytes.fromhex("000080bf") * 6]


def test_bool_box_bytes_are_zero_or_one() -> None:
    space = Box.from_bounds(False, True, (3,), DType.BOOL)
    assert encode_batch(space, [[True, False, True]], 1) == [b"\x01\x00\x01"]
    assert encode_batch(space, [[1, 0, 1]], 1) == [b"\x01\x00\x01"]


def test_multibinary_is_one_byte_per_element() -> None:
    for dtype in (DType.UINT8, DType.INT8, DType.BOOL):
        space = MultiBinary((2, 2), dtype)
        assert encode_batch(space, [[[1, 0], [0, 1]]], 1) == [b"\x01\x00\x00\x01"]


# --------------------------------------------------------------------------------------------
# Decoding details


def test_decode_is_zero_copy_and_read_only() -> None:
    space = Box.from_bounds(-np.inf, np.inf, (4,), DType.FLOAT32)
    leaf = np.arange(8, dtype="<f4").tobytes()
    array = decode_batch(space, [leaf], 2)
    assert array.shape == (2, 4)
    assert array.dtype == np.dtype("<f4")
    assert not array.flags.writeable
    assert array.base is not None


@pytest.mark.parametrize("kind", [bytearray, memoryview])
def test_decode_accepts_buffers(kind: Any) -> None:
    leaf = kind(np.arange(6, dtype="<i8").tobytes())
    array = decode_batch(MultiDiscrete([10, 10, 10]), [leaf], 2)
    assert array.tolist() == [[0, 1, 2], [3, 4, 5]]
    text = kind(_u64(1, 2) + b"ok")
    assert decode_batch(Text(4), [text], 1) == ("ok",)


def test_decode_nonzero_bytes_count_as_one() -> None:
    assert decode_batch(MultiBinary((3,)), [b"\x00\x07\x01"], 1).tolist() == [[0, 1, 1]]
    decoded = decode_batch(Box.from_bounds(False, True, (2,), DType.BOOL), [b"\x00\xff"], 1)
    assert decoded.dtype == np.bool_
    assert decoded.tolist() == [[False, True]]


def test_discrete_lanes_are_numpy_scalars_of_the_dtype() -> None:
    space = Discrete(4, dtype=DType.INT32)
    lanes = decode_lanes(space, encode_lanes(space, [0, 3]), 2)
    assert [int(lane) for lane in lanes] == [0, 3]
    assert all(lane.dtype == np.dtype("<i4") for lane in lanes)


def test_dict_decodes_in_declared_key_order() -> None:
    space = Dict({"z": Discrete(2), "a": Discrete(2)})
    decoded = decode_batch(space, encode_batch(space, {"a": [1], "z": [0]}, 1), 1)
    assert list(decoded) == ["z", "a"]


# --------------------------------------------------------------------------------------------
# Coercion (spec §8.5)


def test_integral_floats_are_accepted_for_integer_dtypes() -> None:
    space = Box.from_bounds(0, 255, (2,), DType.UINT8)
    assert encode_batch(space, np.array([[1.0, 255.0]]), 1) == [b"\x01\xff"]


def test_ints_are_range_checked_for_narrower_dtypes() -> None:
    space = Box.from_bounds(-128, 127, (2,), DType.INT8)
    assert encode_batch(space, np.array([[-128, 127]], np.int64), 1) == [b"\x80\x7f"]
    with pytest.raises(CodecError, match=r"\$: lane 0 element \(1,\) is outside the range"):
        encode_batch(space, np.array([[0, 128]], np.int64), 1)


def test_u64_range_is_exact() -> None:
    space = Box.from_bounds(0, 2**64 - 1, (1,), DType.UINT64)
    assert encode_batch(space, [[2**64 - 1]], 1) == [b"\xff" * 8]
    with pytest.raises(CodecError, match="outside the range of UINT64"):
        encode_batch(space, np.array([[-1]]), 1)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (1.5, "not a whole number"),
        (np.nan, "not finite"),
        (np.inf, "not finite"),
        (1e10, "outside the range of INT32"),
    ],
)
def test_bad_floats_for_integer_dtypes(value: float, problem: str) -> None:
    space = Box.from_bounds(-10, 10, (2,), DType.INT32)
    with pytest.raises(CodecError, match=problem) as info:
        encode_batch(space, np.array([[0.0, value]]), 1)
    assert info.value.path == "$"


def test_float_narrowing_is_allowed() -> None:
    space = Box.from_bounds(-np.inf, np.inf, (2,), DType.FLOAT16)
    (leaf,) = encode_batch(space, np.array([[1e10, 0.1]]), 1)
    assert np.frombuffer(leaf, "<f2").tolist() == [np.inf, np.float16(0.1)]


def test_bool_dtype_takes_only_zero_and_one() -> None:
    space = Box.from_bounds(False, True, (2,), DType.BOOL)
    with pytest.raises(CodecError, match="outside the range of BOOL"):
        encode_batch(space, [[0, 2]], 1)


def test_non_numeric_values_are_rejected() -> None:
    with pytest.raises(CodecError, match="values must be numeric"):
        encode_batch(BOX_F32_UNIFORM, np.full((1, 2, 3), "x"), 1)


def test_ragged_values_are_rejected() -> None:
    space = Box.from_bounds(0.0, 1.0, (2,), DType.FLOAT32)
    with pytest.raises(CodecError, match="not a rectangular array"):
        encode_batch(space, [[1.0, 2.0], [1.0]], 2)


# --------------------------------------------------------------------------------------------
# Malformed input: always CodecError with the leaf path


def test_wrong_leaf_count() -> None:
    leaves = encode_batch(SPEC_EXAMPLE, {"a": ([3], ["x"]), "b": np.zeros((1, 2))}, 1)
    for bad in (leaves[:-1], [*leaves, b""]):
        with pytest.raises(CodecError, match=r"wrong number of leaves") as info:
            decode_batch(SPEC_EXAMPLE, bad, 1)
        assert info.value.expected == "3 leaves"
    with pytest.raises(CodecError, match="wrong number of leaves"):
        decode_value(SPEC_EXAMPLE, leaves[:1])


@pytest.mark.parametrize("delta", [-1, 1, 4])
def test_fixed_leaf_byte_length(delta: int) -> None:
    value = {"a": ([3, 0], ["x", "y"]), "b": np.zeros((2, 2))}
    leaves = encode_batch(SPEC_EXAMPLE, value, 2)
    leaves[2] = leaves[2][:delta] if delta < 0 else leaves[2] + b"\0" * delta
    with pytest.raises(CodecError, match=r"^\$\.b: Box leaf has the wrong byte length") as info:
        decode_batch(SPEC_EXAMPLE, leaves, 2)
    assert info.value.path == "$.b"
    assert info.value.expected == "16 bytes"


def test_n_is_never_derived_from_bytes() -> None:
    leaf = encode_batch(Discrete(5), [1, 2], 2)[0]
    with pytest.raises(CodecError, match="wrong byte length"):
        decode_batch(Discrete(5), [leaf], 1)


def test_leaf_must_be_bytes_like() -> None:
    with pytest.raises(CodecError, match="not bytes-like"):
        decode_batch(Discrete(5), ["\x00" * 8], 1)  # type: ignore[list-item]


@pytest.mark.parametrize(
    ("leaf", "problem"),
    [
        (b"", "shorter than its u64 count"),
        (b"\x01\x00", "shorter than its u64 count"),
        (_u64(2, 1) + b"a", "count does not match the lane count"),
        (_u64(0), "count does not match the lane count"),
        (_u64(1), "truncated inside its length table"),
        (_u64(1, 3) + b"ab", "body is truncated"),
        (_u64(1, 1) + b"ab", "body is followed by trailing bytes"),
        (_u64(1, 2**64 - 1) + b"ab", "body is truncated"),
        (_u64(1, 1) + b"\xff", "lane 0 is not valid UTF-8"),
        (_u64(1, 1) + b"\xc3", "lane 0 is not valid UTF-8"),
    ],
)
def test_bad_text_frames(leaf: bytes, problem: str) -> None:
    leaves = encode_batch(NESTED, _nested_value(), 1)
    index = leaf_paths(NESTED).index("$.obs[0].tag")
    leaves[index] = leaf
    with pytest.raises(CodecError, match=problem) as info:
        decode_batch(NESTED, leaves, 1)
    assert info.value.path == "$.obs[0].tag"
    assert str(info.value).startswith("$.obs[0].tag: ")


def test_bad_utf8_in_single_value_form() -> None:
    with pytest.raises(CodecError, match=r"^\$: lane 0 is not valid UTF-8"):
        decode_value(Text(4), [b"\xff"])


def _nested_value() -> dict[str, Any]:
    return {
        "obs": ({"pos": np.zeros((1, 2)), "tag": ["xy"]}, np.zeros((1, 2, 2), np.uint8)),
        "id": [0],
    }


@pytest.mark.parametrize(
    ("space", "value", "path", "problem"),
    [
        (Discrete(3, start=-1), [2], "$", r"lane 0 is outside Discrete -1..1"),
        (Discrete(3, start=-1), [-2], "$", r"lane 0 is outside Discrete -1..1"),
        (Discrete(4, dtype=DType.UINT8), [4], "$", "outside Discrete 0..3"),
        (MultiDiscrete([2, 3]), [[1, 3]], "$", r"lane 0 element \(1,\) is outside 0..nvec-1"),
        (MultiDiscrete([2, 3]), [[-1, 0]], "$", r"lane 0 element \(0,\) is outside 0..nvec-1"),
        (MultiDiscrete([2, 256], DType.UINT8), [[0, 256]], "$", "outside the range of UINT8"),
        (MultiBinary((2,)), [[0, 2]], "$", r"lane 0 element \(1,\) is not 0 or 1"),
        (MultiBinary((2,), DType.INT8), [[-1, 0]], "$", "is not 0 or 1"),
    ],
)
def test_out_of_domain_on_encode(space: Space, value: Any, path: str, problem: str) -> None:
    with pytest.raises(CodecError, match=problem) as info:
        encode_batch(space, value, 1)
    assert info.value.path == path


def test_out_of_domain_on_decode() -> None:
    space = Dict({"d": Discrete(3, start=-1), "m": MultiDiscrete([2, 3])})
    good = encode_batch(space, {"d": [0], "m": [[1, 2]]}, 1)
    with pytest.raises(CodecError, match=r"^\$\.d: lane 0 is outside Discrete -1..1"):
        decode_batch(space, [_u64(5), good[1]], 1)
    with pytest.raises(CodecError, match=r"^\$\.m: lane 0 element \(1,\) is outside 0..nvec-1"):
        decode_batch(space, [good[0], struct.pack("<2q", 1, 3)], 1)
    with pytest.raises(CodecError, match=r"^\$\.m: .* outside 0..nvec-1"):
        decode_batch(space, [good[0], struct.pack("<2q", -1, 0)], 1)


@pytest.mark.parametrize(
    ("value", "n", "expected"),
    [
        (np.zeros((1, 2, 2)), 1, (1, 2, 3)),
        (np.zeros((2, 2, 3)), 1, (1, 2, 3)),
        (np.zeros((2, 3)), 1, (1, 2, 3)),
        (0.0, 1, (1, 2, 3)),
    ],
)
def test_wrong_shape_on_encode(value: Any, n: int, expected: tuple[int, ...]) -> None:
    space = Tuple([Discrete(2), BOX_F32_UNIFORM])
    with pytest.raises(CodecError, match=r"^\$\[1\]: value has the wrong shape") as info:
        encode_batch(space, ([0] * n, value), n)
    assert info.value.expected == expected


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({"b": np.zeros((1, 2))}, r"^\$: Dict value has the wrong keys \(missing \['a'\]"),
        ({"a": ([0], ["x"]), "b": np.zeros((1, 2)), "c": 1}, r"unexpected \['c'\]"),
        ([np.zeros((1, 2))], r"^\$: Dict value must be a mapping"),
        ({"a": 5, "b": np.zeros((1, 2))}, r"^\$\.a: Tuple value must be a tuple or list"),
        ({"a": ([0],), "b": np.zeros((1, 2))}, r"^\$\.a: Tuple value has the wrong number"),
        ({"a": ([0], "x"), "b": np.zeros((1, 2))}, r"^\$\.a\[1\]: Text batch must be a seq"),
        ({"a": ([0], [b"x"]), "b": np.zeros((1, 2))}, r"^\$\.a\[1\]: lane 0 is not a str"),
        ({"a": ([0], ["x", "y"]), "b": np.zeros((1, 2))}, r"^\$\.a\[1\]: Text batch has the"),
        ({"a": ([0], ["\ud800"]), "b": np.zeros((1, 2))}, r"^\$\.a\[1\]: lane 0 cannot be enc"),
    ],
)
def test_structural_errors_on_encode(value: Any, problem: str) -> None:
    with pytest.raises(CodecError, match=problem):
        encode_batch(SPEC_EXAMPLE, value, 1)


def test_lanes_are_checked_one_by_one() -> None:
    lanes = [
        {"a": (0, "x"), "b": np.zeros(2)},
        {"a": (1, "y"), "b": np.zeros(3)},
    ]
    with pytest.raises(CodecError, match=r"^\$\.b: lane 1 has the wrong shape"):
        encode_lanes(SPEC_EXAMPLE, lanes)
    with pytest.raises(CodecError, match=r"^\$: lane 1: Dict value has the wrong keys"):
        encode_lanes(SPEC_EXAMPLE, [lanes[0], {"a": (0, "x")}])
    with pytest.raises(CodecError, match=r"^\$\.a: lane 0: Tuple value has the wrong number"):
        encode_lanes(SPEC_EXAMPLE, [{"a": (0,), "b": np.zeros(2)}])


def test_unstack_checks_the_lane_count() -> None:
    with pytest.raises(CodecError, match="wrong shape"):
        unstack(Discrete(3), np.array([0, 1]), 3)
    with pytest.raises(CodecError, match="wrong number of lanes"):
        unstack(Text(3), ("a",), 2)


def test_negative_n() -> None:
    with pytest.raises(CodecError, match="lane count must be >= 0"):
        encode_batch(Discrete(3), [], -1)


def test_invalid_space_is_rejected_before_coding() -> None:
    with pytest.raises(SpaceError, match="rank >= 1"):
        encode_batch(Box.from_bounds(0.0, 1.0, (), DType.FLOAT32), np.zeros(1), 1)


def test_codec_error_pickles() -> None:
    error = CodecError("bad", path="$.a", expected=1, actual=2)
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.path, copy.expected, copy.actual, str(copy)) == (
        "$.a",
        1,
        2,
        str(error),
    )
    assert isinstance(copy, ValueError)


def test_plan_is_cached_on_the_space_object() -> None:
    space = Dict({"x": Discrete(2)})
    encode_batch(space, {"x": [1]}, 1)
    plan = space._codec_plan
    assert plan is not None
    decode_batch(space, [_u64(1)], 1)
    assert space._codec_plan is plan
    # Spaces with a plan still compare, hash and pickle as before.
    assert space == Dict({"x": Discrete(2)})
    assert hash(space) == hash(Dict({"x": Discrete(2)}))
    assert pickle.loads(pickle.dumps(space)) == space
