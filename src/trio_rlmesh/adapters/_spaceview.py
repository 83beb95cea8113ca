"""What resolution needs to know about a space: kind, shape, dtype, bounds, children.

Resolution reads the *structure* of an env's spaces (which keys exist, how wide a leaf is,
whether its bounds are finite and uniform). Any space form a caller may hold converts to this
one view: a Gymnasium space, a :mod:`trio_rlmesh.spaces` space, or a protocol ``SpaceSpec``
message (what a handshake carries).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from ..protocol import spaces_v1, spec_to_space
from ..spaces import Box, Dict, Discrete, MultiBinary, MultiDiscrete, Space, Text, Tuple

__all__ = ["SpaceView", "view_of"]


@attrs.frozen
class SpaceView:
    """One space node: ``kind`` is ``box``, ``discrete``, ``multi_binary``,
    ``multi_discrete``, ``text``, ``dict`` or ``tuple``."""

    kind: str
    shape: tuple[int, ...] = ()
    dtype: str = "unspecified"
    low: tuple[float, ...] | None = None
    high: tuple[float, ...] | None = None
    keys: tuple[str, ...] = ()
    children: tuple[SpaceView, ...] = ()

    @property
    def width(self) -> int:
        """Elements in one value (1 for a scalar shape)."""
        return math.prod(max(d, 0) for d in self.shape)

    def child(self, key: str) -> SpaceView | None:
        """The Dict child under ``key``, if any."""
        if self.kind != "dict" or key not in self.keys:
            return None
        return self.children[self.keys.index(key)]

    def describe(self) -> str:
        """``a 2-D Box``, ``a Discrete space``, ... (as RLMesh's messages name a space)."""
        if self.kind == "box":
            return f"a {len(self.shape)}-D Box"
        return {
            "discrete": "a Discrete space",
            "multi_binary": "a MultiBinary space",
            "multi_discrete": "a MultiDiscrete space",
            "text": "a Text space",
            "dict": "a Dict space",
            "tuple": "a Tuple space",
        }.get(self.kind, "an unspecified space")


def _bounds(values: np.ndarray[Any, Any]) -> tuple[float, ...] | None:
    flat = np.asarray(values, dtype=np.float64).reshape(-1)
    return tuple(float(v) for v in flat)


def _from_trio(space: Space) -> SpaceView:
    if isinstance(space, Box):
        unbounded = space.bounds_kind == "unbounded"
        return SpaceView(
            "box",
            space.shape,
            space.dtype.name.lower(),
            None if unbounded else _bounds(space.low),
            None if unbounded else _bounds(space.high),
        )
    if isinstance(space, Discrete):
        return SpaceView("discrete", (), "int64")
    if isinstance(space, MultiBinary):
        return SpaceView("multi_binary", space.shape, "int8")
    if isinstance(space, MultiDiscrete):
        return SpaceView("multi_discrete", space.shape, "int64")
    if isinstance(space, Text):
        return SpaceView("text")
    if isinstance(space, Dict):
        return SpaceView(
            "dict", keys=space.keys(), children=tuple(_from_trio(s) for s in space.values())
        )
    if isinstance(space, Tuple):
        return SpaceView("tuple", children=tuple(_from_trio(s) for s in space))
    raise TypeError(f"cannot read space {space!r}")


def _from_gymnasium(space: Any) -> SpaceView:
    from gymnasium import spaces as gym_spaces

    if isinstance(space, gym_spaces.Box):
        low = np.broadcast_to(space.low, space.shape)
        high = np.broadcast_to(space.high, space.shape)
        unbounded = bool(np.isneginf(low).all() and np.isposinf(high).all())
        return SpaceView(
            "box",
            tuple(space.shape),
            np.dtype(space.dtype).name,
            None if unbounded else _bounds(low),
            None if unbounded else _bounds(high),
        )
    if isinstance(space, gym_spaces.Discrete):
        return SpaceView("discrete", (), "int64")
    if isinstance(space, gym_spaces.MultiBinary):
        return SpaceView("multi_binary", tuple(np.atleast_1d(space.n)), "int8")
    if isinstance(space, gym_spaces.MultiDiscrete):
        return SpaceView("multi_discrete", tuple(space.shape), "int64")
    if isinstance(space, gym_spaces.Text):
        return SpaceView("text")
    if isinstance(space, gym_spaces.Dict):
        keys = tuple(space.spaces)
        return SpaceView("dict", keys=keys, children=tuple(_from_gymnasium(space[k]) for k in keys))
    if isinstance(space, gym_spaces.Tuple):
        return SpaceView("tuple", children=tuple(_from_gymnasium(s) for s in space.spaces))
    raise TypeError(f"cannot read space {space!r}")


def _from_mapping(raw: Mapping[str, Any]) -> SpaceView:
    """A RLMesh ``SpaceView`` JSON object (``{"kind": "box", "shape": [...], ...}``)."""
    children: Sequence[Any] = raw.get("children", ())
    low, high = raw.get("low"), raw.get("high")
    return SpaceView(
        raw["kind"],
        tuple(raw.get("shape", ())),
        raw.get("dtype", "unspecified"),
        None if low is None else tuple(float(v) for v in low),
        None if high is None else tuple(float(v) for v in high),
        tuple(raw.get("keys", ())),
        tuple(_from_mapping(c) for c in children),
    )


def view_of(space: object) -> SpaceView:
    """The view of any space form resolution accepts.

    Raises:
        TypeError: ``space`` is none of a Gymnasium space, a trio-rlmesh space, a protocol
            ``SpaceSpec`` or a ``SpaceView`` mapping.
    """
    if isinstance(space, SpaceView):
        return space
    if isinstance(space, Space):
        return _from_trio(space)
    if isinstance(space, spaces_v1.SpaceSpec):
        return _from_trio(spec_to_space(space))
    if isinstance(space, Mapping) and "kind" in space:
        return _from_mapping(space)
    module = type(space).__module__
    if module.startswith("gymnasium"):
        return _from_gymnasium(space)
    raise TypeError(
        f"cannot resolve against a space of type {type(space).__name__}; pass a gymnasium "
        "space, a trio_rlmesh.spaces space or a protocol SpaceSpec"
    )
