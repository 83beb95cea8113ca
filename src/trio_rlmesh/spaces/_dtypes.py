"""Wire data types (``rlmesh.spaces.v1.DataType``) and their numpy counterparts."""

from __future__ import annotations

import enum
from typing import Any

import numpy as np
import numpy.typing as npt

from ._errors import SpaceError

__all__ = ["DType", "dtype_range", "fits_dtype"]


class DType(enum.IntEnum):
    """An element type on the wire; the values are the ``DataType`` enum numbers.

    Every concrete type maps to one little-endian numpy dtype, and multi-byte values always
    travel little-endian.

    Example:
        >>> DType.FLOAT32.width, DType.FLOAT32.numpy_dtype.str
        (4, '<f4')
        >>> DType.from_numpy("uint8")
        <DType.UINT8: 2>
    """

    UNSPECIFIED = 0
    BOOL = 1
    UINT8 = 2
    UINT16 = 3
    UINT32 = 4
    UINT64 = 5
    INT8 = 6
    INT16 = 7
    INT32 = 8
    INT64 = 9
    FLOAT16 = 10
    FLOAT32 = 11
    FLOAT64 = 12

    @property
    def width(self) -> int:
        """Bytes per element (0 for UNSPECIFIED)."""
        return _WIDTHS[self]

    @property
    def numpy_dtype(self) -> np.dtype[Any]:
        """The little-endian numpy dtype (``np.dtype('<f2')`` for FLOAT16, ...).

        Raises:
            SpaceError: for UNSPECIFIED, which has no element type.
        """
        try:
            return _TO_NUMPY[self]
        except KeyError:
            raise SpaceError("DType.UNSPECIFIED has no numpy dtype") from None

    @property
    def is_bool(self) -> bool:
        """True for BOOL."""
        return self is DType.BOOL

    @property
    def is_integer(self) -> bool:
        """True for the signed and unsigned integer types (not BOOL)."""
        return DType.UINT8 <= self <= DType.INT64

    @property
    def is_signed(self) -> bool:
        """True for INT8..INT64 and the float types."""
        return self >= DType.INT8

    @property
    def is_float(self) -> bool:
        """True for FLOAT16, FLOAT32 and FLOAT64."""
        return self >= DType.FLOAT16

    @classmethod
    def from_numpy(cls, dtype: npt.DTypeLike) -> DType:
        """The wire type for a numpy dtype of either byte order.

        Raises:
            SpaceError: for dtypes rlmesh-wire-v1 cannot carry (complex, strings, float128, ...).
        """
        np_dtype = np.dtype(dtype)
        found = _FROM_KIND_SIZE.get((np_dtype.kind, np_dtype.itemsize))
        if found is None:
            raise SpaceError(
                f"numpy dtype {np_dtype} has no rlmesh-wire-v1 DataType; use one of bool, "
                "(u)int8/16/32/64 or float16/32/64"
            )
        return found


_WIDTHS: dict[DType, int] = {
    DType.UNSPECIFIED: 0,
    DType.BOOL: 1,
    DType.UINT8: 1,
    DType.INT8: 1,
    DType.UINT16: 2,
    DType.INT16: 2,
    DType.FLOAT16: 2,
    DType.UINT32: 4,
    DType.INT32: 4,
    DType.FLOAT32: 4,
    DType.UINT64: 8,
    DType.INT64: 8,
    DType.FLOAT64: 8,
}

_TO_NUMPY: dict[DType, np.dtype[Any]] = {
    DType.BOOL: np.dtype("?"),
    DType.UINT8: np.dtype("u1"),
    DType.UINT16: np.dtype("<u2"),
    DType.UINT32: np.dtype("<u4"),
    DType.UINT64: np.dtype("<u8"),
    DType.INT8: np.dtype("i1"),
    DType.INT16: np.dtype("<i2"),
    DType.INT32: np.dtype("<i4"),
    DType.INT64: np.dtype("<i8"),
    DType.FLOAT16: np.dtype("<f2"),
    DType.FLOAT32: np.dtype("<f4"),
    DType.FLOAT64: np.dtype("<f8"),
}

_FROM_KIND_SIZE: dict[tuple[str, int], DType] = {
    (np_dtype.kind, np_dtype.itemsize): wire for wire, np_dtype in _TO_NUMPY.items()
}

_RANGES: dict[DType, tuple[int, int]] = {DType.BOOL: (0, 1)}
for _wire, _np_dtype in _TO_NUMPY.items():
    if _wire.is_integer:
        _info = np.iinfo(_np_dtype)
        _RANGES[_wire] = (int(_info.min), int(_info.max))


def dtype_range(dtype: DType) -> tuple[int, int]:
    """The inclusive ``(min, max)`` integer range of an integer or BOOL type.

    Raises:
        SpaceError: for float types and UNSPECIFIED.
    """
    try:
        return _RANGES[dtype]
    except KeyError:
        raise SpaceError(f"{dtype.name} is not an integer type") from None


def fits_dtype(dtype: DType, value: int) -> bool:
    """Whether the integer ``value`` is representable in the integer (or BOOL) type ``dtype``."""
    low, high = dtype_range(dtype)
    return low <= value <= high
