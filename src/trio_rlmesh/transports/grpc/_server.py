"""What the env server and the model server share: one lifecycle, one Join loop.

Theory of operation.

* :func:`run_server` opens the backend's server with the service's handlers plus the
  health service, reports the bound address through ``task_status``, and serves until
  it is cancelled or :meth:`ServerCore.request_stop` is called (remote Shutdown, idle
  timeout). Stopping is always the same three steps, shielded and bounded: stop
  accepting; wait at most ``drain_timeout`` for the requests in progress (answers still
  go out); then the backend ends every open call with UNAVAILABLE ("the server is shutting
  down") and closes every connection. Handlers still running then are cancelled, which
  abandons user code stuck in a worker thread.
* :class:`ServerCore` holds the rules every call meets: the ``authorization`` token (health
  excepted), the unary Handshake/Shutdown request shape, and the count of requests in
  progress that draining waits for.
* :class:`JoinSession` is the receive loop of one Join stream: response headers at once
  (RLMesh clients wait for them before sending), then each request decoded strictly (a
  malformed one ends the stream with INTERNAL at once), requests arriving while draining
  refused with UNAVAILABLE once the ones in progress are answered, and a subclass deciding
  per request whether it runs inline or as its own task.
"""

from __future__ import annotations

import contextlib
import hmac
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Generic, TypeVar

import attrs
import trio

from ...protocol import core_v1
from ._backend import Handler, ServerCall
from ._codec import decode, encode
from ._errors import could_not_listen
from ._handshake import AUTHORIZATION_HEADER
from ._health import HEALTH_HANDLERS
from ._registry import get_backend
from ._settings import GrpcSettings, ServerLimits
from ._status import GrpcError, Status

__all__ = ["JoinSession", "ServerCore", "run_server"]

_Req = TypeVar("_Req")

IDLE_CHECK_INTERVAL: Final = 0.5


@attrs.define(eq=False)
class ServerCore:
    """The state and rules one server's calls share."""

    component: str
    """``rlmesh-env`` or ``rlmesh-model``, for messages."""
    what: str
    """How the token refusal names what is protected (``env``, ``route``), as RLMesh says it."""
    token: str | None
    allow_remote_shutdown: bool
    shutdown_disabled_message: str
    draining: bool = False
    in_flight: int = 0
    """Requests in progress (draining waits for them)."""
    stop_reason: str | None = None
    _stop: trio.Event = attrs.field(factory=trio.Event)
    _idle: trio.Event = attrs.field(factory=trio.Event)
    _idle_since: float = attrs.field(factory=trio.current_time)

    def __attrs_post_init__(self) -> None:
        self._idle.set()

    # ------------------------------------------------------------- rules

    def authenticate(self, call: ServerCall) -> None:
        """Refuse a call whose ``authorization`` is not exactly the token (when one is set).

        Raises:
            GrpcError: UNAUTHENTICATED ``invalid <what> token``, as RLMesh answers.
        """
        if not self.token:
            return
        presented = call.metadata.get(AUTHORIZATION_HEADER, "")
        if not hmac.compare_digest(presented.encode("utf-8"), self.token.encode("utf-8")):
            raise GrpcError(Status.UNAUTHENTICATED, f"invalid {self.what} token")

    async def receive_unary(self, call: ServerCall, request_type: type[_Req]) -> _Req:
        """Authenticate a unary call and decode its one request."""
        self.authenticate(call)
        data = await call.receive_message()
        if data is None:
            raise GrpcError(Status.INTERNAL, f"{call.path} carried no request message")
        return decode(request_type, data)

    async def receive_base(self, call: ServerCall, request_type: type[Any], name: str) -> Any:
        """A Handshake or Shutdown request's ``base`` (INVALID_ARGUMENT when it has none,
        in the reference's words)."""
        request = await self.receive_unary(call, request_type)
        if request.base is None:
            raise GrpcError(Status.INVALID_ARGUMENT, f"{name} request missing base")
        return request.base

    async def answer_shutdown(
        self, call: ServerCall, request_type: type[Any], response_type: type[Any]
    ) -> None:
        """Serve a Shutdown call the reference's way (stopping the server if allowed)."""
        base = await self.receive_base(call, request_type, "shutdown")
        if not self.allow_remote_shutdown:
            reply = core_v1.ShutdownResponse(message=self.shutdown_disabled_message)
            await call.send_message(encode(response_type(base=reply)))
            return
        reason: str = base.reason
        message = f"shutdown accepted: {reason}" if reason else "shutdown accepted"
        reply = core_v1.ShutdownResponse(accepted=True, message=message)
        await call.send_message(encode(response_type(base=reply)))
        self.request_stop(f"remote shutdown: {reason}" if reason else "remote shutdown")

    # ------------------------------------------------------------- accounting

    def begin(self) -> None:
        """A request started."""
        # Only a counter: the event draining waits on is made when it waits.
        self.in_flight += 1

    def end(self) -> None:
        """A request finished (answered or abandoned)."""
        self.in_flight -= 1
        if not self.in_flight:
            self._idle_since = trio.current_time()
            self._idle.set()

    def refuse_if_draining(self) -> None:
        """Raise UNAVAILABLE once the server has begun to stop."""
        if self.draining:
            raise GrpcError(Status.UNAVAILABLE, f"the {self.component} server is shutting down")

    # ------------------------------------------------------------- lifecycle

    def request_stop(self, reason: str) -> None:
        """Ask the server to stop (the first reason is kept)."""
        if self.stop_reason is None:
            self.stop_reason = reason
        self._stop.set()

    async def _watch_idle(self, idle_timeout: float) -> None:
        while True:
            await trio.sleep(min(idle_timeout, IDLE_CHECK_INTERVAL))
            if not self.in_flight and trio.current_time() - self._idle_since >= idle_timeout:
                self.request_stop(f"idle for {idle_timeout:g} s")
                return

    async def _drain(self, drain_timeout: float | None) -> None:
        self.draining = True
        with trio.move_on_after(float("inf") if drain_timeout is None else drain_timeout):
            while self.in_flight:
                self._idle = trio.Event()
                await self._idle.wait()


