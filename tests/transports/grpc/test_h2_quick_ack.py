"""Immediate ACKs on a client connection (:mod:`trio_rlmesh.transports.grpc._h2`).

A server whose socket keeps Nagle's algorithm on holds its second small write (a unary
call's trailers after its message, a stream's first message after its headers) until
the first is acknowledged, and Linux delays that ACK by up to 40 ms. The client asks for
an immediate ACK exactly while such a response is under way, and not in a stream's
steady state, where its next request carries the ACK. These tests count the requests
over real loopback TCP; they assert no timing.
"""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
import trio.testing

from trio_rlmesh.transports.grpc._h2 import H2Connection, H2Stream
from trio_rlmesh.transports.grpc._settings import GrpcSettings
from trio_rlmesh.transports.grpc._status import Status

pytestmark = pytest.mark.skipif(
    not hasattr(socket, "TCP_QUICKACK"), reason="TCP_QUICKACK is Linux's"
)

QUIET = GrpcSettings(keepalive_interval=None)


class Acks:
    """Counts the client's immediate-ACK requests (each still made for real)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        ack_now = H2Connection._ack_now

        def counting(conn: H2Connection) -> None:
            self.count += 1
            ack_now(conn)

        monkeypatch.setattr(H2Connection, "_ack_now", counting)


async def connect(
    nursery: trio.Nursery, handler: Callable[[H2Stream], Awaitable[Any]]
) -> tuple[H2Connection, H2Connection]:
    """A client connection over loopback TCP to a server connection running ``handler``
    for every call."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    client_stream = await trio.open_tcp_stream("127.0.0.1", port)
    server_stream = await listeners[0].accept()
    await listeners[0].aclose()

    server: H2Connection

    def on_request(stream: H2Stream) -> None:
        server.nursery.start_soon(handler, stream)

    server = H2Connection(server_stream, client=False, settings=QUIET, on_request=on_request)
    client = H2Connection(client_stream, client=True, settings=QUIET, label="client")
    await nursery.start(server.run)
    await nursery.start(client.run)
    return client, server


async def test_unary_reply_is_acknowledged_before_its_trailers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    acks = Acks(monkeypatch)
    release = trio.Event()

    async def unary(stream: H2Stream) -> None:
        request = await stream.receive_message()
        assert request is not None
        await stream.send_headers()
        await stream.send_message(request[::-1])
        await release.wait()  # the trailers come only once the client has looked
        stream.finish(Status.OK)
        await stream.connection.flush()

    async with trio.open_nursery() as nursery:
        client, server = await connect(nursery, unary)
        assert client._quick_ack_socket is not None
        assert server._quick_ack_socket is None  # a server never asks
        stream = client.open_stream(client.client_headers("/unary", {}, None))
        await stream.send_message(b"abc", end=True)
        assert await stream.receive_message() == b"cba"
        await trio.testing.wait_all_tasks_blocked()
        assert acks.count >= 1
        release.set()
        assert await stream.receive_message() is None
        nursery.cancel_scope.cancel()


async def test_steady_stream_asks_for_no_immediate_ack(monkeypatch: pytest.MonkeyPatch) -> None:
    acks = Acks(monkeypatch)

    async def echo(stream: H2Stream) -> None:
        await stream.send_headers()
        while (message := await stream.receive_message()) is not None:
            await stream.send_message(message[::-1])
        stream.finish(Status.OK)
        await stream.connection.flush()

    async with trio.open_nursery() as nursery:
        client, _ = await connect(nursery, echo)
        stream = client.open_stream(client.client_headers("/echo", {}, None))
        await stream.send_message(b"first")
        assert await stream.receive_message() == b"tsrif"
        await trio.testing.wait_all_tasks_blocked()
        opening = acks.count
        for number in range(20):
            await stream.send_message(b"%d" % number)
            assert await stream.receive_message() == (b"%d" % number)[::-1]
        await trio.testing.wait_all_tasks_blocked()
        assert acks.count == opening
        await stream.end()
        assert await stream.receive_message() is None
        nursery.cancel_scope.cancel()
