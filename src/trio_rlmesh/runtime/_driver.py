"""The nursery-scoped :class:`RuntimeDriver`: reset, predict, step until the episodes are done.

One run is one nursery. Inside it the driver runs a single loop (a lockstep env: one
group holding every lane) or one task per lane (a lane endpoint), plus background
tasks that never block the loop: ``reset_adapter`` evictions, prefetched predicts, the
fused-predict batcher and the telemetry ticker. Every env and model call runs inside
its own deadline from :class:`~trio_rlmesh.runtime.RuntimeLimits`. Episode and lane
state lives in the pure :class:`~trio_rlmesh.runtime._episodes.EpisodeBook`; this
module only does the I/O around it. ``docs/driver.md`` describes the loop in prose.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeAlias, TypeVar

import attrs
import trio

from .._errors import EnvError, Error, HookError, ModelError, OperationTimeout, ProtocolError
from .._errors import SpecError as SpecError
from ..protocol import (
    RESET_OPTION_TRIAL_INDEX,
    env_v1,
    model_v1,
    python_to_meta,
    spaces_v1,
)
from ._episodes import EpisodeBook, LaneState, PlannedEpisode
from ._hooks import (
    ActionReceived,
    EpisodeCompleted,
    EpisodeStarted,
    HookDispatcher,
    ObservationEmitted,
    RuntimeHooks,
    SessionEnded,
    SessionFailed,
    SessionStarted,
    StepCompleted,
    Telemetry,
)
from ._ids import format_request_id
from ._interfaces import (
    EndpointTimings,
    EnvResetResult,
    EnvStepResult,
    ModelPrediction,
    RuntimeEnv,
    RuntimeModel,
)
from ._report import RunStatus, RuntimeReport
from ._spec import RuntimeSessionSpec, timeout_ms
from ._telemetry import TelemetryRecorder

__all__ = ["RuntimeDriver"]

logger = logging.getLogger("trio_rlmesh.runtime")

CANCELLED_BY_CALLER = "cancelled by caller"
COMPLETED_REASON = "completed requested episodes"

_FOLD_ROUNDS = 256
"""Rounds between telemetry folds: a round records about 15 samples."""

_T = TypeVar("_T")
_Req = TypeVar("_Req")

_Inline: TypeAlias = Callable[[_Req], _T | None]
"""An endpoint's optional synchronous form of a call: the answer, or ``None`` to await it."""


def _deadline(seconds: float | None) -> trio.CancelScope:
    if seconds is None:
        return trio.CancelScope()
    return trio.CancelScope(deadline=trio.current_time() + seconds)


def _fmt_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "no deadline"
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    return f"{seconds:g}s"


def _is_cancellation(exc: BaseException) -> bool:
    if isinstance(exc, trio.Cancelled):
        return True
    # An exception group (builtin from 3.11, the backport before): duck-typed on purpose.
    inner = getattr(exc, "exceptions", None)
    if isinstance(inner, tuple) and inner:
        return all(isinstance(e, BaseException) and _is_cancellation(e) for e in inner)
    return False


def _env_lane(error: Error, group: _Group) -> None:
    """Turn the lane a model endpoint named (a row of its request) into the env lane.

    A predict request's rows are the group's lanes in order, so row ``i`` is
    ``group.lanes[i]``: the identity on a lockstep group, lane ``k`` for lane ``k``'s
    one-row group. A lane that is already the env's (row 0 of lane 0) maps to itself.
    """
    if error.lane is not None and 0 <= error.lane < len(group.lanes):
        error.lane = group.lanes[error.lane]


@attrs.define(eq=False)
class _Group:
    """Lanes that share one action batch: every lane of a lockstep env, or one lane endpoint."""

    lanes: tuple[int, ...]
    env_indices: tuple[int, ...]
    """What env requests name: empty for a lockstep env (all lanes), ``(k,)`` for lane k."""
    history_enabled: bool
    observation: tuple[bytes, ...] = ()
    is_reset: bool = True
    seen: bool = False
    """Whether a predict (or prefetch) was already built on ``observation``."""
    queue: deque[spaces_v1.SpaceValue] = attrs.field(factory=deque)
    prefetch: _Prefetch | None = None
    history: list[model_v1.ObservationHistoryFrame] = attrs.field(factory=list)

    @property
    def lane(self) -> int | None:
        return self.lanes[0] if len(self.lanes) == 1 else None


class _Prefetch:
    """A predict running ahead while the last frames of the current chunk replay."""

    def __init__(self, offset: int) -> None:
        self.offset = offset
        """Frames still queued at launch: the prefetched chunk's first ``offset`` frames are
        for steps those queued frames cover, so they are skipped."""
        self.scope = trio.CancelScope()
        self.done = trio.Event()
        self.outcome: ModelPrediction | Error | None = None

    async def run(self, predict: Callable[[], Awaitable[ModelPrediction]]) -> None:
        with self.scope:
            try:
                self.outcome = await predict()
            except Error as exc:
                self.outcome = exc
        self.done.set()

    async def result(self) -> ModelPrediction:
        await self.done.wait()
        if isinstance(self.outcome, Error):
            raise self.outcome
        if self.outcome is None:  # pragma: no cover - only a dropped prefetch ends unset
            raise ProtocolError("a prefetched predict was abandoned")
        return self.outcome


