"""Apply a plan: observations in, payloads out; model actions in, env actions out.

Every function here runs a plan's decisions and nothing else: no role is matched and no rule
checked again. One step of one env (``lanes=None``: one observation mapping, one
:class:`EpisodeState`) or of ``N`` lanes at once (``lanes=N``: a list of ``N`` observation
mappings, one state per lane, and every output with a leading lane axis); the numeric work
is numpy over whole arrays either way. Only the frame windows and the previous-action
records are per lane, as they belong to each lane's episode.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ._errors import ApplyError
from ._fmt import render_placement
from ._history import EpisodeState
from ._image import checked_cast
from ._plans import (
    ActionPlan,
    AdapterPlan,
    ConstPiece,
    EnvPiece,
    FillPiece,
    ImagePlan,
    PreviousPiece,
    RangeMap,
    StatePlan,
    TextPlan,
)
from ._resolve import OBS_ROOT_KEY

__all__ = [
    "assemble",
    "convert_action",
    "lookup",
    "model_actions",
    "observe",
    "place",
    "record",
    "select_referenced",
]

Segments = tuple["str | int", ...]
F32 = npt.NDArray[np.float32]


def _clip_ufunc() -> Callable[..., Any]:
    """The ``clip`` ufunc behind ``np.clip`` (whose Python wrapper costs more than the clip
    itself on a short vector); ``np.clip`` where it is not found."""
    for module in ("numpy._core.umath", "numpy.core.umath"):  # numpy 2, numpy 1
        try:
            return importlib.import_module(module).clip  # type: ignore[no-any-return]
        except (ImportError, AttributeError):
            continue
    return np.clip  # pragma: no cover


_CLIP = _clip_ufunc()


def _clip(values: F32, bounds: tuple[float, float]) -> F32:
    """``np.clip`` in float32 (``-0.0`` stays ``-0.0`` at a bound of ``0.0``, as Rust's
    ``clamp`` keeps it, where ``np.maximum`` would not)."""
    return _CLIP(values, np.float32(bounds[0]), np.float32(bounds[1]))  # type: ignore[no-any-return]


def select_referenced(plan: AdapterPlan, obs: Any) -> dict[str, Any]:
    """The observation entries the plan reads, under their top-level keys (``<obs>`` for a
    non-Dict observation)."""
    entries: Mapping[str, Any] = obs if isinstance(obs, Mapping) else {OBS_ROOT_KEY: obs}
    return {key: entries[key] for key in plan.referenced_keys if key in entries}


def _kind(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return "a tensor"
    if isinstance(value, str):
        return "text"
    if isinstance(value, (bytes, bytearray)):
        return "bytes"
    if isinstance(value, (int, float, np.number)):
        return "a number"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, Mapping):
        return "a map"
    return type(value).__name__


def _available(keys: Iterable[str]) -> str:
    """The keys a missing one was looked for among, as the message lists them."""
    return "available: [" + ", ".join(f"'{key}'" for key in keys) + "]"


def lookup(selected: Mapping[str, Any], source: Segments) -> Any:
    """The observation value at ``source`` (its first segment picks the top-level entry).

    Raises:
        ApplyError: the entry, a key or an index is missing, or a container has another kind.
    """
    first = source[0] if source else None
    key = first if isinstance(first, str) else OBS_ROOT_KEY
    if key not in selected:
        raise ApplyError(
            f"observation is missing entry '{key}' for source '{render_placement(source)}'; "
            f"{_available(selected)}"
        )
    node = selected[key]
    path = source if key == OBS_ROOT_KEY else source[1:]
    for segment in path:
        if isinstance(segment, str) and isinstance(node, Mapping):
            if segment not in node:
                raise ApplyError(
                    f"observation path '{render_placement(path)}' is missing key '{segment}'; "
                    f"{_available(node)}"
                )
            node = node[segment]
        elif isinstance(segment, int) and isinstance(node, (list, tuple)):
            if segment >= len(node):
                raise ApplyError(
                    f"observation path '{render_placement(path)}' index [{segment}] is out of "
                    f"range (len {len(node)})"
                )
            node = node[segment]
        else:
            want, at = (
                ("a Dict", f"'{segment}'")
                if isinstance(segment, str)
                else (
                    "a Tuple",
                    f"[{segment}]",
                )
            )
            raise ApplyError(
                f"observation path '{render_placement(path)}' expected {want} at {at}, got "
                f"{_kind(node)}"
            )
    return node


def _fetch(selected: Any, source: Segments, lanes: int | None) -> Any:
    """The value at ``source``: of the one observation, or a list with each lane's."""
    if lanes is None:
        return lookup(selected, source)
    return [lookup(entries, source) for entries in selected]


