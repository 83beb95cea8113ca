"""The driver's endpoint calls: deadlines, background calls, prefetches and fused predicts.

Everything here is I/O the driver's loop delegates; the rules of *what* to call live in
the pure machines (:mod:`._episodes`, :mod:`._plans`).

* :class:`EndpointCalls` binds a run's operations; :class:`Call` runs one env or model
  operation by its deadline (the call's start plus its limit, the instant the request's
  ``timeout_ms`` names) and gives its errors their context. An endpoint that
  ``enforces_deadlines`` is trusted with that deadline, the one enforcer, at its own I/O;
  every other call is cut off exactly at it, and one that the endpoint said would not
  yield (``runs_inline``) and comes back late is a timeout too.
* :class:`Predictor` is one driver's predicts: the call it makes on its own, and the
  accounting and checks of its part of a fused call, which :func:`call_fused` makes.
* :class:`Background` runs ``reset_adapter`` evictions without blocking the loop.
* :class:`Prefetch` is one predict running ahead of the replayed frames.
* :class:`PredictBatcher` fuses the predicts of lane groups that wait at the same time
  into one call of the function it is given (a fleet's batcher, in :mod:`._fleet`, may
  wait a bounded time for the others to join).
* :func:`check_prediction`, :func:`observation_of` and :func:`env_lane` check answers
  and give their errors the env's lane.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import trio

from .._errors import EnvError, Error, ModelError, OperationTimeout, ProtocolError
from .._timeouts import fmt_seconds, in_time
from ..protocol import env_v1, model_v1, spaces_v1
from ._advisories import FailureLog
from ._interfaces import (
    EnvResetResult,
    EnvStepResult,
    ModelPrediction,
    RuntimeEnv,
    RuntimeModel,
)
from ._telemetry import OpSinks, TelemetryRecorder

if TYPE_CHECKING:
    from ._episodes import EpisodeBook
    from ._plans import ActionSource
    from ._spec import RuntimeSessionSpec

__all__ = [
    "Background",
    "Call",
    "EndpointCalls",
    "FusedPredict",
    "Outcome",
    "PredictBatcher",
    "Predictor",
    "Prefetch",
    "call_fused",
    "check_prediction",
    "deadline_scope",
    "env_lane",
    "is_cancellation",
    "observation_of",
]

_T = TypeVar("_T")
_R = TypeVar("_R")
_K = TypeVar("_K")

Outcome = ModelPrediction | Error
"""What one predict of a fused group came to."""


def deadline_scope(seconds: float | None) -> trio.CancelScope:
    if seconds is None:
        return trio.CancelScope()
    return trio.CancelScope(deadline=trio.current_time() + seconds)


def is_cancellation(exc: BaseException) -> bool:
    if isinstance(exc, trio.Cancelled):
        return True
    # An exception group (builtin from 3.11, the backport before): duck-typed on purpose.
    inner = getattr(exc, "exceptions", None)
    if isinstance(inner, tuple) and inner:
        return all(isinstance(e, BaseException) and is_cancellation(e) for e in inner)
    return False


class Call(Generic[_R, _T]):
    """One endpoint operation (``env.step``, ...), bound once to its method and its limit.

    Calling it runs ``method(request)`` under the limit and gives errors their context.
    ``finished`` is the clock reading taken when the last call returned: the driver
    times the call (and dates what follows) from it instead of reading the clock again;
    read it before the next checkpoint, since concurrent lanes share the object.
    """

    __slots__ = (
        "enforced",
        "error_class",
        "finished",
        "limit",
        "method",
        "now",
        "op",
        "route",
        "runs_inline",
        "timeout",
    )

    def __init__(
        self,
        op: str,
        limit: str,
        timeout: float | None,
        method: Callable[[_R], Awaitable[_T]],
        runs_inline: Callable[[], bool] | None = None,
        *,
        error_class: type[Error],
        route: str,
        enforced: bool = False,
        now: Callable[[], float] = trio.current_time,
    ) -> None:
        self.op = op
        self.limit = limit
        """The ``RuntimeLimits`` field a timeout names."""
        self.timeout = timeout
        self.method = method
        self.runs_inline = runs_inline
        """Whether ``method`` would answer now without yielding (``None``: never)."""
        self.error_class = error_class
        """What a foreign exception is wrapped into."""
        self.route = route
        self.enforced = enforced
        """Whether the endpoint enforces the deadline itself (``enforces_deadlines``)."""
        self.now = now
        self.finished = 0.0

    async def __call__(self, request: _R, lane: int | None, step: int, started: float) -> _T:
        """``method(request)``, due by ``started + timeout``.

        An endpoint that enforces the deadline itself gets no scope and no check: it
        answers in time or raises its own :class:`~trio_rlmesh.OperationTimeout` at the
        deadline. When ``runs_inline()`` says the call will not yield, it runs without a cancel
        scope: nothing could interrupt it, so it gets the same late-answer check as an
        endpoint that blocks the event loop unannounced. Skipping the scope (and, without a
        deadline, skipping it for every call) keeps the in-process path cheap: entering
        and leaving a cancel scope costs more than a Gymnasium step.
        """
        op, timeout, runs_inline = self.op, self.timeout, self.runs_inline
        deadline = math.inf if timeout is None or self.enforced else started + timeout
        timed_out = False
        try:
            if deadline == math.inf or (runs_inline is not None and runs_inline()):
                result = await self.method(request)
            else:
                with trio.CancelScope(deadline=deadline) as scope:
                    result = await self.method(request)
                timed_out = scope.cancelled_caught
        except Error as exc:
            # Keep the endpoint's own class, code and chain: only fill in the context.
            exc.with_context(operation=op, step=step, lane=lane)
            raise
        except Exception as exc:
            raise self.error_class(
                f"{op} failed at runtime step {step}: {type(exc).__name__}: {exc}",
                operation=op,
                step=step,
                lane=lane,
            ) from exc
        self.finished = end = self.now()
        if not timed_out and in_time(end, deadline):
            return result
        where = f" on lane {lane}" if lane is not None else ""
        raise OperationTimeout(
            f"{op} timed out after {fmt_seconds(timeout)} on route {self.route}{where} "
            f"at runtime step {step}; raise RuntimeLimits.{self.limit} if it needs longer",
            timeout=timeout,
            operation=op,
            step=step,
            lane=lane,
        )


class EndpointCalls:
    """A run's endpoint operations, each bound once to its method, synchronous form and limit.

    ``reset``, ``step`` and ``predict`` ask the endpoint's ``runs_inline`` before each call
    (a fused predict is the fleet's call, :class:`~trio_rlmesh.runtime._fleet.Fleet`);
    ``render`` exists with ``render=True`` only. An env that ``enforces_deadlines`` is
    left to enforce them: the driver opens no scope of its own over its calls.
    """

    __slots__ = ("predict", "render", "reset", "step")

    def __init__(
        self, spec: RuntimeSessionSpec, env: RuntimeEnv, model: RuntimeModel, *, render: bool
    ) -> None:
        limits, route = spec.limits, spec.env_id
        enforced = env.enforces_deadlines
        step_limit, predict_limit = limits.env_step_timeout, limits.model_predict_timeout
        inline = functools.partial
        self.reset: Call[env_v1.ResetRequest, EnvResetResult] = Call(
            "env.reset", "env_reset_timeout", limits.env_reset_timeout, env.reset,
            inline(env.runs_inline, "reset"), error_class=EnvError, route=route, enforced=enforced,
        )  # fmt: skip
        self.step: Call[env_v1.StepRequest, EnvStepResult] = Call(
            "env.step", "env_step_timeout", step_limit, env.step,
            inline(env.runs_inline, "step"), error_class=EnvError, route=route, enforced=enforced,
        )  # fmt: skip
        self.predict: Call[model_v1.PredictRequest, ModelPrediction] = Call(
            "model.predict", "model_predict_timeout", predict_limit, model.predict,
            inline(model.runs_inline, "predict"), error_class=ModelError, route=route,
        )  # fmt: skip
        self.render: Call[env_v1.RenderRequest, env_v1.RenderResponse] | None = None
        if render:
            self.render = Call(
                "env.render", "env_step_timeout", step_limit, env.render,
                error_class=EnvError, route=route, enforced=enforced,
            )  # fmt: skip

    def set_clock(self, now: Callable[[], float]) -> None:
        """Make every call read the run's clock ``now``."""
        for call in (self.reset, self.step, self.predict, self.render):
            if call is not None:
                call.now = now


def env_lane(error: Error, lanes: tuple[int, ...]) -> None:
    """Turn the lane a model endpoint named (a row of its request) into the env lane.

    A predict request's rows are the group's lanes in order, so row ``i`` is
    ``lanes[i]``: the identity on a lockstep group, lane ``k`` for lane ``k``'s one-row
    group. A lane that is already the env's (row 0 of lane 0) maps to itself.
    """
    if error.lane is not None and 0 <= error.lane < len(lanes):
        error.lane = lanes[error.lane]


def observation_of(value: spaces_v1.SpaceValue | None, op: str, step: int) -> spaces_v1.SpaceValue:
    """An env answer's observation; an answer without one is a :class:`ProtocolError`."""
    if value is None:
        raise ProtocolError(f"{op} answered without an observation", operation=op, step=step)
    return value


def check_prediction(
    request: model_v1.PredictRequest,
    prediction: ModelPrediction,
    component: str,
    step: int,
    lane: int | None,
) -> None:
    """Refuse an answer for another route, or one with no frame (:class:`ProtocolError`)."""
    response = prediction.response
    assert request.context is not None
    # An in-process model echoes the request's own context object: skip the field compare.
    if response.context is not request.context and (
        response.context is None or response.context != request.context
    ):
        raise ProtocolError(
            f"model endpoint {component} returned mismatched route identity for request "
            f"{request.context.request_id}",
            operation="model.predict",
            step=step,
            lane=lane,
        )
    if not response.actions:
        raise ProtocolError(
            f"model endpoint {component} returned a predict response with no actions",
            operation="model.predict",
            step=step,
            lane=lane,
        )


async def call_fused(
    call: Call[Sequence[model_v1.PredictRequest], list[Outcome]],
    requests: Sequence[model_v1.PredictRequest],
    lane: int | None,
    step: int,
    model_id: str,
) -> tuple[list[Outcome], float]:
    """Make one fused predict call: one outcome per request, failures in place (never
    raised), and how long the call took in milliseconds (it ended at ``call.finished``).

    A wrong answer count gets its step from :meth:`Predictor.settle`, the step when it
    ended.
    """
    started = call.now()
    outcomes: list[Outcome]
    try:
        results = await call(requests, lane, step, started)
        if len(results) != len(requests):
            raise ProtocolError(
                f"model endpoint {model_id} answered "
                f"{len(results)} results for a group of {len(requests)} predicts",
                operation="model.predict",
            )
        outcomes = list(results)
    except Error as exc:
        outcomes = [exc] * len(requests)
    call.finished = finished = call.now()  # a failed call has its end read here too
    return outcomes, (finished - started) * 1e3


class Predictor:
    """One driver's predicts: the call it makes on its own, and its part of fused calls.

    Whether a request goes on its own (:meth:`alone`) or into a fused call is the run's
    :class:`~trio_rlmesh.runtime._fleet.Fleet`'s decision; either way the driver's
    telemetry, its book's per-episode predict times and the answer checks are the same,
    and errors name the env lane and the driver's step (``step()``, read when the
    answer is checked).
    """

    __slots__ = ("book", "call", "model_id", "sinks", "step")

    def __init__(
        self,
        call: Call[model_v1.PredictRequest, ModelPrediction],
        *,
        sinks: OpSinks,
        book: EpisodeBook,
        model_id: str,
        step: Callable[[], int],
    ) -> None:
        self.call = call
        self.sinks = sinks
        self.book = book
        self.model_id = model_id
        """How answer errors name the model endpoint."""
        self.step = step
        """The driver's runtime step now."""

    async def alone(
        self, plan: ActionSource[Any], request: model_v1.PredictRequest
    ) -> ModelPrediction:
        """Predict for ``plan``'s group with the model's own ``predict``."""
        call = self.call
        started = call.now()
        try:
            prediction = await call(request, plan.lane, self.step(), started)
        except Error as exc:
            env_lane(exc, plan.lanes)
            raise
        ms = (call.finished - started) * 1e3
        check_prediction(request, prediction, self.model_id, self.step(), plan.lane)
        sinks = self.sinks
        sinks.call(ms, prediction.timings, prediction.request_bytes, prediction.response_bytes)
        sinks.model_phases(prediction.timings)
        if prediction.group_size is not None:
            sinks.group_size(prediction.group_size)
        self.book.note_predict(plan.lanes, ms)
        return prediction

    def settle(
        self,
        requests: Sequence[model_v1.PredictRequest],
        plans: Sequence[ActionSource[Any]],
        outcomes: list[Outcome],
        ms: float,
        group_size: int,
    ) -> list[Outcome]:
        """Account this driver's part of one fused call and check each of its answers.

        ``outcomes`` (aligned with ``requests``) is returned, each answer that fails its
        check replaced by the error. ``group_size`` is the whole call's request count: a
        fleet's call carries other endpoints' requests too.
        """
        sinks, step = self.sinks, self.step()
        sinks.rpc(ms)
        sinks.group_size(group_size)
        for position, (request, plan) in enumerate(zip(requests, plans, strict=True)):
            outcome = outcomes[position]
            if isinstance(outcome, ModelPrediction):
                try:
                    check_prediction(request, outcome, self.model_id, step, plan.lane)
                except Error as exc:
                    outcomes[position] = exc
                else:
                    sinks.phases(outcome.timings)
                    sinks.model_phases(outcome.timings)
                    sinks.sizes(outcome.request_bytes, outcome.response_bytes)
                    self.book.note_predict(plan.lanes, ms)
            else:
                env_lane(outcome, plan.lanes)
                outcome.with_context(operation="model.predict", lane=plan.lane, step=step)
        return outcomes


class Background:
    """Calls the loop never waits for (``reset_adapter``); the run's end drains them."""

    def __init__(
        self,
        model: RuntimeModel,
        timeout: float | None,
        failures: FailureLog,
        telemetry: TelemetryRecorder,
    ) -> None:
        self._model = model
        self._timeout = timeout
        self._failures = failures
        self._telemetry = telemetry
        self._pending = 0
        self._idle = trio.Event()

    def reset_adapter(self, nursery: trio.Nursery, request: model_v1.ResetAdapterRequest) -> None:
        if self._pending == 0:
            self._idle = trio.Event()
        self._pending += 1
        nursery.start_soon(self._reset_adapter, request)

    async def _reset_adapter(self, request: model_v1.ResetAdapterRequest) -> None:
        timeout = self._timeout
        try:
            started = trio.current_time()
            with deadline_scope(timeout) as scope:
                try:
                    await self._model.reset_adapter(request)
                except Exception as exc:
                    self._failures.note("reset_adapter", f"{type(exc).__name__}: {exc}")
                    return
            if scope.cancelled_caught:
                self._failures.note("reset_adapter", f"timed out after {fmt_seconds(timeout)}")
                return
            ms = (trio.current_time() - started) * 1e3
            self._telemetry.record("model.reset_adapter", "rpc.total", ms)
        finally:
            self._pending -= 1
            if self._pending == 0:
                self._idle.set()

    async def drain(self, bound: float | None) -> None:
        """Wait (at most ``bound`` seconds) for every pending call."""
        if self._pending:
            with deadline_scope(bound):
                await self._idle.wait()


async def release_model(
    model: RuntimeModel,
    request: model_v1.ReleaseAdapterRequest,
    bound: float | None,
    failures: FailureLog,
) -> None:
    """``release_adapter`` bounded by ``bound``; a failure is noted, never raised."""
    with deadline_scope(bound) as scope:
        try:
            await model.release_adapter(request, math.inf if bound is None else bound)
        except Exception as exc:
            failures.note("release_adapter", f"{type(exc).__name__}: {exc}")
    if scope.cancelled_caught:
        failures.note("release_adapter", f"timed out after {fmt_seconds(bound)}")


async def close_env(env: RuntimeEnv, bound: float | None, failures: FailureLog) -> None:
    """``env.close`` bounded by ``bound`` once; a failure is noted, never raised.

    An env that ``enforces_deadlines`` bounds its close by the ``timeout`` it is given (the
    gRPC client, on its own I/O), so the driver adds no scope; any other is bounded here.
    """
    with deadline_scope(None if env.enforces_deadlines else bound) as scope:
        try:
            await env.close(math.inf if bound is None else bound)
        except Exception as exc:
            failures.note("env_close", f"{type(exc).__name__}: {exc}")
    if scope.cancelled_caught:
        failures.note("env_close", f"timed out after {fmt_seconds(bound)}")


class Prefetch:
    """A predict running ahead while the last frames of the current chunk replay."""

    def __init__(self) -> None:
        self.scope = trio.CancelScope()
        self.done = trio.Event()
        self.outcome: Outcome | None = None

    async def run(self, predict: Callable[[_R], Awaitable[ModelPrediction]], request: _R) -> None:
        with self.scope:
            try:
                self.outcome = await predict(request)
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


class _QueuedPredict(Generic[_K]):
    """One predict request in the batcher's queue, and its outcome once the batch ran."""

    __slots__ = ("done", "key", "outcome", "request")

    def __init__(self, request: model_v1.PredictRequest, key: _K) -> None:
        self.request = request
        self.key = key
        self.done = trio.Event()
        self.outcome: Outcome | None = None


FusedPredict = Callable[
    [Sequence[model_v1.PredictRequest], Sequence[_K]], Awaitable[Sequence[Outcome]]
]


class PredictBatcher(Generic[_K]):
    """Fuses the predicts of lanes that wait at the same time into one ``fused`` call.

    ``fused(requests, keys)`` answers one outcome per request, in order, and raises
    nothing: a failure is an :class:`~trio_rlmesh.Error` in its request's place. ``key``
    is whatever the caller needs back to tell the requests apart (a driver's predictor
    and plan).

    A group goes as soon as the batcher wakes (after one extra scheduling pass, so lanes
    woken together join it). Subclasses may gather longer (:meth:`_gather`, woken by
    :meth:`_arrived`, told who may submit by :meth:`join`, :meth:`leave` and
    :meth:`served`): a fleet's batcher waits, bounded, for the other endpoints
    (:class:`~trio_rlmesh.runtime._fleet.FleetBatcher`).
    """

    def __init__(self, fused: FusedPredict[_K]) -> None:
        self._fused = fused
        self._pending: list[_QueuedPredict[_K]] = []
        self._wakeup = trio.Event()

    async def submit(self, request: model_v1.PredictRequest, key: _K) -> ModelPrediction:
        waiter = _QueuedPredict(request, key)
        self._pending.append(waiter)
        self._arrived(key)
        try:
            await waiter.done.wait()
        except BaseException:
            # Cancelled before its group went: the request must not go without its caller.
            if waiter in self._pending:
                self._pending.remove(waiter)
            raise
        if isinstance(waiter.outcome, Error):
            raise waiter.outcome
        assert waiter.outcome is not None
        return waiter.outcome

    def join(self) -> None:
        """One more task may submit (here: nobody is waited for, so nothing to count)."""

    def leave(self) -> None:
        """A task that joined will submit no more."""

    def served(self, keys: Sequence[_K], when: float, took: float) -> None:
        """The requests of ``keys`` were answered at ``when``, by a call of ``took`` seconds."""

    def _arrived(self, key: _K) -> None:
        """``key``'s request is pending: wake the batcher."""
        self._wakeup.set()

    async def _gather(self) -> None:
        """Before a group goes: wait for more requests (here: not at all)."""

    async def serve(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup = trio.Event()
            # One more scheduling pass lets lanes woken in the same batch join this group.
            await trio.lowlevel.checkpoint()
            await self._gather()
            batch, self._pending = self._pending, []
            if not batch:
                continue
            outcomes = await self._fused([w.request for w in batch], [w.key for w in batch])
            for waiter, outcome in zip(batch, outcomes, strict=True):
                waiter.outcome = outcome
                waiter.done.set()
