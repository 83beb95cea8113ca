"""The SpaceValue codec: values of a space to and from a list of leaf byte strings (spec §8).

Theory of operation. A ``SpaceValue`` is a flat list of ``bytes``, one per fundamental leaf
of the space in depth-first pre-order (spec §8.1). The codec works on that list only; the
protocol layer wraps it in the message.

* **Batched form** (the only form on the wire): every value is a batch of ``n`` lanes and
  ``n`` always comes from the caller. A fixed-stride leaf (Box, Discrete, MultiBinary,
  MultiDiscrete) is the row-major ``(n, *shape)`` array in the declared dtype, little-endian;
  a Text leaf is ``[u64 count][u64 byte_len] * count`` followed by the UTF-8 bodies.
* **Lanes form**: a list of ``n`` single-lane values, checked lane by lane, then stacked and
  encoded as one batch (the reference's "partial values").
* **Single-value form** (spec §8.4, never on the wire): identical to a batch of one, except
  that a Text leaf is the raw UTF-8 with no header.

Each space object gets a compiled plan the first time it is used: one node per space-tree
node, knowing its path, its leaf index, its numpy dtype and per-lane stride. The space is
validated once, when the plan is built, so the per-step calls do no tree walking beyond the
plan's own nodes. Encoding a single Box leaf is a dtype check and ``tobytes()``; decoding it is
a length check and ``np.frombuffer(...).reshape(...)``.
"""

from __future__ import annotations

import operator
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ._dtypes import DType, dtype_range
from ._errors import ROOT, CodecError, child_path, index_path
from ._spaces import Box, Dict, Discrete, MultiBinary, MultiDiscrete, Space, Text, Tuple, validate

__all__ = [
    "LeafBuffer",
    "decode_batch",
    "decode_lanes",
    "decode_value",
    "encode_batch",
    "encode_lanes",
    "encode_value",
    "stack_lanes",
    "unstack",
]

LeafBuffer = bytes | bytearray | memoryview
"""What a decoded leaf may be: any contiguous bytes-like object."""

_U64 = struct.Struct("<Q")


# --------------------------------------------------------------------------------------------
# Shared helpers


def _nbytes(buf: object, path: str) -> int:
    if type(buf) is bytes:
        return len(buf)
    if isinstance(buf, memoryview):
        if not buf.c_contiguous:
            raise CodecError(
                "leaf memoryview is not contiguous",
                path=path,
                expected="a C-contiguous buffer",
                actual="a strided memoryview",
            )
        return buf.nbytes
    if isinstance(buf, bytearray):
        return len(buf)
    raise CodecError(
        "leaf is not bytes-like",
        path=path,
        expected="bytes, bytearray or memoryview",
        actual=type(buf).__name__,
    )


def _as_array(value: Any, path: str) -> npt.NDArray[Any]:
    if type(value) is np.ndarray:
        return value
    try:
        return np.asarray(value)
    except (ValueError, TypeError) as exc:
        raise CodecError(
            "value is not a rectangular array", path=path, expected="an array-like", actual=exc
        ) from None


def _first_index(mask: npt.NDArray[np.bool_]) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argwhere(mask)[0])


def _where(index: tuple[int, ...]) -> str:
    return f"lane {index[0]}" + (f" element {index[1:]}" if len(index) > 1 else "")


_SMALL = 16
"""Arrays up to this many elements are scanned in Python: a numpy reduction's fixed cost
(microseconds) is far above the scan itself for a one-lane Discrete action."""


def _min_max(array: npt.NDArray[Any]) -> tuple[int, int]:
    """``(min, max)`` of a numeric, non-empty, NaN-free ``array``, truncated to int."""
    if array.size <= _SMALL:
        values = array.ravel().tolist()
        return int(min(values)), int(max(values))
    return int(array.min()), int(array.max())


def _check_range(array: npt.NDArray[Any], low: int, high: int, what: str, path: str) -> None:
    """Raise unless every element of the (numeric, non-empty) ``array`` is in ``low..high``."""
    lowest, highest = _min_max(array)
    if lowest >= low and highest <= high:
        return
    index = _first_index(_outside(array, low, high))
    raise CodecError(
        f"{_where(index)} is outside {what}",
        path=path,
        expected=f"values in {low}..{high}",
        actual=array[index].item(),
    )


