"""The env side: sparse tags over the env's observation and action spaces.

An env tags each observation leaf with a role and the few facts its space cannot say (an
image's axis layout, a rotation's encoding, a range the space leaves open); widths, dtypes
and bounds come from the spaces when a pairing resolves. ``observation`` is a tree whose
containers are the space's own: a ``dict`` for a ``Dict`` space, a ``tuple`` for a
``Tuple`` space, a bare leaf for a single-leaf space. The tags' JSON document is written and
read here too (see :mod:`._shape`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias, Union

from .._errors import SpecError
from ._action_spec import Action, action_from_dict, action_to_dict, encoding_to_wire
from ._coerce import check_accept_set, check_labels, hashable_node, one_or_many
from ._shape import document_in, json_round_trip, pair, read_tree, walk_tree, write_present
from ._vocab import ENV_METADATA_KEY, Frame, ImageLayout, Provenance, RotationEncoding
from ._wire import UnknownLeaf, read_env

__all__ = [
    "EnvTags",
    "Field",
    "ImageTag",
    "ObsLeaf",
    "ObsNode",
    "ObservationRoles",
    "Split",
    "StateTag",
    "TextTag",
]


@dataclass(frozen=True)
class ImageTag:
    """A camera image in an env observation.

    ``upside_down`` says the camera renders rotated 180 degrees; the adapter rotates only
    when env and model disagree. ``part`` names the body part the camera sits on when the
    role repeats (an identity the resolver matches on).
    """

    role: str
    layout: ImageLayout = "hwc"
    upside_down: bool = False
    part: str | None = field(default=None, kw_only=True)


@dataclass(frozen=True)
class StateTag:
    """A numeric (proprioception) leaf of an env observation.

    ``encoding`` is the rotation encoding when the role is a rotation (or a sequence, the
    env's native one first). ``range`` supplies bounds the space leaves open (finite space
    bounds that disagree are an error). ``frame``, ``provenance``, ``part`` and ``labels``
    say what the numbers are: their coordinate frame, where they come from, which body part,
    and one name per element.
    """

    role: str
    encoding: RotationEncoding | Sequence[RotationEncoding] | None = None
    range: tuple[float, float] | None = None
    frame: Frame | None = field(default=None, kw_only=True)
    provenance: Provenance | None = field(default=None, kw_only=True)
    part: str | None = field(default=None, kw_only=True)
    labels: Sequence[str] | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        object.__setattr__(self, "encoding", one_or_many(self.encoding))
        check_accept_set("StateTag", self.role, self.encoding)
        object.__setattr__(self, "labels", check_labels("StateTag", self.role, self.labels))


@dataclass(frozen=True)
class TextTag:
    """A text leaf of an env observation (typically the task instruction)."""

    role: str


@dataclass(frozen=True)
class Field:
    """One contiguous slice of a flat numeric observation leaf (see :class:`Split`).

    A field without a ``role`` is a skip: it advances the offset and produces nothing.
    """

    role: str | None = None
    dim: int = 0
    encoding: RotationEncoding | Sequence[RotationEncoding] | None = None
    range: tuple[float, float] | None = None
    frame: Frame | None = field(default=None, kw_only=True)
    provenance: Provenance | None = field(default=None, kw_only=True)
    part: str | None = field(default=None, kw_only=True)
    labels: Sequence[str] | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        # dim's default only satisfies the field order (role comes first); 0 is no width.
        if self.dim < 1:
            raise SpecError(f"Field {self.role!r}: dim must be >= 1, got {self.dim}")
        object.__setattr__(self, "encoding", one_or_many(self.encoding))
        check_accept_set("Field", self.role, self.encoding)
        labels = check_labels("Field", self.role, self.labels)
        object.__setattr__(self, "labels", labels)
        if labels is not None and len(labels) != self.dim:
            raise SpecError(
                f"Field {self.role!r}: dim {self.dim} disagrees with the "
                f"{len(labels)} labels; one label per element"
            )


@dataclass(frozen=True, init=False)
class Split:
    """One flat numeric observation leaf split into role fields, in vector order.

    A leaf, not a container: the observation-side mirror of :class:`Action`. The field
    widths must sum to the leaf's width.

    Example:
        >>> split = Split(Field("proprio/eef_pos", 3), Field(dim=2), Field("proprio/gripper", 1))
        >>> [f.role for f in split.fields]
        ['proprio/eef_pos', None, 'proprio/gripper']
    """

    fields: tuple[Field, ...]

    def __init__(self, *fields: Field) -> None:
        if not fields:
            raise SpecError("Split needs at least one Field")
        keys = [(f.role, f.part, f.provenance) for f in fields if f.role is not None]
        if len(keys) != len(set(keys)):
            raise SpecError("Split declares a role more than once")
        object.__setattr__(self, "fields", tuple(fields))


ObsLeaf: TypeAlias = Union[ImageTag, StateTag, TextTag, Split]  # noqa: UP007
"""A tag on one space leaf."""
ObsNode: TypeAlias = "ObsLeaf | Mapping[str, ObsNode] | tuple[ObsNode, ...]"
"""A tag tree: a leaf, a ``dict`` (a ``Dict`` space) or a ``tuple`` (a ``Tuple`` space)."""


@dataclass(frozen=True)
class ObservationRoles:
    """The observation roles an env declares, by kind, in declaration order."""

    images: tuple[str, ...] = ()
    states: tuple[str, ...] = ()
    texts: tuple[str, ...] = ()


_Identity: TypeAlias = tuple[str, "str | None", "str | None"]


def _collect_identities(
    node: object, images: list[_Identity], states: list[_Identity], texts: list[_Identity]
) -> None:
    """Each leaf's ``(role, part, provenance)``, by kind, in declaration order."""
    if isinstance(node, Mapping):
        for child in node.values():
            _collect_identities(child, images, states, texts)
    elif isinstance(node, tuple):
        for child in node:
            _collect_identities(child, images, states, texts)
    elif isinstance(node, ImageTag):
        images.append((node.role, node.part, None))
    elif isinstance(node, StateTag):
        states.append((node.role, node.part, node.provenance))
    elif isinstance(node, Split):
        states.extend((f.role, f.part, f.provenance) for f in node.fields if f.role is not None)
    elif isinstance(node, TextTag):
        texts.append((node.role, None, None))
    else:
        raise TypeError(f"observation node must be a leaf, a dict, or a tuple, got {node!r}")


