"""The trio backend: gRPC over :mod:`._h2` on trio sockets (TCP, Unix, or in-memory).

No other event loop and no helper thread: a call's bytes go from the caller's task to the
socket, and replies come back through the connection's one reader task. TCP sockets get
``TCP_NODELAY`` (trio sets it on every TCP stream it makes).

The server's own accept loop (not ``trio.serve_listeners``, which logs a traceback every
0.1 s while descriptors run out) applies :class:`~._settings.ServerLimits`. Past
``max_connections``, the connection that has had no call for longest is closed to make
room, and with none idle the new connection is closed at once. When ``accept`` fails for
want of descriptors, up to ``DESCRIPTOR_RELIEF`` idle connections are closed (longest
idle first) and ``accept`` is tried again 10 ms later; with none idle, it backs off
(doubling to 1 s). Each of these is logged once per 10 s at most. A connection's calls
are bounded by its ``max_concurrent_streams`` handlers.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket as stdlib_socket
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Final

import attrs
import h2.errors
import trio

from ..._nursery import background_nursery, shielded_nursery
from ..._timeouts import SERVER_CLOSE_GRACE
from ._address import Address, parse_address, parse_bind_address
from ._backend import BackendName, Handler, handler_outcome, unary_call
from ._guard import Offenders, admit, out_of_descriptors
from ._h2 import H2Connection, H2Stream
from ._memory import connect_memory, listen_memory
from ._settings import DEFAULT_LIMITS, GrpcSettings, ServerLimits
from ._status import ConnectionLost, Status, format_grpc_timeout, parse_grpc_timeout

__all__ = ["TRIO_BACKEND", "TrioBackend", "TrioChannel", "TrioServer"]

SHUTDOWN_MESSAGE: Final = "the server is shutting down"
_SKIPPED_METADATA: Final = frozenset({"te", "content-type", "grpc-timeout", "user-agent"})
OUT_OF_DESCRIPTORS: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
"""What ``accept`` fails with when the process or the system is out of descriptors or memory."""
ACCEPT_BACKOFF: Final = (0.01, 1.0)
"""Seconds between ``accept`` retries while out of descriptors: first, and at most."""


async def connect(address: Address) -> trio.abc.Stream:
    """Open the byte stream to ``address``.

    Raises:
        ConnectionLost: the connection could not be made (``refused`` set).
    """
    try:
        if address.kind == "memory":
            return await connect_memory(str(address.path))
        if address.kind == "unix":
            return await trio.open_unix_socket(str(address.path))
        return await trio.open_tcp_stream(str(address.host), int(address.port or 0))
    except OSError as exc:
        raise ConnectionLost.could_not_connect(exc, str(address)) from None


# ------------------------------------------------------------------------------ client


@attrs.define(eq=False)
class TrioClientCall:
    """A call on an :class:`H2Stream`."""

    _stream: H2Stream

    async def send_message(self, message: bytes, *, end: bool = False) -> None:
        await self._stream.send_message(message, end=end)

    async def end(self) -> None:
        await self._stream.end()

    async def receive_message(self) -> bytes | None:
        await self._stream.connection.flush()
        return await self._stream.receive_message()

    async def initial_metadata(self) -> Mapping[str, str]:
        await self._stream.connection.flush()
        return await self._stream.wait_headers()

    def deliver_to(
        self,
        on_message: Callable[[bytes], None],
        on_end: Callable[[BaseException | None], None],
    ) -> None:
        self._stream.deliver_to(on_message, on_end)

    async def aclose(self) -> None:
        stream = self._stream
        if stream.local_ended and stream.remote_ended:
            return
        if stream.remote_ended:
            stream.connection.end_stream(stream)
            stream.connection.flush_soon()
        else:
            stream.cancel()
        await trio.lowlevel.checkpoint()


class TrioChannel:
    """Calls to one address over one HTTP/2 connection (reopened if it dies)."""

    def __init__(self, address: Address, settings: GrpcSettings, nursery: trio.Nursery) -> None:
        self.address = address
        self.label = str(address)
        self.settings = settings
        self._nursery = nursery
        self._conn: H2Connection | None = None
        self._connecting = trio.Lock()
        self._closed = False

    @property
    def connection(self) -> H2Connection | None:
        """The current connection, if one is open."""
        return self._conn

    async def _connection(self) -> H2Connection:
        conn = self._conn
        if conn is not None and conn.failure is None:
            return conn
        async with self._connecting:
            conn = self._conn
            if conn is not None and conn.failure is None:
                return conn
            self._check_open()
            transport = await connect(self.address)
            try:
                self._check_open()  # closed while connecting
            except ConnectionLost:
                await trio.aclose_forcefully(transport)
                raise
            authority = self.address.authority if self.address.kind == "tcp" else "localhost"
            conn = H2Connection(
                transport,
                client=True,
                settings=self.settings,
                authority=authority,
                label=self.label,
            )
            await self._nursery.start(_run_connection, conn)
            self._conn = conn
            return conn

    def _check_open(self) -> None:
        if self._closed:
            raise ConnectionLost(f"the channel to {self.label} is closed")

    async def open_call(
        self,
        path: str,
        metadata: Mapping[str, str] | None = None,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - sent as grpc-timeout
    ) -> TrioClientCall:
        conn = await self._connection()
        grpc_timeout = format_grpc_timeout(timeout) if timeout is not None else None
        stream = conn.open_stream(conn.client_headers(path, metadata or {}, grpc_timeout))
        return TrioClientCall(stream)

    async def unary(
        self,
        path: str,
        request: bytes,
        metadata: Mapping[str, str] | None = None,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - sent as grpc-timeout, enforced here
    ) -> bytes:
        return await unary_call(self, path, request, metadata, timeout)

    async def aclose(self) -> None:
        self._closed = True
        conn, self._conn = self._conn, None
        if conn is not None:
            with trio.CancelScope(shield=True):
                await conn.aclose("the client closed the channel")


async def _run_connection(conn: H2Connection, *, task_status: trio.TaskStatus[None]) -> None:
    # Shielded: when the caller's block is cancelled, its cleanup (an env client's Close)
    # still has a connection; the channel's aclose (always run) ends it.
    with trio.CancelScope(shield=True):
        await conn.run(task_status=task_status)


# ------------------------------------------------------------------------------ server


@attrs.define(eq=False)
class TrioServerCall:
    """An incoming call, as :data:`~._backend.Handler` sees it."""

    _stream: H2Stream
    path: str
    metadata: Mapping[str, str]
    peer: str

    async def receive_message(self) -> bytes | None:
        return await self._stream.receive_message()

    async def send_initial_metadata(self) -> None:
        await self._stream.send_headers()

    async def send_message(self, message: bytes) -> None:
        stream = self._stream
        if not stream.headers_sent:
            stream.connection.send_response_headers(stream, ())
        await stream.send_message(message)


def _metadata(headers: Mapping[str, str]) -> dict[str, str]:
    return {
        key: value
        for key, value in headers.items()
        if not key.startswith(":") and key not in _SKIPPED_METADATA
    }


class TrioServer:
    """Serves gRPC calls on one or more listeners; see :meth:`TrioBackend.open_server`."""

    def __init__(
        self,
        listeners: list[trio.abc.Listener[trio.abc.Stream]],
        address: str,
        handlers: Mapping[str, Handler],
        settings: GrpcSettings,
        limits: ServerLimits = DEFAULT_LIMITS,
    ) -> None:
        self.address = address
        self.settings = settings
        self.limits = limits
        self._listeners = listeners
        self._handlers = dict(handlers)
        self._connections: dict[H2Connection, None] = {}
        """The connections open, oldest first."""
        self._offenders = Offenders(limits, trio.current_time)
        self._accepting = trio.CancelScope()
        self._calls = 0

    @property
    def open_calls(self) -> int:
        return self._calls

    def stop_accepting(self) -> None:
        self._accepting.cancel()

    async def accept_loop(self, connections: trio.Nursery) -> None:
        """Accept until :meth:`stop_accepting`; connections live on in ``connections``."""
        with self._accepting:
            async with trio.open_nursery() as nursery:
                for listener in self._listeners:
                    nursery.start_soon(self._accept, listener, connections)

    async def _accept(
        self, listener: trio.abc.Listener[trio.abc.Stream], connections: trio.Nursery
    ) -> None:
        first, most = ACCEPT_BACKOFF
        backoff = first
        limit = self.limits.max_connections
        while True:
            try:
                transport = await listener.accept()
            except OSError as exc:
                if exc.errno not in OUT_OF_DESCRIPTORS:
                    raise
                closed = out_of_descriptors(self._connections, str(exc), backoff)
                await trio.sleep(backoff)
                backoff = first if closed else min(most, backoff * 2)
                continue
            backoff = first
            if not admit(self._connections, limit, _peer_label(transport)):
                await trio.aclose_forcefully(transport)
                continue
            connections.start_soon(self._serve_connection, self._new_connection(transport))

    def _new_connection(self, transport: trio.abc.Stream) -> H2Connection:
        """A new connection, counted at once (before its task runs)."""
        label = _peer_label(transport)
        conn: H2Connection
        most = self.limits.max_concurrent_streams

        def on_request(stream: H2Stream) -> None:
            if conn.handlers >= most:
                # Calls whose handler is still finishing count too: resetting calls as
                # fast as they open must not queue handlers without bound.
                conn.reset(stream, h2.errors.ErrorCodes.REFUSED_STREAM)
                return
            conn.handler_started()
            conn.nursery.start_soon(self._serve_call, stream, label)

        conn = H2Connection(
            transport,
            client=False,
            settings=self.settings,
            on_request=on_request,
            label=label,
            limits=self.limits,
            guard=self._offenders.guard(label),
        )
        self._connections[conn] = None
        return conn

    async def _serve_connection(self, conn: H2Connection) -> None:
        try:
            await conn.run()
        finally:
            self._connections.pop(conn, None)

    async def _serve_call(self, stream: H2Stream, peer: str) -> None:
        try:
            with trio.CancelScope() as stream.scope:
                await self._answer(stream, peer)
        finally:
            stream.scope = None
            stream.connection.handler_ended()

    async def _answer(self, stream: H2Stream, peer: str) -> None:
        headers = stream.headers or {}
        path = headers.get(":path", "")
        call = TrioServerCall(stream, path, _metadata(headers), peer)
        handler = self._handlers.get(path)
        outcome: tuple[Status, str] | None
        self._calls += 1
        try:
            if handler is None:
                outcome = (Status.UNIMPLEMENTED, f"unknown method {path}")
            elif not headers.get("content-type", "").startswith("application/grpc"):
                outcome = (Status.INTERNAL, "content-type must be application/grpc")
            elif headers.get("grpc-encoding", "identity") != "identity":
                outcome = (Status.UNIMPLEMENTED, "compressed requests are not supported")
            else:
                timeout = parse_grpc_timeout(headers.get("grpc-timeout", "")) or float("inf")
                outcome = (Status.DEADLINE_EXCEEDED, f"{path} exceeded the client's deadline")
                with trio.move_on_after(timeout):
                    outcome = await handler_outcome(handler, call)
        finally:
            self._calls -= 1
        if outcome is not None:
            stream.finish(*outcome)
            with contextlib.suppress(ConnectionLost):
                await stream.connection.flush()

    async def shutdown(self) -> None:
        """End every open call with UNAVAILABLE, say GOAWAY, close every connection."""
        self.stop_accepting()
        with trio.CancelScope(shield=True):
            for conn in list(self._connections):
                for stream in conn.streams():
                    stream.finish(Status.UNAVAILABLE, SHUTDOWN_MESSAGE)
            with trio.move_on_after(SERVER_CLOSE_GRACE):
                async with trio.open_nursery() as nursery:
                    for conn in list(self._connections):
                        nursery.start_soon(conn.aclose, "the server shut down")
            for conn in list(self._connections):
                conn.abort("the server shut down")
        for listener in self._listeners:
            with contextlib.suppress(Exception):
                await listener.aclose()


def _peer_label(transport: trio.abc.Stream) -> str:
    sock = getattr(transport, "socket", None)
    if sock is None:
        return "memory"
    try:
        peer = sock.getpeername()
    except OSError:
        return "unknown peer"
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"tcp://{peer[0]}:{peer[1]}"
    return f"unix://{peer}" if peer else "unix socket client"


async def _listen(bind: Address) -> tuple[list[trio.abc.Listener[trio.abc.Stream]], str]:
    if bind.kind == "memory":
        return [listen_memory(str(bind.path))], str(bind)
    if bind.kind == "unix":
        path = str(bind.path)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        sock = trio.socket.socket(stdlib_socket.AF_UNIX, stdlib_socket.SOCK_STREAM)
        try:
            await sock.bind(path)
            sock.listen(128)
        except BaseException:
            sock.close()
            raise
        return [trio.SocketListener(sock)], str(bind)
    listeners = await trio.open_tcp_listeners(int(bind.port or 0), host=bind.host)
    port = listeners[0].socket.getsockname()[1]
    return list(listeners), Address.tcp(str(bind.host), int(port)).authority


class TrioBackend:
    """gRPC over h2 on trio."""

    name: BackendName = "trio"

    @contextlib.asynccontextmanager
    async def open_channel(
        self, address: str, settings: GrpcSettings
    ) -> AsyncIterator[TrioChannel]:
        """A channel to ``address`` (connected on its first call)."""
        parsed = parse_address(address)
        async with background_nursery() as nursery:
            channel = TrioChannel(parsed, settings, nursery)
            try:
                yield channel
            finally:
                await channel.aclose()

    @contextlib.asynccontextmanager
    async def open_server(
        self,
        address: str,
        handlers: Mapping[str, Handler],
        settings: GrpcSettings,
        limits: ServerLimits = DEFAULT_LIMITS,
    ) -> AsyncIterator[TrioServer]:
        """Serve ``handlers`` on ``address`` for the duration of the block."""
        listeners, bound = await _listen(parse_bind_address(address))
        server = TrioServer(listeners, bound, handlers, settings, limits)
        # Connections (and the calls on them) live in a shielded nursery: a stop arrives as
        # a cancellation of this block, and the calls must outlive it until shutdown() has
        # drained them and given each its status.
        async with background_nursery() as nursery, shielded_nursery() as connections:
            nursery.start_soon(server.accept_loop, connections)
            try:
                yield server
            finally:
                await server.shutdown()


TRIO_BACKEND: Final = TrioBackend()
