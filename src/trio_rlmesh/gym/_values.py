"""Wire values to what a Gymnasium user gets back, compiled once per space.

The codec (:mod:`trio_rlmesh.spaces`) decodes a reply's leaves into read-only numpy views of
the message bytes, in the wire dtype. A Gymnasium env hands out fresh, writable values in the
dtypes of its own spaces, so each remote env compiles, at connect, one function per space that
turns a decoded batch into that: arrays are copied with ``astype`` (one copy, which also
converts a wire dtype to Gymnasium's, e.g. MultiBinary's uint8 to int8), Discrete lanes become
numpy scalars, Text stays ``str``, Dict and Tuple are rebuilt around their children.

Infos arrive as a MetaMap: :func:`lane_infos` restores the numpy arrays of a vector env's info
dict (every list with one item per lane, at any depth, becomes an array).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..spaces import Box, Dict, Discrete, MultiBinary, MultiDiscrete, Space, Text, Tuple

__all__ = ["Finisher", "batch_finisher", "lane_finisher", "lane_infos"]

Finisher = Callable[[Any], Any]
"""A decoded batch in, the user's value out."""


def _array(gym_space: Any) -> Finisher:
    dtype = np.dtype(gym_space.dtype)

    def finish(batch: Any) -> Any:
        return batch.astype(dtype)

    return finish


def _row(gym_space: Any) -> Finisher:
    dtype = np.dtype(gym_space.dtype)

    def finish(batch: Any) -> Any:
        return batch[0].astype(dtype)

    return finish


def _scalar(gym_space: Any) -> Finisher:
    scalar = np.dtype(gym_space.dtype).type

    def finish(batch: Any) -> Any:
        return scalar(batch[0])

    return finish


def _first(batch: Any) -> Any:
    return batch[0]


def _same(batch: Any) -> Any:
    return batch


def _compile(space: Space, gym_space: Any, single: bool) -> Finisher:
    if isinstance(space, Box | MultiBinary | MultiDiscrete):
        return _row(gym_space) if single else _array(gym_space)
    if isinstance(space, Discrete):
        return _scalar(gym_space) if single else _array(gym_space)
    if isinstance(space, Text):
        return _first if single else _same
    if isinstance(space, Dict):
        children = [(key, _compile(child, gym_space[key], single)) for key, child in space.entries]

        def finish_dict(batch: Any) -> Any:
            return {key: child(batch[key]) for key, child in children}

        return finish_dict
    if isinstance(space, Tuple):
        items = [
            _compile(child, gym_space[index], single) for index, child in enumerate(space.spaces)
        ]

        def finish_tuple(batch: Any) -> Any:
            return tuple(child(value) for child, value in zip(items, batch, strict=True))

        return finish_tuple
    raise TypeError(f"{type(space).__name__} is not a space")


def lane_finisher(space: Space, gym_space: Any) -> Finisher:
    """Lane 0 of a decoded one-lane batch, as the Gymnasium ``gym_space`` holds it.

    >>> import gymnasium
    >>> from trio_rlmesh import spaces
    >>> wire = spaces.Box.from_bounds(-1.0, 1.0, shape=(2,))
    >>> finish = lane_finisher(wire, gymnasium.spaces.Box(-1.0, 1.0, (2,), np.float32))
    >>> obs = finish(spaces.decode_batch(wire, [bytes(8)], 1))
    >>> obs, obs.flags.writeable
    (array([0., 0.], dtype=float32), True)
    """
    return _compile(space, gym_space, single=True)


def batch_finisher(space: Space, gym_space: Any) -> Finisher:
    """A whole decoded batch, with the dtypes of the single-lane Gymnasium ``gym_space``."""
    return _compile(space, gym_space, single=False)


def _restore(value: Any, num_envs: int) -> Any:
    if isinstance(value, list):
        if len(value) == num_envs and not any(isinstance(item, list | dict) for item in value):
            try:
                return np.array(value)
            except (TypeError, ValueError):  # ragged or mixed: leave it as the wire gave it
                return value
        return value
    if isinstance(value, dict):
        return {key: _restore(item, num_envs) for key, item in value.items()}
    return value


def lane_infos(infos: Mapping[str, Any], num_envs: int) -> dict[str, Any]:
    """A vector env's info dict with its per-lane lists turned back into numpy arrays.

    Gymnasium vector infos are dicts of arrays with one item per lane (and ``_key`` boolean
    masks); on the wire they become lists. Every list of ``num_envs`` scalars, at any depth
    of nested dicts, becomes an array again (masks come back as bool arrays); anything else
    is kept as it came.

    >>> lane_infos({"_x": [True, False], "x": [3, 0], "name": "pole"}, 2)
    {'_x': array([ True, False]), 'x': array([3, 0]), 'name': 'pole'}
    """
    return {key: _restore(value, num_envs) for key, value in infos.items()}