@dataclass(frozen=True)
class EnvTags:
    """An env's tags: the observation tag tree and the action layout.

    Example:
        >>> from trio_rlmesh import adapters as adapt
        >>> tags = adapt.EnvTags(
        ...     observation={"pixels": adapt.ImageTag(adapt.IMAGE_PRIMARY)},
        ...     action=adapt.Action(adapt.Actuator(adapt.ACTION_GRIPPER, 1)),
        ... )
        >>> tags.observation_roles.images
        ('image/primary',)
    """

    observation: ObsNode
    action: Action

    def __post_init__(self) -> None:
        # No pairing can resolve against tags that declare one identity twice, so say so now.
        kinds: tuple[tuple[str, list[_Identity]], ...] = (
            ("image", []),
            ("state", []),
            ("text", []),
        )
        _collect_identities(self.observation, kinds[0][1], kinds[1][1], kinds[2][1])
        for kind, identities in kinds:
            seen: set[_Identity] = set()
            for identity in identities:
                if identity in seen:
                    role, part, provenance = identity
                    where = "" if part is None else f" under part {part!r}"
                    if provenance is not None:
                        where += f" with provenance {provenance!r}"
                    raise SpecError(f"env tags declare {kind} role {role!r}{where} more than once")
                seen.add(identity)

    def __hash__(self) -> int:
        return hash((hashable_node(self.observation), self.action))

    @property
    def observation_roles(self) -> ObservationRoles:
        """The declared observation roles, by kind, in declaration order."""
        images: list[_Identity] = []
        states: list[_Identity] = []
        texts: list[_Identity] = []
        _collect_identities(self.observation, images, states, texts)
        return ObservationRoles(
            images=tuple(i[0] for i in images),
            states=tuple(i[0] for i in states),
            texts=tuple(i[0] for i in texts),
        )

    def to_dict(self) -> dict[str, Any]:
        """These tags as RLMesh's JSON document (every default written out)."""
        raw = {
            "observation": _obs_node_to_dict(self.observation),
            "action": action_to_dict(self.action),
        }
        return read_env(json_round_trip(raw), strict=True)[0]

    def to_json(self) -> str:
        """These tags as a JSON string (sorted keys)."""
        return json.dumps(self.to_dict(), sort_keys=True, allow_nan=False)

    def to_metadata(self) -> dict[str, Any]:
        """A metadata fragment carrying these tags under :data:`ENV_METADATA_KEY`."""
        return {ENV_METADATA_KEY: self.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EnvTags:
        """Tags from their JSON document (validated first)."""
        doc = read_env(json_round_trip(data), strict=True)[0]
        return EnvTags(_obs_node_from_dict(doc["observation"]), action_from_dict(doc["action"]))

    @classmethod
    def from_json(cls, payload: str) -> EnvTags:
        """Tags from :meth:`to_json`'s output."""
        return cls.from_dict(json.loads(payload))

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any]) -> EnvTags | None:
        """The tags in env metadata, or ``None`` when it carries none."""
        payload = document_in(metadata, ENV_METADATA_KEY)
        return None if payload is None else cls.from_dict(payload)


