"""What a server checks in a client's bytes before its HTTP/2 stack sees them (sans-I/O).

Both backends feed every byte a client sends to one :class:`FrameGuard` per connection,
before handing it to ``h2`` (the trio backend) or to grpclib. The guard reads only the
9-byte frame headers, never buffers a payload, and raises :class:`Abuse` at the first
frame past a :class:`~._settings.ServerLimits` budget, so the backend can answer GOAWAY
``ENHANCE_YOUR_CALM`` and close the connection before the offending bytes cost anything:

* per-kind budgets (token buckets on the server's clock) for the frames that make a
  server work without carrying requests: RST_STREAM (rapid reset), PING, SETTINGS, and
  frames that carry nothing;
* the header block cap: a HEADERS frame and its CONTINUATION frames are counted as their
  headers arrive, so a CONTINUATION flood is refused at the frame that crosses the cap,
  not after ``h2`` has buffered it.

The guard also says when the client's connection preface and first SETTINGS frame have
arrived (:attr:`FrameGuard.settled`), for the handshake timeout. Malformed framing is not
its business: ``h2`` still finds and refuses it.

A budget is per connection, so a client that is cut off could come back on a new
connection with a full one, and spend it again: a rapid reset attacker that reconnects
makes the server open and cancel hundreds of streams per connection. :class:`Offenders`
remembers, per server, the hosts whose connections were cut off in the last budget
window: their new connections get guards whose RST_STREAM budget starts at a tenth of
its size (:data:`REPEAT_ALLOWANCE`, refilled at the usual rate), so reconnecting buys a
repeat offender a tenth of the streams it had. The other budgets start full: a PING or
SETTINGS frame costs less than the new connection a cut-off client opens next, so cutting
those sooner makes a flood dearer, not cheaper (measured with ``bench/bench_abuse.py``).
A well-behaved client from the same host resets no call early on, and its connections
that were open before keep their own guards. A client's first SETTINGS frame, part of
every handshake, is not counted.

:func:`request_headers` is the one strict reading of a request's header list, shared by
both backends. The connection limit's rules are here too, over any connection type with an
``idle_since`` and an ``evict`` (:class:`Evictable`): :func:`admit` (room for one more, or
refuse it), :func:`out_of_descriptors`, and :func:`make_room` beneath them. Every line a
server logs about a client goes through :data:`SERVER_LOG`, a :class:`Throttle` that
keeps a flood of identical events to one line per kind per 10 s.
"""

from __future__ import annotations

import logging
import math
import struct
import time
from collections.abc import Callable, Collection, Iterable
from typing import Final, Protocol

from ._settings import DESCRIPTOR_RELIEF, ServerLimits
from ._status import Status

__all__ = [
    "PREFACE",
    "REPEAT_ALLOWANCE",
    "SERVER_LOG",
    "Abuse",
    "Evictable",
    "FrameGuard",
    "Offenders",
    "Throttle",
    "admit",
    "cut_off",
    "idle_reason",
    "make_room",
    "no_handshake",
    "out_of_descriptors",
    "request_headers",
]

PREFACE: Final = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
"""The client connection preface that precedes every HTTP/2 client's first frame."""

REPEAT_ALLOWANCE: Final = 0.1
"""The share of its RST_STREAM budget a repeat offender's new connection starts with."""
_HEADER: Final = struct.Struct(">HBBBL")
_HEADER_SIZE: Final = 9
_DATA, _HEADERS, _PRIORITY, _RST_STREAM, _SETTINGS = 0, 1, 2, 3, 4
_PUSH_PROMISE, _PING, _CONTINUATION = 5, 6, 9
_KNOWN_KINDS: Final = 10
_END_STREAM: Final = 0x1
_ACK: Final = 0x1
_END_HEADERS: Final = 0x4


class Abuse(Exception):
    """A client went past one of the server's limits; ``str()`` says which, in words
    fit for the GOAWAY's debug data and the server's log."""


class _Budget:
    """A token bucket: ``size`` tokens, refilled at ``size`` per ``window`` seconds; full
    at first, or holding ``share`` of ``size`` at ``now``."""

    __slots__ = ("_rate", "_size", "_stamp", "_tokens", "what")

    def __init__(
        self, size: int, window: float, what: str, share: float = 1.0, now: float = -math.inf
    ) -> None:
        self._size = float(size)
        self._rate = size / window
        self._tokens = float(math.floor(size * share))
        self._stamp = now
        self.what = f"more than {size} {what} in {window:g} s"

    def take(self, now: float) -> bool:
        tokens = min(self._size, self._tokens + (now - self._stamp) * self._rate)
        self._stamp = now
        if tokens < 1.0:
            self._tokens = tokens
            return False
        self._tokens = tokens - 1.0
        return True