def _outside(array: npt.NDArray[Any], low: int, high: int) -> npt.NDArray[np.bool_]:
    """Mask of elements outside ``low..high``, exact for every integer dtype and numpy version."""
    if array.dtype.kind == "f":
        return np.asarray((array < low) | (array > high))
    info = np.iinfo(array.dtype)
    mask = np.zeros(array.shape, bool)
    if low > info.max or high < info.min:
        return ~mask
    # Only limits inside the array's own range can exclude anything, and those are exact.
    if low > info.min:
        mask |= array < array.dtype.type(low)
    if high < info.max:
        mask |= array > array.dtype.type(high)
    return mask


def _coerce(array: npt.NDArray[Any], wire: DType, path: str) -> npt.NDArray[Any]:
    """``array`` converted to the wire dtype by the rules of spec §8.5."""
    target = wire.numpy_dtype
    source = array.dtype
    if source == target:
        return array
    kind = source.kind
    if kind not in "biuf":
        raise CodecError(
            "values must be numeric", path=path, expected=wire.name, actual=f"numpy {source}"
        )
    if wire.is_float:
        with np.errstate(over="ignore"):
            return array.astype(target)
    if kind == "b":
        return array.astype(target)
    low, high = dtype_range(wire)
    if kind == "f":
        if array.size:
            finite = np.isfinite(array)
            if not finite.all():
                index = _first_index(~finite)
                raise CodecError(
                    f"{_where(index)} is not finite; floats for an integer dtype must be "
                    "finite whole numbers",
                    path=path,
                    expected=wire.name,
                    actual=array[index].item(),
                )
            fractional = array != np.trunc(array)
            if fractional.any():
                index = _first_index(fractional)
                raise CodecError(
                    f"{_where(index)} is not a whole number; floats for an integer dtype must "
                    "be integral",
                    path=path,
                    expected=wire.name,
                    actual=array[index].item(),
                )
            _check_range(array, low, high, f"the range of {wire.name}", path)
        return array.astype(target)
    if array.size and not np.can_cast(source, target):
        _check_range(array, low, high, f"the range of {wire.name}", path)
    return array.astype(target)


def _shape_error(path: str, expected: tuple[int, ...], actual: tuple[int, ...]) -> CodecError:
    return CodecError("value has the wrong shape", path=path, expected=expected, actual=actual)


def _check_n(n: int) -> int:
    if type(n) is not int:
        n = operator.index(n)
    if n < 0:
        raise CodecError("lane count must be >= 0", expected="n >= 0", actual=n)
    return n


def _is_sequence(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str | bytes | bytearray)


# --------------------------------------------------------------------------------------------
# Plan nodes


class _Node:
    """One compiled space-tree node. ``first`` is its first leaf index, ``count`` its leaves."""

    __slots__ = ("count", "first", "path")

    def __init__(self, path: str, first: int, count: int) -> None:
        self.path = path
        self.first = first
        self.count = count

    def encode(self, value: Any, n: int, out: list[bytes], framed: bool) -> None:
        raise NotImplementedError

    def decode(self, leaves: Sequence[LeafBuffer], n: int, framed: bool) -> Any:
        raise NotImplementedError

    def stack(self, lanes: Sequence[Any], copy: bool = True) -> Any:
        """The lanes as one batch; ``copy=False`` lets the batch share memory with a lane."""
        raise NotImplementedError

    def encode_lanes(self, lanes: Sequence[Any], out: list[bytes], framed: bool) -> None:
        """``encode(stack(lanes))``: the lanes checked one by one, then encoded as a batch."""
        self.encode(self.stack(lanes, copy=False), len(lanes), out, framed)

    def unstack(self, batch: Any, n: int) -> list[Any]:
        raise NotImplementedError

    def carry(self, value: Any, n: int) -> Any:
        """``decode(encode(value))`` without the bytes: the same checks, conversions and
        errors as :meth:`encode`, and the value :meth:`decode` would give back."""
        raise NotImplementedError

    def carry_lanes(self, lanes: Sequence[Any]) -> Any:
        """``carry(stack(lanes))``: the lanes checked one by one, then carried as a batch."""
        return self.carry(self.stack(lanes, copy=False), len(lanes))


