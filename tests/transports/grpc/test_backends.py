"""The backend conformance suite: what every gRPC backend must do, in both roles.

A small echo service (below) is served by the server backend under test and called by the
client backend under test, in every pairing. Where a test needs a peer that misbehaves, the
peer is the fake server or the raw client of :mod:`.wire` and only the role under test
varies. Pairs of trio backends talk over ``memory://`` under the autojump clock (exact
virtual times); any pairing with grpclib uses a Unix socket and the real clock. The few
TCP tests are marked ``network``.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import h2.errors
import pytest
import trio
import trio.testing

from trio_rlmesh.transports.grpc import BACKENDS, BackendName, GrpcSettings
from trio_rlmesh.transports.grpc._backend import (
    Channel,
    Handler,
    RunningServer,
    ServerCall,
)
from trio_rlmesh.transports.grpc._grpclib_backend import _configuration
from trio_rlmesh.transports.grpc._registry import get_backend
from trio_rlmesh.transports.grpc._settings import DEFAULT_SETTINGS
from trio_rlmesh.transports.grpc._status import ConnectionLost, GrpcError, Status
from trio_rlmesh.transports.grpc._trio_backend import TrioServerCall

from .servers import within
from .wire import (
    expect_status,
    lying_prefix,
    open_fake_server,
    open_raw_client,
)

UNARY = "/test.Echo/Unary"
BIDI = "/test.Echo/Bidi"
FAIL = "/test.Echo/Fail"
HANG = "/test.Echo/Hang"
META = "/test.Echo/Meta"
CRASH = "/test.Echo/Crash"

LIMIT = 1024 * 1024
SETTINGS = GrpcSettings(max_message_size=64 * LIMIT)
FAST_KEEPALIVE = GrpcSettings(keepalive_interval=0.5, keepalive_timeout=0.5)
"""For grpclib, whose keepalive runs on asyncio's real clock."""

PAIRS = list(itertools.product(BACKENDS, BACKENDS))


# ----------------------------------------------------------------------------- the service


@attrs.define(eq=False)
class Echo:
    """The echo service; records what its handlers saw."""

    seen_metadata: list[Mapping[str, str]] = attrs.Factory(list)
    ended: list[BaseException | None] = attrs.Factory(list)
    handler_done: trio.Event = attrs.Factory(trio.Event)

    def handlers(self) -> dict[str, Handler]:
        return {
            UNARY: self.unary,
            BIDI: self.bidi,
            FAIL: self.fail,
            HANG: self.hang,
            META: self.meta,
            CRASH: self.crash,
        }

    async def unary(self, call: ServerCall) -> None:
        message = await call.receive_message()
        assert message is not None
        await call.send_message(message)

    async def bidi(self, call: ServerCall) -> None:
        """Echo every message; a message ``b"many:N:SIZE"`` is answered with N messages."""
        await call.send_initial_metadata()
        outcome: BaseException | None = None
        try:
            while (message := await call.receive_message()) is not None:
                if message.startswith(b"many:"):
                    _, count, size = message.split(b":")
                    for i in range(int(count)):
                        await call.send_message(bytes([i % 256]) * int(size))
                else:
                    await call.send_message(message)
        except BaseException as exc:
            outcome = exc
            raise
        finally:
            self.ended.append(outcome)
            self.handler_done.set()

    async def fail(self, call: ServerCall) -> None:
        message = await call.receive_message()
        assert message is not None
        code, _, text = message.decode().partition(":")
        raise GrpcError(Status[code], text)

    async def hang(self, call: ServerCall) -> None:
        try:
            await trio.sleep_forever()
        finally:
            self.handler_done.set()

    async def meta(self, call: ServerCall) -> None:
        self.seen_metadata.append(dict(call.metadata))
        await call.receive_message()
        await call.send_message(call.metadata.get("authorization", "-").encode())

    async def crash(self, call: ServerCall) -> None:
        await call.receive_message()
        raise ValueError("a bug in the handler")


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(params=PAIRS, ids=[f"{s}-server-{c}-client" for s, c in PAIRS])
def pair(request: pytest.FixtureRequest) -> tuple[BackendName, BackendName]:
    server: BackendName
    client: BackendName
    server, client = request.param
    return server, client


