"""The DATA-frame fast path of :mod:`trio_rlmesh.transports.grpc._h2`.

Plain DATA frames of open calls bypass h2 in both directions while h2 keeps the
flow-control numbers. These tests run two :class:`H2Connection` over an in-memory stream
pair (virtual time), or one against a hand-driven peer that writes raw frames, and check
that every message arrives whole and in order, that the windows each side believes in
agree with the other side's (a missed debit would leave a sender without credit: it
would stall into ``write_timeout``), that h2 still sees every frame that is not plain
DATA, in order, and that the fast path was taken at all.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import h2.config
import h2.connection
import h2.errors
import h2.events
import hyperframe.frame
import pytest
import trio
import trio.testing

from trio_rlmesh.transports.grpc._framing import frame
from trio_rlmesh.transports.grpc._h2 import FAST_DATA, H2Connection, H2Stream
from trio_rlmesh.transports.grpc._settings import GrpcSettings
from trio_rlmesh.transports.grpc._status import ConnectionLost, Status

# What these tests check is the fast path itself; with it switched off (nox -s
# tests_slow_paths) every frame goes through h2, which the rest of the suite covers.
pytestmark = pytest.mark.skipif(not FAST_DATA, reason="the DATA fast path is switched off")

QUIET = GrpcSettings(keepalive_interval=None)
SMALL_WINDOWS = GrpcSettings(
    keepalive_interval=None,
    stream_window=64 * 1024,
    connection_window=96 * 1024,
    max_frame_size=16 * 1024,
)
"""Windows a few messages exhaust, frames smaller than most messages."""


class Counted:
    """Counts the frames each path took (patched over the connection's methods)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.fast_in = self.fast_out = 0
        receive_fast = H2Connection._receive_fast
        send_fast = H2Connection._send_fast

        def counting_receive(conn: H2Connection, *args: Any) -> bool:
            taken = receive_fast(conn, *args)
            self.fast_in += taken
            return taken

        def counting_send(conn: H2Connection, *args: Any) -> bool:
            taken = send_fast(conn, *args)
            self.fast_out += taken
            return taken

        monkeypatch.setattr(H2Connection, "_receive_fast", counting_receive)
        monkeypatch.setattr(H2Connection, "_send_fast", counting_send)


@contextlib.asynccontextmanager
async def connected(
    settings: GrpcSettings,
) -> AsyncIterator[tuple[H2Connection, H2Connection, trio.MemoryReceiveChannel[H2Stream]]]:
    """A client and a server connection over a memory stream pair; new server streams
    arrive on the channel."""
    left, right = trio.testing.memory_stream_pair()
    send_request, requests = trio.open_memory_channel[H2Stream](100)
    client = H2Connection(left, client=True, settings=settings, label="client")
    server = H2Connection(
        right, client=False, settings=settings, on_request=send_request.send_nowait
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(server.run)
        await nursery.start(client.run)
        yield client, server, requests
        nursery.cancel_scope.cancel()


def windows(sender: H2Connection, receiver: H2Connection) -> tuple[int, int]:
    """(what ``sender`` may still send, what ``receiver`` still accepts) on the connection."""
    return (
        sender._h2.outbound_flow_control_window,
        receiver._h2._inbound_flow_control_window_manager.current_window_size,
    )


def payloads(seed: int) -> list[bytes]:
    sizes = [0, 1, 100, 16 * 1024 - 5, 16 * 1024, 40_000, 70_000, 5, 150_000, 3]
    return [bytes([(seed + i) % 251]) * size for i, size in enumerate(sizes)]


async def exchange(client: H2Connection, requests: trio.MemoryReceiveChannel[H2Stream]) -> None:
    """Five concurrent calls, each echoing ten messages of mixed sizes both ways."""

    async def serve(stream: H2Stream) -> None:
        await stream.send_headers()
        while (message := await stream.receive_message()) is not None:
            await stream.send_message(message[::-1])
        stream.finish(Status.OK)
        await stream.connection.flush()

    async def call(number: int) -> None:
        stream = client.open_stream(client.client_headers("/echo", {}, None))
        sent = payloads(number)
        received = []

        async def receive() -> None:
            while (message := await stream.receive_message()) is not None:
                received.append(message)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(receive)
            for message in sent:
                await stream.send_message(message)
            await stream.end()
        assert received == [message[::-1] for message in sent]

    async with trio.open_nursery() as nursery:
        for number in range(5):
            nursery.start_soon(call, number)
            nursery.start_soon(serve, await requests.receive())


@pytest.mark.parametrize("settings", [QUIET, SMALL_WINDOWS], ids=["default", "small-windows"])
async def test_many_calls_of_large_and_small_messages_keep_both_sides_windows_in_step(
    settings: GrpcSettings, monkeypatch: pytest.MonkeyPatch, autojump_clock: Any
) -> None:
    counted = Counted(monkeypatch)
    async with connected(settings) as (client, server, requests):
        with trio.fail_after(settings.write_timeout / 2):
            await exchange(client, requests)
        await trio.testing.wait_all_tasks_blocked()
        client_to_server = windows(client, server)
        server_to_client = windows(server, client)
        assert client.failure is None
        assert server.failure is None
    assert client_to_server[0] == client_to_server[1]
    assert server_to_client[0] == server_to_client[1]
    # Both directions took the fast path for most frames, and h2 for the rest.
    assert counted.fast_in > 30
    assert counted.fast_out > 30


async def test_a_reader_that_holds_credit_stalls_the_sender_until_it_reads(
    monkeypatch: pytest.MonkeyPatch, autojump_clock: Any
) -> None:
    counted = Counted(monkeypatch)
    messages = [bytes([i]) * 10_000 for i in range(30)]  # 300 kB against a 64 kB window
    async with connected(SMALL_WINDOWS) as (client, _server, requests):
        stream = client.open_stream(client.client_headers("/hold", {}, None))
        sent = trio.Event()

        async def send_all() -> None:
            for message in messages:
                await stream.send_message(message)
            sent.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(send_all)
            served = await requests.receive()
            await trio.testing.wait_all_tasks_blocked()
            assert not sent.is_set()  # out of credit: the sender waits
            h2_stream = client._h2.streams[stream.stream_id]
            assert h2_stream.outbound_flow_control_window < 10_000 + 5
            received = [await served.receive_message() for _ in messages]
        assert received == messages
        assert sent.is_set()
        assert client.failure is None
    assert counted.fast_out >= 6  # the messages that fit the window


async def test_frames_split_at_every_byte_arrive_whole(
    monkeypatch: pytest.MonkeyPatch, autojump_clock: Any
) -> None:
    counted = Counted(monkeypatch)
    async with raw_peer() as peer:
        burst = b"".join(
            peer.data(frame(bytes([i]) * size)) for i, size in enumerate((1, 30, 300, 3000))
        )
        for i in range(len(burst)):
            await peer.write(burst[i : i + 1])
        received = [await peer.stream.receive_message() for _ in range(4)]
    assert received == [bytes([i]) * size for i, size in enumerate((1, 30, 300, 3000))]
    assert counted.fast_in == 4


async def test_a_reset_between_two_data_frames_of_one_read_stops_the_second(
    monkeypatch: pytest.MonkeyPatch, autojump_clock: Any
) -> None:
    counted = Counted(monkeypatch)
    async with raw_peer() as peer:
        reset = hyperframe.frame.RstStreamFrame(peer.stream.stream_id, error_code=8)
        await peer.write(
            peer.data(frame(b"first"))
            + reset.serialize()
            + peer.data(frame(b"second"))
            + hyperframe.frame.PingFrame(0, opaque_data=b"12345678").serialize()
        )
        assert await peer.stream.receive_message() == b"first"
        with pytest.raises(ConnectionLost, match="reset the stream"):
            await peer.stream.receive_message()
        # The connection lives on: h2 answered the PING that followed.
        assert await peer.pings_acknowledged() == [b"12345678"]
        assert peer.conn.failure is None
    assert counted.fast_in == 1


async def test_a_goaway_between_two_data_frames_of_one_read_ends_the_connection(
    monkeypatch: pytest.MonkeyPatch, autojump_clock: Any
) -> None:
    async with raw_peer() as peer:
        goaway = hyperframe.frame.GoAwayFrame(0, last_stream_id=0, error_code=0)
        await peer.write(
            peer.data(frame(b"first")) + goaway.serialize() + peer.data(frame(b"second"))
        )
        assert await peer.stream.receive_message() == b"first"
        with pytest.raises(ConnectionLost, match="closed the connection"):
            await peer.stream.receive_message()


async def test_padded_and_end_stream_data_go_through_h2_in_order(
    monkeypatch: pytest.MonkeyPatch, autojump_clock: Any
) -> None:
    counted = Counted(monkeypatch)
    async with raw_peer() as peer:
        sid = peer.stream.stream_id
        padded = hyperframe.frame.DataFrame(sid, data=frame(b"padded"), pad_length=7)
        padded.flags.add("PADDED")
        peer.h2.outbound_flow_control_window -= padded.flow_controlled_length
        await peer.write(peer.data(frame(b"plain")) + padded.serialize())
        await peer.write(peer.data(frame(b"after")))
        peer.h2.send_headers(sid, [("grpc-status", "0")], end_stream=True)
        await peer.flush()
        received = []
        while (message := await peer.stream.receive_message()) is not None:
            received.append(message)
        assert received == [b"plain", b"padded", b"after"]
        await trio.testing.wait_all_tasks_blocked()
        # The padded frame's whole flow-controlled length (payload, pad length byte and
        # padding) was debited and given back like any other.
        peer_view = peer.h2.outbound_flow_control_window
        ours = peer.conn._h2._inbound_flow_control_window_manager.current_window_size
        assert peer_view == ours
    assert counted.fast_in == 2


async def test_data_over_the_window_is_refused_by_h2_as_a_flow_control_error(
    autojump_clock: Any,
) -> None:
    # Unread messages: the client holds their credit once they exceed its 64 kB stream
    # window, so a peer that keeps sending overruns the window it was granted.
    async with raw_peer(SMALL_WINDOWS) as peer:
        for _ in range(12):
            await peer.write(peer.data(frame(bytes(16 * 1024 - 5))))
            if peer.conn.failure is not None:
                break
        assert "broke the HTTP/2 protocol" in str(peer.conn.failure)
        # h2 (not the fast path) found it, so the peer was told why.
        assert peer.goaway_codes == [h2.errors.ErrorCodes.FLOW_CONTROL_ERROR]


async def test_data_before_the_response_headers_is_still_a_protocol_error(
    autojump_clock: Any,
) -> None:
    async with raw_peer(answer=False) as peer:
        await peer.write(peer.data(frame(b"too early")))
        assert "cannot receive data before headers" in str(peer.conn.failure)
        with pytest.raises(ConnectionLost):
            await peer.stream.receive_message()


# ----------------------------------------------------------------------------- the raw peer


class RawPeer:
    """The server end of a connection to our client, driven frame by frame: its own h2
    answers the handshake, and tests write raw frames past it."""

    def __init__(self, conn: H2Connection, transport: trio.testing.MemorySendStream | Any):
        self.conn = conn
        self.transport = transport
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
        self.stream: H2Stream
        self._pings: list[bytes] = []
        self.goaway_codes: list[int] = []
        self._events = trio.Event()

    def data(self, payload: bytes) -> bytes:
        """A plain DATA frame on the call, bypassing (and debiting) this side's h2."""
        sid = self.stream.stream_id
        self.h2.outbound_flow_control_window -= len(payload)
        return hyperframe.frame.DataFrame(sid, data=payload).serialize()

    async def write(self, data: bytes) -> None:
        await self.transport.send_all(data)
        await trio.testing.wait_all_tasks_blocked()

    async def flush(self) -> None:
        await self.write(self.h2.data_to_send())

    async def pings_acknowledged(self) -> list[bytes]:
        await trio.testing.wait_all_tasks_blocked()
        return self._pings

    async def read_forever(self) -> None:
        while data := await self.transport.receive_some():
            for event in self.h2.receive_data(data):
                if isinstance(event, h2.events.PingAckReceived):
                    self._pings.append(event.ping_data)
                if isinstance(event, h2.events.ConnectionTerminated):
                    self.goaway_codes.append(event.error_code)
                self._events.set()
            if pending := self.h2.data_to_send():
                await self.transport.send_all(pending)


@contextlib.asynccontextmanager
async def raw_peer(
    settings: GrpcSettings = QUIET, *, answer: bool = True
) -> AsyncIterator[RawPeer]:
    """Our client with one open call, against a :class:`RawPeer` that answered its headers."""
    left, right = trio.testing.memory_stream_pair()
    conn = H2Connection(left, client=True, settings=settings, label="client")
    peer = RawPeer(conn, right)
    peer.h2.initiate_connection()
    async with trio.open_nursery() as nursery:
        await nursery.start(conn.run)
        peer.stream = conn.open_stream(conn.client_headers("/raw", {}, None))
        await conn.flush()
        nursery.start_soon(peer.read_forever)
        await trio.testing.wait_all_tasks_blocked()
        if answer:
            peer.h2.send_headers(
                peer.stream.stream_id, [(":status", "200"), ("content-type", "application/grpc")]
            )
        await peer.flush()
        yield peer
        nursery.cancel_scope.cancel()
