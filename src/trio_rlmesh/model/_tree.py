"""Structure helpers for model inputs and outputs: batching, splitting, chunk frames.

A *value* is a numpy array or scalar, a ``str``, or a container of values (a ``dict``
for a Dict space, a ``tuple`` for a Tuple space). A *batch* has the same structure with
a leading lane axis on every array leaf; a Text leaf of a batch is a sequence of ``str``.
When the space is known the codec's space-driven helpers are used instead; these generic
forms serve the spots where only the value is at hand (chunks, spec-less routes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..spaces import Box, Dict, Space, Text, Tuple, stack_lanes
from ..spaces._internal import LaneRows, unstack_rows

__all__ = [
    "concat_batches",
    "describe_batch",
    "find_nan",
    "split_batch",
    "split_chunk",
    "stack_values",
]


def stack_values(space: Space | None, values: Sequence[Any]) -> Any:
    """Single-lane values into one batch (space-driven when the space is known)."""
    if space is not None:
        return stack_lanes(space, values)
    first = values[0]
    if isinstance(first, Mapping):
        return {key: stack_values(None, [v[key] for v in values]) for key in first}
    if isinstance(first, tuple):
        return tuple(stack_values(None, [v[i] for v in values]) for i in range(len(first)))
    if isinstance(first, str | bytes):
        return tuple(values)
    return np.stack([np.asarray(v) for v in values])


def split_batch(value: Any, n: int, space: Space | None = None) -> list[Any]:
    """A batch of ``n`` lanes into ``n`` single-lane values.

    A ``list`` of exactly ``n`` items is taken as already per lane. Otherwise the space
    splits it when known; a generic split recurses through dicts and tuples and cuts
    arrays along their first axis.

    Raises:
        ValueError: the value does not hold ``n`` lanes.
    """
    if isinstance(value, list):
        if len(value) != n:
            raise ValueError(f"returned a list of {len(value)} items for {n} lanes")
        return value
    if space is not None:
        return unstack_rows(space, value, n)
    if isinstance(value, Mapping):
        columns = {key: split_batch(item, n) for key, item in value.items()}
        return [{key: column[i] for key, column in columns.items()} for i in range(n)]
    if isinstance(value, tuple):
        if value and all(isinstance(item, str) for item in value):
            if len(value) != n:
                raise ValueError(f"returned {len(value)} texts for {n} lanes")
            return list(value)
        parts = [split_batch(item, n) for item in value]
        return [tuple(part[i] for part in parts) for i in range(n)]
    array = np.asarray(value)
    if array.ndim == 0 or array.shape[0] != n:
        raise ValueError(
            f"returned a value of shape {array.shape}; a batched corner must return leaves "
            f"with a leading lane axis of {n} (or a list of {n} per-lane values)"
        )
    return list(array)


def split_chunk(chunk: Any) -> list[Any]:
    """One lane's action chunk into its frames (the leading axis is the chunk axis).

    A dict is split key by key and zipped back (every key must agree on the length); a
    list or tuple is already a list of frames; an array of rank >= 1 is cut along its
    first axis; a scalar or a string is a single frame.

    Raises:
        ValueError: the keys of a dict chunk disagree on the number of frames.
    """
    if isinstance(chunk, str | bytes | bytearray):
        return [chunk]
    if isinstance(chunk, Mapping):
        columns: list[tuple[Any, list[Any]]] = []
        length: int | None = None
        for key, item in chunk.items():
            frames = split_chunk(item)
            if length is not None and length != len(frames):
                raise ValueError(
                    f"action chunk fields disagree on the number of frames: {length} vs "
                    f"{len(frames)} (key {key!r})"
                )
            length = len(frames)
            columns.append((key, frames))
        return [{key: frames[i] for key, frames in columns} for i in range(length or 0)]
    if isinstance(chunk, list | tuple):
        return list(chunk)
    if isinstance(chunk, np.ndarray):
        return [chunk] if chunk.ndim == 0 else list(chunk)
    return [chunk]


def first_frames(batch_chunk: Any) -> Any:
    """Frame 0 of every lane of a batched chunk (``leaf[:, 0]`` on every array leaf)."""
    if isinstance(batch_chunk, Mapping):
        return {key: first_frames(item) for key, item in batch_chunk.items()}
    if isinstance(batch_chunk, list):
        return [split_chunk(item)[0] for item in batch_chunk]
    if isinstance(batch_chunk, tuple):
        return tuple(first_frames(item) for item in batch_chunk)
    array = np.asarray(batch_chunk)
    return array[:, 0] if array.ndim >= 2 else array


def concat_batches(space: Space | None, batches: Sequence[Any]) -> Any:
    """Several batches of the same space joined lane-wise into one."""
    if len(batches) == 1:
        return batches[0]
    if isinstance(space, Dict):
        return {
            key: concat_batches(child, [b[key] for b in batches]) for key, child in space.entries
        }
    if isinstance(space, Tuple):
        return tuple(
            concat_batches(child, [b[i] for b in batches]) for i, child in enumerate(space.spaces)
        )
    if isinstance(space, Text):
        return tuple(text for b in batches for text in b)
    if space is None:
        first = batches[0]
        if isinstance(first, Mapping):
            return {key: concat_batches(None, [b[key] for b in batches]) for key in first}
        if isinstance(first, tuple | list) and (not first or isinstance(first[0], str)):
            return tuple(text for b in batches for text in b)
        if isinstance(first, tuple):
            return tuple(concat_batches(None, [b[i] for b in batches]) for i in range(len(first)))
    return np.concatenate([np.asarray(b) for b in batches])


def find_nan(space: Space, actions: Sequence[Any]) -> tuple[int, str] | None:
    """The first (lane, path) whose float Box leaf holds a NaN, or ``None``."""
    if not _has_float_box(space):
        return None
    source = actions.source() if type(actions) is LaneRows else None
    if source is not None and _nan_path(space, source, "$") is None:
        return None  # the batch the rows came from holds no NaN, so no lane does
    for lane, action in enumerate(actions):
        path = _nan_path(space, action, "$")
        if path is not None:
            return lane, path
    return None


def _has_float_box(space: Space) -> bool:
    if isinstance(space, Box):
        return space.dtype.is_float
    if isinstance(space, Dict):
        return any(_has_float_box(child) for _, child in space.entries)
    if isinstance(space, Tuple):
        return any(_has_float_box(child) for child in space.spaces)
    return False


def _nan_path(space: Space, value: Any, path: str) -> str | None:
    if isinstance(space, Box) and space.dtype.is_float:
        array = np.asarray(value)
        if array.dtype.kind in "fc" and bool(np.isnan(array).any()):
            return path
        return None
    if isinstance(space, Dict) and isinstance(value, Mapping):
        for key, child in space.entries:
            if key in value and (found := _nan_path(child, value[key], f"{path}.{key}")):
                return found
    if isinstance(space, Tuple) and isinstance(value, Sequence):
        for index, child in enumerate(space.spaces):
            if index < len(value) and (found := _nan_path(child, value[index], f"{path}[{index}]")):
                return found
    return None


def describe_batch(value: Any, n: int) -> str:
    """A one-line per-lane signature of a model input, for error messages.

    >>> describe_batch({"pos": np.zeros((2, 3), np.float32)}, 2)
    'model input per lane: {pos: float32[3]}; lanes: 2'
    """
    return f"model input per lane: {_signature(value)}; lanes: {n}"


def _signature(value: Any) -> str:
    if isinstance(value, Mapping):
        inner = ", ".join(f"{key}: {_signature(item)}" for key, item in value.items())
        return "{" + inner + "}"
    if isinstance(value, tuple) and not (value and isinstance(value[0], str)):
        return "(" + ", ".join(_signature(item) for item in value) + ")"
    if isinstance(value, tuple | list):
        return "text"
    array = np.asarray(value)
    return f"{array.dtype}[{', '.join(str(d) for d in array.shape[1:])}]"
