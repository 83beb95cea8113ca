"""What a run tells its hooks: each event built from the run's state and fired.

:class:`RunEvents` is the driver's one way to the hooks. It builds an event only when a
hook that receives it is overridden (the per-step ones cost nothing otherwise), decodes the
observation and action leaves into numpy values for it (and encodes what a transform
returns), turns a transform's exception into :class:`~trio_rlmesh.HookError`, and bounds
the end-of-run hooks by ``service_close_timeout``. The events and their order are
documented in :mod:`._hooks`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import attrs
import trio

from .._errors import CodecError, Error, HookError, ProtocolError
from ..protocol import env_v1, read_env_contract, spaces_v1, spec_to_space
from ..protocol._internal import carried_batch
from ..spaces import Space, decode_batch, encode_batch
from ._calls import deadline_scope
from ._episodes import EpisodeBook, EpisodeEnd, PlannedEpisode
from ._hooks import (
    ActionReceived,
    EpisodeCompleted,
    EpisodeStarted,
    HookDispatcher,
    HooksArg,
    ObservationEmitted,
    ResetCompleted,
    SessionEnded,
    SessionFailed,
    SessionStarted,
    StepCompleted,
    Telemetry,
)
from ._plans import ActionSource
from ._spec import RuntimeSessionSpec
from ._telemetry import Horizon, TelemetryRecorder, TelemetryRow

__all__ = ["RunEvents"]

Payload = Literal["observation", "action"]


def _pad(rewards: Sequence[float], width: int) -> tuple[float, ...]:
    """Rewards aligned with ``width`` lanes: a missing reward is 0 (as the book counts it)."""
    return tuple(float(rewards[i]) if i < len(rewards) else 0.0 for i in range(width))


class RunEvents:
    """Builds one run's hook events from its book and plans, and fires them."""

    def __init__(self, hooks: HooksArg, spec: RuntimeSessionSpec, book: EpisodeBook) -> None:
        self.dispatcher = dispatcher = HookDispatcher(hooks)
        wants = dispatcher.wants
        # Looked up once: the per-step payload hooks build no event unless overridden.
        self.observes_observations = wants("transform_observation") or wants("observation_emitted")
        self.observes_actions = wants("transform_action") or wants("action_received")
        self.observes_steps = wants("step_completed")
        self.observes_resets = wants("reset_completed")
        self.wants_telemetry = wants("on_telemetry")
        self._session_id = spec.session_id
        self._env_id = spec.env_id
        self._bound = spec.limits.service_close_timeout
        self._book = book
        self._contract = spec.env_contract
        self._spec = spec
        self._spaces: dict[Payload, Space] = {}

    @property
    def errors(self) -> int:
        """Observer hooks that raised (logged, counted, and the run went on)."""
        return self.dispatcher.errors

    async def session_started(self, num_envs: int, lanes_step_individually: bool) -> None:
        if not self.dispatcher.wants("session_started"):
            return
        try:
            contract = read_env_contract(self._contract)
        except Error:
            contract = None
        event = SessionStarted(
            self._session_id, self._env_id, num_envs, lanes_step_individually, contract
        )
        await self.dispatcher.fire("session_started", event)

    async def episodes_started(self, planned: Sequence[PlannedEpisode], auto_reset: bool) -> None:
        for p in planned:
            event = EpisodeStarted(
                self._session_id,
                self._env_id,
                p.episode_id,
                p.index,
                p.env_index,
                p.seed,
                p.trial,
                auto_reset,
            )
            await self.dispatcher.fire("episode_started", event)

    async def reset_completed(
        self,
        lanes: tuple[int, ...],
        planned: Sequence[PlannedEpisode],
        response: env_v1.ResetResponse,
        frames: tuple[bytes | None, ...],
    ) -> None:
        observation = response.observation
        event = ResetCompleted(
            self._session_id,
            self._env_id,
            lanes,
            tuple(p.episode_id for p in planned),
            frames,
            raw_observation=tuple(observation.leaves) if observation is not None else (),
            raw_infos=response.infos,
        )
        await self.dispatcher.fire("reset_completed", event)

    async def step_completed(
        self,
        lanes: tuple[int, ...],
        rewards: Sequence[float],
        total_steps: int,
        frame: spaces_v1.SpaceValue,
        response: env_v1.StepResponse,
        frames: tuple[bytes | None, ...],
    ) -> None:
        book = self._book
        observation = response.observation
        event = StepCompleted(
            self._session_id,
            self._env_id,
            lanes,
            tuple(book.step_ids(lanes)),
            book.slots[lanes[0]].steps,
            tuple(rewards) if len(rewards) == len(lanes) else _pad(rewards, len(lanes)),
            total_steps,
            frames,
            raw_action=tuple(frame.leaves),
            raw_observation=tuple(observation.leaves) if observation is not None else (),
            raw_infos=response.infos,
        )
        await self.dispatcher.fire("step_completed", event)

    async def episodes_completed(self, ends: Sequence[EpisodeEnd]) -> None:
        """The counted ones: an episode past ``max_episodes`` is not reported."""
        for end in ends:
            completion = end.completion
            if completion is not None:
                event = EpisodeCompleted(
                    self._session_id, self._env_id, completion.record, completion.final_info
                )
                await self.dispatcher.fire("episode_completed", event)

    async def observation(self, plan: ActionSource[Any], step: int) -> None:
        """``transform_observation`` (its batch replaces the plan's), ``observation_emitted``."""
        book, lanes = self._book, plan.lanes
        operation = "env.reset" if plan.is_reset else "env.step"
        event = ObservationEmitted(
            self._session_id,
            self._env_id,
            lanes,
            tuple(e for e, _ in book.episode_info(lanes)),
            book.slots[lanes[0]].steps,
            plan.is_reset,
            self._decode("observation", plan.observation, len(lanes), operation, plan.lane, step),
        )
        replaced = await self._transform("transform_observation", event, plan.lane, step)
        if replaced is not None:
            value = spaces_v1.SpaceValue(
                leaves=self._encode("observation", replaced, len(lanes), plan.lane, step)
            )
            plan.replace_observation(value)
            if self.dispatcher.wants("observation_emitted"):
                decoded = self._decode("observation", value, len(lanes), operation, plan.lane, step)
                event = attrs.evolve(event, observation=decoded)
        await self.dispatcher.fire("observation_emitted", event)

    async def action(
        self, plan: ActionSource[Any], frame: spaces_v1.SpaceValue, replayed: bool, step: int
    ) -> spaces_v1.SpaceValue:
        """``transform_action``, ``action_received``; returns the frame to send."""
        book, lanes = self._book, plan.lanes
        event = ActionReceived(
            self._session_id,
            self._env_id,
            lanes,
            tuple(book.step_ids(lanes)),
            book.slots[lanes[0]].steps + 1,
            replayed,
            self._decode("action", frame, len(lanes), "model.predict", plan.lane, step),
        )
        replaced = await self._transform("transform_action", event, plan.lane, step)
        if replaced is not None:
            frame = spaces_v1.SpaceValue(
                leaves=self._encode("action", replaced, len(lanes), plan.lane, step)
            )
            if self.dispatcher.wants("action_received"):
                decoded = self._decode(
                    "action", frame, len(lanes), "model.predict", plan.lane, step
                )
                event = attrs.evolve(event, action=decoded)
        await self.dispatcher.fire("action_received", event)
        return frame

    def _space(self, payload: Payload) -> Space:
        space = self._spaces.get(payload)
        if space is None:
            spec = self._spec
            message = spec.observation_space if payload == "observation" else spec.action_space
            assert message is not None  # RuntimeSessionSpec.validate requires both spaces
            space = self._spaces[payload] = spec_to_space(message, path=f"$.{payload}_space")
        return space

    def _decode(
        self,
        payload: Payload,
        value: spaces_v1.SpaceValue,
        n: int,
        operation: str,
        lane: int | None,
        step: int,
    ) -> Any:
        """A payload as the numpy batch hooks receive: the batch a value carries (in-process
        runs), or its leaves decoded."""
        space = self._space(payload)
        carried = carried_batch(value, space, n)
        if carried is not None:
            return carried
        try:
            return decode_batch(space, value.leaves, n)
        except CodecError as exc:
            source = "env's observation" if payload == "observation" else "model's action"
            raise ProtocolError(
                f"the {source} does not decode as the {payload} space: {exc}",
                operation=operation,
                step=step,
                lane=lane,
            ) from exc

    def _encode(
        self, payload: Payload, batch: Any, n: int, lane: int | None, step: int
    ) -> list[bytes]:
        """A transform's replacement batch as leaves; a value the space refuses fails the run."""
        name = f"transform_{payload}"
        try:
            return encode_batch(self._space(payload), batch, n)
        except Exception as exc:
            raise HookError(
                f"runtime hook {name} returned a batch the {payload} space cannot encode "
                f"for {n} lane(s): {type(exc).__name__}: {exc}",
                operation=f"hooks.{name}",
                step=step,
                lane=lane,
            ) from exc

    async def _transform(self, name: str, event: Any, lane: int | None, step: int) -> Any:
        try:
            return await self.dispatcher.transform(name, event)
        except Exception as exc:
            raise HookError(
                f"runtime hook {name} failed: {type(exc).__name__}: {exc}",
                operation=f"hooks.{name}",
                step=step,
                lane=lane,
            ) from exc

    async def tick(self, telemetry: TelemetryRecorder, window: float) -> None:
        """Every ``window`` seconds, the window's telemetry (until cancelled)."""
        while True:
            await trio.sleep(window)
            rows = telemetry.snapshot("window")
            telemetry.flush_window()
            if rows:
                await self._telemetry("window", tuple(rows))

    async def session_ended(
        self, status: str, reason: str | None, total_steps: int, total_episodes: int
    ) -> None:
        event = SessionEnded(
            self._session_id, self._env_id, status, reason, total_steps, total_episodes
        )
        await self._bounded("session_ended", event)

    async def session_failed(
        self,
        reason: str,
        error: BaseException | None,
        total_steps: int,
        total_episodes: int,
    ) -> None:
        event = SessionFailed(
            self._session_id, self._env_id, reason, error, total_steps, total_episodes
        )
        await self._bounded("session_failed", event)

    async def session_telemetry(self, rows: tuple[TelemetryRow, ...]) -> None:
        with deadline_scope(self._bound):
            await self._telemetry("session", rows)

    async def _telemetry(self, horizon: Horizon, rows: tuple[TelemetryRow, ...]) -> None:
        await self.dispatcher.fire(
            "on_telemetry", Telemetry(self._session_id, self._env_id, horizon, rows)
        )

    async def _bounded(self, name: str, event: object) -> None:
        with deadline_scope(self._bound):
            await self.dispatcher.fire(name, event)
