"""gRPC over HTTP/2 on trio: one connection machine for both roles, built on ``h2``.

Theory of operation.

* :class:`H2Connection` drives h2's state machine over one trio byte stream (a TCP or
  Unix socket, or an in-memory stream). :meth:`H2Connection.run` owns a nursery holding
  the connection's tasks: one reader, the keepalive watcher, and on a server every call's
  handler. When the connection ends, for whatever reason, that nursery is cancelled and
  every open stream fails with the same :class:`ConnectionLost` reason.
* The reader is the only task that reads the socket. It feeds h2 and dispatches h2's
  events to the streams: it appends decoded messages to queues and wakes parked tasks, and
  never runs anything else, so a slow handler can never stall another stream.
* Writes are serialized without a lock: a task that queued bytes in h2 calls
  :meth:`H2Connection.flush`; if nobody is writing it becomes the writer and writes until
  nothing is left (picking up what other tasks queued meanwhile), otherwise it waits until
  its bytes are out. The writer is shielded and bounded by ``write_timeout``: a frame is
  never torn (a torn frame would corrupt every stream), and a peer that stops reading costs
  the connection rather than a hang.
* A message is sent whole even when its sender is cancelled: it goes into h2 in one
  synchronous call when the flow-control window allows, and otherwise chunk by chunk under
  a shielded, bounded scope.
* :class:`H2Stream` is one gRPC call. Incoming DATA is decoded into messages as it
  arrives (:class:`~._framing.MessageDecoder` refuses an oversized message at its header,
  before buffering its body). Flow-control credit goes back to the peer as data arrives,
  unless the stream's unread messages exceed its window; then it waits until the
  application reads, so memory per stream stays bounded. Credit is handed to h2 in
  batches (once a quarter of the smaller window is owed, and at once when held data is
  released), which spares an h2 call per message and never leaves the peer without room.
* DATA frames of an open call take a fast path beside h2 (h2 costs more per message than
  the rest of a step's transport work). The reader splits what it reads into frames
  itself; a DATA frame without flags (no END_STREAM, no padding) on a stream both this
  module and h2 consider open, within both windows and the frame limit, is decoded here,
  and every other frame (HEADERS, SETTINGS, RST_STREAM, GOAWAY, PING, WINDOW_UPDATE, a
  DATA frame ending its stream or padded, anything unusual) goes to h2 in order, so
  protocol errors are still h2's to find. Sending, a whole message that fits both send
  windows and one frame is framed here too, after anything h2 queued. h2 keeps owning the
  flow-control numbers: the fast path debits the same counters h2's own paths would
  (h2's window managers on receipt, its outbound windows on sending), so WINDOW_UPDATE,
  ``acknowledge_received_data`` and the window checks of h2's own sends stay exact. This
  reads h2 attributes that are not public API, so the fast path runs only with the h2
  releases they were checked against (:data:`H2_CHECKED`, which ``pyproject.toml``
  requires; another release logs a warning at import) and only if they are all present;
  otherwise, and with ``TRIO_RLMESH_NO_FAST_PATHS=1`` (:mod:`trio_rlmesh._fastpaths`),
  everything goes through h2, which ``nox -s tests_slow_paths`` runs the suite against.
* Keepalive: while a call is open and the peer has sent nothing for
  ``keepalive_interval``, a PING goes out; if still nothing at all arrives, the connection
  is declared dead ``keepalive_interval + keepalive_timeout`` after the peer's last byte
  (or ``keepalive_timeout`` after the PING, if that is later: a call that opens on a
  long-silent connection).
* A server holds each client to its :class:`~._settings.ServerLimits`: every byte read
  goes through a :class:`~._guard.FrameGuard` before h2 sees it, and a client past a
  budget or the header block cap gets GOAWAY ``ENHANCE_YOUR_CALM`` (if its socket takes
  it at once, or within ``GOAWAY_GRACE``) and loses the connection. A second task closes
  a connection that sends no preface and SETTINGS within ``handshake_timeout``, and one
  with no call (no stream, no handler running) for ``idle_connection_timeout`` (GOAWAY
  ``NO_ERROR``). A peer's RST_STREAM cancels the call's handler at once (:attr:`H2Stream.scope`),
  and request headers are read strictly (:func:`~._guard.request_headers`): a refused
  request is answered with its status before any handler runs.
* Delayed ACKs: a client that has just read the first part of a response and has nothing
  to send (a unary call's message before its trailers, a stream's headers before its
  first message) asks the kernel to acknowledge at once (``TCP_QUICKACK``, Linux). A
  server whose socket keeps Nagle's algorithm on (``rlmesh.EnvServer`` does) holds its
  next small write until the previous one is acknowledged, and Linux delays that ACK by
  up to 40 ms: each such pair cost a session's start about 40 ms. In the steady state of
  a stream (a reply, then this side's next request carrying the ACK) nothing is asked.
* h2 treats GOAWAY as the end of the connection (no frame may follow it in either
  direction), so this module does too: a peer's GOAWAY fails every open stream, and a
  graceful close here first ends its streams, then sends GOAWAY.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import logging
import os
import socket
import struct
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
import h2.stream
import trio

from ..._fastpaths import FAST_PATHS, SWITCH
from ..._timeouts import GOAWAY_GRACE
from ._framing import HEADER_SIZE, MessageDecoder, frame
from ._guard import (
    Abuse,
    FrameGuard,
    cut_off,
    idle_reason,
    no_handshake,
    request_headers,
)
from ._settings import DEFAULT_LIMITS, GrpcSettings, ServerLimits
from ._status import (
    ConnectionLost,
    GrpcError,
    Status,
    again,
    decode_grpc_message,
    encode_grpc_message,
)

__all__ = ["H2Connection", "H2Stream", "Headers"]

Headers = list[tuple[str, str]]


_READ_SIZE: Final = 256 * 1024
_EAGER_READS: Final = 16
"""Reads that found data at once, in a row, before the reader yields to other tasks."""
_DEFAULT_WINDOW: Final = 65_535
_FRAME_HEADER: Final = struct.Struct(">HBBBL")
"""An HTTP/2 frame header: the 24-bit length as 16 + 8 bits, type, flags, stream id."""
_FRAME_HEADER_SIZE: Final = 9
_DATA_FRAME_AND_MESSAGE_HEADER: Final = struct.Struct(">HBBBLBI")
"""A DATA frame's header followed by its one message's gRPC prefix (flag, length)."""
_DATA: Final = 0
_STREAM_ID_MASK: Final = 0x7FFF_FFFF
_OPEN_CONNECTION: Final = frozenset(
    {h2.connection.ConnectionState.CLIENT_OPEN, h2.connection.ConnectionState.SERVER_OPEN}
)
_CAN_RECEIVE: Final = frozenset(
    {h2.stream.StreamState.OPEN, h2.stream.StreamState.HALF_CLOSED_LOCAL}
)
_QUICKACK: Final[int | None] = getattr(socket, "TCP_QUICKACK", None)
"""Linux's option to acknowledge received data at once (``None`` where absent)."""
_CAN_SEND: Final = frozenset({h2.stream.StreamState.OPEN, h2.stream.StreamState.HALF_CLOSED_REMOTE})


