"""Decode 8-bit PNG images into numpy arrays, without a dependency.

Two layers use it: :mod:`trio_rlmesh.gym` for the frames env servers send in
``RenderResponse.frame``, and :mod:`trio_rlmesh.adapters` for encoded camera observations
when Pillow is not installed. Both RLMesh's servers and ours send 8-bit, non-interlaced PNGs
of colour type 0 (gray), 2 (RGB) or 6 (RGBA) (spec §6.5); RLMesh's encoder filters rows
adaptively, so all five filter types occur. Rows filtered with None, Sub or Up are undone
with numpy; Average and Paeth depend on the byte to their left, so they run byte by byte (a
few hundred milliseconds for a 600×400 RGB frame in the worst case; render is not on the
step path, and the adapters prefer Pillow when it is there).
"""

from __future__ import annotations

import struct
import zlib
from typing import Any

import numpy as np
import numpy.typing as npt

from ._errors import Error

__all__ = ["PngError", "decode_png"]

_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_CHANNELS = {0: 1, 2: 3, 4: 2, 6: 4}


class PngError(Error, ValueError):
    """The bytes are not a PNG this decoder reads (8-bit, not interlaced, no palette).

    Also a :class:`ValueError`.
    """


def _chunks(data: bytes) -> tuple[bytes, bytes]:
    if not data.startswith(_SIGNATURE):
        raise PngError("not a PNG (bad signature)")
    header = b""
    idat: list[bytes] = []
    pos = len(_SIGNATURE)
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        if len(body) != length:
            raise PngError(f"truncated {kind!r} chunk")
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
        pos += 12 + length
    if len(header) != 13:
        raise PngError("no IHDR chunk")
    return header, b"".join(idat)


def _average(row: bytearray, prior: bytes, bpp: int) -> None:
    for i in range(len(row)):
        left = row[i - bpp] if i >= bpp else 0
        row[i] = (row[i] + ((left + prior[i]) >> 1)) & 0xFF


def _paeth(row: bytearray, prior: bytes, bpp: int) -> None:
    for i in range(len(row)):
        if i >= bpp:
            a, c = row[i - bpp], prior[i - bpp]
        else:
            a = c = 0
        b = prior[i]
        p = a + b - c
        pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
        if pa <= pb and pa <= pc:
            predictor = a
        elif pb <= pc:
            predictor = b
        else:
            predictor = c
        row[i] = (row[i] + predictor) & 0xFF


def decode_png(data: bytes, *, sixteen_bit: bool = False) -> npt.NDArray[Any]:
    """The image in ``data`` as a uint8 array: (H, W) gray, else (H, W, channels).

    Args:
        data: The PNG file's bytes.
        sixteen_bit: Also read 16-bit samples, returned as uint16 (the adapters' encoded
            observations may be 16-bit; render frames never are).

    Raises:
        PngError: not a PNG, or one using a bit depth, palette or interlacing that env
            servers never send.

    >>> import struct, zlib
    >>> def chunk(kind, body):  # CRCs are not checked: the transport already is
    ...     return struct.pack(">I", len(body)) + kind + body + bytes(4)
    >>> header = struct.pack(">IIBBBBB", 2, 2, 8, 0, 0, 0, 0)  # 2x2, 8-bit gray
    >>> rows = zlib.compress(b"\\x00\\x01\\x02" + b"\\x01\\x05\\x01")  # a None row, a Sub row
    >>> png = b"\\x89PNG\\r\\n\\x1a\\n" + chunk(b"IHDR", header) + chunk(b"IDAT", rows)
    >>> decode_png(png).tolist()
    [[1, 2], [5, 6]]
    """
    header, compressed = _chunks(bytes(data))
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
    channels = _CHANNELS.get(colour)
    depths = (8, 16) if sixteen_bit else (8,)
    if depth not in depths or channels is None or interlace != 0:
        raise PngError(
            f"unsupported PNG: bit depth {depth}, colour type {colour}, interlace {interlace} "
            "(env servers send 8-bit gray, RGB or RGBA, not interlaced)"
        )
    # The filters work on bytes, each against the same byte of the pixel to its left.
    bpp = channels * depth // 8
    stride = width * bpp
    try:
        raw = zlib.decompress(compressed)
    except zlib.error as exc:
        raise PngError(f"corrupt PNG image data: {exc}") from None
    if len(raw) != height * (stride + 1):
        raise PngError(f"PNG image data holds {len(raw)} bytes, expected {height * (stride + 1)}")
    rows = np.frombuffer(raw, np.uint8).reshape(height, stride + 1)
    image = np.empty((height, stride), np.uint8)
    prior = np.zeros(stride, np.uint8)
    for y in range(height):
        kind = int(rows[y, 0])
        line = rows[y, 1:]
        if kind == 0:
            image[y] = line
        elif kind == 1:
            # Sub: a running sum per channel; uint8 arithmetic wraps modulo 256 as PNG does.
            image[y] = np.cumsum(line.reshape(width, bpp), axis=0, dtype=np.uint8).ravel()
        elif kind == 2:
            image[y] = line + prior
        elif kind in (3, 4):
            row = bytearray(line.tobytes())
            (_average if kind == 3 else _paeth)(row, prior.tobytes(), bpp)
            image[y] = np.frombuffer(row, np.uint8)
        else:
            raise PngError(f"row {y} has unknown filter type {kind}")
        prior = image[y]
    samples: npt.NDArray[Any] = image
    if depth == 16:
        samples = image.reshape(height, width * channels, 2).astype(np.uint16)
        samples = (samples[..., 0] << 8) | samples[..., 1]
    if channels == 1:
        return samples.reshape(height, width)
    return samples.reshape(height, width, channels)
