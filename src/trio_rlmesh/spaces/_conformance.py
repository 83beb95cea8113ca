"""Value conformance: does a batched value belong to its space? (spec §6.8)

Serving peers check every observation and action before it crosses the wire. *Structural*
deviations (wrong shape or arity, a missing or unexpected Dict key, a Discrete/MultiDiscrete or
MultiBinary value outside its domain, any NaN) are always rejected; *range* deviations (outside
Box bounds, Text length or charset) are delivered or rejected by policy.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import attrs
import numpy as np
import numpy.typing as npt

from ._errors import ROOT, child_path, index_path
from ._spaces import Box, Dict, Discrete, MultiBinary, MultiDiscrete, Space, Text, Tuple

__all__ = ["Deviation", "DeviationKind", "check_batch"]

DeviationKind = Literal["structural", "range"]


@attrs.frozen
class Deviation:
    """One way a value fails to conform to its space.

    Example:
        >>> [deviation.kind for deviation in check_batch(Discrete(2), [5], 1)]
        ['structural']
    """

    kind: DeviationKind
    """``"structural"`` (always rejected) or ``"range"`` (subject to the validation policy)."""
    path: str
    """Where in the space the deviation is (``$`` is the root)."""
    detail: str
    """What is wrong, for humans."""


def check_batch(space: Space, batch: Any, n: int) -> list[Deviation]:
    """Every deviation of a batched value of ``n`` lanes from ``space``.

    Reports at most one deviation of each kind per path (the first offending element, with a
    count), and does not look for range deviations where the structure is already wrong.

    Args:
        space: the space the batch should belong to.
        batch: a batched value, in the form :func:`encode_batch` takes.
        n: the lane count.

    Returns:
        The deviations in leaf order; empty when the value conforms.
    """
    found: list[Deviation] = []
    _check(space, batch, n, ROOT, found)
    return found


def _structural(found: list[Deviation], path: str, detail: str) -> None:
    found.append(Deviation("structural", path, detail))


def _where(index: tuple[int, ...]) -> str:
    return f"lane {index[0]}" + (f" element {index[1:]}" if len(index) > 1 else "")


def _first(mask: npt.NDArray[np.bool_]) -> tuple[tuple[int, ...], int]:
    return tuple(int(i) for i in np.argwhere(mask)[0]), int(mask.sum())


def _numeric_batch(
    batch: Any, shape: tuple[int, ...], path: str, found: list[Deviation]
) -> npt.NDArray[Any] | None:
    """The batch as a numeric array of ``shape`` without NaN, or None after reporting why not."""
    try:
        array = np.asarray(batch)
    except (ValueError, TypeError) as exc:
        _structural(found, path, f"not a rectangular array: {exc}")
        return None
    if array.dtype.kind not in "biuf":
        _structural(found, path, f"values must be numeric, got numpy dtype {array.dtype}")
        return None
    if array.shape != shape:
        _structural(found, path, f"expected shape {shape}, got {array.shape}")
        return None
    if array.dtype.kind == "f":
        nan = np.isnan(array)
        if nan.any():
            index, count = _first(nan)
            _structural(found, path, f"{count} NaN value(s); first: {_where(index)}")
            return None
    return array


def _domain(
    array: npt.NDArray[Any],
    bad: npt.NDArray[np.bool_],
    domain: str,
    path: str,
    found: list[Deviation],
) -> None:
    if bad.any():
        index, count = _first(bad)
        _structural(
            found,
            path,
            f"{count} value(s) outside {domain}; first: {_where(index)} = {array[index].item()}",
        )


def _not_integral(array: npt.NDArray[Any]) -> npt.NDArray[np.bool_]:
    if array.dtype.kind == "f":
        return np.asarray(~np.isfinite(array) | (array != np.trunc(array)))
    return np.zeros(array.shape, bool)


def _check(space: Space, batch: Any, n: int, path: str, found: list[Deviation]) -> None:
    if isinstance(space, Box):
        _check_box(space, batch, n, path, found)
    elif isinstance(space, Discrete):
        if _one_integer_in(space, batch, n):
            return
        array = _numeric_batch(batch, (n,), path, found)
        if array is not None:
            last = space.start + space.n - 1
            bad = _not_integral(array) | (array < space.start) | (array > last)
            _domain(array, bad, f"{space.start}..{last}", path, found)
    elif isinstance(space, MultiBinary):
        array = _numeric_batch(batch, (n, *space.shape), path, found)
        if array is not None:
            _domain(array, (array != 0) & (array != 1), "{0, 1}", path, found)
    elif isinstance(space, MultiDiscrete):
        array = _numeric_batch(batch, (n, *space.shape), path, found)
        if array is not None:
            bad = _not_integral(array) | (array < 0) | (array >= space.nvec)
            _domain(array, bad, "0..nvec-1", path, found)
    elif isinstance(space, Text):
        _check_text(space, batch, n, path, found)
    elif isinstance(space, Dict):
        _check_dict(space, batch, n, path, found)
    elif isinstance(space, Tuple):
        if not isinstance(batch, Sequence) or isinstance(batch, str | bytes):
            _structural(found, path, f"expected a tuple or list, got {type(batch).__name__}")
        elif len(batch) != len(space.spaces):
            _structural(found, path, f"expected {len(space.spaces)} elements, got {len(batch)}")
        else:
            for index, (child, item) in enumerate(zip(space.spaces, batch, strict=True)):
                _check(child, item, n, index_path(path, index), found)
    else:
        raise TypeError(f"{type(space).__name__} is not a space")


def _one_integer_in(space: Discrete, batch: Any, n: int) -> bool:
    """One lane's integer action within range: the common case, checked in Python."""
    return (
        n == 1
        and type(batch) is np.ndarray
        and batch.shape == (1,)
        and batch.dtype.kind in "iu"
        and space.start <= int(batch[0]) < space.start + space.n
    )