class _Fixed(_Node):
    """A fixed-stride leaf: Box, Discrete, MultiBinary or MultiDiscrete."""

    __slots__ = ("kind", "np_dtype", "shape", "stride", "wire")

    def __init__(self, path: str, first: int, kind: str, shape: tuple[int, ...], wire: DType):
        super().__init__(path, first, 1)
        self.kind = kind
        self.shape = shape
        self.wire = wire
        self.np_dtype = wire.numpy_dtype
        self.stride = int(np.prod(shape, dtype=np.int64)) * wire.width

    # Whether decode must run check_domain (False when from_buffer already guarantees it).
    check_decoded = True

    def check_domain(self, array: npt.NDArray[Any]) -> None:
        """Raise if a non-empty batch of the declared dtype holds a value outside the space."""

    def encode(self, value: Any, n: int, out: list[bytes], framed: bool) -> None:
        array = _as_array(value, self.path)
        if array.shape != (n, *self.shape):
            raise _shape_error(self.path, (n, *self.shape), array.shape)
        if array.dtype != self.np_dtype:
            array = _coerce(array, self.wire, self.path)
        if n:
            self.check_domain(array)
        out.append(array.tobytes())

    def carry(self, value: Any, n: int) -> Any:
        array = _as_array(value, self.path)
        if array.shape != (n, *self.shape):
            raise _shape_error(self.path, (n, *self.shape), array.shape)
        return self._snapshot(array, n)

    def _snapshot(self, array: npt.NDArray[Any], n: int) -> Any:
        # A copy either way (astype copies), so the carried batch never shares memory with
        # the caller's arrays; read-only, like a decoded leaf.
        array = (
            array.copy() if array.dtype == self.np_dtype else _coerce(array, self.wire, self.path)
        )
        if n:
            self.check_domain(array)
        array.flags.writeable = False
        return array

    def carry_lanes(self, lanes: Sequence[Any]) -> Any:
        if len(lanes) != 1:
            return super().carry_lanes(lanes)
        # One lane (every single-env predict): stack-then-carry in one pass, as encode_lanes.
        return self._snapshot(self._one_lane(lanes[0]), 1)

    def decode(self, leaves: Sequence[LeafBuffer], n: int, framed: bool) -> Any:
        buf = leaves[self.first]
        size = _nbytes(buf, self.path)
        if size != n * self.stride:
            raise CodecError(
                f"{self.kind} leaf has the wrong byte length for {n} lane(s) of "
                f"{self.stride} bytes",
                path=self.path,
                expected=f"{n * self.stride} bytes",
                actual=f"{size} bytes",
            )
        if not size:
            return np.zeros((n, *self.shape), self.np_dtype)
        array = self.from_buffer(buf).reshape((n, *self.shape))
        if self.check_decoded:
            self.check_domain(array)
        return array

    def from_buffer(self, buf: LeafBuffer) -> npt.NDArray[Any]:
        return np.frombuffer(buf, self.np_dtype)

    def encode_lanes(self, lanes: Sequence[Any], out: list[bytes], framed: bool) -> None:
        if len(lanes) != 1:
            super().encode_lanes(lanes, out, framed)
            return
        # One lane (every single-env step): the same checks, conversions and bytes as
        # stack-then-encode, minus the second pass over a batch that is known to be right.
        batch = self._one_lane(lanes[0])
        if batch.dtype != self.np_dtype:
            batch = _coerce(batch, self.wire, self.path)
        self.check_domain(batch)
        out.append(batch.tobytes())

    def _one_lane(self, lane: Any) -> npt.NDArray[Any]:
        """``lane`` as a batch of one, once its shape is checked (not yet converted)."""
        array = _as_array(lane, self.path)
        if array.shape != self.shape:
            raise CodecError(
                "lane 0 has the wrong shape",
                path=self.path,
                expected=self.shape,
                actual=array.shape,
            )
        return array[np.newaxis]

    def checked_batch(self, batch: Any, n: int) -> npt.NDArray[Any]:
        """``batch`` as an array, once its shape is checked to be ``n`` lanes."""
        array = _as_array(batch, self.path)
        if array.shape != (n, *self.shape):
            raise _shape_error(self.path, (n, *self.shape), array.shape)
        return array

    def stack(self, lanes: Sequence[Any], copy: bool = True) -> Any:
        if type(lanes) is LaneRows:
            source = lanes.source()
            if source is not None:
                # The rows of one array whose shape unstack_rows checked: np.stack of them
                # is that array (same dtype, same values), without the pass over each lane.
                return _coerce(source.copy() if copy else source, self.wire, self.path)
        arrays = [_as_array(lane, self.path) for lane in lanes]
        for index, array in enumerate(arrays):
            if array.shape != self.shape:
                raise CodecError(
                    f"lane {index} has the wrong shape",
                    path=self.path,
                    expected=self.shape,
                    actual=array.shape,
                )
        if not arrays:
            return np.zeros((0, *self.shape), self.np_dtype)
        if len(arrays) == 1 and not copy:
            # One lane as a batch of one: a view, same dtype and values as np.stack's copy.
            return _coerce(arrays[0][np.newaxis], self.wire, self.path)
        return _coerce(np.stack(arrays), self.wire, self.path)

    def unstack(self, batch: Any, n: int) -> list[Any]:
        array = self.checked_batch(batch, n)
        # One row is list(array) without the iterator (a fraction of its cost).
        return [array[0]] if n == 1 else list(array)


