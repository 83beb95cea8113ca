"""A trio client for a remote model endpoint (``rlmesh.model.v1.ModelService``).

On the wire it behaves like the 0.1.0 model client: Handshake (component
``rlmesh-model``), then one Join stream opened right away. Requests are pipelined: the
envelope ``request_id`` is the context's request id (or ``model-grpc-req-<n>`` when it
has none, and always for a grouped predict) and replies are matched by it, so any number
of requests may be in flight.

All grpclib work runs on the portal's asyncio loop in :class:`_ModelJoin`: a reader task
owns the stream and completes waiters by request id; a request is one coroutine (send,
then wait), so each round trip crosses the portal once. Sends are shielded so a cancelled
caller never leaves half a message on the stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Sequence
from typing import Any, TypeVar

import betterproto2
import trio
from grpclib.client import Channel, Stream
from grpclib.const import Cardinality, Status
from grpclib.encoding.proto import ProtoCodec
from grpclib.exceptions import GRPCError

from ..._errors import Error, ModelError, ProtocolError, SpecError, TransportError
from ...model._handler import RouteNeeds
from ...model._wire import wire_error_to_model
from ...protocol import (
    COMPONENT_MODEL,
    SUPPORTED_WORKFLOW_EDITIONS,
    core_v1,
    highest_shared_edition,
    model_v1,
)
from ...protocol._fastwire import decode_model_join_response, encode_model_join
from ...runtime._interfaces import EndpointTimings, ModelPrediction
from ._common import (
    MODEL_HANDSHAKE,
    MODEL_JOIN,
    MODEL_SHUTDOWN,
    auth_metadata,
    handshake_request,
    map_grpc_error,
    parse_address,
)
from ._portal import Portal, open_portal

__all__ = ["ModelClient", "ModelClientRuntimeModel", "open_model_client"]

_R = TypeVar("_R")


class _JoinCodec(ProtoCodec):
    """grpclib's proto codec, with the hand-written path for Join requests and replies."""

    def encode(self, message: Any, message_type: Any) -> bytes:
        if message_type is model_v1.JoinRequest and type(message) is model_v1.JoinRequest:
            return encode_model_join(message)
        return super().encode(message, message_type)

    def decode(self, data: bytes, message_type: Any) -> Any:
        if message_type is model_v1.JoinResponse:
            return decode_model_join_response(data)
        return super().decode(data, message_type)