@pytest.fixture
def pair_clock(pair: tuple[BackendName, BackendName]) -> trio.testing.MockClock | None:
    """Virtual time when no grpclib is involved."""
    return trio.testing.MockClock(autojump_threshold=0) if pair == ("trio", "trio") else None


@pytest.fixture(params=BACKENDS)
def role_backend(request: pytest.FixtureRequest) -> BackendName:
    """The one backend under test when the other end is a fake or the raw client."""
    name: BackendName = request.param
    return name


@pytest.fixture
def role_clock(role_backend: BackendName) -> trio.testing.MockClock | None:
    return trio.testing.MockClock(autojump_threshold=0) if role_backend == "trio" else None


def where(*backends: BackendName, sockdir: Path, name: str = "echo") -> str:
    if all(b == "trio" for b in backends):
        return f"memory://{name}"
    return f"unix://{sockdir}/{name}.sock"


@attrs.define
class Pair:
    server: RunningServer
    channel: Channel
    echo: Echo


@asynccontextmanager
async def serve_and_connect(
    pair: tuple[BackendName, BackendName],
    sockdir: Path,
    *,
    server_settings: GrpcSettings = SETTINGS,
    client_settings: GrpcSettings = SETTINGS,
    address: str | None = None,
) -> AsyncIterator[Pair]:
    server_backend, client_backend = pair
    echo = Echo()
    bind = address or where(*pair, sockdir=sockdir)
    async with (
        get_backend(server_backend).open_server(bind, echo.handlers(), server_settings) as server,
        get_backend(client_backend).open_channel(server.address, client_settings) as channel,
    ):
        yield Pair(server, channel, echo)


def at(clock: object, start: float, expected: float, slack: float = 2.0) -> bool:
    elapsed = trio.current_time() - start
    if clock is not None:
        return elapsed == pytest.approx(expected, abs=1e-6)
    return expected - 0.05 <= elapsed < expected + slack


# ----------------------------------------------------------------------------- calls


async def test_unary(
    pair: tuple[BackendName, BackendName], pair_clock: object, sockdir: Path
) -> None:
    with within(20):
        async with serve_and_connect(pair, sockdir) as p:
            assert await p.channel.unary(UNARY, b"hello") == b"hello"
            assert await p.channel.unary(UNARY, b"") == b""  # an empty message is a message


async def test_bidi_streaming_in_lockstep_pipelined_and_server_streaming(
    pair: tuple[BackendName, BackendName], pair_clock: object, sockdir: Path
) -> None:
    with within(20):
        async with serve_and_connect(pair, sockdir) as p:
            call = await p.channel.open_call(BIDI)
            try:
                assert await call.initial_metadata() is not None
                for i in range(20):
                    await call.send_message(b"lock %d" % i)
                    assert await call.receive_message() == b"lock %d" % i
                for i in range(50):
                    await call.send_message(b"pipe %d" % i)
                for i in range(50):
                    assert await call.receive_message() == b"pipe %d" % i
                await call.send_message(b"many:30:100")
                replies = [await call.receive_message() for _ in range(30)]
                assert replies == [bytes([i]) * 100 for i in range(30)]
                await call.send_message(b"last", end=True)
                assert await call.receive_message() == b"last"
                assert await call.receive_message() is None  # OK after our half-close
            finally:
                await call.aclose()


@pytest.mark.parametrize("size", [16 * 1024 + 1, 200_000, 9 * 1024 * 1024])
async def test_large_messages_both_ways(
    pair: tuple[BackendName, BackendName], pair_clock: object, sockdir: Path, size: int
) -> None:
    """Above one 16 KiB frame, and (9 MiB) above the stream and connection windows' worth
    of unacknowledged data, in both directions."""
    payload = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    with within(30):
        async with serve_and_connect(pair, sockdir) as p:
            assert await p.channel.unary(UNARY, payload) == payload
            call = await p.channel.open_call(BIDI)
            try:
                await call.send_message(payload)
                await call.send_message(b"many:2:%d" % size)
                assert await call.receive_message() == payload
                assert await call.receive_message() == b"\x00" * size
                assert await call.receive_message() == b"\x01" * size
            finally:
                await call.aclose()