@attrs.define(eq=False)
class _Waiter:
    request: model_v1.PredictRequest
    group: _Group
    done: trio.Event = attrs.field(factory=trio.Event)
    outcome: ModelPrediction | Error | None = None


class _PredictBatcher:
    """Fuses the predicts of lanes that wait at the same time into one ``predict_group``."""

    def __init__(self, driver: RuntimeDriver) -> None:
        self._driver = driver
        self._pending: list[_Waiter] = []
        self._wakeup = trio.Event()

    async def submit(self, request: model_v1.PredictRequest, group: _Group) -> ModelPrediction:
        waiter = _Waiter(request, group)
        self._pending.append(waiter)
        self._wakeup.set()
        await waiter.done.wait()
        if isinstance(waiter.outcome, Error):
            raise waiter.outcome
        assert waiter.outcome is not None
        return waiter.outcome

    async def serve(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup = trio.Event()
            # One more scheduling pass lets lanes woken in the same batch join this group.
            await trio.lowlevel.checkpoint()
            batch, self._pending = self._pending, []
            if batch:
                await self._driver._predict_fused(batch)


class RuntimeDriver:
    """Drive one env and one model through episodes until ``spec.max_episodes`` complete.

    Args:
        spec: the session; validated (raising :class:`~trio_rlmesh.SpecError`) before anything
            else happens.
        env: the env endpoint.
        model: the model endpoint.
        hooks: observers and transforms (see :class:`~trio_rlmesh.runtime.RuntimeHooks`).
        prefetch_lead: with chunked actions, start predicting the next chunk when this many
            frames of the current one remain to replay (0 = never overlap).

    ``run()`` returns a :class:`~trio_rlmesh.runtime.RuntimeReport` with status
    ``"completed"``, or ``"cancelled"`` after :meth:`cancel`. A failure raises the error,
    whose ``report`` attribute holds the partial report (status ``"failed"``). The
    caller's own cancel scope always wins: ``run()`` then re-raises trio's cancellation
    after a shielded, bounded cleanup (the report is still kept in :attr:`report`).

    >>> async def evaluate(spec, env, model):                      # doctest: +SKIP
    ...     report = await RuntimeDriver(spec, env, model).run()
    ...     return report.mean_reward
    """

    def __init__(
        self,
        spec: RuntimeSessionSpec,
        env: RuntimeEnv,
        model: RuntimeModel,
        hooks: RuntimeHooks | None = None,
        *,
        prefetch_lead: int = 0,
    ) -> None:
        if prefetch_lead < 0:
            raise SpecError(
                f"prefetch_lead must be 0 (off) or a positive frame count, got {prefetch_lead}"
            )
        self._spec = spec
        self._env = env
        self._model = model
        self._hooks = HookDispatcher(hooks)
        # Looked up once: the per-step payload hooks build no event unless overridden.
        wants = self._hooks.wants
        self._observes_observations = wants("transform_observation") or wants("observation_emitted")
        self._observes_actions = wants("transform_action") or wants("action_received")
        self._observes_steps = wants("step_completed")
        self._prefetch_lead = prefetch_lead
        self._telemetry = TelemetryRecorder()
        self._reset_sinks = _OpSinks(self._telemetry, "env.reset")
        self._step_sinks = _OpSinks(self._telemetry, "env.step")
        self._predict_sinks = _OpSinks(self._telemetry, "model.predict")
        self._round_sink = self._telemetry.sink("runner.round", "rpc.total")
        self._rounds = 0
        # Synchronous forms an in-process endpoint may offer (optional; see ``_call``).
        self._reset_inline: _Inline[env_v1.ResetRequest, EnvResetResult] | None
        self._reset_inline = getattr(env, "reset_inline", None)
        self._step_inline: _Inline[env_v1.StepRequest, EnvStepResult] | None
        self._step_inline = getattr(env, "step_inline", None)
        self._predict_inline: _Inline[model_v1.PredictRequest, ModelPrediction] | None
        self._predict_inline = getattr(model, "predict_inline", None)
        self._stop_scope = trio.CancelScope()
        self._cancel_reason: str | None = None
        self._started = False
        self._now: Callable[[], float] = trio.current_time
        self._seq = 0
        self._total_steps = 0
        self._lockstep = not spec.lanes_step_individually
        self._book = EpisodeBook(
            num_envs=spec.num_envs,
            session_id=spec.session_id,
            owns_resets=spec.driver_owns_resets,
            lockstep=self._lockstep,
            episode_seeds=spec.episode_seeds,
            base_seed=spec.base_seed,
            max_episodes=spec.max_episodes,
            trial_index_base=spec.trial_index_base,
            step_cap=spec.step_cap,
            seconds_cap=spec.max_episode_seconds,
        )
        self._nursery: trio.Nursery | None = None
        self._lanes_scope: trio.CancelScope | None = None
        self._running_lanes = 0
        self._batcher: _PredictBatcher | None = None
        self._bg_pending = 0
        self._bg_idle = trio.Event()
        self._counts: dict[str, int] = {}
        self._first_error: dict[str, str] = {}
        self._wants_history = False
        self._sends_trial = False
        self.report: RuntimeReport | None = None
        """The last report of this driver's run, whichever way the run ended."""

    @property
    def spec(self) -> RuntimeSessionSpec:
        return self._spec

    def cancel(self, reason: str = CANCELLED_BY_CALLER) -> None:
        """End the run at its next checkpoint; ``run()`` returns a ``"cancelled"`` report.

        Safe to call from any task, before or during the run; the first reason sticks.
        """
        if self._cancel_reason is None:
            self._cancel_reason = reason
        self._stop_scope.cancel()

    # -- the run ---------------------------------------------------------------------------

    async def run(self) -> RuntimeReport:
        """Run the session to its end and return the report (see the class docstring)."""
        spec = self._spec
        spec.validate()
        if self._started:
            raise RuntimeError("RuntimeDriver.run() runs once; build a new driver for another run")
        self._started = True
        # The run's clock, read directly: trio.current_time() adds two calls per read, and
        # a step reads the clock about ten times.
        self._now = trio.lowlevel.current_clock().current_time
        self._wants_history = bool(self._model.wants_history)
        self._sends_trial = spec.sends_trial_index
        self._step_timeout_ms = timeout_ms(spec.limits.env_step_timeout)
        failure: Error | None = None
        interrupted: BaseException | None = None
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                ticker = trio.CancelScope()
                window = spec.limits.telemetry_window
                if window and self._hooks.wants("on_telemetry"):
                    nursery.start_soon(self._tick, ticker, window)
                try:
                    with self._stop_scope:
                        await self._hooks.fire(
                            "session_started",
                            SessionStarted(
                                spec.session_id, spec.env_id, spec.num_envs, not self._lockstep
                            ),
                        )
                        if self._lockstep:
                            await self._drive(self._new_group(tuple(range(spec.num_envs)), ()))
                        else:
                            await self._run_lanes()
                except Error as exc:
                    failure = exc
                except Exception as exc:
                    failure = Error(f"runtime driver failed: {type(exc).__name__}: {exc}")
                    failure.__cause__ = exc
                ticker.cancel()
                if failure is None and not self._stop_scope.cancelled_caught:
                    await self._drain_background()
                nursery.cancel_scope.cancel()
        except BaseException as exc:
            interrupted = exc

        status: RunStatus
        if interrupted is not None:
            cancelled = _is_cancellation(interrupted)
            status = "cancelled" if cancelled else "failed"
            reason = (
                "cancelled by the caller's cancel scope"
                if cancelled
                else f"interrupted: {type(interrupted).__name__}"
            )
        elif failure is not None:
            status, reason = "failed", str(failure)
        elif self._stop_scope.cancelled_caught:
            status, reason = "cancelled", self._cancel_reason or CANCELLED_BY_CALLER
        else:
            status, reason = "completed", COMPLETED_REASON

        with trio.CancelScope(shield=True):
            if interrupted is None and failure is None:
                await self._shutdown(reason)
                snapshot = self._make_report(status, None if status == "completed" else reason)
                await self._fire_bounded(
                    "session_ended",
                    SessionEnded(
                        spec.session_id,
                        spec.env_id,
                        status,
                        snapshot.reason,
                        self._total_steps,
                        snapshot.total_episodes,
                    ),
                )
                await self._push_session_telemetry(snapshot)
            else:
                snapshot = self._make_report(status, reason)
                await self._push_session_telemetry(snapshot)
                await self._shutdown(reason)
                await self._fire_bounded(
                    "session_failed",
                    SessionFailed(
                        spec.session_id,
                        spec.env_id,
                        reason,
                        failure,
                        self._total_steps,
                        snapshot.total_episodes,
                    ),
                )
        report = attrs.evolve(
            snapshot, advisories=self._advisories(), hook_errors=self._hooks.errors
        )
        self.report = report
        if interrupted is not None:
            raise interrupted
        if failure is not None:
            failure.report = report
            raise failure
        return report

    async def _run_lanes(self) -> None:
        failures: list[Error] = []
        async with trio.open_nursery() as lanes:
            self._lanes_scope = lanes.cancel_scope
            if self._model.fuses_predicts:
                self._batcher = _PredictBatcher(self)
                lanes.start_soon(self._batcher.serve)
            self._running_lanes = self._spec.num_envs
            # Plan the first episodes in lane order before any task runs, so explicit seeds
            # and trial indices land on the same lanes every time (tasks start in any order).
            for lane in range(self._spec.num_envs):
                planned = self._book.begin_reset([lane]) if self._book.can_start() else None
                lanes.start_soon(self._lane_task, lane, planned, failures)
        if failures:
            raise failures[0]

    async def _lane_task(
        self, lane: int, planned: list[PlannedEpisode] | None, failures: list[Error]
    ) -> None:
        assert self._lanes_scope is not None
        try:
            await self._drive(self._new_group((lane,), (lane,)), planned)
        except Error as exc:
            failures.append(exc)
            self._lanes_scope.cancel()
        except Exception as exc:
            error = Error(f"lane {lane} failed: {type(exc).__name__}: {exc}", lane=lane)
            error.__cause__ = exc
            failures.append(error)
            self._lanes_scope.cancel()
        finally:
            self._running_lanes -= 1
            if self._running_lanes == 0 or self._book.quota_reached:
                self._lanes_scope.cancel()

    def _new_group(self, lanes: tuple[int, ...], env_indices: tuple[int, ...]) -> _Group:
        history = self._wants_history and len(lanes) == 1
        if self._wants_history and not history:
            self._count("history_vector")
        return _Group(lanes=lanes, env_indices=env_indices, history_enabled=history)

    async def _drive(self, group: _Group, planned: list[PlannedEpisode] | None = None) -> None:
        """Run episodes on ``group`` until the quota is met or the group's lane retires."""
        book = self._book
        if not await self._reset(group, planned):
            return
        while True:
            started = self._now()
            # A loop whose env and model never block must still notice cancellation.
            await trio.lowlevel.checkpoint()
            self._maybe_prefetch(group)
            frame, replayed = await self._next_action(group)
            if self._observes_actions:
                action = await self._emit_action(group, frame, replayed)
            else:
                action = tuple(frame.leaves)
            response = await self._step(group, action)
            ended = await self._after_step(group, response)
            if book.quota_reached:
                self._evict(
                    [
                        book.slots[k].episode_id
                        for k in group.lanes
                        if book.state(k) is LaneState.ROLLING
                    ]
                )
                self._record_round(started)
                return
            if ended and book.owns_resets:
                if not await self._reset(group):
                    self._record_round(started)
                    return
            elif self._observes_observations:
                await self._emit_observation(group)
            self._record_round(started)

    # -- resets, steps, completions ----------------------------------------------------------

    async def _reset(self, group: _Group, planned: list[PlannedEpisode] | None = None) -> bool:
        book, spec = self._book, self._spec
        if planned is None:
            if not self._lockstep and not book.can_start():
                book.retire(group.lanes[0])
                return False
            planned = book.begin_reset(group.lanes)
        seeds = [p.seed for p in planned]
        options = None
        if self._sends_trial and len(planned) == 1:
            options = python_to_meta({RESET_OPTION_TRIAL_INDEX: planned[0].trial})
        request = env_v1.ResetRequest(
            seeds=[s for s in seeds if s is not None] if None not in seeds else [],
            options=options,
            timeout_ms=timeout_ms(spec.limits.env_reset_timeout),
            env_indices=list(group.env_indices),
            episode_ids=[p.episode_id for p in planned],
        )
        started = self._now()
        inline = self._reset_inline
        result = await self._call(
            "env.reset",
            "env_reset_timeout",
            spec.limits.env_reset_timeout,
            group,
            lambda: self._env.reset(request),
            EnvError,
            inline=None if inline is None else lambda: inline(request),
        )
        self._record_rpc(
            self._reset_sinks, started, result.timings, result.request_bytes, result.response_bytes
        )
        book.reset_done(group.lanes, self._now())
        for p in planned:
            await self._hooks.fire(
                "episode_started",
                EpisodeStarted(
                    spec.session_id,
                    spec.env_id,
                    p.episode_id,
                    p.index,
                    p.env_index,
                    p.seed,
                    p.trial,
                    False,
                ),
            )
        self._drop_plans(group)
        group.observation = self._leaves(result.response.observation, "env.reset")
        group.is_reset = True
        await self._emit_observation(group)
        return True

    async def _step(self, group: _Group, action: tuple[bytes, ...]) -> env_v1.StepResponse:
        limits = self._spec.limits
        request = env_v1.StepRequest(
            action=spaces_v1.SpaceValue(leaves=list(action)),
            timeout_ms=self._step_timeout_ms,
            env_indices=list(group.env_indices),
            episode_ids=self._book.step_ids(group.lanes),
        )
        started = self._now()
        inline = self._step_inline
        result = await self._call(
            "env.step",
            "env_step_timeout",
            limits.env_step_timeout,
            group,
            lambda: self._env.step(request),
            EnvError,
            step=self._total_steps + 1,
            inline=None if inline is None else lambda: inline(request),
        )
        self._total_steps += 1
        ms = self._record_rpc(
            self._step_sinks, started, result.timings, result.request_bytes, result.response_bytes
        )
        self._book.note_step(group.lanes, ms)
        return result.response

    async def _after_step(self, group: _Group, response: env_v1.StepResponse) -> bool:
        """Account the step, its rolls and completions; True when any lane's episode ended."""
        book, spec = self._book, self._spec
        now = self._now()
        rewards = book.step_rewards(group.lanes, response.rewards, response.env_indices)
        rolled = book.record_step(group.lanes, rewards, now)
        if self._observes_steps:
            first = book.slots[group.lanes[0]]
            await self._hooks.fire(
                "step_completed",
                StepCompleted(
                    spec.session_id,
                    spec.env_id,
                    group.lanes,
                    tuple(book.step_ids(group.lanes)),
                    first.steps,
                    tuple(response.rewards),
                    self._total_steps,
                ),
            )
        for new, _old in rolled:
            await self._hooks.fire(
                "episode_started",
                EpisodeStarted(
                    spec.session_id,
                    spec.env_id,
                    new.episode_id,
                    new.index,
                    new.env_index,
                    new.seed,
                    new.trial,
                    True,
                ),
            )
        # The old id of a rolled lane went out with the terminal observation's predict;
        # evicting it only now keeps that predict from re-creating state nobody frees.
        self._evict([old for _new, old in rolled])

        group.observation = self._leaves(response.observation, "env.step")
        ends = book.apply_completions(group.lanes, response.completed_episodes, now)
        group.is_reset = False
        group.seen = False
        if not ends:
            return False
        for end in ends:
            if end.completion is not None:
                await self._hooks.fire(
                    "episode_completed",
                    EpisodeCompleted(
                        spec.session_id,
                        spec.env_id,
                        end.completion.record,
                        end.completion.final_info,
                    ),
                )
        if book.owns_resets:
            self._evict([end.episode_id for end in ends])
        # A chunk's frames were planned for every lane of the group and for the episodes
        # that were running; an episode end makes them (and any prefetch) stale.
        if group.queue and len(group.lanes) > 1:
            self._count("discard_events")
            self._count("discarded_frames", len(group.queue))
        self._drop_plans(group)
        return True

    def _drop_plans(self, group: _Group) -> None:
        group.queue.clear()
        group.history.clear()
        group.seen = False
        if group.prefetch is not None:
            group.prefetch.scope.cancel()
            group.prefetch = None

    def _leaves(self, value: spaces_v1.SpaceValue | None, op: str) -> tuple[bytes, ...]:
        if value is None:
            raise ProtocolError(
                f"{op} answered without an observation", operation=op, step=self._total_steps
            )
        return tuple(value.leaves)

    # -- actions: predict, replay, prefetch ----------------------------------------------------

    def _maybe_prefetch(self, group: _Group) -> None:
        lead = self._prefetch_lead
        if not lead or group.prefetch is not None or group.seen:
            return
        if not 0 < len(group.queue) <= lead:
            return
        request = self._predict_request(group)
        prefetch = _Prefetch(offset=len(group.queue))
        group.prefetch = prefetch
        assert self._nursery is not None
        self._nursery.start_soon(prefetch.run, lambda: self._predict(group, request))

    async def _next_action(self, group: _Group) -> tuple[spaces_v1.SpaceValue, bool]:
        if group.queue:
            self._history_row(group)
            return group.queue.popleft(), True
        prefetch = group.prefetch
        if prefetch is not None:
            group.prefetch = None
            prediction = await prefetch.result()
            frames = prediction.response.actions[prefetch.offset :]
            if frames:
                self._history_row(group)
                group.queue.extend(frames[1:])
                return frames[0], False
            self._count("short_prefetch")
        prediction = await self._predict(group, self._predict_request(group))
        frames = prediction.response.actions
        group.queue.extend(frames[1:])
        return frames[0], False

    def _history_row(self, group: _Group) -> None:
        """Keep the current observation for the next predict: no predict has carried it."""
        if not group.history_enabled or group.seen:
            return
        lane = group.lanes[0]
        episode_id, seed = self._book.episode_info(group.lanes)[0]
        group.history.append(
            model_v1.ObservationHistoryFrame(
                observation=spaces_v1.SpaceValue(leaves=list(group.observation)),
                episode=model_v1.EpisodeInfo(episode_id=episode_id, seed=seed),
                step=self._book.slots[lane].env_steps,
            )
        )
        group.seen = True

    def _predict_request(self, group: _Group) -> model_v1.PredictRequest:
        phase = "reset_observation" if group.is_reset else "step_observation"
        request = model_v1.PredictRequest(
            context=self._context(phase),
            observation=spaces_v1.SpaceValue(leaves=list(group.observation)),
            episode_info=[
                model_v1.EpisodeInfo(episode_id=episode_id, seed=seed)
                for episode_id, seed in self._book.episode_info(group.lanes)
            ],
        )
        if self._wants_history:
            request.step = self._book.slots[group.lanes[0]].env_steps
            if group.history_enabled:
                request.history, group.history = group.history, []
        group.seen = True
        return request

    async def _predict(self, group: _Group, request: model_v1.PredictRequest) -> ModelPrediction:
        if self._batcher is not None:
            return await self._batcher.submit(request, group)
        limits = self._spec.limits
        started = self._now()
        inline = self._predict_inline
        try:
            prediction = await self._call(
                "model.predict",
                "model_predict_timeout",
                limits.model_predict_timeout,
                group,
                lambda: self._model.predict(request),
                ModelError,
                inline=None if inline is None else lambda: inline(request),
            )
        except Error as exc:
            _env_lane(exc, group)
            raise
        self._check_prediction(request, prediction, group)
        ms = self._record_rpc(
            self._predict_sinks,
            started,
            prediction.timings,
            prediction.request_bytes,
            prediction.response_bytes,
        )
        self._record_model_phases(prediction)
        if prediction.group_size is not None:
            self._predict_sinks.group_size(prediction.group_size)
        self._book.note_predict(group.lanes, ms)
        return prediction

    async def _predict_fused(self, batch: list[_Waiter]) -> None:
        """Serve one fused group; every waiter gets its own prediction or error."""
        limits = self._spec.limits
        requests = [w.request for w in batch]
        started = self._now()
        outcomes: list[ModelPrediction | Error]
        try:
            results = await self._call(
                "model.predict",
                "model_predict_timeout",
                limits.model_predict_timeout,
                batch[0].group if len(batch) == 1 else None,
                lambda: self._model.predict_group(requests),
                ModelError,
            )
            if len(results) != len(batch):
                raise ProtocolError(
                    f"model endpoint {self._spec.model_component_id} answered "
                    f"{len(results)} results for a group of {len(batch)} predicts",
                    operation="model.predict",
                    step=self._total_steps,
                )
            outcomes = list(results)
        except Error as exc:
            outcomes = [exc] * len(batch)
        ms = (self._now() - started) * 1e3
        sinks = self._predict_sinks
        sinks.rpc(ms)
        sinks.group_size(len(batch))
        for waiter, outcome in zip(batch, outcomes, strict=True):
            if isinstance(outcome, ModelPrediction):
                try:
                    self._check_prediction(waiter.request, outcome, waiter.group)
                except Error as exc:
                    outcome = exc
                else:
                    sinks.phases(outcome.timings)
                    self._record_model_phases(outcome)
                    sinks.sizes(outcome.request_bytes, outcome.response_bytes)
                    self._book.note_predict(waiter.group.lanes, ms)
            elif isinstance(outcome, Error):
                _env_lane(outcome, waiter.group)
                outcome.with_context(
                    operation="model.predict", lane=waiter.group.lane, step=self._total_steps
                )
            waiter.outcome = outcome
            waiter.done.set()

    def _check_prediction(
        self, request: model_v1.PredictRequest, prediction: ModelPrediction, group: _Group
    ) -> None:
        response = prediction.response
        component = self._spec.model_component_id
        assert request.context is not None
        # An in-process model echoes the request's own context object: skip the field compare.
        if response.context is not request.context and (
            response.context is None or response.context != request.context
        ):
            raise ProtocolError(
                f"model endpoint {component} returned mismatched route identity for request "
                f"{request.context.request_id}",
                operation="model.predict",
                step=self._total_steps,
                lane=group.lane,
            )
        if not response.actions:
            raise ProtocolError(
                f"model endpoint {component} returned a predict response with no actions",
                operation="model.predict",
                step=self._total_steps,
                lane=group.lane,
            )

    # -- hooks around payloads --------------------------------------------------------------

    async def _emit_observation(self, group: _Group) -> None:
        if not self._observes_observations:
            return
        hooks = self._hooks
        spec, book = self._spec, self._book
        event = ObservationEmitted(
            spec.session_id,
            spec.env_id,
            group.lanes,
            tuple(e for e, _ in book.episode_info(group.lanes)),
            book.slots[group.lanes[0]].steps,
            group.is_reset,
            group.observation,
        )
        replaced = await self._transform("transform_observation", event, group)
        if replaced is not None:
            group.observation = tuple(replaced)
            event = attrs.evolve(event, observation=group.observation)
        await hooks.fire("observation_emitted", event)

    async def _emit_action(
        self, group: _Group, frame: spaces_v1.SpaceValue, replayed: bool
    ) -> tuple[bytes, ...]:
        action = tuple(frame.leaves)
        if not self._observes_actions:
            return action
        hooks = self._hooks
        spec, book = self._spec, self._book
        event = ActionReceived(
            spec.session_id,
            spec.env_id,
            group.lanes,
            tuple(book.step_ids(group.lanes)),
            book.slots[group.lanes[0]].steps + 1,
            replayed,
            action,
        )
        replaced = await self._transform("transform_action", event, group)
        if replaced is not None:
            action = tuple(replaced)
            event = attrs.evolve(event, action=action)
        await hooks.fire("action_received", event)
        return action

    async def _transform(self, name: str, event: Any, group: _Group) -> Sequence[bytes] | None:
        try:
            return await self._hooks.transform(name, event)
        except Exception as exc:
            raise HookError(
                f"runtime hook {name} failed: {type(exc).__name__}: {exc}",
                operation=f"hooks.{name}",
                step=self._total_steps,
                lane=group.lane,
            ) from exc

    # -- calls under deadlines ------------------------------------------------------------------

    async def _call(
        self,
        op: str,
        limit_name: str,
        timeout: float | None,  # noqa: ASYNC109 - applied as a deadline below
        group: _Group | None,
        call: Callable[[], Awaitable[_T]],
        error_class: type[Error],
        *,
        step: int | None = None,
        inline: Callable[[], _T | None] | None = None,
    ) -> _T:
        """Run ``call`` under the ``timeout`` deadline, with errors given their context.

        ``inline``, when given, is the endpoint's synchronous form of the same call: it
        answers ``None`` when it cannot serve the call synchronously right now (a threaded
        env, a busy model), and ``call`` runs instead. A synchronous answer never reaches
        a checkpoint, so no cancel scope could interrupt it; it gets the same late-answer
        check as an inline endpoint that blocks inside ``call``. Skipping the scope (and,
        without a deadline, skipping it for ``call`` too) is what keeps the in-process
        path cheap: entering and leaving a cancel scope costs more than a Gymnasium step.
        """
        step = self._total_steps if step is None else step
        lane = group.lane if group is not None else None
        deadline = math.inf if timeout is None else self._now() + timeout
        timed_out = False
        try:
            answer = inline() if inline is not None else None
            if answer is not None:
                result = answer
            elif timeout is None:
                result = await call()
            else:
                with trio.CancelScope(deadline=deadline) as scope:
                    result = await call()
                timed_out = scope.cancelled_caught
        except Error as exc:
            # Keep the endpoint's own chain (``__cause__``): only fill in the context.
            exc.with_context(operation=op, step=step, lane=lane)
            raise
        except Exception as exc:
            raise error_class(
                f"{op} failed at runtime step {step}: {type(exc).__name__}: {exc}",
                operation=op,
                step=step,
                lane=lane,
            ) from exc
        # An inline endpoint (a numpy model, a Gymnasium env) that blocks the event loop
        # never reaches a checkpoint, so the scope cannot interrupt it; it still outlived
        # its limit when it returns after the deadline.
        if not timed_out and self._now() <= deadline:
            return result
        where = f" on lane {lane}" if lane is not None else ""
        raise OperationTimeout(
            f"{op} timed out after {_fmt_seconds(timeout)} on route {self._spec.env_id}{where} "
            f"at runtime step {step}; raise RuntimeLimits.{limit_name} if it needs longer",
            timeout=timeout,
            operation=op,
            step=step,
            lane=lane,
        )

    def _context(self, phase: str) -> model_v1.AdapterContext:
        self._seq += 1
        spec = self._spec
        return model_v1.AdapterContext(
            session_id=spec.session_id,
            env_id=spec.env_id,
            request_id=format_request_id(spec.env_id, phase, self._seq),
        )

    # -- background work ------------------------------------------------------------------------

    def _evict(self, episode_ids: Sequence[str]) -> None:
        ids = [episode_id for episode_id in episode_ids if episode_id]
        if not ids:
            return
        request = model_v1.ResetAdapterRequest(
            context=self._context("reset_adapter"), episode_ids=ids
        )
        if self._bg_pending == 0:
            self._bg_idle = trio.Event()
        self._bg_pending += 1
        assert self._nursery is not None
        self._nursery.start_soon(self._reset_adapter, request)

    async def _reset_adapter(self, request: model_v1.ResetAdapterRequest) -> None:
        try:
            started = self._now()
            timeout = self._spec.limits.model_predict_timeout
            with _deadline(timeout) as scope:
                try:
                    await self._model.reset_adapter(request)
                except Exception as exc:
                    self._note_failure("reset_adapter", f"{type(exc).__name__}: {exc}")
                    return
            if scope.cancelled_caught:
                self._note_failure("reset_adapter", f"timed out after {_fmt_seconds(timeout)}")
                return
            self._telemetry.record(
                "model.reset_adapter", "rpc.total", (self._now() - started) * 1e3
            )
        finally:
            self._bg_pending -= 1
            if self._bg_pending == 0:
                self._bg_idle.set()

    async def _drain_background(self) -> None:
        if self._bg_pending:
            with _deadline(self._spec.limits.service_close_timeout):
                await self._bg_idle.wait()

    async def _tick(self, scope: trio.CancelScope, window: float) -> None:
        spec = self._spec
        with scope:
            while True:
                await trio.sleep(window)
                rows = self._telemetry.snapshot("window")
                self._telemetry.flush_window()
                if rows:
                    await self._hooks.fire(
                        "on_telemetry",
                        Telemetry(spec.session_id, spec.env_id, "window", tuple(rows)),
                    )

    # -- shutdown and report ----------------------------------------------------------------------

    async def _shutdown(self, reason: str) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._release, reason)
            if self._spec.close_env_on_end:
                nursery.start_soon(self._close_env)

    async def _release(self, reason: str) -> None:
        bound = self._spec.limits.service_close_timeout
        request = model_v1.ReleaseAdapterRequest(
            context=self._context("release_adapter"), reason=reason
        )
        with _deadline(bound) as scope:
            try:
                await self._model.release_adapter(request, math.inf if bound is None else bound)
            except Exception as exc:
                self._note_failure("release_adapter", f"{type(exc).__name__}: {exc}")
        if scope.cancelled_caught:
            self._note_failure("release_adapter", f"timed out after {_fmt_seconds(bound)}")

    async def _close_env(self) -> None:
        bound = self._spec.limits.service_close_timeout
        with _deadline(bound) as scope:
            try:
                await self._env.close(math.inf if bound is None else bound)
            except Exception as exc:
                self._note_failure("env_close", f"{type(exc).__name__}: {exc}")
        if scope.cancelled_caught:
            self._note_failure("env_close", f"timed out after {_fmt_seconds(bound)}")

    async def _fire_bounded(self, name: str, event: object) -> None:
        with _deadline(self._spec.limits.service_close_timeout):
            await self._hooks.fire(name, event)

    async def _push_session_telemetry(self, report: RuntimeReport) -> None:
        spec = self._spec
        await self._fire_bounded(
            "on_telemetry", Telemetry(spec.session_id, spec.env_id, "session", report.telemetry)
        )

    def _make_report(self, status: RunStatus, reason: str | None) -> RuntimeReport:
        spec = self._spec
        return RuntimeReport(
            status=status,
            reason=reason,
            session_id=spec.session_id,
            env_id=spec.env_id,
            episodes=tuple(self._book.completed),
            env_step_calls=self._total_steps,
            telemetry=tuple(self._telemetry.snapshot("session")),
            advisories=self._advisories(),
            hook_errors=self._hooks.errors,
        )

    def _count(self, key: str, amount: int = 1) -> None:
        self._counts[key] = self._counts.get(key, 0) + amount

    def _note_failure(self, key: str, message: str) -> None:
        self._count(key)
        self._first_error.setdefault(key, message)
        logger.warning("%s failed (the run goes on): %s", key, message)

    def _advisories(self) -> tuple[str, ...]:
        book, counts, spec = self._book, self._counts, self._spec
        out = []
        if counts.get("discard_events"):
            out.append(
                f"an episode ended mid-chunk on a lockstep vector env {counts['discard_events']} "
                f"time(s), discarding {counts['discarded_frames']} planned action frame(s) for "
                "every lane; use a lane endpoint or execution_horizon=1 to avoid re-planning"
            )
        if book.stale_completions:
            out.append(
                f"dropped {book.stale_completions} stale episode completion(s) naming an episode "
                "that had already ended or was never current (such as the env echoing a "
                "runtime truncation)"
            )
        if book.over_quota:
            out.append(
                f"dropped {book.over_quota} completion(s) beyond max_episodes={spec.max_episodes}"
            )
        if book.discarded_seeds:
            out.append(
                f"episode_seeds could not cover a whole reset: {book.discarded_seeds} unused "
                "seed(s) were dropped and later episodes were seeded by the env"
            )
        if counts.get("history_vector"):
            out.append(
                "the model asked for observation history, which is delivered only for one-lane "
                "groups; a lockstep vector env gets none"
            )
        if counts.get("short_prefetch"):
            out.append(
                f"{counts['short_prefetch']} prefetched chunk(s) had no frame left past the "
                "prefetch lead and were predicted again; lower prefetch_lead"
            )
        for key, label in (
            ("reset_adapter", "model.reset_adapter"),
            ("release_adapter", "model.release_adapter"),
            ("env_close", "env.close"),
        ):
            if counts.get(key):
                out.append(
                    f"{label} failed {counts[key]} time(s) (first: {self._first_error[key]}); "
                    "the run went on"
                )
        return tuple(out)

    # -- telemetry helpers ------------------------------------------------------------------

    def _record_rpc(
        self,
        sinks: _OpSinks,
        started: float,
        timings: EndpointTimings,
        request_bytes: int | None,
        response_bytes: int | None,
    ) -> float:
        ms = (self._now() - started) * 1e3
        sinks.rpc(ms)
        sinks.phases(timings)
        sinks.sizes(request_bytes, response_bytes)
        return ms

    def _record_model_phases(self, prediction: ModelPrediction) -> None:
        timings, sinks = prediction.timings, self._predict_sinks
        if timings.adapter_ns is not None:
            sinks.adapter(timings.adapter_ns / 1e6)
        if timings.held_episodes is not None:
            sinks.held_episodes(timings.held_episodes)
        if timings.held_state_bytes is not None:
            sinks.held_bytes(timings.held_state_bytes)

    def _record_round(self, started: float) -> None:
        self._round_sink((self._now() - started) * 1e3)
        # The sinks only append; fold now and then so a long run's memory stays flat.
        self._rounds += 1
        if not self._rounds % _FOLD_ROUNDS:
            self._telemetry.fold()


