"""The grpclib backend: grpclib on an asyncio loop in a helper thread, reached from trio.

grpclib only runs on asyncio and trio must never see asyncio, so the loop lives in the
portal's helper thread (:mod:`._portal`). Every stream is bridged by a pair of pumps on
the loop: one reads messages and hands each to trio (one cross-thread wake-up), one
writes what trio queued (one wake-up the other way). A unary call is one portal
crossing. The handlers a server runs are the same trio handlers the trio backend runs:
each incoming call starts its handler in a trio nursery, and its messages cross the same
way.

Three grpclib behaviours are worked around here, each pinned by a test:

* grpclib buffers a whole message before looking at its size; this backend reads the
  five-byte header itself and refuses an oversized message at once
  (:func:`~._framing.check_header`), reading from grpclib's per-stream buffer;
* a peer's RST_STREAM makes grpclib cancel a pending read even when a whole message is
  already buffered (RLMesh sends an in-band error and then resets); the buffered messages
  are still delivered before the loss;
* keepalive: grpclib's PING scheduler is configured to ping every ``keepalive_interval``
  while calls are open, and to drop the connection when no answer comes within
  ``keepalive_timeout``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import socket
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Final

import attrs
import trio
import trio.lowlevel
from grpclib.client import Channel as _GrpclibChannel
from grpclib.client import Stream as _ClientStream
from grpclib.config import Configuration
from grpclib.const import Cardinality
from grpclib.const import Handler as _GrpclibHandler
from grpclib.const import Status as _GrpclibStatus
from grpclib.encoding.base import CodecBase
from grpclib.exceptions import GRPCError, StreamTerminatedError
from grpclib.exceptions import ProtocolError as _GrpclibProtocolError

from ..._nursery import shielded_nursery
from ..._timeouts import SERVER_CLOSE_GRACE
from ._address import Address, parse_address, parse_bind_address
from ._backend import BackendName, Handler, handler_outcome
from ._framing import HEADER_SIZE, check_header
from ._lifecycle import TrackedServer
from ._portal import Portal, open_portal
from ._settings import DEFAULT_LIMITS, GrpcSettings, ServerLimits
from ._status import ConnectionLost, GrpcError, Status, again, decode_grpc_message

__all__ = ["GRPCLIB_BACKEND", "GrpclibBackend"]

logger = logging.getLogger("trio_rlmesh.transports.grpc")

SHUTDOWN_MESSAGE: Final = "the server is shutting down"
_HIGH_WATER: Final = 8 * 1024 * 1024
"""Bytes of received messages trio has not read yet, above which a pump stops reading
(flow control then holds the peer back)."""


class _RawCodec(CodecBase):
    """Messages are bytes already; encoding is the caller's business."""

    __content_subtype__ = "proto"

    def encode(self, message: Any, message_type: Any) -> bytes:
        return bytes(message)

    def decode(self, data: bytes, message_type: Any) -> bytes:
        return data


def _configuration(settings: GrpcSettings) -> Configuration:
    if settings.keepalive_interval is None:
        return Configuration(_keepalive_time=None)
    return Configuration(
        _keepalive_time=settings.keepalive_interval,
        _keepalive_timeout=settings.keepalive_timeout,
        _keepalive_permit_without_calls=False,
        _http2_max_pings_without_data=0,
        _http2_min_sent_ping_interval_without_data=settings.keepalive_interval,
        http2_connection_window_size=settings.connection_window,
        http2_stream_window_size=settings.stream_window,
    )


def _from_grpclib(exc: BaseException, label: str) -> BaseException:
    """grpclib's and asyncio's exceptions as the two transport outcomes (one table)."""
    if isinstance(exc, (GrpcError, ConnectionLost)):
        return exc
    if isinstance(exc, GRPCError):
        return GrpcError(Status.of(int(exc.status.value)), exc.message or "")
    if isinstance(exc, StreamTerminatedError):
        return ConnectionLost(str(exc), peer=label)
    if isinstance(exc, asyncio.TimeoutError):
        # grpclib's deadline. Checked before OSError: from Python 3.11 on,
        # asyncio.TimeoutError is the builtin TimeoutError, an OSError.
        return GrpcError(Status.DEADLINE_EXCEEDED, "the call's deadline passed")
    if isinstance(exc, (ConnectionRefusedError, FileNotFoundError, socket.gaierror)):
        return ConnectionLost.could_not_connect(exc, label)
    if isinstance(exc, OSError):
        return ConnectionLost(f"the connection broke ({exc.strerror or exc})", peer=label)
    if isinstance(exc, _GrpclibProtocolError):
        return ConnectionLost(f"the peer broke the gRPC protocol ({exc})", peer=label)
    if isinstance(exc, EOFError):
        return ConnectionLost("the connection ended", peer=label)
    return exc


