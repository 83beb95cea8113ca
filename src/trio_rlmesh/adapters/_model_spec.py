"""The model side: the full payload a model takes, and the action it emits.

A model spec's ``input`` is a tree whose containers are the payload's own (a ``dict``, a
``tuple``, or a bare leaf); a leaf's position in the tree is where its value lands, so
leaves carry no key, and one env role may feed several leaves. The spec's JSON document is
written and read here too (see :mod:`._shape`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import InitVar, dataclass, field
from typing import Any, Literal, TypeAlias, Union, cast

from .._errors import SpecError
from ._action_spec import (
    Action,
    CustomEncoding,
    action_from_dict,
    action_to_dict,
    encoding_from_wire,
    encoding_to_wire,
)
from ._coerce import axis_or_scalar, check_accept_set, check_labels, hashable_node, one_or_many
from ._shape import document_in, json_round_trip, pair, read_tree, walk_tree, write_scaled
from ._vocab import (
    MODEL_METADATA_KEY,
    ChannelOrder,
    CropMode,
    FitMode,
    Frame,
    ImageLayout,
    Provenance,
    Resample,
    RotationEncoding,
    StackPad,
    StackSpec,
)
from ._wire import read_model

__all__ = [
    "Concat",
    "ConcatPart",
    "Constant",
    "Custom",
    "Image",
    "InputNode",
    "ModelLeaf",
    "ModelSpec",
    "ObsTransform",
    "Previous",
    "Rotation",
    "State",
    "Text",
    "is_model_leaf",
    "model_leaf_to_dict",
]

ObsTransform: TypeAlias = Callable[[Mapping[str, Any]], Any]
"""A custom input's callable: the raw observation mapping in, the payload value out."""


def _fraction(role: str, name: str, value: float | None) -> float | None:
    if value is None:
        return None
    fraction = float(value)
    if not 0.0 < fraction <= 1.0:
        raise SpecError(f"Image {role!r}: {name} must be a fraction in (0, 1], got {fraction}")
    return fraction


def _render_pair(role: str, render: int | tuple[int, int]) -> tuple[int, int]:
    if isinstance(render, int):
        pair = (render, render)
    else:
        try:
            height, width = render
        except (TypeError, ValueError):
            raise SpecError(
                f"Image {role!r}: render must be an int or a (height, width) pair, got {render!r}"
            ) from None
        pair = (int(height), int(width))
    for axis, value in zip(("height", "width"), pair, strict=True):
        if not 1 <= value <= 4096:
            raise SpecError(
                f"Image {role!r}: render {axis} must be between 1 and 4096, got {value}"
            )
    return pair


def _normalize_range(value: object) -> tuple[float, float]:
    try:
        low, high = cast("tuple[Any, Any]", value)
    except (TypeError, ValueError):
        raise SpecError(
            f"Image.normalize must be a bool or a (low, high) range, got {value!r}"
        ) from None
    pair = (float(low), float(high))
    if not (math.isfinite(pair[0]) and math.isfinite(pair[1])):
        raise SpecError("Image.normalize range must be finite")
    if pair[0] > pair[1]:
        raise SpecError(f"Image.normalize range min must be <= max, got {pair}")
    return pair