_SMALL = 16
"""Batches up to this many elements are compared with their bounds in Python: a numpy
comparison's fixed cost (microseconds) is far above the scan of a CartPole observation."""


def _bound_lists(space: Box) -> tuple[list[Any], list[Any]]:
    """One lane's bounds as flat Python lists (built once per Box, kept with it)."""
    bounds: tuple[list[Any], list[Any]] | None = space._conformance_bounds
    if bounds is None:
        bounds = (space.low.ravel().tolist(), space.high.ravel().tolist())
        object.__setattr__(space, "_conformance_bounds", bounds)
    return bounds


def _within_bounds(space: Box, batch: npt.NDArray[Any], n: int) -> bool:
    """Whether a batch of the Box's own shape holds only values within its bounds.

    False for a NaN (it fails every comparison), so the full check then reports it.
    """
    if batch.size <= _SMALL and batch.dtype == space.low.dtype:
        # Python compares values of one dtype exactly, as numpy does.
        low, high = _bound_lists(space)
        values = batch.ravel().tolist()
        if n != 1:
            low, high = low * n, high * n
        return all(map(operator.le, low, values)) and all(map(operator.le, values, high))
    return bool(((batch >= space.low) & (batch <= space.high)).all())


def _check_box(space: Box, batch: Any, n: int, path: str, found: list[Deviation]) -> None:
    if (
        type(batch) is np.ndarray
        and batch.dtype.kind in "biuf"
        and batch.shape == (n, *space.shape)
        and space.bounds_kind != "unbounded"
        # The common case in one pass: every value within bounds (a NaN fails both
        # comparisons, so it falls through to the full check below).
        and _within_bounds(space, batch, n)
    ):
        return
    array = _numeric_batch(batch, (n, *space.shape), path, found)
    if array is None or not array.size or space.bounds_kind == "unbounded":
        return
    below, above = array < space.low, array > space.high
    outside = below | above
    if outside.any():
        index, count = _first(outside)
        bound, name = (space.low, "low") if below[index] else (space.high, "high")
        found.append(
            Deviation(
                "range",
                path,
                f"{count} value(s) outside the Box bounds; first: {_where(index)} = "
                f"{array[index].item()} beyond {name} {bound[index[1:]].item()}",
            )
        )


def _check_text(space: Text, batch: Any, n: int, path: str, found: list[Deviation]) -> None:
    if not isinstance(batch, Sequence | np.ndarray) or isinstance(batch, str | bytes):
        _structural(found, path, f"expected a sequence of {n} str, got {type(batch).__name__}")
        return
    if len(batch) != n:
        _structural(found, path, f"expected {n} str, got {len(batch)}")
        return
    for lane, text in enumerate(batch):
        if not isinstance(text, str):
            _structural(found, path, f"lane {lane} is {type(text).__name__}, not str")
            return
    allowed = set(space.charset)
    for lane, text in enumerate(batch):
        if not space.min_length <= len(text) <= space.max_length:
            detail = (
                f"lane {lane} has length {len(text)}, outside "
                f"{space.min_length}..{space.max_length}"
            )
        elif allowed and not allowed.issuperset(text):
            stray = sorted(set(text) - allowed)
            detail = f"lane {lane} has characters outside the charset: {''.join(stray)!r}"
        else:
            continue
        found.append(Deviation("range", path, detail))
        return


def _check_dict(space: Dict, batch: Any, n: int, path: str, found: list[Deviation]) -> None:
    if not isinstance(batch, Mapping):
        _structural(found, path, f"expected a mapping, got {type(batch).__name__}")
        return
    keys = space.keys()
    extra = [key for key in batch if key not in keys]
    if extra:
        _structural(found, path, f"unexpected key(s) {extra}; expected only {list(keys)}")
    for key, child in space.entries:
        if key in batch:
            _check(child, batch[key], n, child_path(path, key), found)
        else:
            _structural(found, child_path(path, key), f"missing key {key!r}")