def _numeric(value: Any, lead: tuple[int, ...] = ()) -> F32:
    """A numeric value as float32 with the given leading axes and one flat axis after them
    (one observation's leaf is flattened, as RLMesh reads it)."""
    if type(value) is np.ndarray and value.dtype.char in "fd":
        # float32 as is; float64 rounds once either way (through float64 or not).
        return value.astype(np.float32, copy=False).reshape(*lead, -1)
    if isinstance(value, Mapping):
        if "data" not in value:
            keys = ", ".join(f"'{k}'" for k in value)
            raise ApplyError(
                f"expected numeric payload mapping with a 'data' key, got keys [{keys}]"
            )
        return _numeric(value["data"], lead)
    if isinstance(value, str):
        raise ApplyError("expected a numeric value, got text")
    if isinstance(value, (bytes, bytearray)):
        raise ApplyError("bytes values are only valid for image adapter inputs")
    try:
        array = np.asarray(value)
        if array.dtype.kind not in "biuf":
            raise ValueError(array.dtype)
        array = array.astype(np.float64).astype(np.float32)
    except (TypeError, ValueError):
        raise ApplyError("expected a numeric value, got text") from None
    return array.reshape(*lead, -1)


def _lane_rows(values: Any, lanes: int | None) -> F32:
    """One lane's flat vector, or every lane's stacked as rows."""
    if lanes is None:
        return _numeric(values)
    rows = [_numeric(value) for value in values]
    if len({row.shape for row in rows}) > 1:
        raise ApplyError(
            f"lanes disagree on a leaf's width: {sorted({row.shape[0] for row in rows})}"
        )
    return np.stack(rows)


def _state(
    plan: StatePlan, selected: Any, states: Sequence[EpisodeState], lanes: int | None
) -> Any:
    parts: list[F32] = []
    lead = () if lanes is None else (lanes,)
    for piece in plan.pieces:
        if isinstance(piece, (FillPiece, ConstPiece)):
            parts.append(np.broadcast_to(np.float32(piece.value), (*lead, piece.width)))
        elif isinstance(piece, PreviousPiece):
            parts.append(_previous(piece, states, lanes))
        else:
            parts.append(_env_piece(piece, selected, lanes))
    # One part may still be a view of the observation (or a broadcast constant): copy it, so
    # the payload never aliases what the env may write into next step.
    values = np.concatenate(parts, axis=-1) if len(parts) > 1 else parts[0].copy()
    if plan.clip is not None:
        values = _clip(values, plan.clip)
    width = values.shape[-1]
    if plan.pad_to is not None:
        if width > plan.pad_to:
            raise ApplyError(
                f"state for '{render_placement(plan.placement)}' has {width} dims, more than "
                f"pad_to={plan.pad_to}"
            )
        if width < plan.pad_to:
            pad = np.zeros((*lead, plan.pad_to - width), np.float32)
            values = np.concatenate([values, pad], axis=-1)
    out = checked_cast(values, plan.dtype)
    if plan.reshape is not None:
        out = out.reshape(*lead, *_reshape(plan.reshape, out.shape[-1]))
    if plan.container == "list":
        return out.astype(np.float64).tolist()
    return out


