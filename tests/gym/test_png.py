"""decode_png reads every PNG row filter, and refuses what env servers never send."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest

from trio_rlmesh.gym import PngError, decode_png

COLOUR_TYPES = {1: 0, 2: 4, 3: 2, 4: 6}  # channels -> PNG colour type


def _chunk(kind: bytes, body: bytes) -> bytes:
    crc = zlib.crc32(kind + body) & 0xFFFFFFFF
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def encode(image: np.ndarray, filters: list[int], *, depth: int = 8, interlace: int = 0) -> bytes:
    """A reference PNG encoder (the filter formulas of the PNG spec, byte by byte)."""
    height, width = image.shape[:2]
    channels = 1 if image.ndim == 2 else image.shape[2]
    samples = image.reshape(height, width * channels)
    if (
        image.dtype == np.uint16
    ):  # big-endian sample bytes, filtered a pixel (2 bytes/channel) apart
        samples = samples.astype(">u2").view(np.uint8)
    rows = samples.astype(int)
    bpp = channels * image.dtype.itemsize
    out = bytearray()
    for y in range(height):
        kind = filters[y % len(filters)]
        out.append(kind)
        for x in range(rows.shape[1]):
            raw = int(rows[y, x])
            a = int(rows[y, x - bpp]) if x >= bpp else 0
            b = int(rows[y - 1, x]) if y else 0
            c = int(rows[y - 1, x - bpp]) if y and x >= bpp else 0
            predictor = [0, a, b, (a + b) // 2, _paeth(a, b, c)][kind]
            out.append((raw - predictor) & 0xFF)
    header = struct.pack(">IIBBBBB", width, height, depth, COLOUR_TYPES[channels], 0, 0, interlace)
    return b"".join(
        (
            b"\x89PNG\r\n\x1a\n",
            _chunk(b"IHDR", header),
            _chunk(b"tEXt", b"Comment\x00ignored"),
            _chunk(b"IDAT", zlib.compress(bytes(out))[:10]),  # IDAT may be split
            _chunk(b"IDAT", zlib.compress(bytes(out))[10:]),
            _chunk(b"IEND", b""),
        )
    )


@pytest.mark.parametrize("channels", [1, 2, 3, 4])
@pytest.mark.parametrize("filters", [[0], [1], [2], [3], [4], [4, 3, 2, 1, 0]])
def test_every_filter_and_colour_type_round_trips(channels: int, filters: list[int]) -> None:
    rng = np.random.default_rng(channels * 10 + filters[0])
    shape = (7, 9) if channels == 1 else (7, 9, channels)
    image = rng.integers(0, 256, size=shape, dtype=np.uint8)
    image[2] = 255  # runs of equal and extreme values exercise the wrap-around
    decoded = decode_png(encode(image, filters))
    assert decoded.dtype == np.uint8
    np.testing.assert_array_equal(decoded, image)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"GIF89a", "signature"),
        (encode(np.zeros((2, 2), np.uint8), [0], depth=16), "bit depth 16"),
        (encode(np.zeros((2, 2), np.uint8), [0], interlace=1), "interlace 1"),
        (b"\x89PNG\r\n\x1a\n" + _chunk(b"IEND", b""), "no IHDR"),
    ],
)
def test_what_servers_never_send_is_refused(data: bytes, match: str) -> None:
    with pytest.raises(PngError, match=match):
        decode_png(data)
