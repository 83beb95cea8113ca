"""Per-episode bookkeeping for models: the predict context and ``predict_seed``.

A served model interleaves episodes from many lanes and envs, so anything it keeps per
episode is keyed by episode id here, created on the episode's first predict and dropped
when the runtime says the episode ended (``ResetAdapter``).
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Callable
from typing import Any, TypedDict

import numpy as np

from .._errors import ModelError

__all__ = ["EpisodeStore", "PredictContext", "predict_seed"]

_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_MASK64 = (1 << 64) - 1
_SEED_INDEX_SEPARATOR = b"\xfe"


def predict_seed(episode_seed: int, predict_index: int) -> int:
    """The reproducible sampling seed of an episode's ``predict_index``-th predict.

    Bit-exact with ``rlmesh.predict_seed`` 0.1.0. The law, found by experiment against
    that release (20 000 random pairs, plus the extremes of both ranges): 64-bit FNV-1a
    over the episode seed as 8 little-endian two's-complement bytes, one ``0xFE``
    separator byte, and the index as 8 little-endian unsigned bytes; the result is the
    low 32 bits, so it fits any numpy seeding API.

    Args:
        episode_seed: a signed 64-bit seed.
        predict_index: an unsigned 64-bit ordinal.

    Raises:
        OverflowError: an argument outside its 64-bit range (as the reference does).

    >>> predict_seed(0, 0), predict_seed(42, 3)
    (3060724065, 2016650976)
    """
    if not -(1 << 63) <= episode_seed < (1 << 63):
        raise OverflowError(f"episode_seed {episode_seed} does not fit a signed 64-bit integer")
    if not 0 <= predict_index <= _MASK64:
        raise OverflowError(
            f"predict_index {predict_index} does not fit an unsigned 64-bit integer"
        )
    digest = _FNV_OFFSET
    data = (
        struct.pack("<q", episode_seed) + _SEED_INDEX_SEPARATOR + struct.pack("<Q", predict_index)
    )
    for byte in data:
        digest = ((digest ^ byte) * _FNV_PRIME) & _MASK64
    return digest & 0xFFFFFFFF


class PredictContext(TypedDict):
    """What a predict corner that declares a ``context`` parameter is told.

    The keys match ``rlmesh.types.PredictContext``, so a model written for rlmesh reads
    the same dict here.
    """

    episode_id: str
    """The runtime-minted episode id; ``""`` for a lane with no identity."""
    episode_seed: int | None
    """The seed the episode was reset with, ``None`` when unseeded."""
    predict_index: int
    """How many predicts this episode had before this one (0 on its first)."""
    predict_seed: int | None
    """:func:`predict_seed` of ``episode_seed`` and ``predict_index``; ``None`` when unseeded."""
    state: dict[str, Any]
    """A dict that lives exactly as long as the episode, for the model's own use."""


class _Episode:
    __slots__ = ("env_id", "index", "seed", "state")

    def __init__(self, env_id: str, seed: int | None) -> None:
        self.env_id = env_id
        self.seed = seed
        self.index = 0
        self.state: dict[str, Any] = {}


class EpisodeStore:
    """Per-episode contexts keyed by episode id, bounded by ``capacity``.

    Entries leave only at their episode's end; past the capacity a *new* episode is
    refused (a :class:`~trio_rlmesh.ModelError`) instead of evicting live state.
    """

    def __init__(
        self, on_end: Callable[[str], None] | None = None, *, capacity: int = 65_536
    ) -> None:
        self._on_end = on_end
        self._capacity = max(1, capacity)
        self._episodes: dict[str, _Episode] = {}

    def __len__(self) -> int:
        return len(self._episodes)

    def context(self, env_id: str, episode_id: str, seed: int | None) -> PredictContext:
        """The context of this predict of ``episode_id`` (advances its predict index)."""
        if not episode_id:
            return {
                "episode_id": "",
                "episode_seed": seed,
                "predict_index": 0,
                "predict_seed": None,
                "state": {},
            }
        episode = self._episodes.get(episode_id)
        if episode is None:
            if len(self._episodes) >= self._capacity:
                raise ModelError(
                    f"the model already holds state for {self._capacity} live episodes; "
                    f"refusing episode {episode_id} (are episode ends reaching the model?)",
                    recoverable=False,
                    code="INTERNAL",
                )
            episode = self._episodes[episode_id] = _Episode(env_id, seed)
        index = episode.index
        episode.index += 1
        return {
            "episode_id": episode_id,
            "episode_seed": episode.seed,
            "predict_index": index,
            "predict_seed": None if episode.seed is None else predict_seed(episode.seed, index),
            "state": episode.state,
        }

    def end(self, episode_id: str) -> None:
        """Drop the episode's entry, then run the model's episode-end hook with its id."""
        self._episodes.pop(episode_id, None)
        if self._on_end is not None:
            self._on_end(episode_id)

    def drop_env(self, env_id: str) -> None:
        """Drop every entry of ``env_id`` without running hooks (a bulk eviction)."""
        for episode_id in [k for k, e in self._episodes.items() if e.env_id == env_id]:
            del self._episodes[episode_id]

    def clear(self) -> None:
        """Drop every entry without running hooks."""
        self._episodes.clear()

    def held_bytes(self) -> int:
        """Rough size of the held state: array payloads plus shallow object sizes."""
        total = 0
        for episode in self._episodes.values():
            for value in episode.state.values():
                total += value.nbytes if isinstance(value, np.ndarray) else sys.getsizeof(value)
        return total
