"""The nursery-scoped :class:`RuntimeDriver`: reset, predict, step until the episodes are done.

This module is the loop of ``docs/driver.md`` and the I/O around it; the rules live in
pure, synchronously tested machines: lane state in
:class:`~trio_rlmesh.runtime._episodes.EpisodeBook` (ids, rewards, completions, caps),
what each episode is and the quota in :class:`~trio_rlmesh.runtime._pool.EpisodePool`
(indices, seeds), action planning in :class:`~trio_rlmesh.runtime._plans.ActionSource`
(replay, prefetch, history), report advisories in :mod:`._advisories`, a run's ending in
:func:`~trio_rlmesh.runtime._report.run_ending`. The driver reads its episodes from, and
sends its predicts through, the run's :class:`~trio_rlmesh.runtime._fleet.Fleet` (a run of
one endpoint is a fleet of one), which decides whether predicts are fused. Endpoint calls
under deadlines, background evictions and prefetch tasks are in :mod:`._calls`; render
frames in :mod:`._frames`; telemetry sinks in :mod:`._telemetry`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TypeAlias

import attrs
import trio

from .._errors import Error, TransportError
from .._errors import SpecError as SpecError
from ..protocol import env_v1, model_v1, python_to_meta, spaces_v1
from ..protocol._internal import RESET_OPTION_TRIAL_INDEX
from ._advisories import FailureLog, advisories
from ._calls import (
    Background,
    EndpointCalls,
    Predictor,
    Prefetch,
    close_env,
    is_cancellation,
    observation_of,
    release_model,
)
from ._episodes import EpisodeBook, LaneState, PlannedEpisode
from ._events import RunEvents
from ._fleet import Fleet
from ._frames import check_renders, render_frames
from ._hooks import HooksArg
from ._ids import format_request_id
from ._interfaces import RuntimeEnv, RuntimeModel
from ._plans import ActionSource
from ._report import CANCELLED_BY_CALLER, RunSetup, RunStatus, RuntimeReport, run_ending
from ._spec import RuntimeSessionSpec, check_prefetch_lead, timeout_ms
from ._telemetry import OpSinks, TelemetryRecorder

__all__ = ["RuntimeDriver"]


_YIELD_ROUNDS = 8
"""Rounds between the loop's own yields to the scheduler when nothing else asks for one: a
yield costs about a quarter of the driver's own work per round, and an endpoint that
blocks yields on every call anyway."""

_FOLD_ROUNDS = 256
"""Rounds between telemetry folds: a round records about 15 samples."""

_Source: TypeAlias = ActionSource[Prefetch]


class RuntimeDriver:
    """Drive one env and one model through episodes until ``spec.max_episodes`` complete.

    Args:
        spec: the session; validated (raising :class:`~trio_rlmesh.SpecError`) before anything
            else happens.
        env: the env endpoint.
        model: the model endpoint.
        hooks: observers and transforms (see :class:`~trio_rlmesh.runtime.RuntimeHooks`), or
            a sequence of them (each event goes to each, in order; transforms chain).
        prefetch_lead: with chunked actions, start predicting the next chunk when this many
            frames of the current one remain to replay (0 = never overlap).
        fleet: set by fleet runs only (``run_local`` with several env addresses): the
            episodes and the predict batcher this driver shares with the drivers of the
            fleet's other endpoints. Without one, the driver runs a fleet of one of its
            own (its episodes, and a batcher for a lane endpoint's lanes).
        render: ask the env for a frame (its ``render`` call, a PNG) after every reset and
            every step, delivered in ``ResetCompleted.frames`` and ``StepCompleted.frames``.
            The env endpoint must have the optional ``render`` method, and each lane must
            render on its own (one env, or a lane endpoint; not a lockstep vector).

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
        hooks: HooksArg = None,
        *,
        prefetch_lead: int = 0,
        fleet: Fleet | None = None,
        render: bool = False,
    ) -> None:
        check_prefetch_lead(prefetch_lead)
        if render:
            check_renders(spec, env)
        self._render = render
        self._spec = spec
        self._env = env
        self._model = model
        self._prefetch_lead = prefetch_lead
        self._telemetry = TelemetryRecorder()
        self._reset_sinks = OpSinks(self._telemetry, "env.reset")
        self._step_sinks = OpSinks(self._telemetry, "env.step")
        self._predict_sinks = OpSinks(self._telemetry, "model.predict")
        self._round_sink = self._telemetry.sink("runner.round", "rpc.total")
        self._rounds = 0
        self._spawned = 0
        """Background tasks started (evictions, prefetches): the loop yields after one."""
        self._stop_scope = trio.CancelScope()
        self._cancel_reason: str | None = None
        self._started = False
        self._now = trio.current_time
        self._seq = 0
        self._total_steps = 0
        self._lockstep = not spec.lanes_step_individually
        self._own_fleet: Fleet | None = None
        """The fleet of one this driver runs (and serves), when no fleet run gave it one."""
        if fleet is None:
            fleet = self._own_fleet = Fleet.of_one(spec, model)
        self._fleet = fleet
        self._book = EpisodeBook.for_session(spec, fleet.pool)
        self._events = RunEvents(hooks, spec, self._book)
        self._plans: list[_Source] = []
        self._failures = FailureLog()
        limits = spec.limits
        self._background = Background(
            model, limits.model_predict_timeout, self._failures, self._telemetry
        )
        self._nursery: trio.Nursery | None = None
        self._lanes_scope: trio.CancelScope | None = None
        self._running_lanes = 0
        self._wants_history = False
        self._sends_trial = False
        self._reset_timeout_ms = timeout_ms(limits.env_reset_timeout)
        self._step_timeout_ms = timeout_ms(limits.env_step_timeout)
        self._calls = calls = EndpointCalls(spec, env, model, render=render)
        self._reset_call, self._step_call = calls.reset, calls.step
        predictor = Predictor(
            calls.predict,
            sinks=self._predict_sinks,
            book=self._book,
            model_id=spec.model_component_id,
            step=lambda: self._total_steps,
        )
        self._predict = fleet.predictor(predictor)
        """One group's prediction: on its own or fused, as the fleet decides."""
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
        # The run's clock, read directly: trio.current_time() adds two calls per read.
        self._now = now = trio.lowlevel.current_clock().current_time
        self._calls.set_clock(now)
        self._wants_history = bool(self._model.wants_history)
        self._sends_trial = spec.sends_trial_index
        failure: Error | None = None
        interrupted: BaseException | None = None
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                if self._own_fleet is not None:
                    self._own_fleet.start(nursery)
                ticker = trio.CancelScope()
                window = spec.limits.telemetry_window
                if window and self._events.wants_telemetry:
                    nursery.start_soon(self._tick, ticker, window)
                else:
                    self._telemetry.drop_window()  # no ticker reads it
                try:
                    with self._stop_scope:
                        await self._events.session_started(spec.num_envs, not self._lockstep)
                        if self._lockstep:
                            await self._drive(self._new_plan(tuple(range(spec.num_envs)), ()))
                        else:
                            await self._run_lanes()
                except Error as exc:
                    failure = exc
                except Exception as exc:
                    failure = Error(f"runtime driver failed: {type(exc).__name__}: {exc}")
                    failure.__cause__ = exc
                ticker.cancel()
                if failure is None and not self._stop_scope.cancelled_caught:
                    await self._background.drain(spec.limits.service_close_timeout)
                nursery.cancel_scope.cancel()
        except BaseException as exc:
            interrupted = exc
        report = await self._conclude(failure, interrupted)
        if interrupted is not None:
            raise interrupted
        if failure is not None:
            failure.report = report
            raise failure
        return report

    async def _conclude(
        self, failure: Error | None, interrupted: BaseException | None
    ) -> RuntimeReport:
        """Clean up (shielded, bounded), fire the last hooks, and keep the report."""
        status, reason = run_ending(
            interrupted=interrupted,
            caller_cancelled=interrupted is not None and is_cancellation(interrupted),
            failure=failure,
            stopped=self._stop_scope.cancelled_caught,
            cancel_reason=self._cancel_reason,
        )
        events = self._events
        with trio.CancelScope(shield=True):
            if interrupted is None and failure is None:
                await self._shutdown(reason)
                snapshot = self._make_report(status, None if status == "completed" else reason)
                await events.session_ended(
                    status, snapshot.reason, self._total_steps, snapshot.total_episodes
                )
                await events.session_telemetry(snapshot.telemetry)
            else:
                snapshot = self._make_report(status, reason)
                await events.session_telemetry(snapshot.telemetry)
                await self._shutdown(reason, failure)
                await events.session_failed(
                    reason, failure, self._total_steps, snapshot.total_episodes
                )
        self.report = attrs.evolve(
            snapshot, advisories=self._advisories(), hook_errors=self._events.errors
        )
        return self.report

    async def _run_lanes(self) -> None:
        failures: list[Error] = []
        async with trio.open_nursery() as lanes:
            self._lanes_scope = lanes.cancel_scope
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
            await self._drive(self._new_plan((lane,), (lane,)), planned)
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

    def _new_plan(self, lanes: tuple[int, ...], env_indices: tuple[int, ...]) -> _Source:
        plan: _Source = ActionSource(
            self._book,
            lanes,
            env_indices,
            wants_history=self._wants_history,
            lead=self._prefetch_lead,
        )
        self._plans.append(plan)
        return plan

    async def _drive(self, plan: _Source, planned: list[PlannedEpisode] | None = None) -> None:
        """Run episodes on ``plan``'s group until the quota is met or its lane retires."""
        # A participant of the fleet's batcher until the group is done: a fused group
        # may wait (bounded) for every participant.
        fleet = self._fleet
        fleet.join()
        try:
            await self._drive_group(plan, planned)
        finally:
            fleet.leave()

    async def _drive_group(self, plan: _Source, planned: list[PlannedEpisode] | None) -> None:
        book, events, now = self._book, self._events, self._now
        if not await self._reset(plan, planned):
            return
        rounds = spawned = 0
        while True:
            started = now()
            # Endpoints that never block must not starve the canceller or other tasks: a
            # round always notices cancellation, and yields to the scheduler every few rounds
            # and whenever the last one started background work (which then starts at once).
            rounds += 1
            if rounds % _YIELD_ROUNDS and spawned == self._spawned:
                await trio.lowlevel.checkpoint_if_cancelled()
            else:
                spawned = self._spawned
                await trio.lowlevel.checkpoint()
            queued = plan.queue
            if queued and plan.prefetch_due():
                self._prefetch(plan)
            frame = plan.replay() if queued else None
            replayed = frame is not None
            if frame is None:
                frame = await self._predicted_frame(plan)
            if events.observes_actions:
                frame = await events.action(plan, frame, replayed, self._total_steps)
            response, answered = await self._step(plan, frame)
            ended = await self._after_step(plan, response, answered, frame)
            if book.quota_reached:
                rolling = [k for k in plan.lanes if book.state(k) is LaneState.ROLLING]
                self._evict([book.slots[k].episode_id for k in rolling])
                self._record_round(started)
                return
            if ended and book.owns_resets:
                if not await self._reset(plan):
                    self._record_round(started)
                    return
            elif events.observes_observations:
                await events.observation(plan, self._total_steps)
            self._record_round(started)

    # -- resets, steps, completions ----------------------------------------------------------

    async def _reset(self, plan: _Source, planned: list[PlannedEpisode] | None = None) -> bool:
        book = self._book
        if planned is None:
            if not await self._fleet.wait_for_work(book):
                if not self._lockstep:
                    book.retire(plan.lanes[0])
                return False
            planned = book.begin_reset(plan.lanes)
        seeds = [p.seed for p in planned]
        options = None
        if self._sends_trial and len(planned) == 1:
            options = python_to_meta({RESET_OPTION_TRIAL_INDEX: planned[0].trial})
        request = env_v1.ResetRequest(
            seeds=[s for s in seeds if s is not None] if None not in seeds else [],
            options=options,
            timeout_ms=self._reset_timeout_ms,
            env_indices=list(plan.env_indices),
            episode_ids=[p.episode_id for p in planned],
        )
        call, started = self._reset_call, self._now()
        result = await call(request, plan.lane, self._total_steps, started)
        answered = call.finished
        ms = (answered - started) * 1e3
        self._reset_sinks.call(ms, result.timings, result.request_bytes, result.response_bytes)
        book.reset_done(plan.lanes, answered)
        await self._events.episodes_started(planned, auto_reset=False)
        frames = await self._frames(plan) if self._render else ()
        if self._events.observes_resets:
            await self._events.reset_completed(plan.lanes, planned, result.response, frames)
        observation = observation_of(result.response.observation, "env.reset", self._total_steps)
        self._cancel_prefetch(plan.reset(observation))
        if self._events.observes_observations:
            await self._events.observation(plan, self._total_steps)
        return True

    async def _step(
        self, plan: _Source, frame: spaces_v1.SpaceValue
    ) -> tuple[env_v1.StepResponse, float]:
        """Step the group's lanes; returns the answer and when it came."""
        request = env_v1.StepRequest(
            action=frame,
            timeout_ms=self._step_timeout_ms,
            env_indices=list(plan.env_indices),
            episode_ids=self._book.step_ids(plan.lanes),
        )
        call, started = self._step_call, self._now()
        result = await call(request, plan.lane, self._total_steps + 1, started)
        answered = call.finished
        self._total_steps += 1
        ms = (answered - started) * 1e3
        self._step_sinks.call(ms, result.timings, result.request_bytes, result.response_bytes)
        self._book.note_step(plan.lanes, ms)
        return result.response, answered

    async def _after_step(
        self,
        plan: _Source,
        response: env_v1.StepResponse,
        now: float,
        frame: spaces_v1.SpaceValue,
    ) -> bool:
        """Account the step, its rolls and completions; True when any lane's episode ended."""
        book, events, lanes = self._book, self._events, plan.lanes
        rewards = book.step_rewards(lanes, response.rewards, response.env_indices)
        rolled = book.record_step(lanes, rewards, now)
        frames = await self._frames(plan) if self._render else ()
        if events.observes_steps:
            await events.step_completed(lanes, rewards, self._total_steps, frame, response, frames)
        if rolled:
            await events.episodes_started([new for new, _old in rolled], auto_reset=True)
            # The old id of a rolled lane went out with the terminal observation's predict;
            # evicting it only now keeps that predict from re-creating state nobody frees.
            self._evict([old for _new, old in rolled])
        observation = observation_of(response.observation, "env.step", self._total_steps)
        ends = book.apply_completions(lanes, response.completed_episodes, now)
        plan.observe(observation)
        if not ends:
            return False
        await events.episodes_completed(ends)
        self._fleet.changed()
        if book.owns_resets:
            self._evict([end.episode_id for end in ends])
        # Frames, history rows and any prefetch were planned for the episodes that ran.
        self._cancel_prefetch(plan.end_episode())
        return True

    async def _frames(self, plan: _Source) -> tuple[bytes | None, ...]:
        """The env's rendering of the group's lane, as a PNG (``render=True`` only)."""
        return await render_frames(
            self._calls.render, self._spec, plan.env_indices, plan.lane, self._total_steps,
            self._step_timeout_ms,
        )  # fmt: skip

    # -- actions: predict, prefetch ------------------------------------------------------------

    async def _predicted_frame(self, plan: _Source) -> spaces_v1.SpaceValue:
        """The frame to apply when nothing is queued: from the prefetch, or a fresh predict."""
        pending = plan.take_prefetch() if plan.prefetching else None
        if pending is not None:
            handle, offset = pending
            prediction = await handle.result()
            frame = plan.take_prefetched(prediction.response.actions, offset)
            if frame is not None:
                return frame
        prediction = await self._predict(plan, plan.request(self._context(plan.phase)))
        return plan.take_predicted(prediction.response.actions)

    def _prefetch(self, plan: _Source) -> None:
        self._spawned += 1
        handle = Prefetch()
        request = plan.launch_prefetch(self._context(plan.phase), handle)
        assert self._nursery is not None
        self._nursery.start_soon(handle.run, functools.partial(self._predict, plan), request)

    @staticmethod
    def _cancel_prefetch(handle: Prefetch | None) -> None:
        if handle is not None:
            handle.scope.cancel()

    def _context(self, phase: str) -> model_v1.AdapterContext:
        self._seq += 1
        spec = self._spec
        return model_v1.AdapterContext(
            session_id=spec.session_id,
            env_id=spec.env_id,
            request_id=format_request_id(spec.env_id, phase, self._seq),
        )

    # -- background work, shutdown and report ---------------------------------------------------

    def _evict(self, episode_ids: Sequence[str]) -> None:
        ids = [episode_id for episode_id in episode_ids if episode_id]
        if ids:
            assert self._nursery is not None
            self._spawned += 1
            request = model_v1.ResetAdapterRequest(
                context=self._context("reset_adapter"), episode_ids=ids
            )
            self._background.reset_adapter(self._nursery, request)

    async def _tick(self, scope: trio.CancelScope, window: float) -> None:
        with scope:
            await self._events.tick(self._telemetry, window)

    async def _shutdown(self, reason: str, failure: Error | None = None) -> None:
        """Release the model's route and close the env, bounded; not over a connection
        whose loss failed the run (the call could only fail too)."""
        bound = self._spec.limits.service_close_timeout
        request = model_v1.ReleaseAdapterRequest(
            context=self._context("release_adapter"), reason=reason
        )
        async with trio.open_nursery() as nursery:
            if not _connection_lost(failure, "model"):
                nursery.start_soon(release_model, self._model, request, bound, self._failures)
            if self._spec.close_env_on_end and not _connection_lost(failure, "env"):
                nursery.start_soon(close_env, self._env, bound, self._failures)

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
            hook_errors=self._events.errors,
            setup=RunSetup.from_spec(spec),
        )

    def _advisories(self) -> tuple[str, ...]:
        return advisories(self._book, self._plans, self._failures)

    def _record_round(self, started: float) -> None:
        self._round_sink((self._now() - started) * 1e3)
        # The sinks only append; fold now and then so a long run's memory stays flat.
        self._rounds += 1
        if not self._rounds % _FOLD_ROUNDS:
            self._telemetry.fold()


def _connection_lost(failure: Error | None, side: str) -> bool:
    """Whether ``failure`` is the loss of the connection to ``side`` (``"env"``,
    ``"model"``): a transport error of one of its operations that a retry cannot mend."""
    return (
        isinstance(failure, TransportError)
        and not failure.recoverable
        and (failure.operation or "").startswith(f"{side}.")
    )
