"""Field coercions the spec classes share at construction.

Each spec class normalizes a few loosely typed fields to one canonical shape, so that equal
specs compare equal and hash alike whatever form they were written in: a one-element
encoding list is the bare string, a per-axis sequence a tuple of floats, labels a tuple.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .._errors import SpecError

__all__ = ["axis_or_scalar", "check_accept_set", "check_labels", "hashable_node", "one_or_many"]


def one_or_many(value: Any) -> Any:
    """A single value as is; a list or tuple as a tuple, unwrapped when it has one element.

    The wire form writes a one-element preference list as the bare string, so unwrapping
    here keeps ``from_dict(spec.to_dict()) == spec``.
    """
    if isinstance(value, (list, tuple)):
        items = tuple(value)
        return items[0] if len(items) == 1 else items
    return value


def check_accept_set(what: str, role: str | None, encoding: Any) -> None:
    """Refuse a preference list holding anything but rotation-name strings."""
    if isinstance(encoding, tuple):
        for member in encoding:
            if not isinstance(member, str):
                raise SpecError(
                    f"{what} {role!r}: an encoding accept-set must contain only "
                    f"rotation-name strings, got {type(member).__name__}; a "
                    "CustomEncoding is a single encoding, not an accept-set member"
                )


def axis_or_scalar(what: str, role: str | None, name: str, value: Any) -> Any:
    """A number as is, a sequence of numbers as a tuple of floats (the per-axis form)."""
    if value is None or isinstance(value, (int, float)):
        return value
    try:
        if isinstance(value, (str, bytes)):
            raise TypeError
        values = tuple(float(item) for item in value)
    except (TypeError, ValueError):
        raise SpecError(
            f"{what} {role!r}: {name} must be a number or a sequence of numbers, got {value!r}"
        ) from None
    if not values:
        raise SpecError(f"{what} {role!r}: {name} must carry at least one value")
    return values


def check_labels(
    what: str, role: str | None, labels: Iterable[Any] | None
) -> tuple[str, ...] | None:
    """Labels as a tuple of strings: at least one, none repeated."""
    if labels is None:
        return None
    names = tuple(str(label) for label in labels)
    if not names:
        raise SpecError(f"{what} {role!r}: labels must name at least one axis")
    if len(set(names)) != len(names):
        raise SpecError(f"{what} {role!r}: labels must not repeat an axis name")
    return names


def hashable_node(node: Any) -> Any:
    """A spec tree node in a hashable form that ignores Dict key order (as ``==`` does)."""
    if isinstance(node, Mapping):
        return tuple((key, hashable_node(child)) for key, child in sorted(node.items()))
    if isinstance(node, tuple):
        return tuple(hashable_node(child) for child in node)
    return node
