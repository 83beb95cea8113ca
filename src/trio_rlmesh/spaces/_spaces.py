"""The space model: the seven kinds of ``SpaceSpec`` rlmesh-wire-v1 can carry.

Instances are frozen and hashable. Their ``__init__`` stores what it is given (after light
normalisation of shapes and containers); build from loose inputs with the named constructors
(:meth:`Box.from_bounds`, :meth:`Dict.from_pairs`). Whether a space is acceptable to a real peer
is decided by :func:`validate`, which applies the reference rules (spec §7.3).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Literal

import attrs
import numpy as np
import numpy.typing as npt

from ._dtypes import DType, dtype_range, fits_dtype
from ._errors import ROOT, SpaceError, child_path, index_path

__all__ = [
    "Box",
    "Dict",
    "Discrete",
    "MultiBinary",
    "MultiDiscrete",
    "Space",
    "Text",
    "Tuple",
    "iter_leaves",
    "leaf_paths",
    "validate",
]

BoundsKind = Literal["unbounded", "uniform", "elementwise"]


def _to_shape(value: Iterable[int]) -> tuple[int, ...]:
    return tuple(operator.index(dim) for dim in value)


def _array_key(array: npt.NDArray[Any]) -> bytes:
    """The bytes that decide a space's array field in ``==`` and ``hash`` (the space's
    ``shape`` and ``dtype`` fields decide the rest): equal values give equal bytes, with
    every NaN alike and ``-0.0`` equal to ``0.0``, as ``np.array_equal(equal_nan=True)``.
    Computed once per space, so comparing spaces (done per predict when a model groups
    requests by space) costs a bytes comparison, not an array comparison."""
    if array.dtype.kind == "f":
        array = np.where(np.isnan(array), np.nan, array) + 0.0  # one NaN; -0.0 + 0.0 is 0.0
    return array.tobytes()


def _read_only(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    if array.flags.writeable:
        array = array.copy()
        array.flags.writeable = False
    return array


@attrs.frozen
class Space:
    """Base of every space kind. Not instantiated directly.

    Every space has a wire ``shape`` and ``dtype`` (spec §7.1): Box and MultiBinary store
    theirs, the other kinds derive them.
    """

    # The codec's compiled plan for this space object, filled on first use (see _codec.py).
    _codec_plan: Any = attrs.field(default=None, init=False, eq=False, hash=False, repr=False)

    @property
    def shape(self) -> tuple[int, ...]:
        """The ``SpaceSpec.shape`` a real peer emits for this space."""
        return ()

    @property
    def dtype(self) -> DType:
        """The ``SpaceSpec.dtype`` a real peer emits for this space."""
        return DType.UNSPECIFIED


def _to_dtype(value: DType | npt.DTypeLike) -> DType:
    return value if isinstance(value, DType) else DType.from_numpy(value)


def _bound_array(value: npt.ArrayLike, dtype: DType, which: str) -> npt.NDArray[Any]:
    """``value`` converted to ``dtype`` (any shape); integers must convert exactly."""
    array = np.asarray(value)
    if array.dtype.kind not in "biuf":
        raise SpaceError(f"Box {which} must be numeric, got numpy dtype {array.dtype}")
    target = dtype.numpy_dtype
    if dtype.is_float:
        with np.errstate(over="ignore"):
            return array.astype(target)
    low, high = dtype_range(dtype)
    if array.dtype.kind == "f":
        if np.isnan(array).any():
            raise SpaceError(f"Box {which} contains NaN; bounds must be numbers")
        # Infinite bounds on an integer Box mean "the whole dtype range", as in gymnasium.
        array = np.where(np.isneginf(array), low, np.where(np.isposinf(array), high, array))
        if (array != np.trunc(array)).any():
            raise SpaceError(
                f"Box {which} has non-integral values for integer dtype {dtype.name}; "
                "integer bounds must be whole numbers"
            )
    if array.size and array.dtype.kind != "b":
        lowest, highest = int(array.min()), int(array.max())
        if lowest < low or highest > high:
            raise SpaceError(
                f"Box {which} does not fit dtype {dtype.name} (values {lowest}..{highest}, "
                f"dtype range {low}..{high})"
            )
    return array.astype(target)


@attrs.frozen(repr=False)
class Box(Space):
    """A (possibly bounded) tensor of one of the twelve wire dtypes.

    ``low`` and ``high`` are read-only arrays of the Box's numpy dtype and exactly its shape
    (full-shape broadcast views, so uniform bounds cost no memory). Build one with
    :meth:`from_bounds`; ``__init__`` requires exact arrays.

    Example:
        >>> box = Box.from_bounds(-1.0, 1.0, shape=(2, 3), dtype=DType.FLOAT32)
        >>> box.bounds_kind, box.low.dtype.str
        ('uniform', '<f4')
    """

    low: npt.NDArray[Any] = attrs.field(eq=False)
    """Lower bounds, read-only, dtype ``dtype.numpy_dtype``, shape ``shape``."""
    high: npt.NDArray[Any] = attrs.field(eq=False)
    """Upper bounds, read-only, dtype ``dtype.numpy_dtype``, shape ``shape``."""
    shape: tuple[int, ...] = attrs.field(converter=_to_shape)
    """Tensor shape of one value."""
    dtype: DType = attrs.field(converter=DType)
    """Element type."""
    _bounds: tuple[bytes, bytes] = attrs.field(init=False, repr=False)
    """``low`` and ``high`` as they compare (:func:`_array_key`)."""
    _bounds_kind: BoundsKind = attrs.field(init=False, eq=False, repr=False)
    # One lane's bounds as Python lists, filled on first use by the conformance check.
    _conformance_bounds: Any = attrs.field(
        default=None, init=False, eq=False, hash=False, repr=False
    )

    def __attrs_post_init__(self) -> None:
        target = self.dtype.numpy_dtype
        for name in ("low", "high"):
            array = getattr(self, name)
            if not isinstance(array, np.ndarray) or array.dtype != target:
                raise TypeError(
                    f"Box.{name} must be a numpy array of dtype {target}; "
                    "use Box.from_bounds() to convert and broadcast bounds"
                )
            if array.shape != self.shape:
                raise TypeError(
                    f"Box.{name} has shape {array.shape}, the Box has shape {self.shape}; "
                    "use Box.from_bounds() to broadcast bounds"
                )
            object.__setattr__(self, name, _read_only(array))
        object.__setattr__(self, "_bounds", (_array_key(self.low), _array_key(self.high)))
        object.__setattr__(self, "_bounds_kind", self._find_bounds_kind())

    @classmethod
    def from_bounds(
        cls,
        low: npt.ArrayLike,
        high: npt.ArrayLike,
        shape: Iterable[int] | None = None,
        dtype: DType | npt.DTypeLike = DType.FLOAT32,
    ) -> Box:
        """A Box from scalar or array bounds, broadcast numpy-style to ``shape``.

        Args:
            low: lower bound(s); ``-inf`` allowed.
            high: upper bound(s); ``+inf`` allowed.
            shape: the value shape; defaults to the broadcast shape of ``low`` and ``high``
                (so two scalars give shape ``()``, which :func:`validate` rejects).
            dtype: a :class:`DType` or anything ``np.dtype`` accepts.

        Float bounds are rounded to the dtype (values too large become infinities). For integer
        and bool dtypes, infinite bounds become the dtype's limits and every other bound must be
        integral and representable.

        Raises:
            SpaceError: bounds that cannot be expressed in ``dtype`` or broadcast to ``shape``.
        """
        wire_dtype = _to_dtype(dtype)
        low_array = _bound_array(low, wire_dtype, "low")
        high_array = _bound_array(high, wire_dtype, "high")
        try:
            target_shape = (
                np.broadcast_shapes(low_array.shape, high_array.shape)
                if shape is None
                else _to_shape(shape)
            )
            low_array = np.broadcast_to(low_array, target_shape)
            high_array = np.broadcast_to(high_array, target_shape)
        except ValueError as exc:
            raise SpaceError(
                f"Box bounds of shapes {np.shape(low)} and {np.shape(high)} do not broadcast "
                f"to shape {shape}: {exc}"
            ) from None
        return cls(low_array, high_array, target_shape, wire_dtype)

    @property
    def bounds_kind(self) -> BoundsKind:
        """How a Python peer would put the bounds on the wire (spec §7.2).

        ``"unbounded"`` for a float Box whose lows are all -inf and highs all +inf; else
        ``"uniform"`` when all lows are bit-identical and all highs are bit-identical; else
        ``"elementwise"``.
        """
        return self._bounds_kind

    def _find_bounds_kind(self) -> BoundsKind:
        if self.dtype.is_float and np.isneginf(self.low).all() and np.isposinf(self.high).all():
            return "unbounded"
        if _all_bits_equal(self.low) and _all_bits_equal(self.high):
            return "uniform"
        return "elementwise"

    def __repr__(self) -> str:
        if self.low.size and self.bounds_kind != "elementwise":
            low, high = self.low.flat[0], self.high.flat[0]
        else:
            low, high = self.low, self.high
        return f"Box(low={low!r}, high={high!r}, shape={self.shape}, dtype={self.dtype.name})"


def _all_bits_equal(array: npt.NDArray[Any]) -> bool:
    if array.size == 0:
        return True
    bits = array.view(f"u{array.dtype.itemsize}")
    return bool((bits == bits.flat[0]).all())


@attrs.frozen
class Discrete(Space):
    """One integer in ``start, ..., start + n - 1`` (values on the wire are absolute).

    Example:
        >>> Discrete(3, start=-1)
        Discrete(n=3, start=-1, dtype=<DType.INT64: 9>)
    """

    n: int = attrs.field(converter=operator.index)
    """Number of values."""
    start: int = attrs.field(default=0, converter=operator.index)
    """Smallest value."""
    dtype: DType = attrs.field(default=DType.INT64, converter=DType)
    """Element type: INT64 (what Python peers emit), INT32 or UINT8."""


@attrs.frozen
class MultiBinary(Space):
    """A tensor of 0/1 values, one byte per element on the wire.

    Example:
        >>> MultiBinary((2, 3)).shape
        (2, 3)
    """

    shape: tuple[int, ...] = attrs.field(converter=_to_shape)
    """Tensor shape of one value."""
    dtype: DType = attrs.field(default=DType.UINT8, converter=DType)
    """Element type: a one-byte type (UINT8, what Python peers emit; INT8 or BOOL)."""


def _to_nvec(value: npt.ArrayLike) -> npt.NDArray[np.int64]:
    array = np.asarray(value)
    if array.dtype.kind not in "iu":
        raise TypeError(f"MultiDiscrete nvec must hold integers, got numpy dtype {array.dtype}")
    if array.size and array.dtype.kind == "u" and int(array.max()) > np.iinfo(np.int64).max:
        raise TypeError("MultiDiscrete nvec does not fit int64")
    return _read_only(array.astype(np.int64))


@attrs.frozen
class MultiDiscrete(Space):
    """A tensor of integers, element ``i`` in ``0 .. nvec[i] - 1``; ``shape == nvec.shape``.

    Example:
        >>> MultiDiscrete([[2, 3], [4, 5]]).shape
        (2, 2)
    """

    nvec: npt.NDArray[np.int64] = attrs.field(converter=_to_nvec, eq=False)
    """Number of values per element (read-only int64 array, any rank)."""
    dtype: DType = attrs.field(default=DType.INT64, converter=DType)
    """Element type: an integer type (INT64 is what Python peers emit)."""
    _nvec: tuple[tuple[int, ...], bytes] = attrs.field(init=False, repr=False)
    """``nvec`` as it compares: its shape and :func:`_array_key`."""

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_nvec", (self.nvec.shape, _array_key(self.nvec)))

    @property
    def shape(self) -> tuple[int, ...]:
        """``nvec.shape``."""
        return self.nvec.shape


@attrs.frozen
class Text(Space):
    """A string of ``min_length`` to ``max_length`` characters.

    ``charset == ""`` means unrestricted; otherwise only its characters are allowed.

    Example:
        >>> Text(8, charset="abc")
        Text(min_length=1, max_length=8, charset='abc')
    """

    min_length: int = attrs.field(default=1, converter=operator.index, kw_only=True)
    """Smallest length in characters (at least 1 on the wire)."""
    max_length: int = attrs.field(converter=operator.index)
    """Largest length in characters."""
    charset: str = attrs.field(default="", kw_only=True)
    """Allowed characters; empty for any."""

    @property
    def dtype(self) -> DType:
        """Always UINT8 for Text."""
        return DType.UINT8


def _to_pairs(
    value: Mapping[str, Space] | Iterable[tuple[str, Space]],
) -> tuple[tuple[str, Space], ...]:
    items = value.items() if isinstance(value, Mapping) else value
    return tuple((key, space) for key, space in items)


@attrs.frozen(cache_hash=True)
class Dict(Space):
    """Named children in a fixed order (the order of the wire ``keys``; never re-sorted).

    Example:
        >>> d = Dict({"b": Discrete(2), "a": Text(4)})
        >>> d.keys()
        ('b', 'a')
    """

    entries: tuple[tuple[str, Space], ...] = attrs.field(converter=_to_pairs)
    """``(key, space)`` pairs in declared order."""

    @classmethod
    def from_pairs(cls, keys: Iterable[str], spaces: Iterable[Space]) -> Dict:
        """A Dict from the wire's parallel ``keys`` and ``spaces`` arrays.

        Raises:
            SpaceError: if the two have different lengths.
        """
        key_list, space_list = list(keys), list(spaces)
        if len(key_list) != len(space_list):
            raise SpaceError(
                f"Dict has {len(key_list)} keys but {len(space_list)} spaces; "
                "they must pair up one to one"
            )
        return cls(zip(key_list, space_list, strict=True))

    def keys(self) -> tuple[str, ...]:
        """The keys in declared order."""
        return tuple(key for key, _ in self.entries)

    def values(self) -> tuple[Space, ...]:
        """The child spaces in declared order."""
        return tuple(space for _, space in self.entries)

    def items(self) -> tuple[tuple[str, Space], ...]:
        """``(key, space)`` pairs in declared order."""
        return self.entries

    def __getitem__(self, key: str) -> Space:
        for name, space in self.entries:
            if name == key:
                return space
        raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        return any(name == key for name, _ in self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self) -> Iterator[str]:
        return (key for key, _ in self.entries)

    def __repr__(self) -> str:
        inner = ", ".join(f"{key!r}: {space!r}" for key, space in self.entries)
        return f"Dict({{{inner}}})"


def _to_spaces(value: Iterable[Space]) -> tuple[Space, ...]:
    return tuple(value)


@attrs.frozen(cache_hash=True)
class Tuple(Space):
    """Positional children.

    Example:
        >>> Tuple([Discrete(2), Text(3)])[0]
        Discrete(n=2, start=0, dtype=<DType.INT64: 9>)
    """

    spaces: tuple[Space, ...] = attrs.field(converter=_to_spaces)
    """The children in order."""

    def __getitem__(self, index: int) -> Space:
        return self.spaces[index]

    def __len__(self) -> int:
        return len(self.spaces)

    def __iter__(self) -> Iterator[Space]:
        return iter(self.spaces)


# --------------------------------------------------------------------------------------------
# Validation (spec §7.3)


def validate(space: Space) -> None:
    """Check ``space`` against the rules a real rlmesh peer applies to a ``SpaceSpec``.

    Raises:
        SpaceError: naming the offending node's path and the rule it breaks.

    Example:
        >>> validate(Dict({"pos": Box.from_bounds(-1.0, 1.0, shape=(2,)), "id": Discrete(4)}))
    """
    _validate(space, ROOT)


@functools.singledispatch
def _validate(space: object, path: str) -> None:
    raise SpaceError(f"{type(space).__name__} is not a space", path=path)


def _check_dims(kind: str, shape: tuple[int, ...], path: str) -> None:
    if not shape:
        raise SpaceError(
            f"{kind} shape must have rank >= 1, got shape (); use shape (1,) for a single value",
            path=path,
        )
    if any(dim <= 0 for dim in shape):
        raise SpaceError(f"{kind} dims must all be > 0, got shape {shape}", path=path)


@_validate.register
def _(space: Box, path: str) -> None:
    _check_dims("Box", space.shape, path)
    if space.dtype.is_float and (np.isnan(space.low).any() or np.isnan(space.high).any()):
        raise SpaceError("Box bounds must not be NaN; use -inf/+inf for no bound", path=path)
    bad = space.low > space.high
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise SpaceError(
            f"Box low must be <= high everywhere; at index {where} low={space.low[where]!r} > "
            f"high={space.high[where]!r}",
            path=path,
        )


_DISCRETE_DTYPES = (DType.INT64, DType.INT32, DType.UINT8)


@_validate.register
def _(space: Discrete, path: str) -> None:
    if space.dtype not in _DISCRETE_DTYPES:
        raise SpaceError(
            f"Discrete dtype must be INT64, INT32 or UINT8, got {space.dtype.name}", path=path
        )
    if space.n <= 0:
        raise SpaceError(f"Discrete n must be > 0, got {space.n}", path=path)
    last = space.start + space.n - 1
    for name, value in (("start", space.start), ("start + n - 1", last)):
        if not fits_dtype(space.dtype, value):
            low, high = dtype_range(space.dtype)
            raise SpaceError(
                f"Discrete {name} = {value} does not fit dtype {space.dtype.name} "
                f"({low}..{high}); choose a wider dtype",
                path=path,
            )


@_validate.register
def _(space: MultiBinary, path: str) -> None:
    _check_dims("MultiBinary", space.shape, path)
    if space.dtype.width != 1:
        raise SpaceError(
            "MultiBinary dtype must be one byte wide (UINT8, INT8 or BOOL), "
            f"got {space.dtype.name}",
            path=path,
        )


@_validate.register
def _(space: MultiDiscrete, path: str) -> None:
    _check_dims("MultiDiscrete", space.shape, path)
    if not space.dtype.is_integer:
        raise SpaceError(
            f"MultiDiscrete dtype must be an integer type, got {space.dtype.name}", path=path
        )
    if (space.nvec <= 0).any():
        raise SpaceError(
            f"MultiDiscrete nvec must all be > 0, got {space.nvec.tolist()}", path=path
        )
    largest = int(space.nvec.max()) - 1
    if not fits_dtype(space.dtype, largest):
        raise SpaceError(
            f"MultiDiscrete value {largest} (max nvec - 1) does not fit dtype "
            f"{space.dtype.name}; choose a wider dtype",
            path=path,
        )


@_validate.register
def _(space: Text, path: str) -> None:
    if not 0 < space.min_length <= space.max_length:
        raise SpaceError(
            "Text lengths must satisfy 0 < min_length <= max_length, got "
            f"min_length={space.min_length}, max_length={space.max_length}",
            path=path,
        )


@_validate.register
def _(space: Dict, path: str) -> None:
    seen: set[str] = set()
    for key, child in space.entries:
        if not isinstance(key, str) or not key:
            raise SpaceError(f"Dict keys must be non-empty strings, got {key!r}", path=path)
        if key in seen:
            raise SpaceError(f"Dict key {key!r} appears twice; keys must be unique", path=path)
        seen.add(key)
        _validate(child, child_path(path, key))


@_validate.register
def _(space: Tuple, path: str) -> None:
    for index, child in enumerate(space.spaces):
        _validate(child, index_path(path, index))


# --------------------------------------------------------------------------------------------
# Leaves (spec §8.1)


def iter_leaves(space: Space, path: str = ROOT) -> Iterator[tuple[str, Space]]:
    """The fundamental leaves of ``space`` as ``(path, leaf)`` in wire order.

    Depth-first pre-order: Dict children in declared key order, Tuple children by index. An
    empty Dict or Tuple has no leaves.

    Example:
        >>> space = Dict({"b": Box.from_bounds(0, 1, (2,)), "a": Tuple([Discrete(4), Text(3)])})
        >>> [p for p, _ in iter_leaves(space)]
        ['$.b', '$.a[0]', '$.a[1]']
    """
    if isinstance(space, Dict):
        for key, child in space.entries:
            yield from iter_leaves(child, child_path(path, key))
    elif isinstance(space, Tuple):
        for index, child in enumerate(space.spaces):
            yield from iter_leaves(child, index_path(path, index))
    else:
        yield path, space


def leaf_paths(space: Space) -> list[str]:
    """The paths of ``space``'s leaves in wire order (see :func:`iter_leaves`)."""
    return [path for path, _ in iter_leaves(space)]