def _status_received(stream: Any) -> GrpcError | None:
    """A non-OK status the peer already sent on a grpclib protocol stream (trailers, or a
    trailers-only response), for a reset that raced it."""
    for headers in (getattr(stream, "trailers", None), getattr(stream, "headers", None)):
        values = dict(headers or ())
        if "grpc-status" in values:
            status = Status.of(values["grpc-status"])
            if status is not Status.OK:
                return GrpcError(status, decode_grpc_message(values.get("grpc-message", "")))
    return None


def _ended_ok(stream: Any) -> bool:
    """Whether the peer ended a grpclib protocol stream with an OK status (a reset that
    followed it, such as RST_STREAM NO_ERROR after the trailers, changes nothing)."""
    values = dict(getattr(stream, "trailers", None) or ())
    return values.get("grpc-status") == "0"


def _keepalive_expired(stream: Any, label: str, settings: GrpcSettings) -> ConnectionLost | None:
    """The loss, named, when grpclib closed the connection because a keepalive PING went
    unanswered (grpclib itself only says "Connection lost"). On the loop."""
    handle = getattr(getattr(stream, "connection", None), "_close_by_ping_handler", None)
    if handle is None or handle.when() > asyncio.get_running_loop().time():
        return None
    return ConnectionLost(
        f"the peer did not answer a keepalive PING within {settings.keepalive_timeout:g} s "
        "(frozen or unreachable)",
        peer=label,
    )


def _call_ended(
    exc: BaseException, stream: Any, label: str, settings: GrpcSettings
) -> BaseException:
    """How a client call that raised ``exc`` ended. A status the peer already sent wins: a
    status followed by a reset (a busy env's refusal, then RST_STREAM) is that status, and
    so is a trailers-only status grpclib itself rejects (grpclib's server sends UNIMPLEMENTED
    without a content-type, which grpclib's client reports as UNKNOWN). On the loop."""
    protocol_stream = getattr(stream, "_stream", None)
    return (
        _status_received(protocol_stream)
        or _keepalive_expired(protocol_stream, label, settings)
        or _from_grpclib(exc, label)
    )


def _buffered(stream: Any) -> int:
    """Bytes received on a grpclib protocol stream and not read yet (0 if unknown)."""
    buffer = stream.buffer
    try:
        size: int = buffer._acked_size + sum(item.data_size for item in buffer._unacked._queue)
        return size
    except AttributeError:  # pragma: no cover - only if grpclib's internals change
        return 0


async def _read_message(stream: Any, max_size: int, *, salvage: bool = False) -> bytes | None:
    """One raw message from a grpclib protocol stream; ``None`` at the end of the stream.

    The header is checked before the body is read. With ``salvage``, read only what is
    already buffered (after the stream was reset) and return ``None`` when that is not a
    whole message.
    """
    if salvage and _buffered(stream) < HEADER_SIZE:
        return None
    header = await stream.recv_data(HEADER_SIZE)
    if not header:
        return None
    length = check_header(header, max_size)
    if salvage and _buffered(stream) < length:
        return None
    data: bytes = await stream.recv_data(length) if length else b""
    return data


# ----------------------------------------------------------------------------- bridging


