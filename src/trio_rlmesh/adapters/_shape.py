"""Spec classes to JSON documents and back.

Writing builds the document the way RLMesh's Python half shapes it, then runs it through the
strict reader (:mod:`._wire`), which validates it and returns the canonical form; reading
validates first and builds the classes from the canonical form. So a document we publish is
byte for byte the one RLMesh publishes for the same spec.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from .._errors import SpecError
from ._action_spec import Action, Actuator, CustomEncoding
from ._coerce import one_or_many
from ._env_spec import EnvTags, Field, ImageTag, Split, StateTag, TextTag
from ._model_spec import Concat, Constant, Custom, Image, ModelSpec, Rotation, State, Text
from ._vocab import LOCAL_ARM
from ._wire import UnknownLeaf, read_env, read_model

__all__ = [
    "action_to_dict",
    "encoding_to_wire",
    "env_tags_from_dict",
    "env_tags_to_dict",
    "model_leaf_to_dict",
    "model_spec_from_dict",
    "model_spec_to_dict",
    "obs_node_from_dict",
    "obs_node_to_dict",
    "walk_tree",
]


def _json_round_trip(raw: dict[str, Any]) -> Any:
    """``raw`` as JSON text would carry it (RLMesh hands its reader JSON text)."""
    try:
        text = json.dumps(raw, allow_nan=False)
    except ValueError as exc:
        raise SpecError(str(exc)) from None
    return json.loads(text)


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


# ------------------------------------------------------------------------------------------
# Encodings and actions


def encoding_to_wire(encoding: Any) -> Any:
    """A rotation-encoding field's wire form; a :class:`CustomEncoding` becomes its schema."""
    if isinstance(encoding, tuple):
        return list(encoding)
    if isinstance(encoding, CustomEncoding):
        out: dict[str, Any] = {"base": encoding.base, "name": encoding.name}
        for name in ("from_base", "to_base"):
            arm = getattr(encoding, name)
            if arm is not None:
                # An in-process callable has no wire form: it travels as a marker.
                out[name] = arm if isinstance(arm, str) else LOCAL_ARM
        return out
    return encoding


def _encoding_from_wire(raw: Any) -> Any:
    if isinstance(raw, Mapping):
        return CustomEncoding(
            base=raw["base"],
            from_base=raw.get("from_base"),
            to_base=raw.get("to_base"),
            name=raw.get("name", "custom"),
        )
    return one_or_many(raw)


def _pair(value: Any) -> tuple[float, float] | None:
    return None if value is None else (float(value[0]), float(value[1]))


def _scaled(out: dict[str, Any], spec: Any) -> None:
    # A per-axis sequence goes under its own ``axis_`` key; the scalar key never changes type.
    for name in ("scale", "offset"):
        value = getattr(spec, name)
        if isinstance(value, tuple):
            out[f"axis_{name}"] = list(value)
        elif value is not None:
            out[name] = value


def _present(out: dict[str, Any], spec: Any, names: tuple[str, ...]) -> dict[str, Any]:
    """``out`` with each of ``spec``'s ``names`` that is set (labels as a list), in order."""
    for name in names:
        value = getattr(spec, name)
        if value is not None:
            out[name] = list(value) if name == "labels" else value
    return out


def _actuator_to_dict(actuator: Actuator) -> dict[str, Any]:
    out: dict[str, Any] = {} if actuator.role is None else {"role": actuator.role}
    out["dim"] = actuator.dim
    out["encoding"] = encoding_to_wire(actuator.encoding)
    out["range"] = list(actuator.range) if actuator.range else None
    out["binary"] = actuator.binary
    _scaled(out, actuator)
    if actuator.fill != 0.0:
        out["fill"] = actuator.fill
    for name in ("invert", "clip", "optional"):
        if getattr(actuator, name):
            out[name] = True
    return _present(out, actuator, ("threshold", "frame", "reference", "part", "labels"))


def action_to_dict(action: Action) -> dict[str, Any]:
    """An action layout's (not yet canonical) document."""
    return {
        "components": [_actuator_to_dict(component) for component in action.components],
        "clip": list(action.clip) if action.clip else None,
    }


