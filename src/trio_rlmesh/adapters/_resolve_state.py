"""Pair each part of a model state input with an env leaf (or a constant, or the model's
previous action) and fix how its numbers are converted."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ._advice import Advisory
from ._errors import AdapterResolutionError
from ._fmt import debug_float, quoted, quoted_list, render_placement
from ._join import EnvFeatures, EnvState
from ._plans import ConstPiece, EnvPiece, FillPiece, Piece, PreviousPiece, StatePlan
from ._resolve_common import (
    Notes,
    affine_term,
    by_part,
    fail,
    gather,
    identity,
    label_gaps,
    offers,
    refuse_unknown_kind,
    where,
)
from ._rotation import RotationConversion, rotation_matrix
from ._vocab import DTYPES, ROTATION_DIMS

__all__ = ["ModelOutputs", "plan_state", "select_encoding"]

Segments = tuple["str | int", ...]


class ModelOutputs:
    """The model's own actuators, for parts that read the previous action back."""

    def __init__(self, components: Sequence[Mapping[str, Any]]) -> None:
        self.slots: list[tuple[Mapping[str, Any], int, int]] = []
        offset = 0
        for actuator in components:
            self.slots.append((actuator, offset, offset + actuator["dim"]))
            offset += actuator["dim"]

    def find(
        self, role: str, part: str | None, at: Segments, notes: Notes
    ) -> tuple[Mapping[str, Any], int, int]:
        matches, implicit = by_part(
            [s for s in self.slots if s[0].get("role") == role],
            lambda s: s[0].get("part"),
            part,
            lambda parts: (
                f"model input {where(at)} needs previous action role {quoted(role)} but the model "
                f"declares it under parts {quoted_list(parts)}; declare part="
            ),
        )
        if implicit is not None:
            notes.checks.append(
                Advisory(
                    "info",
                    f"model input {where(at)}: previous action role {quoted(role)} declares no "
                    f"part and the model declares it only under part {quoted(implicit)}; bound to "
                    "that leaf (declare part= to pin it)",
                )
            )
        if not matches:
            wanted = "" if part is None else f" (part {quoted(part)})"
            emitted = offers(
                (s[0]["role"], s[0].get("part"), None) for s in self.slots if s[0].get("role")
            )
            fail(
                f"model input {where(at)} reads the previous action for role {quoted(role)}"
                f"{wanted} but no actuator emits it; the model outputs {emitted}"
            )
        return matches[0]


def _names(value: Any) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def select_encoding(role: str, env: Sequence[str] | None, model: Any) -> tuple[str, str] | None:
    """``(env native, model target)`` for a rotation part, or ``None`` when neither side has one.

    The model's entries are a preference list: the env's native encoding is taken as is when
    the model accepts it, else converted into the model's first known entry.
    """
    model_names = _names(model)
    if not env and not model_names:
        return None
    if not env or not model_names:
        fail(
            f"state role {quoted(role)}: cannot convert encoding {_shown(env)} to "
            f"{_shown(model_names)}; both sides must declare a rotation encoding"
        )
    native = next((name for name in env if name in ROTATION_DIMS), None)
    if native is None:
        fail(
            f"state role {quoted(role)}: env declares only unrecognized rotation encoding(s) "
            f"{quoted_list(env)}; upgrade the runtime to one that recognizes them"
        )
    known = [name for name in model_names if name in ROTATION_DIMS]
    if not known:
        fail(
            f"state role {quoted(role)}: model declares only unrecognized rotation encoding(s) "
            f"{quoted_list(model_names)}; upgrade the runtime to one that recognizes them"
        )
    return (native, native if native in model_names else known[0])


def _shown(names: Sequence[str] | None) -> str:
    if not names:
        return "None"
    return quoted(names[0]) if len(names) == 1 else quoted_list(names)


def _match(
    part: Mapping[str, Any], at: Segments, env: EnvFeatures, notes: Notes
) -> EnvState | None:
    """The env leaf a state part reads, or ``None`` when the env lacks it."""
    role: str = part["role"]
    want_part: str | None = part.get("part")
    candidates, implicit = by_part(
        [s for s in env.states if s.role == role],
        lambda s: s.part,
        want_part,
        lambda parts: (
            f"model input {where(at)} needs state role {quoted(role)} but the env declares it "
            f"under parts {quoted_list(parts)}; declare part="
        ),
    )
    if not candidates:
        return None
    if implicit is not None:
        notes.checks.append(
            Advisory(
                "info",
                f"model input {where(at)}: state role {quoted(role)} declares no part and the env "
                f"declares it only under part {quoted(implicit)}; bound to that leaf (declare "
                "part= to pin it)",
            )
        )
    accepted = _names(part.get("provenance"))
    if not accepted:
        if len(candidates) > 1:
            provenances = _provenances(candidates)
            fail(
                f"model input {where(at)}: state role {quoted(role)} declares no provenance and "
                f"the env declares it under provenances {quoted_list(provenances)}; declare "
                "provenance= to pin one"
            )
        return candidates[0]
    for name in accepted:
        for state in candidates:
            if state.provenance == name:
                return state
    if len(candidates) == 1:
        # One leaf: bound, and a contradicting provenance is refused with its other facts.
        return candidates[0]
    raise AdapterResolutionError(
        f"model input {where(at)}: state role {quoted(role)} accepts provenance "
        f"{quoted_list(accepted)} but the env declares it under "
        f"{quoted_list(_provenances(candidates))}"
    )


