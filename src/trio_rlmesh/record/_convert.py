"""A finished episode's buffered wire values as Minari's per-episode arrays (writer side).

Runs on the writer's thread, never on the event loop. Observations and actions are
decoded with the env's spaces: when every step covered one lane and the space has no
Text leaf, each leaf's bytes over the episode are joined and decoded as one batch (the
wire's batched layout is row-major, so ``N`` one-lane leaves joined are the leaf of an
``N``-lane batch); otherwise each step is decoded and the lane picked out.

Infos become Minari's dict of per-step columns (the reset's info first, then one per
step). A key missing at some steps gets a ``_key`` mask column, Gymnasium's layout for
vector infos; a lane of a vector env gets its own entry of each per-lane list.
Values of one kind (bools, ints, numbers, strings, same-shape numeric arrays, nested
dicts) become typed columns; anything else is kept as JSON text, so nothing is lost.
Scalar columns are lists (Minari's Arrow backend cannot read back a one-dimensional
array column), array columns arrays of ``N + 1`` rows.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from ..runtime import EpisodeRecord
from ..spaces import Space, Text, decode_batch, decode_lanes, stack_lanes
from ..spaces._internal import iter_leaves
from ._buffers import Finished, Sample

__all__ = ["Converted", "convert", "info_columns", "lane_info"]

_MISSING: Any = object()


@attrs.frozen
class Converted:
    """One episode, ready for Minari's ``EpisodeBuffer`` and a video."""

    record: EpisodeRecord
    observations: Any
    """``N + 1`` observations (the reset's first, the terminal one last)."""
    actions: Any
    rewards: Any
    terminations: Any
    truncations: Any
    infos: dict[str, Any] | None
    frames: tuple[bytes, ...]
    """PNG frames, ``N + 1`` of them, when the run rendered; else empty."""


def convert(
    finished: Finished, spaces: tuple[Space, Space], gym_spaces: tuple[Any, Any]
) -> Converted:
    record = finished.completed.record
    observed = (finished.first, *finished.steps)
    steps = finished.steps
    rewards = np.array([event.rewards[position] for event, position in steps], np.float64)
    terminations = np.zeros(len(steps), np.bool_)
    truncations = np.zeros(len(steps), np.bool_)
    if len(steps):
        terminations[-1], truncations[-1] = record.terminated, record.truncated
    frames: tuple[bytes, ...] = ()
    if all(event.frames for event, _ in observed):
        frames = tuple(event.frames[position] for event, position in observed)
    return Converted(
        record=record,
        observations=_values(spaces[0], gym_spaces[0], observed, "_raw_observation"),
        actions=_values(spaces[1], gym_spaces[1], steps, "_raw_action"),
        rewards=rewards,
        terminations=terminations,
        truncations=truncations,
        infos=_infos(observed),
        frames=frames,
    )


def _values(space: Space, gym_space: Any, samples: Sequence[Sample], field: str) -> Any:
    n = len(samples)
    if all(len(event.env_indices) == 1 for event, _ in samples) and not _has_text(space):
        rows = [getattr(event, field) for event, _ in samples]
        joined = [b"".join(row[leaf] for row in rows) for leaf in range(len(rows[0]))] if n else []
        batch = decode_batch(space, joined, n) if n else _empty(space)
    else:
        lanes = [
            decode_lanes(space, getattr(event, field), len(event.env_indices))[position]
            for event, position in samples
        ]
        batch = stack_lanes(space, lanes)
    return _for_minari(gym_space, batch)


def _has_text(space: Space) -> bool:
    return any(isinstance(leaf, Text) for _, leaf in iter_leaves(space))


def _empty(space: Space) -> Any:
    return stack_lanes(space, [])


def _for_minari(gym_space: Any, batch: Any) -> Any:
    """Minari's layout: dicts and tuples of per-step arrays, a list of strings for Text."""
    import gymnasium.spaces as gs

    if isinstance(gym_space, gs.Dict):
        return {key: _for_minari(sub, batch[key]) for key, sub in gym_space.spaces.items()}
    if isinstance(gym_space, gs.Tuple):
        return tuple(
            _for_minari(sub, part) for sub, part in zip(gym_space.spaces, batch, strict=True)
        )
    if isinstance(gym_space, gs.Text):
        return [str(text) for text in batch]
    return np.asarray(batch, dtype=gym_space.dtype)


