"""Hypothesis strategies for betterproto2 messages, built by walking the field metadata.

:func:`messages` reads ``Message._betterproto`` (the metadata betterproto2 serializes with
and the fast codec is generated from), so a field added to a ``.proto`` is generated here
too without touching a test. Every field gets values of its proto type, edge values
included; a oneof gets none or one of its arms; explicit-presence fields are ``None`` or a
value (zero included); map values may be ``None`` (a null, see ``_metamap``).

Also the comparison the codec tests use: :func:`same` is deep equality with floats compared
bitwise and ``_unknown_fields`` included.
"""

from __future__ import annotations

import functools
import math
import struct
from typing import Any, TypeVar

import betterproto2
from hypothesis import strategies as st

__all__ = ["DOUBLE", "SCALARS", "TEXT", "messages", "same"]

T = TypeVar("T")

I64 = st.integers(-(2**63), 2**63 - 1) | st.sampled_from([0, 1, -1, -(2**63), 2**63 - 1])
U64 = st.integers(0, 2**64 - 1) | st.sampled_from([0, 1, 127, 128, 2**63, 2**64 - 1])
I32 = st.integers(-(2**31), 2**31 - 1) | st.sampled_from([0, 1, -1, -(2**31), 2**31 - 1])
U32 = st.integers(0, 2**32 - 1) | st.sampled_from([0, 1, 127, 128, 2**32 - 1])
TEXT = st.text(max_size=8) | st.sampled_from(["", "grpc-req-1", "01a22bf2-711c-74c3", "é🦀\u0000"])
BLOB = st.binary(max_size=20)
DOUBLE = st.floats(width=64) | st.sampled_from(
    [0.0, -0.0, math.inf, -math.inf, math.nan, 1.0, 5e-324, struct.unpack("<d", b"\x01" * 8)[0]]
)
FLOAT = st.floats(width=32) | st.sampled_from([0.0, -0.0, math.inf, math.nan, 1.5])

SCALARS: dict[str, st.SearchStrategy[Any]] = {
    "int64": I64,
    "sint64": I64,
    "sfixed64": I64,
    "uint64": U64,
    "fixed64": U64,
    "int32": I32,
    "sint32": I32,
    "sfixed32": I32,
    "uint32": U32,
    "fixed32": U32,
    "bool": st.booleans(),
    "double": DOUBLE,
    "float": FLOAT,
    "string": TEXT,
    "bytes": BLOB,
}
"""A strategy per scalar proto type, in the range the type holds."""

MAX_DEPTH = 5
"""How deep messages nest (MetaValue holds MetaList and MetaMap, which hold MetaValue)."""


def _enum(cls: Any) -> st.SearchStrategy[Any]:
    # Unknown values too: betterproto2 keeps them as pseudo-members, and so must the codec.
    return st.sampled_from(list(cls)) | st.integers(0, 300).map(cls)


def _value(
    owner: type[betterproto2.Message], name: str, proto_type: str, depth: int
) -> st.SearchStrategy[Any] | None:
    """Values of one element of field ``name``; ``None`` when nesting is too deep."""
    meta = owner._betterproto
    if proto_type == "message":
        if depth <= 0:
            return None
        return messages(meta.cls_by_field[name], depth=depth - 1)
    if proto_type == "enum":
        return _enum(meta.cls_by_field[name])
    return SCALARS[proto_type]


@functools.cache
def messages(
    cls: type[betterproto2.Message], *, declined: tuple[str, ...] = (), depth: int = MAX_DEPTH
) -> st.SearchStrategy[Any]:
    """Messages of ``cls`` with any of its fields set, except the oneof arms ``declined``."""
    meta = cls._betterproto
    plain: dict[str, st.SearchStrategy[Any]] = {}
    arms: dict[str, list[st.SearchStrategy[dict[str, Any]]]] = {}
    for name, field in meta.meta_by_field_name.items():
        if name in declined:
            continue
        strategy: st.SearchStrategy[Any] | None
        if field.proto_type == "map":
            assert field.map_meta is not None
            key_type, value_type = (m.proto_type for m in field.map_meta)
            assert value_type == "message", "only message-valued maps are generated"
            if depth <= 0:
                continue
            values = messages(meta.cls_by_field[f"{name}.value"], depth=depth - 1)
            strategy = st.dictionaries(SCALARS[key_type], st.none() | values, max_size=3)
        else:
            strategy = _value(cls, name, field.proto_type, depth)
            if strategy is None:
                continue
            if field.repeated:
                strategy = st.lists(strategy, max_size=3 if field.proto_type == "message" else 4)
            elif field.optional or (field.proto_type == "message" and not field.group):
                strategy = st.none() | strategy
        if field.group:
            arms.setdefault(field.group, []).append(strategy.map(functools.partial(_one, name)))
        else:
            plain[name] = strategy
    groups = [st.one_of(st.just({}), *choices) for _, choices in sorted(arms.items())]
    return st.builds(functools.partial(_build, cls), st.fixed_dictionaries(plain), *groups)


def _one(name: str, value: Any) -> dict[str, Any]:
    return {name: value}


def _build(cls: type[T], plain: dict[str, Any], *arms: dict[str, Any]) -> T:
    fields = dict(plain)
    for arm in arms:
        fields.update(arm)
    return cls(**fields)


def same(a: Any, b: Any) -> bool:
    """Deep equality: same types, floats bitwise, dict order, ``_unknown_fields`` too."""
    if isinstance(a, betterproto2.Message):
        if type(a) is not type(b) or a._unknown_fields != b._unknown_fields:
            return False
        return all(
            same(getattr(a, name), getattr(b, name)) for name in a._betterproto.meta_by_field_name
        )
    if isinstance(a, float) or isinstance(b, float):
        return type(a) is type(b) and struct.pack("<d", a) == struct.pack("<d", b)
    if isinstance(a, list):
        return type(b) is list and len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, dict):
        return (
            type(b) is dict
            and list(a) == list(b)
            and all(same(value, b[key]) for key, value in a.items())
        )
    return type(a) is type(b) and bool(a == b)
