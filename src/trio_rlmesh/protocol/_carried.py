"""A ``SpaceValue`` that carries its decoded batch, for values that stay in the process.

When both ends of a run are in the process (an env object and a model object), an
observation or an action batch would be encoded into leaf bytes only to be decoded again
on the other side. A :class:`CarriedValue` is a ``SpaceValue`` holding the batch as the
receiver would decode it (:func:`~trio_rlmesh.spaces._codec.carry_batch`: checked,
converted, read-only, a snapshot); a receiver that knows the space takes the batch
(:func:`carried_batch`) and decodes nothing. Whoever reads ``leaves`` (a hook's raw
payload, a recording, a wire encoder) gets the bytes, encoded once, on first use; they
equal what :func:`~trio_rlmesh.spaces.encode_batch` makes of the batch.
"""

from __future__ import annotations

from typing import Any

from ..spaces import Space, encode_batch
from ._generated.rlmesh.spaces import v1 as spaces_v1

__all__ = ["CarriedValue", "carried_batch"]


class CarriedValue(spaces_v1.SpaceValue):
    """A ``SpaceValue`` of ``n`` lanes of ``space`` holding ``batch`` (already carried:
    see the module docstring); its ``leaves`` are encoded on first read."""

    def __init__(self, space: Space, batch: Any, n: int) -> None:
        # The dataclass __init__ would assign ``leaves``; only what betterproto2 keeps.
        self._unknown_fields = b""
        self.space = space
        self.batch = batch
        self.n = n
        self._leaves: list[bytes] | None = None

    @property
    def leaves(self) -> list[bytes]:
        leaves = self._leaves
        if leaves is None:
            leaves = self._leaves = encode_batch(self.space, self.batch, self.n)
        return leaves

    @leaves.setter
    def leaves(self, value: list[bytes]) -> None:
        self._leaves = value

    def plain(self) -> spaces_v1.SpaceValue:
        """The same value as a plain ``SpaceValue`` (what the wire encoders expect)."""
        return spaces_v1.SpaceValue(leaves=self.leaves)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, spaces_v1.SpaceValue):
            return self.leaves == other.leaves
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"CarriedValue(n={self.n}, batch={self.batch!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (spaces_v1.SpaceValue, (list(self.leaves),))

    # Copies are plain SpaceValues of the same leaves (betterproto2's copies would call
    # this class with the dataclass fields).
    def __copy__(self, _: Any = None) -> spaces_v1.SpaceValue:  # type: ignore[override]
        return self.plain()

    def __deepcopy__(self, _: Any = None) -> spaces_v1.SpaceValue:  # type: ignore[override]
        return spaces_v1.SpaceValue(leaves=list(self.leaves))


_SAME: dict[tuple[int, int], tuple[Space, Space, bool]] = {}
"""Whether two space objects are equal, by their ids (the objects kept, so ids stay theirs)."""


def _same_space(a: Space, b: Space) -> bool:
    key = (id(a), id(b))
    known = _SAME.get(key)
    if known is None:
        if len(_SAME) > 64:
            _SAME.clear()
        known = _SAME[key] = (a, b, a == b)
    return known[2]


def carried_batch(value: spaces_v1.SpaceValue | None, space: Space, n: int) -> Any | None:
    """The batch ``value`` carries when it is a :class:`CarriedValue` of ``n`` lanes of a
    space equal to ``space``; ``None`` otherwise (decode its leaves then)."""
    if type(value) is not CarriedValue or value.n != n:
        return None
    if value.space is not space and not _same_space(value.space, space):
        return None
    return value.batch