SMALL_WINDOWS = GrpcSettings(
    max_message_size=SETTINGS.max_message_size,
    stream_window=64 * 1024,
    connection_window=256 * 1024,
)
"""Windows the replies of three calls outgrow (3 x 160 KiB unread, each call's replies
more than a stream window), each message above a quarter of the stream window. The
connection window exceeds all three stream windows, so data held back on the calls not
being read can never use up the connection's room."""


@pytest.mark.parametrize(
    "pair", [("trio", "trio"), ("grpclib", "trio")], ids=["trio-server", "grpclib-server"]
)
async def test_held_back_replies_get_their_credit_when_read(
    pair: tuple[BackendName, BackendName], pair_clock: object, sockdir: Path
) -> None:
    """Three calls' replies arrive while the trio client reads none: past a stream window
    of unread data the client withholds credit. Reading them one call at a time, the
    credit of each call's held-back data must reach the server once it is read, or
    the rest of the replies never comes. Only the trio client holds data back."""
    count, size = 8, 20 * 1024
    with within(20), trio.fail_after(10):
        async with serve_and_connect(pair, sockdir, client_settings=SMALL_WINDOWS) as p:
            calls = [await p.channel.open_call(BIDI) for _ in range(3)]
            try:
                for call in calls:
                    await call.send_message(b"many:%d:%d" % (count, size), end=True)
                await trio.testing.wait_all_tasks_blocked()
                for call in calls:
                    for i in range(count):
                        assert await call.receive_message() == bytes([i]) * size
                    assert await call.receive_message() is None
                # Everything was read, so all credit but less than a quarter window went
                # back: the peer has that much room on the connection. (Left to h2's own
                # rule, up to half the window stays back; with data held on other calls
                # that exhausted the connection window against the grpclib server.)
                conn = p.channel.connection
                assert conn is not None
                most_owed = SMALL_WINDOWS.stream_window // 4
                assert conn.inbound_room > SMALL_WINDOWS.connection_window - most_owed
            finally:
                for call in calls:
                    await call.aclose()


async def test_metadata_carries_the_raw_token(
    pair: tuple[BackendName, BackendName], pair_clock: object, sockdir: Path
) -> None:
    with within(20):
        async with serve_and_connect(pair, sockdir) as p:
            token = "s3cret token/with+odd=chars"
            reply = await p.channel.unary(META, b"", {"authorization": token, "x-extra": "1"})
            assert reply == token.encode()
            assert await p.channel.unary(META, b"") == b"-"
    with_token, without = p.echo.seen_metadata
    assert with_token["authorization"] == token  # raw: no "Bearer "
    assert with_token["x-extra"] == "1"
    assert "authorization" not in without
    for seen in (with_token, without):
        assert not any(key.startswith(":") for key in seen)  # no pseudo-headers


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (Status.FAILED_PRECONDITION, "environment already has an active Join session"),
        (Status.INVALID_ARGUMENT, '50% done: ✓ "quoted"\nnext line\ttab'),
        (Status.UNAUTHENTICATED, "invalid env token"),
        (Status.NOT_FOUND, ""),
        (Status.UNAVAILABLE, "%41 is not an escape here"),
    ],
)
async def test_non_ok_status_and_message_arrive_exactly(
    pair: tuple[BackendName, BackendName],
    pair_clock: object,
    sockdir: Path,
    status: Status,
    message: str,
) -> None:
    """The message is percent-encoded on the wire and decoded back, unchanged."""
    with within(20):
        async with serve_and_connect(pair, sockdir) as p:
            with pytest.raises(GrpcError) as info:
                await p.channel.unary(FAIL, f"{status.name}:{message}".encode())
            assert (info.value.status, info.value.message) == (status, message)
            # Streaming calls end the same way.
            call = await p.channel.open_call(FAIL)
            try:
                await call.send_message(f"{status.name}:{message}".encode(), end=True)
                with pytest.raises(GrpcError) as info:
                    await call.receive_message()
                assert (info.value.status, info.value.message) == (status, message)
            finally:
                await call.aclose()


