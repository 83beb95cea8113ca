"""Resolve: canonical env tags x env spaces x canonical model spec -> an :class:`AdapterPlan`.

Resolution is where every decision is made and every impossible pairing refused, with a
message that names the input and says what to change. The per-kind rules live beside this
module (``_resolve_image``, ``_resolve_state``, ``_resolve_action``); this one walks the
model's input tree, pairs text and custom inputs, and gathers the advisories.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ._advice import Advisory
from ._fmt import quoted, render_placement
from ._join import EnvFeatures, join
from ._plans import AdapterPlan, CustomPlan, ImagePlan, ObsPlan, StatePlan, TextPlan
from ._resolve_action import plan_action
from ._resolve_common import Notes, fail, kind_of_role_error, offers, refuse_unknown_kind, where
from ._resolve_image import plan_image
from ._resolve_state import ModelOutputs, plan_state
from ._spaceview import SpaceView
from ._wire import Reading, UnknownLeaf

__all__ = ["OBS_ROOT_KEY", "leaves", "resolve_documents"]

Segments = tuple["str | int", ...]

OBS_ROOT_KEY = "<obs>"
"""The observation mapping key a non-Dict observation is presented under."""


def leaves(node: Any, at: Segments = ()) -> Iterator[tuple[Segments, Any]]:
    """``(placement, leaf)`` of a canonical document tree, depth first in document order."""
    if isinstance(node, list):
        for index, child in enumerate(node):
            yield from leaves(child, (*at, index))
    elif isinstance(node, UnknownLeaf) or "type" in node:
        yield at, node
    else:
        for key, child in node.items():
            yield from leaves(child, (*at, key))


def _plan_text(leaf: Mapping[str, Any], at: Segments, env: EnvFeatures, notes: Notes) -> TextPlan:
    role: str = leaf["role"]
    source = next((t.source for t in env.texts if t.role == role), None)
    fill: str | None = leaf["fill"]
    if source is None:
        refuse_unknown_kind(role, at, env)
        if fill is None:
            fail(
                f"model input {where(at)} needs text role {quoted(role)} but the env offers "
                f"{offers((t.role, None, None) for t in env.texts)} and no fill is set"
            )
        notes.ad_hoc_fill(role, (t.role for t in env.texts))
        text = f"fill {quoted(fill)}"
    else:
        text = quoted(render_placement(source))
    return TextPlan(at, source, leaf["container"], fill, f"{where(at)} <- text {text}")


def _envelope_key(source: Segments) -> str:
    first = source[0] if source else None
    return first if isinstance(first, str) else OBS_ROOT_KEY


def _referenced(plans: list[ObsPlan]) -> tuple[str, ...]:
    keys: set[str] = set()
    for plan in plans:
        if isinstance(plan, (ImagePlan, TextPlan)) and plan.source is not None:
            keys.add(_envelope_key(plan.source))
        elif isinstance(plan, StatePlan):
            keys.update(
                _envelope_key(piece.source) for piece in plan.pieces if hasattr(piece, "source")
            )
    return tuple(sorted(keys))


_UPGRADE = "if a newer peer wrote it, upgrade the runtime"


def _check_role_kinds(model: Mapping[str, Any]) -> None:
    """Refuse a model role whose ``kind/`` prefix this build does not define."""
    for at, leaf in leaves(model["input"]):
        if isinstance(leaf, UnknownLeaf):
            continue
        roles = [leaf["role"]] if "role" in leaf else []
        for part in leaf.get("components", ()):
            if isinstance(part, str):
                roles.append(part)
            elif "role" in part:
                roles.append(part["role"])
        for role in roles:
            reason = kind_of_role_error(role)
            if reason is not None:
                fail(f"model input {where(at)}: {reason}; {_UPGRADE}")
    for actuator in model["output"]["components"]:
        role = actuator.get("role")
        reason = None if role is None else kind_of_role_error(role)
        if reason is not None:
            fail(f"model action: {reason}; {_UPGRADE}")


def resolve_documents(
    env_doc: Mapping[str, Any],
    env_reading: Reading,
    observation: SpaceView,
    action: SpaceView,
    model_doc: Mapping[str, Any],
    model_reading: Reading,
    customs: Mapping[Segments, Callable[[Mapping[str, Any]], Any]],
) -> AdapterPlan:
    """Resolve canonical documents (read tolerantly) into a plan.

    ``customs`` holds the callable of each custom input, by placement.

    Raises:
        AdapterResolutionError: the pairing cannot be built; the message says why.
    """
    # A bare unknown field on a kind this build knows may change what that leaf means:
    # refuse it rather than silently apply defaults to a leaf we only half understand.
    for reading in (env_reading, model_reading):
        if reading.unknown_fields:
            fail(reading.unknown_fields[0])
    _check_role_kinds(model_doc)
    env = join(env_doc, observation, action)
    notes = Notes()
    outputs = ModelOutputs(model_doc["output"]["components"])
    plans: list[ObsPlan] = []
    for at, leaf in leaves(model_doc["input"]):
        if isinstance(leaf, UnknownLeaf):
            kind = quoted(leaf.kind)
            fail(f"model input {where(at)} is of unrecognized kind {kind}; upgrade the runtime")
        kind = leaf["type"]
        if kind == "image":
            image = plan_image(leaf, at, env, notes)
            if image.role_rebound is not None:
                wanted, bound = image.role_rebound
                notes.resolve.append(
                    Advisory(
                        "caution",
                        f"model input {where(at)}: no env camera has role {quoted(wanted)}; bound "
                        "to the env's                  only camera "
                        f"({quoted(bound)}) instead -- declare the matching role on one"
                        "                  side to silence this",
                    )
                )
            plans.append(image)
        elif kind == "state":
            plans.append(plan_state(leaf, at, env, outputs, notes))
        elif kind == "text":
            plans.append(_plan_text(leaf, at, env, notes))
        else:
            plans.append(CustomPlan(at, customs[at], f"{where(at)} <- custom transform"))
    previous_keys = {
        piece.key
        for plan in plans
        if isinstance(plan, StatePlan)
        for piece in plan.pieces
        if hasattr(piece, "key")
    }
    action_plan = plan_action(
        model_doc["output"], env.actuators, env.action_clip, previous_keys, notes
    )
    unknown = [
        Advisory(
            "info",
            f"env feature {quoted(render_placement(u.source))} (role "
            f"{quoted(u.role or '<none>')}): unrecognized kind {quoted(u.kind)}; ignored (no "
            "model input requires it)",
        )
        for u in env.unknown
    ]
    resolve_notes = sorted(set(unknown + notes.resolve), key=lambda a: a.message)
    return AdapterPlan(
        obs=tuple(plans),
        action=action_plan,
        resolve_advisories=tuple(resolve_notes),
        notes=tuple(sorted([*env.advisories, *notes.checks], key=lambda a: a.message)),
        data_loss=(*_data_loss(plans), *notes.fabricated),
        referenced_keys=_referenced(plans),
    )


def _data_loss(plans: list[ObsPlan]) -> Iterator[Advisory]:
    """The per-input notes of data the model will not see as the env sent it."""
    for plan in plans:
        at = where(plan.placement)
        if isinstance(plan, StatePlan) and plan.filled:
            yield Advisory(
                "caution",
                f"state {at}: {plan.filled} component(s) zero-filled for an absent env role",
            )
        if not isinstance(plan, ImagePlan):
            continue
        if plan.blank is not None:
            yield Advisory(
                "caution",
                f"image {at}: the env provides no source camera; using a blank (zero) frame",
            )
        elif plan.resized and plan.fit == "crop":
            yield Advisory("info", f"image {at}: aspect crop drops edge pixels")
        elif plan.resized and plan.fit == "pad":
            yield Advisory("info", f"image {at}: aspect pad adds letterbox borders")