@dataclass(frozen=True)
class Image:
    """A camera input: which role, and the exact pixels the model was trained on.

    The adapter reads the env's camera of ``role`` and, in order: round-trips it through JPEG
    at ``jpeg_quality``, center-crops (``crop``/``crop_area``), resizes to ``height`` x
    ``width`` with ``resample`` (``fit`` reconciles an aspect change: ``stretch``, ``crop``
    or ``pad``), swaps to ``channel_order``, maps 8-bit values into ``normalize``, casts to
    ``dtype``, transposes to ``layout``, adds ``lead_dims`` unit axes and stacks ``stack``
    frames of history (at ``offsets``, padded by ``stack_pad`` early in an episode).
    ``upside_down`` rotates by 180 degrees when env and model disagree. An ``optional``
    camera the env lacks is a ``fill``-valued frame of ``height`` x ``width`` x
    ``channels``. ``render`` asserts the camera resolution the model was trained against.

    Example:
        >>> Image("image/primary", size=224, normalize=True).height
        224
    """

    role: str
    height: int | None = None
    width: int | None = None
    layout: ImageLayout = "hwc"
    channels: int | None = None
    dtype: str = "uint8"
    normalize: bool | tuple[float, float] = False
    lead_dims: int = 0
    upside_down: bool = False
    resample: Resample = "bilinear"
    allow_upscale: bool = False
    fit: FitMode | Sequence[FitMode] | None = None
    optional: bool = False
    fill: int | None = None
    stack: int = 1
    crop: float | None = field(default=None, kw_only=True)
    crop_area: float | None = field(default=None, kw_only=True)
    crop_mode: CropMode = field(default="zoom", kw_only=True)
    jpeg_quality: int | None = field(default=None, kw_only=True)
    channel_order: ChannelOrder = field(default="rgb", kw_only=True)
    render: int | tuple[int, int] | None = field(default=None, kw_only=True)
    offsets: StackSpec | None = field(default=None, kw_only=True)
    stack_pad: StackPad = field(default="first", kw_only=True)
    part: str | None = field(default=None, kw_only=True)
    size: InitVar[int | None] = None
    stride: InitVar[int | None] = field(default=None, kw_only=True)

    def __post_init__(self, size: int | None, stride: int | None) -> None:
        role = self.role
        if size is not None:
            if self.height is not None or self.width is not None:
                raise SpecError(f"Image {role!r}: pass size=, or height=/width=, not both")
            object.__setattr__(self, "height", size)
            object.__setattr__(self, "width", size)
        if self.crop is not None and self.crop_area is not None:
            raise SpecError(
                f"Image {role!r}: pass crop (a side fraction) or crop_area "
                "(an area fraction), not both"
            )
        object.__setattr__(self, "crop", _fraction(role, "crop", self.crop))
        object.__setattr__(self, "crop_area", _fraction(role, "crop_area", self.crop_area))
        if self.jpeg_quality is not None and not 1 <= self.jpeg_quality <= 100:
            raise SpecError(
                f"Image {role!r}: jpeg_quality must be between 1 and 100, got {self.jpeg_quality}"
            )
        if self.render is not None:
            object.__setattr__(self, "render", _render_pair(role, self.render))
        if stride is not None:
            if self.offsets is not None:
                raise SpecError(f"Image {role!r}: pass stride=, or offsets=, not both")
            if stride < 1:
                raise SpecError(f"Image {role!r}: stride must be >= 1, got {stride}")
            window = tuple(-(self.stack - 1 - step) * stride for step in range(self.stack))
            object.__setattr__(self, "offsets", window)
        elif self.offsets is not None:
            object.__setattr__(self, "offsets", tuple(int(v) for v in self.offsets))
        if self.fill is not None and not self.optional:
            raise SpecError(
                f"Image {role!r}: fill only applies to an optional camera; "
                "set optional=True or drop fill"
            )
        object.__setattr__(self, "fit", one_or_many(self.fit))
        if self.normalize is not True and self.normalize is not False:
            object.__setattr__(self, "normalize", _normalize_range(self.normalize))


@dataclass(frozen=True, kw_only=True)
class Rotation:
    """A fixed rotation, right-multiplied onto an env rotation (a state part's ``post_rotate``).

    Example:
        >>> Rotation.from_matrix([[1, 0, 0], [0, 1, 0], [0, 0, 1]]).value
        (1.0, 0.0, 0.0, 0.0, 1.0, 0.0)
    """

    encoding: RotationEncoding
    value: tuple[float, ...]

    @classmethod
    def from_matrix(cls, rows: Iterable[Iterable[float]]) -> Rotation:
        """A ``rot6d`` rotation (the matrix's first two columns) from a 3x3 matrix's rows."""
        matrix = [[float(value) for value in row] for row in rows]
        if len(matrix) != 3 or any(len(row) != 3 for row in matrix):
            raise SpecError(
                f"Rotation.from_matrix needs a 3x3 matrix, got "
                f"{len(matrix)} rows of {[len(row) for row in matrix]}"
            )
        value = tuple(matrix[row][col] for col in (0, 1) for row in (0, 1, 2))
        return cls(encoding="rot6d", value=value)


