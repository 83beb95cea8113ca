"""Join: env tags laid over the env's spaces become the features resolution pairs with.

The one place env semantics (roles, encodings, ranges) meet env structure (keys, widths,
bounds). It runs when an env is tagged (so an author's mistake fails at once) and again when
a pairing resolves (on tags read from a peer). Every failure names which side disagreed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from ._advice import Advisory
from ._errors import AdapterResolutionError
from ._fmt import debug_float, quoted, render_placement
from ._spaceview import SpaceView
from ._vocab import ROTATION_DIMS, fixed_dim, is_action_role, is_sanctioned
from ._wire import UnknownLeaf

__all__ = ["EnvActuator", "EnvFeatures", "EnvImage", "EnvState", "EnvText", "join"]

Segments = tuple["str | int", ...]


@attrs.frozen
class EnvImage:
    """A camera the env provides, with its pixel size read from the space."""

    source: Segments
    role: str
    part: str | None
    layout: str
    upside_down: bool
    height: int
    width: int
    channels: int
    value_range: tuple[float, float] | None


@attrs.frozen
class EnvState:
    """A numeric feature: a whole state leaf, or one field of a split leaf."""

    source: Segments
    role: str
    part: str | None
    provenance: str | None
    frame: str | None
    labels: tuple[str, ...] | None
    offset: int | None
    """Where the field starts in its leaf (``None``: the feature is the whole leaf)."""
    dim: int
    encoding: tuple[str, ...] | None
    """The env's encodings, its native one first."""
    range: tuple[float, float] | None


@attrs.frozen
class EnvText:
    """A text feature."""

    source: Segments
    role: str


@attrs.frozen
class EnvUnknown:
    """A leaf of a kind this reader does not define: ignored unless a model needs its role."""

    source: Segments
    role: str | None
    kind: str


@attrs.frozen
class EnvActuator:
    """One env actuator, its range completed from the action space's bounds."""

    raw: Mapping[str, Any]
    """The canonical actuator document."""
    offset: int
    range: tuple[float, float] | None

    @property
    def role(self) -> str | None:
        role = self.raw.get("role")
        return None if role is None else str(role)


@attrs.frozen
class EnvFeatures:
    """Everything resolution needs from the env side."""

    images: tuple[EnvImage, ...]
    states: tuple[EnvState, ...]
    texts: tuple[EnvText, ...]
    unknown: tuple[EnvUnknown, ...]
    actuators: tuple[EnvActuator, ...]
    action_clip: tuple[float, float] | None
    advisories: tuple[Advisory, ...]


_PLAUSIBLE_CHANNELS = 4


def _accept(encoding: Any) -> tuple[str, ...] | None:
    if encoding is None:
        return None
    return (encoding,) if isinstance(encoding, str) else tuple(encoding)


def _native(encodings: tuple[str, ...] | None) -> str | None:
    """The first encoding this build knows: what the env's values actually are."""
    for name in encodings or ():
        if name in ROTATION_DIMS:
            return name
    return None


def _pair(value: Any) -> tuple[float, float] | None:
    return None if value is None else (float(value[0]), float(value[1]))


def _uniform(bounds: tuple[float, ...] | None, offset: int, dim: int) -> float | None:
    if bounds is None:
        return None
    if len(bounds) == 1:
        return bounds[0]
    piece = bounds[offset : offset + dim]
    if len(piece) != dim or not piece or any(v != piece[0] for v in piece):
        return None
    return piece[0]


def finite_range(view: SpaceView, offset: int, dim: int) -> tuple[float, float] | None:
    """The one finite ``(low, high)`` of a slice of a leaf's bounds, if uniform."""
    low, high = _uniform(view.low, offset, dim), _uniform(view.high, offset, dim)
    if low is None or high is None or low in (float("inf"), float("-inf")):
        return None
    if high in (float("inf"), float("-inf")) or low != low or high != high:
        return None
    return (low, high)


def _close(a: float, b: float) -> bool:
    # Space bounds are stored at the dtype's precision (a float32 0.08 reads 0.0799999982).
    return abs(a - b) <= 1e-6 * max(abs(a), abs(b), 1.0)


def _reconcile(
    space: tuple[float, float] | None, tag: tuple[float, float] | None, key: str
) -> tuple[float, float] | None:
    if space is not None and tag is not None:
        if _close(space[0], tag[0]) and _close(space[1], tag[1]):
            return tag
        raise AdapterResolutionError(
            f"{quoted(key)} tag range ({debug_float(tag[0])}, {debug_float(tag[1])}) disagrees "
            f"with the space's finite bounds ({debug_float(space[0])}, {debug_float(space[1])})"
        )
    return space if space is not None else tag