def _action_from_dict(data: Mapping[str, Any]) -> Action:
    return Action(
        *(
            Actuator(
                role=item.get("role"),
                dim=int(item["dim"]),
                encoding=_encoding_from_wire(item.get("encoding")),
                range=_pair(item.get("range")),
                scale=item.get("axis_scale", item.get("scale")),
                offset=item.get("axis_offset", item.get("offset")),
                invert=bool(item.get("invert", False)),
                threshold=item.get("threshold"),
                binary=bool(item.get("binary", False)),
                clip=bool(item.get("clip", False)),
                fill=float(item.get("fill", 0.0)),
                optional=bool(item.get("optional", False)),
                frame=item.get("frame"),
                reference=item.get("reference"),
                labels=item.get("labels"),
                part=item.get("part"),
            )
            for item in data["components"]
        ),
        clip=_pair(data.get("clip")),
    )


# ------------------------------------------------------------------------------------------
# Env tags


def _facts(out: dict[str, Any], leaf: StateTag | Field) -> dict[str, Any]:
    return _present(out, leaf, ("frame", "provenance", "part", "labels"))


def _obs_leaf_to_dict(leaf: Any) -> dict[str, Any]:
    if isinstance(leaf, ImageTag):
        image: dict[str, Any] = {
            "type": "image",
            "role": leaf.role,
            "layout": leaf.layout,
            "upside_down": leaf.upside_down,
        }
        if leaf.part is not None:
            image["part"] = leaf.part
        return image
    if isinstance(leaf, StateTag):
        state = {
            "type": "state",
            "role": leaf.role,
            "encoding": encoding_to_wire(leaf.encoding),
            "range": list(leaf.range) if leaf.range else None,
        }
        return _facts(state, leaf)
    if isinstance(leaf, Split):
        fields = [
            _facts(
                {
                    "role": f.role,
                    "dim": f.dim,
                    "encoding": encoding_to_wire(f.encoding),
                    "range": list(f.range) if f.range else None,
                },
                f,
            )
            for f in leaf.fields
        ]
        return {"type": "split", "fields": fields}
    return {"type": "text", "role": leaf.role}


def _is_obs_leaf(node: Any) -> bool:
    return isinstance(node, (ImageTag, StateTag, TextTag, Split))


def obs_node_to_dict(node: Any) -> Any:
    """An observation tag tree's (not yet canonical) document."""
    return walk_tree(node, _obs_leaf_to_dict, _is_obs_leaf, "observation")


def env_tags_to_dict(tags: EnvTags) -> dict[str, Any]:
    """``tags`` as RLMesh's canonical JSON document."""
    raw = {"observation": obs_node_to_dict(tags.observation), "action": action_to_dict(tags.action)}
    return read_env(_json_round_trip(raw), strict=True)[0]


def _obs_leaf_from_dict(item: Mapping[str, Any]) -> Any:
    kind = item["type"]
    if kind == "image":
        return ImageTag(item["role"], item["layout"], item["upside_down"], part=item.get("part"))
    if kind == "state":
        return StateTag(
            item["role"],
            one_or_many(item["encoding"]),
            _pair(item["range"]),
            frame=item.get("frame"),
            provenance=item.get("provenance"),
            part=item.get("part"),
            labels=item.get("labels"),
        )
    if kind == "split":
        return Split(
            *(
                Field(
                    f["role"],
                    f["dim"],
                    one_or_many(f["encoding"]),
                    _pair(f["range"]),
                    frame=f.get("frame"),
                    provenance=f.get("provenance"),
                    part=f.get("part"),
                    labels=f.get("labels"),
                )
                for f in item["fields"]
            )
        )
    return TextTag(item["role"])


def obs_node_from_dict(node: Any) -> Any:
    """The tag tree of a canonical observation document (unknown kinds stay unknown)."""
    if isinstance(node, list):
        return tuple(obs_node_from_dict(child) for child in node)
    if isinstance(node, UnknownLeaf):
        return node
    if "type" in node:
        return _obs_leaf_from_dict(node)
    return {key: obs_node_from_dict(child) for key, child in node.items()}


def env_tags_from_dict(data: Mapping[str, Any]) -> EnvTags:
    """Tags from a document (validated first)."""
    doc = read_env(_json_round_trip(dict(data)), strict=True)[0]
    return EnvTags(obs_node_from_dict(doc["observation"]), _action_from_dict(doc["action"]))


# ------------------------------------------------------------------------------------------
# Model specs


