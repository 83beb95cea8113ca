"""``serve_env``: serve a Gymnasium env (or several) as an rlmesh-wire-v1 EnvService.

Theory of operation:

* Written once over the backend interface, in trio, for both backends; the lifecycle,
  token, health, draining and the Join receive loop come from :mod:`._server`.
* Each lane has a worker (``runtime._worker``); a lane's calls run in arrival order.
  By default (``user_code="auto"``) a lane's steps run inline on the event loop while
  its recent steps were quick, and everything else (the first steps, reset, render,
  close, steps after a slow one) on the lane's worker thread, so a slow env stalls
  neither health checks, nor other lanes, nor stopping. ``"thread"`` always uses the
  thread (a hung step can always be abandoned); ``"inline"`` never does (a hung env
  hangs the server). docs/serving.md says what each costs.
* One Join at a time. A lockstep (vector) env handles the stream's requests one after the
  other. A lane endpoint (one scalar env per lane, ``subset_step``) runs every
  reset/step/render as its own task and answers in completion order (replies carry the
  ``request_id``).
* A request with ``timeout_ms`` is answered TIMEOUT when the deadline passes; the late
  call keeps its lane's worker (the lane's next call waits for it) and its result is
  dropped without touching the episode tracker.
* After answering a non-recoverable in-band error, the server ends the Join stream (with
  OK, as RLMesh 0.1.0 does): the session cannot go on.
* Every response gets the 0.1.0 timing fields. The body is serialized once; the timing
  fields are serialized separately and appended, which protobuf reads as one message.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final, Literal

import attrs
import betterproto2
import trio

from ..._timeouts import CLOSE_TIMEOUT, in_time
from ...protocol import core_v1, env_v1
from ...protocol._internal import (
    CAP_SUBSET_STEP,
    CAPABILITY_TRUE,
    COMPONENT_ENV,
    check_token,
    encode_env_join_response,
    encode_env_timing_tail,
)
from ...runtime._internal import (
    ServingUserCode,
    WorkerUnavailable,
    check_serving_user_code,
    check_timeout,
    new_worker,
)
from .._envhost import (
    Code,
    EnvHost,
    LaneCall,
    LaneResult,
    RequestPlan,
    ValidationPolicy,
    WireError,
    plan_timings,
    run_plan,
)
from ._backend import BackendName, ServerCall
from ._codec import encode
from ._handshake import ENV_HANDSHAKE, ENV_JOIN, ENV_SHUTDOWN, handshake_response
from ._registry import check_backend
from ._server import JoinSession, ServerCore, run_server
from ._settings import DEFAULT_LIMITS, DEFAULT_SETTINGS, GrpcSettings, ServerLimits
from ._status import GrpcError, Status

__all__ = ["serve_env"]

logger = logging.getLogger("trio_rlmesh.transports.grpc")


JOIN_BUSY_MESSAGE: Final = (
    "environment already has an active Join session; only one client may be connected at a time"
)
SHUTDOWN_DISABLED_MESSAGE: Final = "remote shutdown is disabled for this environment endpoint"

AutoresetName = Literal["next-step", "disabled"]


INLINE_OPERATIONS: Final = ("env.step",)
"""What ``user_code="auto"`` may run inline (when the lane's recent steps were quick)."""


class _Lanes:
    """Runs each lane's env calls in order, on that lane's worker (see ``runtime._worker``)."""

    def __init__(self, count: int, user_code: ServingUserCode, env_id: str) -> None:
        self.inline = user_code == "inline"
        self._workers = [
            new_worker(user_code, f"env {env_id} lane {lane}", inline_operations=INLINE_OPERATIONS)
            for lane in range(count)
        ]

    def runs_inline(self, calls: list[LaneCall]) -> bool:
        """Whether ``calls`` is one call that its lane's worker would run inline now."""
        return len(calls) == 1 and self._workers[calls[0].lane].runs_inline(calls[0].operation)

    async def run(self, call: LaneCall) -> Any:
        try:
            return await self._workers[call.lane].run(call.operation, call.fn, *call.args)
        except WorkerUnavailable as exc:
            # The lane is still inside a call its caller gave up on (or is closed): the
            # request is refused at once, naming the stuck operation.
            raise WireError(Code.BUSY, str(exc)) from None

    @property
    def stuck(self) -> dict[int, str]:
        """The lanes whose worker is still inside an abandoned call, and that call."""
        return {
            lane: operation
            for lane, worker in enumerate(self._workers)
            if (operation := worker.stuck_operation) is not None
        }

    def refuse_if_stuck(self) -> None:
        """Refuse a new Join while a call of an earlier session still runs on a lane (its
        client went away mid-call): the new session would find that lane BUSY. Refused
        like a Join while another is active, so clients retry it the same way.

        Raises:
            GrpcError: FAILED_PRECONDITION naming the lane and the operation.
        """
        stuck = self.stuck
        if stuck:
            lane, operation = next(iter(stuck.items()))
            raise GrpcError(
                Status.FAILED_PRECONDITION,
                f"environment lane {lane} is still running {operation} for an earlier Join "
                "session whose client went away; a new session can start once it returns",
            )

    async def aclose(self, close: Callable[[], None]) -> None:
        """Close the env on lane 0's worker (bounded), unless a lane is stuck."""
        stuck = self.stuck
        if stuck:
            # Closing an env from another thread while its own call is still running is
            # unsafe for most simulators; the abandoned call's worker dies with the process.
            logger.warning(
                "not closing the env: lane(s) %s are still inside an abandoned call",
                list(stuck),
            )
            return
        with trio.move_on_after(CLOSE_TIMEOUT) as scope:
            try:
                await self._workers[0].aclose("env.close", close)
            except WorkerUnavailable as exc:
                logger.warning("not closing the env: %s", exc)
            except Exception as exc:
                logger.warning("the env's close() failed: %s: %s", type(exc).__name__, exc)
        if scope.cancelled_caught:
            logger.warning("the env's close() took longer than %g s; abandoned", CLOSE_TIMEOUT)
        for worker in self._workers[1:]:
            with contextlib.suppress(Exception):
                await worker.aclose("env.close", lambda: None)


@attrs.define(eq=False)
class _Request:
    """One Join request in progress, and the timings its response reports."""

    request_id: str
    started_ns: int
    decode_ns: int
    user_ns: int = 0
    queue_ns: int = 0


@attrs.define(eq=False)
class _EnvService:
    """The EnvService: Handshake, Join (one at a time) and Shutdown."""

    core: ServerCore
    host: EnvHost
    lanes: _Lanes
    join_active: bool = False

    @property
    def capabilities(self) -> dict[str, str]:
        return {CAP_SUBSET_STEP: CAPABILITY_TRUE} if self.host.lanes_individually else {}

    def handlers(self) -> dict[str, Callable[[ServerCall], Awaitable[None]]]:
        return {ENV_HANDSHAKE: self.handshake, ENV_JOIN: self.join, ENV_SHUTDOWN: self.shutdown}

    async def handshake(self, call: ServerCall) -> None:
        request = await self.core.receive_base(call, env_v1.HandshakeRequest, "handshake")
        base = handshake_response(COMPONENT_ENV, request, capabilities=self.capabilities)
        response = env_v1.HandshakeResponse(base=base)
        if base.compatible:
            response.env_contract = self.host.contract
        await call.send_message(encode(response))

    async def shutdown(self, call: ServerCall) -> None:
        await self.core.answer_shutdown(call, env_v1.ShutdownRequest, env_v1.ShutdownResponse)

    async def join(self, call: ServerCall) -> None:
        self.core.authenticate(call)
        self.core.refuse_if_draining()
        if self.join_active:
            raise GrpcError(Status.FAILED_PRECONDITION, JOIN_BUSY_MESSAGE)
        self.lanes.refuse_if_stuck()
        self.join_active = True
        session = _EnvJoin(self, call)
        try:
            await session.run()
        finally:
            # Episodes still open when the stream ends are dropped (spec §5.1).
            session.env.close()
            self.join_active = False


class _EnvJoin(JoinSession[env_v1.JoinRequest]):
    """One Join stream: every request answered exactly once, through the env host."""

    request_type = env_v1.JoinRequest

    def __init__(self, service: _EnvService, call: ServerCall) -> None:
        super().__init__(service.core, call)
        self.service = service
        self.env = service.host.session()
        self.concurrent = service.host.lanes_individually and service.host.num_lanes > 1
        """Requests for different lanes run concurrently (one lane's run in order anyway)."""

    async def handle(self, request: env_v1.JoinRequest, received_ns: int, decode_ns: int) -> None:
        context = _Request(request.request_id, received_ns, decode_ns)
        kind, arm = betterproto2.which_one_of(request, "kind")
        if kind == "close":
            await self.wait_tasks()
            await self._answer(context, env_v1.JoinResponse(close=self.env.close()))
            self.end_session()
        elif self.concurrent and kind in ("reset", "step", "render"):
            self.spawn(self._serve, kind, arm, context)
        else:
            await self.inline(self._serve, kind, arm, context)

    async def _serve(self, kind: str, arm: Any, context: _Request) -> None:
        response = await self._respond(kind, arm, context)
        await self._answer(context, response)
        if response.error is not None and not response.error.is_recoverable:
            # As RLMesh does: the session cannot go on after a non-recoverable error.
            self.end_session()

    async def _respond(self, kind: str, arm: Any, context: _Request) -> env_v1.JoinResponse:
        """The answer to the request whose ``kind`` oneof arm is ``arm``."""
        try:
            if arm is None:
                raise WireError(Code.UNSUPPORTED, "join request kind is unset or not supported")
            if kind == "configure":
                return env_v1.JoinResponse(configure=self.env.configure(arm))
            if kind == "reset":
                plan = self.env.plan_reset(arm)
                results = await self._run(plan, arm.timeout_ms, "env.reset", context)
                return env_v1.JoinResponse(reset=self.env.finish_reset(plan, results))
            if kind == "step":
                plan = self.env.plan_step(arm)
                results = await self._run(plan, arm.timeout_ms, "env.step", context)
                return env_v1.JoinResponse(step=self.env.finish_step(plan, results))
            if kind == "render":
                plan = self.env.plan_render(arm)
                frames = await self._run(plan, arm.timeout_ms, "env.render", context)
                return env_v1.JoinResponse(render=self.env.finish_render(plan, frames))
            raise WireError(Code.UNSUPPORTED, "join request kind is unset or not supported")
        except WireError as exc:
            return env_v1.JoinResponse(error=exc.to_proto())

    async def _run(
        self, plan: RequestPlan, timeout_ms: int, op: str, context: _Request
    ) -> list[Any]:
        """Run the plan's calls on the lanes' workers, under the request's deadline."""
        submitted = time.perf_counter_ns()
        lanes = self.service.lanes
        if not timeout_ms or lanes.inline:
            # Inline env code cannot be interrupted, so no deadline scope for it.
            results = await run_plan(plan, lanes.run)
        elif lanes.runs_inline(plan.calls):
            # user_code="auto" runs this call inline: no scope could interrupt it, so a
            # call that outlasted the deadline is answered TIMEOUT afterwards (its result
            # dropped, as a late call on a worker thread is).
            deadline = trio.current_time() + timeout_ms / 1000
            results = await run_plan(plan, lanes.run)
            if not in_time(trio.current_time(), deadline):
                raise self._timed_out(plan, timeout_ms, op)
        else:
            # At the deadline the late call keeps its lane's worker, and nothing after the
            # wait (the tracker included) runs for it.
            with trio.move_on_after(timeout_ms / 1000):
                results = await run_plan(plan, lanes.run)
                context.user_ns, context.queue_ns = _timings(submitted, results)
                return results
            raise self._timed_out(plan, timeout_ms, op)
        context.user_ns, context.queue_ns = _timings(submitted, results)
        return results

    def _timed_out(self, plan: RequestPlan, timeout_ms: int, op: str) -> WireError:
        if op == "env.reset" and plan.request.env_indices and not self.env.host.lanes_individually:
            op = "env.reset_subset"
        return WireError(Code.TIMEOUT, f"{op} timed out after {timeout_ms}ms")

    async def _answer(self, context: _Request, response: env_v1.JoinResponse) -> None:
        response.request_id = context.request_id
        encode_started = time.perf_counter_ns()
        body = encode_env_join_response(response)
        done = time.perf_counter_ns()
        tail = encode_env_timing_tail(
            total_ns=done - context.started_ns - context.queue_ns,
            decode_ns=context.decode_ns,
            user_ns=context.user_ns,
            encode_ns=done - encode_started,
            queue_ns=context.queue_ns,
        )
        await self.call.send_message(body + tail)


def _timings(submitted: int, results: list[Any]) -> tuple[int, int]:
    if len(results) == 1 and isinstance(results[0], LaneResult):
        return plan_timings(submitted, results)  # one call: no list to filter
    lane_results = [r for r in results if isinstance(r, LaneResult)]
    if not lane_results:
        return 0, 0
    return plan_timings(submitted, lane_results)


AUTORESET_MODES: Final[dict[str, core_v1.AutoresetMode]] = {
    "next-step": core_v1.AutoresetMode.NEXT_STEP,
    "disabled": core_v1.AutoresetMode.DISABLED,
}
"""What ``serve_env``'s ``autoreset`` (and ``serve-env --autoreset``) may declare."""


def _autoreset_mode(value: AutoresetName | None) -> core_v1.AutoresetMode | None:
    if value is None:
        return None
    try:
        return AUTORESET_MODES[value]
    except KeyError:
        raise ValueError(
            f"autoreset must be one of {list(AUTORESET_MODES)}, got {value!r}"
        ) from None


def _remote_shutdown_env() -> bool:
    value = os.environ.get("RLMESH_ALLOW_REMOTE_SHUTDOWN", "").strip().lower()
    return value in ("1", "true")


async def serve_env(
    env_or_factory: Any,
    address: str = "127.0.0.1:0",
    *,
    num_envs: int | None = None,
    autoreset: AutoresetName | None = None,
    token: str | None = None,
    allow_remote_shutdown: bool = False,
    idle_timeout: float | None = None,
    drain_timeout: float | None = 5.0,
    validation: ValidationPolicy | None = None,
    user_code: ServingUserCode = "auto",
    backend: BackendName = "trio",
    settings: GrpcSettings = DEFAULT_SETTINGS,
    limits: ServerLimits = DEFAULT_LIMITS,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve an env over rlmesh-wire-v1 until cancelled (or shut down remotely / when idle).

    Follows trio's ``nursery.start`` protocol: once the listener is bound, the bound
    address (``127.0.0.1:PORT`` for TCP, ``unix:///path`` for a Unix socket,
    ``memory://name`` in memory) is reported through ``task_status``.

    Stopping (cancellation, remote Shutdown or the idle timeout) drains: requests in
    progress get their answers for at most ``drain_timeout`` seconds, then every open
    call ends with UNAVAILABLE and every connection closes, even if env code is stuck
    (its worker is abandoned). The env's ``close()`` then gets at most 5 s.

    Args:
        env_or_factory: a Gymnasium env (one lane), a Gymnasium vector env (lockstep), a list
            of envs (one lane each), or a callable returning an env (``num_envs`` lanes).
            Lane endpoints advertise ``subset_step``: each lane resets and steps on its own and
            requests for different lanes run concurrently.
        address: bind address (``host:port``, ``tcp://host:port``, a bare port,
            ``unix:///path`` or ``memory://name``); port 0 picks a free port.
        num_envs: lane count for a factory (must agree with the env otherwise).
        autoreset: declare ``"next-step"`` or ``"disabled"`` for a vector env (default: read
            from its ``metadata["autoreset_mode"]``).
        token: require this exact ``authorization`` header on every call (not blank).
        allow_remote_shutdown: accept the Shutdown RPC (also enabled by
            ``RLMESH_ALLOW_REMOTE_SHUTDOWN=1``).
        idle_timeout: stop after this many seconds without a Join request in progress.
        drain_timeout: on stop, wait at most this long for requests in progress.
        validation: conformance policy for actions and observations: ``"warn"`` (range
            deviations reported once in infos), ``"strict"`` (rejected) or ``"off"``.
            ``None`` reads ``RLMESH_VALIDATION_POLICY`` as RLMesh's servers do (default warn).
        user_code: ``"auto"`` (default): a lane's steps run on the event loop once its last
            8 steps each took under 5 ms, and on the lane's worker thread otherwise (the
            first steps, reset, render, close, and after any slow step); one step that is
            unexpectedly slow blocks the loop for its duration, then the lane goes back to
            its thread. ``"thread"``: env code always runs on one worker thread per lane,
            so a slow lane stalls nothing else and a stuck one can be abandoned at stop.
            ``"inline"``: always on the event loop, fastest for quick envs, but a hung step
            hangs the server.
        backend: ``"trio"`` (default) or ``"grpclib"``.
        settings: message size limit, keepalive and flow-control windows.
        limits: what one client connection may do (connections, calls, header size,
            handshake and idle timeouts, frame budgets); see
            :class:`~trio_rlmesh.transports.grpc.ServerLimits`.

    Example::

        async with trio.open_nursery() as nursery:
            address = await nursery.start(serve_env, gymnasium.make("CartPole-v1"))
    """
    check_backend(backend)
    token = check_token(token)
    check_timeout("drain_timeout", drain_timeout)
    user_code = check_serving_user_code(user_code)
    mode = _autoreset_mode(autoreset)
    if validation not in (None, "warn", "strict", "off"):
        raise ValueError(f"validation must be 'warn', 'strict' or 'off', got {validation!r}")
    # Opening may call a factory (user code): off the event loop.
    host = await trio.to_thread.run_sync(
        lambda: EnvHost.open(
            env_or_factory, num_envs=num_envs, autoreset=mode, validation=validation
        )
    )
    lanes = _Lanes(host.workers, user_code, host.shape.env_id)
    core = ServerCore(
        component="env",
        what="env",
        token=token,
        allow_remote_shutdown=allow_remote_shutdown or _remote_shutdown_env(),
        shutdown_disabled_message=SHUTDOWN_DISABLED_MESSAGE,
    )
    service = _EnvService(core=core, host=host, lanes=lanes)
    try:
        await run_server(
            core,
            service.handlers(),
            address=address,
            backend=backend,
            settings=settings,
            limits=limits,
            drain_timeout=drain_timeout,
            idle_timeout=idle_timeout,
            task_status=task_status,
        )
    finally:
        with trio.CancelScope(shield=True):
            await lanes.aclose(host.shape.close_call)