class _OpSinks:
    """The telemetry series of one operation, resolved once so a step records cheaply.

    Resolving a sink creates its series, but a series without samples appears in no
    snapshot, so the report is the same as recording through ``TelemetryRecorder.record``.
    """

    __slots__ = (
        "adapter",
        "decode",
        "encode",
        "group_size",
        "held_bytes",
        "held_episodes",
        "queue",
        "request_bytes",
        "response_bytes",
        "rpc",
        "total",
        "user",
    )

    def __init__(self, telemetry: TelemetryRecorder, op: str) -> None:
        sink = telemetry.sink
        self.rpc = sink(op, "rpc.total")
        self.total = sink(op, "endpoint.total")
        self.decode = sink(op, "endpoint.decode")
        self.user = sink(op, "endpoint.user")
        self.encode = sink(op, "endpoint.encode")
        self.queue = sink(op, "endpoint.queue")
        self.request_bytes = sink(op, "request.bytes")
        self.response_bytes = sink(op, "response.bytes")
        self.adapter = sink(op, "predict.adapter")
        self.held_episodes = sink(op, "held.episodes")
        self.held_bytes = sink(op, "held.bytes")
        self.group_size = sink(op, "group.size")

    def phases(self, timings: EndpointTimings) -> None:
        """The endpoint's own phase durations (nanoseconds, recorded as milliseconds)."""
        if timings.total_ns is not None:
            self.total(timings.total_ns / 1e6)
        if timings.decode_ns is not None:
            self.decode(timings.decode_ns / 1e6)
        if timings.user_ns is not None:
            self.user(timings.user_ns / 1e6)
        if timings.encode_ns is not None:
            self.encode(timings.encode_ns / 1e6)
        if timings.queue_ns is not None:
            self.queue(timings.queue_ns / 1e6)

    def sizes(self, request_bytes: int | None, response_bytes: int | None) -> None:
        if request_bytes is not None:
            self.request_bytes(request_bytes)
        if response_bytes is not None:
            self.response_bytes(response_bytes)
