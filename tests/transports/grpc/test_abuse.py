"""Issue 23: the servers against the known HTTP/2 abuse classes, on both backends.

The attacker (:mod:`.hostile`) writes hand-built frames to a server on the backend under
test; small :class:`ServerLimits` let a few dozen frames cross a budget. On trio (memory
transport, autojump clock) the server's clock is virtual, so timeouts are asserted
exactly; on grpclib (a Unix socket, asyncio's real clock) they use sub-second limits and
are bounded by the real-time guard. Each test fails on a server without the limit it
pins: the connection is never cut, and the attacker waits for a close that never comes.
"""

from __future__ import annotations

import contextlib
import gc
import tracemalloc
from collections.abc import AsyncIterator, Callable, Mapping

import pytest
import trio
import trio.lowlevel
import trio.testing

from trio_rlmesh._timeouts import GOAWAY_GRACE
from trio_rlmesh.protocol import core_v1, env_v1
from trio_rlmesh.transports.grpc import (
    BackendName,
    GrpcSettings,
    ServerLimits,
    open_env_client,
    serve_env,
)
from trio_rlmesh.transports.grpc._address import parse_address
from trio_rlmesh.transports.grpc._backend import Handler, RunningServer
from trio_rlmesh.transports.grpc._codec import encode
from trio_rlmesh.transports.grpc._h2 import H2Connection, H2Stream
from trio_rlmesh.transports.grpc._handshake import (
    ENV_HANDSHAKE,
    ENV_JOIN,
    ENV_SHUTDOWN,
    HEALTH_CHECK,
    HEALTH_WATCH,
)
from trio_rlmesh.transports.grpc._health import HEALTH_HANDLERS
from trio_rlmesh.transports.grpc._memory import memory_stream_pair
from trio_rlmesh.transports.grpc._registry import get_backend
from trio_rlmesh.transports.grpc._status import Status
from trio_rlmesh.transports.grpc._trio_backend import connect

from .hostile import DATA, Hostile, hostile, request_headers
from .servers import ToyEnv, discrete_action, handshake_request, serving, within
from .wire import Valve, ValveStream

Where = Callable[[str], str]

AUTOJUMP_THRESHOLD = 0.2
"""The toy env's first steps run in a worker thread: virtual time must not jump then."""
ENHANCE_YOUR_CALM = 11
NO_ERROR = 0
SMALL = ServerLimits(
    resets_per_window=20,
    pings_per_window=20,
    settings_per_window=20,
    empty_frames_per_window=20,
    max_header_block=4096,
)
"""Budgets a few dozen frames cross."""
QUIET = GrpcSettings(keepalive_interval=None)


@pytest.fixture
def trio_clock() -> trio.testing.MockClock:
    """The autojump clock for trio-only tests whose server runs the env's first calls in a
    worker thread (see ``AUTOJUMP_THRESHOLD``)."""
    return trio.testing.MockClock(autojump_threshold=AUTOJUMP_THRESHOLD)


@contextlib.asynccontextmanager
async def env_server(
    backend: BackendName, address: Where, limits: ServerLimits = SMALL, **kwargs: object
) -> AsyncIterator[str]:
    async with serving(
        serve_env,
        ToyEnv(episode_length=1000),
        address("env"),
        backend=backend,
        limits=limits,
        **kwargs,
    ) as served:
        yield served.address


@contextlib.asynccontextmanager
async def attacker(address: str, *, hello: bool = True) -> AsyncIterator[Hostile]:
    async with hostile(await connect(parse_address(address)), hello=hello) as client:
        yield client


@contextlib.asynccontextmanager
async def health_server(
    backend: BackendName,
    address: str,
    limits: ServerLimits,
    handlers: Mapping[str, Handler] = HEALTH_HANDLERS,
) -> AsyncIterator[tuple[RunningServer, Hostile]]:
    """A bare server of ``handlers`` (health only, by default) and an attacker on it."""
    async with (
        get_backend(backend).open_server(address, handlers, QUIET, limits) as server,
        attacker(server.address) as client,
    ):
        yield server, client


async def assert_served(address: str, backend: BackendName, steps: int = 1) -> None:
    """A well-behaved client (ours) gets a session."""
    async with open_env_client(address, backend=backend) as env:
        await env.reset(env_v1.ResetRequest(seeds=[1]))
        for _ in range(steps):
            stepped = await env.step(env_v1.StepRequest(action=discrete_action(1)))
            assert list(stepped.response.rewards) == [1.5]


# ----------------------------------------------------------------------- frame budgets

