"""ModelService over grpclib: serve any model (or :class:`ModelHandler`) to rlmesh runtimes.

Theory of operation. grpclib runs on the portal's asyncio loop; the model runs in trio.

* The asyncio side (:class:`_ModelService`) reads each Join stream and gives every request
  its own task, at most ``max_concurrency`` in flight per stream. Requests naming the same
  env id run in arrival order: each waits for the previous request on that env (a
  grouped predict waits for every env it names). ``close`` waits for everything the stream
  started. Responses go out in completion order, matched by ``request_id``; a request's
  completion is signalled before its response is written, so ordering never waits on the
  network.
* Each request crosses into trio once (:class:`_TrioBridge`), where :class:`_ModelCore`
  validates it, calls the handler under one lock (handler calls are serialized, as in the
  reference) and encodes the answer. A model built by :func:`~trio_rlmesh.model.as_handler`
  here runs its code in a worker thread, so a slow forward stalls neither loop.
* Every response carries ``endpoint_total_ns`` and ``in_flight``; predict responses and
  errors also carry the 0.1.0 phase fields (decode, user, encode, queue, adapter, held).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable, Coroutine
from typing import Any, Final

import attrs
import betterproto2
import outcome
import trio
from grpclib.const import Cardinality, Handler, Status
from grpclib.encoding.proto import ProtoCodec
from grpclib.exceptions import GRPCError

from ..._errors import Error, ModelError
from ...model import as_handler
from ...model._handler import (
    ModelHandler,
    ModelObservation,
    PredictFrames,
    ResolveOptions,
    RouteContract,
)
from ...model._wire import encode_frames, model_error_to_wire, observation_from_request
from ...protocol import (
    CAP_CONCURRENT_PREDICT,
    CAP_OBSERVATION_HISTORY,
    CAPABILITY_TRUE,
    COMPONENT_MODEL,
    MAX_MESSAGE_SIZE,
    SUPPORTED_WORKFLOW_EDITIONS,
    model_v1,
)
from ...protocol._fastwire import decode_model_join_request, encode_model_join_response
from ._common import (
    MODEL_HANDSHAKE,
    MODEL_JOIN,
    MODEL_SHUTDOWN,
    Address,
    answer_shutdown,
    check_token,
    handshake_response,
    parse_bind_address,
    receive_base,
)
from ._health import HealthService
from ._lifecycle import CLOSE_GRACE, TrackedServer
from ._portal import open_portal

__all__ = ["serve_model"]

CAPABILITIES: Final = {
    CAP_CONCURRENT_PREDICT: CAPABILITY_TRUE,
    CAP_OBSERVATION_HISTORY: CAPABILITY_TRUE,
}
SHUTDOWN_DISABLED_MESSAGE: Final = "remote shutdown is disabled for this model endpoint"
UNSUPPORTED_KIND_MESSAGE: Final = "unsupported model join request kind"
DEFAULT_CONCURRENCY: Final = 32
CLOSE_TIMEOUT: Final = 5.0

Code = model_v1.ModelErrorCode


def _invalid(message: str) -> ModelError:
    return ModelError(message, recoverable=False, code="INVALID_REQUEST")


@attrs.define
class _Stats:
    """Phase timings of one request, reported in the JoinResponse's 0.1.0 fields."""

    decode_ns: int | None = None
    user_ns: int | None = None
    encode_ns: int | None = None
    adapter_ns: int | None = None
    held_episodes: int | None = None
    held_state_bytes: int | None = None

    def apply(self, response: model_v1.JoinResponse) -> None:
        for field in attrs.fields(_Stats):
            value = getattr(self, field.name)
            if value is not None:
                setattr(response, field.name, value)


@attrs.define
class _Route:
    contract: RouteContract
    history: bool


