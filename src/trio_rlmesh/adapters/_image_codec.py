"""Encoded images: decoding the PNG/JPEG bytes an observation may carry, and JPEG round trips.

API (stable; :mod:`._image` uses it):

- :func:`decode_image(data) <decode_image>` → ``(H, W, C)`` uint8 with the image's own
  channel count, as RLMesh decodes it: gray 1, gray+alpha 2, RGBA 4, anything else
  (RGB, palette, CMYK) 3; a palette with transparency is RGBA; 16-bit samples become
  ``(v + 128) // 257``. PNG and JPEG; Pillow decodes when it is installed (but 16-bit
  PNGs go through the package's own decoder, which keeps every bit), otherwise PNGs go
  through that decoder (8 or 16 bits, no palette, not interlaced) and JPEG is refused.
- :func:`jpeg_round_trip(pixels, quality) <jpeg_round_trip>`: ``(..., H, W, 3)`` uint8
  through a baseline JPEG encoder (standard IJG tables scaled to ``quality``, 4:2:0 chroma)
  and back, with Pillow. RLMesh encodes with its own Rust codec, so the artifacts agree on
  average, not pixel for pixel (the interop tests bound the difference).
- :func:`require_pillow(purpose) <require_pillow>`: Pillow's ``Image`` module, or a
  :class:`~trio_rlmesh.SpecError` naming :data:`ADAPTERS_EXTRA`.
- :class:`ImageDecodeError`: bytes that do not decode.
"""

from __future__ import annotations

import io
from types import ModuleType

import numpy as np
import numpy.typing as npt

from .._errors import Error, SpecError
from .._png import PngError, decode_png

__all__ = [
    "ADAPTERS_EXTRA",
    "ImageDecodeError",
    "decode_image",
    "jpeg_round_trip",
    "require_pillow",
]

ADAPTERS_EXTRA = "pip install 'trio-rlmesh[adapters]'"
"""How to install what JPEG support needs (Pillow)."""

_PNG = b"\x89PNG\r\n\x1a\n"
_JPEG = b"\xff\xd8\xff"


class ImageDecodeError(Error, ValueError):
    """Observation bytes that are not an image this build decodes. Also a ValueError."""


def _pillow() -> ModuleType | None:
    try:
        from PIL import Image
    except ImportError:
        return None
    return Image


def require_pillow(purpose: str) -> ModuleType:
    """Pillow's ``PIL.Image``, or a :class:`~trio_rlmesh.SpecError` saying how to get it.

    Args:
        purpose: What needs it, for the message (``"jpeg_quality"``).
    """
    image = _pillow()
    if image is None:
        raise SpecError(f"{purpose} needs Pillow: {ADAPTERS_EXTRA}")
    return image


def _from_pillow(image: object) -> npt.NDArray[np.uint8]:
    mode: str = image.mode  # type: ignore[attr-defined]
    if mode.startswith("I"):
        wide = np.asarray(image, dtype=np.int64)
        return ((np.clip(wide, 0, 65535) + 128) // 257).astype(np.uint8)[..., None]
    if mode == "P":
        transparent = "transparency" in image.info  # type: ignore[attr-defined]
        mode = "RGBA" if transparent else "RGB"
    elif mode == "1":
        mode = "L"
    elif mode == "PA":
        mode = "RGBA"
    elif mode not in ("L", "LA", "RGB", "RGBA"):
        mode = "RGB"
    if mode != image.mode:  # type: ignore[attr-defined]
        image = image.convert(mode)  # type: ignore[attr-defined]
    pixels = np.asarray(image, dtype=np.uint8)
    return pixels[..., None] if pixels.ndim == 2 else pixels


def _sixteen_bit_png(data: bytes) -> bool:
    # The IHDR chunk comes first: 8 signature bytes, length, type, width, height, bit depth.
    return data.startswith(_PNG) and len(data) > 24 and data[24] == 16


def decode_image(data: bytes) -> npt.NDArray[np.uint8]:
    """The ``(H, W, C)`` uint8 pixels of PNG or JPEG ``data``.

    Raises:
        ImageDecodeError: Not a PNG or JPEG, corrupt, or (without Pillow) a JPEG or a PNG
            the built-in decoder does not read; the message says what to install.
    """
    pillow = _pillow()
    # 16-bit PNGs: Pillow keeps only the high byte of colour samples, RLMesh rounds
    # (v + 128) // 257; the built-in decoder reads the samples themselves.
    if pillow is not None and data.startswith((_PNG, _JPEG)) and not _sixteen_bit_png(data):
        try:
            with pillow.open(io.BytesIO(data)) as image:
                image.load()
                return _from_pillow(image)
        except (OSError, ValueError, SyntaxError) as exc:
            raise ImageDecodeError(f"could not decode image bytes: {exc}") from None
    if data.startswith(_PNG):
        try:
            pixels = decode_png(data, sixteen_bit=True)
        except PngError as exc:
            raise ImageDecodeError(
                f"could not decode image bytes: {exc}; Pillow reads every PNG: {ADAPTERS_EXTRA}"
            ) from None
        if pixels.dtype == np.uint16:
            pixels = ((pixels.astype(np.uint32) + 128) // 257).astype(np.uint8)
        return pixels[..., None] if pixels.ndim == 2 else pixels
    if data.startswith(_JPEG):
        raise ImageDecodeError(f"decoding JPEG observations needs Pillow: {ADAPTERS_EXTRA}")
    raise ImageDecodeError(
        f"could not decode image bytes: {len(data)} bytes that are neither PNG nor JPEG"
    )


def jpeg_round_trip(pixels: npt.NDArray[np.uint8], quality: int) -> npt.NDArray[np.uint8]:
    """``pixels`` (``(..., H, W, 3)`` uint8) encoded as a baseline 4:2:0 JPEG and decoded.

    Raises:
        SpecError: Pillow is missing (the message names the extra).
        ValueError: The image does not have 3 channels.
    """
    pillow = require_pillow("jpeg_quality")
    if pixels.shape[-1] != 3:
        raise ValueError(f"a JPEG round trip needs a 3-channel image, got shape {pixels.shape}")
    frames = pixels.reshape((-1, *pixels.shape[-3:]))
    out = np.empty_like(frames)
    for index, frame in enumerate(frames):
        encoded = io.BytesIO()
        pillow.fromarray(np.ascontiguousarray(frame)).save(
            encoded, format="JPEG", quality=quality, subsampling=2
        )
        encoded.seek(0)
        with pillow.open(encoded) as image:
            out[index] = np.asarray(image.convert("RGB"), dtype=np.uint8)
    return out.reshape(pixels.shape)
