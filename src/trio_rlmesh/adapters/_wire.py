"""The JSON documents of adapters v1: validation and the canonical form.

One reader for both documents (env tags, model spec), in two modes:

- *strict* (publishing: ``to_dict``, ``from_dict``, ``tag``): an unknown field or leaf kind
  is an error, unless the field is named ``x-...`` (marked ignorable);
- *tolerant* (reading a peer's contract): an unknown leaf kind is kept as an
  :class:`UnknownLeaf` for the resolver to ignore or refuse, and unknown fields are recorded.

Either way the reader returns the canonical document: every field in RLMesh's order, each
default written out where RLMesh writes it, Dict nodes with sorted keys. Error messages name
where the problem is the way RLMesh's reader does (``invalid model spec at input: ...``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

import attrs

from .._errors import SpecError
from ._fmt import debug_float, display_float, quoted, render_placement
from ._vocab import (
    CHANNEL_ORDERS,
    CROP_MODES,
    ENCODING_ORDER,
    IMAGE_LAYOUTS,
    MAX_STACK,
    ROTATION_DIMS,
    STACK_PADS,
)

__all__ = [
    "Reading",
    "UnknownLeaf",
    "WireError",
    "read_env",
    "read_model",
    "rotation_is_valid",
]

Segments = tuple["str | int", ...]


class WireError(SpecError):
    """A document that does not read; ``str()`` is RLMesh's message for it."""


@attrs.frozen
class UnknownLeaf:
    """A leaf of a kind this reader does not define (tolerant mode only)."""

    kind: str
    role: str | None
    raw: Mapping[str, Any]


@attrs.define
class Reading:
    """What one read found besides the document: unknown fields, unknown leaf kinds."""

    side: str
    """``"env"`` or ``"model"``."""
    unknown_fields: list[str] = attrs.Factory(list)
    """One finished message per bare (not ``x-``) unknown field, in document order."""
    unknown_kinds: list[str] = attrs.Factory(list)
    """One finished message per leaf of an unknown kind, in document order."""


class _Fail(Exception):
    """A field-level failure; the caller adds RLMesh's ``at <path>`` prefix."""

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.path = path


def _fail(message: str, path: str | None = None) -> NoReturn:
    raise _Fail(message, path)


# ------------------------------------------------------------------------------------------
# Scalars, the way serde describes what it found