class _ModelCore:
    """The trio side: route table, handler lock, decode and encode."""

    def __init__(self, handler: ModelHandler, name: str) -> None:
        self.handler = handler
        self.name = name
        self.routes: dict[str, _Route] = {}
        self.lock = trio.Lock()

    async def resolve(
        self, request: model_v1.ResolveAdapterRequest
    ) -> model_v1.ResolveAdapterResponse:
        context = request.context
        if context is None:
            raise _invalid("resolve_adapter missing context")
        if not context.env_id:
            raise _invalid("resolve_adapter missing env_id")
        if request.env_spec is None:
            raise _invalid("resolve_adapter missing env_spec")
        pin = request.selected_workflow_edition.strip()
        if pin and pin not in SUPPORTED_WORKFLOW_EDITIONS:
            raise _invalid(
                f"selected workflow edition {pin} is not supported: this model endpoint does "
                f"not implement it (supported: {', '.join(SUPPORTED_WORKFLOW_EDITIONS)})"
            )
        if not pin and len(SUPPORTED_WORKFLOW_EDITIONS) != 1:
            raise _invalid("resolve_adapter must pin a workflow edition")
        try:
            contract = RouteContract.from_env_spec(request.env_spec)
        except Error as exc:
            raise _invalid(f"invalid env spec: {exc}") from exc
        horizon = max(1, request.execution_horizon)
        setup = self.handler.route_setup()
        needs = None
        if setup is not None:
            # Outside the handler lock, as the reference does: the route setup syncs itself.
            needs = await setup.resolve_adapter(
                context.env_id, contract, ResolveOptions(horizon, request.delivers_history)
            )
        history = needs is not None and needs.history is not None
        if history and not request.delivers_history:
            raise ModelError(
                f"model {self.name!r} needs observation history, but the runtime did not offer "
                f"it (delivers_history) at execution_horizon={horizon}",
                code="INTERNAL",
            )
        self.routes[context.env_id] = _Route(contract, history)
        response = model_v1.ResolveAdapterResponse()
        if needs is not None and needs.native_chunk is not None:
            response.native_chunk = needs.native_chunk
        if history:
            assert needs is not None
            assert needs.history is not None
            response.history = model_v1.ObservationHistoryNeeds(keys=list(needs.history))
        return response

    def _prepare(self, request: model_v1.PredictRequest) -> ModelObservation:
        env_id = request.context.env_id if request.context is not None else ""
        route = self.routes.get(env_id)
        if route is None:
            raise ModelError(
                f"model env adapter was not resolved for env {env_id!r}; send ResolveAdapter first",
                code="INTERNAL",
            )
        if request.history and not route.history:
            raise ModelError(
                "predict request carries observation history rows but this route did not "
                "negotiate history (ResolveAdapterResponse.history was unset)",
                code="INTERNAL",
            )
        return observation_from_request(request, route.contract, model=self.name)

    async def _call(
        self, groups: list[ModelObservation], stats: _Stats
    ) -> list[PredictFrames | Error]:
        async with self.lock:
            started = time.perf_counter_ns()
            try:
                answers = list(await self.handler.predict_grouped(groups))
            finally:
                stats.user_ns = time.perf_counter_ns() - started
                stats.adapter_ns = self.handler.take_adapter_ns()
                held = self.handler.held_state()
                if held is not None:
                    stats.held_episodes, stats.held_state_bytes = held.episodes, held.bytes
        return answers

    def _finish(
        self, group: ModelObservation, answer: PredictFrames | Error | None
    ) -> model_v1.PredictResponse:
        if answer is None:
            raise ModelError(
                "predict_grouped returned fewer results than prepared groups", code="INTERNAL"
            )
        if isinstance(answer, BaseException):
            raise answer
        route = self.routes.get(group.env_id)
        space = route.contract.action_space if route is not None else group.action_space
        assert space is not None
        actions = encode_frames(answer, space, group.num_envs, model=self.name, env_id=group.env_id)
        return model_v1.PredictResponse(
            context=model_v1.AdapterContext(
                session_id=group.session_id, env_id=group.env_id, request_id=group.request_id
            ),
            actions=actions,
        )

    async def predict(
        self, request: model_v1.PredictRequest
    ) -> tuple[model_v1.PredictResponse | Error, _Stats]:
        stats = _Stats()
        started = time.perf_counter_ns()
        try:
            group = self._prepare(request)
        except Error as exc:
            stats.decode_ns = time.perf_counter_ns() - started
            return exc, stats
        stats.decode_ns = time.perf_counter_ns() - started
        try:
            (answer,) = await self._call([group], stats)
        except Exception as exc:
            return _as_error(exc), stats
        encode_started = time.perf_counter_ns()
        try:
            return self._finish(group, answer), stats
        except Error as exc:
            return exc, stats
        finally:
            stats.encode_ns = time.perf_counter_ns() - encode_started

    async def grouped(
        self, request: model_v1.GroupedPredictRequest
    ) -> tuple[model_v1.GroupedPredictResponse, _Stats]:
        stats = _Stats()
        started = time.perf_counter_ns()
        prepared: list[ModelObservation | Error] = []
        for group in request.groups:
            try:
                prepared.append(self._prepare(group))
            except Error as exc:
                prepared.append(exc)
        batch = [g for g in prepared if isinstance(g, ModelObservation)]
        stats.decode_ns = time.perf_counter_ns() - started
        answers: list[PredictFrames | Error] = []
        if batch:
            try:
                answers = await self._call(batch, stats)
            except Exception as exc:
                answers = [_as_error(exc)] * len(batch)
        encode_started = time.perf_counter_ns()
        results = []
        answer_iter = iter(answers)
        for item in prepared:
            try:
                if isinstance(item, Error):
                    raise item
                response = self._finish(item, next(answer_iter, None))
                results.append(model_v1.GroupedPredictResult(response=response))
            except Error as exc:
                results.append(model_v1.GroupedPredictResult(error=model_error_to_wire(exc)))
        stats.encode_ns = time.perf_counter_ns() - encode_started
        return model_v1.GroupedPredictResponse(results=results), stats

    async def reset(self, request: model_v1.ResetAdapterRequest) -> None:
        env_id = request.context.env_id if request.context is not None else ""
        if not env_id:
            raise _invalid("reset_adapter missing env_id")
        async with self.lock:
            setup = self.handler.route_setup()
            if setup is not None:
                await setup.reset_adapter(env_id, request.episode_ids)
            await self.handler.reset_adapter(env_id, request.episode_ids)

    async def release(self, request: model_v1.ReleaseAdapterRequest) -> None:
        env_id = request.context.env_id if request.context is not None else ""
        if not env_id:
            raise _invalid("release_adapter missing env_id")
        self.routes.pop(env_id, None)
        setup = self.handler.route_setup()
        if setup is not None:
            await setup.release_adapter(env_id)

    async def release_all(self) -> None:
        setup = self.handler.route_setup()
        try:
            for env_id in list(self.routes):
                if setup is not None:
                    await setup.release_adapter(env_id)
                del self.routes[env_id]
        finally:
            self.routes.clear()