class _BoxNode(_Fixed):
    __slots__ = ()
    check_decoded = False

    def from_buffer(self, buf: LeafBuffer) -> npt.NDArray[Any]:
        if self.wire is DType.BOOL:
            return _bools_from_buffer(buf, self.np_dtype)
        return np.frombuffer(buf, self.np_dtype)


def _bools_from_buffer(buf: LeafBuffer, np_dtype: np.dtype[Any]) -> npt.NDArray[Any]:
    # Any nonzero byte counts as 1 (spec §8.2); only copy when some byte is not 0x00/0x01.
    raw = np.frombuffer(buf, np.uint8)
    if int(raw.max()) > 1:
        normalized: npt.NDArray[Any] = (raw != 0).astype(np_dtype)
        return normalized
    return raw.view(np_dtype)


class _DiscreteNode(_Fixed):
    __slots__ = ("last", "start")

    def __init__(self, path: str, first: int, space: Discrete) -> None:
        super().__init__(path, first, "Discrete", (), space.dtype)
        self.start = space.start
        self.last = space.start + space.n - 1

    def check_domain(self, array: npt.NDArray[Any]) -> None:
        _check_range(array, self.start, self.last, f"Discrete {self.start}..{self.last}", self.path)


class _MultiBinaryNode(_Fixed):
    __slots__ = ()
    check_decoded = False  # from_buffer maps every nonzero byte to 1

    def check_domain(self, array: npt.NDArray[Any]) -> None:
        if self.wire is DType.BOOL:
            return
        raw = array.view(np.uint8)
        if int(raw.max()) > 1:
            index = _first_index(raw > 1)
            raise CodecError(
                f"{_where(index)} is not 0 or 1",
                path=self.path,
                expected="0 or 1",
                actual=array[index].item(),
            )

    def from_buffer(self, buf: LeafBuffer) -> npt.NDArray[Any]:
        return _bools_from_buffer(buf, self.np_dtype)


class _MultiDiscreteNode(_Fixed):
    __slots__ = ("top",)

    def __init__(self, path: str, first: int, space: MultiDiscrete) -> None:
        super().__init__(path, first, "MultiDiscrete", space.shape, space.dtype)
        # nvec - 1 fits the dtype (validated), so comparisons stay within one dtype.
        self.top = (space.nvec - 1).astype(self.np_dtype)

    def check_domain(self, array: npt.NDArray[Any]) -> None:
        bad = array > self.top
        if self.wire.is_signed:
            bad |= array < 0
        if bad.any():
            index = _first_index(bad)
            raise CodecError(
                f"{_where(index)} is outside 0..nvec-1",
                path=self.path,
                expected=f"0..{int(self.top[index[1:]])}",
                actual=array[index].item(),
            )