_log = logging.getLogger(__name__)

H2_CHECKED: Final = ((4, 3), (4, 5))
"""The h2 releases, from the first up to (not including) the second, whose internals the
DATA fast path reads were checked against (4.3.0 and 4.4.1; 4.1 and 4.2 lack them).
``pyproject.toml`` requires the same range."""


def fast_data_allowed(version: str, *, switched_on: bool = FAST_PATHS) -> bool:
    """Whether the DATA fast path may run with h2 ``version``: the fast paths are switched on
    (:mod:`trio_rlmesh._fastpaths`) and ``version`` is in :data:`H2_CHECKED`. Outside the
    range it says so in a log line (once, when this module is imported)."""
    if not switched_on:
        return False
    low, high = H2_CHECKED
    try:
        release = tuple(int(part) for part in version.split(".")[:2])
    except ValueError:  # not a plain release number: not one that was checked
        release = ()
    if low <= release < high:
        return True
    _log.warning(
        "h2 %s is outside the releases the gRPC DATA fast path was checked against "
        "(>=%s,<%s): every DATA frame goes through h2 (slower, same behaviour); install a "
        "checked h2, or set %s=1 to silence this",
        version,
        ".".join(map(str, low)),
        ".".join(map(str, high)),
        SWITCH,
    )
    return False


def _h2_internals_present() -> bool:
    """Whether this h2 has the internals the DATA fast path reads and debits."""
    try:
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        conn.initiate_connection()
        conn.send_headers(
            1, [(":method", "POST"), (":path", "/"), (":scheme", "http"), (":authority", "x")]
        )
        stream = conn.streams[1]
        checks = (
            conn.incoming_buffer._headers_buffer,
            conn.incoming_buffer._preamble_len,
            conn.incoming_buffer._data,
            conn._data_to_send,
            conn._inbound_flow_control_window_manager.current_window_size,
            conn._inbound_flow_control_window_manager.window_consumed,
            conn.outbound_flow_control_window,
            conn.max_inbound_frame_size,
            conn.max_outbound_frame_size,
            conn.state_machine.state,
            stream._inbound_window_manager.current_window_size,
            stream._inbound_window_manager.window_consumed,
            stream.outbound_flow_control_window,
            stream._expected_content_length,
            stream.state_machine.state,
            stream.state_machine.headers_received,
        )
        return len(checks) == 16 and stream.state_machine.state in _CAN_SEND
    except Exception:  # pragma: no cover - a different h2
        return False


FAST_DATA: Final[bool] = fast_data_allowed(h2.__version__) and _h2_internals_present()
"""Whether DATA frames of open calls bypass h2 (see the module docstring)."""

# What an HTTP status that is not 200 means for a gRPC call (gRPC's HTTP-to-status table).
_HTTP_STATUS: Final = {
    400: Status.INTERNAL,
    401: Status.UNAUTHENTICATED,
    403: Status.PERMISSION_DENIED,
    404: Status.UNIMPLEMENTED,
    429: Status.UNAVAILABLE,
    502: Status.UNAVAILABLE,
    503: Status.UNAVAILABLE,
    504: Status.UNAVAILABLE,
}


def _error_code_name(code: int | None) -> str:
    if code is None:
        return "unknown code"
    try:
        return h2.errors.ErrorCodes(code).name
    except (ValueError, TypeError):
        return str(code)


def status_from_headers(headers: Mapping[str, str]) -> GrpcError | None:
    """The call's outcome from trailers (or trailers-only headers): ``None`` for OK."""
    status = Status.of(headers.get("grpc-status"))
    if "grpc-status" not in headers:
        return GrpcError(Status.INTERNAL, "the server ended the call without a grpc-status")
    if status is Status.OK:
        return None
    return GrpcError(status, decode_grpc_message(headers.get("grpc-message", "")))


