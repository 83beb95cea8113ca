"""A grpclib ``Server`` that can end its connections, and holds clients to server limits.

grpclib's ``Server.close`` closes the listener and cancels the request handlers, but it
leaves every accepted HTTP/2 connection open: a client whose Join stream was cancelled on
the server side hears nothing and waits out its own deadline. And from Python 3.12.1,
asyncio's ``Server.wait_closed`` waits for those connections to go away, so a stop that
waits for it hangs until the client leaves.

:class:`TrackedServer` wraps grpclib's protocol for each accepted connection
(:class:`_Tracked`), so it can close them all at a stop (clients see their streams end at
once, and ``wait_closed`` returns), and apply :class:`~._settings.ServerLimits` the way
the trio backend does, from outside grpclib:

* every byte a client sends goes through a :class:`~._guard.FrameGuard` before grpclib
  sees it; past a budget or the header block cap, the connection gets GOAWAY
  ``ENHANCE_YOUR_CALM`` and is closed;
* a request whose headers :func:`~._guard.request_headers` refuses is answered with its
  status (trailers-only) in place of grpclib's handler (grpclib itself keeps the last of
  duplicated headers and never looks at the case of names);
* one sweeper task, once a second (or a quarter of the shortest timeout), closes
  connections that sent no preface and SETTINGS within ``handshake_timeout`` and
  connections with no call for ``idle_connection_timeout``: both are noticed up to one sweep late;
* past ``max_connections``, the connection idle longest is closed to make room (or the new
  one, if none is idle); when ``accept`` fails for want of descriptors, asyncio itself
  pauses accepting for a second, and :func:`loop_exception_handler` turns its traceback
  into one line per 10 s and closes the ``DESCRIPTOR_RELIEF`` connections idle longest.

This reads three things of grpclib's that are not its documented API, each guarded where
it is read: its protocol's ``processor.processors`` (the event table the header check
wraps), ``processor.streams`` (the open calls, for idleness) and ``connection._connection``
(its h2 connection, for GOAWAY and refusals).

``max_concurrent_streams`` is advertised in a second SETTINGS frame (grpclib sends h2's
default of 100 in its first); until the client acknowledges it, 100 applies. What stays
grpclib's own: a client past the advertised number loses the whole connection (h2's
PROTOCOL_ERROR), where the trio backend refuses the one call (REFUSED_STREAM); and the
per-call work a budget lets through (a handler task per stream, cancelled when the client
resets it).
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from typing import Any, Final

import h2.errors
import h2.events
import h2.exceptions
import h2.settings
from grpclib.server import Server

from ..._timeouts import GOAWAY_GRACE, SERVER_CLOSE_GRACE
from ._guard import (
    Abuse,
    FrameGuard,
    Offenders,
    admit,
    cut_off,
    idle_reason,
    no_handshake,
    out_of_descriptors,
    request_headers,
)
from ._settings import ServerLimits
from ._status import encode_grpc_message

__all__ = ["TrackedServer", "loop_exception_handler"]
SWEEP_INTERVAL: Final = 1.0
"""Seconds between two looks at every connection's handshake and idle time (at most)."""
_OUT_OF_DESCRIPTORS: Final = "socket.accept() out of system resource"
"""The message asyncio reports a failed ``accept`` with (EMFILE, ENFILE, ...)."""

_SERVERS: weakref.WeakSet[TrackedServer] = weakref.WeakSet()
"""The servers running on the loop, for :func:`loop_exception_handler`."""