@dataclass(frozen=True, kw_only=True)
class Constant:
    """A constant block of a :class:`Concat`: ``dim`` copies of ``fill`` (authored data)."""

    dim: int = 1
    fill: float = 0.0


# A part reading the model's previous action carries none of these.
_NOT_FOR_ACTION_SOURCE = (
    "encoding",
    "index",
    "range",
    "post_rotate",
    "scale",
    "offset",
    "frame",
    "provenance",
)


@dataclass(frozen=True)
class State:
    """A numeric input from one env state role (or one part of a :class:`Concat`).

    The part reads the env leaf of ``role`` (``part``/``provenance`` pick among several),
    converts a rotation into ``encoding`` (after ``post_rotate``), keeps ``index`` or the
    leading ``dim`` elements (or gathers ``labels`` by name), maps the env range into
    ``range``, then applies ``value * scale + offset``. An ``optional`` part the env lacks
    is ``fill``. ``source="action"`` (see :func:`Previous`) reads the model's own previous
    action instead. The leaf fields (``pad_to``, ``dtype``, ``reshape``, ``container``,
    ``clip``) shape the assembled value.

    Example:
        >>> State("proprio/eef_rot", encoding="rot6d").encoding
        'rot6d'
    """

    role: str
    encoding: RotationEncoding | Sequence[RotationEncoding] | CustomEncoding | None = None
    dim: int | None = None
    index: int | None = None
    optional: bool = False
    range: tuple[float, float] | None = None
    fill: float = field(default=0.0, kw_only=True)
    post_rotate: Rotation | None = field(default=None, kw_only=True)
    scale: float | Sequence[float] | None = field(default=None, kw_only=True)
    offset: float | Sequence[float] | None = field(default=None, kw_only=True)
    frame: Frame | None = field(default=None, kw_only=True)
    provenance: Provenance | Sequence[Provenance] | None = field(default=None, kw_only=True)
    part: str | None = field(default=None, kw_only=True)
    labels: Sequence[str] | None = field(default=None, kw_only=True)
    source: Literal["observation", "action"] = field(default="observation", kw_only=True)
    pad_to: int | None = None
    dtype: str = "float32"
    reshape: tuple[int, ...] | None = None
    container: Literal["array", "list"] = "array"
    clip: tuple[float, float] | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        role = self.role
        if self.dim is not None and self.index is not None:
            raise SpecError(
                f"State {role!r}: set dim or index, not both "
                "(index selects one element, dim truncates to the leading N)"
            )
        if self.source not in ("observation", "action"):
            raise SpecError(
                f"State {role!r}: source must be 'observation' or 'action', got {self.source!r}"
            )
        if self.source == "action" and (
            self.optional or any(getattr(self, name) is not None for name in _NOT_FOR_ACTION_SOURCE)
        ):
            raise SpecError(
                f"State {role!r}: source='action' reads the model's own raw "
                "output and carries only part/labels/dim/fill; drop encoding/index/"
                "range/optional/post_rotate/scale/offset/frame/provenance"
            )
        if self.fill != 0.0 and not self.optional and self.source == "observation":
            raise SpecError(
                f"State {role!r}: fill applies only to an optional part; a "
                "non-optional part takes its values from the env"
            )
        if self.post_rotate is not None:
            if self.encoding is None:
                raise SpecError(f"State {role!r}: post_rotate needs a rotation encoding")
            if isinstance(self.encoding, CustomEncoding):
                raise SpecError(
                    f"State {role!r}: post_rotate cannot combine with a custom "
                    "encoding; fold the rotation into the repack"
                )
        object.__setattr__(self, "encoding", one_or_many(self.encoding))
        check_accept_set("State", role, self.encoding)
        object.__setattr__(self, "provenance", one_or_many(self.provenance))
        for name in ("scale", "offset"):
            object.__setattr__(self, name, axis_or_scalar("State", role, name, getattr(self, name)))
        labels = check_labels("State", role, self.labels)
        object.__setattr__(self, "labels", labels)
        if labels is not None:
            if self.index is not None:
                raise SpecError(
                    f"State {role!r}: set labels or index, not both (labels name "
                    "every axis of the leaf, so drop one of them)"
                )
            if self.dim is not None and self.dim != len(labels):
                raise SpecError(
                    f"State {role!r}: dim {self.dim} disagrees with the "
                    f"{len(labels)} labels; labels fix the width, so drop dim"
                )


