"""Test-side wire tools built on the trio backend's internals.

* :class:`Valve` freezes byte streams: a frozen stream neither delivers what it received
  nor writes, like a peer stopped with SIGSTOP (its kernel still buffers our bytes).
* :func:`open_fake_server` runs scriptable handlers on the trio backend's server, over any
  address the trio backend serves (``memory://`` for trio clients, ``unix://`` for grpclib
  clients), with every accepted connection behind one valve. Handlers get the backend's
  :class:`~trio_rlmesh.transports.grpc._trio_backend.TrioServerCall`, whose ``_stream`` (an
  :class:`~trio_rlmesh.transports.grpc._h2.H2Stream`) lets a fake reset the stream, drop the
  connection or send raw DATA.
* :func:`open_raw_client` is a raw gRPC client on an :class:`H2Connection`: it can send
  framed messages or arbitrary DATA (lying length prefixes, malformed protobuf), half-close,
  reset, vanish (drop the socket without a word) or freeze.

Which backend the fake or the raw client runs on does not matter to the tests: they are the
instruments, not the subject.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any, TypeVar

import attrs
import h2.errors
import trio

from trio_rlmesh._nursery import background_nursery
from trio_rlmesh.transports.grpc._address import parse_address, parse_bind_address
from trio_rlmesh.transports.grpc._backend import Handler
from trio_rlmesh.transports.grpc._codec import decode
from trio_rlmesh.transports.grpc._framing import frame
from trio_rlmesh.transports.grpc._h2 import H2Connection, H2Stream
from trio_rlmesh.transports.grpc._settings import GrpcSettings
from trio_rlmesh.transports.grpc._status import (
    ConnectionLost,
    GrpcError,
    Status,
    format_grpc_timeout,
)
from trio_rlmesh.transports.grpc._trio_backend import TrioServer, _listen, connect

__all__ = [
    "RAW_SETTINGS",
    "FakeServer",
    "RawClient",
    "RawStream",
    "Valve",
    "expect_status",
    "frame",
    "lying_prefix",
    "open_fake_server",
    "open_raw_client",
]

_M = TypeVar("_M")

RAW_SETTINGS = GrpcSettings(keepalive_interval=None, max_message_size=2**31)
"""The raw client keeps quiet (no keepalive) and accepts anything the server sends."""


# ----------------------------------------------------------------------------- the valve


class Valve:
    """A switch shared by streams: while frozen they neither read nor write."""

    def __init__(self) -> None:
        self.frozen = False
        self._thawed = trio.Event()
        self._thawed.set()

    def freeze(self) -> None:
        if not self.frozen:
            self.frozen = True
            self._thawed = trio.Event()

    def thaw(self) -> None:
        self.frozen = False
        self._thawed.set()

    async def wait(self) -> None:
        while self.frozen:
            await self._thawed.wait()


class ValveStream(trio.abc.Stream):
    """``inner`` behind a :class:`Valve`; counts the bytes it received."""

    def __init__(self, inner: trio.abc.Stream, valve: Valve) -> None:
        self.inner = inner
        self.valve = valve
        self.received = 0

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.valve.wait()
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.valve.wait()
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        await self.valve.wait()
        data = await self.inner.receive_some(max_bytes)
        # Bytes that arrive while frozen are held, as a stopped process would hold them.
        await self.valve.wait()
        self.received += len(data)
        return data

    async def aclose(self) -> None:
        await self.inner.aclose()


class ValveListener(trio.abc.Listener[trio.abc.Stream]):
    def __init__(self, inner: trio.abc.Listener[trio.abc.Stream], valve: Valve) -> None:
        self.inner = inner
        self.valve = valve
        self.accepted: list[ValveStream] = []

    async def accept(self) -> trio.abc.Stream:
        stream = ValveStream(await self.inner.accept(), self.valve)
        self.accepted.append(stream)
        return stream

    async def aclose(self) -> None:
        await self.inner.aclose()


# ----------------------------------------------------------------------------- fake server


@attrs.define(eq=False)
class FakeServer:
    """A running fake: its address, its valve, and its live connections."""

    address: str
    server: TrioServer
    valve: Valve
    listeners: list[ValveListener]

    def connections(self) -> list[H2Connection]:
        return list(self.server._connections)

    def drop_connections(self) -> None:
        """Close every connection at once: no GOAWAY, no status (a crash)."""
        for conn in self.connections():
            conn.abort("the fake dropped the connection")

    @property
    def bytes_received(self) -> int:
        return sum(stream.received for listener in self.listeners for stream in listener.accepted)


@contextlib.asynccontextmanager
async def open_fake_server(
    handlers: Mapping[str, Handler],
    address: str,
    settings: GrpcSettings | None = None,
) -> AsyncIterator[FakeServer]:
    """Serve ``handlers`` with the trio backend on ``address`` (``memory://`` or ``unix://``)."""
    settings = settings or GrpcSettings(keepalive_interval=None)
    listeners, bound = await _listen(parse_bind_address(address))
    valve = Valve()
    wrapped = [ValveListener(listener, valve) for listener in listeners]
    server = TrioServer(list(wrapped), bound, handlers, settings)
    async with background_nursery() as nursery:
        nursery.start_soon(server.accept_loop, nursery)
        try:
            yield FakeServer(bound, server, valve, wrapped)
        finally:
            valve.thaw()
            await server.shutdown()


# ----------------------------------------------------------------------------- raw client


def _encoded(message: Any) -> bytes:
    return bytes(message)


@attrs.define(eq=False)
class RawStream:
    """One call made by the raw client."""

    conn: H2Connection
    stream: H2Stream

    async def send(self, message: Any, *, end: bool = False) -> None:
        """Send one framed message (a protobuf message, or bytes as they are)."""
        await self.stream.send_message(_encoded(message), end=end)

    async def send_data(self, data: bytes, *, end: bool = False) -> None:
        """Send ``data`` as DATA frames, unframed (the caller writes the length prefixes)."""
        conn = self.conn
        sid = self.stream.stream_id
        if len(data) <= min(
            conn._h2.local_flow_control_window(sid), conn._h2.max_outbound_frame_size
        ):
            conn._h2.send_data(sid, data, end_stream=end)
        else:
            await conn._send_chunks(self.stream, memoryview(data), end)
        if end:
            self.stream.local_ended = True
        await conn.flush()

    async def end(self) -> None:
        """Half-close: this side sends nothing more."""
        await self.stream.end()

    def reset(self, code: int = h2.errors.ErrorCodes.CANCEL) -> None:
        self.conn.reset(self.stream, code)

    async def receive(self, message_type: type[_M]) -> _M | None:
        """The next message decoded strictly; ``None`` at an OK end."""
        await self.conn.flush()
        data = await self.stream.receive_message()
        return None if data is None else decode(message_type, data)

    async def receive_bytes(self) -> bytes | None:
        await self.conn.flush()
        return await self.stream.receive_message()

    async def call(self, request: Any, reply_type: type[_M]) -> _M:
        await self.send(request)
        reply = await self.receive(reply_type)
        assert reply is not None, "the stream ended instead of answering"
        return reply

    async def status(self) -> tuple[Status, str]:
        """Read to the end of the call; its status and message. Raises
        :class:`ConnectionLost` when the call ended without a status."""
        try:
            while await self.receive_bytes() is not None:
                pass
        except GrpcError as exc:
            return exc.status, exc.message
        return Status.OK, ""

    async def headers(self) -> dict[str, str]:
        await self.conn.flush()
        return await self.stream.wait_headers()


@attrs.define(eq=False)
class RawClient:
    """A raw connection to a gRPC server."""

    conn: H2Connection
    valve: Valve
    transport: ValveStream
    token: str | None = None

    async def open(
        self,
        path: str,
        metadata: Mapping[str, str] | None = None,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - only sent as grpc-timeout
        extra: list[tuple[str, str]] | None = None,
        end: bool = False,
    ) -> RawStream:
        """Start a call (headers only; ``end`` half-closes with them)."""
        meta = dict(metadata or {})
        if self.token is not None and "authorization" not in meta:
            meta["authorization"] = self.token
        grpc_timeout = format_grpc_timeout(timeout) if timeout is not None else None
        headers = self.conn.client_headers(path, meta, grpc_timeout) + list(extra or [])
        stream = self.conn.open_stream(headers)
        if end:
            self.conn.end_stream(stream)
        await self.conn.flush()
        return RawStream(self.conn, stream)

    async def unary(self, path: str, request: Any, reply_type: type[_M]) -> _M:
        """One unary call; raises :class:`GrpcError` for a non-OK status."""
        call = await self.open(path)
        await call.send(request, end=True)
        reply = await call.receive(reply_type)
        assert reply is not None, f"{path} ended without a reply"
        assert await call.receive_bytes() is None
        return reply

    async def unary_bytes(self, path: str, request: bytes) -> bytes:
        call = await self.open(path)
        await call.send(request, end=True)
        reply = await call.receive_bytes()
        assert reply is not None, f"{path} ended without a reply"
        assert await call.receive_bytes() is None
        return reply

    def vanish(self) -> None:
        """Drop the socket without GOAWAY or RST_STREAM (a killed process)."""
        self.conn.abort("the raw client vanished")

    async def write_raw(self, data: bytes) -> None:
        """Write bytes to the socket beneath HTTP/2 (to break the framing itself)."""
        await self.conn.flush()
        await self.transport.inner.send_all(data)


@contextlib.asynccontextmanager
async def open_raw_client(
    address: str, *, token: str | None = None, settings: GrpcSettings = RAW_SETTINGS
) -> AsyncIterator[RawClient]:
    """A raw HTTP/2 connection to ``address`` for the duration of the block."""
    target = parse_address(address)
    valve = Valve()
    transport = ValveStream(await connect(target), valve)
    conn = H2Connection(transport, client=True, settings=settings, label=str(target))
    async with background_nursery() as nursery:
        await nursery.start(_run, conn)
        try:
            yield RawClient(conn, valve, transport, token)
        finally:
            valve.thaw()
            conn.abort("the raw client is done")


async def _run(conn: H2Connection, *, task_status: trio.TaskStatus[None]) -> None:
    await conn.run(task_status=task_status)


async def expect_status(call: RawStream) -> tuple[Status, str]:
    """The call's status; fails the test if the call ended without one."""
    try:
        return await call.status()
    except ConnectionLost as exc:  # pragma: no cover - reported as a failure
        raise AssertionError(f"the call ended without a status: {exc}") from exc


def lying_prefix(length: int) -> bytes:
    """A message header announcing ``length`` bytes (nothing of the body)."""
    return b"\x00" + length.to_bytes(4, "big")
