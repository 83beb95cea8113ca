"""A scriptable in-process EnvService on grpclib's real server, for client tests.

The fake runs on the portal's asyncio loop (the same one the client uses) and
listens on 127.0.0.1 with an OS-assigned port. It answers like an rlmesh 0.1.0
env server in the ways the client cares about and can be told to misbehave:
refuse Joins as busy, demand a token, answer out of order, drop the
connection, answer with the wrong kind or an in-band error.

Replies identify their request: a step's observation echoes the action's leaves
and its reward is the action's first byte, so a test can tell whose reply it got.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import attrs
import betterproto2
import pytest
import trio
from grpclib.const import Cardinality, Handler, Status
from grpclib.exceptions import GRPCError
from grpclib.server import Server, Stream

from trio_rlmesh.protocol import (
    PROTOCOL_GENERATION,
    WORKFLOW_EDITION,
    core_v1,
    env_v1,
    spaces_v1,
)
from trio_rlmesh.transports.grpc import Portal, open_portal
from trio_rlmesh.transports.grpc._common import (
    ENV_HANDSHAKE,
    ENV_JOIN,
    ENV_SHUTDOWN,
    check_token,
    handshake_response,
)

SPACE = spaces_v1.SpaceSpec(discrete=spaces_v1.DiscreteSpec(n=2))


@attrs.define
class FakeEnvService:
    """Knobs and records of the fake env server (read and set them from tests)."""

    token: str | None = None
    editions: list[str] = attrs.Factory(lambda: [WORKFLOW_EDITION])
    capabilities: dict[str, str] = attrs.Factory(dict)
    num_envs: int = 1
    generation: str = PROTOCOL_GENERATION
    """The only generation this fake accepts."""
    contract: bool = True
    busy_joins: int = 0
    """Refuse this many Joins with FAILED_PRECONDITION before accepting one."""
    concurrent: bool = False
    """Handle Join requests concurrently (replies may overtake each other)."""
    hold: Callable[[env_v1.JoinRequest], bool] = lambda _: False
    """Sit on each request this is true for until the test releases it
    (:meth:`FakeEnvServer.release`); it waits in :attr:`held` meanwhile."""
    drop_on_step: int | None = None
    """Close the connection instead of answering the n-th step (1-based)."""
    wrong_kind_on_step: int | None = None
    error_on_step: int | None = None
    configure_error: bool = False
    extra_stale: bool = False
    reset_after_close: bool = True
    """Reset the HTTP/2 stream right after answering a Close that did not end the client's
    side, as rlmesh 0.1.0 does (trap 4)."""
    """Before each step reply, send a reply with an id nobody asked for."""

    joins_refused: int = 0
    joins: int = 0
    steps: int = 0
    requests: list[env_v1.JoinRequest] = attrs.Factory(list)
    handshakes: list[env_v1.HandshakeRequest] = attrs.Factory(list)
    metadata: list[dict[str, str]] = attrs.Factory(list)
    join_ended: list[str] = attrs.Factory(list)
    eof_with_close: list[bool] = attrs.Factory(list)
    """Per Close received: whether the client had already ended its side with it."""
    """How each Join ended: ``"close"`` (Close received), ``"eof"`` or ``"cancelled"``."""
    held: list[tuple[env_v1.JoinRequest, asyncio.Event]] = attrs.Factory(list)
    """The requests the fake is sitting on, each with the event that releases it."""
    listeners: list[Callable[[], None]] = attrs.Factory(list)
    """Called on the portal's loop whenever a request, a held request or a Join's end is
    recorded (see :meth:`FakeEnvServer.wait_for`)."""

    def _changed(self) -> None:
        for listener in list(self.listeners):
            listener()

    def __mapping__(self) -> dict[str, Handler]:
        return {
            ENV_HANDSHAKE: Handler(
                self._handshake,
                Cardinality.UNARY_UNARY,
                env_v1.HandshakeRequest,
                env_v1.HandshakeResponse,
            ),
            ENV_JOIN: Handler(
                self._join, Cardinality.STREAM_STREAM, env_v1.JoinRequest, env_v1.JoinResponse
            ),
            ENV_SHUTDOWN: Handler(
                self._shutdown,
                Cardinality.UNARY_UNARY,
                env_v1.ShutdownRequest,
                env_v1.ShutdownResponse,
            ),
        }

    def _record(self, stream: Stream[Any, Any]) -> None:
        assert stream.metadata is not None
        self.metadata.append(dict(stream.metadata))

    async def _handshake(self, stream: Stream[Any, Any]) -> None:
        self._record(stream)
        await check_token(stream, self.token)
        request = await stream.recv_message()
        assert request is not None
        self.handshakes.append(request)
        base = handshake_response(
            "rlmesh-env", request.base, capabilities=self.capabilities, editions=self.editions
        )
        if request.base.protocol_generation != self.generation:
            base.compatible = False
            base.error_message = f"protocol generation mismatch, want {self.generation}"
        response = env_v1.HandshakeResponse(base=base)
        if base.compatible and self.contract:
            response.env_contract = core_v1.EnvContract(
                spec=core_v1.EnvSpec(id="Fake-v0", action_space=SPACE, observation_space=SPACE),
                num_envs=self.num_envs,
                autoreset_mode=core_v1.AutoresetMode.DISABLED,
            )
        await stream.send_message(response)

    async def _shutdown(self, stream: Stream[Any, Any]) -> None:
        self._record(stream)
        await stream.recv_message()
        await stream.send_message(
            env_v1.ShutdownResponse(base=core_v1.ShutdownResponse(accepted=False, message="no"))
        )

    async def _join(self, stream: Stream[Any, Any]) -> None:
        self._record(stream)
        await check_token(stream, self.token)
        if self.joins_refused < self.busy_joins:
            self.joins_refused += 1
            raise GRPCError(Status.FAILED_PRECONDITION, "environment already has an active Join")
        self.joins += 1
        # rlmesh's clients wait for headers before sending (trap 5): send them now.
        await stream.send_initial_metadata()
        send_lock = asyncio.Lock()
        tasks: set[asyncio.Task[None]] = set()
        ended = "eof"
        try:
            while True:
                request = await stream.recv_message()
                if request is None:
                    break
                self.requests.append(request)
                self._changed()
                kind, _ = betterproto2.which_one_of(request, "kind")
                if kind == "step":
                    self.steps += 1
                    if self.steps == self.drop_on_step:
                        stream._stream._transport.close()
                        return
                if kind == "close":
                    for task in list(tasks):
                        await task
                    # With END_STREAM in Close's own frame, h2 has already half-closed
                    # the stream by the time the message is handed to us.
                    h2_stream = stream._stream._h2_connection.streams.get(stream._stream.id)
                    half_closed = h2_stream is None or h2_stream.state_machine.state.name in (
                        "HALF_CLOSED_REMOTE",
                        "CLOSED",
                    )
                    self.eof_with_close.append(half_closed)
                    await self._answer(stream, send_lock, request)
                    ended = "close"
                    if self.reset_after_close and not half_closed:
                        # Like rlmesh: a client still sending gets RST_STREAM, which
                        # makes grpclib drop the answer it has not read yet.
                        await stream.cancel()
                    break
                if self.concurrent:
                    task = asyncio.create_task(self._answer(stream, send_lock, request))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                else:
                    await self._answer(stream, send_lock, request)
        except asyncio.CancelledError:
            ended = "cancelled"
            raise
        finally:
            for task in list(tasks):
                task.cancel()
            self.join_ended.append(ended)
            self._changed()

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
            n = self.steps
            if n == self.error_on_step:
                reply.error = env_v1.EnvError(
                    code=env_v1.EnvErrorCode.INVALID_ACTION,
                    message="action out of range",
                    is_recoverable=True,
                    interrupted_episodes=[env_v1.EpisodeMetadata(episode_id="ep-1")],
                )
            elif n == self.wrong_kind_on_step:
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
        self, stream: Stream[Any, Any], lock: asyncio.Lock, request: env_v1.JoinRequest
    ) -> None:
        if self.hold(request):
            released = asyncio.Event()
            self.held.append((request, released))
            self._changed()
            await released.wait()
        reply = self._reply(request)
        async with lock:
            if self.extra_stale and reply.step is not None:
                await stream.send_message(
                    env_v1.JoinResponse(request_id="grpc-req-999999", step=env_v1.StepResponse())
                )
            await stream.send_message(reply)


@attrs.define
class FakeEnvServer:
    service: FakeEnvService
    address: str
    portal: Portal

    async def release(self, request: env_v1.JoinRequest | None = None) -> None:
        """Let the fake answer a held ``request`` (``None``: every held one)."""

        async def on_loop() -> None:
            keep = []
            for held, released in self.service.held:
                if request is None or held is request:
                    released.set()
                else:
                    keep.append((held, released))
            self.service.held[:] = keep

        await self.portal.run(on_loop)

    async def wait_for(self, condition: Callable[[FakeEnvService], bool]) -> None:
        """Return once ``condition(service)`` holds, checked after each change the fake records.

        The fake runs on the portal's thread; it wakes this trio task through the run's token.
        """
        token = trio.lowlevel.current_trio_token()
        wake = [trio.Event()]

        def listener() -> None:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(lambda: wake[0].set())

        self.service.listeners.append(listener)
        try:
            while True:
                wake[0] = trio.Event()
                if condition(self.service):
                    return
                await wake[0].wait()
        finally:
            self.service.listeners.remove(listener)


async def _start(service: FakeEnvService) -> tuple[Server, int]:
    server = Server([service])
    await server.start("127.0.0.1", 0)
    assert server._server is not None
    port = server._server.sockets[0].getsockname()[1]
    return server, port


async def _stop(server: Server) -> None:
    server.close()
    await server.wait_closed()


@contextlib.asynccontextmanager
async def serve_fake_env(service: FakeEnvService) -> AsyncIterator[FakeEnvServer]:
    """Run ``service`` on 127.0.0.1:0 for the duration of the block."""
    async with open_portal() as portal:
        server, port = await portal.run(_start, service)
        try:
            yield FakeEnvServer(service, f"127.0.0.1:{port}", portal)
        finally:
            with trio.CancelScope(shield=True):
                await portal.run(_stop, server)


@pytest.fixture
async def fake_env() -> AsyncIterator[FakeEnvServer]:
    """A fake env server with default behaviour; tweak ``fake_env.service`` before use."""
    async with serve_fake_env(FakeEnvService()) as server:
        yield server
