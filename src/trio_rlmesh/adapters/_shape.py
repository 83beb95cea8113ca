"""What the spec classes' JSON documents share; no spec class is imported here.

Each spec module writes and reads its own classes' documents (:mod:`._action_spec`,
:mod:`._env_spec`, :mod:`._model_spec`). Writing builds the document the way RLMesh's Python
half shapes it, then runs it through the strict reader (:mod:`._wire`), which validates it and
returns the canonical form; reading validates first and builds the classes from the canonical
form. So a document we publish is byte for byte the one RLMesh publishes for the same spec.
The pieces those writers and readers have in common live here.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from .._errors import SpecError
from ._errors import AdapterResolutionError

__all__ = [
    "document_in",
    "json_round_trip",
    "pair",
    "read_tree",
    "walk_tree",
    "write_present",
    "write_scaled",
]


def json_round_trip(raw: Mapping[str, Any]) -> Any:
    """``raw`` as JSON text would carry it (RLMesh hands its reader JSON text).

    Raises:
        SpecError: ``raw`` holds a value JSON cannot carry (a NaN, an infinity).
    """
    try:
        text = json.dumps(raw, allow_nan=False)
    except ValueError as exc:
        raise SpecError(str(exc)) from None
    return json.loads(text)


def document_in(metadata: Mapping[str, Any], key: str) -> Mapping[str, Any] | None:
    """The document published under ``key`` in ``metadata``, or ``None`` when there is none.

    Raises:
        AdapterResolutionError: the key holds something other than a mapping.
    """
    payload = metadata.get(key)
    if payload is None:
        return None
    if not isinstance(payload, Mapping):
        raise AdapterResolutionError(f"metadata key {key!r} must hold a mapping")
    return payload


def walk_tree(
    node: Any, leaf: Callable[[Any], Any], is_leaf: Callable[[Any], bool], what: str
) -> Any:
    """``node`` with each leaf replaced by ``leaf(it)``: a dict stays a dict, a tuple a list."""
    if is_leaf(node):
        return leaf(node)
    if isinstance(node, Mapping):
        return {key: walk_tree(child, leaf, is_leaf, what) for key, child in node.items()}
    if isinstance(node, tuple):
        return [walk_tree(child, leaf, is_leaf, what) for child in node]
    raise TypeError(f"{what} node must be a leaf, a dict, or a tuple, got {node!r}")


def read_tree(node: Any, leaf: Callable[[Any], Any], is_leaf: Callable[[Any], bool]) -> Any:
    """The tree of a canonical document: a list becomes a tuple, a dict stays a dict, and
    each leaf is ``leaf(it)`` (:func:`walk_tree`'s inverse)."""
    if isinstance(node, list):
        return tuple(read_tree(child, leaf, is_leaf) for child in node)
    if is_leaf(node):
        return leaf(node)
    return {key: read_tree(child, leaf, is_leaf) for key, child in node.items()}


def pair(value: Any) -> tuple[float, float] | None:
    """A document's ``[low, high]`` as a float pair (``None`` stays ``None``)."""
    return None if value is None else (float(value[0]), float(value[1]))


def write_scaled(out: dict[str, Any], spec: Any) -> None:
    """``spec``'s ``scale`` and ``offset`` into ``out``, each when set."""
    # A per-axis sequence goes under its own ``axis_`` key; the scalar key never changes type.
    for name in ("scale", "offset"):
        value = getattr(spec, name)
        if isinstance(value, tuple):
            out[f"axis_{name}"] = list(value)
        elif value is not None:
            out[name] = value


def write_present(out: dict[str, Any], spec: Any, names: tuple[str, ...]) -> dict[str, Any]:
    """``out`` with each of ``spec``'s ``names`` that is set (labels as a list), in order."""
    for name in names:
        value = getattr(spec, name)
        if value is not None:
            out[name] = list(value) if name == "labels" else value
    return out