class _TextNode(_Node):
    __slots__ = ()

    def __init__(self, path: str, first: int) -> None:
        super().__init__(path, first, 1)

    def _strings(self, value: Any, n: int) -> list[str]:
        if isinstance(value, np.ndarray):
            value = value.tolist()
        if not _is_sequence(value):
            raise CodecError(
                "Text batch must be a sequence of str",
                path=self.path,
                expected=f"{n} str",
                actual=type(value).__name__,
            )
        if len(value) != n:
            raise CodecError(
                "Text batch has the wrong number of lanes",
                path=self.path,
                expected=f"{n} str",
                actual=len(value),
            )
        for index, item in enumerate(value):
            if not isinstance(item, str):
                raise CodecError(
                    f"lane {index} is not a str",
                    path=self.path,
                    expected="str",
                    actual=type(item).__name__,
                )
        return list(value)

    def _utf8(self, text: str, index: int) -> bytes:
        try:
            return text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise CodecError(
                f"lane {index} cannot be encoded as UTF-8",
                path=self.path,
                expected="a str without lone surrogates",
                actual=exc.reason,
            ) from None

    def encode(self, value: Any, n: int, out: list[bytes], framed: bool) -> None:
        bodies = [self._utf8(text, i) for i, text in enumerate(self._strings(value, n))]
        if not framed:
            out.append(bodies[0])
            return
        header = struct.pack(f"<{n + 1}Q", n, *(len(body) for body in bodies))
        out.append(header + b"".join(bodies))

    def carry(self, value: Any, n: int) -> Any:
        texts = self._strings(value, n)
        for index, text in enumerate(texts):
            self._utf8(text, index)
        return tuple(texts)

    def decode(self, leaves: Sequence[LeafBuffer], n: int, framed: bool) -> Any:
        buf = leaves[self.first]
        size = _nbytes(buf, self.path)
        view = memoryview(buf).cast("B") if isinstance(buf, memoryview) else buf
        if not framed:
            return (self._text(view, 0, size, 0),)
        if size < 8:
            raise CodecError(
                "Text leaf is shorter than its u64 count",
                path=self.path,
                expected="at least 8 bytes",
                actual=f"{size} bytes",
            )
        (count,) = _U64.unpack_from(view, 0)
        if count != n:
            raise CodecError(
                "Text leaf count does not match the lane count",
                path=self.path,
                expected=n,
                actual=count,
            )
        offset = 8 * (n + 1)
        if size < offset:
            raise CodecError(
                "Text leaf is truncated inside its length table",
                path=self.path,
                expected=f"at least {offset} bytes for {n} lengths",
                actual=f"{size} bytes",
            )
        lengths = struct.unpack_from(f"<{n}Q", view, 8)
        total = sum(lengths)
        if offset + total != size:
            problem = "truncated" if offset + total > size else "followed by trailing bytes"
            raise CodecError(
                f"Text leaf body is {problem}",
                path=self.path,
                expected=f"{offset + total} bytes",
                actual=f"{size} bytes",
            )
        texts = []
        for index, length in enumerate(lengths):
            texts.append(self._text(view, offset, offset + length, index))
            offset += length
        return tuple(texts)

    def _text(self, view: LeafBuffer, start: int, stop: int, index: int) -> str:
        try:
            return str(view[start:stop], "utf-8")
        except UnicodeDecodeError as exc:
            raise CodecError(
                f"lane {index} is not valid UTF-8",
                path=self.path,
                expected="UTF-8",
                actual=exc.reason,
            ) from None

    def stack(self, lanes: Sequence[Any], copy: bool = True) -> Any:
        return tuple(self._strings(lanes, len(lanes)))

    def unstack(self, batch: Any, n: int) -> list[Any]:
        return self._strings(batch, n)


