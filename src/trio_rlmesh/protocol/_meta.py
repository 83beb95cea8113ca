"""Conversions between ``MetaMap``/``MetaValue`` messages and plain Python values.

Python to wire follows the reference's env-``info`` rules: namedtuples become dicts,
anything with ``tolist`` (numpy arrays and scalars) is converted through it, anything
with ``item`` through that; then None, bytes, dict, list/tuple, bool, int (within
int64; larger ones become numbers), float, str and enums (by value, else by name).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from .._errors import MetaConversionError
from ._generated.rlmesh.spaces import v1 as spaces_v1

__all__ = ["MetaConversionError", "meta_to_python", "python_to_meta", "value_to_python"]

_I64_MIN = -(2**63)
_I64_MAX = 2**63 - 1


def _normalize(value: Any) -> Any:
    asdict = getattr(value, "_asdict", None)
    if callable(asdict) and isinstance(value, tuple):
        return asdict()
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        return tolist()
    item = getattr(value, "item", None)
    if callable(item) and not isinstance(value, (dict, list, tuple, str, bytes)):
        return item()
    return value


def _to_value(value: Any, path: str) -> spaces_v1.MetaValue:
    value = _normalize(value)
    if value is None:
        return spaces_v1.MetaValue()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return spaces_v1.MetaValue(bytes=bytes(value))
    if isinstance(value, Mapping):
        return spaces_v1.MetaValue(map=_to_map(value, path))
    if isinstance(value, (list, tuple)):
        items = [_to_value(v, f"{path}[{i}]") for i, v in enumerate(value)]
        return spaces_v1.MetaValue(list=spaces_v1.MetaList(items=items))
    if isinstance(value, bool):
        return spaces_v1.MetaValue(bool=value)
    if isinstance(value, enum.Enum):
        inner = value.value
        if inner is not None:
            return _to_value(inner, path)
        return spaces_v1.MetaValue(text=value.name)
    if isinstance(value, int):
        if _I64_MIN <= value <= _I64_MAX:
            return spaces_v1.MetaValue(integer=value)
        return spaces_v1.MetaValue(number=float(value))
    if isinstance(value, float):
        return spaces_v1.MetaValue(number=value)
    if isinstance(value, str):
        return spaces_v1.MetaValue(text=value)
    name = getattr(value, "name", None)
    if isinstance(name, str):
        return spaces_v1.MetaValue(text=name)
    raise MetaConversionError(
        f"{path}: a {type(value).__name__} has no MetaValue form "
        "(use None, bool, int, float, str, bytes, list, tuple, dict or numpy values)"
    )


def _to_map(mapping: Mapping[Any, Any], path: str) -> spaces_v1.MetaMap:
    entries: dict[str, spaces_v1.MetaValue] = {}
    for key, child in mapping.items():
        if not isinstance(key, str):
            raise MetaConversionError(
                f"{path}: MetaMap keys must be str, got {type(key).__name__} {key!r}"
            )
        entries[key] = _to_value(child, f"{path}.{key}")
    return spaces_v1.MetaMap(entries=entries)


def python_to_meta(mapping: Mapping[str, Any], *, path: str = "$") -> spaces_v1.MetaMap:
    """Convert a dict (env info, reset options, metadata) to a ``MetaMap``.

    >>> import numpy as np
    >>> meta_to_python(python_to_meta({"x": np.arange(2), "ok": np.bool_(True)}))
    {'x': [0, 1], 'ok': True}
    """
    return _to_map(mapping, path)


def value_to_python(value: spaces_v1.MetaValue | None) -> Any:
    """Convert one ``MetaValue`` (``None`` or no arm set means null)."""
    if value is None:
        return None
    # betterproto2 leaves unset oneof arms as None; check the arms in wire order.
    if value.integer is not None:
        return value.integer
    if value.number is not None:
        return value.number
    if value.text is not None:
        return value.text
    if value.bool is not None:
        return value.bool
    if value.bytes is not None:
        return value.bytes
    if value.list is not None:
        return [value_to_python(v) for v in value.list.items]
    if value.map is not None:
        return meta_to_python(value.map)
    return None


def meta_to_python(meta: spaces_v1.MetaMap | None) -> dict[str, Any]:
    """Convert a ``MetaMap`` to a dict; an absent map becomes ``{}``."""
    if meta is None:
        return {}
    return {key: value_to_python(v) for key, v in meta.entries.items()}