def _provenances(candidates: Sequence[EnvState]) -> list[str]:
    """The candidates' provenances, unset first (shown as ``none``), then by name."""
    keys = sorted((s.provenance is not None, s.provenance or "") for s in candidates)
    return [name if declared else "none" for declared, name in keys]


def _check_facts(part: Mapping[str, Any], state: EnvState, notes: Notes) -> str | None:
    """Frame and provenance agreement; the frame the part reads in (for ``explain()``)."""
    role = state.role
    frame = part.get("frame")
    if frame is not None and state.frame is not None and frame != state.frame:
        fail(
            f"role {quoted(role)}: the model expects frame {quoted(frame)} but the env declares "
            f"{quoted(state.frame)}"
        )
    accepted = _names(part.get("provenance"))
    if accepted and state.provenance is not None and state.provenance not in accepted:
        fail(
            f"role {quoted(role)}: the model expects provenance {quoted_list(accepted)} but the "
            f"env declares {quoted(state.provenance)}"
        )
    if frame is not None and state.frame is None:
        notes.checks.append(
            Advisory(
                "caution",
                f"role {quoted(role)}: the model declares frame {quoted(frame)} but the env "
                "declares none, so the frame it was trained against cannot be verified -- "
                "declare it on the env to silence this",
            )
        )
    if accepted and state.provenance is None:
        shown = quoted(accepted[0]) if len(accepted) == 1 else quoted_list(accepted)
        notes.checks.append(
            Advisory(
                "caution",
                f"role {quoted(role)}: the model declares provenance {shown} but the env "
                "declares none, so where the values it was trained on came from cannot be "
                "verified -- declare it on the env to silence this",
            )
        )
    return state.frame if state.frame is not None else frame


def _labels_permutation(
    wanted: Sequence[str], have: Sequence[str] | None, at: Segments, role: str, lacking: str
) -> np.ndarray[Any, np.dtype[np.intp]] | None:
    """Indices gathering ``have`` into the order of ``wanted`` (``None``: already in order)."""
    if have is None:
        fail(
            f"model input {where(at)}: state role {quoted(role)} names labels "
            f"{quoted_list(wanted)} but the {lacking} declares none; label the {lacking} "
            "(labels=) so the axes can be aligned"
        )
    gaps = label_gaps((lacking, have), ("model input", wanted))
    if gaps is not None:
        fail(
            f"model input {where(at)}: state role {quoted(role)} names labels "
            f"{quoted_list(wanted)} but {gaps}; the two must name the same set"
        )
    return gather(have, wanted)


def _axis(
    part: Mapping[str, Any], name: str, width: int, at: Segments, role: str
) -> np.ndarray[Any, np.dtype[np.float64]] | None:
    subject = f"model input {where(at)}: state role {quoted(role)}: axis_{name}"
    return affine_term(part, name, width, subject)


def _affine_note(part: Mapping[str, Any], labels: Sequence[str] | None) -> str:
    """`` (*2.0 +0.5)``: the part's scale and offset as ``explain()`` shows them."""
    terms: list[str] = []
    for name, sign in (("scale", "*"), ("offset", "+")):
        value = part.get(name)
        if value is not None:
            shown = debug_float(float(value))
            terms.append(shown if sign == "+" and shown.startswith("-") else f"{sign}{shown}")
    for name, sign in (("axis_scale", "*"), ("axis_offset", "+")):
        values = part.get(name)
        if values is not None:
            if labels is not None and len(labels) == len(values):
                items = [
                    f"{label}:{debug_float(v)}" for label, v in zip(labels, values, strict=True)
                ]
            else:
                items = [debug_float(v) for v in values]
            terms.append(f"{sign}[{','.join(items)}]")
    return f" ({' '.join(terms)})" if terms else ""


def _range_note(src: tuple[float, float] | None, dst: tuple[float, float] | None) -> str:
    if src is None or dst is None:
        return ""
    return (
        f" (range ({debug_float(src[0])}, {debug_float(src[1])})->"
        f"({debug_float(dst[0])}, {debug_float(dst[1])}))"
    )


