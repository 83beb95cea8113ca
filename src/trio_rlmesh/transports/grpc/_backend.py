"""The small interface every gRPC backend implements.

The env and model clients and servers are written once against these types; a backend
only moves bytes (httpcore's pattern). This module knows no backend: each one imports it,
and :mod:`._registry` names them and picks one.

A client opens a :class:`Channel` and makes calls on it; a server runs one
:data:`Handler` per incoming call. Messages are bytes: encoding is the caller's business,
framing and size limits are the backend's. Calls fail with :class:`~._status.GrpcError`
(a status) or :class:`~._status.ConnectionLost` (no status); :mod:`._errors` maps both.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Literal, Protocol

import trio

from ._settings import GrpcSettings, ServerLimits
from ._status import ConnectionLost, GrpcError, Status

__all__ = [
    "Backend",
    "BackendName",
    "Channel",
    "ClientCall",
    "Handler",
    "RunningServer",
    "ServerCall",
    "handler_outcome",
    "unary_call",
]

BackendName = Literal["trio", "grpclib"]

if sys.version_info < (3, 11):  # pragma: no cover - exercised on 3.10 only
    from exceptiongroup import BaseExceptionGroup

logger = logging.getLogger("trio_rlmesh.transports.grpc")


class ClientCall(Protocol):
    """One call a client made (unary or streaming)."""

    async def send_message(self, message: bytes, *, end: bool = False) -> None:
        """Send one message whole, even if the caller is cancelled meanwhile."""
        ...

    async def receive_message(self) -> bytes | None:
        """The next reply; ``None`` when the call ended with OK.

        Raises:
            GrpcError: the call ended with another status.
            ConnectionLost: the call ended without a status.
        """
        ...

    async def initial_metadata(self) -> Mapping[str, str]:
        """The response headers (waits for them)."""
        ...

    def deliver_to(
        self,
        on_message: Callable[[bytes], None],
        on_end: Callable[[BaseException | None], None],
    ) -> None:
        """Push delivery instead of :meth:`receive_message`: each reply goes to
        ``on_message`` as it arrives, and the end of the call to ``on_end`` (``None`` for
        an OK end, else the :class:`GrpcError` or :class:`ConnectionLost`), synchronously
        in the backend's own task. Saves a task switch per reply."""
        ...

    async def aclose(self) -> None:
        """Cancel the call unless it is over. Idempotent; never raises."""
        ...


class Channel(Protocol):
    """Calls to one address, over connections the channel opens as needed."""

    label: str
    """The peer's display address (``tcp://host:port``, ``unix:///path``, ``memory://x``)."""

    async def open_call(
        self,
        path: str,
        metadata: Mapping[str, str] | None = None,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - sent as grpc-timeout
    ) -> ClientCall:
        """Start a call (the request headers go out with its first message)."""
        ...

    async def unary(
        self,
        path: str,
        request: bytes,
        metadata: Mapping[str, str] | None = None,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - sent as grpc-timeout, enforced here
    ) -> bytes:
        """One request, one reply.

        Raises:
            GrpcError: a non-OK status (DEADLINE_EXCEEDED once ``timeout`` passes).
            ConnectionLost: the call ended without a status.
        """
        ...


class ServerCall(Protocol):
    """One incoming call, as its handler sees it."""

    path: str
    metadata: Mapping[str, str]
    """The request's metadata (lower-case keys, no HTTP/2 pseudo-headers)."""
    peer: str
    """Who called, for logs."""

    async def receive_message(self) -> bytes | None:
        """The next request message; ``None`` once the client ended its side.

        Raises:
            GrpcError: the message was refused (too large, malformed framing).
            ConnectionLost: the client went away.
        """
        ...

    async def send_initial_metadata(self) -> None:
        """Send the response headers now (real RLMesh clients wait for them)."""
        ...

    async def send_message(self, message: bytes) -> None:
        """Send one response message whole."""
        ...


Handler = Callable[[ServerCall], Awaitable[None]]
"""Serves one call. Returning ends it with OK; raising :class:`GrpcError` ends it with
that status; any other exception ends it with INTERNAL (see :func:`handler_outcome`)."""


class RunningServer(Protocol):
    """A server a backend runs; the block of :meth:`Backend.open_server` owns it."""

    address: str
    """The bound address as users type it (``127.0.0.1:PORT``, ``unix:///p``, ``memory://x``)."""

    def stop_accepting(self) -> None:
        """Refuse new connections; the open ones go on."""
        ...

    @property
    def open_calls(self) -> int:
        """Calls whose handler is still running."""
        ...


class Backend(Protocol):
    """What a backend provides."""

    name: BackendName

    def open_channel(
        self, address: str, settings: GrpcSettings
    ) -> AbstractAsyncContextManager[Channel]:
        """A channel to ``address`` for the duration of the block."""
        ...

    def open_server(
        self,
        address: str,
        handlers: Mapping[str, Handler],
        settings: GrpcSettings,
        limits: ServerLimits = ...,
    ) -> AbstractAsyncContextManager[RunningServer]:
        """Serve ``handlers`` (by method path) on ``address`` for the duration of the block,
        holding every client connection to ``limits``.

        When the block exits, every call still open is ended with UNAVAILABLE ("the server
        is shutting down"), then every connection is closed; the exit is bounded by the
        settings' ``write_timeout`` even if a handler never returns.
        """
        ...


async def handler_outcome(handler: Handler, call: ServerCall) -> tuple[Status, str] | None:
    """Run ``handler`` and say how its call ends: a status and message, or ``None`` when
    the client is gone and nothing can be sent. The same rule for every backend."""
    try:
        try:
            await handler(call)
        except BaseExceptionGroup as group:
            raise _sole(group) from None
    except GrpcError as exc:
        return exc.status, exc.message
    except ConnectionLost:
        return None
    except Exception as exc:
        # A bug, not bad input (bad input is answered with a status by the handler):
        # one log line, one status, and the server goes on.
        logger.warning("%s from %s failed: %s: %s", call.path, call.peer, type(exc).__name__, exc)
        return Status.INTERNAL, f"internal error: {type(exc).__name__}: {exc}"
    return Status.OK, ""


def _sole(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The one exception a nursery wrapped (nested single-member groups collapsed); a group
    of several stays a group, except that a status or a lost peer among them wins."""
    leaves: list[BaseException] = []
    pending: list[BaseException] = [group]
    while pending:
        item = pending.pop()
        if isinstance(item, BaseExceptionGroup):
            pending.extend(item.exceptions)
        else:
            leaves.append(item)
    for kind in (GrpcError, ConnectionLost):
        for leaf in leaves:
            if isinstance(leaf, kind):
                return leaf
    return leaves[0] if len(leaves) == 1 else group


async def unary_call(
    channel: Channel,
    path: str,
    request: bytes,
    metadata: Mapping[str, str] | None,
    timeout: float | None,  # noqa: ASYNC109 - enforced here, also sent as grpc-timeout
) -> bytes:
    """A unary call over :meth:`Channel.open_call` (for backends with nothing faster)."""
    with trio.move_on_after(timeout if timeout is not None else float("inf")) as scope:
        call = await channel.open_call(path, metadata, timeout=timeout)
        try:
            await call.send_message(request, end=True)
            reply = await call.receive_message()
            if reply is None:
                raise GrpcError(Status.INTERNAL, f"the server answered {path} with no message")
            while await call.receive_message() is not None:
                pass
            return reply
        finally:
            await call.aclose()
    assert scope.cancelled_caught
    raise GrpcError(Status.DEADLINE_EXCEEDED, f"no answer to {path} within {timeout:g} s")