async def run_server(
    core: ServerCore,
    handlers: Mapping[str, Handler],
    *,
    address: str,
    backend: str,
    settings: GrpcSettings,
    limits: ServerLimits,
    drain_timeout: float | None,
    idle_timeout: float | None = None,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``handlers`` (and health) until cancelled or asked to stop; see the module doc."""
    all_handlers = {**handlers, **HEALTH_HANDLERS}
    async with contextlib.AsyncExitStack() as stack:
        try:
            server = await stack.enter_async_context(
                get_backend(backend).open_server(address, all_handlers, settings, limits)
            )
        except OSError as exc:
            raise could_not_listen(exc, core.component, address) from exc
        try:
            async with trio.open_nursery() as nursery:
                if idle_timeout is not None:
                    nursery.start_soon(core._watch_idle, idle_timeout)
                task_status.started(server.address)
                await core._stop.wait()
                nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True):
                server.stop_accepting()
                await core._drain(drain_timeout)


class JoinSession(Generic[_Req]):
    """The receive loop of one Join stream (see the module doc); subclasses serve requests.

    Subclasses implement :meth:`handle`, calling :meth:`spawn` for requests that run
    concurrently and awaiting the others inline.
    """

    request_type: type[_Req]

    def __init__(self, core: ServerCore, call: ServerCall) -> None:
        self.core = core
        self.call = call
        self._nursery: trio.Nursery | None = None
        self._receiving = trio.CancelScope()
        self._tasks = 0
        self._tasks_done = trio.Event()
        self._tasks_done.set()

    async def run(self) -> None:
        """Serve the stream until the client ends it or :meth:`handle` says it is over."""
        await self.call.send_initial_metadata()
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            # One scope for the whole loop (cheaper than one per message): end_session
            # cancels it, and is only called where nothing of the loop is left to run.
            with self._receiving:
                while True:
                    data = await self.call.receive_message()
                    if data is None:
                        break
                    if self.core.draining:
                        # Stopping: no new work; what is in progress still gets its answer.
                        await self.wait_tasks()
                        self.core.refuse_if_draining()
                    received = time.perf_counter_ns()
                    request = decode(self.request_type, data)
                    decoded = time.perf_counter_ns()
                    await self.handle(request, received, decoded - received)

    async def handle(self, request: _Req, received_ns: int, decode_ns: int) -> None:
        """Serve one request (``received_ns`` on the perf counter, before decoding)."""
        raise NotImplementedError

    def end_session(self) -> None:
        """Stop reading requests: the stream ends (with OK) once the tasks in progress
        have answered. For after Close, or after a non-recoverable error; call it only
        once the request being handled needs nothing more from the loop."""
        self._receiving.cancel()

    def spawn(self, fn: Callable[..., Awaitable[None]], *args: Any) -> None:
        """Run ``fn(*args)`` as its own task in this session (counted as in progress)."""
        assert self._nursery is not None
        if not self._tasks:
            self._tasks_done = trio.Event()
        self._tasks += 1
        self.core.begin()
        self._nursery.start_soon(self._tracked, fn, args)

    async def _tracked(self, fn: Callable[..., Awaitable[None]], args: tuple[Any, ...]) -> None:
        try:
            await fn(*args)
        finally:
            self.core.end()
            self._tasks -= 1
            if not self._tasks:
                self._tasks_done.set()

    async def inline(self, fn: Callable[..., Awaitable[None]], *args: Any) -> None:
        """Run ``fn(*args)`` now, counted as in progress."""
        self.core.begin()
        try:
            await fn(*args)
        finally:
            self.core.end()

    async def wait_tasks(self) -> None:
        """Wait until every spawned request has finished."""
        await self._tasks_done.wait()