class _ModelJoin:
    """The asyncio half of a model client; every method runs on the portal's loop."""

    def __init__(self, host: str | None, port: int | None, path: str | None, token: str | None):
        self._host, self._port, self._path = host, port, path
        self._metadata = auth_metadata(token)
        self.token_sent = self._metadata is not None
        self._channel: Channel | None = None
        self._stream: Stream[model_v1.JoinRequest, model_v1.JoinResponse] | None = None
        self._reader: asyncio.Task[None] | None = None
        self._send_lock: asyncio.Lock | None = None
        self._pending: dict[str, asyncio.Future[model_v1.JoinResponse]] = {}
        self._ids = itertools.count(1)
        self._failure: BaseException | None = None
        self._closing = False

    def _get_channel(self) -> Channel:
        if self._channel is None:
            if self._path is not None:
                self._channel = Channel(path=self._path, codec=_JoinCodec())
            else:
                self._channel = Channel(self._host, self._port, codec=_JoinCodec())
        return self._channel

    async def unary(self, path: str, request: Any, response_type: type[_R]) -> _R:
        async with self._get_channel().request(
            path, Cardinality.UNARY_UNARY, type(request), response_type, metadata=self._metadata
        ) as stream:
            await stream.send_message(request, end=True)
            response: _R | None = await stream.recv_message()
        if response is None:
            raise GRPCError(Status.UNKNOWN, f"the model server sent no reply to {path}")
        return response

    async def handshake(self, request: model_v1.HandshakeRequest) -> model_v1.HandshakeResponse:
        return await self.unary(MODEL_HANDSHAKE, request, model_v1.HandshakeResponse)

    async def open(self) -> None:
        self._send_lock = asyncio.Lock()
        opened: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._reader = asyncio.create_task(self._read(opened))
        await asyncio.shield(opened)

    async def _read(self, opened: asyncio.Future[None]) -> None:
        failure: BaseException | None = None
        try:
            async with self._get_channel().request(
                MODEL_JOIN,
                Cardinality.STREAM_STREAM,
                model_v1.JoinRequest,
                model_v1.JoinResponse,
                metadata=self._metadata,
            ) as stream:
                await stream.send_request()
                await stream.recv_initial_metadata()
                self._stream = stream
                opened.set_result(None)
                while True:
                    response = await stream.recv_message()
                    if response is None:
                        break
                    waiter = self._pending.pop(response.request_id, None)
                    if waiter is not None and not waiter.done():
                        waiter.set_result(response)
                if not self._closing:
                    failure = GRPCError(Status.UNAVAILABLE, "model join stream ended")
        except asyncio.CancelledError:
            failure = ConnectionAbortedError("the model client closed the Join stream")
            raise
        except Exception as exc:
            failure = exc
        finally:
            self._stream = None
            if not opened.done():
                opened.set_exception(failure or ConnectionAbortedError("Join never opened"))
            if failure is not None:
                self._fail(failure)

    def _fail(self, failure: BaseException) -> None:
        if self._failure is None:
            self._failure = failure
        pending, self._pending = self._pending, {}
        for waiter in pending.values():
            if not waiter.done():
                waiter.set_exception(failure)
                waiter.exception()

    async def _send(self, request: model_v1.JoinRequest, end: bool) -> None:
        assert self._send_lock is not None
        async with self._send_lock:
            if self._stream is None:
                raise ConnectionAbortedError("the model Join stream is closed")
            await self._stream.send_message(request, end=end)

    async def roundtrip(
        self, request: model_v1.JoinRequest, *, end: bool = False
    ) -> model_v1.JoinResponse:
        if self._failure is not None:
            raise self._failure
        if not request.request_id:
            request.request_id = f"model-grpc-req-{next(self._ids)}"
        if request.request_id in self._pending:
            raise ProtocolError(f"request id {request.request_id!r} is already in flight")
        waiter: asyncio.Future[model_v1.JoinResponse] = asyncio.get_running_loop().create_future()
        self._pending[request.request_id] = waiter
        try:
            await asyncio.shield(asyncio.ensure_future(self._send(request, end)))
            return await waiter
        finally:
            if self._pending.get(request.request_id) is waiter:
                del self._pending[request.request_id]

    async def close(self, reason: str | None) -> None:
        try:
            if reason is not None and self._stream is not None and self._failure is None:
                request = model_v1.JoinRequest(
                    close=model_v1.CloseParticipantRequest(reason=reason)
                )
                self._closing = True
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self.roundtrip(request, end=True), 5.0)
        finally:
            self._closing = True
            reader = self._reader
            if reader is not None and not reader.done():
                reader.cancel()
                with contextlib.suppress(BaseException):
                    await reader
            if self._channel is not None:
                self._channel.close()
                self._channel = None