def _reshape(spec: tuple[int, ...], length: int) -> tuple[int, ...]:
    known = 1
    for dim in spec:
        if dim != -1:
            known *= dim
    if -1 in spec:
        if known == 0 or length % known:
            raise ApplyError(f"cannot reshape {length} elements into {list(spec)}")
        return tuple(length // known if d == -1 else d for d in spec)
    if known != length:
        raise ApplyError(f"cannot reshape {length} elements into {list(spec)}")
    return spec


def _env_piece(piece: EnvPiece, selected: Any, lanes: int | None) -> F32:
    values = _lane_rows(_fetch(selected, piece.source, lanes), lanes)
    have = values.shape[-1]
    if piece.start is not None and piece.stop is not None:
        if piece.stop > have:
            raise ApplyError(
                f"state layout field '{render_placement(piece.source)}' needs indices "
                f"[{piece.start}, {piece.stop}) but the runtime observation has only {have} "
                "elements"
            )
        values = values[..., piece.start : piece.stop]
    elif have != piece.width:
        raise ApplyError(
            f"state piece '{render_placement(piece.source)}' resolved to {piece.width} dims but "
            f"the runtime observation yields {have}"
        )
    if piece.convert is not None:
        values = piece.convert(values)
    if piece.select is not None:
        values = values[..., piece.select]
    if piece.range_map is not None:
        values = _map_range(values, piece.range_map)
    if piece.scale is not None:
        values = values * piece.scale
    if piece.offset is not None:
        values = values + piece.offset
    return values


def _map_range(values: F32, affine: RangeMap) -> F32:
    if affine.src_span == 0:
        raise ApplyError("source range for an affine map has zero width")
    mapped = (values - affine.src_low) / affine.src_span * affine.dst_span + affine.dst_low
    return np.asarray(mapped, np.float32)


def _previous(piece: PreviousPiece, states: Sequence[EpisodeState], lanes: int | None) -> F32:
    rows = []
    for state in states:
        action = state.previous()
        if action is None:
            rows.append(np.full(piece.out_width, piece.fill, np.float32))
        else:
            row = action[piece.start : piece.stop]
            rows.append(row if piece.select is None else row[piece.select])
    return rows[0] if lanes is None else np.stack(rows)


_FRAME_TYPES = (np.ndarray, bytes, bytearray, memoryview)


def _image(plan: ImagePlan, selected: Any, lanes: int | None) -> npt.NDArray[Any]:
    if plan.blank is not None:
        lead = () if lanes is None else (lanes,)
        return plan.pipeline.finish(np.full((*lead, *plan.blank), plan.fill, np.uint8))  # type: ignore[no-any-return]
    assert plan.source is not None
    value = _fetch(selected, plan.source, lanes)
    frames = [value] if lanes is None else value
    if not all(isinstance(frame, _FRAME_TYPES) for frame in frames):
        raise ApplyError("expected an image array observation value or encoded image bytes")
    if lanes is None:
        return plan.pipeline(value)  # type: ignore[no-any-return]
    if all(isinstance(f, np.ndarray) for f in frames) and len({f.shape for f in frames}) == 1:
        # Same-size arrays go through the pipeline as one batch (one numpy call per step).
        return plan.pipeline(np.stack(frames))  # type: ignore[no-any-return]
    return np.stack([plan.pipeline(frame) for frame in frames])


def _stack(
    plan: ImagePlan, frames: npt.NDArray[Any], states: Sequence[EpisodeState], lanes: int | None
) -> npt.NDArray[Any]:
    """Push this step's frame(s) into each lane's window; the stacked window(s)."""
    key = render_placement(plan.placement)
    rows = [frames] if lanes is None else list(frames)
    out = []
    for state, frame in zip(states, rows, strict=True):
        pad = plan.black() if plan.pad_black and key not in state.windows else None
        window = state.push(key, frame, plan.span, pad)
        out.append(np.stack([window[offset - 1] for offset in plan.offsets]))
    return out[0] if lanes is None else np.stack(out)


def _one_text(plan: TextPlan, entries: Mapping[str, Any]) -> str | None:
    if plan.source is not None:
        try:
            found = lookup(entries, plan.source)
        except ApplyError:
            return plan.fill
        if not isinstance(found, str):
            raise ApplyError(
                f"text input '{render_placement(plan.placement)}' resolved to "
                f"'{render_placement(plan.source)}', but {_debug_value(found)} is not a string"
            )
        return found
    return plan.fill


def _text(plan: TextPlan, selected: Any, lanes: int | None) -> Any:
    """The text (``None``: the input is left out), or each lane's text as a list."""
    if lanes is None:
        value = _one_text(plan, selected)
        if value is None:
            return None
        return [value] if plan.container == "list" else value
    values = [_one_text(plan, entries) for entries in selected]
    if all(value is None for value in values):
        return None
    return [[v] for v in values] if plan.container == "list" else values


def _debug_value(value: Any) -> str:
    if isinstance(value, (int, float, np.number)) and not isinstance(value, bool):
        return f"Number({float(value)!r})"
    return repr(value)


def place(payload: Any, placement: Segments, value: Any) -> Any:
    """``payload`` with ``value`` at ``placement`` (containers made on the way).

    A tuple index grows its list with ``{}`` placeholders, as RLMesh's payload builder does.
    """
    if not placement:
        return value
    head, rest = placement[0], placement[1:]
    if isinstance(head, int):
        items = payload if isinstance(payload, list) else []
        while len(items) <= head:
            items.append({})
        items[head] = place(items[head], rest, value)
        return items
    node = payload if isinstance(payload, dict) else {}
    node[head] = place(node.get(head, {}), rest, value)
    return node


def assemble(
    plan: AdapterPlan,
    selected: Any,
    states: Sequence[EpisodeState],
    lanes: int | None = None,
    customs: Mapping[Segments, Any] | None = None,
) -> Any:
    """The model payload for one step (custom inputs come from ``customs``, by placement).

    ``selected`` is one observation's :func:`select_referenced` entries, or (``lanes=N``) a
    list of each lane's. Counts the step in every state when the plan holds per-episode
    history.
    """
    if plan.stacked or plan.reads_previous:
        for state in states:
            state.tick()
    payload: Any = None
    for obs_plan in plan.obs:
        if isinstance(obs_plan, ImagePlan):
            frames = _image(obs_plan, selected, lanes)
            value: Any = _stack(obs_plan, frames, states, lanes) if obs_plan.stack > 1 else frames
        elif isinstance(obs_plan, StatePlan):
            value = _state(obs_plan, selected, states, lanes)
        elif isinstance(obs_plan, TextPlan):
            value = _text(obs_plan, selected, lanes)
            if value is None:
                continue
        else:
            if customs is None or obs_plan.placement not in customs:
                continue
            value = customs[obs_plan.placement]
        payload = place(payload, obs_plan.placement, value)
    return {} if payload is None else payload


def observe(
    plan: AdapterPlan,
    selected: Any,
    states: Sequence[EpisodeState],
    lanes: int | None = None,
) -> None:
    """Count a step that predicted nothing: its frames still enter the windows."""
    if not (plan.stacked or plan.reads_previous):
        return
    for state in states:
        state.tick_observed()
    for image in plan.stacked:
        _stack(image, _image(image, selected, lanes), states, lanes)


def model_actions(plan: ActionPlan, action: Any, lead: tuple[int, ...] = ()) -> F32:
    """The model's output as float32 ``(*lead, in_dim)`` (one action is flattened first).

    Raises:
        ApplyError: not numeric, or the wrong width.
    """
    values = _numeric(action, lead)
    if values.shape[-1] != plan.in_dim:
        raise ApplyError(
            f"expected {plan.in_dim}-dim model action, got shape ({values.shape[-1]},)"
        )
    return values


def record(plan: ActionPlan, values: F32, states: Sequence[EpisodeState]) -> None:
    """Keep each lane's executed model action (rows of ``values``) for parts reading it."""
    if plan.previous:
        rows = values.reshape(len(states), -1)
        for state, row in zip(states, rows, strict=True):
            state.record(row.copy())


def convert_action(plan: ActionPlan, values: F32) -> F32:
    """The env action(s) for float32 model actions ``(..., in_dim)`` (any leading axes:
    lanes, chunk frames)."""
    lead = values.shape[:-1]
    pieces: list[F32] = []
    for segment in plan.segments:
        if segment.fill is not None:
            pieces.append(np.full((*lead, segment.width), segment.fill, np.float32))
            continue
        piece = values[..., segment.start : segment.stop]
        if segment.convert is not None:
            piece = segment.convert(piece)
        if segment.range_map is not None:
            piece = _map_range(piece, segment.range_map)
        piece = _corrections(
            piece,
            segment.model_scale,
            segment.model_offset,
            segment.model_invert,
            segment.model_threshold,
        )
        if segment.select is not None:
            piece = piece[..., segment.select]
        piece = _corrections(
            piece, segment.scale, segment.offset, segment.invert, segment.threshold
        )
        if segment.binarize:
            snapped = np.where(piece >= 0, np.float32(1.0), np.float32(-1.0))
            if segment.threshold is None:
                snapped = np.where(piece == 0, piece, snapped)
            piece = snapped.astype(np.float32)
        if segment.clip is not None:
            piece = _clip(piece, segment.clip)
        pieces.append(piece)
    # A lone piece may be a view of the model's output: the env gets an array of its own.
    out = np.concatenate(pieces, axis=-1) if len(pieces) > 1 else pieces[0].copy()
    if plan.clip is not None:
        out = _clip(out, plan.clip)
    return np.ascontiguousarray(out, dtype=np.float32)


def _corrections(
    piece: F32, scale: F32 | None, offset: F32 | None, invert: bool, threshold: float | None
) -> F32:
    if scale is not None:
        piece = piece * scale
    if offset is not None:
        piece = piece + offset
    if invert:
        piece = -piece
    if threshold is not None:
        piece = piece - np.float32(threshold)
    return piece