class _Inbox:
    """Messages handed from the loop to trio, for one call (trio side)."""

    def __init__(self) -> None:
        self.items: collections.deque[bytes] = collections.deque()
        self.size = 0
        self.end: BaseException | None = None
        """Set once nothing more will come: ``_END`` for a clean end, else the failure."""
        self.headers: dict[str, str] | None = None
        self.lot = trio.lowlevel.ParkingLot()
        self.sink: tuple[Callable[[bytes], None], Callable[[BaseException | None], None]] | None = (
            None
        )

    def put(self, item: bytes) -> None:
        self.items.append(item)
        self.size += len(item)
        self.pump()

    def finish(self, end: BaseException) -> None:
        if self.end is None:
            self.end = end
        self.pump()

    def pump(self) -> None:
        """Wake the reader, or (push delivery) hand everything to the sink."""
        sink = self.sink
        if sink is None:
            self.lot.unpark_all()
            return
        on_message, on_end = sink
        while self.items:
            item = self.items.popleft()
            self.size -= len(item)
            try:
                on_message(item)
            except Exception as exc:
                self.sink = None
                self.end = exc
                on_end(exc)
                return
        if self.end is not None:
            self.sink = None
            on_end(None if self.end is _END else self.end)

    def set_headers(self, headers: dict[str, str]) -> None:
        self.headers = headers
        self.lot.unpark_all()

    async def get(self) -> bytes | None:
        await trio.lowlevel.checkpoint_if_cancelled()
        while True:
            if self.items:
                item = self.items.popleft()
                self.size -= len(item)
                return item
            if self.end is not None:
                if self.end is _END:
                    return None
                raise again(self.end)
            await self.lot.park()


class _End(Exception):
    """The marker of a clean end of stream."""


_END: Final = _End()


class _Pipe:
    """One grpclib stream seen from trio: an inbox filled by a reader pump on the loop, and
    an outbox drained by a writer pump on the loop."""

    def __init__(self, portal: Portal, token: trio.lowlevel.TrioToken, label: str) -> None:
        self.portal = portal
        self.loop = portal.loop
        self.token = token
        self.label = label
        self.inbox = _Inbox()
        self.outbox: asyncio.Queue[tuple[str, bytes]] | None = None
        """What trio queued for the writer pump: ``("headers", b"")``, ``("message", data)``,
        ``("last", data)`` (a message that ends this side) or ``("end", b"")``."""
        self.done = False

    # -- loop side: deliveries to trio (each one wake-up of the trio thread)

    def deliver(self, item: bytes) -> None:
        with contextlib.suppress(trio.RunFinishedError):
            self.token.run_sync_soon(self.inbox.put, item)

    def deliver_end(self, end: BaseException) -> None:
        with contextlib.suppress(trio.RunFinishedError):
            self.token.run_sync_soon(self.inbox.finish, end)

    def deliver_headers(self, headers: dict[str, str]) -> None:
        with contextlib.suppress(trio.RunFinishedError):
            self.token.run_sync_soon(self.inbox.set_headers, headers)

    # -- trio side

    def queue(self, kind: str, data: bytes = b"") -> None:
        """Hand one item to the writer pump (see :attr:`outbox`)."""
        if self.inbox.end is not None and self.inbox.end is not _END:
            raise again(self.inbox.end)
        outbox = self.outbox
        assert outbox is not None
        try:
            self.loop.call_soon_threadsafe(outbox.put_nowait, (kind, data))
        except RuntimeError:
            raise ConnectionLost("the grpclib backend's loop has stopped") from None


# ----------------------------------------------------------------------------- client


