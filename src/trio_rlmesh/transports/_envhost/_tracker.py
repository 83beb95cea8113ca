"""Episode bookkeeping of one env session (spec §6.3, §6.4), as a pure state machine.

The tracker is told about resets and steps and answers with the completed episodes; it
never mutates on a rejected transition. Interrupted episodes (a lane reset mid-episode)
are buffered, at most :data:`INTERRUPTED_BUFFER`, and delivered with the next step.
"""

from __future__ import annotations

import collections
import enum
import time
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs
import numpy as np

from ...protocol import env_v1, spaces_v1
from ...protocol._internal import INFO_FINAL_INFO, INFO_FINAL_INFO_MASK
from ._errors import Code, WireError

__all__ = [
    "INTERRUPTED_BUFFER",
    "EpisodeTracker",
    "StepOutcome",
    "TrackedLane",
    "vector_final_info",
]

INTERRUPTED_BUFFER: Final = 100
"""Interrupted episodes kept for delivery; the oldest are dropped beyond this (spec §6.1)."""


class TrackedLane(enum.Enum):
    """Where one lane is, as the env side sees it (the runtime has its own ``LaneState``)."""

    IDLE = "idle"
    ACTIVE = "active"
    PENDING_AUTORESET = "pending_autoreset"


@attrs.define
class _Episode:
    episode_id: str
    seed: int | None
    start_ns: int
    steps: int = 0
    reward: float = 0.0

    def finish(
        self,
        lane: int,
        terminated: bool,
        truncated: bool,
        final_info: spaces_v1.MetaMap | None,
    ) -> env_v1.EpisodeMetadata:
        return env_v1.EpisodeMetadata(
            episode_id=self.episode_id,
            seed=self.seed,
            env_index=lane,
            step_count=self.steps,
            cumulative_reward=self.reward,
            terminated=terminated,
            truncated=truncated,
            start_timestamp_ns=self.start_ns,
            end_timestamp_ns=time.time_ns(),
            final_info=final_info,
        )


@attrs.define(eq=False)
class StepOutcome:
    """One lane's result of a step, as the tracker needs it."""

    lane: int
    reward: float
    terminated: bool
    truncated: bool
    final_info: spaces_v1.MetaMap | None
    next_episode_id: str = ""
    """The id the runtime pushed for this lane on this step (adopted by a NEXT_STEP roll)."""


@attrs.define(eq=False)
class EpisodeTracker:
    """Episode bookkeeping of one Join session; no I/O, mutations only on success."""

    num_lanes: int
    next_step: bool
    """Whether the env autoresets lanes on the step after they finish (NEXT_STEP)."""
    _states: list[TrackedLane] = attrs.field(init=False)
    _episodes: list[_Episode | None] = attrs.field(init=False)
    _interrupted: collections.deque[env_v1.EpisodeMetadata] = attrs.field(
        init=False, factory=lambda: collections.deque(maxlen=INTERRUPTED_BUFFER)
    )

    def __attrs_post_init__(self) -> None:
        self._states = [TrackedLane.IDLE] * self.num_lanes
        self._episodes = [None] * self.num_lanes

    def state(self, lane: int) -> TrackedLane:
        return self._states[lane]

    def on_reset(
        self, lanes: Sequence[int], episode_ids: Sequence[str], seeds: Sequence[int]
    ) -> None:
        """Lanes were reset: start new episodes, interrupting any still active."""
        now = time.time_ns()
        for position, lane in enumerate(lanes):
            old = self._episodes[lane]
            if old is not None and self._states[lane] is TrackedLane.ACTIVE:
                self._interrupted.append(old.finish(lane, False, True, None))
            self._episodes[lane] = _Episode(
                episode_id=episode_ids[position] if position < len(episode_ids) else "",
                seed=seeds[position] if position < len(seeds) else None,
                start_ns=now,
            )
            self._states[lane] = TrackedLane.ACTIVE

    def check_step(self, outcomes: Sequence[StepOutcome]) -> None:
        """Raise INTERNAL for a NEXT_STEP contract violation (spec §6.4); no mutation."""
        if not self.next_step:
            return
        for outcome in outcomes:
            state = self._states[outcome.lane]
            if state is TrackedLane.IDLE:
                raise WireError(
                    Code.INTERNAL,
                    f"lane {outcome.lane} was stepped before it was reset (NEXT_STEP env)",
                )
            if state is TrackedLane.PENDING_AUTORESET:
                if outcome.terminated or outcome.truncated:
                    raise WireError(
                        Code.INTERNAL,
                        f"lane {outcome.lane} reported done again on its autoreset step",
                    )
                if outcome.reward != 0.0:
                    raise WireError(
                        Code.INTERNAL,
                        f"lane {outcome.lane} returned reward {outcome.reward} on its autoreset "
                        "step; it must be 0.0",
                    )

    def on_step(self, outcomes: Sequence[StepOutcome]) -> list[env_v1.EpisodeMetadata]:
        """Record a step; returns buffered interrupted episodes then new completions."""
        self.check_step(outcomes)
        completed = list(self._interrupted)
        self._interrupted.clear()
        now = time.time_ns()
        for outcome in outcomes:
            lane = outcome.lane
            state = self._states[lane]
            if state is TrackedLane.PENDING_AUTORESET:
                self._episodes[lane] = _Episode(outcome.next_episode_id, None, now)
                self._states[lane] = TrackedLane.ACTIVE
                continue
            episode = self._episodes[lane]
            if state is not TrackedLane.ACTIVE or episode is None:
                continue
            episode.steps += 1
            episode.reward += outcome.reward
            if outcome.terminated or outcome.truncated:
                completed.append(
                    episode.finish(lane, outcome.terminated, outcome.truncated, outcome.final_info)
                )
                self._episodes[lane] = None
                self._states[lane] = (
                    TrackedLane.PENDING_AUTORESET if self.next_step else TrackedLane.IDLE
                )
        return completed

    def on_close(self) -> list[env_v1.EpisodeMetadata]:
        """End the session: buffered interrupted episodes plus every active one, truncated."""
        final = list(self._interrupted)
        self._interrupted.clear()
        for lane, episode in enumerate(self._episodes):
            if episode is not None and self._states[lane] is TrackedLane.ACTIVE:
                final.append(episode.finish(lane, False, True, None))
        self._episodes = [None] * self.num_lanes
        self._states = [TrackedLane.IDLE] * self.num_lanes
        return final


def vector_final_info(
    infos: Mapping[str, Any], lane: int, num_lanes: int
) -> Mapping[str, Any] | None:
    """The final info of ``lane`` from a step's infos, by the rules of spec §6.3."""
    if INFO_FINAL_INFO not in infos:
        return infos if num_lanes == 1 else None
    mask = infos.get(INFO_FINAL_INFO_MASK)
    if mask is None:
        flagged = num_lanes == 1
    else:
        try:
            flagged = bool(mask[lane])
        except (IndexError, TypeError, KeyError):
            flagged = False
    if not flagged:
        return None
    value = infos[INFO_FINAL_INFO]
    if isinstance(value, Mapping):
        return value
    if isinstance(value, (list, tuple, np.ndarray)) and lane < len(value):
        item = value[lane]
        return item if isinstance(item, Mapping) else None
    return None