def _dim_law(role: str, width: int, key: str) -> None:
    expected = fixed_dim(role)
    if expected is not None and width != expected:
        raise AdapterResolutionError(
            f"{quoted(key)} declares role {quoted(role)}, which is {expected}-D by convention, "
            f"but its width is {width}"
        )


def _no_action_role(role: str, key: str) -> None:
    if is_action_role(role):
        raise AdapterResolutionError(
            f"observation {quoted(key)} declares role {quoted(role)}, an action kind; a command "
            'is carried by an actuator, and a model reads its previous action with source="action" '
            "(Previous), not from an env observation"
        )


def _is_numeric(view: SpaceView) -> bool:
    return view.kind in ("box", "discrete", "multi_binary", "multi_discrete")


def _mismatch(key: str, expected: str, view: SpaceView) -> AdapterResolutionError:
    return AdapterResolutionError(
        f"observation {quoted(key)} is tagged as {expected} but the space is {view.describe()}"
    )


class _Joiner:
    def __init__(self) -> None:
        self.images: list[EnvImage] = []
        self.states: list[EnvState] = []
        self.texts: list[EnvText] = []
        self.unknown: list[EnvUnknown] = []
        # Every feature in tree order (the order RLMesh reports them in).
        self.ordered: list[EnvImage | EnvState | EnvText] = []

    def node(self, node: Any, view: SpaceView, source: Segments) -> None:
        key = render_placement(source)
        if isinstance(node, UnknownLeaf):
            self.unknown.append(EnvUnknown(source, node.role, node.kind))
        elif isinstance(node, list):
            if view.kind != "tuple":
                raise _mismatch(key, "a Tuple space", view)
            if len(node) != len(view.children):
                raise AdapterResolutionError(
                    f"observation tuple at {quoted(key)} declares {len(node)} item(s) but the "
                    f"space has {len(view.children)}"
                )
            for index, (child, child_view) in enumerate(zip(node, view.children, strict=True)):
                self.node(child, child_view, (*source, index))
        elif "type" not in node:
            if view.kind != "dict":
                raise _mismatch(key, "a Dict space", view)
            for name, child in node.items():
                child_source = (*source, name)
                found = view.child(name)
                if found is None:
                    raise AdapterResolutionError(
                        f"observation key {quoted(render_placement(child_source))} does not "
                        "resolve to a leaf of the observation space"
                    )
                self.node(child, found, child_source)
        else:
            self.leaf(node, view, source, key)

    def leaf(self, leaf: Mapping[str, Any], view: SpaceView, source: Segments, key: str) -> None:
        kind = leaf["type"]
        if kind == "image":
            if view.kind != "box" or len(view.shape) != 3:
                raise _mismatch(key, "an image (3-D Box)", view)
            a, b, c = (max(d, 0) for d in view.shape)
            height, width, channels = (a, b, c) if leaf["layout"] == "hwc" else (b, c, a)
            self.add(
                self.images,
                EnvImage(
                    source,
                    leaf["role"],
                    leaf.get("part"),
                    leaf["layout"],
                    leaf["upside_down"],
                    height,
                    width,
                    channels,
                    finite_range(view, 0, view.width),
                ),
            )
        elif kind == "state":
            if not _is_numeric(view):
                raise _mismatch(key, "a numeric state", view)
            self.state_leaf(leaf, view, source, key, None, view.width)
        elif kind == "split":
            if not _is_numeric(view):
                raise _mismatch(key, "a numeric state", view)
            total = sum(f["dim"] for f in leaf["fields"])
            if total != view.width:
                raise AdapterResolutionError(
                    f"state layout for {quoted(key)} sums to {total} dims but the space width "
                    f"is {view.width}"
                )
            offset = 0
            for field in leaf["fields"]:
                if field["role"] is not None:
                    self.state_leaf(field, view, source, key, offset, field["dim"])
                offset += field["dim"]
        elif kind == "text":
            if view.kind != "text":
                raise _mismatch(key, "a text space", view)
            self.add(self.texts, EnvText(source, leaf["role"]))

    def state_leaf(
        self,
        leaf: Mapping[str, Any],
        view: SpaceView,
        source: Segments,
        key: str,
        offset: int | None,
        width: int,
    ) -> None:
        role: str = leaf["role"]
        encodings = _accept(leaf["encoding"])
        native = _native(encodings)
        if native is not None and ROTATION_DIMS[native] != width:
            raise AdapterResolutionError(
                f"state {quoted(key)} declares encoding {native} ({ROTATION_DIMS[native]} dims) "
                f"but the space width is {width}"
            )
        _dim_law(role, width, key)
        _no_action_role(role, key)
        labels = leaf.get("labels")
        if labels is not None and len(labels) != width:
            raise AdapterResolutionError(
                f"state {quoted(key)} names {len(labels)} labels but the space width is "
                f"{width}; one label per element"
            )
        space_range = finite_range(view, offset or 0, width)
        self.add(
            self.states,
            EnvState(
                source,
                role,
                leaf.get("part"),
                leaf.get("provenance"),
                leaf.get("frame"),
                None if labels is None else tuple(labels),
                offset,
                width,
                encodings,
                _reconcile(space_range, _pair(leaf["range"]), key),
            ),
        )

    def add(self, kind: list[Any], feature: EnvImage | EnvState | EnvText) -> None:
        kind.append(feature)
        self.ordered.append(feature)