class _DictNode(_Node):
    __slots__ = ("children", "keys")

    def __init__(self, path: str, first: int, children: list[tuple[str, _Node]]) -> None:
        super().__init__(path, first, sum(node.count for _, node in children))
        self.children = children
        self.keys = frozenset(key for key, _ in children)

    def _fields(self, value: Any, lane: int | None) -> Mapping[str, Any]:
        """``value`` if it is a mapping with exactly this Dict's keys; else raise."""
        if (
            isinstance(value, Mapping)
            and len(value) == len(self.children)
            and all(key in value for key in self.keys)
        ):
            return value
        where = "" if lane is None else f"lane {lane}: "
        order = [key for key, _ in self.children]
        if not isinstance(value, Mapping):
            raise CodecError(
                f"{where}Dict value must be a mapping",
                path=self.path,
                expected=f"a mapping with keys {order}",
                actual=type(value).__name__,
            )
        missing = [key for key in order if key not in value]
        extra = [key for key in value if key not in self.keys]
        raise CodecError(
            f"{where}Dict value has the wrong keys (missing {missing}, unexpected {extra})",
            path=self.path,
            expected=order,
            actual=list(value),
        )

    def encode(self, value: Any, n: int, out: list[bytes], framed: bool) -> None:
        fields = self._fields(value, None)
        for key, node in self.children:
            node.encode(fields[key], n, out, framed)

    def decode(self, leaves: Sequence[LeafBuffer], n: int, framed: bool) -> Any:
        return {key: node.decode(leaves, n, framed) for key, node in self.children}

    def carry(self, value: Any, n: int) -> Any:
        fields = self._fields(value, None)
        return {key: node.carry(fields[key], n) for key, node in self.children}

    def stack(self, lanes: Sequence[Any], copy: bool = True) -> Any:
        rows = [self._fields(lane, index) for index, lane in enumerate(lanes)]
        return {key: node.stack([row[key] for row in rows], copy) for key, node in self.children}

    def unstack(self, batch: Any, n: int) -> list[Any]:
        fields = self._fields(batch, None)
        columns = [(key, node.unstack(fields[key], n)) for key, node in self.children]
        return [{key: column[i] for key, column in columns} for i in range(n)]


class _TupleNode(_Node):
    __slots__ = ("children",)

    def __init__(self, path: str, first: int, children: list[_Node]) -> None:
        super().__init__(path, first, sum(node.count for node in children))
        self.children = children

    def _items(self, value: Any, lane: int | None) -> Sequence[Any]:
        where = "" if lane is None else f"lane {lane}: "
        if not _is_sequence(value):
            raise CodecError(
                f"{where}Tuple value must be a tuple or list",
                path=self.path,
                expected=f"a sequence of {len(self.children)}",
                actual=type(value).__name__,
            )
        if len(value) != len(self.children):
            raise CodecError(
                f"{where}Tuple value has the wrong number of elements",
                path=self.path,
                expected=len(self.children),
                actual=len(value),
            )
        return value  # type: ignore[no-any-return]

    def encode(self, value: Any, n: int, out: list[bytes], framed: bool) -> None:
        items = self._items(value, None)
        for node, item in zip(self.children, items, strict=True):
            node.encode(item, n, out, framed)

    def decode(self, leaves: Sequence[LeafBuffer], n: int, framed: bool) -> Any:
        return tuple(node.decode(leaves, n, framed) for node in self.children)

    def carry(self, value: Any, n: int) -> Any:
        items = self._items(value, None)
        return tuple(node.carry(item, n) for node, item in zip(self.children, items, strict=True))

    def stack(self, lanes: Sequence[Any], copy: bool = True) -> Any:
        rows = [self._items(lane, index) for index, lane in enumerate(lanes)]
        return tuple(
            node.stack([row[i] for row in rows], copy) for i, node in enumerate(self.children)
        )

    def unstack(self, batch: Any, n: int) -> list[Any]:
        items = self._items(batch, None)
        columns = [node.unstack(item, n) for node, item in zip(self.children, items, strict=True)]
        return [tuple(column[i] for column in columns) for i in range(n)]