class _Tracked(asyncio.Protocol):
    """grpclib's protocol for one connection, behind the server's limits."""

    def __init__(self, inner: Any, server: TrackedServer) -> None:
        self._inner = inner
        self._server = server
        loop = asyncio.get_running_loop()
        self._loop = loop
        self.guard: FrameGuard
        """Set in :meth:`connection_made`, which asyncio calls before any data arrives and
        before the connection is counted (the sweep sees only counted connections)."""
        self.opened_at = loop.time()
        self._idle_since: float | None = self.opened_at
        self.transport: asyncio.Transport | None = None
        self.label = "a client"
        self._refused = False
        self._cut = False

    # -- what grpclib's protocol would get

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            self.label = f"tcp://{peer[0]}:{peer[1]}"
        self.guard = self._server.offenders.guard(self.label)
        if not self._server._admit(self):
            self._refused = True
            transport.abort()
            return
        self._inner.connection_made(transport)
        self._check_requests()
        conn = self._h2()
        most = self._server.limits.max_concurrent_streams
        if conn is not None and conn.local_settings.max_concurrent_streams != most:
            # grpclib leaves h2's default (100); a client's ACK makes the limit effective.
            conn.update_settings({h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: most})
            self._inner.connection.flush()

    def data_received(self, data: bytes) -> None:
        if self._cut:
            return
        try:
            self.guard.feed(data)
        except Abuse as exc:
            self._calm_down(str(exc))
            return
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        if self._refused:
            return None
        return self._inner.eof_received()  # type: ignore[no-any-return]

    def pause_writing(self) -> None:
        if not self._refused:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if not self._refused:
            self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._server.connections.pop(self, None)
        if not self._refused:
            self._inner.connection_lost(exc)

    # -- limits

    @property
    def idle_since(self) -> float | None:
        """Since when the connection has had no call, as last seen (``None``: it has one,
        or it is ending)."""
        if self._cut:
            return None
        if self._streams():
            self._idle_since = None
        elif self._idle_since is None:
            self._idle_since = self._loop.time()
        return self._idle_since

    def _streams(self) -> int:
        streams = getattr(getattr(self._inner, "processor", None), "streams", None)
        return len(streams) if streams is not None else 0

    def _h2(self) -> Any:
        """grpclib's h2 connection (``None`` before the connection is made)."""
        return getattr(getattr(self._inner, "connection", None), "_connection", None)

    def _check_requests(self) -> None:
        """Put :func:`request_headers` in front of grpclib's handling of new requests."""
        processors = getattr(getattr(self._inner, "processor", None), "processors", None)
        if not isinstance(processors, dict):  # pragma: no cover - only another grpclib
            return
        accept = processors[h2.events.RequestReceived]

        def checked(event: h2.events.RequestReceived) -> None:
            _, refusal = request_headers(event.headers or ())
            if refusal is None:
                accept(event)
            else:
                self._refuse(event, *refusal)

        processors[h2.events.RequestReceived] = checked

    def _refuse(self, event: h2.events.RequestReceived, status: int, message: str) -> None:
        """Answer a refused request trailers-only; grpclib never learns of the stream."""
        conn = self._h2()
        sid = event.stream_id
        trailers = [
            (":status", "200"),
            ("content-type", "application/grpc"),
            ("grpc-status", str(int(status))),
            ("grpc-message", encode_grpc_message(message)),
        ]
        with contextlib.suppress(h2.exceptions.ProtocolError):
            conn.send_headers(sid, trailers, end_stream=True)
            if event.stream_ended is None:
                conn.reset_stream(sid, h2.errors.ErrorCodes.NO_ERROR)
        self._inner.connection.flush()

    def _say_goaway(self, code: int, detail: str) -> None:
        """GOAWAY on grpclib's own h2 connection, then close (abort after a grace)."""
        self._cut = True
        transport = self.transport
        conn = self._h2()
        if conn is not None:
            with contextlib.suppress(h2.exceptions.ProtocolError, AttributeError):
                conn.close_connection(code, additional_data=detail.encode())
                self._inner.connection.flush()
        if transport is not None:
            transport.close()
            self._loop.call_later(GOAWAY_GRACE, transport.abort)

    def _calm_down(self, reason: str) -> None:
        cut_off(self.label, reason)
        self._say_goaway(h2.errors.ErrorCodes.ENHANCE_YOUR_CALM, reason)

    def evict(self, reason: str) -> None:
        """Close the connection (GOAWAY ``NO_ERROR`` saying ``reason``)."""
        self._say_goaway(h2.errors.ErrorCodes.NO_ERROR, reason)

    def sweep(self, now: float) -> None:
        """Close the connection if it is past its handshake or idle timeout."""
        limits = self._server.limits
        if self._cut:
            return
        handshake = limits.handshake_timeout
        if handshake is not None and not self.guard.settled:
            if now - self.opened_at >= handshake:
                no_handshake(self.label, handshake)
                self._cut = True
                if self.transport is not None:
                    self.transport.abort()
            return
        idle = limits.idle_connection_timeout
        since = self.idle_since
        if idle is not None and since is not None and now - since >= idle:
            self.evict(idle_reason(idle))


