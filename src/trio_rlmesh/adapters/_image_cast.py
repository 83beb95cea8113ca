"""Pixel value conversions: into 8-bit, out to the model's range and dtype, checked casts.

API (stable; :mod:`._image` uses all of it, and the state and action paths use
:func:`checked_cast` for their own outputs; the dtype names are :data:`._vocab.DTYPES`):

- :func:`checked_cast(values, dtype) <checked_cast>`: numpy ``astype`` for a float target;
  for an integer or bool target, refuses (:class:`CastError`) a non-integral or out-of-range
  value instead of truncating or wrapping, naming the first offending element in C order
  with RLMesh's wording.
- :func:`to_uint8(image, src_range) <to_uint8>`: any numeric image → uint8 pixels. A float
  image maps ``src_range`` (or ``[0, 1]`` without one) to ``[0, 255]``; an integer image is
  taken as pixel values; both round half to even and saturate.
- :func:`normalize(pixels, low, high) <normalize>`: uint8 → float32 ``low + (v / 255) *
  (high - low)``, computed in float32 as RLMesh does.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from .._errors import Error
from ._fmt import display_float
from ._vocab import DTYPES

__all__ = ["CastError", "checked_cast", "normalize", "to_uint8"]

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _variant(dtype: str) -> str:
    """RLMesh's name for an integer dtype in its out-of-range message: its Rust enum variant,
    which is the dtype's name capitalized (``uint16`` → ``Uint16``)."""
    return dtype.capitalize()


class CastError(Error, ValueError):
    """A value cannot be cast to the model's dtype without losing it. Also a ValueError."""


def _int_range(dtype: str) -> tuple[int, int]:
    if dtype == "bool":
        return 0, 1
    info = np.iinfo(np.dtype(dtype))
    return int(info.min), int(info.max)


def checked_cast(values: npt.ArrayLike, dtype: str) -> npt.NDArray[np.generic]:
    """``values`` as ``dtype``, refusing to truncate or wrap into an integer dtype.

    A float target is numpy's ``astype`` (overflow to float16 gives ``inf``). An integer or
    bool target takes each value as float64 and needs it integral and inside the dtype's
    range (bool: 0 or 1); values already of ``dtype`` pass through as they are.

    Raises:
        CastError: The first offending element, in C order.
        ValueError: ``dtype`` is not one of :data:`DTYPES`.

    >>> checked_cast(np.array([1.0, 2.0]), "int8").tolist()
    [1, 2]
    >>> checked_cast(np.array([0.5]), "uint8")
    Traceback (most recent call last):
    ...
    trio_rlmesh.adapters._image_cast.CastError: cannot cast non-integral value 0.5 to uint8
    """
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}")
    array = np.asarray(values)
    target = np.dtype(dtype)
    if array.dtype == target:
        return array
    if target.kind == "f":
        with np.errstate(over="ignore"):
            return array.astype(target)
    low, high = _int_range(dtype)
    if array.dtype.kind in "biu":
        if array.size and (array.min() < low or array.max() > high):
            outside = (array < low) | (array > high)
            first = int(array.reshape(-1)[int(np.argmax(outside.reshape(-1)))])
            raise CastError(f"value {first} is out of range for {_variant(dtype)}")
        return array.astype(target)
    wide = array.astype(np.float64)
    with np.errstate(invalid="ignore"):
        fractional = ~np.isfinite(wide) | (np.trunc(wide) != wide)
        outside = (wide < low) | (wide > high)
    bad = (fractional | outside).reshape(-1)
    if bad.any():
        where = int(np.argmax(bad))
        value = float(wide.reshape(-1)[where])
        if fractional.reshape(-1)[where]:
            raise CastError(f"cannot cast non-integral value {display_float(value)} to {dtype}")
        # RLMesh saturates to i64 before the range check, so a huge value reads as i64's edge.
        clamped = min(max(int(value), _INT64_MIN), _INT64_MAX)
        raise CastError(f"value {clamped} is out of range for {_variant(dtype)}")
    return wide.astype(target)


def to_uint8(
    image: npt.NDArray[np.generic], src_range: tuple[float, float] | None = None
) -> npt.NDArray[np.uint8]:
    """``image`` as uint8 pixels (returned as is when it already is uint8).

    Args:
        image: Any numeric array.
        src_range: For a float image, the ``(low, high)`` its values span (the env space's
            bounds), mapped onto ``[0, 255]``; without one (or an empty one) the image is
            taken as ``[0, 1]``. Ignored for an integer image, whose values are pixels.

    >>> to_uint8(np.array([0.0, 0.5, 1.0])).tolist()
    [0, 128, 255]
    >>> to_uint8(np.array([-1.0, 0.0, 1.0]), (-1.0, 1.0)).tolist()
    [0, 128, 255]
    """
    if image.dtype == np.uint8:
        return image  # type: ignore[return-value]
    wide = image.astype(np.float64)
    if image.dtype.kind == "f":
        if src_range is not None and src_range[1] > src_range[0]:
            low, high = src_range
            wide = (wide - low) / (high - low) * 255.0
        else:
            wide = wide * 255.0
        # NaN has no pixel value; RLMesh's saturating cast makes it 0.
        wide[np.isnan(wide)] = 0.0
    np.rint(wide, out=wide)
    np.clip(wide, 0.0, 255.0, out=wide)
    return wide.astype(np.uint8)


def normalize(pixels: npt.NDArray[np.uint8], low: float, high: float) -> npt.NDArray[np.float32]:
    """``low + (pixels / 255) * (high - low)`` in float32, operation by operation.

    >>> normalize(np.array([0, 255], np.uint8), -1.0, 1.0).tolist()
    [-1.0, 1.0]
    """
    low32, high32 = np.float32(low), np.float32(high)
    scaled = pixels.astype(np.float32)
    scaled /= np.float32(255.0)
    scaled *= high32 - low32
    scaled += low32
    return scaled