class ModelClient:
    """A connected, handshaken model endpoint; get one from :func:`open_model_client`."""

    def __init__(
        self, portal: Portal, join: _ModelJoin, address: str, handshake: core_v1.HandshakeResponse
    ) -> None:
        self._portal = portal
        self._join = join
        self.address = address
        self.handshake = handshake
        """The server's core HandshakeResponse (capabilities, editions, PeerInfo)."""

    @property
    def capabilities(self) -> dict[str, str]:
        return dict(self.handshake.capabilities)

    @property
    def supported_workflow_editions(self) -> list[str]:
        return list(self.handshake.supported_workflow_editions)

    async def request(
        self, request: model_v1.JoinRequest, *, operation: str
    ) -> model_v1.JoinResponse:
        """One Join round trip; transport failures become :class:`TransportError`."""
        try:
            return await self._portal.run(self._join.roundtrip, request)
        except Error:
            raise
        except Exception as exc:
            raise map_grpc_error(
                exc, operation=operation, address=self.address, token_sent=self._join.token_sent
            ) from exc

    def _expect(self, response: model_v1.JoinResponse, kind: str, operation: str) -> Any:
        got, value = betterproto2.which_one_of(response, "kind")
        if got == kind:
            return value
        if got == "error" and response.error is not None:
            raise wire_error_to_model(response.error, operation=operation).with_context(
                address=self.address
            )
        raise ProtocolError(
            f"{operation} to {self.address} was answered with {got or 'nothing'!r}",
            operation=operation,
            address=self.address,
        )

    async def resolve_adapter(
        self, request: model_v1.ResolveAdapterRequest
    ) -> model_v1.ResolveAdapterResponse:
        response = await self.request(
            model_v1.JoinRequest(resolve_adapter=request, request_id=_rid(request.context)),
            operation="model.resolve_adapter",
        )
        return self._expect(response, "resolve_adapter", "model.resolve_adapter")  # type: ignore[no-any-return]

    async def predict(self, request: model_v1.PredictRequest) -> ModelPrediction:
        response = await self.request(
            model_v1.JoinRequest(predict=request, request_id=_rid(request.context)),
            operation="model.predict",
        )
        answer = self._expect(response, "predict", "model.predict")
        return ModelPrediction(answer, EndpointTimings.from_model_response(response))

    async def grouped_predict(
        self, requests: Sequence[model_v1.PredictRequest]
    ) -> list[ModelPrediction | Error]:
        response = await self.request(
            model_v1.JoinRequest(
                grouped_predict=model_v1.GroupedPredictRequest(groups=list(requests))
            ),
            operation="model.grouped_predict",
        )
        grouped = self._expect(response, "grouped_predict", "model.grouped_predict")
        timings = EndpointTimings.from_model_response(response)
        if len(grouped.results) != len(requests):
            raise ProtocolError(
                f"grouped predict to {self.address} answered {len(grouped.results)} results "
                f"for {len(requests)} groups",
                operation="model.grouped_predict",
            )
        out: list[ModelPrediction | Error] = []
        for result in grouped.results:
            if result.response is not None:
                out.append(ModelPrediction(result.response, timings, group_size=len(requests)))
            else:
                error = result.error or model_v1.ModelError(message="empty grouped result")
                out.append(wire_error_to_model(error, operation="model.predict"))
        return out

    async def reset_adapter(self, request: model_v1.ResetAdapterRequest) -> None:
        response = await self.request(
            model_v1.JoinRequest(reset_adapter=request, request_id=_rid(request.context)),
            operation="model.reset_adapter",
        )
        self._expect(response, "reset_adapter", "model.reset_adapter")

    async def release_adapter(self, request: model_v1.ReleaseAdapterRequest) -> None:
        response = await self.request(
            model_v1.JoinRequest(release_adapter=request, request_id=_rid(request.context)),
            operation="model.release_adapter",
        )
        self._expect(response, "release_adapter", "model.release_adapter")

    async def close(self, reason: str = "client close") -> None:
        """Send CloseParticipant (the server releases every adapter) and drop the stream."""
        with trio.CancelScope(shield=True):
            await self._portal.run(self._join.close, reason)

    async def shutdown(self, reason: str = "") -> core_v1.ShutdownResponse:
        """Ask the server process to stop (refused unless it allows remote shutdown)."""
        request = model_v1.ShutdownRequest(base=core_v1.ShutdownRequest(reason=reason))
        try:
            response = await self._portal.run(
                self._join.unary, MODEL_SHUTDOWN, request, model_v1.ShutdownResponse
            )
        except Exception as exc:
            raise map_grpc_error(
                exc,
                operation="model.shutdown",
                address=self.address,
                token_sent=self._join.token_sent,
            ) from exc
        return response.base or core_v1.ShutdownResponse()


def _rid(context: model_v1.AdapterContext | None) -> str:
    return context.request_id if context is not None else ""