FLOODS: dict[str, tuple[Callable[[Hostile], bytes], str]] = {
    "rapid-reset": (lambda h: h.rapid_reset(50, ENV_HANDSHAKE), "more than 20 RST_STREAM"),
    "ping": (lambda h: h.pings(50), "more than 20 PING frames"),
    "settings": (lambda h: h.settings(50), "more than 20 SETTINGS frames"),
    "empty-data": (lambda h: h.empty_data(50, ENV_JOIN), "more than 20 empty"),
    "continuation": (
        lambda h: h.continuation_flood(ENV_HANDSHAKE, 1024, 20),
        "a header block of more than 4096 bytes",
    ),
}


async def flooded(where: str, flood: str) -> Hostile:
    """An attacker that sent ``flood`` to ``where``, once the server has closed on it."""
    async with attacker(where) as bad:
        await bad.send(FLOODS[flood][0](bad))
        await bad.closed.wait()
    return bad


@pytest.mark.parametrize("flood", list(FLOODS))
async def test_a_flood_past_its_budget_gets_enhance_your_calm_and_is_closed(
    backend: BackendName, clock: object, address: Where, flood: str
) -> None:
    """The CONTINUATION flood is 20 KiB: h2 alone would buffer it (it refuses only past 64
    frames), so only the header block cap cuts it off."""
    _, words = FLOODS[flood]
    with within(20):
        async with env_server(backend, address) as where:
            bad = await flooded(where, flood)
            goaway = bad.goaway()
            assert goaway is not None
            assert goaway.error_code == ENHANCE_YOUR_CALM
            assert words in goaway.debug
            await assert_served(where, backend)


async def test_a_client_within_its_budgets_keeps_its_connection(
    backend: BackendName, clock: object, address: Where
) -> None:
    with within(20):
        async with env_server(backend, address) as where, attacker(where) as client:
            burst = client.pings(15) + client.settings(15) + client.rapid_reset(15, ENV_HANDSHAKE)
            await client.send(burst)
            sid, data = client.request(request_headers(HEALTH_CHECK), b"")
            await client.send(data)
            answer = await client.wait_for(lambda: client.response(sid))
            assert answer["grpc-status"] == "0"
            assert client.goaway() is None


async def test_budgets_refill_over_their_window(trio_clock: trio.testing.MockClock) -> None:
    """20 PINGs per 10 s: 20 now, 10 more after 5 s, 20 more after 10 s more, all fine."""
    with trio.fail_after(60):
        async with (
            env_server("trio", lambda name: f"memory://{name}") as where,
            attacker(where) as client,
        ):
            for count, wait in ((20, 5.0), (10, 10.0), (20, 0.0)):
                await client.send(client.pings(count))
                await trio.sleep(wait)
            await trio.testing.wait_all_tasks_blocked()
            assert client.goaway() is None
            assert not client.closed.is_set()
            await client.send(client.pings(1))
            await client.closed.wait()
            goaway = client.goaway()
            assert goaway is not None
            assert goaway.error_code == ENHANCE_YOUR_CALM


@pytest.mark.parametrize("flood", list(FLOODS))
async def test_a_client_cut_off_comes_back_with_a_tenth_of_its_reset_budget(
    backend: BackendName, clock: object, address: Where, flood: str
) -> None:
    """Cut off for any flood, a client that reconnects within the window may reset 2
    calls where a fresh budget allows 20, so a rapid reset gains little by reconnecting;
    its PING budget is whole again. A well-behaved client from the same host, which
    resets nothing, is still served."""
    with within(20):
        async with env_server(backend, address) as where:
            await flooded(where, flood)
            async with attacker(where) as again:
                sid, data = again.request(request_headers(HEALTH_CHECK), b"")
                await again.send(again.pings(15) + data)
                answer = await again.wait_for(lambda: again.response(sid))
                assert answer["grpc-status"] == "0"
                await again.send(again.rapid_reset(3, ENV_HANDSHAKE))
                await again.closed.wait()
            goaway = again.goaway()
            assert goaway is not None
            assert goaway.error_code == ENHANCE_YOUR_CALM
            assert "more than 20 RST_STREAM" in goaway.debug
            await assert_served(where, backend, steps=5)