class GrpclibClientCall:
    """A call made through grpclib, used from trio."""

    def __init__(self, pipe: _Pipe, settings: GrpcSettings) -> None:
        self._pipe = pipe
        self._settings = settings
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    async def _open(
        self,
        channel: _GrpclibChannel,
        path: str,
        metadata: Mapping[str, str],
        timeout: float | None,  # noqa: ASYNC109 - grpclib applies it to the call
    ) -> None:
        """On the loop: start the stream and its pumps."""
        stream = channel.request(
            path,
            Cardinality.STREAM_STREAM,
            bytes,
            bytes,
            timeout=timeout,
            metadata=dict(metadata) or None,
        )
        await stream.__aenter__()
        try:
            await stream.send_request()
        except BaseException as exc:
            await stream.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        self._pipe.outbox = asyncio.Queue()
        self._task = asyncio.get_running_loop().create_task(self._pump(stream))

    async def _pump(self, stream: _ClientStream[bytes, bytes]) -> None:
        pipe = self._pipe
        writer = asyncio.get_running_loop().create_task(self._write(stream))
        end: BaseException = _END
        try:
            await stream.recv_initial_metadata()
            pipe.deliver_headers(
                {str(key): str(value) for key, value in (stream.initial_metadata or {}).items()}
            )
            protocol_stream = stream._stream
            while True:
                with stream._wrapper:
                    data = await _read_message(protocol_stream, self._settings.max_message_size)
                if data is None:
                    break
                pipe.deliver(data)
            if stream._end_done:
                await stream.recv_trailing_metadata()
            else:
                # The server ended the call before this side half-closed: legal in gRPC
                # (RLMesh does it after a non-recoverable env error), but grpclib's
                # recv_trailing_metadata refuses it, so the trailers are read here.
                with stream._wrapper:
                    await protocol_stream.recv_trailers()
                if (failure := _status_received(protocol_stream)) is not None:
                    raise failure
        except GrpcError as exc:
            end = exc
            with contextlib.suppress(Exception):
                await stream.cancel()
        except asyncio.CancelledError:
            end = ConnectionLost("the call was cancelled by this side")
            raise
        except (StreamTerminatedError, GRPCError) as exc:
            terminated = isinstance(exc, StreamTerminatedError)
            if terminated:
                # Messages that arrived before the reset still reach the caller (RLMesh
                # sends an in-band error, then resets), even when the reset came before
                # this pump read the response headers.
                max_size = self._settings.max_message_size
                with contextlib.suppress(Exception):
                    while (
                        salvaged := await _read_message(stream._stream, max_size, salvage=True)
                    ) is not None:
                        pipe.deliver(salvaged)
            if terminated and _ended_ok(stream._stream):
                end = _END  # OK trailers, then a reset: the call ended cleanly
            else:
                end = _call_ended(exc, stream, pipe.label, self._settings)
        except Exception as exc:
            end = _from_grpclib(exc, pipe.label)
        finally:
            writer.cancel()
            pipe.deliver_end(end)
            with contextlib.suppress(BaseException):
                await stream.__aexit__(None, None, None)

    async def _write(self, stream: _ClientStream[bytes, bytes]) -> None:
        outbox = self._pipe.outbox
        assert outbox is not None
        with contextlib.suppress(Exception):
            while True:
                kind, data = await outbox.get()
                if kind == "end":
                    await stream.end()
                    return
                await stream.send_message(data, end=kind == "last")
                if kind == "last":
                    return

    async def send_message(self, message: bytes, *, end: bool = False) -> None:
        self._pipe.queue("last" if end else "message", message)
        await trio.lowlevel.checkpoint_if_cancelled()

    async def end(self) -> None:
        self._pipe.queue("end")
        await trio.lowlevel.checkpoint_if_cancelled()

    async def receive_message(self) -> bytes | None:
        return await self._pipe.inbox.get()

    async def initial_metadata(self) -> Mapping[str, str]:
        inbox = self._pipe.inbox
        while inbox.headers is None:
            if inbox.end is not None:
                if inbox.end is _END:
                    return {}
                raise again(inbox.end)
            await inbox.lot.park()
        return inbox.headers

    def deliver_to(
        self,
        on_message: Callable[[bytes], None],
        on_end: Callable[[BaseException | None], None],
    ) -> None:
        self._pipe.inbox.sink = (on_message, on_end)
        self._pipe.inbox.pump()

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        task = self._task
        if task is not None and self._pipe.inbox.end is None:
            with contextlib.suppress(RuntimeError):
                self._pipe.loop.call_soon_threadsafe(task.cancel)
        await trio.lowlevel.checkpoint()