def _image_to_dict(item: Image) -> dict[str, Any]:
    image: dict[str, Any] = {
        "type": "image",
        "role": item.role,
        "height": item.height,
        "width": item.width,
        "layout": item.layout,
        "dtype": item.dtype,
        "normalize": list(item.normalize) if isinstance(item.normalize, tuple) else item.normalize,
        "lead_dims": item.lead_dims,
        "upside_down": item.upside_down,
        "resample": item.resample,
    }
    if item.stack != 1:
        image["stack"] = item.stack
    for name in ("allow_upscale", "optional"):
        if getattr(item, name):
            image[name] = True
    for name in ("fit", "channels", "fill", "crop", "crop_area", "jpeg_quality", "part"):
        value = getattr(item, name)
        if value is not None:
            image[name] = list(value) if isinstance(value, tuple) else value
    for name, default in (("crop_mode", "zoom"), ("channel_order", "rgb"), ("stack_pad", "first")):
        value = getattr(item, name)
        if value != default:
            image[name] = value
    for name in ("render", "offsets"):
        value = getattr(item, name)
        if value is not None:
            image[name] = list(value)
    return image


_PART_DEFAULTS: dict[str, Any] = {
    "encoding": None,
    "dim": None,
    "index": None,
    "range": None,
    "optional": False,
    "fill": 0.0,
    "post_rotate": None,
    "scale": None,
    "offset": None,
    "frame": None,
    "provenance": None,
    "part": None,
    "labels": None,
    "source": "observation",
}


def _part_to_dict(part: State | Constant) -> Any:
    if isinstance(part, Constant):
        constant: dict[str, Any] = {"dim": part.dim}
        if part.fill != 0.0:
            constant["fill"] = part.fill
        return constant
    if all(getattr(part, name) == value for name, value in _PART_DEFAULTS.items()):
        return part.role
    out: dict[str, Any] = {"role": part.role}
    if part.source == "action":
        out["source"] = "action"
    if part.encoding is not None:
        out["encoding"] = encoding_to_wire(part.encoding)
    for name in ("dim", "index"):
        value = getattr(part, name)
        if value is not None:
            out[name] = value
    if part.optional:
        out["optional"] = True
    if part.range is not None:
        out["range"] = list(part.range)
    if part.fill != 0.0:
        out["fill"] = part.fill
    if part.post_rotate is not None:
        out["post_rotate"] = {
            "encoding": part.post_rotate.encoding,
            "value": list(part.post_rotate.value),
        }
    _scaled(out, part)
    if part.frame is not None:
        out["frame"] = part.frame
    if isinstance(part.provenance, tuple):
        out["provenance"] = list(part.provenance)
    elif part.provenance is not None:
        out["provenance"] = part.provenance
    if part.part is not None:
        out["part"] = part.part
    if part.labels is not None:
        out["labels"] = list(part.labels)
    return out


def _state_to_dict(item: State | Concat) -> dict[str, Any]:
    parts: tuple[State | Constant, ...]
    if isinstance(item, State):
        parts = (item,)
    else:
        parts = tuple(State(p) if isinstance(p, str) else p for p in item.parts)
    state: dict[str, Any] = {
        "type": "state",
        "components": [_part_to_dict(part) for part in parts],
        "pad_to": item.pad_to,
        "dtype": item.dtype,
        # () is a real 0-D target; only None means "no reshape".
        "reshape": list(item.reshape) if item.reshape is not None else None,
        "container": item.container,
    }
    if item.clip is not None:
        state["clip"] = list(item.clip)
    return state


def model_leaf_to_dict(item: Any) -> dict[str, Any]:
    """One model input leaf's (not yet canonical) document.

    Raises:
        SpecError: a :class:`Custom` input: its code has no wire form.
    """
    if isinstance(item, Image):
        return _image_to_dict(item)
    if isinstance(item, (State, Concat)):
        return _state_to_dict(item)
    if isinstance(item, Text):
        return {"type": "text", "role": item.role, "container": item.container, "fill": item.fill}
    if item.entrypoint is None:
        raise SpecError(
            "custom input holds an in-process callable and cannot be "
            "serialized; use Custom(entrypoint='module:callable') instead"
        )
    raise SpecError(
        f"custom input carries an entrypoint ({item.entrypoint!r}) and "
        "cannot be published in v1 contract metadata; resolve the spec "
        "locally (the model spec need not travel), or wait for the "
        "allowlist-gated trust system"
    )


def is_model_leaf(node: Any) -> bool:
    """Whether ``node`` is a model input leaf (not a container)."""
    return isinstance(node, (Image, State, Concat, Text, Custom))