def _compile(space: Space, path: str, first: int) -> _Node:
    if isinstance(space, Box):
        return _BoxNode(path, first, "Box", space.shape, space.dtype)
    if isinstance(space, Discrete):
        return _DiscreteNode(path, first, space)
    if isinstance(space, MultiBinary):
        return _MultiBinaryNode(path, first, "MultiBinary", space.shape, space.dtype)
    if isinstance(space, MultiDiscrete):
        return _MultiDiscreteNode(path, first, space)
    if isinstance(space, Text):
        return _TextNode(path, first)
    if isinstance(space, Dict):
        pairs: list[tuple[str, _Node]] = []
        start = first
        for key, child in space.entries:
            node = _compile(child, child_path(path, key), first)
            first += node.count
            pairs.append((key, node))
        return _DictNode(path, start, pairs)
    if isinstance(space, Tuple):
        nodes: list[_Node] = []
        start = first
        for index, child in enumerate(space.spaces):
            node = _compile(child, index_path(path, index), first)
            first += node.count
            nodes.append(node)
        return _TupleNode(path, start, nodes)
    raise TypeError(f"{type(space).__name__} is not a space")


class LaneRows(list[Any]):
    """The rows :func:`unstack_rows` cut from one array, and that array.

    A list like any other; while it still holds exactly those rows (nothing replaced,
    added or removed), stacking it again (:func:`encode_lanes`, :func:`carry_lanes`,
    :func:`stack_lanes`) takes the array as it is instead of checking and stacking lane
    by lane: a batch a model returned, split per lane for the engine, is encoded whole.
    """

    __slots__ = ("_batch", "_rows")

    def __init__(self, batch: npt.NDArray[Any]) -> None:
        rows = list(batch)
        super().__init__(rows)
        self._batch = batch
        self._rows = tuple(rows)

    def source(self) -> npt.NDArray[Any] | None:
        """The array the rows came from, or ``None`` once the list was changed."""
        rows = self._rows
        if len(self) == len(rows) and all(map(operator.is_, self, rows)):
            return self._batch
        return None


def unstack_rows(space: Space, batch: Any, n: int) -> list[Any]:
    """:func:`unstack`, as a :class:`LaneRows` for a Box, Discrete, MultiBinary or
    MultiDiscrete space of more than one lane (other spaces: a plain list)."""
    node = _root(space)
    n = _check_n(n)
    if n > 1 and isinstance(node, _Fixed):
        return LaneRows(node.checked_batch(batch, n))
    return node.unstack(batch, n)


def _root(space: Space) -> _Node:
    node: _Node | None = getattr(space, "_codec_plan", None)
    if node is None:
        if not isinstance(space, Space):
            raise TypeError(f"expected a Space, got {type(space).__name__}")
        validate(space)
        node = _compile(space, ROOT, 0)
        object.__setattr__(space, "_codec_plan", node)
    return node


def _check_leaf_count(node: _Node, leaves: Sequence[LeafBuffer]) -> None:
    if len(leaves) != node.count:
        raise CodecError(
            "wrong number of leaves for this space",
            expected=f"{node.count} leaves",
            actual=f"{len(leaves)} leaves",
        )


# --------------------------------------------------------------------------------------------
# Public API


def encode_batch(space: Space, value: Any, n: int) -> list[bytes]:
    """Encode a batch of ``n`` lanes into leaf byte strings (spec §8.2).

    Args:
        space: the (valid) space the value belongs to.
        value: the batched value. Box, MultiBinary and MultiDiscrete: array-like of shape
            ``(n, *shape)``; Discrete: array-like of shape ``(n,)`` holding absolute values;
            Text: a sequence of ``n`` str; Dict: a mapping from every key to its batched
            child; Tuple: a sequence of batched children.
        n: the lane count.

    Arrays are converted to the declared dtype (floats for an integer dtype only when every
    element is finite, integral and in range; bool dtype only from 0/1).

    Raises:
        CodecError: the value does not fit the space (its ``path`` says where).
        SpaceError: the space itself is invalid.

    Example:
        >>> encode_batch(Discrete(3, start=-1), [1, -1], 2)[0].hex()
        '0100000000000000ffffffffffffffff'
    """
    node = _root(space)
    n = _check_n(n)
    out: list[bytes] = []
    node.encode(value, n, out, True)
    return out


