"""A raw grpclib client and small envs for the env-server tests.

The client speaks bare messages (or raw bytes) so tests can send what a conforming client
never would. Everything grpclib runs on the portal's loop; tests stay in trio.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import attrs
import gymnasium as gym
import numpy as np
import trio
from grpclib.client import Channel, Stream
from grpclib.const import Cardinality
from grpclib.encoding.proto import ProtoCodec

from tests.gates import ThreadGate
from trio_rlmesh.protocol import PROTOCOL_GENERATION, WORKFLOW_EDITION, core_v1, env_v1
from trio_rlmesh.transports.grpc import Portal, open_portal, parse_address
from trio_rlmesh.transports.grpc._common import ENV_HANDSHAKE, ENV_JOIN, ENV_SHUTDOWN, peer_info
from trio_rlmesh.transports.grpc._env_server import serve_env


class RawCodec(ProtoCodec):
    """Sends ``bytes`` as they are (for malformed frames)."""

    def encode(self, message: Any, message_type: Any) -> bytes:
        if isinstance(message, bytes):
            return message
        return super().encode(message, message_type)


def handshake_request(generation: str = PROTOCOL_GENERATION) -> env_v1.HandshakeRequest:
    return env_v1.HandshakeRequest(
        base=core_v1.HandshakeRequest(
            protocol_generation=generation,
            peer_info=peer_info("rlmesh-env"),
            supported_workflow_editions=[WORKFLOW_EDITION],
            preferred_workflow_edition=WORKFLOW_EDITION,
        )
    )


@attrs.define(eq=False)
class RawJoin:
    """An open Join stream; each call crosses the portal once."""

    portal: Portal
    stream: Stream[Any, Any]

    async def send(self, message: env_v1.JoinRequest | bytes, end: bool = False) -> None:
        await self.portal.run(self._send, message, end)

    async def _send(self, message: Any, end: bool) -> None:
        await self.stream.send_message(message, end=end)

    async def recv(self) -> env_v1.JoinResponse | None:
        result: env_v1.JoinResponse | None = await self.portal.run(self.stream.recv_message)
        return result

    async def call(self, message: env_v1.JoinRequest) -> env_v1.JoinResponse:
        await self.send(message)
        response = await self.recv()
        assert response is not None
        return response

    async def trailers(self) -> None:
        await self.portal.run(self.stream.recv_trailing_metadata)


@attrs.define(eq=False)
class RawEnvClient:
    portal: Portal
    channel: Channel
    token: str | None = None

    @property
    def _metadata(self) -> dict[str, str] | None:
        return {"authorization": self.token} if self.token else None

    async def unary(self, path: str, request: Any, reply_type: type[Any]) -> Any:
        async def call() -> Any:
            async with self.channel.request(
                path,
                Cardinality.UNARY_UNARY,
                type(request),
                reply_type,
                metadata=self._metadata,
            ) as stream:
                await stream.send_message(request, end=True)
                reply = await stream.recv_message()
                await stream.recv_trailing_metadata()  # raises GRPCError on a failed status
                return reply

        return await self.portal.run(call)

    async def handshake(
        self, request: env_v1.HandshakeRequest | None = None
    ) -> env_v1.HandshakeResponse:
        response: env_v1.HandshakeResponse = await self.unary(
            ENV_HANDSHAKE,
            handshake_request() if request is None else request,
            env_v1.HandshakeResponse,
        )
        return response

    async def shutdown(self, reason: str = "") -> env_v1.ShutdownResponse:
        response: env_v1.ShutdownResponse = await self.unary(
            ENV_SHUTDOWN,
            env_v1.ShutdownRequest(base=core_v1.ShutdownRequest(reason=reason)),
            env_v1.ShutdownResponse,
        )
        return response

    @contextlib.asynccontextmanager
    async def join(self, *, half_closed: bool = False) -> AsyncIterator[RawJoin]:
        """Open a Join stream; ``half_closed`` ends the request side with the headers (for
        calls the server refuses before reading: grpclib's client otherwise loses the status
        to the stream reset that follows it)."""

        def open_stream() -> Stream[Any, Any]:
            return self.channel.request(
                ENV_JOIN,
                Cardinality.STREAM_STREAM,
                env_v1.JoinRequest,
                env_v1.JoinResponse,
                metadata=self._metadata,
            )

        async def enter() -> Stream[Any, Any]:
            stream = open_stream()
            await stream.__aenter__()
            await stream.send_request(end=half_closed)
            return stream

        stream = await self.portal.run(enter)
        try:
            yield RawJoin(self.portal, stream)
        finally:

            async def leave() -> None:
                with contextlib.suppress(Exception):
                    await stream.cancel()
                with contextlib.suppress(Exception):
                    await stream.__aexit__(None, None, None)

            with trio.CancelScope(shield=True):
                await self.portal.run(leave)


@contextlib.asynccontextmanager
async def raw_client(address: str, token: str | None = None) -> AsyncIterator[RawEnvClient]:
    target = parse_address(address)
    async with open_portal() as portal:

        async def make() -> Channel:
            return Channel(target.host, target.port, codec=RawCodec())

        channel = await portal.run(make)
        try:
            yield RawEnvClient(portal, channel, token)
        finally:

            async def close() -> None:
                channel.close()

            with trio.CancelScope(shield=True):
                await portal.run(close)


@contextlib.asynccontextmanager
async def running_server(env: Any, **kwargs: Any) -> AsyncIterator[str]:
    """``serve_env(env, **kwargs)`` in a nursery; yields the bound address."""
    async with trio.open_nursery() as nursery:
        address: str = await nursery.start(
            lambda task_status: serve_env(env, task_status=task_status, **kwargs)
        )
        try:
            yield address
        finally:
            nursery.cancel_scope.cancel()


class SlowEnv(gym.Env[np.ndarray, np.int64]):
    """A one-number env whose step waits at ``gate`` (in the worker) when one is given.

    ``render()`` returns a 4x6 RGB frame when built with ``render_mode="rgb_array"``.
    """

    metadata = {"render_modes": ["rgb_array"]}  # noqa: RUF012

    def __init__(
        self,
        gate: ThreadGate | None = None,
        episode_length: int = 3,
        render_mode: str | None = None,
    ) -> None:
        self.render_mode = render_mode
        self.observation_space = gym.spaces.Box(-10.0, 10.0, shape=(1,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.gate = gate
        self.episode_length = episode_length
        self.t = 0
        self.obs_value = 0.0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return np.array([self.obs_value], dtype=np.float32), {"seed": seed, "options": options}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self.gate is not None:
            self.gate.wait()
        self.t += 1
        obs = np.array([self.obs_value + self.t], dtype=np.float32)
        return obs, float(action) + 0.5, self.t >= self.episode_length, False, {"t": self.t}

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        return np.full((4, 6, 3), self.t, dtype=np.uint8)