def model_spec_to_dict(spec: ModelSpec) -> dict[str, Any]:
    """``spec`` as RLMesh's canonical JSON document."""
    raw = {
        "input": walk_tree(spec.input, model_leaf_to_dict, is_model_leaf, "model input"),
        "output": action_to_dict(spec.output),
    }
    return read_model(_json_round_trip(raw), strict=True, allow_custom=False)[0]


def _part_from_dict(item: Any) -> Any:
    if isinstance(item, str):
        return item
    if "role" not in item:
        return Constant(dim=int(item["dim"]), fill=float(item.get("fill", 0.0)))
    post_rotate = item.get("post_rotate")
    return State(
        item["role"],
        _encoding_from_wire(item.get("encoding")),
        item.get("dim"),
        item.get("index"),
        bool(item.get("optional", False)),
        _pair(item.get("range")),
        fill=float(item.get("fill", 0.0)),
        post_rotate=None
        if post_rotate is None
        else Rotation(
            encoding=post_rotate["encoding"],
            value=tuple(float(v) for v in post_rotate["value"]),
        ),
        scale=item.get("axis_scale", item.get("scale")),
        offset=item.get("axis_offset", item.get("offset")),
        frame=item.get("frame"),
        provenance=one_or_many(item.get("provenance")),
        part=item.get("part"),
        labels=item.get("labels"),
        source=item.get("source", "observation"),
    )


def _state_from_dict(data: Mapping[str, Any]) -> State | Concat:
    leaf: dict[str, Any] = {
        "pad_to": data.get("pad_to"),
        "dtype": data["dtype"],
        "reshape": None if data.get("reshape") is None else tuple(data["reshape"]),
        "container": data.get("container", "array"),
        "clip": _pair(data.get("clip")),
    }
    parts = tuple(_part_from_dict(part) for part in data["components"])
    # One parameterized part reads back as a State; a bare role or several parts as a Concat
    # (the two forms write the same document, so State is the natural reading).
    if len(parts) == 1 and isinstance(parts[0], State):
        base = parts[0]
        fields = {name: getattr(base, name) for name in _PART_DEFAULTS}
        return State(base.role, **fields, **leaf)
    return Concat(*parts, **leaf)


def model_leaf_from_dict(data: Mapping[str, Any]) -> Any:
    """One model input leaf from its canonical document."""
    kind = data["type"]
    if kind == "image":
        normalize = data["normalize"]
        return Image(
            data["role"],
            data["height"],
            data["width"],
            data["layout"],
            data.get("channels"),
            data["dtype"],
            _pair(normalize) or False if isinstance(normalize, list) else bool(normalize),
            data["lead_dims"],
            data["upside_down"],
            data["resample"],
            data.get("allow_upscale", False),
            one_or_many(data.get("fit")),
            data.get("optional", False),
            data.get("fill"),
            data.get("stack", 1),
            crop=data.get("crop"),
            crop_area=data.get("crop_area"),
            crop_mode=data.get("crop_mode", "zoom"),
            jpeg_quality=data.get("jpeg_quality"),
            channel_order=data.get("channel_order", "rgb"),
            render=None if data.get("render") is None else tuple(data["render"]),
            offsets=None if data.get("offsets") is None else tuple(data["offsets"]),
            stack_pad=data.get("stack_pad", "first"),
            part=data.get("part"),
        )
    if kind == "state":
        return _state_from_dict(data)
    if kind == "text":
        return Text(data["role"], data["container"], data["fill"])
    transform = data["transform"]
    if transform.startswith("host:"):
        raise SpecError(
            f"custom input carries a host-placeholder transform ({transform!r}); it "
            "references a host-side callable that stayed local during resolve and cannot be "
            "reconstructed from the wire form -- resolve the spec locally instead of routing "
            "its internal wire form back through from_dict"
        )
    return Custom(entrypoint=transform)


def input_node_from_dict(node: Any) -> Any:
    """The model input tree of a canonical input document."""
    if isinstance(node, list):
        return tuple(input_node_from_dict(child) for child in node)
    if "type" in node:
        return model_leaf_from_dict(node)
    return {key: input_node_from_dict(child) for key, child in node.items()}


def model_spec_from_dict(data: Mapping[str, Any]) -> ModelSpec:
    """A spec from a document (validated first)."""
    doc = read_model(_json_round_trip(dict(data)), strict=True)[0]
    return ModelSpec(input_node_from_dict(doc["input"]), _action_from_dict(doc["output"]))