def _join_action(action: Mapping[str, Any], view: SpaceView) -> tuple[EnvActuator, ...]:
    if view.kind != "box":
        raise AdapterResolutionError(
            f"the action space must be a flat Box but it is {view.describe()}"
        )
    total = sum(a["dim"] for a in action["components"])
    if total != view.width:
        raise AdapterResolutionError(
            f"action component dims sum to {total} but the action space width is {view.width}"
        )
    out: list[EnvActuator] = []
    offset = 0
    for actuator in action["components"]:
        role = actuator.get("role")
        if role is None:
            out.append(EnvActuator(actuator, offset, None))
            offset += actuator["dim"]
            continue
        encoding = actuator["encoding"]
        base = encoding["base"] if isinstance(encoding, Mapping) else encoding
        if base is not None and actuator["dim"] != ROTATION_DIMS[base]:
            raise AdapterResolutionError(
                f"action component {quoted(role)} declares encoding {base} "
                f"({ROTATION_DIMS[base]} dims) but its dim is {actuator['dim']}"
            )
        _dim_law(role, actuator["dim"], role)
        space_range = finite_range(view, offset, actuator["dim"])
        out.append(
            EnvActuator(actuator, offset, _reconcile(space_range, _pair(actuator["range"]), role))
        )
        offset += actuator["dim"]
    return tuple(out)


def _layout_hint(image: EnvImage) -> Advisory | None:
    # A 3-D shape cannot say which axis holds the channels; a CHW env that forgot its layout
    # derives an implausible channel count while the other layout's would be plausible.
    declared, other_channels, other = (
        ("hwc", image.height, "chw") if image.layout == "hwc" else ("chw", image.width, "hwc")
    )
    if image.channels > _PLAUSIBLE_CHANNELS and 1 <= other_channels <= _PLAUSIBLE_CHANNELS:
        return Advisory(
            "info",
            f"image {quoted(image.role)}: shape implies {image.channels} channels under "
            f'layout={declared}; this looks like {other} — declare layout="{other}" if so',
        )
    return None


def _registry_hint(role: str) -> Advisory | None:
    if is_sanctioned(role):
        return None
    return Advisory(
        "info",
        f"role {quoted(role)} is not in the role registry; it resolves only when the env and "
        "model agree on its exact string. Prefer a blessed role, mark it intentionally "
        "non-standard with an `x/` prefix, or -- for dims no model reads -- use a role-less "
        "(opaque) actuator",
    )


def join(tags: Mapping[str, Any], observation: SpaceView, action: SpaceView) -> EnvFeatures:
    """Lay a canonical env-tags document over the env's spaces.

    Raises:
        AdapterResolutionError: a tag and its space disagree (class, width, encoding, range,
            an action role in an observation).
    """
    joiner = _Joiner()
    joiner.node(tags["observation"], observation, ())
    actuators = _join_action(tags["action"], action)
    advisories: list[Advisory] = [a for a in map(_layout_hint, joiner.images) if a is not None]
    roles = [f.role for f in joiner.ordered] + [a.role for a in actuators if a.role is not None]
    advisories += [a for a in map(_registry_hint, roles) if a is not None]
    return EnvFeatures(
        tuple(joiner.images),
        tuple(joiner.states),
        tuple(joiner.texts),
        tuple(joiner.unknown),
        actuators,
        _pair(tags["action"]["clip"]),
        tuple(advisories),
    )