# ------------------------------------------------------------------------------------------
# Documents


# What a StateTag and a Field say about their numbers besides the encoding and range.
_FACTS = ("frame", "provenance", "part", "labels")


def _numbers_to_dict(out: dict[str, Any], leaf: StateTag | Field) -> dict[str, Any]:
    """``out`` with what a :class:`StateTag` and a :class:`Field` both write."""
    out["encoding"] = encoding_to_wire(leaf.encoding)
    out["range"] = list(leaf.range) if leaf.range else None
    return write_present(out, leaf, _FACTS)


def _numbers_from_dict(item: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword arguments a :class:`StateTag` and a :class:`Field` both take."""
    facts = {name: item.get(name) for name in _FACTS}
    return {"encoding": one_or_many(item["encoding"]), "range": pair(item["range"]), **facts}


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
        return _numbers_to_dict({"type": "state", "role": leaf.role}, leaf)
    if isinstance(leaf, Split):
        fields = [_numbers_to_dict({"role": f.role, "dim": f.dim}, f) for f in leaf.fields]
        return {"type": "split", "fields": fields}
    return {"type": "text", "role": leaf.role}


def _is_obs_leaf(node: Any) -> bool:
    return isinstance(node, (ImageTag, StateTag, TextTag, Split))


def _obs_node_to_dict(node: Any) -> Any:
    """An observation tag tree's (not yet canonical) document."""
    return walk_tree(node, _obs_leaf_to_dict, _is_obs_leaf, "observation")


def _obs_leaf_from_dict(item: Any) -> Any:
    if isinstance(item, UnknownLeaf):
        return item
    kind = item["type"]
    if kind == "image":
        return ImageTag(item["role"], item["layout"], item["upside_down"], part=item.get("part"))
    if kind == "state":
        return StateTag(item["role"], **_numbers_from_dict(item))
    if kind == "split":
        return Split(*(Field(f["role"], f["dim"], **_numbers_from_dict(f)) for f in item["fields"]))
    return TextTag(item["role"])


def _is_obs_document_leaf(node: Any) -> bool:
    return isinstance(node, UnknownLeaf) or "type" in node


def _obs_node_from_dict(node: Any) -> Any:
    """The tag tree of a canonical observation document (unknown kinds stay unknown)."""
    return read_tree(node, _obs_leaf_from_dict, _is_obs_document_leaf)