def _unexpected(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean `{str(value).lower()}`"
    if isinstance(value, int):
        return f"integer `{value}`"
    if isinstance(value, float):
        return f"floating point `{debug_float(value)}`"
    if isinstance(value, str):
        return f"string {quoted(value)}"
    if isinstance(value, (list, tuple)):
        return "sequence"
    if isinstance(value, Mapping):
        return "map"
    return type(value).__name__


def _expect(value: object, expected: str) -> NoReturn:
    _fail(f"invalid type: {_unexpected(value)}, expected {expected}")


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _number(value: object, expected: str = "a number") -> float:
    if not _is_number(value):
        _expect(value, expected)
    return float(value)  # type: ignore[arg-type]


def _string(value: object) -> str:
    if not isinstance(value, str):
        _expect(value, "a string")
    return value


def _opt_string(value: object) -> str | None:
    return None if value is None else _string(value)


def _boolean(value: object) -> bool:
    if not isinstance(value, bool):
        _expect(value, "a boolean")
    return value


def _count(value: object) -> int:
    """A non-negative integer (RLMesh's counts and dims)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        _expect(value, "a non-negative integer")
    if isinstance(value, float) or value < 0:
        _fail(f"must be a non-negative integer, got {_show_number(value)}")
    return int(value)


def _opt_count(value: object) -> int | None:
    return None if value is None else _count(value)


def _whole(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        _expect(value, "a whole number")
    if isinstance(value, float):
        if not value.is_integer():
            _fail(f"a whole number, got {_show_number(value)}")
        return int(value)
    return value


def _show_number(value: float) -> str:
    return str(value) if isinstance(value, int) else display_float(value)


def _variant(value: object, names: tuple[str, ...]) -> str:
    if not isinstance(value, str):
        _expect(value, "string or map")
    if value not in names:
        if len(names) == 2:
            expected = f"`{names[0]}` or `{names[1]}`"
        else:
            expected = "one of " + ", ".join(f"`{name}`" for name in names)
        _fail(f"unknown variant `{value}`, expected {expected}")
    return value


def _sequence(value: object) -> list[Any]:
    if not isinstance(value, (list, tuple)):
        _expect(value, "a sequence")
    return list(value)


def _range(value: object) -> list[float]:
    """A ``[min, max]`` pair of numbers, ``min <= max``."""
    if not isinstance(value, (list, tuple)):
        _expect(value, "a range [min, max]")
    if len(value) != 2:
        _fail(f"range must be a pair of numbers [min, max], got {len(value)}")
    low, high = _number(value[0]), _number(value[1])
    if not low <= high:
        _fail(
            f"range [min, max] must have min <= max, got "
            f"[{_show_number(value[0])}, {_show_number(value[1])}]"
        )
    return [low, high]


def _opt_range(value: object) -> list[float] | None:
    return None if value is None else _range(value)


def _accept_set(value: object, expected: str) -> str | list[str]:
    """A name or a non-empty list of names, repeats dropped; one name is written bare."""
    if isinstance(value, str):
        return value
    if not isinstance(value, (list, tuple)):
        _expect(value, expected)
    if not value:
        _fail("an encoding preference list must name at least one encoding")
    names = list(dict.fromkeys(_string(item) for item in value))
    return names[0] if len(names) == 1 else names


_ENCODING_SET = "an encoding name or a non-empty list of encoding names"


def _labels(value: object) -> list[str]:
    return [_string(item) for item in _sequence(value)]


def _axis(value: object) -> list[float]:
    return [_number(item) for item in _sequence(value)]


# ------------------------------------------------------------------------------------------
# Objects: read declared fields in order, keep ``x-`` extras, record the rest


class _Fields:
    """One JSON object being read: each field is taken once; what is left is unknown."""

    def __init__(self, raw: Mapping[str, Any]) -> None:
        self.raw = raw
        self.taken: set[str] = set()

    def has(self, name: str) -> bool:
        return name in self.raw

    def get(self, name: str, default: Any = None) -> Any:
        self.taken.add(name)
        return self.raw.get(name, default)

    def need(self, name: str) -> Any:
        self.taken.add(name)
        if name not in self.raw:
            _fail(f"missing field `{name}`")
        return self.raw[name]

    def extras(self) -> tuple[dict[str, Any], list[str]]:
        """``(x- fields sorted, bare unknown field names in document order)``."""
        rest = [name for name in self.raw if name not in self.taken and name != "type"]
        marked = {name: self.raw[name] for name in sorted(rest) if name.startswith("x-")}
        bare = [name for name in rest if not name.startswith("x-")]
        return marked, bare


def _unrecognized(where: str, name: str) -> str:
    return (
        f"{where} declares unrecognized field {quoted(name)}; upgrade the runtime or drop "
        "the field (or prefix it `x-` to mark it ignorable)"
    )


def _close(fields: _Fields, out: dict[str, Any], reading: Reading, where: str) -> dict[str, Any]:
    marked, bare = fields.extras()
    out.update(marked)
    reading.unknown_fields.extend(_unrecognized(where, name) for name in bare)
    return out


def _strict_fields(fields: _Fields, allowed: tuple[str, ...], what: str) -> None:
    """Refuse any field but ``allowed`` (RLMesh's ``deny_unknown_fields`` structs)."""
    for name in fields.raw:
        if name not in allowed:
            if len(allowed) == 1:
                expected = f"`{allowed[0]}`"
            elif len(allowed) == 2:
                expected = f"`{allowed[0]}` or `{allowed[1]}`"
            else:
                expected = "one of " + ", ".join(f"`{a}`" for a in allowed)
            _fail(f"unknown field `{name}`, expected {expected}", what)


# ------------------------------------------------------------------------------------------
# Trees


def _read_tree(
    node: object,
    segments: Segments,
    kind_word: str,
    read_leaf: Callable[[Mapping[str, Any], Segments], Any],
    known: tuple[str, ...],
    reading: Reading,
) -> Any:
    if isinstance(node, (list, tuple)):
        return [
            _read_tree(child, (*segments, index), kind_word, read_leaf, known, reading)
            for index, child in enumerate(node)
        ]
    if isinstance(node, Mapping):
        if "type" in node:
            kind = node["type"]
            if not isinstance(kind, str):
                _fail(f'the reserved key "type" may not name a dict child ({kind_word} tree)')
            if kind in known:
                return read_leaf(node, segments)
            where = render_placement(segments)
            reading.unknown_kinds.append(
                f"{kind_word} {quoted(where)} declares unrecognized kind {quoted(kind)}; "
                "this core cannot build it (upgrade the runtime, or this spec cannot be "
                "published here)"
            )
            role = node.get("role")
            return UnknownLeaf(kind, role if isinstance(role, str) else None, dict(node))
        return {
            key: _read_tree(node[key], (*segments, key), kind_word, read_leaf, known, reading)
            for key in sorted(node)
        }
    _expect(node, f"a {kind_word} leaf, a dict of nodes, or a tuple (array) of nodes")


# ------------------------------------------------------------------------------------------
# Model leaves


def _read_image(raw: Mapping[str, Any], segments: Segments, reading: Reading) -> dict[str, Any]:
    f = _Fields(raw)
    out: dict[str, Any] = {"type": "image", "role": _string(f.need("role"))}
    part = _opt_string(f.get("part"))
    if part is not None:
        out["part"] = part
    out["height"] = _opt_count(f.get("height"))
    out["width"] = _opt_count(f.get("width"))
    out["layout"] = _variant(f.get("layout", "hwc"), IMAGE_LAYOUTS)
    channels = _opt_count(f.get("channels"))
    if channels is not None:
        out["channels"] = channels
    out["dtype"] = _string(f.get("dtype", "uint8"))
    out["normalize"] = _normalize(f.get("normalize", False))
    out["lead_dims"] = _count(f.get("lead_dims", 0))
    out["upside_down"] = _boolean(f.get("upside_down", False))
    out["resample"] = _string(f.get("resample", "bilinear"))
    if _boolean(f.get("allow_upscale", False)):
        out["allow_upscale"] = True
    fit = f.get("fit")
    if fit is not None:
        out["fit"] = _accept_set(fit, _ENCODING_SET)
    if _boolean(f.get("optional", False)):
        out["optional"] = True
    fill = f.get("fill")
    if fill is not None:
        out["fill"] = _u8(fill)
    stack = _count(f.get("stack", 1))
    if not 1 <= stack <= MAX_STACK:
        _fail(f"stack must be between 1 and {MAX_STACK}, got {stack}")
    if stack != 1:
        out["stack"] = stack
    for name in ("crop", "crop_area"):
        value = f.get(name)
        if value is not None:
            fraction = _number(value)
            if not 0.0 < fraction <= 1.0:
                _fail(f"must be a fraction in (0, 1], got {_show_number(value)}")
            out[name] = fraction
    crop_mode = _variant(f.get("crop_mode", "zoom"), CROP_MODES)
    if crop_mode != "zoom":
        out["crop_mode"] = crop_mode
    quality = f.get("jpeg_quality")
    if quality is not None:
        quality = _count(quality)
        if not 1 <= quality <= 100:
            _fail(f"jpeg_quality must be between 1 and 100, got {quality}")
        out["jpeg_quality"] = quality
    channel_order = _variant(f.get("channel_order", "rgb"), CHANNEL_ORDERS)
    if channel_order != "rgb":
        out["channel_order"] = channel_order
    render = f.get("render")
    if render is not None:
        out["render"] = _render(render)
    offsets = f.get("offsets")
    if offsets is not None:
        out["offsets"] = [_whole(v) for v in _sequence(offsets)]
    stack_pad = _variant(f.get("stack_pad", "first"), STACK_PADS)
    if stack_pad != "first":
        out["stack_pad"] = stack_pad
    return _close(f, out, reading, f"feature {quoted(render_placement(segments))}")


def _u8(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        _expect(value, "u8")
    if not 0 <= value <= 255:
        _fail(f"invalid value: integer `{value}`, expected u8")
    return value


def _normalize(value: object) -> bool | list[float]:
    if isinstance(value, bool):
        return value
    if isinstance(value, (list, tuple)):
        return _range(value)
    _expect(value, "a bool or a normalize range [min, max]")


def _render(value: object) -> list[int]:
    if isinstance(value, (list, tuple)):
        if len(value) != 2:
            _fail(f"a size is an integer or a pair [height, width], got {len(value)} element(s)")
        pair = [_count(value[0]), _count(value[1])]
    elif _is_number(value):
        side = _count(value)
        pair = [side, side]
    else:
        _expect(value, "a size, an integer or a pair [height, width]")
    for axis, size in zip(("height", "width"), pair, strict=True):
        if not 1 <= size <= 4096:
            _fail(f"{axis} must be between 1 and 4096, got {size}")
    return pair


def rotation_is_valid(encoding: str, value: list[float]) -> bool:
    """Whether a ``post_rotate`` literal is a rotation (rot6d: orthonormal columns)."""
    if encoding not in ("rot6d", "rot6d_rowmajor"):
        return True
    if encoding == "rot6d":
        a, b = value[0:3], value[3:6]
    else:
        a, b = value[0::2], value[1::2]
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    norm_a = math.sqrt(sum(x * x for x in a))
    norm_b = math.sqrt(sum(x * x for x in b))
    tolerance = 1e-4
    return abs(norm_a - 1) <= tolerance and abs(norm_b - 1) <= tolerance and abs(dot) <= tolerance


def _post_rotate(value: object) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        _expect(value, "struct RotationLiteralWire")
    f = _Fields(value)
    _strict_fields(f, ("encoding", "value"), None)  # type: ignore[arg-type]
    encoding = _variant(f.need("encoding"), ENCODING_ORDER)
    numbers = _axis(f.need("value"))
    if encoding == "gravity_xyz":
        _fail(
            'post_rotate: encoding "gravity_xyz" is a direction, not a rotation; only a '
            "rotation encoding converts into it, and none out of it"
        )
    width = ROTATION_DIMS[encoding]
    if len(numbers) != width:
        _fail(f"post_rotate: encoding {quoted(encoding)} needs {width} values, got {len(numbers)}")
    if not rotation_is_valid(encoding, numbers):
        shown = "[" + ", ".join(debug_float(v) for v in numbers) + "]"
        _fail(
            f"post_rotate: {quoted(encoding)} value {shown} is not a rotation "
            "(its columns are not orthonormal)"
        )
    return {"encoding": encoding, "value": numbers}


def _custom_encoding(value: Mapping[str, Any], what: str) -> dict[str, Any]:
    f = _Fields(value)
    _strict_fields(f, ("base", "name", "from_base", "to_base"), None)  # type: ignore[arg-type]
    base = _variant(f.need("base"), ENCODING_ORDER)
    name = _string(f.get("name", "custom"))
    from_base = _opt_string(f.get("from_base"))
    to_base = _opt_string(f.get("to_base"))
    if from_base is None and to_base is None:
        _fail(
            f"custom encoding {quoted(name)} needs at least one of from_base (observation "
            "side) or to_base (action side)"
        )
    out: dict[str, Any] = {"base": base}
    if name != "custom":
        out["name"] = name
    if from_base is not None:
        out["from_base"] = from_base
    if to_base is not None:
        out["to_base"] = to_base
    return out


def _state_encoding(value: object) -> Any:
    if isinstance(value, Mapping):
        return _custom_encoding(value, "state")
    if isinstance(value, (str, list, tuple)):
        return _accept_set(value, _ENCODING_SET)
    _expect(value, "an encoding name, a list of encoding names, or a custom-encoding object")


def _scale_pair(f: _Fields, out: dict[str, Any], who: str) -> None:
    """``scale``/``offset`` (numbers) and ``axis_scale``/``axis_offset`` (sequences)."""
    values: dict[str, Any] = {}
    for name in ("scale", "offset"):
        value = f.get(name)
        if value is not None:
            values[name] = _number(value)
    for name in ("axis_scale", "axis_offset"):
        value = f.get(name)
        if value is not None:
            values[name] = _axis(value)
    _check_scale_forms(values, who)
    for name in ("scale", "offset", "axis_scale", "axis_offset"):
        if name in values:
            out[name] = values[name]


def _check_scale_forms(values: Mapping[str, Any], who: str) -> None:
    """Each of scale and offset is a scalar or a non-empty per-axis vector, not both."""
    for name in ("scale", "offset"):
        if name in values and f"axis_{name}" in values:
            _fail(
                f"{who}: sets both {name} and axis_{name}; a quantity is a scalar or a "
                "per-axis vector, not both"
            )
        if f"axis_{name}" in values and not values[f"axis_{name}"]:
            _fail(f"{who}: axis_{name} must carry at least one value")


def _check_labels(labels: list[str], who: str) -> None:
    if not labels:
        _fail(f"{who}: labels must name at least one axis")
    seen: set[str] = set()
    for label in labels:
        if label in seen:
            _fail(f"{who}: label {quoted(label)} is repeated")
        seen.add(label)


_NOT_FOR_RAW_OUTPUT = (
    "encoding",
    "index",
    "range",
    "optional",
    "post_rotate",
    "scale",
    "offset",
    "axis_scale",
    "axis_offset",
    "frame",
    "provenance",
)
"""What a part reading the model's own raw output (``source="action"``) cannot carry."""
_CONSTANT_ONLY = (*_NOT_FOR_RAW_OUTPUT, "part", "labels", "source")
"""What a constant part (no role) cannot carry."""


def _read_part(raw: object, index: int, segments: Segments, reading: Reading) -> Any:
    if isinstance(raw, str):
        return raw
    if not isinstance(raw, Mapping):
        _expect(raw, "a role name (string) or a state-part object")
    f = _Fields(raw)
    role = _opt_string(f.get("role"))
    where = f"feature {quoted(render_placement(segments))} part[{index}]"
    if role is None:
        if any(raw.get(name) not in (None, False) for name in _CONSTANT_ONLY):
            _fail(
                "a constant (role-less) state part carries only dim and fill; drop "
                "encoding/index/range/optional/post_rotate/scale/offset/axis_scale/"
                "axis_offset/frame/provenance/part/labels"
            )
        for name in _CONSTANT_ONLY:
            f.get(name)
        dim = f.get("dim")
        if dim is None:
            _fail("a constant (role-less) state part needs dim to size itself")
        constant: dict[str, Any] = {"dim": _count(dim)}
        fill = _number(f.get("fill", 0.0), "f64")
        if fill != 0.0:
            constant["fill"] = fill
        return _close(f, constant, reading, where)
    who = f"state part Some({quoted(role)})"
    out: dict[str, Any] = {"role": role}
    source = _variant(f.get("source", "observation"), ("observation", "action"))
    if source == "action":
        out["source"] = "action"
    encoding = f.get("encoding")
    if encoding is not None:
        out["encoding"] = _state_encoding(encoding)
    dim = _opt_count(f.get("dim"))
    index_ = _opt_count(f.get("index"))
    if dim is not None:
        out["dim"] = dim
    if index_ is not None:
        out["index"] = index_
    range_ = _opt_range(f.get("range"))
    if range_ is not None:
        out["range"] = range_
    optional = _boolean(f.get("optional", False))
    if optional:
        out["optional"] = True
    fill = _number(f.get("fill", 0.0), "f64")
    if fill != 0.0:
        out["fill"] = fill
    post_rotate = f.get("post_rotate")
    if post_rotate is not None:
        out["post_rotate"] = _post_rotate(post_rotate)
    _scale_pair(f, out, who)
    frame = _opt_string(f.get("frame"))
    if frame is not None:
        out["frame"] = frame
    provenance = f.get("provenance")
    if provenance is not None:
        out["provenance"] = _accept_set(provenance, _ENCODING_SET)
    part = _opt_string(f.get("part"))
    if part is not None:
        out["part"] = part
    labels = f.get("labels")
    if labels is not None:
        out["labels"] = _labels(labels)
    # The cross-field rules, in RLMesh's order.
    if dim is not None and index_ is not None:
        _fail(
            f"{who} sets both dim and index; index selects one element and dim truncates "
            "to the leading N -- set one, not both"
        )
    if source == "action" and any(name in out for name in _NOT_FOR_RAW_OUTPUT):
        _fail(
            f'{who}: source "action" reads the model\'s own raw output and carries only '
            "part/labels/dim/fill; drop encoding/index/range/optional/post_rotate/scale/"
            "offset/axis_scale/axis_offset/frame/provenance"
        )
    if fill != 0.0 and not optional and source == "observation":
        _fail(
            f"state part {quoted(role)}: fill applies only to a constant (role-less) or "
            "optional part; a roled, non-optional part takes its values from the env"
        )
    if post_rotate is not None and encoding is None:
        _fail(f"state part {quoted(role)}: post_rotate needs a rotation encoding")
    if "labels" in out:
        _check_labels(out["labels"], who)
        if index_ is not None:
            _fail(
                f"{who}: sets both labels and index; labels name every axis of the leaf, "
                "so drop one of them"
            )
        if dim is not None and dim != len(out["labels"]):
            _fail(
                f"{who}: declares dim {dim} but names {len(out['labels'])} labels; labels "
                "fix the width, so drop dim or make them agree"
            )
    if _is_role_only(out) and not f.extras()[0]:
        return role
    return _close(f, out, reading, where)


def _is_role_only(part: dict[str, Any]) -> bool:
    return list(part) == ["role"]


def _reshape(value: object) -> list[int]:
    dims = [_whole(v) for v in _sequence(value)]
    if sum(1 for d in dims if d == -1) > 1:
        _fail("reshape allows at most one -1 (infer) dimension")
    for d in dims:
        if d < -1:
            _fail(f"a reshape dimension is -1 (infer) or a non-negative size, got {d}")
    return dims


def _read_state(raw: Mapping[str, Any], segments: Segments, reading: Reading) -> dict[str, Any]:
    f = _Fields(raw)
    parts = [
        _read_part(part, index, segments, reading)
        for index, part in enumerate(_sequence(f.need("components")))
    ]
    out: dict[str, Any] = {"type": "state", "components": parts}
    pad_to = _opt_count(f.get("pad_to"))
    if pad_to is not None:
        out["pad_to"] = pad_to
    out["dtype"] = _string(f.get("dtype", "float32"))
    reshape = f.get("reshape")
    if reshape is not None:
        out["reshape"] = _reshape(reshape)
    container = _variant(f.get("container", "array"), ("array", "list"))
    if container != "array":
        out["container"] = container
    clip = _opt_range(f.get("clip"))
    if clip is not None:
        out["clip"] = clip
    if not parts:
        _fail("a state input needs at least one component")
    if all(isinstance(part, Mapping) and "role" not in part for part in parts):
        _fail(
            "a state input of only constant parts reads nothing from the env; give it at "
            "least one roled part"
        )
    return _close(f, out, reading, f"feature {quoted(render_placement(segments))}")


def _read_text(raw: Mapping[str, Any], segments: Segments, reading: Reading) -> dict[str, Any]:
    f = _Fields(raw)
    out: dict[str, Any] = {
        "type": "text",
        "role": _string(f.need("role")),
        "container": _variant(f.get("container", "str"), ("str", "list")),
        "fill": _opt_string(f.get("fill")),
    }
    return _close(f, out, reading, f"feature {quoted(render_placement(segments))}")


def _read_custom(raw: Mapping[str, Any], segments: Segments, reading: Reading) -> dict[str, Any]:
    f = _Fields(raw)
    out = {"type": "custom", "transform": _string(f.need("transform"))}
    return _close(f, out, reading, f"feature {quoted(render_placement(segments))}")


LeafReader = Callable[[Mapping[str, Any], Segments, Reading], Any]

_MODEL_LEAVES: dict[str, LeafReader] = {
    "image": _read_image,
    "state": _read_state,
    "text": _read_text,
    "custom": _read_custom,
}


# ------------------------------------------------------------------------------------------
# Env leaves


def _read_image_tag(raw: Mapping[str, Any], segments: Segments, reading: Reading) -> dict[str, Any]:
    f = _Fields(raw)
    out: dict[str, Any] = {
        "type": "image",
        "role": _string(f.need("role")),
        "layout": _variant(f.get("layout", "hwc"), IMAGE_LAYOUTS),
        "upside_down": _boolean(f.get("upside_down", False)),
    }
    part = _opt_string(f.get("part"))
    if part is not None:
        out["part"] = part
    return _close(f, out, reading, f"feature {quoted(render_placement(segments))}")


def _state_facts(f: _Fields, out: dict[str, Any]) -> None:
    """``frame``, ``provenance``, ``part``, ``labels`` of an env state leaf or field."""
    for name in ("frame", "provenance", "part"):
        value = _opt_string(f.get(name))
        if value is not None:
            out[name] = value
    labels = f.get("labels")
    if labels is not None:
        out["labels"] = _labels(labels)


def _read_state_tag(raw: Mapping[str, Any], segments: Segments, reading: Reading) -> dict[str, Any]:
    f = _Fields(raw)
    out: dict[str, Any] = {"type": "state", "role": _string(f.need("role"))}
    encoding = f.get("encoding")
    out["encoding"] = None if encoding is None else _accept_set(encoding, _ENCODING_SET)
    out["range"] = _opt_range(f.get("range"))
    _state_facts(f, out)
    return _close(f, out, reading, f"feature {quoted(render_placement(segments))}")


def _read_text_tag(raw: Mapping[str, Any], segments: Segments, reading: Reading) -> dict[str, Any]:
    f = _Fields(raw)
    out = {"type": "text", "role": _string(f.need("role"))}
    return _close(f, out, reading, f"feature {quoted(render_placement(segments))}")


def _read_field(raw: object, index: int, where: str, reading: Reading) -> dict[str, Any]:
    if not isinstance(raw, Mapping):
        _expect(raw, "struct FieldWire")
    f = _Fields(raw)
    role = _opt_string(f.get("role"))
    out: dict[str, Any] = {"role": role, "dim": _count(f.need("dim"))}
    encoding = f.get("encoding")
    out["encoding"] = None if encoding is None else _accept_set(encoding, _ENCODING_SET)
    out["range"] = _opt_range(f.get("range"))
    _state_facts(f, out)
    if out["dim"] < 1:
        _fail(f"state field dim must be >= 1, got {out['dim']}")
    if role is None and any(
        out.get(name) is not None
        for name in ("encoding", "range", "frame", "provenance", "part", "labels")
    ):
        _fail(
            "a role-less field (a skip) cannot carry an encoding, range, frame, provenance, "
            "part or labels"
        )
    labels = out.get("labels")
    if labels is not None:
        who = f"state field Some({quoted(role)})" if role is not None else "state field None"
        _check_labels(labels, who)
        if len(labels) != out["dim"]:
            _fail(
                f"{who}: declares dim {out['dim']} but names {len(labels)} labels; one label "
                "per element"
            )
    return _close(f, out, reading, f"{where} field[{index}]")


def _read_split(raw: Mapping[str, Any], segments: Segments, reading: Reading) -> dict[str, Any]:
    f = _Fields(raw)
    _strict_fields(f, ("type", "fields"), None)  # type: ignore[arg-type]
    where = f"feature {quoted(render_placement(segments))}"
    fields = [
        _read_field(item, index, where, reading)
        for index, item in enumerate(_sequence(f.need("fields")))
    ]
    if not fields:
        _fail("a state layout needs at least one field")
    seen: set[tuple[Any, ...]] = set()
    for item in fields:
        if item["role"] is None:
            continue
        key = (item["role"], item.get("part"), item.get("provenance"))
        if key in seen:
            _fail(f"a state layout declares role {quoted(item['role'])} more than once")
        seen.add(key)
    return {"type": "split", "fields": fields}


_ENV_LEAVES: dict[str, LeafReader] = {
    "image": _read_image_tag,
    "state": _read_state_tag,
    "text": _read_text_tag,
    "split": _read_split,
}


# ------------------------------------------------------------------------------------------
# Actions


_ACTUATOR_VALUES = (
    "encoding",
    "range",
    "scale",
    "offset",
    "axis_scale",
    "axis_offset",
    "threshold",
    "frame",
    "reference",
    "part",
    "labels",
)
_ACTUATOR_FLAGS = ("invert", "binary", "clip", "optional")


def _read_actuator(raw: object, index: int, base: str, reading: Reading) -> dict[str, Any]:
    here = f"{base}.components[{index}]"
    if not isinstance(raw, Mapping):
        _fail(f"invalid type: {_unexpected(raw)}, expected struct Actuator", here)
    f = _Fields(raw)

    def field(name: str, read: Callable[[object], Any], default: Any = None) -> Any:
        value = f.get(name, default)
        try:
            return read(value)
        except _Fail as failure:
            raise _Fail(failure.message, f"{here}.{name}") from None

    role = field("role", _opt_string)
    out: dict[str, Any] = {}
    if role is not None:
        out["role"] = role
    if not f.has("dim"):
        _fail("missing field `dim`", here)
    out["dim"] = field("dim", _count)
    out["encoding"] = field("encoding", _action_encoding)
    out["range"] = field("range", _opt_range)
    out["binary"] = field("binary", _boolean, False)
    scales: dict[str, Any] = {}
    for name in ("scale", "offset"):
        value = field(name, lambda v: None if v is None else _number(v))
        if value is not None:
            scales[name] = value
    for name in ("axis_scale", "axis_offset"):
        value = field(name, lambda v: None if v is None else _axis(v))
        if value is not None:
            scales[name] = value
    invert = field("invert", _boolean, False)
    threshold = field("threshold", lambda v: None if v is None else _number(v))
    clip = field("clip", _boolean, False)
    fill = field("fill", lambda v: _number(v, "f64"), 0.0)
    optional = field("optional", _boolean, False)
    facts = {name: field(name, _opt_string) for name in ("frame", "reference", "part")}
    labels = field("labels", lambda v: None if v is None else _labels(v))
    for name in ("scale", "offset", "axis_scale", "axis_offset"):
        if name in scales:
            out[name] = scales[name]
    if invert:
        out["invert"] = True
    if threshold is not None:
        out["threshold"] = threshold
    if clip:
        out["clip"] = True
    if fill != 0.0:
        out["fill"] = fill
    if optional:
        out["optional"] = True
    for name, value in facts.items():
        if value is not None:
            out[name] = value
    if labels is not None:
        out["labels"] = labels
    shown = "opaque" if role is None else role
    return _close(f, out, reading, f"action component[{index}] (role {quoted(shown)})")


def _action_encoding(value: object) -> Any:
    if value is None:
        return None
    if isinstance(value, Mapping):
        return _custom_encoding(value, "action")
    if isinstance(value, (list, tuple)):
        _expect(value, "enum RotationEncoding")
    return _variant(value, ENCODING_ORDER)


def _check_actuator(actuator: dict[str, Any]) -> None:
    """The cross-field rules of one actuator (RLMesh reports them at the action level)."""
    role = actuator.get("role")
    who = f"actuator Some({quoted(role)})" if role is not None else "actuator None"
    if role is None:
        if any(actuator.get(name) is not None for name in _ACTUATOR_VALUES) or any(
            actuator.get(name) for name in _ACTUATOR_FLAGS
        ):
            _fail(
                "a role-less (opaque) actuator carries only dim and fill; drop encoding/range/"
                "scale/offset/axis_scale/axis_offset/invert/threshold/binary/clip/optional/"
                "frame/reference/part/labels (an opaque actuator is already always filled)"
            )
        return
    _check_scale_forms(actuator, who)
    labels = actuator.get("labels")
    if labels is not None:
        _check_labels(labels, who)
        if len(labels) != actuator["dim"]:
            _fail(
                f"{who}: declares dim {actuator['dim']} but names {len(labels)} labels; one "
                "label per axis"
            )
    if actuator.get("fill", 0.0) != 0.0 and not actuator.get("optional"):
        _fail(
            f"actuator {quoted(role)}: fill applies only to a role-less (opaque) or optional "
            "actuator; a roled, non-optional actuator takes its values from the model"
        )
    if actuator["encoding"] == "gravity_xyz":
        _fail(
            f'{who}: encoding "gravity_xyz" is observation-only (a direction gravity points, '
            "not a rotation a controller can take); declare a rotation encoding"
        )


def _read_action(raw: object, base: str, reading: Reading) -> dict[str, Any]:
    if not isinstance(raw, Mapping):
        _fail(f"invalid type: {_unexpected(raw)}, expected struct ActionWire", base)
    f = _Fields(raw)
    _strict_fields(f, ("components", "clip"), f"{base}.{next(iter(raw), '')}")
    if not f.has("components"):
        _fail("missing field `components`", base)
    items = f.get("components")
    if not isinstance(items, (list, tuple)):
        _fail(f"invalid type: {_unexpected(items)}, expected a sequence", f"{base}.components")
    components = [_read_actuator(item, index, base, reading) for index, item in enumerate(items)]
    try:
        clip = _opt_range(f.get("clip"))
    except _Fail as failure:
        raise _Fail(failure.message, f"{base}.clip") from None
    try:
        seen: set[tuple[Any, ...]] = set()
        for actuator in components:
            _check_actuator(actuator)
            role = actuator.get("role")
            if role is None:
                continue
            key = (role, actuator.get("part"))
            if key in seen:
                under = "" if key[1] is None else f" under part {quoted(key[1])}"
                _fail(f"an action layout declares role {quoted(role)}{under} more than once")
            seen.add(key)
    except _Fail as failure:
        raise _Fail(failure.message, base) from None
    return {"components": components, "clip": clip}


# ------------------------------------------------------------------------------------------
# Documents


def _document(raw: object, side: str, strict: bool) -> tuple[dict[str, Any], Reading]:
    """One document (``side`` ``"env"``: env tags; ``"model"``: a model spec), canonical;
    and what its reading found besides."""
    reading = Reading(side)
    if side == "env":
        what, tree_key, label, readers = "env tags", "observation", "observation", _ENV_LEAVES
    else:
        what, tree_key, label, readers = "model spec", "input", "model input", _MODEL_LEAVES

    def leaf(raw: Mapping[str, Any], segments: Segments) -> Any:
        return readers[raw["type"]](raw, segments, reading)

    doc = _fields(
        raw,
        what,
        tree_key,
        "output" if side == "model" else "action",
        lambda node: _read_tree(node, (), label, leaf, tuple(readers), reading),
        reading,
    )
    if strict:
        _refuse_unknowns(what, reading)
    return doc, reading


def _fields(
    raw: object,
    what: str,
    tree_key: str,
    action_key: str,
    read_tree: Callable[[object], Any],
    reading: Reading,
) -> dict[str, Any]:
    # Fields are read in document order, and a missing one is reported last (as serde does).
    out: dict[str, Any] = {}
    try:
        if not isinstance(raw, Mapping):
            _fail(f"invalid type: {_unexpected(raw)}, expected struct")
        for name, value in raw.items():
            if name == tree_key:
                try:
                    out[name] = read_tree(value)
                except _Fail as failure:
                    raise _Fail(failure.message, failure.path or tree_key) from None
            elif name == action_key:
                out[name] = _read_action(value, action_key, reading)
            else:
                _fail(f"unknown field `{name}`, expected `{tree_key}` or `{action_key}`", name)
        for name in (tree_key, action_key):
            if name not in out:
                _fail(f"missing field `{name}`")
    except _Fail as failure:
        where = f" at {failure.path}" if failure.path else ""
        raise WireError(f"invalid {what}{where}: {failure.message}") from None
    return {tree_key: out[tree_key], action_key: out[action_key]}


def read_env(raw: object, *, strict: bool) -> tuple[dict[str, Any], Reading]:
    """Validate an env-tags document and return its canonical form.

    Raises:
        WireError: the document does not read (strict: or carries an unknown field or kind).
    """
    return _document(raw, "env", strict)


def read_model(
    raw: object, *, strict: bool, allow_custom: bool = True
) -> tuple[dict[str, Any], Reading]:
    """Validate a model-spec document and return its canonical form.

    ``allow_custom=False`` is the publishing door: a custom input cannot be published.

    Raises:
        WireError: the document does not read (strict: or carries an unknown field or kind).
    """
    doc, reading = _document(raw, "model", strict)
    if strict and not allow_custom:
        _refuse_customs(doc["input"])
    return doc, reading


def _refuse_unknowns(what: str, reading: Reading) -> None:
    found = reading.unknown_kinds + reading.unknown_fields
    if found:
        raise WireError(f"invalid {what}: {found[0]}")


def _refuse_customs(node: Any) -> None:
    if isinstance(node, list):
        for child in node:
            _refuse_customs(child)
    elif isinstance(node, dict) and node.get("type") == "custom":
        raise WireError(
            f"custom input carries an entrypoint ({quoted(node['transform'])}) and cannot be "
            "published in v1 contract metadata; resolve the spec locally"
        )
    elif isinstance(node, dict) and "type" not in node:
        for child in node.values():
            _refuse_customs(child)
