"""Map the model's action layout onto the env's, actuator by actuator."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ._advice import Advisory
from ._fmt import debug_float, display_float, quoted, quoted_list
from ._join import EnvActuator
from ._plans import ActionPlan, ActionSegment
from ._resolve_common import (
    Notes,
    affine_term,
    by_part,
    fail,
    gather,
    identity,
    label_gaps,
    offers,
)
from ._rotation import RotationConversion
from ._vocab import ROTATION_DIMS, fixed_dim

__all__ = ["plan_action"]

Actuator = Mapping[str, Any]


def _base(encoding: Any) -> str | None:
    base = encoding["base"] if isinstance(encoding, Mapping) else encoding
    return None if base is None else str(base)


def _pair(value: Any) -> tuple[float, float] | None:
    return None if value is None else (float(value[0]), float(value[1]))


def _check_dim_law(model: Actuator) -> None:
    role = model["role"]
    expected = fixed_dim(role)
    if expected is not None and model["dim"] != expected:
        fail(
            f"action role {quoted(role)}: model declares {model['dim']} dims but the role is "
            f"{expected}-D by convention"
        )


def _check_dims(model: Actuator, env: Actuator, role: str) -> None:
    _check_dim_law(model)
    custom = model["encoding"] if isinstance(model["encoding"], Mapping) else None
    if custom is not None:
        if custom.get("to_base") is None:
            fail(f"action role {quoted(role)}: an action custom encoding needs to_base")
        width = ROTATION_DIMS[custom["base"]]
        if model["dim"] != width:
            fail(
                f"action role {quoted(role)}: a custom encoding preserves its base width {width} "
                f"but the actuator declares dim {model['dim']}"
            )
    src, dst = _base(model["encoding"]), _base(env["encoding"])
    if src is not None and dst is not None and src != dst:
        if model["dim"] != ROTATION_DIMS[src] or env["dim"] != ROTATION_DIMS[dst]:
            fail(
                f"action role {quoted(role)}: dims {model['dim']}->{env['dim']} do not match "
                f"encodings {quoted(src)}->{quoted(dst)}"
            )
        return
    if src != dst:
        shown = ["None" if name is None else quoted(name) for name in (src, dst)]
        fail(
            f"action role {quoted(role)}: cannot convert encoding {shown[0]} to {shown[1]}; both "
            "sides must declare a rotation encoding"
        )
    if model["dim"] != env["dim"]:
        fail(
            f"action role {quoted(role)}: model outputs {model['dim']} dims but the env expects "
            f"{env['dim']}"
        )


def _axis(
    actuator: Actuator, name: str, width: int, side: str
) -> np.ndarray[Any, np.dtype[np.float64]] | None:
    subject = f"action role {quoted(actuator['role'])}: the {side}'s axis_{name}"
    return affine_term(actuator, name, width, subject)


def _axis_term(sign: str, values: Sequence[float], labels: Sequence[str] | None) -> str:
    if labels is not None and len(labels) == len(values):
        items = [f"{label}:{debug_float(v)}" for label, v in zip(labels, values, strict=True)]
    else:
        items = [debug_float(v) for v in values]
    return f"{sign}[{','.join(items)}]"


def _terms(actuator: Actuator, labels: Sequence[str] | None, *, scalar_scale: bool) -> list[str]:
    """An actuator's corrections as ``explain()`` shows them (RLMesh leaves a model
    actuator's scalar scale out: ``scalar_scale=False``)."""
    terms: list[str] = []
    if scalar_scale and actuator.get("scale") is not None:
        terms.append(f"*{display_float(float(actuator['scale']))}")
    if actuator.get("axis_scale") is not None:
        terms.append(_axis_term("*", actuator["axis_scale"], labels))
    if actuator.get("offset") is not None:
        terms.append(f"+{debug_float(float(actuator['offset']))}")
    if actuator.get("axis_offset") is not None:
        terms.append(_axis_term("+", actuator["axis_offset"], labels))
    return terms


def _permutation(
    model: Actuator, env: Actuator, role: str
) -> np.ndarray[Any, np.dtype[np.intp]] | None:
    wanted, have = model.get("labels"), env.get("labels")
    if wanted is None:
        return None
    if have is None:
        fail(
            f"action role {quoted(role)}: the model names labels {quoted_list(wanted)} but the env "
            "actuator declares none; label the env actuator (labels=) so the axes can be aligned"
        )
    gaps = label_gaps(("model", wanted), ("env actuator", have))
    if gaps is not None:
        fail(
            f"action role {quoted(role)}: the model names labels {quoted_list(wanted)} but "
            f"{gaps}; the two must name the same set"
        )
    return gather(wanted, have)


