"""A grpclib ``Server`` that can end its connections, for bounded stops.

grpclib's ``Server.close`` closes the listener and cancels the request handlers, but it
leaves every accepted HTTP/2 connection open: a client whose Join stream was cancelled on
the server side hears nothing and waits out its own deadline. And from Python 3.12.1,
asyncio's ``Server.wait_closed`` waits for those connections to go away, so a stop that
waits for it hangs until the client leaves.

:class:`TrackedServer` remembers the transport of every accepted connection, so a stop can
close them all: clients see their streams end at once, and ``wait_closed`` returns.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Final

from grpclib.server import Server

__all__ = ["CLOSE_GRACE", "TrackedServer"]

CLOSE_GRACE: Final = 1.0
"""Seconds a stop waits for cancelled handlers and closing connections before aborting."""


class _Tracked(asyncio.Protocol):
    """Wraps grpclib's protocol to keep the connection's transport in a shared set."""

    def __init__(self, inner: asyncio.Protocol, transports: set[asyncio.BaseTransport]) -> None:
        self._inner = inner
        self._transports = transports
        self._transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        self._transports.add(transport)
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._transport is not None:
            self._transports.discard(self._transport)
        self._inner.connection_lost(exc)


class TrackedServer(Server):
    """grpclib's ``Server`` plus :meth:`stop_accepting` and :meth:`close_connections`."""

    def __init__(self, handlers: Any, **kwargs: Any) -> None:
        super().__init__(handlers, **kwargs)
        self.transports: set[asyncio.BaseTransport] = set()
        """Transports of the connections currently open."""

    def _protocol_factory(self) -> Any:
        return _Tracked(super()._protocol_factory(), self.transports)

    @property
    def started(self) -> bool:
        return self._server is not None

    def bound_port(self) -> int:
        """The TCP port the listener is bound to."""
        listener: Any = self._server
        return int(listener.sockets[0].getsockname()[1])

    def stop_accepting(self) -> None:
        """Close the listener; open connections and running handlers are left alone."""
        if self._server is not None:
            self._server.close()

    async def close_connections(self, grace: float = CLOSE_GRACE) -> None:
        """Cancel every handler and close every connection.

        Waits at most ``grace`` seconds for handlers to unwind and connections to flush;
        whatever is still open then is aborted. Runs to the end even when cancelled.
        """
        if self._server is None:
            return
        try:
            self.close()
            for transport in list(self.transports):
                transport.close()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.wait_closed(), grace)
        finally:
            for transport in list(self.transports):
                abort = getattr(transport, "abort", None)
                if abort is not None:
                    abort()
                else:
                    transport.close()