async def test_unknown_method_is_unimplemented(
    pair: tuple[BackendName, BackendName], pair_clock: object, sockdir: Path
) -> None:
    with within(20):
        async with serve_and_connect(pair, sockdir) as p:
            with pytest.raises(GrpcError) as info:
                await p.channel.unary("/test.Echo/Nope", b"")
            assert info.value.status is Status.UNIMPLEMENTED


async def test_a_crashing_handler_is_internal_with_one_log_line(
    pair: tuple[BackendName, BackendName],
    pair_clock: object,
    sockdir: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="trio_rlmesh")
    with within(20):
        async with serve_and_connect(pair, sockdir) as p:
            with pytest.raises(GrpcError) as info:
                await p.channel.unary(CRASH, b"")
            assert info.value.status is Status.INTERNAL
            assert "ValueError: a bug in the handler" in info.value.message
            assert await p.channel.unary(UNARY, b"still") == b"still"
    [line] = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not line.exc_info
    assert "ValueError: a bug in the handler" in line.getMessage()


# ----------------------------------------------------------------------------- deadlines


async def test_grpc_timeout_gives_deadline_exceeded_on_time(
    pair: tuple[BackendName, BackendName], pair_clock: object, sockdir: Path
) -> None:
    with within(20):
        async with serve_and_connect(pair, sockdir) as p:
            start = trio.current_time()
            with pytest.raises(GrpcError) as info:
                await p.channel.unary(HANG, b"", timeout=0.5)
            assert info.value.status is Status.DEADLINE_EXCEEDED
            assert at(pair_clock, start, 0.5)
            # The server gave up on the call too.
            await p.echo.handler_done.wait()


async def test_the_server_enforces_grpc_timeout(
    role_backend: BackendName, role_clock: object, sockdir: Path
) -> None:
    """A client that does not enforce its own deadline (the raw client) still gets
    DEADLINE_EXCEEDED from the server, on time."""
    echo = Echo()
    with within(20):
        async with (
            get_backend(role_backend).open_server(
                where(role_backend, sockdir=sockdir), echo.handlers(), SETTINGS
            ) as server,
            open_raw_client(server.address) as raw,
        ):
            call = await raw.open(HANG, timeout=0.5)
            await call.send(b"", end=True)
            start = trio.current_time()
            status, _ = await expect_status(call)
            assert status is Status.DEADLINE_EXCEEDED
            assert at(role_clock, start, 0.5)
            await echo.handler_done.wait()


async def test_the_client_sends_grpc_timeout(
    role_backend: BackendName, role_clock: object, sockdir: Path
) -> None:
    seen: list[str] = []

    async def record(call: ServerCall) -> None:
        assert isinstance(call, TrioServerCall)
        headers = call._stream.headers or {}
        seen.append(headers.get("grpc-timeout", "none"))
        await call.receive_message()
        await call.send_message(b"ok")

    with within(20):
        async with (
            open_fake_server({UNARY: record}, where(role_backend, sockdir=sockdir)) as fake,
            get_backend(role_backend).open_channel(fake.address, SETTINGS) as channel,
        ):
            await channel.unary(UNARY, b"", timeout=2.5)
            await channel.unary(UNARY, b"")
    assert len(seen) == 2
    assert seen[1] == "none"
    unit = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "S": 1.0, "M": 60.0, "H": 3600.0}[seen[0][-1]]
    assert int(seen[0][:-1]) * unit == pytest.approx(2.5, abs=0.1)


# ----------------------------------------------------------------------------- message size