async def test_other_clients_are_served_while_a_rapid_reset_runs(
    backend: BackendName, clock: object, address: Where
) -> None:
    """The attacker stays under its budget (500 per 10 s) in batches, until a last burst
    crosses it; a well-behaved client completes a session meanwhile."""
    limits = ServerLimits(resets_per_window=500)
    with within(30):
        async with env_server(backend, address, limits=limits) as where:
            async with trio.open_nursery() as nursery, attacker(where) as bad:

                async def attack() -> None:
                    for _ in range(40):
                        if not await bad.send(bad.rapid_reset(10, ENV_HANDSHAKE)):
                            return
                        await trio.lowlevel.checkpoint()
                    await bad.send(bad.rapid_reset(600, ENV_HANDSHAKE))

                nursery.start_soon(attack)
                await assert_served(where, backend, steps=50)
                await bad.closed.wait()
            goaway = bad.goaway()
            assert goaway is not None
            assert goaway.error_code == ENHANCE_YOUR_CALM


# ----------------------------------------------------------------------- reset calls


async def _open_watches(client: Hostile, count: int) -> list[int]:
    """``count`` Health/Watch calls, each answered SERVING and then held open."""
    sids: list[int] = []
    for _ in range(count):
        sid, data = client.request(request_headers(HEALTH_WATCH), b"")
        sids.append(sid)
        await client.send(data)
    await client.wait_for(lambda: client.count(DATA) >= count or None)
    return sids


async def _settled(backend: BackendName, server: RunningServer) -> None:
    """Let the server finish what the frames it read asked for."""
    if backend == "trio":
        await trio.testing.wait_all_tasks_blocked()
        return
    # grpclib cancels its handlers on its own loop, which cancels ours through the
    # portal: look again until they are gone.
    for _ in range(1000):
        if not server.open_calls:
            return
        await trio.sleep(0.01)


async def test_a_reset_call_frees_its_handler_and_stream_at_once(
    backend: BackendName, clock: object, address: Where
) -> None:
    """80 Watch calls (their handler answers, then waits forever) are reset by the client:
    every handler is gone and, on trio, no H2Stream is left, while the connection lives."""
    limits = ServerLimits(resets_per_window=10_000)
    gc.collect()
    before = sum(isinstance(o, H2Stream) for o in gc.get_objects())
    with within(20):
        async with health_server(backend, address("health"), limits) as (server, client):
            sids = await _open_watches(client, 80)
            assert server.open_calls == 80
            await client.send(b"".join(client.reset(sid) for sid in sids))
            await _settled(backend, server)
            assert server.open_calls == 0
            gc.collect()
            assert sum(isinstance(o, H2Stream) for o in gc.get_objects()) == before
            assert not client.closed.is_set()


