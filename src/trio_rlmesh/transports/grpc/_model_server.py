"""``serve_model``: serve any model (or :class:`ModelHandler`) to rlmesh runtimes.

Theory of operation. Written once over the backend interface, in trio; the lifecycle,
token, health, draining and the Join receive loop come from :mod:`._server`.

* Each Join stream gives every request its own task, at most ``max_concurrency`` in
  flight per stream. Requests naming the same env id run in arrival order: each waits for
  the previous request on that env (a grouped predict waits for every env it names).
  ``close`` waits for everything the stream started. Responses go out in completion
  order, matched by ``request_id``; a request's completion is signalled before its
  response is written, so ordering never waits on the network.
* The model itself is served by the model host (:mod:`trio_rlmesh.transports._modelhost`,
  which the in-process model calls directly): routes, decode, the one handler call at a
  time, encode, episode ends, and every check and its wording. This module only turns its
  answers into Join responses. A model built by :func:`~trio_rlmesh.model.as_handler` here
  runs its code in a worker thread, so a slow or hung forward stalls neither health checks
  nor stopping.
* Every response carries ``endpoint_total_ns`` and ``in_flight``; predict responses and
  errors also carry the 0.1.0 phase fields (decode, user, encode, queue, adapter, held).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, Final

import attrs
import betterproto2
import trio

from ..._errors import Error, ModelError
from ..._timeouts import CLOSE_TIMEOUT
from ...model._internal import model_error_to_wire
from ...protocol import model_v1
from ...protocol._internal import (
    CAP_CONCURRENT_PREDICT,
    CAP_OBSERVATION_HISTORY,
    CAPABILITY_TRUE,
    COMPONENT_MODEL,
    check_token,
)
from ...runtime import EndpointTimings
from ...runtime._internal import ServingUserCode, check_timeout
from .._modelhost import ModelHost
from ._backend import BackendName, ServerCall
from ._codec import encode
from ._handshake import MODEL_HANDSHAKE, MODEL_JOIN, MODEL_SHUTDOWN, handshake_response
from ._registry import check_backend
from ._server import JoinSession, ServerCore, run_server
from ._settings import DEFAULT_LIMITS, DEFAULT_SETTINGS, GrpcSettings, ServerLimits

__all__ = ["serve_model"]

CAPABILITIES: Final = {
    CAP_CONCURRENT_PREDICT: CAPABILITY_TRUE,
    CAP_OBSERVATION_HISTORY: CAPABILITY_TRUE,
}
SHUTDOWN_DISABLED_MESSAGE: Final = "remote shutdown is disabled for this model endpoint"
UNSUPPORTED_KIND_MESSAGE: Final = "unsupported model join request kind"
DEFAULT_CONCURRENCY: Final = 32

Code = model_v1.ModelErrorCode


_PHASES: Final = (
    "decode_ns",
    "user_ns",
    "encode_ns",
    "adapter_ns",
    "held_episodes",
    "held_state_bytes",
)
"""The model host's timings a JoinResponse carries under the same names (0.1.0's fields)."""


def _with_phases(
    response: model_v1.JoinResponse, timings: EndpointTimings
) -> model_v1.JoinResponse:
    """The response with the host's phase timings; the whole handling time
    (``endpoint_total_ns``) is measured when it is sent."""
    for field in _PHASES:
        value = getattr(timings, field)
        if value is not None:
            setattr(response, field, value)
    return response


def _as_error(exc: BaseException) -> Error:
    if isinstance(exc, Error):
        return exc
    return ModelError(f"{type(exc).__name__}: {exc}", code="INTERNAL")


def _error_response(exc: BaseException) -> model_v1.JoinResponse:
    return model_v1.JoinResponse(error=model_error_to_wire(_as_error(exc)))


def _grouped_result(result: model_v1.PredictResponse | Error) -> model_v1.GroupedPredictResult:
    if isinstance(result, Error):
        return model_v1.GroupedPredictResult(error=model_error_to_wire(result))
    return model_v1.GroupedPredictResult(response=result)


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
class _ModelService:
    """The ModelService: Handshake, Join (any number of streams) and Shutdown."""

    core: ServerCore
    model: ModelHost
    max_concurrency: int = DEFAULT_CONCURRENCY
    in_flight: int = 0
    """Requests whose handler call is running (reported in every response)."""

    def handlers(self) -> dict[str, Callable[[ServerCall], Awaitable[None]]]:
        return {
            MODEL_HANDSHAKE: self.handshake,
            MODEL_JOIN: self.join,
            MODEL_SHUTDOWN: self.shutdown,
        }

    async def handshake(self, call: ServerCall) -> None:
        request = await self.core.receive_base(call, model_v1.HandshakeRequest, "handshake")
        base = handshake_response(COMPONENT_MODEL, request, capabilities=CAPABILITIES)
        await call.send_message(encode(model_v1.HandshakeResponse(base=base)))

    async def shutdown(self, call: ServerCall) -> None:
        await self.core.answer_shutdown(call, model_v1.ShutdownRequest, model_v1.ShutdownResponse)

    async def join(self, call: ServerCall) -> None:
        self.core.authenticate(call)
        self.core.refuse_if_draining()
        await _ModelJoin(self, call).run()


class _ModelJoin(JoinSession[model_v1.JoinRequest]):
    """One Join stream: pipelined requests, per-env order, responses by completion."""

    request_type = model_v1.JoinRequest

    def __init__(self, service: _ModelService, call: ServerCall) -> None:
        super().__init__(service.core, call)
        self.service = service
        self.tails: dict[str, trio.Event] = {}
        self.permits = trio.Semaphore(service.max_concurrency)

    async def handle(self, request: model_v1.JoinRequest, received_ns: int, decode_ns: int) -> None:
        kind, message = betterproto2.which_one_of(request, "kind")
        if kind == "close":
            await self.wait_tasks()
            started = time.perf_counter_ns()
            response = await self._close()
            await self._send(request.request_id, response, started, received_ns)
            self.end_session()
            return
        await self.permits.acquire()
        keys = _env_keys(kind, message) if message is not None else []
        waits = [self.tails[key] for key in keys if key in self.tails]
        mine = trio.Event()
        for key in keys:
            self.tails[key] = mine
        self.spawn(self._serve, request, kind, message, waits, mine, keys, received_ns)

    async def _serve(
        self,
        request: model_v1.JoinRequest,
        kind: str,
        message: Any,
        waits: list[trio.Event],
        mine: trio.Event,
        keys: list[str],
        received: int,
    ) -> None:
        service = self.service
        try:
            for waited in waits:
                await waited.wait()
            started = time.perf_counter_ns()
            service.in_flight += 1
            try:
                response = await self._handle(kind, message)
            finally:
                service.in_flight -= 1
        finally:
            # Signal completion before answering, so the next request on these envs
            # never waits on the network.
            mine.set()
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
        await self.call.send_message(encode(response))

    async def _close(self) -> model_v1.JoinResponse:
        try:
            await self.service.model.release_all()
        except Exception as exc:
            return _error_response(exc)
        return model_v1.JoinResponse(close=model_v1.CloseParticipantResponse())

    async def _handle(self, kind: str, message: Any) -> model_v1.JoinResponse:
        model = self.service.model
        try:
            if kind == "resolve_adapter":
                return model_v1.JoinResponse(resolve_adapter=await model.resolve(message))
            if kind == "predict":
                plan = await model.predict((message,))
                (result,) = plan.results
                response = (
                    _error_response(result)
                    if isinstance(result, Error)
                    else model_v1.JoinResponse(predict=result)
                )
                return _with_phases(response, plan.timings())
            if kind == "grouped_predict":
                plan = await model.predict(message.groups)
                grouped = model_v1.GroupedPredictResponse(
                    results=[_grouped_result(result) for result in plan.results]
                )
                return _with_phases(model_v1.JoinResponse(grouped_predict=grouped), plan.timings())
            if kind == "reset_adapter":
                await model.reset(message)
                return model_v1.JoinResponse(reset_adapter=model_v1.ResetAdapterResponse())
            if kind == "release_adapter":
                await model.release(message)
                return model_v1.JoinResponse(release_adapter=model_v1.ReleaseAdapterResponse())
        except Exception as exc:
            return _error_response(exc)
        return model_v1.JoinResponse(
            error=model_v1.ModelError(
                code=Code.UNSUPPORTED, message=UNSUPPORTED_KIND_MESSAGE, is_recoverable=True
            )
        )


async def serve_model(
    model: object,
    address: str = "127.0.0.1:0",
    *,
    token: str | None = None,
    name: str | None = None,
    allow_remote_shutdown: bool = False,
    max_concurrency: int = DEFAULT_CONCURRENCY,
    drain_timeout: float | None = 5.0,
    user_code: ServingUserCode = "auto",
    backend: BackendName = "trio",
    settings: GrpcSettings = DEFAULT_SETTINGS,
    limits: ServerLimits = DEFAULT_LIMITS,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve a model over rlmesh-wire-v1 until cancelled (or shut down remotely).

    Follows trio's ``nursery.start`` protocol: the bound address (``127.0.0.1:PORT``) is
    reported once the listener is up (after the model's ``load``, so a model that cannot
    load fails here). Stopping drains requests in progress for at most ``drain_timeout``
    seconds, then ends every open call with UNAVAILABLE, even if model code is stuck (its
    worker is abandoned). The model's ``close`` then runs at most once, bounded by 5 s, and
    not at all while a stuck predict still holds the model.

    Args:
        model: a :class:`~trio_rlmesh.model.Model`, any object with ``predict`` (see
            :func:`~trio_rlmesh.model.as_handler`; its code runs in a worker thread), or
            a :class:`~trio_rlmesh.model.ModelHandler`.
        address: bind address; port 0 picks a free port.
        token: require this exact ``authorization`` header on every call (not blank).
        name: how errors name the model.
        allow_remote_shutdown: accept the Shutdown RPC.
        max_concurrency: requests in flight per Join stream.
        drain_timeout: on stop, wait at most this long for requests in progress.
        user_code: ``"auto"`` (default): predicts run inline on the event loop while the
            model's recent predicts were quick (under 5 ms), everything else on the model's
            worker thread (as :func:`~trio_rlmesh.model.as_handler` does by default);
            ``"thread"``: always on the worker thread, so a slow forward stalls nothing else
            and a stuck one is abandoned at stop; ``"inline"``: always on the event loop.
            Ignored for a :class:`~trio_rlmesh.model.ModelHandler`, which runs as it is.
        backend: ``"trio"`` (default) or ``"grpclib"``.
        settings: message size limit, keepalive and flow-control windows.
        limits: what one client connection may do (connections, calls, header size,
            handshake and idle timeouts, frame budgets); see
            :class:`~trio_rlmesh.transports.grpc.ServerLimits`.

    Example::

        async with trio.open_nursery() as nursery:
            address = await nursery.start(serve_model, MyModel())
    """
    check_backend(backend)
    token = check_token(token)
    check_timeout("drain_timeout", drain_timeout)
    host = ModelHost.open(model, name=name, user_code=user_code)
    handler = host.handler
    core = ServerCore(
        component="model",
        what="route",
        token=token,
        allow_remote_shutdown=allow_remote_shutdown,
        shutdown_disabled_message=SHUTDOWN_DISABLED_MESSAGE,
    )
    service = _ModelService(core, host, max_concurrency)
    try:
        load = getattr(handler, "load", None)
        if load is not None:
            # Before binding: a model that cannot load fails serve_model, not its first client.
            await load()
        await run_server(
            core,
            service.handlers(),
            address=address,
            backend=backend,
            settings=settings,
            limits=limits,
            drain_timeout=drain_timeout,
            task_status=task_status,
        )
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(CLOSE_TIMEOUT):
            await handler.close()