async def test_the_server_refuses_an_oversized_message_at_its_header(
    role_backend: BackendName, role_clock: object, sockdir: Path
) -> None:
    """Header and a few bytes only, the stream left open: refused with RESOURCE_EXHAUSTED
    at once, and the connection serves the next call."""
    echo = Echo()
    with within(20):
        async with (
            get_backend(role_backend).open_server(
                where(role_backend, sockdir=sockdir),
                echo.handlers(),
                GrpcSettings(max_message_size=LIMIT),
            ) as server,
            open_raw_client(server.address) as raw,
        ):
            call = await raw.open(BIDI)
            start = trio.current_time()
            await call.send_data(lying_prefix(LIMIT + 1) + b"\x00" * 16)
            status, message = await expect_status(call)
            assert (status, message) == (
                Status.RESOURCE_EXHAUSTED,
                f"message of {LIMIT + 1} bytes exceeds the limit of {LIMIT} bytes",
            )
            assert at(role_clock, start, 0.0, slack=1.0)
            assert await raw.unary_bytes(UNARY, b"next") == b"next"


async def test_the_client_refuses_an_oversized_message_at_its_header(
    role_backend: BackendName, role_clock: object, sockdir: Path
) -> None:
    async def lie(call: ServerCall) -> None:
        assert isinstance(call, TrioServerCall)
        await call.receive_message()
        await call.send_initial_metadata()
        stream = call._stream
        stream.connection._h2.send_data(stream.stream_id, lying_prefix(LIMIT + 1) + b"\x00" * 16)
        await stream.connection.flush()
        await trio.sleep_forever()  # never the rest of the body, never a status

    with within(20):
        async with (
            open_fake_server({UNARY: lie}, where(role_backend, sockdir=sockdir)) as fake,
            get_backend(role_backend).open_channel(
                fake.address, GrpcSettings(max_message_size=LIMIT)
            ) as channel,
        ):
            start = trio.current_time()
            with pytest.raises(GrpcError) as info:
                await channel.unary(UNARY, b"")
            assert info.value.status is Status.RESOURCE_EXHAUSTED
            assert f"{LIMIT + 1} bytes exceeds the limit of {LIMIT}" in info.value.message
            assert at(role_clock, start, 0.0, slack=1.0)


# ----------------------------------------------------------------------------- resets, GOAWAY


async def test_the_client_reports_a_peer_reset(
    role_backend: BackendName, role_clock: object, sockdir: Path
) -> None:
    async def reset(call: ServerCall) -> None:
        assert isinstance(call, TrioServerCall)
        await call.receive_message()
        await call.send_message(b"before the reset")
        stream = call._stream
        stream.connection.reset(stream, h2.errors.ErrorCodes.CANCEL)

    with within(20):
        async with (
            open_fake_server(
                {BIDI: reset, UNARY: Echo().unary}, where(role_backend, sockdir=sockdir)
            ) as fake,
            get_backend(role_backend).open_channel(fake.address, SETTINGS) as channel,
        ):
            call = await channel.open_call(BIDI)
            try:
                await call.send_message(b"go")
                # What arrived before the reset is still delivered, then the loss.
                assert await call.receive_message() == b"before the reset"
                with pytest.raises(ConnectionLost, match=r"reset|Stream reset"):
                    await call.receive_message()
            finally:
                await call.aclose()
            # Only that stream is gone: the connection serves the next call.
            assert await channel.unary(UNARY, b"again") == b"again"


async def test_the_server_survives_a_client_reset(
    role_backend: BackendName, role_clock: object, sockdir: Path
) -> None:
    echo = Echo()
    with within(20):
        async with (
            get_backend(role_backend).open_server(
                where(role_backend, sockdir=sockdir), echo.handlers(), SETTINGS
            ) as server,
            open_raw_client(server.address) as raw,
        ):
            call = await raw.open(BIDI)
            await call.send(b"one")
            assert await call.receive_bytes() == b"one"
            call.reset(h2.errors.ErrorCodes.CANCEL)
            await echo.handler_done.wait()  # the handler ended (with the loss)
            [ended] = echo.ended
            assert ended is not None
            assert await raw.unary_bytes(UNARY, b"next") == b"next"


