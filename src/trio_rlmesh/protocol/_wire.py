"""Protobuf wire primitives: the one place in the package that reads and writes varints.

Everything that walks or writes protobuf bytes by hand (the generated fast codec in
``_generated/fastwire.py``, the strict framing walk in ``_checked``, ``_metamap``'s map
encoder, the gRPC health messages) uses these functions. They depend on nothing but the
standard library, so ``tools/gen_fastwire.py`` loads this file directly to write the tags
it puts in the generated code.

Reading is strict where betterproto2 is not: a varint longer than 10 bytes, a varint or a
payload running past the end of its message, and a group wire type raise ``ValueError``.
Values are returned raw (up to 70 bits); masking and sign conversion are the caller's.
"""

from __future__ import annotations

import struct
from typing import Any, Final, NoReturn

__all__ = [
    "SIGN32",
    "SIGN64",
    "U32",
    "U64",
    "WIRE_FIXED32",
    "WIRE_FIXED64",
    "WIRE_LEN",
    "WIRE_VARINT",
    "Fallback",
    "encode_tag",
    "encode_varint",
    "extend_packed_fixed",
    "fixed_end",
    "read_packed_varints",
    "read_span",
    "read_varint",
    "skip_field",
    "unexpected",
    "unzigzag",
    "zigzag",
]

U32: Final = 0xFFFF_FFFF
U64: Final = 0xFFFF_FFFF_FFFF_FFFF
SIGN32: Final = 1 << 31
SIGN64: Final = 1 << 63

WIRE_VARINT: Final = 0
WIRE_FIXED64: Final = 1
WIRE_LEN: Final = 2
WIRE_FIXED32: Final = 5

_TWO64: Final = 1 << 64
_SMALL: Final = tuple(bytes((i,)) for i in range(0x80))


class Fallback(Exception):
    """A fast codec does not cover this message: betterproto2 handles all of it instead."""


# ---------------------------------------------------------------------------- writing


def encode_varint(value: int) -> bytes:
    """``value`` as a varint, as betterproto2 writes it.

    A negative number is written as its 64-bit two's complement (ten bytes), as protobuf
    writes a negative ``int32``/``int64``.

    >>> encode_varint(300).hex(), len(encode_varint(-1))
    ('ac02', 10)

    Raises:
        ValueError: ``value`` is below ``-2**63``.
    """
    if 0 <= value < 0x80:
        return _SMALL[value]
    # Two and three bytes (sizes, nanosecond timings) without the loop below.
    if 0 < value < 0x4000:
        return bytes((value & 0x7F | 0x80, value >> 7))
    if 0 < value < 0x200000:
        return bytes((value & 0x7F | 0x80, value >> 7 & 0x7F | 0x80, value >> 14))
    if value < 0:
        if value < -SIGN64:
            raise ValueError(f"{value} is not representable as a 64-bit integer")
        value += _TWO64
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_tag(number: int, wire_type: int) -> bytes:
    """The key of field ``number`` sent with ``wire_type``."""
    return encode_varint(number << 3 | wire_type)


def zigzag(value: int) -> int:
    """The ``sint32``/``sint64`` mapping of ``value`` (betterproto2's formula, unmasked)."""
    return value << 1 if value >= 0 else (value << 1) ^ ~0


def unzigzag(value: int) -> int:
    """Undo :func:`zigzag` on an already masked value."""
    return (value >> 1) ^ -(value & 1)


# ---------------------------------------------------------------------------- reading


def read_varint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """Read a varint at ``pos``; returns (value, next position). At most 10 bytes.

    Raises:
        ValueError: the varint runs past ``end`` or is longer than 10 bytes.
    """
    result = 0
    shift = 0
    while pos < end:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift == 70:
            raise ValueError("varint longer than 10 bytes")
    raise ValueError("message truncated inside a varint")


def read_span(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """Read a length prefix at ``pos``; returns the (start, stop) of the payload.

    Raises:
        ValueError: the prefix or the payload runs past ``end``.
    """
    if pos < end and data[pos] < 0x80:
        stop = pos + 1 + data[pos]
        pos += 1
    else:
        length, pos = read_varint(data, pos, end)
        stop = pos + length
    if stop > end:
        raise ValueError("a length-delimited field runs past the end of its message")
    return pos, stop


def fixed_end(pos: int, end: int, size: int) -> int:
    """Where a ``size``-byte fixed-width value starting at ``pos`` ends.

    Raises:
        ValueError: it runs past ``end``.
    """
    stop = pos + size
    if stop > end:
        raise ValueError(f"message truncated inside a {size * 8}-bit field")
    return stop


def skip_field(data: bytes, pos: int, end: int, key: int) -> tuple[int, int]:
    """The (start, stop) of the payload of the field whose ``key`` was just read.

    For a varint, the payload is the varint itself; for a length-delimited field, the
    bytes after the length prefix.

    Raises:
        ValueError: the payload runs past ``end``, or the wire type is a group or invalid.
    """
    wire_type = key & 7
    try:
        if wire_type == WIRE_VARINT:
            return pos, read_varint(data, pos, end)[1]
        if wire_type == WIRE_LEN:
            return read_span(data, pos, end)
        if wire_type == WIRE_FIXED64:
            return pos, fixed_end(pos, end, 8)
        if wire_type == WIRE_FIXED32:
            return pos, fixed_end(pos, end, 4)
    except ValueError as exc:
        raise ValueError(f"field {key >> 3}: {exc}") from None
    raise ValueError(f"field {key >> 3} uses unsupported wire type {wire_type}")


def unexpected(data: bytes, pos: int, end: int) -> NoReturn:
    """The key at ``pos`` is one a fast decoder does not read: hand over the message.

    The key itself is read first, so a message cut inside a multi-byte key raises
    ``ValueError`` rather than falling back.

    Raises:
        Fallback: always, once the key is known to be complete.
    """
    read_varint(data, pos, end)
    raise Fallback


def read_packed_varints(
    data: bytes, start: int, stop: int, out: list[int], mask: int, sign: int
) -> None:
    """Append the packed varints in ``data[start:stop]`` to ``out``.

    Each is masked with ``mask`` (``-1`` keeps it whole); with ``sign`` (``SIGN32`` or
    ``SIGN64``; 0 for unsigned) it is then read as two's complement, as betterproto2 reads
    ``int32``/``int64``.
    """
    pos = start
    while pos < stop:
        byte = data[pos]
        if byte < 0x80:
            out.append(byte)
            pos += 1
        else:
            value, pos = read_varint(data, pos, stop)
            value &= mask
            out.append((value ^ sign) - sign if sign else value)


_ONE_FIXED: Final = {code: struct.Struct("<" + code) for code in "dqQfiI"}


def extend_packed_fixed(data: bytes, start: int, stop: int, out: list[Any], code: str) -> None:
    """Append the packed fixed-width values (``struct`` ``code``) in ``data[start:stop]``.

    Raises:
        ValueError: the payload is not a whole number of values.
    """
    one = _ONE_FIXED[code]
    length = stop - start
    if length == one.size:
        out.append(one.unpack_from(data, start)[0])
    elif length % one.size:
        raise ValueError(f"packed field length is not a multiple of {one.size}")
    elif length:
        out.extend(struct.unpack_from(f"<{length // one.size}{code}", data, start))
