"""Strict protobuf parsing on top of betterproto2.

betterproto2 0.10 is lenient where a server must not be: it parses truncated input, turns
a field sent with the wrong wire type into a value of the wrong Python type (a message
field becomes an ``int``, and the handler dies later with ``AttributeError``), and keeps
every arm of a oneof that appears more than once. :func:`decode_checked` walks the bytes
first, using the generated field metadata, and then parses:

* framing: varints end, lengths fit, no group wire types;
* every known field arrives with the wire type its declaration allows (packed or unpacked
  for repeated scalars); strings are valid UTF-8;
* oneofs: the last arm on the wire wins, as protobuf specifies, at every nesting level.

Unknown fields of any wire type are skipped, as protobuf requires.
"""

from __future__ import annotations

from typing import Any, Final, TypeVar

import attrs

from ._wire import read_varint, skip_field

__all__ = ["check_wire", "decode_checked"]

_M = TypeVar("_M")

_VARINT_TYPES: Final = frozenset(
    {"int32", "int64", "uint32", "uint64", "sint32", "sint64", "bool", "enum"}
)
_FIXED64_TYPES: Final = frozenset({"fixed64", "sfixed64", "double"})
_FIXED32_TYPES: Final = frozenset({"fixed32", "sfixed32", "float"})
_LENGTH_TYPES: Final = frozenset({"string", "bytes", "message", "map"})


def _wire_types(proto_type: str, repeated: bool) -> frozenset[int]:
    if proto_type in _LENGTH_TYPES:
        return frozenset({2})
    scalar = 0 if proto_type in _VARINT_TYPES else 1 if proto_type in _FIXED64_TYPES else 5
    return frozenset({scalar, 2}) if repeated else frozenset({scalar})


@attrs.define
class _Repairs:
    """What to fix in a parsed message: the winning arm per oneof, and nested plans."""

    oneofs: dict[str, str] = attrs.field(factory=dict)
    fields: dict[str, Any] = attrs.field(factory=dict)
    """field name -> _Repairs (singular), list[_Repairs | None] (repeated) or
    dict[key, _Repairs] (map of messages)."""

    def __bool__(self) -> bool:
        return bool(self.oneofs or self.fields)


def _walk(data: bytes, message_type: Any, pos: int, end: int) -> _Repairs:
    meta = message_type._betterproto
    names = meta.field_name_by_number
    fields = meta.meta_by_field_name
    plan = _Repairs()
    while pos < end:
        key, pos = read_varint(data, pos, end)
        number, wire_type = key >> 3, key & 7
        if number == 0:
            raise ValueError("field number 0")
        start, pos = skip_field(data, pos, end, key)
        name = names.get(number)
        if name is None:
            continue  # unknown field: skipped, whatever its wire type
        field = fields[name]
        if wire_type not in _wire_types(field.proto_type, field.repeated):
            raise ValueError(
                f"{message_type.__name__}.{name} arrived with wire type {wire_type}, "
                f"which a {field.proto_type} field cannot have"
            )
        if field.group is not None:
            plan.oneofs[field.group] = name
        if field.proto_type == "string":
            try:
                bytes(data[start:pos]).decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ValueError(f"{message_type.__name__}.{name} is not valid UTF-8") from exc
        elif field.proto_type == "message":
            child: _Repairs = _walk(data, meta.cls_by_field[name], start, pos)
            if field.repeated:
                plan.fields.setdefault(name, []).append(child or None)
            elif child:
                plan.fields[name] = child
            else:
                plan.fields.pop(name, None)
        elif field.proto_type == "map":
            value_type = meta.cls_by_field.get(f"{name}.value")
            key_value, entry_plan = _walk_map_entry(
                data, value_type, field, start, pos, message_type, name
            )
            if entry_plan:
                plan.fields.setdefault(name, {})[key_value] = entry_plan
    return plan


def _walk_map_entry(
    data: bytes,
    value_type: Any,
    field: Any,
    pos: int,
    end: int,
    owner: Any,
    name: str,
) -> tuple[Any, _Repairs | None]:
    key_meta, value_meta = field.map_meta
    key: Any = None
    plan: _Repairs | None = None
    child: _Repairs
    while pos < end:
        tag, pos = read_varint(data, pos, end)
        number, wire_type = tag >> 3, tag & 7
        start, pos = skip_field(data, pos, end, tag)
        entry = {1: key_meta, 2: value_meta}.get(number)
        if entry is None:
            continue
        if wire_type not in _wire_types(entry.proto_type, False):
            raise ValueError(
                f"a {owner.__name__}.{name} map entry has a field of wire type {wire_type}"
            )
        if entry.proto_type == "string":
            try:
                text = bytes(data[start:pos]).decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ValueError(
                    f"a {owner.__name__}.{name} key or value is not valid UTF-8"
                ) from exc
            if number == 1:
                key = text
        elif number == 1:
            key = bytes(data[start:pos]) if wire_type == 2 else read_varint(data, start, pos)[0]
        elif entry.proto_type == "message" and value_type is not None:
            child = _walk(data, value_type, start, pos)
            plan = child or None
    return key, plan


def check_wire(data: bytes, message_type: type[Any]) -> None:
    """Raise ``ValueError`` unless ``data`` is well-formed ``message_type`` protobuf."""
    _walk(data, message_type, 0, len(data))


def _apply(message: Any, plan: _Repairs) -> None:
    meta = type(message)._betterproto
    for group, winner in plan.oneofs.items():
        for field in meta.oneof_field_by_group[group]:
            if field.name != winner and getattr(message, field.name) is not None:
                setattr(message, field.name, None)
    for name, nested in plan.fields.items():
        value = getattr(message, name, None)
        if value is None:
            continue
        if isinstance(nested, _Repairs):
            _apply(value, nested)
        elif isinstance(nested, list):
            for item, item_plan in zip(value, nested, strict=False):
                if item_plan is not None:
                    _apply(item, item_plan)
        else:
            for key, item_plan in nested.items():
                item = value.get(key)
                if item is not None:
                    _apply(item, item_plan)


def decode_checked(message_type: type[_M], data: bytes) -> _M:
    """Parse ``data`` as ``message_type`` strictly (see the module docstring).

    >>> from trio_rlmesh.protocol import env_v1
    >>> decode_checked(env_v1.StepRequest, b"\\x08\\x01")
    Traceback (most recent call last):
    ...
    ValueError: StepRequest.action arrived with wire type 0, which a message field cannot have

    Raises:
        ValueError: malformed input, with the field at fault named.
    """
    plan = _walk(data, message_type, 0, len(data))
    message: _M = message_type.FromString(data)  # type: ignore[attr-defined]
    if plan:
        _apply(message, plan)
    return message