def _pair(value: Any) -> tuple[float, float] | None:
    return None if value is None else (float(value[0]), float(value[1]))


def _fill_width(part: Mapping[str, Any], at: Segments) -> int:
    if part.get("index") is not None:
        return 1
    if part.get("labels") is not None:
        return len(part["labels"])
    if part.get("dim") is not None:
        return int(part["dim"])
    encoding = part.get("encoding")
    base = encoding.get("base") if isinstance(encoding, Mapping) else None
    for name in [base] if base else _names(encoding):
        if name in ROTATION_DIMS:
            return ROTATION_DIMS[name]
    raise AdapterResolutionError(
        f"model input {where(at)}: optional state role {quoted(part['role'])} needs dim, index, "
        "or encoding to size its zero fill"
    )


def _env_piece(
    part: Mapping[str, Any], at: Segments, state: EnvState, notes: Notes
) -> tuple[EnvPiece, str]:
    role: str = part["role"]
    labels = part.get("labels")
    permutation = None
    if labels is not None:
        permutation = _labels_permutation(labels, state.labels, at, role, "env leaf")
    encoding = part.get("encoding")
    if isinstance(encoding, Mapping):
        encoding = encoding["base"]
    pair = select_encoding(role, state.encoding, encoding)
    post = part.get("post_rotate")
    convert = pair if pair is not None and (pair[0] != pair[1] or post is not None) else None
    # Converting reads the env value as its native encoding, so the widths must agree.
    if pair is not None and pair[0] != pair[1] and state.dim != ROTATION_DIMS[pair[0]]:
        fail(
            f"state role {quoted(role)}: env feature {where(state.source)} declares "
            f"{state.dim} dims but encoding {quoted(pair[0])} has {ROTATION_DIMS[pair[0]]}"
        )
    frame = _check_facts(part, state, notes)
    width = ROTATION_DIMS[convert[1]] if convert is not None else state.dim
    select: np.ndarray[Any, np.dtype[np.intp]] | None = None
    note = ""
    index, dim = part.get("index"), part.get("dim")
    if labels is not None:
        select = permutation
        if select is not None:
            note = f" perm[{','.join(str(i) for i in select)}]"
        out_width = len(labels)
    elif index is not None:
        if index >= width:
            fail(
                f"state role {quoted(role)}: index {index} is out of range for the width-{width} "
                f"source feature {where(state.source)}"
            )
        select = np.asarray([index], dtype=np.intp)
        note = f"[{index}]"
        out_width = 1
    elif dim is not None:
        if dim > width:
            fail(
                f"state role {quoted(role)}: requested {dim} dims but the source feature "
                f"{where(state.source)} has width {width}"
            )
        select = np.arange(dim, dtype=np.intp) if dim < width else None
        if state.offset is None or dim != state.dim or convert is not None:
            note = f"[:{dim}]"
        out_width = dim
    else:
        out_width = width
    dst_range = _pair(part.get("range"))
    src_range = state.range if dst_range is not None else None
    axis_labels = labels if labels is not None else (state.labels if select is None else None)
    scale = _axis(part, "scale", out_width, at, role)
    offset = _axis(part, "offset", out_width, at, role)
    if dst_range is not None and src_range is None:
        notes.resolve.append(
            Advisory(
                "info",
                f"model input {where(at)}: a state range is set but the env feature is "
                "unbounded, so the range is a no-op (it remaps an env range, it does not clamp)",
            )
        )
    if dst_range is not None and (scale is not None or offset is not None):
        notes.resolve.append(
            Advisory(
                "info",
                f"model input {where(at)}: a state part sets both range and scale/offset; the "
                "range map runs first and the affine applies to its result",
            )
        )
    text = render_placement(state.source)
    if state.offset is not None:
        text += f"[{state.offset}:{state.offset + state.dim}]"
    if convert is not None and convert[0] != convert[1]:
        text += f" ({convert[0]}->{convert[1]})"
    if post is not None:
        text += " (post_rotate)"
    text += note + _range_note(src_range, dst_range) + _affine_note(part, axis_labels)
    accepted = _names(part.get("provenance"))
    provenance = state.provenance
    if provenance is None and accepted:
        provenance = accepted[0]
    for qualifier, mark in ((frame, "@"), (state.part, "#"), (provenance, "#")):
        if qualifier is not None:
            text += f"{mark}{qualifier}"
    piece = EnvPiece(
        source=state.source,
        start=state.offset,
        stop=None if state.offset is None else state.offset + state.dim,
        width=state.dim,
        convert=None
        if convert is None
        else RotationConversion(
            convert[0],
            convert[1],
            None if post is None else rotation_matrix(post["encoding"], post["value"]),
        ),
        select=select,
        src_range=src_range if src_range != dst_range else None,
        dst_range=dst_range if src_range != dst_range else None,
        scale=scale,
        offset=offset,
        out_width=out_width,
    )
    return piece, text


