"""A trio client for a remote model endpoint (``rlmesh.model.v1.ModelService``).

On the wire it behaves like the 0.1.0 model client: Handshake (component
``rlmesh-model``), then one Join stream opened right away. Requests are pipelined over
:class:`~._join.JoinMux`: the envelope ``request_id`` is the context's request id (or
``model-grpc-req-<n>`` when it has none, and always for a grouped predict) and replies are
matched by it, so any number of requests may be in flight.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

import betterproto2
import trio

from ..._errors import Error, ModelError, ProtocolError
from ..._timeouts import CLOSE_TIMEOUT
from ...model._internal import wire_error_to_model
from ...protocol import SUPPORTED_WORKFLOW_EDITIONS, core_v1, model_v1
from ...runtime import EndpointTimings, ModelPrediction, RuntimeModel
from ._backend import BackendName, Channel
from ._codec import decode, encode
from ._errors import map_transport_error
from ._handshake import (
    MODEL_JOIN,
    MODEL_SHUTDOWN,
    auth_metadata,
    connecting,
    handshake,
)
from ._join import JoinMux
from ._registry import get_backend
from ._settings import DEFAULT_SETTINGS, GrpcSettings

__all__ = ["ModelClient", "ModelClientRuntimeModel", "open_model_client"]


class ModelClient:
    """A connected, handshaken model endpoint; get one from :func:`open_model_client`."""

    def __init__(
        self,
        channel: Channel,
        mux: JoinMux[model_v1.JoinResponse],
        address: str,
        handshake: core_v1.HandshakeResponse,
        metadata: dict[str, str] | None,
    ) -> None:
        self._channel = channel
        self._mux = mux
        self._metadata = metadata
        self._ids: itertools.count[int] = itertools.count(1)
        self.address = address
        self.handshake = handshake
        """The server's core HandshakeResponse (capabilities, editions, PeerInfo)."""

    @property
    def capabilities(self) -> dict[str, str]:
        return dict(self.handshake.capabilities)

    @property
    def supported_workflow_editions(self) -> list[str]:
        return list(self.handshake.supported_workflow_editions)

    def _error(self, exc: BaseException, operation: str) -> Error:
        return map_transport_error(
            exc,
            operation=operation,
            address=self.address,
            token_sent=self._metadata is not None,
        )

    async def request(
        self, request: model_v1.JoinRequest, *, operation: str, end: bool = False
    ) -> model_v1.JoinResponse:
        """One Join round trip; transport failures become :class:`~trio_rlmesh.TransportError`."""
        if not request.request_id:
            request.request_id = f"model-grpc-req-{next(self._ids)}"
        try:
            reply, _ = await self._mux.request(request.request_id, encode(request), end=end)
        except ValueError as exc:
            raise ProtocolError(str(exc), operation=operation, address=self.address) from None
        except Error:
            raise
        except Exception as exc:
            raise self._error(exc, operation) from exc
        return reply

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
            await self._close(reason)

    async def _close(self, reason: str | None) -> None:
        mux = self._mux
        try:
            if reason is not None and mux.failure is None:
                mux.closing = True
                request = model_v1.JoinRequest(
                    close=model_v1.CloseParticipantRequest(reason=reason)
                )
                with trio.move_on_after(CLOSE_TIMEOUT), contextlib.suppress(Error):
                    await self.request(request, operation="model.close", end=True)
        finally:
            await mux.aclose()

    async def shutdown(self, reason: str = "") -> core_v1.ShutdownResponse:
        """Ask the server process to stop (refused unless it allows remote shutdown)."""
        request = model_v1.ShutdownRequest(base=core_v1.ShutdownRequest(reason=reason))
        try:
            data = await self._channel.unary(MODEL_SHUTDOWN, encode(request), self._metadata)
            response = decode(model_v1.ShutdownResponse, data)
        except Exception as exc:
            raise self._error(exc, "model.shutdown") from exc
        return response.base or core_v1.ShutdownResponse()


def _rid(context: model_v1.AdapterContext | None) -> str:
    return context.request_id if context is not None else ""


def _request_id(reply: model_v1.JoinResponse) -> str:
    return reply.request_id


@contextlib.asynccontextmanager
async def open_model_client(
    address: str,
    *,
    token: str | None = None,
    close_reason: str | None = None,
    connect_timeout: float = 10.0,
    editions: Iterable[str] = SUPPORTED_WORKFLOW_EDITIONS,
    backend: BackendName = "trio",
    settings: GrpcSettings = DEFAULT_SETTINGS,
) -> AsyncIterator[ModelClient]:
    """Connect to a model endpoint, handshake, open the Join stream.

    On exit the stream is dropped (or closed with CloseParticipant when ``close_reason``
    is given, which releases every adapter on the server).

    Args:
        address: ``host:port``, ``tcp://host:port``, ``unix:///path`` or ``memory://name``.
        token: sent raw in the ``authorization`` header of every call (none if empty).
        close_reason: close with CloseParticipant on exit, giving this reason.
        connect_timeout: seconds for connecting, the handshake and opening the Join stream.
        editions: workflow editions this client accepts, most preferred first.
        backend: ``"trio"`` (default) or ``"grpclib"``.
        settings: message size limit, keepalive and flow-control windows.

    Raises:
        ProtocolError: the server refused this protocol generation, or shares no workflow
            edition with ``editions``.
        TransportError: the server is unreachable, is not a model server, or refused the
            token.
        OperationTimeout: connecting took longer than ``connect_timeout`` (recoverable).

    Every error names the operation ``model.handshake`` (see
    :mod:`~trio_rlmesh.transports.grpc._handshake` for the rules, the env client's too).
    """
    editions = tuple(editions)
    metadata = auth_metadata(token)
    async with get_backend(backend).open_channel(address, settings) as channel:
        shown = channel.label
        with connecting("model", shown, timeout=connect_timeout, token_sent=metadata is not None):
            shake = await handshake(channel, "model", editions=editions, metadata=metadata)
            call = await channel.open_call(MODEL_JOIN, metadata)
        mux: JoinMux[model_v1.JoinResponse] = JoinMux(
            call, lambda reply: decode(model_v1.JoinResponse, reply), _request_id
        )
        mux.start()
        client = ModelClient(channel, mux, shown, shake.base, metadata)
        try:
            yield client
        finally:
            with trio.CancelScope(shield=True):
                await client._close(close_reason)


class ModelClientRuntimeModel(RuntimeModel):
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
        self, request: model_v1.ResolveAdapterRequest
    ) -> model_v1.ResolveAdapterResponse:
        """ResolveAdapter on the server; sets :attr:`wants_history` from the answer.

        Raises:
            ModelError: the model refused the route.
        """
        response = await self.client.resolve_adapter(request)
        self._wants_history = response.history is not None
        return response

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
        # The caller bounds the call (the driver by ``timeout``): no second timer here.
        await self.client.release_adapter(request)