def _as_error(exc: BaseException) -> Error:
    if isinstance(exc, Error):
        return exc
    return ModelError(f"{type(exc).__name__}: {exc}", code="INTERNAL")


class _TrioBridge:
    """Runs trio coroutine functions on behalf of asyncio tasks (one crossing per call)."""

    def __init__(self, token: trio.lowlevel.TrioToken, nursery: trio.Nursery) -> None:
        self._token = token
        self._nursery = nursery

    async def call(self, fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> Any:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[outcome.Outcome[Any]] = loop.create_future()
        scopes: list[trio.CancelScope] = []

        def deliver(result: outcome.Outcome[Any]) -> None:
            if not future.done():
                future.set_result(result)

        async def job() -> None:
            result: outcome.Outcome[Any] = outcome.Error(
                ModelError("the model server is shutting down", recoverable=True, code="CLOSED")
            )
            try:
                with trio.CancelScope() as scope:
                    scopes.append(scope)
                    try:
                        result = outcome.Value(await fn(*args))
                    except Exception as exc:
                        result = outcome.Error(exc)
            finally:
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(deliver, result)

        def cancel() -> None:
            for scope in scopes:
                scope.cancel()

        try:
            self._token.run_sync_soon(self._nursery.start_soon, job)
        except trio.RunFinishedError:
            raise ModelError("the model server is shutting down", code="CLOSED") from None
        try:
            result = await future
        except asyncio.CancelledError:
            with contextlib.suppress(trio.RunFinishedError):
                self._token.run_sync_soon(cancel)
            raise
        return result.unwrap()


class _Codec(ProtoCodec):
    """grpclib's proto codec with the reference's message size limit."""

    def __init__(self, max_message_size: int) -> None:
        self.max_message_size = max_message_size

    def encode(self, message: Any, message_type: Any) -> bytes:
        if message_type is model_v1.JoinResponse and type(message) is model_v1.JoinResponse:
            return encode_model_join_response(message)
        return super().encode(message, message_type)

    def decode(self, data: bytes, message_type: Any) -> Any:
        if len(data) > self.max_message_size:
            raise GRPCError(
                Status.RESOURCE_EXHAUSTED,
                f"message of {len(data)} bytes exceeds the limit of {self.max_message_size}",
            )
        if message_type is model_v1.JoinRequest:
            return decode_model_join_request(data)
        return super().decode(data, message_type)


@attrs.define(eq=False)
class _ModelService:
    """The ModelService handlers; every method runs on the portal's asyncio loop."""

    core: _ModelCore
    bridge: _TrioBridge
    token: str | None
    allow_remote_shutdown: bool
    request_stop: Callable[[str], None]
    max_concurrency: int = DEFAULT_CONCURRENCY
    server: TrackedServer | None = None
    in_flight: int = 0
    draining: bool = False
    pending: int = 0
    """Join requests accepted and not yet answered (waiting their turn included)."""
    idle: asyncio.Event = attrs.field(factory=asyncio.Event)
    """Set whenever ``pending`` drops to zero."""

    def begin(self) -> None:
        self.pending += 1
        self.idle.clear()

    def end(self, _: object = None) -> None:
        self.pending -= 1
        if not self.pending:
            self.idle.set()

    def __mapping__(self) -> dict[str, Handler]:
        return {
            MODEL_HANDSHAKE: Handler(
                self.handshake,
                Cardinality.UNARY_UNARY,
                model_v1.HandshakeRequest,
                model_v1.HandshakeResponse,
            ),
            MODEL_JOIN: Handler(
                self.join, Cardinality.STREAM_STREAM, model_v1.JoinRequest, model_v1.JoinResponse
            ),
            MODEL_SHUTDOWN: Handler(
                self.shutdown,
                Cardinality.UNARY_UNARY,
                model_v1.ShutdownRequest,
                model_v1.ShutdownResponse,
            ),
        }

    async def handshake(self, stream: Any) -> None:
        request = await receive_base(stream, self.token, what="route", call="handshake")
        base = handshake_response(COMPONENT_MODEL, request, capabilities=CAPABILITIES)
        await stream.send_message(model_v1.HandshakeResponse(base=base))

    async def shutdown(self, stream: Any) -> None:
        reason = await answer_shutdown(
            stream,
            self.token,
            what="route",
            response_type=model_v1.ShutdownResponse,
            allowed=self.allow_remote_shutdown,
            disabled_message=SHUTDOWN_DISABLED_MESSAGE,
        )
        if reason is not None:
            self.request_stop(f"shutdown accepted: {reason}" if reason else "shutdown accepted")

    async def join(self, stream: Any) -> None:
        await check_token(stream, self.token, what="route")
        # A real client waits for the response headers before it sends anything.
        await stream.send_initial_metadata()
        await _JoinSession(self, stream).run()

    async def start(self, bind: Address, max_message_size: int) -> str:
        self.server = TrackedServer([self, HealthService()], codec=_Codec(max_message_size))
        if bind.kind == "unix":
            assert bind.path is not None
            with contextlib.suppress(FileNotFoundError):
                os.unlink(bind.path)
            await self.server.start(path=bind.path)
            return str(bind)
        await self.server.start(bind.host, bind.port)
        return Address.tcp(str(bind.host), self.server.bound_port()).authority

    async def stop(self, drain_timeout: float | None) -> None:
        """Stop accepting, let requests in progress finish (at most ``drain_timeout``),
        then end every handler and connection, so clients see their streams end at once."""
        self.draining = True
        server = self.server
        if server is None:
            return
        server.stop_accepting()
        try:
            if self.pending:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self.idle.wait(), drain_timeout)
        finally:
            await server.close_connections(CLOSE_GRACE)