class GrpclibChannel:
    """Calls to one address through a grpclib channel on the portal's loop."""

    def __init__(self, portal: Portal, address: Address, settings: GrpcSettings) -> None:
        self._portal = portal
        self.address = address
        self.label = str(address)
        self.settings = settings
        self._channel: _GrpclibChannel | None = None

    def _grpclib_channel(self) -> _GrpclibChannel:
        # Runs on the loop (grpclib binds the channel to the running loop).
        if self._channel is None:
            config = _configuration(self.settings)
            if self.address.kind == "unix":
                self._channel = _GrpclibChannel(
                    path=self.address.path, codec=_RawCodec(), config=config
                )
            else:
                self._channel = _GrpclibChannel(
                    self.address.host, self.address.port, codec=_RawCodec(), config=config
                )
        return self._channel

    async def open_call(
        self,
        path: str,
        metadata: Mapping[str, str] | None = None,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - sent as grpc-timeout
    ) -> GrpclibClientCall:
        pipe = _Pipe(self._portal, trio.lowlevel.current_trio_token(), self.label)
        call = GrpclibClientCall(pipe, self.settings)

        async def start() -> None:
            await call._open(self._grpclib_channel(), path, metadata or {}, timeout)

        try:
            await self._portal.run(start)
        except Exception as exc:
            raise _from_grpclib(exc, self.label) from None
        return call

    async def unary(
        self,
        path: str,
        request: bytes,
        metadata: Mapping[str, str] | None = None,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - sent as grpc-timeout, enforced here
    ) -> bytes:
        max_size = self.settings.max_message_size

        async def call() -> bytes:
            channel = self._grpclib_channel()
            async with channel.request(
                path,
                Cardinality.UNARY_UNARY,
                bytes,
                bytes,
                timeout=timeout,
                metadata=dict(metadata or {}) or None,
            ) as stream:
                try:
                    await stream.send_message(request, end=True)
                    await stream.recv_initial_metadata()
                    with stream._wrapper:
                        reply = await _read_message(stream._stream, max_size)
                    await stream.recv_trailing_metadata()
                except (StreamTerminatedError, GRPCError) as exc:
                    raise _call_ended(exc, stream, self.label, self.settings) from None
            if reply is None:
                raise GrpcError(Status.INTERNAL, f"the server answered {path} with no message")
            return reply

        try:
            return await self._portal.run(call)
        except Exception as exc:
            raise _from_grpclib(exc, self.label) from None

    async def aclose(self) -> None:
        channel, self._channel = self._channel, None
        if channel is not None:

            async def close() -> None:
                protocol = getattr(channel, "_protocol", None)
                transport = getattr(getattr(protocol, "connection", None), "_transport", None)
                channel.close()
                if transport is not None:
                    # asyncio closes a socket only once its write buffer is flushed (the
                    # rest of a refused message can sit there), and the portal's loop may
                    # stop first, leaking the socket. Every call is over: drop the rest.
                    if transport.get_write_buffer_size():
                        transport.abort()
                    await asyncio.sleep(0)  # let the transport finish closing

            with trio.CancelScope(shield=True), contextlib.suppress(Exception):
                await self._portal.run(close)


# ----------------------------------------------------------------------------- server


@attrs.define(eq=False)
class GrpclibServerCall:
    """An incoming grpclib call, as a trio :data:`~._backend.Handler` sees it."""

    _pipe: _Pipe
    path: str
    metadata: Mapping[str, str]
    peer: str

    async def receive_message(self) -> bytes | None:
        return await self._pipe.inbox.get()

    async def send_initial_metadata(self) -> None:
        self._pipe.queue("headers")
        await trio.lowlevel.checkpoint_if_cancelled()

    async def send_message(self, message: bytes) -> None:
        self._pipe.queue("message", message)
        await trio.lowlevel.checkpoint_if_cancelled()