def _check_facts(model: Actuator, env: Actuator, role: str, notes: Notes) -> str:
    suffix = ""
    for name, mark in (("frame", "@"), ("reference", "~")):
        mine, theirs = model.get(name), env.get(name)
        if mine is not None and theirs is not None and mine != theirs:
            fail(
                f"role {quoted(role)}: the model expects {name} {quoted(mine)} but the env "
                f"declares {quoted(theirs)}"
            )
        if mine is not None and theirs is None:
            notes.checks.append(
                Advisory(
                    "caution",
                    f"role {quoted(role)}: the model declares {name} {quoted(mine)} but the env "
                    f"declares none, so the {name} it was trained against cannot be verified -- "
                    "declare it on the env to silence this",
                )
            )
        shown = theirs if theirs is not None else mine
        if shown is not None:
            suffix += f"{mark}{shown}"
    part = env.get("part") if env.get("part") is not None else model.get("part")
    if part is not None:
        suffix += f"#{part}"
    return suffix


def _ambiguous(role: str, parts: list[str]) -> str:
    return (
        f"env action needs role {quoted(role)} but the model declares it under parts "
        f"{quoted_list(parts)}; declare part="
    )


def plan_action(
    model: Mapping[str, Any],
    env_actuators: Sequence[EnvActuator],
    env_clip: tuple[float, float] | None,
    previous_keys: set[str],
    notes: Notes,
) -> ActionPlan:
    """Resolve the model's canonical action document against the env's actuators."""
    if model.get("clip") is not None:
        fail("clip is an env-side actuator clamp; the model action declaration must leave it unset")
    slots: dict[tuple[str, str | None], tuple[int, Actuator]] = {}
    cursor = 0
    for actuator in model["components"]:
        role = actuator.get("role")
        if role is not None:
            key = (role, actuator.get("part"))
            if key in slots:
                fail(f"duplicate model action role {quoted(role)}")
            slots[key] = (cursor, actuator)
        cursor += actuator["dim"]
    segments: list[ActionSegment] = []
    lines: list[str] = []
    seen: set[tuple[str, str | None]] = set()
    matched: set[tuple[str, str | None]] = set()
    for env_actuator in env_actuators:
        env = env_actuator.raw
        role = env.get("role")
        width = env["dim"]
        if role is None:
            fill = float(env.get("fill", 0.0))
            segments.append(ActionSegment(None, width, fill))
            lines.append(f"(opaque {width}d) <- fill {display_float(fill)}")
            continue
        key = (role, env.get("part"))
        if key in seen:
            fail(f"duplicate env action role {quoted(role)}")
        seen.add(key)
        # An env actuator without a part takes the model's part-less one, else its only part.
        candidates, implicit = by_part(
            [k for k in slots if k[0] == role],
            lambda k: k[1],
            env.get("part"),
            functools.partial(_ambiguous, role),
        )
        if implicit is not None:
            notes.checks.append(
                Advisory(
                    "info",
                    f"env action: role {quoted(role)} declares no part and the model declares it "
                    f"only under part {quoted(implicit)}; bound to that leaf (declare part= to "
                    "pin it)",
                )
            )
        slot = slots[candidates[0]] if candidates else None
        if candidates:
            matched.add(candidates[0])
        if slot is None:
            if env.get("optional"):
                fill = float(env.get("fill", 0.0))
                segments.append(ActionSegment(role, width, fill))
                lines.append(
                    f"{quoted(role)} <- fill {display_float(fill)} ({width}d; model did not "
                    "output this optional role)"
                    + ("" if env.get("part") is None else f"#{env['part']}")
                )
                notes.fabricated.append(
                    Advisory(
                        "caution",
                        f"action {quoted(role)}: the model does not output this optional role; "
                        f"fabricating {width} dim(s) of {display_float(fill)}",
                    )
                )
                continue
            wanted = "" if env.get("part") is None else f" (part {quoted(env['part'])})"
            outputs = offers((r, p, None) for r, p in slots)
            fail(
                f"env action needs role {quoted(role)}{wanted} but the model only outputs {outputs}"
            )
        start, mine = slot
        select = _permutation(mine, env, role)
        _check_dims(mine, env, role)
        src_enc, dst_enc = _base(mine["encoding"]), _base(env["encoding"])
        converts = src_enc is not None and dst_enc is not None and src_enc != dst_enc
        if converts and (mine.get("axis_scale") is not None or mine.get("axis_offset") is not None):
            fail(
                f"action role {quoted(role)}: the model's axis_scale/axis_offset cannot apply "
                f"across a rotation conversion {quoted(str(src_enc))}->{quoted(str(dst_enc))}; use "
                "a scalar scale/offset or declare them on the env"
            )
        if mine.get("clip"):
            fail(
                f"action role {quoted(role)}: clip is an env-side clamp; declare it on the env "
                "actuator"
            )
        binarize = bool(env["binary"] or mine["binary"])
        if (env.get("threshold") is not None or mine.get("threshold") is not None) and not binarize:
            fail(
                f"action role {quoted(role)}: threshold requires a binary component (set "
                "binary=true)"
            )
        clip = None
        if env.get("clip"):
            if env_actuator.range is None:
                fail(
                    f"action role {quoted(role)}: clip=true clamps to range, but no range is "
                    "declared"
                )
            clip = env_actuator.range
        model_range, env_range = _pair(mine["range"]), env_actuator.range
        same = model_range == env_range
        if model_range is not None and env_range is None:
            notes.resolve.append(
                Advisory(
                    "info",
                    f"model action (role {quoted(role)}): a range is set but the env actuator is "
                    "unbounded, so the range is a no-op (it remaps into an env range, it does not "
                    "clamp)",
                )
            )
        model_width, env_width = mine["dim"], env["dim"]
        segment = ActionSegment(
            role=role,
            width=env_width,
            fill=None,
            start=start,
            stop=start + model_width,
            select=select,
            convert=RotationConversion(src_enc, dst_enc)
            if src_enc and dst_enc and src_enc != dst_enc
            else None,
            src_range=None if same else model_range,
            dst_range=None if same else env_range,
            model_scale=_axis(mine, "scale", model_width, "model"),
            model_offset=_axis(mine, "offset", model_width, "model"),
            model_invert=bool(mine.get("invert")),
            model_threshold=mine.get("threshold"),
            scale=_axis(env, "scale", env_width, "env"),
            offset=_axis(env, "offset", env_width, "env"),
            invert=bool(env.get("invert")),
            threshold=env.get("threshold"),
            binarize=binarize,
            clip=clip,
        )
        segments.append(segment)
        suffix = _check_facts(mine, env, role, notes)
        line = f"{quoted(role)} <- model[{start}:{start + model_width}]"
        if segment.convert is not None:
            line += f" ({src_enc}->{dst_enc})"
        if segment.src_range is not None and segment.dst_range is not None:
            src, dst = segment.src_range, segment.dst_range
            line += (
                f" (range ({debug_float(src[0])}, {debug_float(src[1])})->"
                f"({debug_float(dst[0])}, {debug_float(dst[1])}))"
            )
        # RLMesh shows the model side's per-axis scale and its offset (not its scalar scale,
        # invert or threshold, which it applies all the same).
        model_labels = mine.get("labels") or env.get("labels")
        model_terms = _terms(mine, model_labels, scalar_scale=False)
        if model_terms:
            line += f" (model {' '.join(model_terms)})"
        if select is not None:
            line += f" perm[{','.join(str(i) for i in select)}]"
        for term in _terms(env, env.get("labels"), scalar_scale=True):
            line += f" ({term})"
        if env.get("invert"):
            line += " (invert)"
        if env.get("threshold") is not None:
            line += f" (-{display_float(float(env['threshold']))})"
        if binarize:
            line += " (sign)"
        lines.append(line + suffix)
    env_roles = [a.role for a in env_actuators]
    for role, part in slots:
        if (role, part) not in matched:
            notes.ad_hoc_fill(role, env_roles)
    if env_clip is not None:
        lines.append(f"clip to ({debug_float(env_clip[0])}, {debug_float(env_clip[1])})")
    previous = tuple(
        (identity(r, p), start, start + actuator["dim"])
        for (r, p), (start, actuator) in slots.items()
        if identity(r, p) in previous_keys
    )
    return ActionPlan(tuple(segments), cursor, env_clip, previous, tuple(lines))