async def test_the_client_reports_a_goaway_and_reconnects(
    role_backend: BackendName, role_clock: object, sockdir: Path
) -> None:
    echo = Echo()
    with within(20):
        async with (
            open_fake_server(echo.handlers(), where(role_backend, sockdir=sockdir)) as fake,
            get_backend(role_backend).open_channel(fake.address, SETTINGS) as channel,
        ):
            call = await channel.open_call(BIDI)
            try:
                await call.send_message(b"one")
                assert await call.receive_message() == b"one"
                [conn] = fake.connections()
                with trio.CancelScope(shield=True):
                    await conn.aclose("the fake says goodbye")  # GOAWAY, then close
                with pytest.raises(ConnectionLost):
                    await call.receive_message()
            finally:
                await call.aclose()
            # A new call opens a new connection.
            assert await channel.unary(UNARY, b"again") == b"again"


async def test_the_server_survives_a_client_goaway(
    role_backend: BackendName, role_clock: object, sockdir: Path
) -> None:
    echo = Echo()
    with within(20):
        async with get_backend(role_backend).open_server(
            where(role_backend, sockdir=sockdir), echo.handlers(), SETTINGS
        ) as server:
            async with open_raw_client(server.address) as raw:
                call = await raw.open(BIDI)
                await call.send(b"one")
                assert await call.receive_bytes() == b"one"
                await raw.conn.aclose("the raw client says goodbye")
                await echo.handler_done.wait()
            async with open_raw_client(server.address) as raw:
                assert await raw.unary_bytes(UNARY, b"next") == b"next"


# ----------------------------------------------------------------------------- sockets


@pytest.mark.network
async def test_tcp(pair: tuple[BackendName, BackendName], sockdir: Path) -> None:
    with trio.fail_after(20):
        async with serve_and_connect(pair, sockdir, address="127.0.0.1:0") as p:
            host, _, port = p.server.address.rpartition(":")
            assert host == "127.0.0.1"
            assert int(port) > 0
            assert p.channel.label == f"tcp://{p.server.address}"
            assert await p.channel.unary(UNARY, b"over tcp") == b"over tcp"


async def test_unix_socket(pair: tuple[BackendName, BackendName], sockdir: Path) -> None:
    path = sockdir / "echo.sock"
    with within(20):
        async with serve_and_connect(pair, sockdir, address=f"unix://{path}") as p:
            assert p.server.address == f"unix://{path}"
            assert p.channel.label == f"unix://{path}"
            assert await p.channel.unary(UNARY, b"over unix") == b"over unix"
            call = await p.channel.open_call(BIDI)
            try:
                await call.send_message(b"stream", end=True)
                assert await call.receive_message() == b"stream"
                assert await call.receive_message() is None
            finally:
                await call.aclose()


@pytest.mark.network
async def test_tcp_connection_refused(role_backend: BackendName) -> None:
    with trio.socket.socket() as sock:
        await sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with trio.fail_after(20):
        async with get_backend(role_backend).open_channel(f"127.0.0.1:{port}", SETTINGS) as ch:
            with pytest.raises(ConnectionLost) as info:
                await ch.unary(UNARY, b"")
    assert info.value.refused
    assert f"could not connect to tcp://127.0.0.1:{port}: connection refused" in info.value.reason


async def test_connection_refused_without_a_listener(
    role_backend: BackendName, role_clock: object, sockdir: Path
) -> None:
    target = where(role_backend, sockdir=sockdir, name="nobody")
    with within(20):
        async with get_backend(role_backend).open_channel(target, SETTINGS) as channel:
            with pytest.raises(ConnectionLost) as info:
                await channel.unary(UNARY, b"")
            assert info.value.refused
            assert "could not connect" in info.value.reason
            with pytest.raises(ConnectionLost) as info:
                await channel.open_call(BIDI)
            assert info.value.refused