class H2Stream:
    """One gRPC call on an :class:`H2Connection`, from either end."""

    __slots__ = (
        "_conn",
        "_decoder",
        "_failure",
        "_held",
        "_lot",
        "_messages",
        "_queued",
        "_sink",
        "answered",
        "client",
        "headers",
        "headers_sent",
        "local_ended",
        "remote_ended",
        "scope",
        "stream_id",
        "trailers",
    )

    def __init__(self, conn: H2Connection, stream_id: int, *, client: bool) -> None:
        self._conn = conn
        self.stream_id = stream_id
        self.client = client
        self.headers: dict[str, str] | None = None
        """Request headers (server side) or response headers (client side)."""
        self.trailers: dict[str, str] | None = None
        """The response trailers (client side), including a trailers-only response."""
        self.headers_sent = False
        """Server side: whether the response headers went out."""
        self.local_ended = False
        self.remote_ended = False
        self.answered = False
        """Whether any DATA arrived from the peer on this stream."""
        self._decoder = MessageDecoder(conn.settings.max_message_size)
        self._messages: collections.deque[bytes] = collections.deque()
        self._queued = 0
        self._held = 0
        self._failure: BaseException | None = None
        self._lot = trio.lowlevel.ParkingLot()
        self._sink: (
            tuple[Callable[[bytes], None], Callable[[BaseException | None], None]] | None
        ) = None
        self.scope: trio.CancelScope | None = None
        """Server side: the handler's cancel scope, cancelled when the peer resets the call."""

    @property
    def connection(self) -> H2Connection:
        return self._conn

    @property
    def failure(self) -> BaseException | None:
        """Why the stream failed, once it has."""
        return self._failure

    # ----------------------------------------------------------------- reading

    async def receive_message(self) -> bytes | None:
        """The next message, or ``None`` once the peer ended its side with success.

        Messages that arrived before a reset or a connection loss are still returned
        first. On the client side the end of the stream carries the call's status.

        Raises:
            GrpcError: the call ended with a non-OK status (or a message was refused).
            ConnectionLost: the stream or the connection went away without a status.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        while True:
            if self._messages:
                return self._take()
            if self._failure is not None:
                raise again(self._failure)
            if self.remote_ended:
                if self.client:
                    error = status_from_headers(self.trailers or {})
                    if error is not None:
                        raise error
                return None
            await self._lot.park()

    async def wait_headers(self) -> dict[str, str]:
        """Client side: the response headers, once they arrive.

        Raises:
            GrpcError: a trailers-only response with a non-OK status.
            ConnectionLost: as :meth:`receive_message`.
        """
        while self.headers is None:
            if self._failure is not None:
                raise again(self._failure)
            await self._lot.park()
        if self.trailers is not None and self.trailers is self.headers:
            error = status_from_headers(self.trailers)
            if error is not None:
                raise error
        return self.headers

    def _take(self) -> bytes:
        message = self._messages.popleft()
        self._queued -= len(message)
        if self._held and self._queued <= self._conn.settings.stream_window:
            held, self._held = self._held, 0
            self._conn.acknowledge(self.stream_id, held, now=True)
            self._conn.flush_soon()
        return message

    # ----------------------------------------------------------------- writing

    async def send_message(self, message: bytes, *, end: bool = False) -> None:
        """Send one message whole (even if the caller is cancelled meanwhile).

        Raises:
            ConnectionLost, GrpcError: the stream or the connection failed.
        """
        await self._conn.send_message(self, message, end)

    async def end(self) -> None:
        """Client side: half-close (no more messages from this side)."""
        if self.local_ended:
            return
        self._conn.end_stream(self)
        await self._conn.flush()

    async def send_headers(self, metadata: Iterable[tuple[str, str]] = ()) -> None:
        """Server side: send the response headers now (idempotent)."""
        if not self.headers_sent:
            self._conn.send_response_headers(self, metadata)
            await self._conn.flush()

    def finish(self, status: Status, message: str = "") -> None:
        """Server side: end the call with ``status`` (trailers; trailers-only if no headers
        went out). Synchronous; the connection writes it soon. Idempotent."""
        self._conn.send_trailers(self, status, message)

    def cancel(self) -> None:
        """Reset the stream (RST_STREAM CANCEL) unless it is already over. Synchronous."""
        self._conn.reset(self, h2.errors.ErrorCodes.CANCEL)

    # ----------------------------------------------------------------- from the reader

    def _on_headers(self, headers: dict[str, str], end: bool) -> None:
        if self.headers is None:
            self.headers = headers
            if self.client:
                http_status = headers.get(":status", "200")
                if http_status != "200" and "grpc-status" not in headers:
                    code = _HTTP_STATUS.get(int(http_status), Status.UNKNOWN)
                    self._fail(GrpcError(code, f"HTTP status {http_status} from the server"))
                elif "grpc-status" in headers:
                    self.trailers = headers  # trailers-only response
        else:
            self.trailers = headers
        if end:
            self._on_end()
        self._pump()

    def _on_data(self, data: bytes | bytearray | memoryview, flow: int) -> None:
        self.answered = True
        if self._failure is not None:
            self._conn.acknowledge(self.stream_id, flow)
            return
        try:
            for message in self._decoder.feed(data):
                self._messages.append(message)
                self._queued += len(message)
        except GrpcError as exc:
            self._conn.acknowledge(self.stream_id, flow)
            self._conn.refuse(self, exc)
            return
        if self._queued > self._conn.settings.stream_window:
            self._held += flow
        else:
            self._conn.acknowledge(self.stream_id, flow)
        self._pump()

    def _on_end(self) -> None:
        self.remote_ended = True
        if self._decoder.partial and self._failure is None:
            self._failure = GrpcError(
                Status.INTERNAL, "the stream ended in the middle of a message"
            )
        self._pump()
        # A sender waiting for credit on this stream must look again: the call may be over.
        self._conn._window.unpark_all()

    def _on_reset(self, code: int | None) -> None:
        if not self.client:
            if self.scope is not None:
                # The client gave the call up: its handler stops now, not at its next
                # touch of the stream (a flood of reset calls must not pile up handlers).
                self.scope.cancel()
        elif self.remote_ended and self.trailers is not None:
            # A reset after a complete call (RST_STREAM NO_ERROR after trailers): the
            # status already says how it ended.
            self._pump()
            return
        self._fail(ConnectionLost(f"the peer reset the stream ({_error_code_name(code)})"))

    def _fail(self, failure: BaseException) -> None:
        if self._failure is None:
            self._failure = failure
        self._pump()

    # ----------------------------------------------------------------- push delivery

    def deliver_to(
        self,
        on_message: Callable[[bytes], None],
        on_end: Callable[[BaseException | None], None],
    ) -> None:
        """Hand every message to ``on_message`` as it arrives, and the end of the call to
        ``on_end`` (``None`` for an OK end), synchronously in the connection's reader.

        It saves a task switch per message over :meth:`receive_message` (which must not be
        used any more). An exception from ``on_message`` ends the call with it.
        """
        self._sink = (on_message, on_end)
        self._pump()

    def _pump(self) -> None:
        sink = self._sink
        if sink is None:
            self._lot.unpark_all()
            return
        on_message, on_end = sink
        while self._messages:
            try:
                on_message(self._take())
            except Exception as exc:
                self._sink = None
                self._fail(exc)
                self._conn.reset(self, h2.errors.ErrorCodes.CANCEL)
                on_end(exc)
                return
        end: BaseException | None
        if self._failure is not None:
            end = self._failure
        elif self.remote_ended:
            end = status_from_headers(self.trailers or {}) if self.client else None
        else:
            return
        self._sink = None
        on_end(end)


class H2Connection:
    """One HTTP/2 connection carrying gRPC calls, as client or as server.

    Args:
        transport: the byte stream (the connection owns and closes it).
        client: which role this side plays.
        settings: limits, windows and keepalive.
        authority: client side: the ``:authority`` of every request.
        on_request: server side: called (synchronously, in the reader) with each new
            stream; it starts the handler in :attr:`nursery`.
        label: how errors name the peer (``tcp://host:port``).
        limits: server side: what the client may do (see the module doc).
        guard: server side: the connection's guard (by default a new one over ``limits``).
    """

    def __init__(
        self,
        transport: trio.abc.Stream,
        *,
        client: bool,
        settings: GrpcSettings,
        authority: str = "localhost",
        on_request: Callable[[H2Stream], None] | None = None,
        label: str = "",
        limits: ServerLimits = DEFAULT_LIMITS,
        guard: FrameGuard | None = None,
    ) -> None:
        self.settings = settings
        self.limits = limits
        self.client = client
        self.authority = authority
        self.label = label
        self._transport = transport
        # On a real socket, read and write the descriptor directly: a syscall that succeeds
        # at once then costs no trip through the scheduler (trio's stream methods always
        # yield), which is two scheduler rounds per request/reply saved.
        sock = transport.socket if isinstance(transport, trio.SocketStream) else None
        self._fd: int | None = sock.fileno() if sock is not None else None
        self._quick_ack_socket = (
            sock
            if client
            and sock is not None
            and _QUICKACK is not None
            and sock.family in (socket.AF_INET, socket.AF_INET6)
            else None
        )
        """The TCP socket to ask for an immediate ACK (client side, where supported)."""
        self._eager = 0
        self._drained = False
        self._partial = bytearray()
        """The start of a frame whose end has not been read yet (the DATA fast path)."""
        self._partial_needed = 0
        self._request_callback = on_request
        config = h2.config.H2Configuration(
            client_side=client,
            header_encoding="utf-8",
            validate_inbound_headers=False,
        )
        self._h2 = h2.connection.H2Connection(config)
        initial = {
            h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: settings.stream_window,
            h2.settings.SettingCodes.MAX_FRAME_SIZE: settings.max_frame_size,
            h2.settings.SettingCodes.ENABLE_PUSH: 0,
        }
        if not client:
            initial[h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS] = limits.max_concurrent_streams
        self._h2.local_settings = h2.settings.Settings(client=client, initial_values=initial)
        # h2 reads the inbound frame limit from its settings only when it is built (and on
        # a change the peer acknowledges); settings given as initial values never change,
        # so tell it here, or every frame above 16 KiB would be a FRAME_SIZE_ERROR.
        self._h2.max_inbound_frame_size = settings.max_frame_size
        self._streams: dict[int, H2Stream] = {}
        self._owed: dict[int, int] = {}
        self._owed_total = 0
        self._owed_limit = max(1, min(settings.stream_window, settings.connection_window) // 4)
        self._failure: ConnectionLost | None = None
        self._outbox: list[bytes] = []
        self._queued_seq = 0
        self._written_seq = 0
        self._writing = False
        self._written = trio.lowlevel.ParkingLot()
        self._window = trio.lowlevel.ParkingLot()
        self._inbound_at = 0.0
        self._nursery: trio.Nursery | None = None
        self._ping_ids = itertools.count(1)
        if not client and guard is None:
            guard = FrameGuard(limits, trio.current_time)
        self._guard = None if client else guard
        self.handlers = 0
        """Server side: handlers running (a call is live until its handler has returned)."""
        self._idle_since = trio.current_time()
        self._became_idle = trio.lowlevel.ParkingLot()
        self._ending = False
        self.closed = trio.Event()
        """Set once the connection has ended."""

    # ----------------------------------------------------------------- lifetime

    @property
    def nursery(self) -> trio.Nursery:
        assert self._nursery is not None, "the connection is not running"
        return self._nursery

    @property
    def failure(self) -> ConnectionLost | None:
        """Why the connection ended, once it has."""
        return self._failure

    @property
    def idle_since(self) -> float | None:
        """Server side: since when the connection has had no call (``None``: it has one,
        or it is ending)."""
        if self._streams or self.handlers or self._ending or self._failure is not None:
            return None
        return self._idle_since

    def handler_started(self) -> None:
        """Server side: a call's handler started (the server counts them)."""
        self.handlers += 1

    def handler_ended(self) -> None:
        """Server side: a call's handler returned."""
        self.handlers -= 1
        self._check_idle()

    def _check_idle(self) -> None:
        if not self._streams and not self.handlers:
            self._idle_since = trio.current_time()
            self._became_idle.unpark_all()

    @property
    def inbound_room(self) -> int:
        """How many more bytes of DATA the peer may send on the connection now."""
        return self._h2.inbound_flow_control_window

    def streams(self) -> list[H2Stream]:
        """The streams currently open."""
        return list(self._streams.values())

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the connection until it ends (then every stream has failed).

        ``task_status.started()`` is called once the connection preface is written.
        """
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self._inbound_at = self._idle_since = trio.current_time()
                self._h2.initiate_connection()
                extra = self.settings.connection_window - _DEFAULT_WINDOW
                if extra > 0:
                    self._h2.increment_flow_control_window(extra)
                try:
                    await self.flush()
                except ConnectionLost:
                    if self.client:
                        raise
                    return  # the client left before the server's preface: nothing to serve
                nursery.start_soon(self._read)
                if self.settings.keepalive_interval is not None:
                    nursery.start_soon(self._keepalive)
                if not self.client:
                    nursery.start_soon(self._watch_idle)
                task_status.started()
        finally:
            self._terminate(ConnectionLost("the connection was closed"))
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(self._transport)
            self.closed.set()

    async def aclose(
        self, reason: str = "the connection was closed by this side", *, detail: str = ""
    ) -> None:
        """Say GOAWAY (``detail`` as its debug data; bounded by ``write_timeout``) and end
        the connection."""
        if self._failure is None:
            with contextlib.suppress(h2.exceptions.ProtocolError):
                self._h2.close_connection(additional_data=detail.encode() or None)
            with contextlib.suppress(ConnectionLost):
                await self.flush()
        self._terminate(ConnectionLost(reason))

    def abort(self, reason: str) -> None:
        """End the connection at once, writing nothing more."""
        self._terminate(ConnectionLost(reason))

    def evict(self, reason: str) -> None:
        """Server side: end the connection soon, after a GOAWAY ``NO_ERROR`` saying
        ``reason`` (a server making room). It counts as busy from now on."""
        if self._failure is not None or self._ending:
            return
        self._ending = True
        try:
            assert self._nursery is not None
            self._nursery.start_soon(self._end_with_goaway, h2.errors.ErrorCodes.NO_ERROR, reason)
        except (AssertionError, RuntimeError):  # not running yet, or no longer
            self._terminate(self._lost(f"this side closed the connection: {reason}"))

    async def _calm_down(self, reason: str) -> None:
        """The client went past a limit: GOAWAY ``ENHANCE_YOUR_CALM``, then the end."""
        cut_off(self.label or "a client", reason)
        await self._end_with_goaway(h2.errors.ErrorCodes.ENHANCE_YOUR_CALM, reason)

    async def _end_with_goaway(self, code: int, reason: str) -> None:
        """GOAWAY with ``code`` and ``reason`` (written within ``GOAWAY_GRACE``, else not
        at all: the peer may have stopped reading), then end the connection."""
        self._ending = True
        with (
            trio.move_on_after(GOAWAY_GRACE),
            contextlib.suppress(
                OSError,
                h2.exceptions.ProtocolError,
                trio.BrokenResourceError,
                trio.ClosedResourceError,
            ),
        ):
            while self._writing:  # never write into the middle of another task's frames
                await self._written.park()
            self._h2.close_connection(code, additional_data=reason.encode())
            self._collect()
            rest = self._write_now(b"".join(self._outbox))
            self._outbox.clear()
            if rest and self._fd is None:
                await self._transport.send_all(rest)
        what = "closed" if code == h2.errors.ErrorCodes.NO_ERROR else "cut off"
        self._terminate(self._lost(f"this side {what} the connection: {reason}"))

    def _terminate(self, failure: ConnectionLost) -> ConnectionLost:
        if self._failure is not None:
            return self._failure
        self._failure = failure
        streams, self._streams = self._streams, {}
        for stream in streams.values():
            stream._fail(failure)
        self._written.unpark_all()
        self._window.unpark_all()
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()
        return failure

    def _lost(self, what: str) -> ConnectionLost:
        return ConnectionLost(what, peer=self.label or None)

    # ----------------------------------------------------------------- streams

    def open_stream(self, headers: Headers) -> H2Stream:
        """Client side: start a call with ``headers`` (the caller flushes).

        Raises:
            ConnectionLost: the connection is gone or refuses new streams.
        """
        if self._failure is not None:
            raise again(self._failure)
        try:
            stream_id = self._h2.get_next_available_stream_id()
            self._h2.send_headers(stream_id, headers)
        except h2.exceptions.TooManyStreamsError:
            raise ConnectionLost(
                "the server allows no more concurrent calls on this connection"
            ) from None
        except h2.exceptions.ProtocolError as exc:
            raise self._lost(f"cannot start a call: {exc}") from None
        stream = H2Stream(self, stream_id, client=True)
        self._streams[stream_id] = stream
        return stream

    def client_headers(
        self, path: str, metadata: Mapping[str, str], timeout: str | None
    ) -> Headers:
        """The request headers of a gRPC call."""
        headers: Headers = [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", path),
            (":authority", self.authority),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
            ("user-agent", "trio-rlmesh"),
        ]
        if timeout is not None:
            headers.append(("grpc-timeout", timeout))
        headers.extend((key, value) for key, value in metadata.items())
        return headers

    async def send_message(self, stream: H2Stream, message: bytes, end: bool) -> None:
        self._check_sendable(stream)
        sid = stream.stream_id
        try:
            if not end and FAST_DATA and self._send_fast(sid, message):
                pass
            elif len(payload := frame(message)) <= min(
                self._h2.local_flow_control_window(sid), self._h2.max_outbound_frame_size
            ):
                self._h2.send_data(sid, payload, end_stream=end)
            else:
                await self._send_chunks(stream, memoryview(payload), end)
        except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError):
            raise self._stream_gone(stream) from None
        if end:
            stream.local_ended = True
            self._maybe_forget(stream)
        await self.flush()

    def _send_fast(self, sid: int, message: bytes) -> bool:
        """Queue ``message`` (framed) as one DATA frame without h2, if that is plainly allowed.

        It must fit one frame and both send windows, on a stream h2 lets this side send
        on; the windows are debited exactly as h2's ``send_data`` would. Otherwise nothing
        happens and h2 handles the message (and raises what it would).
        """
        conn = self._h2
        stream = conn.streams.get(sid)
        size = len(message) + HEADER_SIZE
        if (
            stream is None
            or size > conn.outbound_flow_control_window
            or size > stream.outbound_flow_control_window
            or size > conn.max_outbound_frame_size
            or stream.state_machine.state not in _CAN_SEND
            or conn.state_machine.state not in _OPEN_CONNECTION
        ):
            return False
        conn.outbound_flow_control_window -= size
        stream.outbound_flow_control_window -= size
        self._collect()  # what h2 queued before goes out first
        # The frame header and the message's gRPC prefix in one pack.
        head = _DATA_FRAME_AND_MESSAGE_HEADER.pack(
            size >> 8, size & 0xFF, _DATA, 0, sid, 0, len(message)
        )
        self._outbox.append(head + message)
        self._queued_seq += 1
        return True

    async def _send_chunks(self, stream: H2Stream, payload: memoryview, end: bool) -> None:
        deadline = trio.current_time() + self.settings.write_timeout
        with trio.CancelScope(shield=True, deadline=deadline) as scope:
            sid = stream.stream_id
            while payload:
                self._check_sendable(stream)
                room = min(
                    self._h2.local_flow_control_window(sid), self._h2.max_outbound_frame_size
                )
                if room <= 0:
                    await self.flush()
                    # Credit may have arrived while flushing, or the call may have ended
                    # (their wake-ups found nobody parked): look again before waiting.
                    self._check_sendable(stream)
                    if self._h2.local_flow_control_window(sid) <= 0:
                        await self._window.park()
                    continue
                chunk, payload = payload[:room], payload[room:]
                self._h2.send_data(sid, chunk, end_stream=end and not payload)
        if scope.cancelled_caught:
            raise self._terminate(
                self._lost(
                    f"the peer accepted no data for {self.settings.write_timeout:g} s "
                    "(flow control)"
                )
            )

    def _check_sendable(self, stream: H2Stream) -> None:
        if self._failure is not None:
            raise again(self._failure)
        if stream.failure is not None:
            raise again(stream.failure)
        if stream.client and stream.remote_ended and stream.trailers is not None:
            # The server ended the call while this side was still sending (a message
            # refused at its header): the call's status says why.
            raise status_from_headers(stream.trailers) or ConnectionLost(
                "the server ended the call before this side had sent everything"
            )
        if stream.local_ended:
            raise ConnectionLost("this side already ended the stream")

    def _stream_gone(self, stream: H2Stream) -> BaseException:
        if self._failure is not None:
            return again(self._failure)
        if stream.failure is not None:
            return again(stream.failure)
        failure = ConnectionLost("the peer closed the stream")
        stream._fail(failure)
        return failure

    def end_stream(self, stream: H2Stream) -> None:
        if stream.local_ended or self._failure is not None:
            return
        stream.local_ended = True
        with contextlib.suppress(h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError):
            self._h2.end_stream(stream.stream_id)
        self._maybe_forget(stream)

    def send_response_headers(self, stream: H2Stream, metadata: Iterable[tuple[str, str]]) -> None:
        if stream.headers_sent or stream.local_ended or self._failure is not None:
            return
        stream.headers_sent = True
        headers = [(":status", "200"), ("content-type", "application/grpc"), *metadata]
        with contextlib.suppress(h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError):
            self._h2.send_headers(stream.stream_id, headers)

    def send_trailers(self, stream: H2Stream, status: Status, message: str) -> None:
        if stream.local_ended or self._failure is not None:
            return
        trailers: Headers = [("grpc-status", str(int(status)))]
        if message:
            trailers.append(("grpc-message", encode_grpc_message(message)))
        if not stream.headers_sent:
            stream.headers_sent = True
            trailers = [(":status", "200"), ("content-type", "application/grpc"), *trailers]
        stream.local_ended = True
        try:
            self._h2.send_headers(stream.stream_id, trailers, end_stream=True)
        except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError):
            pass
        else:
            if status is not Status.OK and not stream.remote_ended:
                # A failed call whose client is still sending: tell it to stop (as grpclib
                # and grpc-go servers do). After an OK end the client ends its side itself;
                # resetting then makes RLMesh's client report a broken pipe.
                with contextlib.suppress(
                    h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError
                ):
                    self._h2.reset_stream(stream.stream_id, h2.errors.ErrorCodes.NO_ERROR)
        self._forget(stream)
        self.flush_soon()

    def refuse(self, stream: H2Stream, error: GrpcError) -> None:
        """A message on ``stream`` was refused: end the call with ``error`` at once."""
        stream._fail(error)
        if self.client:
            self.reset(stream, h2.errors.ErrorCodes.CANCEL)
        else:
            self.send_trailers(stream, error.status, error.message)

    def reset(self, stream: H2Stream, code: int) -> None:
        if self._failure is not None or stream.stream_id not in self._streams:
            return
        if not (stream.local_ended and stream.remote_ended):
            with contextlib.suppress(h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError):
                self._h2.reset_stream(stream.stream_id, code)
        stream.local_ended = True
        stream._fail(ConnectionLost("the stream was cancelled by this side"))
        self._forget(stream)
        self.flush_soon()

    def acknowledge(self, stream_id: int, flow: int, *, now: bool = False) -> None:
        """Give the peer back ``flow`` bytes of credit on ``stream_id``.

        This connection, not h2, decides when credit goes back (h2's own rule keeps up to
        half of a window back, which together with held-back data can leave the peer with
        no room at all). Credit is owed until a quarter of the smaller window is, then all
        of it goes out as WINDOW_UPDATEs at once; ``now`` sends everything owed at once
        (held data being released: the peer may be out of room), and so does a
        connection window that has run low. So the peer's room is never short by more
        than the held-back data and a quarter window.
        """
        if not flow or self._failure is not None:
            return
        owed = self._owed
        owed[stream_id] = owed.get(stream_id, 0) + flow
        self._owed_total += flow
        if now or self._owed_total >= self._owed_limit or self.inbound_room < self._owed_limit:
            self._give_credit()

    def _give_credit(self) -> None:
        owed, total = self._owed, self._owed_total
        self._owed, self._owed_total = {}, 0
        h2conn = self._h2
        for sid, credit in owed.items():
            # A stream that is over needs no credit; the connection still does.
            with contextlib.suppress(KeyError, h2.exceptions.ProtocolError):
                h2conn.increment_flow_control_window(credit, stream_id=sid)
        with contextlib.suppress(h2.exceptions.ProtocolError):
            h2conn.increment_flow_control_window(total)

    def _maybe_forget(self, stream: H2Stream) -> None:
        if stream.local_ended and stream.remote_ended:
            self._forget(stream)

    def _forget(self, stream: H2Stream) -> None:
        self._streams.pop(stream.stream_id, None)
        if not self.client:
            self._check_idle()

    # ----------------------------------------------------------------- writing

    def _collect(self) -> None:
        if FAST_DATA and not self._h2._data_to_send:
            # Nothing queued in h2 (the usual case per message): skip data_to_send(), which
            # copies and replaces its buffer on every call.
            return
        data = self._h2.data_to_send()
        if data:
            self._outbox.append(data)
            self._queued_seq += 1

    def flush_soon(self) -> None:
        """Have what h2 queued written soon, from a synchronous context."""
        self._collect()
        if self._outbox and not self._writing and self._nursery is not None:
            # A connection whose tasks have all ended takes no new one; whatever is queued
            # then goes out with the next flush, or with the connection's close.
            with contextlib.suppress(RuntimeError):
                self._nursery.start_soon(self._flush_quietly)

    async def _flush_quietly(self) -> None:
        with contextlib.suppress(ConnectionLost):
            await self.flush()

    async def flush(self) -> None:
        """Write everything queued so far; return once it is on the wire.

        Raises:
            ConnectionLost: the connection failed (before or while writing).
        """
        self._collect()
        if not self._outbox:
            if self._failure is not None:
                raise again(self._failure)
            return
        target = self._queued_seq
        if self._writing:
            while self._written_seq < target:
                if self._failure is not None:
                    raise again(self._failure)
                await self._written.park()
            return
        self._writing = True
        try:
            while self._outbox and self._failure is None:
                data = self._outbox[0] if len(self._outbox) == 1 else b"".join(self._outbox)
                written = self._queued_seq
                self._outbox.clear()
                rest = self._write_now(data)
                if rest is not None:
                    await self._write_rest(rest)
                self._written_seq = written
                if self._written:
                    self._written.unpark_all()
                self._collect()
        except OSError as exc:
            raise self._terminate(
                self._lost(f"the connection broke while writing ({exc})")
            ) from None
        finally:
            self._writing = False
        if self._failure is not None:
            raise again(self._failure)

    def _write_now(self, data: bytes | memoryview) -> memoryview | None:
        """Write what the socket takes without waiting; the rest, if any.

        A syscall never tears a frame, so this needs no shield: only waiting does.
        """
        fd = self._fd
        view = memoryview(data)
        if fd is None:
            return view
        while view:
            try:
                written = os.write(fd, view)
            except (BlockingIOError, InterruptedError):
                return view
            view = view[written:]
        return None

    async def _write_rest(self, rest: memoryview) -> None:
        """Write ``rest`` whole: shielded, and bounded by ``write_timeout``."""
        deadline = trio.current_time() + self.settings.write_timeout
        with trio.CancelScope(shield=True, deadline=deadline) as scope:
            try:
                if self._fd is None:
                    await self._transport.send_all(rest)
                else:
                    while rest:
                        await trio.lowlevel.wait_writable(self._fd)
                        rest = memoryview(self._write_now(rest) or b"")
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                raise OSError(str(exc)) from exc
        if scope.cancelled_caught:
            raise self._terminate(
                self._lost(f"the peer read nothing for {self.settings.write_timeout:g} s")
            )

    # ----------------------------------------------------------------- reading

    async def _receive(self) -> bytes | bytearray:
        fd = self._fd
        if fd is None:
            return await self._transport.receive_some(_READ_SIZE)
        if self._drained:
            # The last read emptied the socket: a read now would most likely find nothing
            # (a wasted syscall and exception per message), so wait for data first.
            self._eager = 0
            await trio.lowlevel.wait_readable(fd)
        else:
            self._eager += 1
            if self._eager > _EAGER_READS:
                self._eager = 0
                await trio.lowlevel.checkpoint()
        while True:
            try:
                data = os.read(fd, _READ_SIZE)
            except (BlockingIOError, InterruptedError):
                self._eager = 0
                await trio.lowlevel.wait_readable(fd)
            else:
                self._drained = len(data) < _READ_SIZE
                return data

    async def _read(self) -> None:
        failure: ConnectionLost | None = None
        guard = self._guard
        try:
            while self._failure is None:
                data = await self._receive()
                if not data:
                    failure = self._lost("the peer closed the connection")
                    break
                self._inbound_at = trio.current_time()
                if guard is not None:
                    try:
                        guard.feed(data)
                    except Abuse as exc:
                        await self._calm_down(str(exc))
                        break
                try:
                    if FAST_DATA:
                        self._receive_frames(data)
                    else:
                        self._receive_slow(data)
                except h2.exceptions.ProtocolError as exc:
                    self._collect()
                    failure = self._lost(f"the peer broke the HTTP/2 protocol ({exc})")
                    with contextlib.suppress(ConnectionLost):
                        await self.flush()
                    break
                await self.flush()
                if self._quick_ack_socket is not None and self._awaiting_peer():
                    self._ack_now()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            failure = self._lost(f"the connection broke ({exc})")
        except ConnectionLost as exc:
            failure = exc
        if failure is not None:
            self._terminate(failure)

    def _awaiting_peer(self) -> bool:
        """Whether a call has a response under way that the peer goes on with without
        waiting for this side: response headers in, and the call half-closed here (its
        trailers are next) or no message yet (its first message is next)."""
        for stream in self._streams.values():
            if (
                stream.headers is not None
                and not stream.remote_ended
                and (stream.local_ended or not stream.answered)
            ):
                return True
        return False

    def _ack_now(self) -> None:
        """Have the kernel acknowledge what was read at once rather than up to 40 ms later
        (the peer's Nagle may be holding its next frame until then)."""
        sock = self._quick_ack_socket
        assert sock is not None
        assert _QUICKACK is not None
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, _QUICKACK, 1)

    def _receive_slow(self, data: bytes | bytearray | memoryview) -> None:
        """Feed ``data`` to h2 and dispatch its events."""
        dispatch = self._dispatch
        for event in self._h2.receive_data(data):
            dispatch[type(event)](self, event)

    def _receive_frames(self, data: bytes | bytearray) -> None:
        """Split ``data`` into frames: plain DATA of open calls is handled here, the rest
        goes to h2, all in order. An incomplete frame at the end waits for the next read.

        Raises:
            h2.exceptions.ProtocolError: h2 found the peer breaking the protocol.
        """
        partial = self._partial
        if partial:
            partial += data
            if len(partial) < self._partial_needed:
                return  # still incomplete: no copy, no parse
            data = bytes(partial)
            self._partial = bytearray()
        buffer = self._h2.incoming_buffer
        if buffer._preamble_len or buffer._data:
            # The client preface, or a frame h2 holds the start of: h2 reads this whole.
            self._receive_slow(data)
            return
        view = memoryview(data)
        total = len(data)
        limit = self._h2.max_inbound_frame_size
        pos = slow = 0  # the next frame; the first frame h2 has not been given yet
        while pos < total:
            if total - pos < _FRAME_HEADER_SIZE:
                self._keep_partial(view[pos:], _FRAME_HEADER_SIZE)
                total = pos
                break
            high, low, kind, flags, sid = _FRAME_HEADER.unpack_from(data, pos)
            length = (high << 8) | low
            if length > limit:
                break  # h2 refuses it (FRAME_SIZE_ERROR) without waiting for its body
            end = pos + _FRAME_HEADER_SIZE + length
            if end > total:
                self._keep_partial(view[pos:], end - pos)
                total = pos
                break
            sid &= _STREAM_ID_MASK
            if kind == _DATA and not flags and sid in self._streams:
                if slow < pos:
                    # Earlier frames first: they may end or reset this very stream.
                    self._receive_slow(view[slow:pos])
                    slow = pos
                    if self._failure is not None:
                        return
                stream = self._streams.get(sid)
                if stream is not None and self._receive_fast(
                    stream, view[pos + _FRAME_HEADER_SIZE : end]
                ):
                    slow = end
                    if self._failure is not None:
                        return
            pos = end
        if slow < total:
            self._receive_slow(view[slow:total])

    def _keep_partial(self, tail: memoryview, needed: int) -> None:
        self._partial = bytearray(tail)
        self._partial_needed = needed

    def _receive_fast(self, stream: H2Stream, payload: memoryview) -> bool:
        """Take one flagless DATA frame for ``stream`` without h2, if nothing is unusual.

        Debits h2's connection and stream receive windows as h2's own DATA handling
        would; returns False (h2 then takes the frame, and raises what it would) if the
        frame would overrun a window, the stream is not open for receiving in h2 or has
        had no headers yet, or h2 is between a HEADERS frame and its CONTINUATION.
        """
        conn = self._h2
        h2_stream = conn.streams.get(stream.stream_id)
        size = len(payload)
        connection_window = conn._inbound_flow_control_window_manager
        if (
            h2_stream is None
            or conn.incoming_buffer._headers_buffer
            or size > connection_window.current_window_size
            or size > h2_stream._inbound_window_manager.current_window_size
            or h2_stream.state_machine.state not in _CAN_RECEIVE
            or not h2_stream.state_machine.headers_received
            or h2_stream._expected_content_length is not None
            or conn.state_machine.state not in _OPEN_CONNECTION
        ):
            return False
        connection_window.window_consumed(size)
        h2_stream._inbound_window_manager.window_consumed(size)
        stream._on_data(payload, size)
        return True

    def _stream_for(self, stream_id: int) -> H2Stream | None:
        return self._streams.get(stream_id)

    def _on_request(self, event: h2.events.RequestReceived) -> None:
        stream = H2Stream(self, event.stream_id, client=False)
        stream.headers, refusal = request_headers(event.headers or ())
        self._streams[event.stream_id] = stream
        if event.stream_ended is not None:
            stream.remote_ended = True
        if refusal is not None:
            self.send_trailers(stream, *refusal)
            return
        if self._request_callback is None:
            self.send_trailers(stream, Status.UNIMPLEMENTED, "this side serves no calls")
            return
        self._request_callback(stream)

    def _on_response(self, event: h2.events.ResponseReceived | h2.events.TrailersReceived) -> None:
        stream = self._stream_for(event.stream_id)
        if stream is not None:
            stream._on_headers(_header_dict(event.headers), event.stream_ended is not None)
            self._maybe_forget(stream)

    def _on_data(self, event: h2.events.DataReceived) -> None:
        stream = self._stream_for(event.stream_id)
        flow = event.flow_controlled_length or 0
        if stream is None:
            self.acknowledge(event.stream_id, flow)
            return
        stream._on_data(event.data or b"", flow)

    def _on_stream_ended(self, event: h2.events.StreamEnded) -> None:
        stream = self._stream_for(event.stream_id)
        if stream is not None and not stream.remote_ended:
            stream._on_end()
            self._maybe_forget(stream)

    def _on_stream_reset(self, event: h2.events.StreamReset) -> None:
        stream = self._streams.pop(event.stream_id, None)
        if stream is not None:
            stream.local_ended = True
            stream._on_reset(event.error_code)
            # A sender waiting for this stream's flow-control window must stop waiting.
            self._window.unpark_all()

    def _on_window(self, event: Any) -> None:
        self._window.unpark_all()

    def _on_goaway(self, event: h2.events.ConnectionTerminated) -> None:
        detail = (event.additional_data or b"").decode("utf-8", "replace").strip()
        code = _error_code_name(event.error_code)
        what = "closed the connection" if code == "NO_ERROR" else f"ended the connection ({code})"
        self._terminate(self._lost(f"the peer {what}" + (f": {detail}" if detail else "")))

    def _ignore(self, event: Any) -> None:
        pass

    _dispatch: Final[dict[type[h2.events.Event], Callable[[H2Connection, Any], None]]] = (
        collections.defaultdict(
            lambda: H2Connection._ignore,
            {
                h2.events.RequestReceived: _on_request,
                h2.events.ResponseReceived: _on_response,
                h2.events.TrailersReceived: _on_response,
                h2.events.DataReceived: _on_data,
                h2.events.StreamEnded: _on_stream_ended,
                h2.events.StreamReset: _on_stream_reset,
                h2.events.WindowUpdated: _on_window,
                h2.events.RemoteSettingsChanged: _on_window,
                h2.events.ConnectionTerminated: _on_goaway,
            },
        )
    )

    # ----------------------------------------------------------------- keepalive

    async def _keepalive(self) -> None:
        interval = self.settings.keepalive_interval
        timeout = self.settings.keepalive_timeout
        assert interval is not None
        while self._failure is None:
            last = self._inbound_at
            await trio.sleep_until(last + interval)
            if self._inbound_at != last:
                continue  # the peer spoke meanwhile: its silence starts over
            if not self._streams:
                # Nothing to protect: an idle connection is not pinged. Look again later
                # (the silence is then counted from the last byte, or the PING below).
                await trio.sleep(interval)
                continue
            pinged = trio.current_time()
            self._h2.ping(next(self._ping_ids).to_bytes(8, "big"))
            with contextlib.suppress(ConnectionLost):
                await self.flush()
            # Dead once the peer has been silent for interval + timeout, and never less
            # than timeout after the PING (a call opened on a long-silent connection).
            dead = max(last + interval + timeout, pinged + timeout)
            # Look once an interval after the PING: if it was answered, the next PING is
            # due an interval after the answer, before the deadline of this one.
            await trio.sleep_until(min(pinged + interval, dead))
            if self._inbound_at < pinged:
                await trio.sleep_until(dead)
            if self._inbound_at < pinged:
                self._terminate(
                    self._lost(
                        f"the peer sent nothing for {trio.current_time() - last:g} s and did "
                        f"not answer a keepalive PING within {timeout:g} s (frozen or "
                        "unreachable)"
                    )
                )
                return

    # ----------------------------------------------------------------- server limits

    async def _watch_idle(self) -> None:
        """Server side: close a connection that never says hello, or that has no call for
        ``idle_connection_timeout`` (see the module doc)."""
        limits = self.limits
        guard = self._guard
        assert guard is not None
        if limits.handshake_timeout is not None:
            await trio.sleep_until(self._idle_since + limits.handshake_timeout)
            if not guard.settled:
                reason = no_handshake(self.label or "a client", limits.handshake_timeout)
                self._terminate(self._lost(f"this side closed the connection: {reason}"))
                return
        idle = limits.idle_connection_timeout
        if idle is None:
            return
        while True:
            while self._streams or self.handlers:
                await self._became_idle.park()
            await trio.sleep_until(self._idle_since + idle)
            if self.idle_since is not None and trio.current_time() >= self._idle_since + idle:
                detail = idle_reason(idle)
                await self.aclose(f"this side closed the connection: {detail}", detail=detail)
                return


def _header_dict(headers: Iterable[tuple[Any, Any]]) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in headers:
        name = key.decode("latin-1") if isinstance(key, bytes) else str(key)
        text = value.decode("latin-1") if isinstance(value, bytes) else str(value)
        out[name.lower()] = text
    return out