@contextlib.asynccontextmanager
async def open_model_client(
    address: str, *, token: str | None = None, close_reason: str | None = None
) -> AsyncIterator[ModelClient]:
    """Connect to a model endpoint, handshake, open the Join stream.

    On exit the stream is dropped (or closed with CloseParticipant when ``close_reason``
    is given, which releases every adapter on the server).

    Raises:
        TransportError: the connection or handshake failed (UNAUTHENTICATED for a bad token).
        SpecError: the server is not generation-compatible or shares no workflow edition.
    """
    target = parse_address(address)
    join = _ModelJoin(
        target.host if target.kind != "unix" else None,
        target.port if target.kind != "unix" else None,
        target.path if target.kind == "unix" else None,
        token,
    )
    shown = str(target)
    async with open_portal() as portal:
        try:
            try:
                reply = await portal.run(
                    join.handshake,
                    model_v1.HandshakeRequest(base=handshake_request(COMPONENT_MODEL)),
                )
                base = reply.base
                if base is None:
                    raise ProtocolError(f"the model at {shown} sent a handshake with no base")
                if not base.compatible:
                    raise SpecError(f"the model at {shown} is incompatible: {base.error_message}")
                if (
                    highest_shared_edition(
                        base.supported_workflow_editions, SUPPORTED_WORKFLOW_EDITIONS
                    )
                    is None
                ):
                    raise SpecError(
                        f"no mutual workflow edition with the model at {shown}: it offers "
                        f"{list(base.supported_workflow_editions)}, this client "
                        f"{list(SUPPORTED_WORKFLOW_EDITIONS)}"
                    )
                await portal.run(join.open)
            except Error:
                raise
            except Exception as exc:
                raise map_grpc_error(
                    exc, operation="model.connect", address=shown, token_sent=join.token_sent
                ) from exc
            client = ModelClient(portal, join, shown, base)
            yield client
        finally:
            with trio.CancelScope(shield=True):
                await portal.run(join.close, close_reason)


class ModelClientRuntimeModel:
    """A remote model as a :class:`~trio_rlmesh.runtime.RuntimeModel`.

    ``predict_group`` sends one GroupedPredict (a server may fuse the groups into one
    forward); ``predict`` a plain Predict.
    """

    def __init__(self, client: ModelClient, *, wants_history: bool = False) -> None:
        self.client = client
        self._wants_history = wants_history

    @property
    def wants_history(self) -> bool:
        return self._wants_history

    @property
    def fuses_predicts(self) -> bool:
        return True

    async def resolve(
        self,
        env_id: str,
        env_spec: core_v1.EnvSpec,
        *,
        session_id: str = "",
        execution_horizon: int = 1,
        delivers_history: bool = True,
        workflow_edition: str | None = None,
    ) -> RouteNeeds:
        """ResolveAdapter for ``env_id`` (request id ``<env_id>:resolve_adapter``).

        Sets :attr:`wants_history` from the answer.

        Raises:
            ModelError: the model refused the route.
        """
        edition = workflow_edition or highest_shared_edition(
            self.client.supported_workflow_editions, SUPPORTED_WORKFLOW_EDITIONS
        )
        response = await self.client.resolve_adapter(
            model_v1.ResolveAdapterRequest(
                context=model_v1.AdapterContext(
                    session_id=session_id, env_id=env_id, request_id=f"{env_id}:resolve_adapter"
                ),
                env_spec=env_spec,
                selected_workflow_edition=edition or "",
                execution_horizon=max(1, execution_horizon),
                delivers_history=delivers_history,
            )
        )
        history = tuple(response.history.keys) if response.history is not None else None
        self._wants_history = history is not None
        return RouteNeeds(history=history, native_chunk=response.native_chunk)

    async def predict(self, request: model_v1.PredictRequest) -> ModelPrediction:
        return await self.client.predict(request)

    async def predict_group(
        self, requests: Sequence[model_v1.PredictRequest]
    ) -> list[ModelPrediction | Error]:
        if len(requests) == 1:
            try:
                return [await self.client.predict(requests[0])]
            except ModelError as exc:
                return [exc]
        try:
            return await self.client.grouped_predict(requests)
        except ModelError as exc:
            return [exc] * len(requests)

    async def reset_adapter(self, request: model_v1.ResetAdapterRequest) -> None:
        await self.client.reset_adapter(request)

    async def release_adapter(
        self,
        request: model_v1.ReleaseAdapterRequest,
        timeout: float,  # noqa: ASYNC109
    ) -> None:
        with trio.move_on_after(timeout):
            await self.client.release_adapter(request)


_ = TransportError  # re-exported through map_grpc_error's results