async def test_memory_addresses_are_trio_only() -> None:
    with pytest.raises(ValueError, match="trio backend only"):
        async with get_backend("grpclib").open_channel("memory://x", SETTINGS):
            pass
    with pytest.raises(ValueError, match="trio backend only"):
        async with get_backend("grpclib").open_server("memory://x", {}, SETTINGS):
            pass


# ----------------------------------------------------------------------------- keepalive


async def test_keepalive_detects_a_frozen_server(
    role_backend: BackendName, role_clock: object, sockdir: Path
) -> None:
    """Default settings on trio: the call fails exactly 30 s after the server fell silent
    (PING after 10 s of silence, 20 s for anything to come back). grpclib's keepalive is
    asyncio's own timer on the real clock: shown with 0.5 s + 0.5 s settings."""
    echo = Echo()
    settings = DEFAULT_SETTINGS if role_backend == "trio" else FAST_KEEPALIVE
    due = 30.0 if role_backend == "trio" else 1.0
    with within(20):
        async with (
            open_fake_server(echo.handlers(), where(role_backend, sockdir=sockdir)) as fake,
            get_backend(role_backend).open_channel(fake.address, settings) as channel,
        ):
            call = await channel.open_call(BIDI)
            try:
                await call.send_message(b"one")
                assert await call.receive_message() == b"one"
                fake.valve.freeze()
                start = trio.current_time()
                with pytest.raises(ConnectionLost) as info:
                    await call.receive_message()
                assert at(role_clock, start, due)
            finally:
                await call.aclose()
    assert "keepalive" in info.value.reason
    assert "frozen or unreachable" in info.value.reason


async def test_keepalive_detects_a_frozen_client(
    role_backend: BackendName, role_clock: object, sockdir: Path
) -> None:
    echo = Echo()
    settings = DEFAULT_SETTINGS if role_backend == "trio" else FAST_KEEPALIVE
    due = 30.0 if role_backend == "trio" else 1.0
    with within(20):
        async with (
            get_backend(role_backend).open_server(
                where(role_backend, sockdir=sockdir), echo.handlers(), settings
            ) as server,
            open_raw_client(server.address) as raw,
        ):
            call = await raw.open(BIDI)
            await call.send(b"one")
            assert await call.receive_bytes() == b"one"
            raw.valve.freeze()
            start = trio.current_time()
            await echo.handler_done.wait()
            assert at(role_clock, start, due)
            # The handler ends with the loss (on grpclib: cancelled, as the connection
            # closed under it).
            [ended] = echo.ended
            assert isinstance(ended, ConnectionLost if role_backend == "trio" else BaseException)
            raw.valve.thaw()


async def test_keepalive_leaves_an_idle_connection_alone(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """No call open, no PING: a frozen peer costs nothing until the next call. (Trio only:
    on grpclib this would take a real-time sleep; its setting, no pings without calls, is
    checked below.)"""
    echo = Echo()
    with trio.fail_after(300):
        async with (
            open_fake_server(echo.handlers(), "memory://echo") as fake,
            get_backend("trio").open_channel(fake.address, DEFAULT_SETTINGS) as channel,
        ):
            assert await channel.unary(UNARY, b"one") == b"one"
            received = fake.bytes_received
            await trio.sleep(120)  # virtual time: twelve keepalive intervals
            assert fake.bytes_received == received
            assert await channel.unary(UNARY, b"two") == b"two"


def test_grpclib_keepalive_settings_notice_a_frozen_peer_within_30_s_by_default() -> None:
    """grpclib pings every ``keepalive_interval`` while a call is open and closes the
    connection ``keepalive_timeout`` after an unanswered PING: at most 10 + 20 s."""
    config = _configuration(DEFAULT_SETTINGS)
    assert config._keepalive_time == 10.0
    assert config._keepalive_timeout == 20.0
    assert config._keepalive_time + config._keepalive_timeout <= 30.0
    assert config._http2_max_pings_without_data == 0
    assert not config._keepalive_permit_without_calls
    off = _configuration(GrpcSettings(keepalive_interval=None))
    assert off._keepalive_time is None
