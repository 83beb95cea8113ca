"""``protocol._wire``: varints, tags, spans and packed fields, checked against betterproto2."""

from __future__ import annotations

import dataclasses
import struct

import betterproto2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_rlmesh.protocol import _wire as wire

INT64 = st.integers(-(2**63), 2**63 - 1)


@dataclasses.dataclass(eq=False, repr=False)
class _Sint(betterproto2.Message):
    value: int | None = betterproto2.field(1, betterproto2.TYPE_SINT64, optional=True)


ANY = st.integers(-(2**63), 2**70 - 1)


@given(ANY)
def test_varints_are_written_as_betterproto2_writes_them(value: int) -> None:
    assert wire.encode_varint(value) == betterproto2.encode_varint(value)


@pytest.mark.parametrize(
    "value", [0x7F, 0x80, 0x3FFF, 0x4000, 0x1FFFFF, 0x200000, 2**63, 2**64 - 1, -1]
)
def test_varints_at_every_length_boundary(value: int) -> None:
    assert wire.encode_varint(value) == betterproto2.encode_varint(value)


def test_a_varint_below_int64_is_refused() -> None:
    with pytest.raises(ValueError, match="64-bit"):
        wire.encode_varint(-(2**63) - 1)


@given(ANY, st.binary(max_size=3))
def test_varints_read_back(value: int, after: bytes) -> None:
    encoded = wire.encode_varint(value)
    data = b"\xff" + encoded + after
    got, pos = wire.read_varint(data, 1, len(data))
    assert pos == 1 + len(encoded)
    assert got == value % 2**64 if value < 0 else got == value
    assert (got, pos - 1) == betterproto2.decode_varint(encoded, 0)


@pytest.mark.parametrize(
    ("data", "end", "message"),
    [
        (b"\xff" * 10 + b"\x01", 11, "longer than 10 bytes"),
        (b"\xff\xff", 2, "truncated"),
        (b"\xff\x01", 1, "truncated"),  # ``end`` bounds the read, not the buffer
        (b"", 0, "truncated"),
    ],
)
def test_malformed_varints_raise(data: bytes, end: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        wire.read_varint(data, 0, end)


def test_a_ten_byte_varint_is_read_whole() -> None:
    # Up to 70 bits: callers mask as betterproto2 does.
    assert wire.read_varint(b"\xff" * 9 + b"\x7f", 0, 10) == (2**70 - 1, 10)


@pytest.mark.parametrize(
    ("number", "wire_type", "expected"),
    [(1, 2, b"\x0a"), (15, 0, b"\x78"), (16, 0, b"\x80\x01"), (18, 0, b"\x90\x01")],
)
def test_tags(number: int, wire_type: int, expected: bytes) -> None:
    assert wire.encode_tag(number, wire_type) == expected


def test_spans() -> None:
    payload = bytes(range(200))
    data = b"\x00" + wire.encode_varint(len(payload)) + payload + b"\x01"
    assert wire.read_span(data, 1, len(data)) == (3, 203)
    with pytest.raises(ValueError, match="past the end"):
        wire.read_span(data, 1, 202)
    with pytest.raises(ValueError, match="truncated"):
        wire.read_span(data, 1, 2)


@pytest.mark.parametrize(
    ("key", "payload", "span"),
    [
        (0x08, b"\x96\x01", (0, 2)),
        (0x11, b"\x00" * 8, (0, 8)),
        (0x12, b"\x02ab", (1, 3)),
        (0x1D, b"\x00" * 4, (0, 4)),
    ],
)
def test_skipping_each_wire_type(key: int, payload: bytes, span: tuple[int, int]) -> None:
    assert wire.skip_field(payload + b"\x00", 0, len(payload), key) == span


@pytest.mark.parametrize(
    ("key", "payload", "message"),
    [
        (0x08, b"\x96", "field 1: message truncated inside a varint"),
        (0x11, b"\x00" * 7, "field 2: message truncated inside a 64-bit field"),
        (0x1A, b"\x03ab", "field 3: a length-delimited field runs past"),
        (0x25, b"\x00" * 3, "field 4: message truncated inside a 32-bit field"),
        (0x2B, b"", "field 5 uses unsupported wire type 3"),
        (0x34, b"", "field 6 uses unsupported wire type 4"),
    ],
)
def test_skipping_refuses_malformed_fields(key: int, payload: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        wire.skip_field(payload, 0, len(payload), key)


def test_unexpected_reads_the_key_before_falling_back() -> None:
    with pytest.raises(wire.Fallback):
        wire.unexpected(b"\x98\x06\x05", 0, 3)
    with pytest.raises(ValueError, match="truncated"):
        wire.unexpected(b"\x98", 0, 1)


@given(st.lists(st.integers(0, 2**70 - 1), max_size=6))
def test_packed_varints_are_masked_like_betterproto2(values: list[int]) -> None:
    body = b"".join(_raw_varint(v) for v in values)
    unsigned: list[int] = []
    wire.read_packed_varints(body, 0, len(body), unsigned, wire.U32, 0)
    assert unsigned == [v & wire.U32 for v in values]
    signed: list[int] = []
    wire.read_packed_varints(body, 0, len(body), signed, wire.U64, wire.SIGN64)
    assert signed == [struct.unpack("<q", struct.pack("<Q", v & wire.U64))[0] for v in values]


def _raw_varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def test_packed_fixed_width_values() -> None:
    out: list[float] = []
    body = struct.pack("<3d", 1.0, -2.5, 3.25)
    wire.extend_packed_fixed(body, 0, 24, out, "d")
    wire.extend_packed_fixed(body, 0, 8, out, "d")
    wire.extend_packed_fixed(body, 0, 0, out, "d")
    assert out == [1.0, -2.5, 3.25, 1.0]
    with pytest.raises(ValueError, match="multiple of 8"):
        wire.extend_packed_fixed(body, 0, 7, out, "d")
    with pytest.raises(ValueError, match="multiple of 4"):
        wire.extend_packed_fixed(body, 0, 6, out, "f")


@given(INT64)
def test_zigzag(value: int) -> None:
    encoded = wire.zigzag(value)
    assert wire.encode_varint(encoded) == bytes(_Sint(value=value))[1:]
    assert wire.unzigzag(encoded & wire.U64) == value


def test_zigzag_values() -> None:
    assert [wire.zigzag(v) for v in (0, -1, 1, -2, 2**63 - 1)] == [0, 1, 2, 3, 2**64 - 2]
    assert wire.zigzag(-(2**63)) & wire.U64 == 2**64 - 1