# -------------------------------------------------------------------------------- infos


def _infos(observed: Sequence[Sample]) -> dict[str, Any] | None:
    if all(event._raw_infos is None or not event._raw_infos.entries for event, _ in observed):
        return None
    rows = [
        lane_info(event.infos, position, len(event.env_indices)) for event, position in observed
    ]
    return info_columns(rows)


def lane_info(info: Mapping[str, Any], position: int, width: int) -> dict[str, Any]:
    """One lane's entries of a vector env's info (per-key lists over lanes, ``_key``
    masks); a one-lane info as it is.

    >>> lane_info({"x": [1, 2], "_x": [True, True], "n": 3}, 1, 2)
    {'x': 2, 'n': 3}
    >>> lane_info({"x": [1, 2], "_x": [True, False]}, 1, 2)
    {}
    """
    if width == 1:
        return dict(info)
    out: dict[str, Any] = {}
    for key, value in info.items():
        if key.startswith("_") and key[1:] in info:
            continue
        mask = info.get(f"_{key}")
        if isinstance(mask, list) and len(mask) == width and not mask[position]:
            continue
        if isinstance(value, Mapping):
            out[key] = lane_info(value, position, width)
        elif isinstance(value, list) and len(value) == width:
            out[key] = value[position]
        else:
            out[key] = value
    return out


def info_columns(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """Per-step info dicts as columns (``None`` when every one is empty).

    >>> columns = info_columns([{"a": 1}, {"a": 2, "b": "x"}])
    >>> columns["a"], columns["b"], columns["_b"]
    ([1, 2], ['', 'x'], [False, True])
    """
    keys = dict.fromkeys(key for row in rows for key in row)
    if not keys:
        return None
    out: dict[str, Any] = {}
    for key in keys:
        values = [row.get(key, _MISSING) for row in rows]
        name = str(key).replace("/", "%2F")  # HDF5 reads "/" as a path
        column = _column(values)
        if column is not None:
            out[name] = column
        if any(value is _MISSING for value in values):
            out[f"_{name}"] = [value is not _MISSING for value in values]
    return out


def _column(values: list[Any]) -> Any:
    present = [value for value in values if value is not _MISSING]
    kinds = {_kind(value) for value in present}
    if kinds == {"bool"}:
        return [value is not _MISSING and bool(value) for value in values]
    if kinds == {"int"}:
        try:
            column = np.array([0 if value is _MISSING else value for value in values], np.int64)
        except OverflowError:
            return _json(values)
        return column.tolist()
    if kinds <= {"int", "float"}:
        return [0.0 if value is _MISSING else float(value) for value in values]
    if kinds == {"str"}:
        return ["" if value is _MISSING else value for value in values]
    if kinds == {"dict"}:
        return info_columns([{} if value is _MISSING else value for value in values])
    if kinds == {"array"}:
        arrays = [np.asarray(value) for value in present]
        shape, dtype = arrays[0].shape, np.result_type(*arrays)
        if all(array.shape == shape for array in arrays) and dtype.kind in "biuf":
            filler = np.zeros(shape, dtype)
            return np.stack([filler if v is _MISSING else np.asarray(v, dtype) for v in values])
    return _json(values)


def _kind(value: Any) -> str:
    if isinstance(value, (bool, np.bool_)):
        return "bool"
    if isinstance(value, (int, np.integer)):
        return "int"
    if isinstance(value, (float, np.floating)):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, Mapping):
        return "dict"
    if isinstance(value, (list, tuple, np.ndarray)) and len(value) and _numeric(value):
        return "array"
    return "other"


def _numeric(value: Any) -> bool:
    try:
        return np.asarray(value).dtype.kind in "biuf"
    except (ValueError, TypeError):
        return False


def _json(values: list[Any]) -> list[str]:
    return ["" if value is _MISSING else json.dumps(value, default=str) for value in values]
