"""The model side: the full payload a model takes, and the action it emits.

A model spec's ``input`` is a tree whose containers are the payload's own (a ``dict``, a
``tuple``, or a bare leaf); a leaf's position in the tree is where its value lands, so
leaves carry no key, and one env role may feed several leaves.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import InitVar, dataclass, field
from typing import Any, Literal, TypeAlias, Union, cast

from .._errors import SpecError
from ._action_spec import Action, CustomEncoding
from ._coerce import axis_or_scalar, check_accept_set, check_labels, hashable_node, one_or_many
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
        from ._shape import model_spec_to_dict

        return model_spec_to_dict(self)

    def to_json(self) -> str:
        """This spec as a JSON string (sorted keys)."""
        return json.dumps(self.to_dict(), sort_keys=True, allow_nan=False)

    def to_metadata(self) -> dict[str, Any]:
        """A metadata fragment carrying this spec under :data:`MODEL_METADATA_KEY`."""
        return {MODEL_METADATA_KEY: self.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModelSpec:
        """A spec from its JSON document (validated first)."""
        from ._shape import model_spec_from_dict

        return model_spec_from_dict(data)

    @classmethod
    def from_json(cls, payload: str) -> ModelSpec:
        """A spec from :meth:`to_json`'s output."""
        return cls.from_dict(json.loads(payload))

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any]) -> ModelSpec | None:
        """The spec in model metadata, or ``None`` when it carries none."""
        payload = metadata.get(MODEL_METADATA_KEY)
        if payload is None:
            return None
        if not isinstance(payload, Mapping):
            from ._errors import AdapterResolutionError

            raise AdapterResolutionError(f"metadata key {MODEL_METADATA_KEY!r} must hold a mapping")
        return cls.from_dict(payload)