class _Bridge:
    """The grpclib side of a server: one asyncio handler per call, bridging to trio."""

    def __init__(
        self,
        portal: Portal,
        token: trio.lowlevel.TrioToken,
        nursery: trio.Nursery,
        handlers: Mapping[str, Handler],
        settings: GrpcSettings,
    ) -> None:
        self.portal = portal
        self.token = token
        self.nursery = nursery
        self.handlers = dict(handlers)
        self.settings = settings
        self.open_calls = 0
        self.scopes: set[trio.CancelScope] = set()
        """Cancel scopes of the trio handlers running (trio side)."""
        self.tasks: set[asyncio.Task[Any]] = set()
        """grpclib's tasks serving calls (loop side); done once a call's status is sent."""
        self.outcomes: set[asyncio.Future[tuple[Status, str] | None]] = set()
        """How each open call ends, once its trio handler says (loop side)."""

    async def end_calls(self, grace: float) -> None:
        """On the loop: end every open call with UNAVAILABLE, even one whose trio handler
        is stuck in code it cannot abandon, and wait (at most ``grace`` seconds) until every
        call has sent its status."""
        for outcome_ in list(self.outcomes):
            _settle(outcome_, (Status.UNAVAILABLE, SHUTDOWN_MESSAGE))
        if self.tasks:
            await asyncio.wait(set(self.tasks), timeout=grace)

    def __mapping__(self) -> dict[str, _GrpclibHandler]:
        return {
            path: _GrpclibHandler(self._make_handler(path), Cardinality.STREAM_STREAM, bytes, bytes)
            for path in self.handlers
        }

    def _make_handler(self, path: str) -> Callable[[Any], Any]:
        async def handle(stream: Any) -> None:
            await self._serve(path, stream)

        return handle

    async def _serve(self, path: str, stream: Any) -> None:
        """On the loop: run the trio handler for one call, pumping its messages."""
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        if task is not None:
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        peer = _peer_label(stream)
        metadata = {
            key: value for key, value in (stream.metadata or {}).items() if isinstance(value, str)
        }
        pipe = _Pipe(self.portal, self.token, peer)
        pipe.outbox = asyncio.Queue()
        call = GrpclibServerCall(pipe, path, metadata, peer)
        result: asyncio.Future[tuple[Status, str] | None] = loop.create_future()
        self.outcomes.add(result)
        result.add_done_callback(self.outcomes.discard)
        scope_box: list[trio.CancelScope] = []
        scopes = self.scopes
        handler = self.handlers[path]
        timeout = stream.deadline.time_remaining() if stream.deadline is not None else None

        async def run_in_trio() -> None:
            outcome_: tuple[Status, str] | None = None
            try:
                with trio.CancelScope() as scope:
                    scope_box.append(scope)
                    scopes.add(scope)
                    if timeout is not None:
                        scope.deadline = trio.current_time() + max(0.0, timeout)
                        outcome_ = (
                            Status.DEADLINE_EXCEEDED,
                            f"{path} exceeded the client's deadline",
                        )
                    self.open_calls += 1
                    try:
                        outcome_ = await handler_outcome(handler, call)
                    finally:
                        self.open_calls -= 1
                if scope.cancelled_caught and timeout is None:
                    outcome_ = (Status.UNAVAILABLE, SHUTDOWN_MESSAGE)
            finally:
                scopes.discard(scope_box[0]) if scope_box else None
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(_settle, result, outcome_)

        def cancel_trio() -> None:
            for scope in scope_box:
                scope.cancel()

        try:
            self.token.run_sync_soon(self.nursery.start_soon, run_in_trio)
        except trio.RunFinishedError:
            raise GRPCError(_GrpclibStatus.UNAVAILABLE, SHUTDOWN_MESSAGE) from None
        reader = loop.create_task(self._read(stream, pipe))
        try:
            status = await self._write(stream, pipe, result)
        except asyncio.CancelledError:
            with contextlib.suppress(trio.RunFinishedError):
                self.token.run_sync_soon(cancel_trio)
            raise
        finally:
            reader.cancel()
        if status is None:
            return
        code, message = status
        if code is not Status.OK:
            raise GRPCError(_GrpclibStatus(int(code)), message)

    async def _read(self, stream: Any, pipe: _Pipe) -> None:
        end: BaseException = _END
        try:
            while True:
                data = await _read_message(stream._stream, self.settings.max_message_size)
                if data is None:
                    break
                pipe.deliver(data)
        except GrpcError as exc:
            end = exc
        except asyncio.CancelledError:
            end = ConnectionLost("the call ended")
            raise
        except Exception as exc:
            end = _from_grpclib(exc, pipe.label)
        finally:
            pipe.deliver_end(end)

    async def _write(
        self, stream: Any, pipe: _Pipe, result: asyncio.Future[tuple[Status, str] | None]
    ) -> tuple[Status, str] | None:
        """Write what trio queues until its handler is done; returns the handler's status."""
        outbox = pipe.outbox
        assert outbox is not None
        while True:
            getter = asyncio.ensure_future(outbox.get())
            waiting: set[asyncio.Future[Any]] = {getter, result}
            done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            if getter in done:
                await self._write_one(stream, *getter.result())
                continue
            getter.cancel()
            while not outbox.empty():
                await self._write_one(stream, *outbox.get_nowait())
            return result.result()

    @staticmethod
    async def _write_one(stream: Any, kind: str, data: bytes) -> None:
        if kind == "headers":
            if not stream._send_initial_metadata_done:
                await stream.send_initial_metadata()
            return
        await stream.send_message(data)