def _fill_piece(part: Mapping[str, Any], at: Segments, width: int) -> tuple[FillPiece, str]:
    """An absent optional part: its fill, through its own scale and offset."""
    fill = float(part.get("fill", 0.0))
    scale = _axis(part, "scale", width, at, part["role"])
    offset = _axis(part, "offset", width, at, part["role"])
    values = np.full(width, fill)
    if scale is not None:
        values = values * scale
    if offset is not None:
        values = values + offset
    per_axis = part.get("axis_scale") is not None or part.get("axis_offset") is not None
    # A scalar affine folds into the fill value RLMesh shows; a per-axis one is shown after.
    shown = fill if per_axis else float(values[0])
    text = f"fill({width})={debug_float(shown)}" if shown else f"zeros({width})"
    if per_axis:
        text += _affine_note(part, None)
    return FillPiece(width, values.astype(np.float32)), text


def _previous_piece(
    part: Mapping[str, Any], at: Segments, outputs: ModelOutputs, notes: Notes
) -> tuple[PreviousPiece, str]:
    role: str = part["role"]
    actuator, start, stop = outputs.find(role, part.get("part"), at, notes)
    width = stop - start
    dim = part.get("dim")
    labels = part.get("labels")
    if dim is not None and dim != width:
        fail(
            f"model input {where(at)}: previous action role {quoted(role)} declares dim {dim} "
            f"but the actuator emits {width}"
        )
    select = None
    if labels is not None:
        select = _labels_permutation(labels, actuator.get("labels"), at, role, "actuator")
    fill = float(part.get("fill", 0.0))
    text = f"previous {role} (fill {debug_float(fill)})"
    if actuator.get("part") is not None:
        text += f"#{actuator['part']}"
    key = identity(role, actuator.get("part"))
    return PreviousPiece(key, start, stop, select, fill, width), text


def plan_state(
    leaf: Mapping[str, Any],
    at: Segments,
    env: EnvFeatures,
    outputs: ModelOutputs,
    notes: Notes,
) -> StatePlan:
    """Resolve one model state leaf (a canonical document) against the env's state features."""
    pieces: list[Piece] = []
    texts: list[str] = []
    widths: list[int | None] = []
    fills = 0
    for raw in leaf["components"]:
        part: Mapping[str, Any] = {"role": raw} if isinstance(raw, str) else raw
        if "role" not in part:
            pieces.append(ConstPiece(part["dim"], float(part.get("fill", 0.0))))
            texts.append(f"const({part['dim']})={debug_float(float(part.get('fill', 0.0)))}")
            widths.append(part["dim"])
            continue
        if part.get("source") == "action":
            piece, text = _previous_piece(part, at, outputs, notes)
            pieces.append(piece)
            texts.append(text)
            widths.append(piece.out_width)
            continue
        state = _match(part, at, env, notes)
        if state is None:
            refuse_unknown_kind(part["role"], at, env)
            if not part.get("optional"):
                wanted = "" if part.get("part") is None else f" (part {quoted(part['part'])})"
                fail(
                    f"model input {where(at)} needs state role {quoted(part['role'])}{wanted} but "
                    f"the env offers {offers((s.role, s.part, s.provenance) for s in env.states)}"
                )
            width = _fill_width(part, at)
            notes.ad_hoc_fill(part["role"], (s.role for s in env.states))
            fill_piece, text = _fill_piece(part, at, width)
            pieces.append(fill_piece)
            if part.get("part") is not None:
                text += f"#{part['part']}"
            texts.append(text)
            widths.append(width)
            fills += 1
            continue
        piece_, text = _env_piece(part, at, state, notes)
        pieces.append(piece_)
        texts.append(text)
        widths.append(piece_.out_width)
    if leaf["dtype"] not in DTYPES:
        fail(f"model input {where(at)}: unknown dtype {quoted(leaf['dtype'])}")
    clip = _pair(leaf.get("clip"))
    suffix = ""
    if clip is not None:
        suffix += f" clip[{debug_float(clip[0])},{debug_float(clip[1])}]"
    if leaf.get("pad_to") is not None:
        suffix += f", pad to {leaf['pad_to']}"
    reshape = leaf.get("reshape")
    return StatePlan(
        placement=at,
        pieces=tuple(pieces),
        widths=tuple(widths),
        clip=clip,
        pad_to=leaf.get("pad_to"),
        dtype=leaf["dtype"],
        reshape=None if reshape is None else tuple(reshape),
        container=leaf.get("container", "array"),
        filled=fills,
        describe=f"{where(at)} <- concat({', '.join(texts)}){suffix}",
    )
