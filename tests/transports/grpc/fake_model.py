"""A scriptable ModelService for the model client tests, on the trio backend's server.

Predict replies echo the request's context and carry one action frame whose leaf is the
observation's first leaf, so a test can tell whose reply it got. Every Join request goes
into :attr:`FakeModelService.inbox`; :attr:`FakeModelService.hold` keeps chosen requests
unanswered until the test releases them (replies then go out in release order).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncIterator, Callable
from typing import Literal

import attrs
import betterproto2
import trio

from trio_rlmesh.protocol import PROTOCOL_GENERATION, WORKFLOW_EDITION, core_v1, model_v1, spaces_v1
from trio_rlmesh.transports.grpc._codec import decode, encode
from trio_rlmesh.transports.grpc._handshake import (
    MODEL_HANDSHAKE,
    MODEL_JOIN,
    MODEL_SHUTDOWN,
    handshake_response,
)
from trio_rlmesh.transports.grpc._status import ConnectionLost, GrpcError, Status
from trio_rlmesh.transports.grpc._trio_backend import TrioServerCall

from .fake_env import Held
from .wire import FakeServer, open_fake_server

ModelFault = Literal["drop", "freeze", "error", "wrong_kind", "short_group"]


@attrs.define(eq=False)
class FakeModelService:
    token: str | None = None
    editions: list[str] = attrs.Factory(lambda: [WORKFLOW_EDITION])
    generation: str = PROTOCOL_GENERATION
    base: bool = True
    faults: dict[int, ModelFault] = attrs.Factory(dict)
    """Misbehave at these predicts, grouped or not (1-based, over the fake's lifetime)."""
    hold: Callable[[model_v1.JoinRequest], bool] = lambda _: False
    server: FakeServer | None = None

    predicts: int = 0
    requests: list[model_v1.JoinRequest] = attrs.Factory(list)
    metadata: list[dict[str, str]] = attrs.Factory(list)
    deadlines: list[str | None] = attrs.Factory(list)
    """Each call's ``grpc-timeout`` header, as sent (``None``: none, as RLMesh's clients)."""
    held: list[Held] = attrs.Factory(list)
    join_ended: list[str] = attrs.Factory(list)
    close_half_closed: list[bool] = attrs.Factory(list)
    join_done: trio.Event = attrs.Factory(trio.Event)
    _inbox_in: trio.MemorySendChannel[model_v1.JoinRequest] = attrs.field(init=False)
    inbox: trio.MemoryReceiveChannel[model_v1.JoinRequest] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._inbox_in, self.inbox = trio.open_memory_channel[model_v1.JoinRequest](math.inf)

    def handlers(self) -> dict[str, Callable[[TrioServerCall], object]]:
        return {
            MODEL_HANDSHAKE: self._handshake,
            MODEL_JOIN: self._join,
            MODEL_SHUTDOWN: self._shutdown,
        }

    def _record(self, call: TrioServerCall) -> None:
        self.metadata.append(dict(call.metadata))
        self.deadlines.append((call._stream.headers or {}).get("grpc-timeout"))
        if self.token is not None and call.metadata.get("authorization") != self.token:
            raise GrpcError(Status.UNAUTHENTICATED, "invalid route token")

    async def _handshake(self, call: TrioServerCall) -> None:
        self._record(call)
        data = await call.receive_message()
        assert data is not None
        request = decode(model_v1.HandshakeRequest, data)
        assert request.base is not None
        base = handshake_response(
            "rlmesh-model",
            request.base,
            capabilities={"concurrent_predict": "true"},
            editions=self.editions,
        )
        if request.base.protocol_generation != self.generation:
            base.compatible = False
            base.error_message = f"protocol generation mismatch, want {self.generation}"
        reply = model_v1.HandshakeResponse(base=base if self.base else None)
        await call.send_message(encode(reply))

    async def _shutdown(self, call: TrioServerCall) -> None:
        self._record(call)
        await call.receive_message()
        reply = model_v1.ShutdownResponse(
            base=core_v1.ShutdownResponse(accepted=True, message="shutdown accepted")
        )
        await call.send_message(encode(reply))

    async def _join(self, call: TrioServerCall) -> None:
        self._record(call)
        await call.send_initial_metadata()
        ended = "eof"
        try:
            async with trio.open_nursery() as nursery:
                while (data := await call.receive_message()) is not None:
                    request = decode(model_v1.JoinRequest, data)
                    self.requests.append(request)
                    held = Held(request) if self.hold(request) else None
                    if held is not None:
                        self.held.append(held)
                    self._inbox_in.send_nowait(request)
                    kind, _ = betterproto2.which_one_of(request, "kind")
                    if kind == "close":
                        ended = "close"
                        self.close_half_closed.append(call._stream.remote_ended)
                        reply = model_v1.JoinResponse(
                            request_id=request.request_id, close=model_v1.CloseParticipantResponse()
                        )
                        await call.send_message(encode(reply))
                        return
                    fault: ModelFault | None = None
                    if kind in ("predict", "grouped_predict"):
                        self.predicts += 1
                        fault = self.faults.get(self.predicts)
                    if fault == "drop":
                        call._stream.connection.abort("the fake dropped the connection")
                        return
                    if fault == "freeze":
                        assert self.server is not None
                        self.server.valve.freeze()
                        await trio.sleep_forever()
                    nursery.start_soon(self._answer, call, request, fault, held)
        except (ConnectionLost, trio.Cancelled):
            ended = "cancelled"
            raise
        finally:
            self.join_ended.append(ended)
            self.join_done.set()

    def _reply(
        self, request: model_v1.JoinRequest, fault: ModelFault | None
    ) -> model_v1.JoinResponse:
        kind, body = betterproto2.which_one_of(request, "kind")
        reply = model_v1.JoinResponse(request_id=request.request_id, endpoint_total_ns=77)
        if fault == "error":
            reply.error = model_v1.ModelError(
                code=model_v1.ModelErrorCode.INTERNAL,
                message="the model broke",
                is_recoverable=False,
            )
        elif fault == "wrong_kind":
            reply.reset_adapter = model_v1.ResetAdapterResponse()
        elif kind == "resolve_adapter":
            reply.resolve_adapter = model_v1.ResolveAdapterResponse()
        elif kind == "predict":
            assert isinstance(body, model_v1.PredictRequest)
            reply.predict = _echo(body)
        elif kind == "grouped_predict":
            assert isinstance(body, model_v1.GroupedPredictRequest)
            groups = body.groups[:-1] if fault == "short_group" else body.groups
            reply.grouped_predict = model_v1.GroupedPredictResponse(
                results=[model_v1.GroupedPredictResult(response=_echo(g)) for g in groups]
            )
        elif kind == "reset_adapter":
            reply.reset_adapter = model_v1.ResetAdapterResponse()
        elif kind == "release_adapter":
            reply.release_adapter = model_v1.ReleaseAdapterResponse()
        else:
            reply.error = model_v1.ModelError(
                code=model_v1.ModelErrorCode.UNSUPPORTED, message=kind, is_recoverable=True
            )
        return reply

    async def _answer(
        self,
        call: TrioServerCall,
        request: model_v1.JoinRequest,
        fault: ModelFault | None,
        held: Held | None,
    ) -> None:
        reply = self._reply(request, fault)
        if held is not None:
            await held.release.wait()
        await call.send_message(encode(reply))


def _echo(request: model_v1.PredictRequest) -> model_v1.PredictResponse:
    leaves = list(request.observation.leaves[:1]) if request.observation is not None else []
    return model_v1.PredictResponse(
        context=request.context, actions=[spaces_v1.SpaceValue(leaves=leaves)]
    )


@contextlib.asynccontextmanager
async def serve_fake_model(service: FakeModelService, address: str) -> AsyncIterator[FakeServer]:
    async with open_fake_server(service.handlers(), address) as server:  # type: ignore[arg-type]
        service.server = server
        yield server
