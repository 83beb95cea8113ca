"""Per-lane episode buffers: a pure, synchronous machine fed with the run's hook events.

Theory of operation
-------------------

Each lane of each env endpoint holds at most one *live* episode, keyed by
``(env_id, lane)`` (``env_id`` is the session's endpoint id, so lanes of different
endpoints never mix). The events arrive in the driver's order (see
:mod:`trio_rlmesh.runtime._hooks`):

* ``reset_completed`` starts the episodes a reset started, with their first observation;
  a live episode of that lane that was never counted (over the quota) is dropped;
* ``step_completed`` adds one step to each lane it covers, or, for a lane that rolled
  on that step (NEXT_STEP: the event already names the new episode), gives the new
  episode's first observation (a roll step is no step of either episode);
* ``episode_completed`` (counted episodes only) takes the lane's episode out: it is
  finished and goes to the writer.

Nothing is decoded here: a step is kept as ``(event, position)``, the event holding the
batched leaves the env answered and the action it got. Decoding happens in the writer,
off the event loop. An episode the book counted that does not match what was buffered
(another id, a missing first observation, another step count) is an inconsistency;
:meth:`Buffers.complete` raises instead of recording a wrong episode.
"""

from __future__ import annotations

from typing import Any

import attrs

from .._errors import RecordingError
from ..runtime import EpisodeCompleted, ResetCompleted, StepCompleted

__all__ = ["Buffers", "Finished", "Live", "Sample"]

Key = tuple[str, int]
Sample = tuple[Any, int]
"""An event (``ResetCompleted`` or ``StepCompleted``) and the lane's position in its batch."""


@attrs.define(eq=False)
class Live:
    """One lane's episode in progress."""

    episode_id: str
    first: Sample | None = None
    """Where its first observation is (a reset's answer, or the step it rolled on)."""
    steps: list[Sample] = attrs.Factory(list)


@attrs.frozen
class Finished:
    """A counted episode with everything the writer needs."""

    completed: EpisodeCompleted
    first: Sample
    steps: tuple[Sample, ...]


class Buffers:
    """The live episode of every lane; hands out the finished, counted ones."""

    def __init__(self) -> None:
        self.live: dict[Key, Live] = {}

    def reset(self, event: ResetCompleted) -> None:
        env_id = event.env_id
        for position, (lane, episode_id) in enumerate(
            zip(event.env_indices, event.episode_ids, strict=True)
        ):
            self.live[(env_id, lane)] = Live(episode_id, first=(event, position))

    def step(self, event: StepCompleted) -> None:
        env_id, live_by_key = event.env_id, self.live
        for position, (lane, episode_id) in enumerate(
            zip(event.env_indices, event.episode_ids, strict=True)
        ):
            live = live_by_key.get((env_id, lane))
            if live is not None and live.episode_id == episode_id:
                live.steps.append((event, position))
            else:
                # The lane rolled on this step: its answer starts the new episode.
                live_by_key[(env_id, lane)] = Live(episode_id, first=(event, position))

    def complete(self, event: EpisodeCompleted) -> Finished:
        """Take a counted episode out of its lane.

        Raises:
            RecordingError: what was buffered is not that episode (the recording would
                not match the report).
        """
        record = event.record
        live = self.live.pop((event.env_id, record.env_index), None)
        where = f"episode {record.index} ({record.episode_id}) on lane {record.env_index}"
        if live is None or live.episode_id != record.episode_id or live.first is None:
            raise RecordingError(
                f"recording lost track of {where}: its start was not seen (were the "
                "recording hooks attached after the run began?)",
                lane=record.env_index,
            )
        if len(live.steps) != record.steps:
            raise RecordingError(
                f"recording of {where} holds {len(live.steps)} steps, the run counted "
                f"{record.steps}",
                lane=record.env_index,
            )
        return Finished(event, live.first, tuple(live.steps))

    def end_session(self, env_id: str) -> int:
        """Drop the session's unfinished episodes (never counted); returns how many."""
        keys = [key for key in self.live if key[0] == env_id]
        for key in keys:
            del self.live[key]
        return len(keys)