def _settle(
    future: asyncio.Future[tuple[Status, str] | None], value: tuple[Status, str] | None
) -> None:
    if not future.done():
        future.set_result(value)


def _peer_label(stream: Any) -> str:
    try:
        addr = stream.peer.addr()
    except Exception:
        return "unknown peer"
    if isinstance(addr, tuple) and len(addr) >= 2:
        return f"tcp://{addr[0]}:{addr[1]}"
    return f"unix://{addr}" if addr else "unix socket client"


class GrpclibServer:
    """A grpclib server on the portal's loop, serving trio handlers."""

    def __init__(
        self, portal: Portal, bridge: _Bridge, server: TrackedServer, address: str
    ) -> None:
        self._portal = portal
        self._bridge = bridge
        self._server = server
        self.address = address

    @property
    def open_calls(self) -> int:
        return self._bridge.open_calls

    def stop_accepting(self) -> None:
        with contextlib.suppress(RuntimeError):
            self._portal.loop.call_soon_threadsafe(self._server.stop_accepting)

    async def shutdown(self) -> None:
        """End every open call with UNAVAILABLE, then close every connection (bounded)."""
        self.stop_accepting()
        with trio.CancelScope(shield=True):
            # Every call gets its UNAVAILABLE status before the connections close, and the
            # trio handlers are cancelled (a stuck one finishes later, unheard).
            for scope in list(self._bridge.scopes):
                scope.cancel()
            with contextlib.suppress(Exception):
                await self._portal.run(self._bridge.end_calls, SERVER_CLOSE_GRACE)
                await self._portal.run(self._server.close_connections, SERVER_CLOSE_GRACE)


async def _start(server: TrackedServer, bind: Address) -> str:
    if bind.kind == "unix":
        assert bind.path is not None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(bind.path)
        await server.start(path=bind.path)
        return str(bind)
    await server.start(bind.host, bind.port)
    return Address.tcp(str(bind.host), server.bound_port()).authority


class GrpclibBackend:
    """grpclib on asyncio, bridged to trio."""

    name: BackendName = "grpclib"

    @contextlib.asynccontextmanager
    async def open_channel(
        self, address: str, settings: GrpcSettings
    ) -> AsyncIterator[GrpclibChannel]:
        """A channel to ``address`` (connected on its first call)."""
        parsed = _checked(parse_address(address))
        async with open_portal() as portal:
            channel = GrpclibChannel(portal, parsed, settings)
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
    ) -> AsyncIterator[GrpclibServer]:
        """Serve ``handlers`` on ``address`` for the duration of the block."""
        bind = _checked(parse_bind_address(address))
        token = trio.lowlevel.current_trio_token()
        # The trio handlers run in a shielded nursery: a stop arrives as a cancellation of
        # this block, and the calls must outlive it until shutdown() has drained them and
        # given each its status.
        async with open_portal() as portal, shielded_nursery() as nursery:
            bridge = _Bridge(portal, token, nursery, handlers, settings)

            async def start() -> tuple[TrackedServer, str]:
                server = TrackedServer(
                    [bridge], limits=limits, codec=_RawCodec(), config=_configuration(settings)
                )
                return server, await _start(server, bind)

            tracked, bound = await portal.run(start)
            server = GrpclibServer(portal, bridge, tracked, bound)
            try:
                yield server
            finally:
                await server.shutdown()


def _checked(address: Address) -> Address:
    if address.kind == "memory":
        raise ValueError(f"{address}: in-memory addresses are served by the trio backend only")
    return address


GRPCLIB_BACKEND: Final = GrpclibBackend()