class TrackedServer(Server):
    """grpclib's ``Server`` plus :meth:`stop_accepting`, :meth:`close_connections` and
    the server limits (see the module doc)."""

    def __init__(self, handlers: Any, *, limits: ServerLimits, **kwargs: Any) -> None:
        super().__init__(handlers, **kwargs)
        self.limits = limits
        self.offenders = Offenders(limits, lambda: asyncio.get_running_loop().time())
        self.connections: dict[_Tracked, None] = {}
        """The connections currently open, oldest first."""
        self._sweeper: asyncio.Task[None] | None = None

    def _protocol_factory(self) -> Any:
        return _Tracked(super()._protocol_factory(), self)

    @property
    def started(self) -> bool:
        return self._server is not None

    async def start(self, *args: Any, **kwargs: Any) -> None:
        """Start serving (grpclib's ``start``), and the sweeper."""
        await super().start(*args, **kwargs)
        loop = asyncio.get_running_loop()
        if loop.get_exception_handler() is not loop_exception_handler:
            loop.set_exception_handler(loop_exception_handler)
        _SERVERS.add(self)
        timeouts = [
            t for t in (self.limits.handshake_timeout, self.limits.idle_connection_timeout) if t
        ]
        if timeouts:
            interval = min(SWEEP_INTERVAL, min(timeouts) / 4)
            self._sweeper = loop.create_task(self._sweep(interval))

    async def _sweep(self, interval: float) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(interval)
            now = loop.time()
            for conn in list(self.connections):
                conn.sweep(now)

    def bound_port(self) -> int:
        """The TCP port the listener is bound to."""
        listener: Any = self._server
        return int(listener.sockets[0].getsockname()[1])

    def listens_on(self, fileno: int) -> bool:
        """Whether ``fileno`` is one of this server's listening sockets."""
        listener: Any = self._server
        return listener is not None and any(s.fileno() == fileno for s in listener.sockets)

    def _admit(self, conn: _Tracked) -> bool:
        """A connection was accepted: whether it may be served (see :func:`admit`)."""
        if not admit(self.connections, self.limits.max_connections, conn.label):
            return False
        self.connections[conn] = None
        return True

    def stop_accepting(self) -> None:
        """Close the listener; open connections and running handlers are left alone."""
        if self._server is not None:
            self._server.close()

    async def close_connections(self, grace: float = SERVER_CLOSE_GRACE) -> None:
        """Cancel every handler and close every connection.

        Waits at most ``grace`` seconds for handlers to unwind and connections to flush;
        whatever is still open then is aborted. Runs to the end even when cancelled.
        """
        _SERVERS.discard(self)
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._server is None:
            return
        try:
            self.close()
            for conn in list(self.connections):
                if conn.transport is not None:
                    conn.transport.close()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.wait_closed(), grace)
        finally:
            for conn in list(self.connections):
                if conn.transport is not None:
                    conn.transport.abort()


def loop_exception_handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The grpclib loop's handler of errors nothing else catches.

    A failed ``accept`` for want of descriptors (which asyncio logs with a traceback and
    retries a second later) becomes one line per 10 s, and makes its server close the
    connection idle longest; everything else goes to asyncio's default handler.
    """
    if context.get("message") != _OUT_OF_DESCRIPTORS:
        loop.default_exception_handler(context)
        return
    sock = context.get("socket")
    for server in list(_SERVERS):
        if sock is not None and server.listens_on(sock.fileno()):
            # asyncio accepts a whole batch in the callback that failed, and each accepted
            # connection's protocol is made two loop turns later (its task's first step,
            # then the transport's call_soon): decide once they are counted, or a batch
            # that ran out of descriptors looks like a server with no connection to close.
            loop.call_soon(
                loop.call_soon,
                out_of_descriptors,
                server.connections,
                str(context.get("exception")),
                1.0,
            )