def Previous(role: str, *, part: str | None = None, fill: float = 0.0) -> State:
    """The model's own previous action for ``role`` as a state part.

    The part reads back the raw action the model emitted for its actuator of ``role`` (and
    ``part``) at the previous step, before that actuator's scale and offset; ``fill`` is what
    it reads before the episode's first action.

    Example:
        >>> Previous("action/gripper", fill=-1.0).source
        'action'
    """
    return State(role, part=part, fill=fill, source="action")


ConcatPart: TypeAlias = "str | State | Constant"
"""A :class:`Concat` part: a bare role, a :class:`State` (its part fields), or a
:class:`Constant`."""

_LEAF_DEFAULTS = {"pad_to": None, "dtype": "float32", "reshape": None, "container": "array"}


@dataclass(frozen=True, init=False)
class Concat:
    """Several state parts packed into one vector, in order.

    Each part is converted, ranged and scaled on its own; the parts are concatenated, the
    result clipped to ``clip``, zero-padded to ``pad_to``, cast to ``dtype`` and reshaped.

    Example:
        >>> Concat("proprio/eef_pos", State("proprio/eef_rot", encoding="rot6d")).pad_to is None
        True
    """

    parts: tuple[ConcatPart, ...]
    pad_to: int | None = None
    dtype: str = "float32"
    reshape: tuple[int, ...] | None = None
    container: Literal["array", "list"] = "array"
    clip: tuple[float, float] | None = None

    def __init__(
        self,
        *parts: ConcatPart,
        pad_to: int | None = None,
        dtype: str = "float32",
        reshape: tuple[int, ...] | None = None,
        container: Literal["array", "list"] = "array",
        clip: tuple[float, float] | None = None,
    ) -> None:
        if not parts:
            raise SpecError("Concat needs at least one part")
        for part in parts:
            if not isinstance(part, (str, State, Constant)):
                raise TypeError(
                    f"Concat parts must be role strings, State leaves or Constant "
                    f"blocks; got {type(part).__name__!r}. Pass a role constant "
                    "(e.g. Concat(EEF_POS, GRIPPER_POS)) or wrap it in State(...)"
                )
        if all(isinstance(part, Constant) for part in parts):
            raise SpecError(
                "a state input of only constant parts reads nothing from the env; "
                "give it at least one roled part"
            )
        for part in parts:
            if isinstance(part, State) and (
                part.clip is not None
                or any(getattr(part, name) != value for name, value in _LEAF_DEFAULTS.items())
            ):
                raise SpecError(
                    f"Concat part {part.role!r}: a State used as a part must keep "
                    "its container fields (pad_to, dtype, reshape, container, clip) "
                    "at their defaults; set them on the Concat instead"
                )
        for name, value in (
            ("parts", tuple(parts)),
            ("pad_to", pad_to),
            ("dtype", dtype),
            ("reshape", reshape),
            ("container", container),
            ("clip", clip),
        ):
            object.__setattr__(self, name, value)


@dataclass(frozen=True)
class Text:
    """A text input; ``fill`` stands in when the observation lacks it (else it is omitted)."""

    role: str
    container: Literal["str", "list"] = "str"
    fill: str | None = None


@dataclass(frozen=True)
class Custom:
    """A payload slot computed by your own code from the raw observation mapping.

    Set exactly one of ``transform`` (an in-process callable; it never travels) or
    ``entrypoint`` (a ``"module:callable"`` string, imported only when resolving with
    ``trust_entrypoints=True``).
    """

    transform: ObsTransform | None = None
    entrypoint: str | None = None

    def __post_init__(self) -> None:
        if (self.transform is None) == (self.entrypoint is None):
            raise SpecError(
                "Custom: set exactly one of transform= (an in-process callable) "
                "or entrypoint= (a 'module:callable' string)"
            )


