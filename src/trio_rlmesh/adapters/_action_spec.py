"""Action layouts (shared by env tags and model specs) and custom rotation encodings, with
their JSON forms (written and read here; :mod:`._shape` says how).

The spec classes are frozen :mod:`dataclasses`, not attrs classes, on purpose: code written
for ``rlmesh.adapters`` calls :func:`dataclasses.replace` and :func:`dataclasses.fields` on
them, and their constructors take the same arguments (including init-only sugar such as
``Image(size=...)``) in the same positions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

from .._errors import SpecError
from ._coerce import axis_or_scalar, check_labels, one_or_many
from ._shape import pair, write_present, write_scaled
from ._vocab import LOCAL_ARM, ROTATION_DIMS, Frame, Reference, RotationEncoding

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = [
    "Action",
    "Actuator",
    "CustomEncoding",
    "RotationTransform",
    "action_from_dict",
    "action_to_dict",
    "encoding_from_wire",
    "encoding_to_wire",
]

RotationTransform: TypeAlias = "Callable[[np.ndarray[Any, Any]], npt.ArrayLike]"
"""One arm of a :class:`CustomEncoding`: a flat vector in, a flat vector of the same width out."""


@dataclass(frozen=True)
class CustomEncoding:
    """A rotation packing of the model's own, layered on a built-in ``base`` encoding.

    The field resolves as ``base`` (role matching, ranges and the env-to-base conversion are
    unchanged); the adapter then repacks it in this process: ``from_base`` on a model state
    part (base to custom), ``to_base`` on a model actuator (custom to base). The packing keeps
    the base width. An arm is an in-process callable, or a ``"module:callable"`` string that
    describes the encoding but is never run.

    Example:
        >>> import numpy as np
        >>> flip = CustomEncoding("quat_xyzw", from_base=np.negative, to_base=np.negative)
        >>> flip.width
        4
    """

    base: RotationEncoding
    """The built-in encoding the field resolves as."""
    from_base: RotationTransform | str | None = None
    """Base to custom, for an observation (model state) part."""
    to_base: RotationTransform | str | None = None
    """Custom to base, for a model actuator."""
    name: str = "custom"
    """Shown by ``explain()``."""

    def __post_init__(self) -> None:
        if self.base not in ROTATION_DIMS:
            raise SpecError(
                "CustomEncoding.base must be a native rotation encoding "
                f"{sorted(ROTATION_DIMS)}, got {self.base!r}"
            )
        arms = [arm for arm in (self.from_base, self.to_base) if arm is not None]
        if not arms:
            raise SpecError(
                "CustomEncoding needs at least one of from_base (observation "
                "side) or to_base (action side)"
            )
        if len({isinstance(arm, str) for arm in arms}) > 1:
            raise SpecError(
                "CustomEncoding arms must agree: both in-process callables or "
                "both 'module:callable' entrypoint strings, not a mix"
            )

    @property
    def is_entrypoint(self) -> bool:
        """Whether the arms are ``"module:callable"`` strings."""
        return isinstance(self.from_base, str) or isinstance(self.to_base, str)

    @property
    def width(self) -> int:
        """How many numbers the encoding occupies (its base's width)."""
        return ROTATION_DIMS[self.base]


# What an opaque actuator may not carry: values that must stay None, flags that must stay off.
_ROLELESS_VALUES = (
    "encoding",
    "range",
    "scale",
    "offset",
    "threshold",
    "frame",
    "reference",
    "part",
    "labels",
)
_ROLELESS_FLAGS = ("binary", "invert", "clip", "optional")


@dataclass(frozen=True)
class Actuator:
    """One contiguous slice of an action vector.

    ``role=None`` makes the actuator opaque: its ``dim`` numbers are the constant ``fill``
    and no model output feeds them. ``scale``, ``offset``, ``invert`` and ``threshold``
    describe one side's convention and may be declared on either side; ``binary`` snaps to
    ``-1``/``+1``; ``clip`` (env side only) clamps to ``range``.

    Example:
        >>> Actuator("action/gripper", 1, binary=True).dim
        1
    """

    role: str | None = None
    dim: int = 0
    encoding: RotationEncoding | CustomEncoding | None = None
    range: tuple[float, float] | None = None
    binary: bool = False
    scale: float | Sequence[float] | None = None
    invert: bool = False
    threshold: float | None = None
    clip: bool = False
    fill: float = 0.0
    optional: bool = False
    frame: Frame | None = field(default=None, kw_only=True)
    reference: Reference | None = field(default=None, kw_only=True)
    part: str | None = field(default=None, kw_only=True)
    offset: float | Sequence[float] | None = field(default=None, kw_only=True)
    labels: Sequence[str] | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        role = self.role
        if self.dim < 1:
            raise SpecError(f"Actuator {role!r}: dim must be >= 1, got {self.dim}")
        fill: object = self.fill
        if isinstance(fill, bool) or not isinstance(fill, (int, float)):
            raise SpecError(f"Actuator {role!r}: fill must be a single number, got {fill!r}")
        for name in ("scale", "offset"):
            value = axis_or_scalar("Actuator", role, name, getattr(self, name))
            object.__setattr__(self, name, value)
        object.__setattr__(self, "labels", check_labels("Actuator", role, self.labels))
        if role is None:
            if any(getattr(self, name) is not None for name in _ROLELESS_VALUES) or any(
                getattr(self, name) for name in _ROLELESS_FLAGS
            ):
                raise SpecError(
                    "a role-less (opaque) Actuator carries only dim and fill; "
                    "drop encoding/range/scale/offset/invert/threshold/binary/clip/"
                    "optional/frame/reference/part/labels"
                )
            return
        if self.labels is not None and len(self.labels) != self.dim:
            raise SpecError(
                f"Actuator {role!r}: dim {self.dim} disagrees with the "
                f"{len(self.labels)} labels; one label per axis"
            )
        if self.fill != 0.0 and not self.optional:
            raise SpecError(
                f"Actuator {role!r}: fill applies only to a role-less (opaque) "
                "or optional actuator; a roled, non-optional actuator takes its "
                "values from the model"
            )
        if self.clip and self.range is None:
            raise SpecError(f"Actuator {role!r}: clip=True clamps to range, so range must be set")
        encoding = self.encoding
        if isinstance(encoding, CustomEncoding) and self.dim != encoding.width:
            raise SpecError(
                f"Actuator {role!r} with a CustomEncoding on base "
                f"{encoding.base!r} must keep its width: dim must be "
                f"{encoding.width}, got {self.dim}"
            )


@dataclass(frozen=True, init=False)
class Action:
    """An action layout: actuators in vector order, and an optional final clip.

    Example:
        >>> Action(Actuator("action/delta_eef_pos", 3), Actuator("action/gripper", 1)).dim
        4
    """

    components: tuple[Actuator, ...]
    clip: tuple[float, float] | None = None

    def __init__(self, *components: Actuator, clip: tuple[float, float] | None = None) -> None:
        if not components:
            raise SpecError("Action needs at least one actuator")
        object.__setattr__(self, "components", tuple(components))
        object.__setattr__(self, "clip", clip)

    @property
    def dim(self) -> int:
        """The action vector's length (the actuators' dims summed)."""
        return sum(component.dim for component in self.components)


# ------------------------------------------------------------------------------------------
# Documents


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


def encoding_from_wire(raw: Any) -> Any:
    """A rotation-encoding field from its canonical wire form (:func:`encoding_to_wire`)."""
    if isinstance(raw, Mapping):
        return CustomEncoding(
            base=raw["base"],
            from_base=raw.get("from_base"),
            to_base=raw.get("to_base"),
            name=raw.get("name", "custom"),
        )
    return one_or_many(raw)


def _actuator_to_dict(actuator: Actuator) -> dict[str, Any]:
    out: dict[str, Any] = {} if actuator.role is None else {"role": actuator.role}
    out["dim"] = actuator.dim
    out["encoding"] = encoding_to_wire(actuator.encoding)
    out["range"] = list(actuator.range) if actuator.range else None
    out["binary"] = actuator.binary
    write_scaled(out, actuator)
    if actuator.fill != 0.0:
        out["fill"] = actuator.fill
    for name in ("invert", "clip", "optional"):
        if getattr(actuator, name):
            out[name] = True
    return write_present(out, actuator, ("threshold", "frame", "reference", "part", "labels"))


def action_to_dict(action: Action) -> dict[str, Any]:
    """An action layout's (not yet canonical) document."""
    return {
        "components": [_actuator_to_dict(component) for component in action.components],
        "clip": list(action.clip) if action.clip else None,
    }


def action_from_dict(data: Mapping[str, Any]) -> Action:
    """An action layout from its canonical document."""
    return Action(
        *(
            Actuator(
                role=item.get("role"),
                dim=int(item["dim"]),
                encoding=encoding_from_wire(item.get("encoding")),
                range=pair(item.get("range")),
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
        clip=pair(data.get("clip")),
    )