class FrameGuard:
    """Watches one client connection's frames against ``limits`` (see the module doc).

    Args:
        limits: the budgets and the header block cap.
        clock: the server's clock, in seconds (read only for the frames a budget counts).
        repeat: start the RST_STREAM budget at :data:`REPEAT_ALLOWANCE` of its size (a
            repeat offender's connection).
        on_abuse: called before :class:`Abuse` is raised.

    >>> guard = FrameGuard(ServerLimits(pings_per_window=1), lambda: 0.0)
    >>> ping = b"\\x00\\x00\\x08\\x06\\x00\\x00\\x00\\x00\\x00" + bytes(8)
    >>> guard.feed(PREFACE + b"\\x00\\x00\\x00\\x04\\x00\\x00\\x00\\x00\\x00" + ping)
    >>> guard.settled
    True
    >>> guard.feed(ping)
    Traceback (most recent call last):
    ...
    trio_rlmesh.transports.grpc._guard.Abuse: more than 1 PING frames in 10 s
    """

    __slots__ = (
        "_block",
        "_clock",
        "_empty",
        "_header",
        "_max_block",
        "_on_abuse",
        "_pings",
        "_preface",
        "_resets",
        "_settings",
        "_settling",
        "_skip",
        "settled",
    )

    def __init__(
        self,
        limits: ServerLimits,
        clock: Callable[[], float],
        *,
        repeat: bool = False,
        on_abuse: Callable[[], object] | None = None,
    ) -> None:
        window = limits.window
        self._clock = clock
        self._on_abuse = on_abuse
        self._resets = _Budget(
            limits.resets_per_window,
            window,
            "RST_STREAM frames",
            share=REPEAT_ALLOWANCE if repeat else 1.0,
            now=clock() if repeat else -math.inf,
        )
        self._pings = _Budget(limits.pings_per_window, window, "PING frames")
        self._settings = _Budget(limits.settings_per_window, window, "SETTINGS frames")
        self._empty = _Budget(
            limits.empty_frames_per_window, window, "empty, PRIORITY or unknown frames"
        )
        self._max_block = limits.max_header_block
        self._preface = len(PREFACE)
        """Bytes of the preface still to come."""
        self._header = bytearray()
        """The start of a frame header split across reads."""
        self._skip = 0
        """Bytes of the current frame's payload still to come."""
        self._block = -1
        """Bytes of the header block under way (HEADERS then CONTINUATION), or -1."""
        self._settling = False
        self.settled = False
        """Whether the preface and one whole SETTINGS frame have arrived."""

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Account for ``data``, the next bytes from the client.

        Raises:
            Abuse: a frame in ``data`` goes past a limit (the bytes after it are not read).
        """
        total = len(data)
        pos = 0
        if self._preface:
            pos = min(self._preface, total)
            self._preface -= pos
        while pos < total:
            if self._skip:
                taken = min(self._skip, total - pos)
                pos += taken
                self._skip -= taken
                if self._skip:
                    return
                if self._settling:
                    self._settling = False
                    self.settled = True
                continue
            if self._header or total - pos < _HEADER_SIZE:
                taken = min(_HEADER_SIZE - len(self._header), total - pos)
                self._header += data[pos : pos + taken]
                pos += taken
                if len(self._header) < _HEADER_SIZE:
                    return
                header = bytes(self._header)
                self._header.clear()
                self._frame(header, 0)
            else:
                self._frame(data, pos)
                pos += _HEADER_SIZE

    def _frame(self, data: bytes | bytearray | memoryview, pos: int) -> None:
        high, low, kind, flags, _ = _HEADER.unpack_from(data, pos)
        length = (high << 8) | low
        self._skip = length
        if not self.settled and kind == _SETTINGS and not flags & _ACK:
            # The first SETTINGS frame is part of the handshake, which every client owes:
            # no budget counts it.
            if length:
                self._settling = True
            else:
                self.settled = True
            return
        budget: _Budget | None = None
        if kind == _DATA:
            if not length and not flags & _END_STREAM:
                budget = self._empty
        elif kind in (_HEADERS, _PUSH_PROMISE, _CONTINUATION):
            if kind != _CONTINUATION:
                self._block = 0
            elif self._block < 0:
                return  # a stray CONTINUATION: h2 refuses it
            self._block += length
            if self._block > self._max_block:
                self._abuse(f"a header block of more than {self._max_block} bytes")
            if flags & _END_HEADERS:
                self._block = -1
            elif not length:
                budget = self._empty
        elif kind == _RST_STREAM:
            budget = self._resets
        elif kind == _PING:
            if not flags & _ACK:
                budget = self._pings
        elif kind == _SETTINGS:
            if not flags & _ACK:
                budget = self._settings
        elif kind == _PRIORITY or kind >= _KNOWN_KINDS:
            budget = self._empty
        if budget is not None and not budget.take(self._clock()):
            self._abuse(budget.what)

    def _abuse(self, what: str) -> None:
        if self._on_abuse is not None:
            self._on_abuse()
        raise Abuse(what)


class Offenders:
    """The hosts whose connections a server cut off for abuse in the last budget window,
    and the guards for new connections that follow from that (see the module doc).

    At most ``capacity`` hosts are remembered, those cut off most recently.

    >>> clock = [0.0]
    >>> offenders = Offenders(ServerLimits(resets_per_window=20), lambda: clock[0])
    >>> hello = PREFACE + b"\\x00\\x00\\x00\\x04\\x00\\x00\\x00\\x00\\x00"
    >>> reset = b"\\x00\\x00\\x04\\x03\\x00\\x00\\x00\\x00\\x01" + bytes(4)
    >>> offenders.guard("10.0.0.7").feed(hello + 21 * reset)
    Traceback (most recent call last):
    ...
    trio_rlmesh.transports.grpc._guard.Abuse: more than 20 RST_STREAM frames in 10 s
    >>> offenders.guard("10.0.0.7").feed(hello + 3 * reset)  # back at once: a tenth
    Traceback (most recent call last):
    ...
    trio_rlmesh.transports.grpc._guard.Abuse: more than 20 RST_STREAM frames in 10 s
    >>> offenders.guard("10.0.0.8").feed(hello + 20 * reset)  # another host: all 20
    >>> clock[0] = 10.0  # a window later, the host is forgiven
    >>> offenders.guard("10.0.0.7").feed(hello + 20 * reset)
    """

    def __init__(
        self, limits: ServerLimits, clock: Callable[[], float], capacity: int = 4096
    ) -> None:
        self.limits = limits
        self._clock = clock
        self._capacity = capacity
        self._cut: dict[str, float] = {}
        """When each host was last cut off, least recent first."""

    def guard(self, peer: str) -> FrameGuard:
        """The guard for a new connection from ``peer`` (a host, or a label such as
        ``tcp://host:port``: the port is not part of who the client is)."""
        host = peer.rsplit(":", 1)[0] if peer.startswith("tcp://") else peer
        cut = self._cut.get(host)
        repeat = cut is not None and self._clock() - cut < self.limits.window
        return FrameGuard(
            self.limits, self._clock, repeat=repeat, on_abuse=lambda: self._strike(host)
        )

    def _strike(self, host: str) -> None:
        self._cut.pop(host, None)
        self._cut[host] = self._clock()
        if len(self._cut) > self._capacity:
            del self._cut[next(iter(self._cut))]


_UNIQUE: Final = frozenset({"content-type"})
"""Headers a request may carry once (besides the pseudo-headers and ``authorization``)."""
_AUTHORIZATION: Final = "authorization"


def _text(value: str | bytes) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else value


def request_headers(
    headers: Iterable[tuple[str | bytes, str | bytes]],
) -> tuple[dict[str, str], tuple[Status, str] | None]:
    """A request's headers as a dict, and why the request must be refused, if it must.

    Names must be lower case (HTTP/2 requires it); the pseudo-headers, ``content-type``
    and ``authorization`` may appear once. Anything about ``authorization`` (twice, or
    in another case) is UNAUTHENTICATED whatever the order; the rest is INTERNAL.

    >>> headers = [(":path", "/x"), ("authorization", "b"), ("authorization", "a")]
    >>> status, message = request_headers(headers)[1]
    >>> status.name, message
    ('UNAUTHENTICATED', 'the request carries more than one authorization header; send exactly one')
    """
    out: dict[str, str] = {}
    refusal: tuple[Status, str] | None = None
    for key, value in headers:
        name = _text(key)
        if name in out and (name[:1] == ":" or name in _UNIQUE or name == _AUTHORIZATION):
            if name == _AUTHORIZATION:
                return out, (
                    Status.UNAUTHENTICATED,
                    "the request carries more than one authorization header; send exactly one",
                )
            refusal = refusal or (
                Status.INTERNAL,
                f"the request carries more than one {name} header; send exactly one",
            )
        elif name != name.lower():
            if name.lower() == _AUTHORIZATION:
                return out, (
                    Status.UNAUTHENTICATED,
                    f"the request's {name!r} header is not lower case (HTTP/2 requires "
                    "lower-case names); send it as 'authorization'",
                )
            refusal = refusal or (
                Status.INTERNAL,
                f"the request's {name!r} header is not lower case (HTTP/2 requires "
                "lower-case names)",
            )
        out[name] = _text(value)
    return out, refusal


class Throttle:
    """At most one log line per ``interval`` seconds for each kind of event; the next line
    says how many were left out meanwhile.

    >>> throttle = Throttle(logging.getLogger("demo"), interval=10.0)
    >>> throttle.allow("accept")
    True
    >>> throttle.allow("accept")
    False
    """

    def __init__(
        self,
        logger: logging.Logger,
        interval: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.interval = interval
        self._clock = clock
        self._last: dict[str, float] = {}
        self._skipped: dict[str, int] = {}

    def allow(self, kind: str) -> bool:
        """Whether a line about ``kind`` may be written now (counting those that may not)."""
        now = self._clock()
        if now - self._last.get(kind, -math.inf) < self.interval:
            self._skipped[kind] = self._skipped.get(kind, 0) + 1
            return False
        self._last[kind] = now
        return True

    def warning(self, kind: str, message: str) -> None:
        """Log ``message`` unless a line about ``kind`` went out less than an interval ago."""
        if self.allow(kind):
            skipped = self._skipped.pop(kind, 0)
            more = f" (and {skipped} more like it since the last such line)" if skipped else ""
            self.logger.warning("%s%s", message, more)


SERVER_LOG: Final = Throttle(logging.getLogger("trio_rlmesh.transports.grpc"))
"""The servers' log of what clients do wrong: one line per kind per 10 s, whatever the rate."""


def cut_off(peer: str, reason: str) -> None:
    """Log that the connection with ``peer`` went past a limit and is cut off."""
    SERVER_LOG.warning(
        "abuse", f"closed the connection with {peer}: {reason} (GOAWAY ENHANCE_YOUR_CALM)"
    )


def no_handshake(peer: str, timeout: float) -> str:
    """Log that ``peer`` never said hello within ``timeout``; the reason, in words."""
    reason = f"no HTTP/2 preface and SETTINGS within {timeout:g} s"
    SERVER_LOG.warning("handshake", f"closed the connection with {peer}: {reason}")
    return reason


def idle_reason(timeout: float) -> str:
    """Why a connection idle for ``timeout`` is closed (also its GOAWAY's debug data)."""
    return f"no call for {timeout:g} s"


class Evictable(Protocol):
    """A server's connection, as the connection limit sees it."""

    @property
    def idle_since(self) -> float | None:
        """Since when it has had no call; ``None`` while it has one (or is ending)."""
        ...

    def evict(self, reason: str) -> None:
        """Close it (GOAWAY ``NO_ERROR`` saying ``reason``); it is ending from now on."""
        ...


def make_room(connections: Iterable[Evictable], reason: str, count: int = 1) -> int:
    """Close up to ``count`` of ``connections``, those with no call for longest first (the
    oldest first among equals); how many were closed."""
    idle = sorted(
        (since, n) for n, conn in enumerate(connections) if (since := conn.idle_since) is not None
    )[:count]
    chosen = {n for _, n in idle}
    for n, conn in enumerate(connections):
        if n in chosen:
            conn.evict(reason)
    return len(chosen)


def admit(connections: Collection[Evictable], limit: int | None, peer: str) -> bool:
    """Whether a new connection from ``peer`` may be served: below ``limit``, or once the
    longest-idle connection is closed to make room. A refusal is logged."""
    if limit is None or len(connections) < limit:
        return True
    if make_room(connections, f"the server is at its limit of {limit} connections"):
        return True
    SERVER_LOG.warning(
        "limit",
        f"refused a connection from {peer}: all {limit} connections (max_connections) have "
        "a call in progress",
    )
    return False


def out_of_descriptors(connections: Collection[Evictable], error: str, retry: float) -> int:
    """``accept`` failed with ``error`` for want of descriptors: close the
    ``DESCRIPTOR_RELIEF`` connections idle longest, and log it; how many were closed."""
    closed = make_room(
        connections, f"the server is out of descriptors ({error})", DESCRIPTOR_RELIEF
    )
    SERVER_LOG.warning(
        "accept",
        f"accept failed: {error} ({len(connections)} connections open); "
        + (
            f"closed the {closed} longest-idle connection(s) to make room"
            if closed
            else f"no idle connection to close, retrying in {retry:g} s; raise the descriptor "
            "limit (ulimit -n) or lower max_connections"
        ),
    )
    return closed
