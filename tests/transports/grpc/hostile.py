"""A client that writes hand-built HTTP/2 frames: the abuse tests' attacker, and the abuse
probe's (``bench/bench_abuse.py`` imports it).

:class:`Hostile` encodes what ``h2`` will encode (requests, resets, PINGs, SETTINGS) with
an ``h2`` client connection whose checks are off, and builds by hand what ``h2`` refuses
to send (a HEADERS frame followed by CONTINUATION frames, empty DATA frames). A reader
task keeps what the server sends, so a server that writes never blocks on us, and
:meth:`Hostile.goaway` / :meth:`Hostile.response` read it back.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TypeVar

import attrs
import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
import trio

T = TypeVar("T")

HEADERS, CONTINUATION, DATA, GOAWAY = 1, 9, 0, 7
END_STREAM, END_HEADERS = 0x1, 0x4
_FRAME = struct.Struct(">HBBBL")


def raw_frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    """One HTTP/2 frame, built by hand."""
    size = len(payload)
    return _FRAME.pack(size >> 8, size & 0xFF, kind, flags, stream_id) + payload


def request_headers(path: str, *extra: tuple[str, str]) -> list[tuple[str, str]]:
    """A gRPC request's headers, then ``extra`` as given (any case, any repeat)."""
    return [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", path),
        (":authority", "localhost"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
        *extra,
    ]


@attrs.frozen
class GoAway:
    """A GOAWAY the server sent."""

    error_code: int
    last_stream_id: int
    debug: str


class Hostile:
    """One raw HTTP/2 client connection (see the module doc)."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        config = h2.config.H2Configuration(
            client_side=True,
            header_encoding="utf-8",
            validate_outbound_headers=False,
            normalize_outbound_headers=False,
            validate_inbound_headers=False,
        )
        self.h2 = h2.connection.H2Connection(config)
        self.h2.initiate_connection()
        self.received = bytearray()
        self._arrived = trio.lowlevel.ParkingLot()
        self.closed = trio.Event()
        """Set once the server closed the connection (or it broke)."""
        self._next_id = 1

    # ------------------------------------------------------------------ frames

    def hello(self) -> bytes:
        """The connection preface and this client's SETTINGS."""
        return self.h2.data_to_send()

    def new_stream_id(self) -> int:
        stream_id = self._next_id
        self._next_id += 2
        return stream_id

    def request(
        self,
        headers: Sequence[tuple[str, str]],
        message: bytes | None = None,
        *,
        end: bool = True,
    ) -> tuple[int, bytes]:
        """A new stream with ``headers`` (and one framed message); its id and bytes."""
        sid = self.new_stream_id()
        self.h2.send_headers(sid, list(headers), end_stream=end and message is None)
        if message is not None:
            framed = b"\x00" + len(message).to_bytes(4, "big") + message
            self.h2.send_data(sid, framed, end_stream=end)
        return sid, self.h2.data_to_send()

    def reset(self, stream_id: int) -> bytes:
        self.h2.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
        return self.h2.data_to_send()

    def rapid_reset(self, count: int, path: str) -> bytes:
        """``count`` streams, each opened and cancelled at once (CVE-2023-44487)."""
        headers = request_headers(path)
        for _ in range(count):
            sid = self.new_stream_id()
            self.h2.send_headers(sid, headers)
            self.h2.reset_stream(sid, h2.errors.ErrorCodes.CANCEL)
        return self.h2.data_to_send()

    def pings(self, count: int) -> bytes:
        for n in range(count):
            self.h2.ping(n.to_bytes(8, "big"))
        return self.h2.data_to_send()

    def settings(self, count: int) -> bytes:
        for _ in range(count):
            self.h2.update_settings({h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: 65536})
        return self.h2.data_to_send()

    def empty_data(self, count: int, path: str) -> bytes:
        """A request left open, then ``count`` empty DATA frames on it (CVE-2019-9518)."""
        sid, data = self.request(request_headers(path), end=False)
        return data + raw_frame(DATA, 0, sid) * count

    def continuation_flood(self, path: str, frame_size: int, count: int) -> bytes:
        """A HEADERS frame without END_HEADERS, then ``count`` CONTINUATION frames of
        ``frame_size`` bytes that never end the block (CVE-2024-27316 and kin)."""
        sid = self.new_stream_id()
        block = self.h2.encoder.encode(request_headers(path))
        first = raw_frame(HEADERS, END_STREAM, sid, block)
        filler = raw_frame(CONTINUATION, 0, sid, b"\x00" * frame_size)
        return first + filler * count

    # ------------------------------------------------------------------ I/O

    async def send(self, data: bytes) -> bool:
        """Write ``data``; False once the server has closed the connection."""
        try:
            await self.stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return False
        return True

    async def read_all(self) -> None:
        """Keep what the server sends until it closes the connection."""
        try:
            while data := await self.stream.receive_some(65536):
                self.received += data
                self._arrived.unpark_all()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            self.closed.set()
            self._arrived.unpark_all()

    async def wait_for(self, ready: Callable[[], T | None]) -> T:
        """Wait until ``ready()`` (looked at after each read) returns something."""
        while (found := ready()) is None:
            if self.closed.is_set():
                raise AssertionError("the server closed the connection first")
            await self._arrived.park()
        return found

    def count(self, kind: int) -> int:
        """How many frames of ``kind`` the server sent so far."""
        return sum(1 for frame in self.frames() if frame[0] == kind)

    def frames(self) -> list[tuple[int, int, int, bytes]]:
        """Every whole frame received so far: kind, flags, stream id, payload."""
        out: list[tuple[int, int, int, bytes]] = []
        data = bytes(self.received)
        pos = 0  # a server sends no preface of its own, only frames
        while len(data) - pos >= 9:
            high, low, kind, flags, sid = _FRAME.unpack_from(data, pos)
            end = pos + 9 + ((high << 8) | low)
            if end > len(data):
                break
            out.append((kind, flags, sid & 0x7FFF_FFFF, data[pos + 9 : end]))
            pos = end
        return out

    def goaway(self) -> GoAway | None:
        """The server's GOAWAY, if it sent one."""
        for kind, _, _, payload in self.frames():
            if kind == GOAWAY:
                last, code = struct.unpack_from(">LL", payload)
                return GoAway(code, last & 0x7FFF_FFFF, payload[8:].decode("utf-8", "replace"))
        return None

    def response(self, stream_id: int) -> dict[str, str] | None:
        """The headers (and trailers) the server answered ``stream_id`` with, once it has
        ended that stream; ``None`` before. For exchanges ``h2`` can follow."""
        decoder = h2.connection.H2Connection(
            h2.config.H2Configuration(
                client_side=True, header_encoding="utf-8", validate_inbound_headers=False
            )
        )
        decoder.initiate_connection()
        # The decoder must believe it opened the same streams.
        for sid in range(1, self._next_id, 2):
            decoder.send_headers(sid, request_headers("/"), end_stream=True)
        headers: dict[str, str] = {}
        ended = False
        with contextlib.suppress(h2.exceptions.ProtocolError):
            for event in decoder.receive_data(bytes(self.received)):
                if getattr(event, "stream_id", None) != stream_id:
                    continue
                if isinstance(event, (h2.events.ResponseReceived, h2.events.TrailersReceived)):
                    headers.update(dict(event.headers))  # type: ignore[arg-type]
                if isinstance(event, (h2.events.StreamEnded, h2.events.StreamReset)):
                    ended = True
        return headers if ended else None


@contextlib.asynccontextmanager
async def hostile(stream: trio.abc.Stream, *, hello: bool = True) -> AsyncIterator[Hostile]:
    """A :class:`Hostile` on ``stream`` for the block, reading all the while."""
    client = Hostile(stream)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.read_all)
        if hello:
            await client.send(client.hello())
        try:
            yield client
        finally:
            nursery.cancel_scope.cancel()
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(stream)