def _env_keys(kind: str, message: Any) -> list[str]:
    if kind == "grouped_predict":
        keys: list[str] = []
        for group in message.groups:
            env_id = group.context.env_id if group.context is not None else ""
            if env_id and env_id not in keys:
                keys.append(env_id)
        return keys
    context = getattr(message, "context", None)
    env_id = context.env_id if context is not None else ""
    return [env_id] if env_id else []


@attrs.define(eq=False)
class _JoinSession:
    """One Join stream: pipelined requests, per-env order, responses by completion."""

    service: _ModelService
    stream: Any
    tasks: set[asyncio.Task[None]] = attrs.field(factory=set)
    tails: dict[str, asyncio.Future[None]] = attrs.field(factory=dict)
    send_lock: asyncio.Lock = attrs.field(factory=asyncio.Lock)
    permits: asyncio.Semaphore = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.permits = asyncio.Semaphore(self.service.max_concurrency)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                request: model_v1.JoinRequest | None = await self.stream.recv_message()
                if request is None:
                    break
                if self.service.draining:
                    # Stopping: no new work; what is in progress still gets its answer.
                    if self.tasks:
                        await asyncio.wait(list(self.tasks))
                    raise GRPCError(Status.UNAVAILABLE, "the model server is shutting down")
                received = time.perf_counter_ns()
                kind, message = betterproto2.which_one_of(request, "kind")
                if kind == "close":
                    if self.tasks:
                        await asyncio.wait(list(self.tasks))
                    started = time.perf_counter_ns()
                    response = await self._close()
                    await self._send(request.request_id, response, started, received)
                    return
                await self.permits.acquire()
                keys = _env_keys(kind, message) if message is not None else []
                waits = [self.tails[k] for k in keys if k in self.tails]
                mine: asyncio.Future[None] = loop.create_future()
                for key in keys:
                    self.tails[key] = mine
                task = loop.create_task(
                    self._serve(request, kind, message, waits, mine, keys, received)
                )
                self.tasks.add(task)
                self.service.begin()
                task.add_done_callback(self.service.end)
                task.add_done_callback(self.tasks.discard)
            if self.tasks:
                await asyncio.wait(list(self.tasks))
        finally:
            for task in self.tasks:
                task.cancel()

    async def _serve(
        self,
        request: model_v1.JoinRequest,
        kind: str,
        message: Any,
        waits: list[asyncio.Future[None]],
        mine: asyncio.Future[None],
        keys: list[str],
        received: int,
    ) -> None:
        service = self.service
        try:
            for waited in waits:
                await waited
            started = time.perf_counter_ns()
            service.in_flight += 1
            try:
                response = await self._handle(kind, message)
            finally:
                service.in_flight -= 1
        finally:
            # Signal completion before answering, so the next request on these envs
            # never waits on the network.
            if not mine.done():
                mine.set_result(None)
            for key in keys:
                if self.tails.get(key) is mine:
                    del self.tails[key]
            self.permits.release()
        await self._send(request.request_id, response, started, received)

    async def _send(
        self, request_id: str, response: model_v1.JoinResponse, started: int, received: int
    ) -> None:
        response.request_id = request_id
        response.endpoint_total_ns = time.perf_counter_ns() - started
        response.queue_ns = max(0, started - received)
        response.in_flight = self.service.in_flight + 1
        async with self.send_lock:
            await self.stream.send_message(response)

    async def _close(self) -> model_v1.JoinResponse:
        try:
            await self.service.bridge.call(self.service.core.release_all)
        except Exception as exc:
            return _error_response(exc)
        return model_v1.JoinResponse(close=model_v1.CloseParticipantResponse())

    async def _handle(self, kind: str, message: Any) -> model_v1.JoinResponse:
        core, bridge = self.service.core, self.service.bridge
        try:
            if kind == "resolve_adapter":
                return model_v1.JoinResponse(
                    resolve_adapter=await bridge.call(core.resolve, message)
                )
            if kind == "predict":
                answer, stats = await bridge.call(core.predict, message)
                response = (
                    _error_response(answer)
                    if isinstance(answer, BaseException)
                    else model_v1.JoinResponse(predict=answer)
                )
                stats.apply(response)
                return response
            if kind == "grouped_predict":
                grouped, stats = await bridge.call(core.grouped, message)
                response = model_v1.JoinResponse(grouped_predict=grouped)
                stats.apply(response)
                return response
            if kind == "reset_adapter":
                await bridge.call(core.reset, message)
                return model_v1.JoinResponse(reset_adapter=model_v1.ResetAdapterResponse())
            if kind == "release_adapter":
                await bridge.call(core.release, message)
                return model_v1.JoinResponse(release_adapter=model_v1.ReleaseAdapterResponse())
        except Exception as exc:
            return _error_response(exc)
        return model_v1.JoinResponse(
            error=model_v1.ModelError(
                code=Code.UNSUPPORTED, message=UNSUPPORTED_KIND_MESSAGE, is_recoverable=True
            )
        )