def decode_batch(space: Space, leaves: Sequence[LeafBuffer], n: int) -> Any:
    """Decode leaf byte strings holding a batch of ``n`` lanes (spec §8.2).

    Fixed-stride leaves become numpy arrays of exactly the declared dtype and shape
    ``(n, *shape)`` (Discrete: ``(n,)``). They are built with ``np.frombuffer`` without a copy,
    so they are read-only views of ``bytes`` input (and share memory with a ``bytearray``);
    copy them before mutating. Text becomes a tuple of ``n`` str, Dict a dict in declared key
    order, Tuple a tuple.

    Raises:
        CodecError: wrong leaf count, wrong byte lengths, a bad Text frame, or values outside
            a Discrete/MultiDiscrete domain.
        SpaceError: the space itself is invalid.
    """
    node = _root(space)
    n = _check_n(n)
    _check_leaf_count(node, leaves)
    return node.decode(leaves, n, True)


def encode_lanes(space: Space, values: Sequence[Any]) -> list[bytes]:
    """Encode a list of single-lane values as one batch of ``len(values)`` lanes (spec §8.3).

    Every lane is checked structurally (shape, keys, arity) before anything is encoded.

    Raises:
        CodecError: a lane does not fit the space.
    """
    node = _root(space)
    out: list[bytes] = []
    node.encode_lanes(values, out, True)
    return out


def decode_lanes(space: Space, leaves: Sequence[LeafBuffer], n: int) -> list[Any]:
    """Decode a batch of ``n`` lanes into a list of single-lane values.

    A Box lane is an array of shape ``shape`` (a read-only view), a Discrete lane a numpy
    scalar of its dtype, Text a str, Dict a dict and Tuple a tuple.
    """
    node = _root(space)
    batch = decode_batch(space, leaves, n)
    if isinstance(node, _Fixed):
        # A fixed leaf decodes to exactly (n, *shape): its rows need no second check.
        return list(batch)
    return node.unstack(batch, n)


def encode_value(space: Space, value: Any) -> list[bytes]:
    """Encode one un-batched value in the single-value form (spec §8.4; not used on the wire).

    The bytes equal a one-lane batch, except that a Text leaf is raw UTF-8 with no header.
    """
    node = _root(space)
    out: list[bytes] = []
    node.encode_lanes([value], out, False)
    return out


def decode_value(space: Space, leaves: Sequence[LeafBuffer]) -> Any:
    """Decode the single-value form of :func:`encode_value` into one un-batched value."""
    node = _root(space)
    _check_leaf_count(node, leaves)
    return node.unstack(node.decode(leaves, 1, False), 1)[0]


def stack_lanes(space: Space, values: Sequence[Any], *, copy: bool = True) -> Any:
    """Turn a list of single-lane values into the batched structure :func:`encode_batch` takes.

    Arrays are stacked along a new first axis and converted to the declared dtype. With
    ``copy=False`` a single lane may come back as a view of the caller's arrays (for a
    batch that is encoded at once).

    Raises:
        CodecError: a lane does not have the space's structure or shape.
    """
    return _root(space).stack(values, copy=copy)


def carry_batch(space: Space, value: Any, n: int) -> Any:
    """A batch of ``n`` lanes as :func:`decode_batch` would give it back after
    :func:`encode_batch`, without making the bytes: the same checks, conversions and
    errors on the way in, and on the way out arrays of exactly the declared dtype and
    shape, read-only and sharing no memory with ``value`` (Text a tuple of str, Dict a
    dict in declared key order, Tuple a tuple).

    For a value that stays in the process (an in-process env's observation on its way to
    an in-process model): what would arrive, without the round trip.

    Raises:
        CodecError: the value does not fit the space (as :func:`encode_batch`).

    Example:
        >>> carry_batch(Discrete(3), [2, 0], 2)
        array([2, 0])
    """
    return _root(space).carry(value, _check_n(n))


def carry_lanes(space: Space, values: Sequence[Any]) -> Any:
    """:func:`carry_batch` of single-lane values (checked as :func:`encode_lanes` does)."""
    return _root(space).carry_lanes(values)


def unstack(space: Space, batch: Any, n: int) -> list[Any]:
    """Split a batched value of ``n`` lanes into a list of single-lane values.

    Raises:
        CodecError: the batch does not have the space's structure or ``n`` lanes.
    """
    return _root(space).unstack(batch, _check_n(n))