async def test_handlers_still_finishing_count_toward_max_concurrent_streams(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Five calls are reset while their handler cannot stop yet (a shielded wait): h2
    counts no open stream, but a sixth call is refused (REFUSED_STREAM) until they end."""
    limits = ServerLimits(max_concurrent_streams=5)

    async def stubborn(call: object) -> None:
        with trio.CancelScope(shield=True):
            await trio.sleep(100)

    handlers = {**HEALTH_HANDLERS, "/test/Stubborn": stubborn}
    with trio.fail_after(300):
        async with health_server("trio", "memory://h", limits, handlers) as (server, client):
            for _ in range(5):
                sid, data = client.request(request_headers("/test/Stubborn"), b"")
                await client.send(data + client.reset(sid))
            await trio.testing.wait_all_tasks_blocked()
            assert server.open_calls == 5
            sid, data = client.request(request_headers(HEALTH_CHECK), b"")
            await client.send(data)
            assert await client.wait_for(lambda: _reset_code(client, sid)) == 7  # REFUSED
            await trio.sleep(100)
            sid, data = client.request(request_headers(HEALTH_CHECK), b"")
            await client.send(data)
            assert (await client.wait_for(lambda: client.response(sid)))["grpc-status"] == "0"


def _reset_code(client: Hostile, sid: int) -> int | None:
    for kind, _, stream_id, payload in client.frames():
        if kind == 3 and stream_id == sid:
            return int.from_bytes(payload[:4], "big")
    return None


# ----------------------------------------------------------------------- idle states


async def test_a_connection_without_preface_is_closed_after_the_handshake_timeout(
    backend: BackendName, clock: object, address: Where
) -> None:
    """Bare TCP, and half a preface: closed exactly 5 s (virtual, trio) after accepting."""
    limits = ServerLimits(handshake_timeout=5.0 if backend == "trio" else 0.3)
    with within(20):
        async with env_server(backend, address, limits=limits) as where:
            for sent in (b"", b"PRI * HTTP/2.0\r\n"):
                async with attacker(where, hello=False) as silent:
                    start = trio.current_time()
                    if sent:
                        await silent.send(sent)
                    await silent.closed.wait()
                    if clock is not None:
                        assert trio.current_time() - start == limits.handshake_timeout
            await assert_served(where, backend)


async def test_a_connection_with_no_call_is_closed_after_the_idle_timeout(
    backend: BackendName, clock: object, address: Where
) -> None:
    """A call open for longer than the idle timeout keeps the connection; once it ends,
    the connection is closed (GOAWAY NO_ERROR) exactly ``idle_connection_timeout`` later (trio)."""
    idle = 60.0 if backend == "trio" else 0.4
    limits = ServerLimits(idle_connection_timeout=idle)
    with within(20):
        async with health_server(backend, address("health"), limits) as (_, client):
            (watch,) = await _open_watches(client, 1)
            await trio.sleep(idle * 3)
            assert not client.closed.is_set()
            await client.send(client.reset(watch))
            ended = trio.current_time()
            await client.closed.wait()
            if clock is not None:
                assert trio.current_time() - ended == idle
            goaway = client.goaway()
            assert goaway is not None
            assert goaway.error_code == NO_ERROR
            assert f"no call for {idle:g} s" in goaway.debug


async def test_keepalive_declares_a_peer_dead_30_s_after_its_last_byte(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A peer that answers the first PING (at 10 s) and then freezes (at 15 s) is dead at
    40 s: 30 s after the PING's answer, its last byte, not a PING cycle later."""
    left, right = memory_stream_pair()
    valve = Valve()
    settings = GrpcSettings()  # keepalive 10 s + 20 s
    client = H2Connection(left, client=True, settings=settings, label="client")
    server = H2Connection(
        ValveStream(right, valve), client=False, settings=settings, on_request=lambda _: None
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(server.run)
        await nursery.start(client.run)
        client.open_stream(client.client_headers("/x", {}, None))
        await client.flush()
        await trio.sleep(15.0)
        valve.freeze()
        await client.closed.wait()
        assert trio.current_time() == pytest.approx(40.0)
        assert client.failure is not None
        assert "keepalive PING" in str(client.failure)
        nursery.cancel_scope.cancel()


# ----------------------------------------------------------------------- connections


LIMIT_3 = ServerLimits(max_connections=3, idle_connection_timeout=None)
"""(No idle timeout: virtual time may jump past one while the env runs in its thread.)"""


async def _accepted(client: Hostile) -> None:
    """Wait until the server has accepted the connection (its SETTINGS arrived)."""
    await client.wait_for(lambda: client.frames() or None)


async def test_past_max_connections_the_longest_idle_connection_makes_room(
    backend: BackendName, clock: object, address: Where
) -> None:
    """Three connections say hello and do nothing; a fourth, real client gets in, and the
    first of them is closed (GOAWAY NO_ERROR)."""
    with within(20):
        async with (
            env_server(backend, address, limits=LIMIT_3) as where,
            contextlib.AsyncExitStack() as stack,
        ):
            idle = [await stack.enter_async_context(attacker(where)) for _ in range(3)]
            for client in idle:
                await _accepted(client)
            await assert_served(where, backend)
            await idle[0].closed.wait()
            goaway = idle[0].goaway()
            assert goaway is not None
            assert goaway.error_code == NO_ERROR
            assert "limit of 3 connections" in goaway.debug
            assert not idle[2].closed.is_set()


async def test_past_max_connections_with_every_connection_busy_a_new_one_is_closed(
    backend: BackendName, clock: object, address: Where
) -> None:
    with within(20):
        async with (
            health_server(backend, address("health"), LIMIT_3) as (server, first),
            contextlib.AsyncExitStack() as stack,
        ):
            busy = [first] + [
                await stack.enter_async_context(attacker(server.address)) for _ in range(2)
            ]
            for client in busy:
                await _open_watches(client, 1)
            async with attacker(server.address) as refused:
                await refused.closed.wait()
                assert refused.frames() == []
            assert not any(client.closed.is_set() for client in busy)


# ----------------------------------------------------------------------- strict headers


def _shutdown_request() -> bytes:
    return encode(env_v1.ShutdownRequest(base=core_v1.ShutdownRequest(reason="go")))


@pytest.mark.parametrize(
    "extra",
    [
        [("authorization", "wrong"), ("authorization", "good")],
        [("authorization", "good"), ("authorization", "wrong")],
        [("authorization", "good"), ("authorization", "good")],
        [("Authorization", "good")],
    ],
    ids=["wrong-then-right", "right-then-wrong", "twice-right", "upper-case"],
)
async def test_a_remote_shutdown_with_a_doubtful_authorization_is_unauthenticated(
    backend: BackendName, address: Where, extra: list[tuple[str, str]]
) -> None:
    with within(20):
        async with (
            env_server(backend, address, token="good", allow_remote_shutdown=True) as where,
            attacker(where) as client,
        ):
            sid, data = client.request(request_headers(ENV_SHUTDOWN, *extra), _shutdown_request())
            await client.send(data)
            answer = await client.wait_for(lambda: client.response(sid))
            assert answer["grpc-status"] == str(int(Status.UNAUTHENTICATED))
            assert "authorization" in answer["grpc-message"]
            # Still serving: the Shutdown did not get through.
            sid, data = client.request(
                request_headers(ENV_HANDSHAKE, ("authorization", "good")),
                encode(handshake_request()),
            )
            await client.send(data)
            assert (await client.wait_for(lambda: client.response(sid)))["grpc-status"] == "0"


@pytest.mark.parametrize(
    "extra",
    [
        [("content-type", "application/grpc")],
        [(":path", ENV_SHUTDOWN)],
        [("X-Custom", "1")],
    ],
    ids=["content-type-twice", "path-twice", "upper-case-name"],
)
async def test_malformed_request_headers_are_refused_before_any_handler(
    backend: BackendName, address: Where, extra: list[tuple[str, str]]
) -> None:
    with within(20):
        async with (
            env_server(backend, address, allow_remote_shutdown=True) as where,
            attacker(where) as client,
        ):
            sid, data = client.request(request_headers(ENV_SHUTDOWN, *extra), _shutdown_request())
            await client.send(data)
            answer = await client.wait_for(lambda: client.response(sid))
            assert answer["grpc-status"] == str(int(Status.INTERNAL))
            assert extra[0][0] in answer["grpc-message"]
            await assert_served(where, backend)


# ----------------------------------------------------------------------- memory


async def test_memory_after_floods_returns_to_where_it_was(
    backend: BackendName, clock: object, address: Where
) -> None:
    """Four rounds of a 4 MiB CONTINUATION flood and a 400-stream rapid reset, each on a
    fresh connection: the process's traced memory never grows by more than 1 MiB during
    the flood (h2 alone would buffer all of it), and the rounds leave nothing behind: memory
    after a later round comes back to within 256 KiB of where the first left it (a leak
    would raise every later round). grpclib's server runs in this process too (its loop
    thread), whose allocations come and go by megabytes between rounds. Each rapid reset
    comes from a host just cut off for its CONTINUATION flood, so it has a tenth of its
    budget: 4,000 resets per window make that the 400 it sends."""
    flood_frames = 64
    chunk = 64 * 1024
    tracemalloc.start()
    try:
        with within(60):
            limits = ServerLimits(resets_per_window=4000)
            async with env_server(backend, address, limits) as where:
                await assert_served(where, backend)
                after: list[int] = []
                for _ in range(4):
                    async with attacker(where) as bad:
                        # Built before the baseline: the attacker's own bytes do not count.
                        flood = bad.continuation_flood(ENV_HANDSHAKE, chunk, flood_frames)
                        gc.collect()
                        baseline = tracemalloc.get_traced_memory()[0]
                        tracemalloc.reset_peak()
                        for start in range(0, len(flood), chunk):
                            # A chunk at a time, read as it comes (a socket's buffer would
                            # hold back the rest; the memory transport would not).
                            if not await bad.send(flood[start : start + chunk]):
                                break
                            if backend == "trio":
                                await trio.testing.wait_all_tasks_blocked()
                        await bad.closed.wait()
                        peak = tracemalloc.get_traced_memory()[1] - baseline
                        assert peak < 1024 * 1024, f"{peak} bytes more during the flood"
                        del flood
                    async with attacker(where) as bad:
                        await bad.send(bad.rapid_reset(400, ENV_HANDSHAKE))
                        check, data = bad.request(request_headers(HEALTH_CHECK), b"")
                        await bad.send(data)  # answered once the resets are processed
                        await bad.wait_for(lambda c=check: bad.response(c))
                    await assert_served(where, backend)
                    if backend == "grpclib":
                        # A cut connection's transport lives until its abort timer fires.
                        await trio.sleep(GOAWAY_GRACE + 0.5)
                    gc.collect()
                    after.append(tracemalloc.get_traced_memory()[0])
                assert min(after[1:]) - after[0] < 256 * 1024, after
    finally:
        tracemalloc.stop()
