"""Episode bookkeeping of one env session (spec §6.3, §6.4), as a pure state machine.

The tracker is told about resets and steps and answers with the completed episodes; it
never mutates on a rejected transition. Interrupted episodes (a lane reset mid-episode)
are buffered, at most :data:`INTERRUPTED_BUFFER`, and delivered with the next step.
"""

from __future__ import annotations

import collections
import enum
import time
from collections.abc import Callable, Mapping, Sequence
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

    def _check(
        self,
        lanes: Sequence[int],
        rewards: Sequence[float],
        terminated: Sequence[bool],
        truncated: Sequence[bool],
    ) -> None:
        if not self.next_step:
            return
        states = self._states
        for position, lane in enumerate(lanes):
            state = states[lane]
            if state is TrackedLane.IDLE:
                raise WireError(
                    Code.INTERNAL,
                    f"lane {lane} was stepped before it was reset (NEXT_STEP env)",
                )
            if state is TrackedLane.PENDING_AUTORESET:
                if terminated[position] or truncated[position]:
                    raise WireError(
                        Code.INTERNAL,
                        f"lane {lane} reported done again on its autoreset step",
                    )
                if rewards[position] != 0.0:
                    raise WireError(
                        Code.INTERNAL,
                        f"lane {lane} returned reward {rewards[position]} on its autoreset "
                        "step; it must be 0.0",
                    )

    def on_step(self, outcomes: Sequence[StepOutcome]) -> list[env_v1.EpisodeMetadata]:
        """Record a step; returns buffered interrupted episodes then new completions."""
        finals = {i: o.final_info for i, o in enumerate(outcomes)}
        ids = [o.next_episode_id for o in outcomes]
        return self.on_step_lanes(
            [o.lane for o in outcomes],
            [o.reward for o in outcomes],
            [o.terminated for o in outcomes],
            [o.truncated for o in outcomes],
            finals.get,
            lambda position, lane: ids[position],
        )

    def on_step_lanes(
        self,
        lanes: Sequence[int],
        rewards: Sequence[float],
        terminated: Sequence[bool],
        truncated: Sequence[bool],
        final_info: Callable[[int], spaces_v1.MetaMap | None],
        next_episode_id: Callable[[int, int], str],
    ) -> list[env_v1.EpisodeMetadata]:
        """:meth:`on_step` in columns: one entry per lane of ``lanes`` in each sequence.

        ``final_info(position)`` and ``next_episode_id(position, lane)`` are asked only for
        lanes that finish and lanes that roll (NEXT_STEP), so a step where every lane is
        active and none finishes costs no per-lane objects.
        """
        states = self._states
        active = TrackedLane.ACTIVE
        everyone = states.count(active) == self.num_lanes
        if not everyone:
            self._check(lanes, rewards, terminated, truncated)
        completed = list(self._interrupted)
        self._interrupted.clear()
        episodes = self._episodes
        if everyone and not any(terminated) and not any(truncated):
            # Every lane active (an active lane always has its episode) and none done.
            for position, lane in enumerate(lanes):
                episode = episodes[lane]
                assert episode is not None
                episode.steps += 1
                episode.reward += rewards[position]
            return completed
        now = time.time_ns()
        for position, lane in enumerate(lanes):
            state = states[lane]
            if state is TrackedLane.PENDING_AUTORESET:
                episodes[lane] = _Episode(next_episode_id(position, lane), None, now)
                states[lane] = active
                continue
            episode = episodes[lane]
            if state is not active or episode is None:
                continue
            episode.steps += 1
            episode.reward += rewards[position]
            if terminated[position] or truncated[position]:
                completed.append(
                    episode.finish(
                        lane, terminated[position], truncated[position], final_info(position)
                    )
                )
                episodes[lane] = None
                states[lane] = TrackedLane.PENDING_AUTORESET if self.next_step else TrackedLane.IDLE
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
