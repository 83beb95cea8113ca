"""A spec'd model's adapter on one route: resolved once, applied on every predict.

The model host keeps one :class:`RouteAdapter` per resolved route of a model that declares
a :class:`~trio_rlmesh.adapters.ModelSpec`. The plan (the resolved pairing) is shared by the
route's lanes; each episode of each lane has its own
:class:`~trio_rlmesh.adapters._internal.EpisodeState` (frame windows, previous action), keyed
by the episode id the runtime minted, so vector lanes and fleet endpoints never share one. A
state is created on its episode's first observation and dropped by ResetAdapter (the episode
ended) or with the route.

Chunks. The model answers a chunk in its own layout; every frame becomes an env action here.
Frame 0 is recorded as the step's action at once; the later frames are executed open loop
by the runtime, which (when the route asked for history, see :meth:`RouteAdapter.needs`)
sends each skipped step's observation as a history row on the next predict: the row enters
the episode's windows, then the frame executed at that step is recorded, in step order, as
RLMesh's ``observe`` then ``record_action`` do.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np

from ...adapters import Adapter
from ...adapters._internal import EpisodeState
from ...adapters.helpers import render_placement
from ...model import ModelObservation, PredictFrames

__all__ = ["RouteAdapter"]


@attrs.define
class _Episode:
    state: EpisodeState
    pending: list[Any] = attrs.Factory(list)
    """Model actions of the last chunk's later frames, recorded as their steps' rows arrive."""


class RouteAdapter:
    """One route's adapter and its episodes' states (see the module docstring)."""

    def __init__(self, adapter: Adapter, horizon: int) -> None:
        self.adapter = adapter
        self.horizon = horizon
        self.episodes: dict[str, _Episode] = {}

    def needs(self, delivers_history: bool) -> tuple[str, ...] | None:
        """The history the route asks for, as RLMesh's model server asks: the inputs
        holding per-episode history, whenever the runtime offers history rows (at any
        horizon; at 1 no step is skipped, so none come)."""
        keys = self.adapter.history_keys()
        return keys if keys and delivers_history else None

    def refusal(self, delivers_history: bool) -> str | None:
        """Why the route cannot be served (RLMesh's words), or ``None``: a window or a
        previous action needs every env step, and a runtime that executes chunk frames
        (``horizon > 1``) without sending their rows would leave gaps."""
        if delivers_history or self.horizon <= 1 or not self.adapter.history_keys():
            return None
        plan = self.adapter.plan
        stacked = plan.stacked[0] if plan.stacked else None
        if stacked is not None:
            what = f"frame-stacking (input {render_placement(stacked.placement)!r} "
            what += f"stack={stacked.stack})"
            fix = "stack=1 (or no Previous part)"
        else:
            what = f"the previous action (input {self.adapter.history_keys()[0]!r})"
            fix = "no Previous part"
        return (
            f"{what} needs every env step, but the runtime did not offer observation history "
            f"(delivers_history) at execution_horizon={self.horizon}: the window would hold "
            f"only decision-point frames. Use a runtime that delivers history, {fix}, or "
            "execution_horizon=1."
        )

    def _episode(self, episode_id: str) -> _Episode:
        episode = self.episodes.get(episode_id)
        if episode is None:
            episode = self.episodes[episode_id] = _Episode(self.adapter.new_episode(episode_id))
        return episode

    def payload(self, group: ModelObservation) -> ModelObservation:
        """``group`` as the model sees it: each lane's observation turned into the spec's
        payload (after the skipped steps' rows entered their episodes' windows).

        Raises:
            ApplyError: an observation does not fit the plan.
        """
        adapter = self.adapter
        for row in group.history:
            episode = self._episode(row.episode.episode_id if row.episode is not None else "")
            adapter.observe_lanes([row.observation], [episode.state])
            if episode.pending:
                adapter.record_action(episode.state, episode.pending.pop(0))
        states = [self._episode(ref.episode_id).state for ref in group.episodes]
        payload = adapter.transform_obs_lanes(group.lanes(), states)
        return attrs.evolve(
            group, observation=payload, observation_space=None, action_space=None, history=()
        )

    def actions(self, group: ModelObservation, frames: PredictFrames) -> PredictFrames:
        """The model's answer for ``group`` as env actions, frame by frame; frame 0 is
        recorded as each lane's action of this step, the later frames wait for their rows.

        Raises:
            ApplyError: an action does not fit the plan.
        """
        adapter = self.adapter
        episodes = [self._episode(ref.episode_id) for ref in group.episodes]
        current = adapter.transform_action_lanes(_rows(frames.actions), [e.state for e in episodes])
        replay = [adapter.transform_chunk(_rows(frame)) for frame in frames.replay]
        for lane, episode in enumerate(episodes):
            episode.pending = [frame[lane] for frame in frames.replay]
        return PredictFrames(list(current), [list(frame) for frame in replay])

    def reset(self, episode_ids: Sequence[str]) -> None:
        """Forget the named episodes (every episode of the route for an empty list)."""
        if not episode_ids:
            self.episodes.clear()
        for episode_id in episode_ids:
            self.episodes.pop(episode_id, None)


def _rows(actions: Sequence[Any]) -> Any:
    """One action per lane as one ``(lanes, model_dim)`` array."""
    return np.stack([np.asarray(action).reshape(-1) for action in actions])