ModelLeaf: TypeAlias = Union[Image, State, Concat, Text, Custom]  # noqa: UP007
"""A model input leaf."""
InputNode: TypeAlias = "ModelLeaf | Mapping[str, InputNode] | tuple[InputNode, ...]"
"""A model input tree: a leaf, a ``dict`` or a ``tuple`` (the payload's own containers)."""


@dataclass(frozen=True)
class ModelSpec:
    """A model's full input payload tree and its action layout.

    Example:
        >>> from trio_rlmesh import adapters as adapt
        >>> spec = adapt.ModelSpec(
        ...     input={"image": adapt.Image(adapt.IMAGE_PRIMARY, size=224)},
        ...     output=adapt.Action(adapt.Actuator(adapt.ACTION_GRIPPER, 1)),
        ... )
        >>> spec.to_dict()["input"]["image"]["height"]
        224
    """

    input: InputNode
    output: Action

    def __hash__(self) -> int:
        return hash((hashable_node(self.input), self.output))

    def to_dict(self) -> dict[str, Any]:
        """This spec as RLMesh's JSON document (every default written out).

        Raises:
            SpecError: a :class:`Custom` input (its code cannot be published).
        """
        raw = {
            "input": walk_tree(self.input, model_leaf_to_dict, is_model_leaf, "model input"),
            "output": action_to_dict(self.output),
        }
        return read_model(json_round_trip(raw), strict=True, allow_custom=False)[0]

    def to_json(self) -> str:
        """This spec as a JSON string (sorted keys)."""
        return json.dumps(self.to_dict(), sort_keys=True, allow_nan=False)

    def to_metadata(self) -> dict[str, Any]:
        """A metadata fragment carrying this spec under :data:`MODEL_METADATA_KEY`."""
        return {MODEL_METADATA_KEY: self.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModelSpec:
        """A spec from its JSON document (validated first)."""
        doc = read_model(json_round_trip(data), strict=True)[0]
        return ModelSpec(_input_node_from_dict(doc["input"]), action_from_dict(doc["output"]))

    @classmethod
    def from_json(cls, payload: str) -> ModelSpec:
        """A spec from :meth:`to_json`'s output."""
        return cls.from_dict(json.loads(payload))

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any]) -> ModelSpec | None:
        """The spec in model metadata, or ``None`` when it carries none."""
        payload = document_in(metadata, MODEL_METADATA_KEY)
        return None if payload is None else cls.from_dict(payload)


# ------------------------------------------------------------------------------------------
# Documents


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
    write_scaled(out, part)
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


def _part_from_dict(item: Any) -> Any:
    if isinstance(item, str):
        return item
    if "role" not in item:
        return Constant(dim=int(item["dim"]), fill=float(item.get("fill", 0.0)))
    post_rotate = item.get("post_rotate")
    return State(
        item["role"],
        encoding_from_wire(item.get("encoding")),
        item.get("dim"),
        item.get("index"),
        bool(item.get("optional", False)),
        pair(item.get("range")),
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
        "clip": pair(data.get("clip")),
    }
    parts = tuple(_part_from_dict(part) for part in data["components"])
    # One parameterized part reads back as a State; a bare role or several parts as a Concat
    # (the two forms write the same document, so State is the natural reading).
    if len(parts) == 1 and isinstance(parts[0], State):
        base = parts[0]
        fields = {name: getattr(base, name) for name in _PART_DEFAULTS}
        return State(base.role, **fields, **leaf)
    return Concat(*parts, **leaf)


def _model_leaf_from_dict(data: Mapping[str, Any]) -> Any:
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
            pair(normalize) or False if isinstance(normalize, list) else bool(normalize),
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


def _is_input_document_leaf(node: Any) -> bool:
    return "type" in node


def _input_node_from_dict(node: Any) -> Any:
    """The model input tree of a canonical input document."""
    return read_tree(node, _model_leaf_from_dict, _is_input_document_leaf)
