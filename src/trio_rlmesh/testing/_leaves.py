"""Just enough of the batched SpaceValue layout to build and check payloads without a codec.

Fixed-stride leaves (Box, Discrete, MultiBinary, MultiDiscrete) are ``N`` per-lane
encodings back to back; a Text leaf is a framed slab. The fakes and conformance
checks only need leaf counts, strides and all-zero values, so they do not depend on
``trio_rlmesh.spaces``.
"""

from __future__ import annotations

import math

from ..protocol import spaces_v1

__all__ = ["fixed_stride", "leaf_count", "zero_leaves"]

_WIDTH = {
    spaces_v1.DataType.BOOL: 1,
    spaces_v1.DataType.UINT8: 1,
    spaces_v1.DataType.UINT16: 2,
    spaces_v1.DataType.UINT32: 4,
    spaces_v1.DataType.UINT64: 8,
    spaces_v1.DataType.INT8: 1,
    spaces_v1.DataType.INT16: 2,
    spaces_v1.DataType.INT32: 4,
    spaces_v1.DataType.INT64: 8,
    spaces_v1.DataType.FLOAT16: 2,
    spaces_v1.DataType.FLOAT32: 4,
    spaces_v1.DataType.FLOAT64: 8,
}


def _width(space: spaces_v1.SpaceSpec) -> int:
    return _WIDTH.get(space.dtype, 8)


def _children(space: spaces_v1.SpaceSpec) -> list[spaces_v1.SpaceSpec] | None:
    if space.dict is not None:
        return list(space.dict.spaces)
    if space.tuple is not None:
        return list(space.tuple.spaces)
    return None


def leaf_count(space: spaces_v1.SpaceSpec) -> int:
    """How many leaves a value of ``space`` has (Dict/Tuple flatten depth-first)."""
    children = _children(space)
    if children is None:
        return 1
    return sum(leaf_count(child) for child in children)


def fixed_stride(space: spaces_v1.SpaceSpec) -> int | None:
    """Bytes per lane of a fundamental fixed-stride leaf; ``None`` for Text and containers."""
    if space.box is not None:
        return math.prod(space.shape) * _width(space)
    if space.discrete is not None:
        return _width(space)
    if space.multi_binary is not None:
        return math.prod(space.shape)
    if space.multi_discrete is not None:
        return len(space.multi_discrete.nvec) * _width(space)
    return None


def zero_leaves(space: spaces_v1.SpaceSpec, lanes: int) -> list[bytes]:
    """A batched value of ``lanes`` lanes: zeros (a Discrete leaf holds its ``start``)."""
    children = _children(space)
    if children is not None:
        return [leaf for child in children for leaf in zero_leaves(child, lanes)]
    if space.discrete is not None:
        width = _width(space)
        signed = space.dtype not in (
            spaces_v1.DataType.UINT8,
            spaces_v1.DataType.UINT16,
            spaces_v1.DataType.UINT32,
            spaces_v1.DataType.UINT64,
        )
        one = space.discrete.start.to_bytes(width, "little", signed=signed)
        return [one * lanes]
    stride = fixed_stride(space)
    if stride is not None:
        return [bytes(stride * lanes)]
    # Text: a framed slab of ``lanes`` strings of the minimum length.
    length = space.text.min_length if space.text is not None else 0
    body = b"a" * max(length, 0)
    slab = lanes.to_bytes(8, "little")
    slab += len(body).to_bytes(8, "little") * lanes
    return [slab + body * lanes]