async def _host_jobs(task_status: trio.TaskStatus[trio.Nursery]) -> None:
    with trio.CancelScope(shield=True):
        async with trio.open_nursery() as jobs:
            task_status.started(jobs)
            await trio.sleep_forever()


def _error_response(exc: BaseException) -> model_v1.JoinResponse:
    return model_v1.JoinResponse(error=model_error_to_wire(_as_error(exc)))


async def serve_model(
    model: object,
    address: str = "127.0.0.1:0",
    *,
    token: str | None = None,
    name: str | None = None,
    allow_remote_shutdown: bool = False,
    max_concurrency: int = DEFAULT_CONCURRENCY,
    max_message_size: int = MAX_MESSAGE_SIZE,
    drain_timeout: float | None = 5.0,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve a model over rlmesh-wire-v1 until cancelled (or shut down remotely).

    Follows trio's ``nursery.start`` protocol: the bound address (``127.0.0.1:PORT``) is
    reported once the listener is up. The model's ``close`` runs exactly once when
    serving ends.

    Args:
        model: a :class:`~trio_rlmesh.model.Model`, any object with ``predict`` (see
            :func:`~trio_rlmesh.model.as_handler`; its code runs in a worker thread), or
            a :class:`~trio_rlmesh.model.ModelHandler`.
        address: bind address; port 0 picks a free port.
        token: require this exact ``authorization`` header on every call.
        name: how errors name the model.
        allow_remote_shutdown: accept the Shutdown RPC.
        max_concurrency: requests in flight per Join stream.
        max_message_size: largest request accepted, in bytes.
        drain_timeout: on stop, wait at most this long for requests in progress; then
            every connection is closed.

    Example::

        async with trio.open_nursery() as nursery:
            address = await nursery.start(serve_model, MyModel())
    """
    handler = as_handler(model, name=name, offload=True)
    label = name or getattr(handler, "name", None) or type(handler).__name__
    core = _ModelCore(handler, str(label))
    bind = parse_bind_address(address)
    stop = trio.Event()
    trio_token = trio.lowlevel.current_trio_token()

    def request_stop(reason: str) -> None:
        del reason
        with contextlib.suppress(trio.RunFinishedError):
            trio_token.run_sync_soon(stop.set)

    try:
        async with open_portal() as portal, trio.open_nursery() as host:
            # Requests run in a shielded nursery of their own, so that cancelling
            # serve_model lets them drain; it is cancelled once the server has stopped.
            jobs: trio.Nursery = await host.start(_host_jobs)
            service = _ModelService(
                core=core,
                bridge=_TrioBridge(trio_token, jobs),
                token=token,
                allow_remote_shutdown=allow_remote_shutdown,
                request_stop=request_stop,
                max_concurrency=max_concurrency,
            )
            try:
                bound = await portal.run(service.start, bind, max_message_size)
                task_status.started(bound)
                await stop.wait()
            finally:
                # service.stop bounds itself; the deadline is a backstop.
                try:
                    with trio.CancelScope(shield=True) as cleanup:
                        if drain_timeout is not None:
                            cleanup.deadline = trio.current_time() + drain_timeout + 2 * CLOSE_GRACE
                        await portal.run(service.stop, drain_timeout)
                finally:
                    jobs.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(CLOSE_TIMEOUT):
            await handler.close()
