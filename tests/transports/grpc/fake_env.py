"""A scriptable EnvService for the env client tests, on the trio backend's server.

It answers like an rlmesh 0.1.0 env server in the ways the client cares about, and can be
told to misbehave at a chosen step (see :data:`Fault`). Replies identify their request: a
step's observation echoes the action's leaves and its reward is the action's first byte,
so a test can tell whose reply it got.

Every Join request also goes into :attr:`FakeEnvService.inbox`, so a test can wait until
the fake has a request instead of sleeping; :attr:`FakeEnvService.hold` keeps chosen
requests unanswered until the test releases them.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncIterator, Callable
from typing import Any, Literal

import attrs
import betterproto2
import h2.errors
import trio

from trio_rlmesh.protocol import PROTOCOL_GENERATION, WORKFLOW_EDITION, core_v1, env_v1, spaces_v1
from trio_rlmesh.transports.grpc._codec import decode, encode
from trio_rlmesh.transports.grpc._handshake import (
    ENV_HANDSHAKE,
    ENV_JOIN,
    ENV_SHUTDOWN,
    handshake_response,
)
from trio_rlmesh.transports.grpc._status import ConnectionLost, GrpcError, Status
from trio_rlmesh.transports.grpc._trio_backend import TrioServerCall

from .wire import FakeServer, open_fake_server

SPACE = spaces_v1.SpaceSpec(discrete=spaces_v1.DiscreteSpec(n=2))
BUSY_MESSAGE = (
    "environment already has an active Join session; only one client may be connected at a time"
)
FATAL_MESSAGE = "step failed: ValueError: the env broke"

Fault = Literal[
    "drop",  # close the connection instead of answering (no status)
    "reset",  # RST_STREAM(CANCEL) instead of answering
    "freeze",  # stop reading and answering (keepalive PINGs included)
    "silent",  # never answer this request (the stream and connection go on)
    "error",  # a recoverable in-band INVALID_ACTION
    "timeout",  # the server's own in-band TIMEOUT, at once
    "wrong_kind",  # a reset reply to a step
    "fatal_reset",  # RLMesh on a raising env: in-band INTERNAL, then RST_STREAM
    "fatal_end",  # in-band INTERNAL, then OK trailers
    "fatal_cancel",  # in-band INTERNAL, then RST_STREAM(CANCEL)
]


@attrs.define(eq=False)
class Held:
    """A request the fake keeps unanswered until the test sets ``release``."""

    request: Any
    release: trio.Event = attrs.Factory(trio.Event)


@attrs.define(eq=False)
class FakeEnvService:
    """Knobs and records of the fake env server (set and read them from tests)."""

    token: str | None = None
    editions: list[str] = attrs.Factory(lambda: [WORKFLOW_EDITION])
    capabilities: dict[str, str] = attrs.Factory(dict)
    num_envs: int = 1
    generation: str = PROTOCOL_GENERATION
    """The only generation this fake accepts."""
    contract: bool = True
    base: bool = True
    """Answer the handshake with a base (``False``: an answer no 0.1.0 server sends)."""
    busy_joins: int = 0
    """Refuse this many Joins with FAILED_PRECONDITION (trailers-only, then RST_STREAM
    NO_ERROR when the client has not half-closed) before accepting one."""
    concurrent: bool = False
    """Answer Join requests concurrently (replies may overtake each other)."""
    faults: dict[int, Fault] = attrs.Factory(dict)
    """Misbehave at these steps (1-based, counted over the fake's lifetime)."""
    hold: Callable[[env_v1.JoinRequest], bool] = lambda _: False
    """Requests to keep unanswered until their :class:`Held` is released."""
    configure_error: bool = False
    extra_stale: bool = False
    """Before each step reply, send a reply with an id nobody asked for."""
    reset_after_close: bool = True
    """Reset the stream right after answering a Close that did not end the client's side,
    as rlmesh 0.1.0 does."""
    server: FakeServer | None = None

    joins_refused: int = 0
    joins: int = 0
    steps: int = 0
    requests: list[env_v1.JoinRequest] = attrs.Factory(list)
    handshakes: list[env_v1.HandshakeRequest] = attrs.Factory(list)
    metadata: list[dict[str, str]] = attrs.Factory(list)
    deadlines: list[str | None] = attrs.Factory(list)
    """Each call's ``grpc-timeout`` header, as sent (``None``: none, as RLMesh's clients)."""
    held: list[Held] = attrs.Factory(list)
    join_ended: list[str] = attrs.Factory(list)
    """How each Join ended: ``"close"`` (Close received), ``"eof"`` or ``"cancelled"``."""
    join_done: trio.Event = attrs.Factory(trio.Event)
    eof_with_close: list[bool] = attrs.Factory(list)
    """Per Close received: whether the client had already ended its side with it."""
    _inbox_in: trio.MemorySendChannel[env_v1.JoinRequest] = attrs.field(init=False)
    inbox: trio.MemoryReceiveChannel[env_v1.JoinRequest] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._inbox_in, self.inbox = trio.open_memory_channel[env_v1.JoinRequest](math.inf)

    def handlers(self) -> dict[str, Callable[[TrioServerCall], object]]:
        return {ENV_HANDSHAKE: self._handshake, ENV_JOIN: self._join, ENV_SHUTDOWN: self._shutdown}

    def _record(self, call: TrioServerCall) -> None:
        self.metadata.append(dict(call.metadata))
        self.deadlines.append((call._stream.headers or {}).get("grpc-timeout"))
        if self.token is not None and call.metadata.get("authorization") != self.token:
            raise GrpcError(Status.UNAUTHENTICATED, "invalid env token")

    async def _handshake(self, call: TrioServerCall) -> None:
        self._record(call)
        data = await call.receive_message()
        assert data is not None
        request = decode(env_v1.HandshakeRequest, data)
        self.handshakes.append(request)
        assert request.base is not None
        base = handshake_response(
            "rlmesh-env", request.base, capabilities=self.capabilities, editions=self.editions
        )
        if request.base.protocol_generation != self.generation:
            base.compatible = False
            base.error_message = f"protocol generation mismatch, want {self.generation}"
        response = env_v1.HandshakeResponse(base=base if self.base else None)
        if base.compatible and self.contract:
            response.env_contract = core_v1.EnvContract(
                spec=core_v1.EnvSpec(id="Fake-v0", action_space=SPACE, observation_space=SPACE),
                num_envs=self.num_envs,
                autoreset_mode=core_v1.AutoresetMode.DISABLED,
            )
        await call.send_message(encode(response))

    async def _shutdown(self, call: TrioServerCall) -> None:
        self._record(call)
        await call.receive_message()
        reply = env_v1.ShutdownResponse(base=core_v1.ShutdownResponse(accepted=False, message="no"))
        await call.send_message(encode(reply))

    async def _join(self, call: TrioServerCall) -> None:
        self._record(call)
        if self.joins_refused < self.busy_joins:
            self.joins_refused += 1
            raise GrpcError(Status.FAILED_PRECONDITION, BUSY_MESSAGE)
        self.joins += 1
        # rlmesh's clients wait for the headers before sending: send them now.
        await call.send_initial_metadata()
        ended = "eof"
        try:
            async with trio.open_nursery() as nursery:
                while True:
                    data = await call.receive_message()
                    if data is None:
                        break
                    request = decode(env_v1.JoinRequest, data)
                    self.requests.append(request)
                    held = Held(request) if self.hold(request) else None
                    if held is not None:
                        self.held.append(held)
                    self._inbox_in.send_nowait(request)
                    kind, _ = betterproto2.which_one_of(request, "kind")
                    if kind == "close":
                        ended = "close"
                        await self._close(call, request)
                        return
                    fault: Fault | None = None
                    if kind == "step":
                        self.steps += 1
                        fault = self.faults.get(self.steps)
                    if fault is not None and await self._fault(call, request, fault):
                        return
                    if fault in (None, "error", "timeout", "wrong_kind"):
                        if self.concurrent:
                            nursery.start_soon(self._answer, call, request, held)
                        else:
                            await self._answer(call, request, held)
        except (ConnectionLost, trio.Cancelled):
            ended = "cancelled"
            raise
        finally:
            self.join_ended.append(ended)
            self.join_done.set()

    async def _close(self, call: TrioServerCall, request: env_v1.JoinRequest) -> None:
        stream = call._stream
        # With END_STREAM in Close's own frame, the stream is half-closed by now.
        half_closed = stream.remote_ended
        self.eof_with_close.append(half_closed)
        await self._answer(call, request)
        if self.reset_after_close and not half_closed:
            # Like rlmesh: a client still sending gets RST_STREAM.
            stream.connection.reset(stream, h2.errors.ErrorCodes.NO_ERROR)

    async def _fault(self, call: TrioServerCall, request: env_v1.JoinRequest, fault: Fault) -> bool:
        """Misbehave; returns whether the Join handler ends here."""
        stream = call._stream
        conn = stream.connection
        if fault == "drop":
            conn.abort("the fake dropped the connection")
            return True
        if fault == "reset":
            conn.reset(stream, h2.errors.ErrorCodes.CANCEL)
            return True
        if fault == "freeze":
            assert self.server is not None
            self.server.valve.freeze()
            await trio.sleep_forever()
        if fault in ("fatal_reset", "fatal_end", "fatal_cancel"):
            reply = env_v1.JoinResponse(
                request_id=request.request_id,
                endpoint_total_ns=1,
                error=env_v1.EnvError(code=env_v1.EnvErrorCode.INTERNAL, message=FATAL_MESSAGE),
            )
            await call.send_message(encode(reply))
            if fault == "fatal_reset":
                conn.reset(stream, h2.errors.ErrorCodes.NO_ERROR)
            elif fault == "fatal_cancel":
                conn.reset(stream, h2.errors.ErrorCodes.CANCEL)
            return True
        return False

    def _reply(self, request: env_v1.JoinRequest) -> env_v1.JoinResponse:
        kind, body = betterproto2.which_one_of(request, "kind")
        reply = env_v1.JoinResponse(request_id=request.request_id, endpoint_total_ns=1234)
        if kind == "configure":
            if self.configure_error:
                reply.error = env_v1.EnvError(
                    code=env_v1.EnvErrorCode.INVALID_ACTION, message="unsupported edition"
                )
            else:
                reply.configure = env_v1.ConfigureEnvResponse()
        elif kind == "reset":
            assert isinstance(body, env_v1.ResetRequest)
            seed = body.seeds[0] if body.seeds else 0
            reply.reset = env_v1.ResetResponse(
                observation=spaces_v1.SpaceValue(leaves=[seed.to_bytes(8, "little")])
            )
            reply.user_ns = 99
        elif kind == "step":
            assert isinstance(body, env_v1.StepRequest)
            fault = self.faults.get(self.steps)
            if fault == "error":
                reply.error = env_v1.EnvError(
                    code=env_v1.EnvErrorCode.INVALID_ACTION,
                    message="action out of range",
                    is_recoverable=True,
                    interrupted_episodes=[env_v1.EpisodeMetadata(episode_id="ep-1")],
                )
            elif fault == "timeout":
                reply.error = env_v1.EnvError(
                    code=env_v1.EnvErrorCode.TIMEOUT,
                    message="env.step timed out after 100ms",
                    is_recoverable=True,
                )
            elif fault == "wrong_kind":
                reply.reset = env_v1.ResetResponse()
            else:
                leaves = list(body.action.leaves) if body.action is not None else []
                reply.step = env_v1.StepResponse(
                    observation=spaces_v1.SpaceValue(leaves=leaves),
                    rewards=[float(leaves[0][0]) if leaves and leaves[0] else 0.0],
                    terminated_mask=b"\x00",
                    truncated_mask=b"\x00",
                    env_indices=list(body.env_indices),
                )
        elif kind == "render":
            reply.render = env_v1.RenderResponse(frame=b"png", format=env_v1.RenderFormat.PNG)
        elif kind == "close":
            reply.close = env_v1.CloseEnvsResponse(
                final_episodes=[env_v1.EpisodeMetadata(episode_id="last", truncated=True)]
            )
        else:
            reply.error = env_v1.EnvError(code=env_v1.EnvErrorCode.UNSUPPORTED, message=kind)
        return reply

    async def _answer(
        self, call: TrioServerCall, request: env_v1.JoinRequest, held: Held | None = None
    ) -> None:
        reply = self._reply(request)
        if held is not None:
            await held.release.wait()
        if self.extra_stale and reply.step is not None:
            stale = env_v1.JoinResponse(request_id="grpc-req-999999", step=env_v1.StepResponse())
            await call.send_message(encode(stale))
        await call.send_message(encode(reply))


@contextlib.asynccontextmanager
async def serve_fake_env(service: FakeEnvService, address: str) -> AsyncIterator[FakeServer]:
    """Run ``service`` on ``address`` for the duration of the block."""
    async with open_fake_server(service.handlers(), address) as server:  # type: ignore[arg-type]
        service.server = server
        yield server
