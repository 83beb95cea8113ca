"""Misbehaving clients against serve_env; after each, the next client is served normally."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio
from grpclib.const import Status
from grpclib.exceptions import GRPCError, StreamTerminatedError

from tests.gates import ThreadGate
from trio_rlmesh.protocol import env_v1, spaces_v1

from .env_server_support import RawEnvClient, RawJoin, SlowEnv, raw_client, running_server
from .test_env_server import reset, step

pytestmark = pytest.mark.network

Code = env_v1.EnvErrorCode
LIMIT = 64 * 1024


@pytest.fixture
async def address() -> AsyncIterator[str]:
    async with running_server(SlowEnv(), max_message_size=LIMIT) as bound:
        yield bound


async def assert_served(address: str) -> None:
    """A fresh, well-behaved client gets a full session.

    The previous client's Join slot frees when its handler unwinds, which the server does
    not announce: a busy answer is retried until it is not (the callers' ``fail_after``
    bounds the wait; no number of attempts is assumed).
    """
    while True:
        async with raw_client(address) as client:
            assert (await client.handshake()).env_contract is not None
            try:
                async with client.join() as join:
                    assert (await join.call(reset("r", seeds=[1]))).reset is not None
                    stepped = await join.call(step("s", 1))
                    assert stepped.step is not None, stepped
                    return
            except GRPCError as exc:
                if exc.status is not Status.FAILED_PRECONDITION:
                    raise
        await trio.sleep(0.01)  # a poll interval, not a duration anything depends on


async def end_status(join: RawJoin) -> BaseException:
    """How the server ended ``join``: a GRPCError, or (when grpclib's client loses the status
    to the stream reset that follows it) a StreamTerminatedError."""
    try:
        await join.recv()
        await join.trailers()
    except (GRPCError, StreamTerminatedError) as exc:
        return exc
    raise AssertionError("the stream ended without an error")


async def refused_status(client: RawEnvClient) -> GRPCError:
    """The status of a Join the server refuses before reading any message."""
    async with client.join(half_closed=True) as join:
        failure = await end_status(join)
    assert isinstance(failure, GRPCError), failure
    return failure


async def test_malformed_frame(address: str) -> None:
    with trio.fail_after(20):
        async with raw_client(address) as client, client.join() as join:
            # Half-close with the frame, so the error status is not raced by a stream reset.
            await join.send(b"\x0a\xff\xff\xff\xff\x0f garbage", end=True)
            failure = await end_status(join)
            if isinstance(failure, GRPCError):
                assert failure.status is Status.INTERNAL
        await assert_served(address)


async def test_unknown_oneof_arm_is_unsupported_and_recoverable(address: str) -> None:
    with trio.fail_after(20):
        async with raw_client(address) as client, client.join() as join:
            # Field 9 (a message) is no arm this build knows; request_id 5 = "x".
            await join.send(b"\x4a\x00\x2a\x01x")
            response = await join.recv()
            assert response is not None
            assert response.request_id == "x"
            assert response.error is not None
            assert response.error.code == Code.UNSUPPORTED
            assert response.error.is_recoverable
            # The stream goes on.
            assert (await join.call(reset("r"))).reset is not None
        await assert_served(address)


async def test_step_before_reset(address: str) -> None:
    with trio.fail_after(20):
        async with raw_client(address) as client, client.join() as join:
            response = await join.call(step("s", 1))
            assert response.error is not None
            assert response.error.code == Code.NOT_READY
            assert response.error.is_recoverable
        await assert_served(address)


async def test_wrong_leaf_count(address: str) -> None:
    with trio.fail_after(20):
        async with raw_client(address) as client, client.join() as join:
            await join.call(reset("r"))
            for action in (
                spaces_v1.SpaceValue(leaves=[b"\x01" + b"\x00" * 7, b"\x00" * 8]),
                spaces_v1.SpaceValue(leaves=[b"\x01"]),
                None,
            ):
                response = await join.call(
                    env_v1.JoinRequest(request_id="s", step=env_v1.StepRequest(action=action))
                )
                assert response.error is not None, action
                assert response.error.code == Code.INVALID_ACTION
                assert response.error.is_recoverable
            assert (await join.call(step("ok", 0))).step is not None
        await assert_served(address)


async def test_oversized_message(address: str) -> None:
    with trio.fail_after(20):
        async with raw_client(address) as client, client.join() as join:
            big = env_v1.JoinRequest(
                request_id="big",
                step=env_v1.StepRequest(action=spaces_v1.SpaceValue(leaves=[b"\x00" * 2 * LIMIT])),
            )
            await join.send(big, end=True)
            failure = await end_status(join)
            if isinstance(failure, GRPCError):
                assert failure.status is Status.RESOURCE_EXHAUSTED
        await assert_served(address)


async def test_second_concurrent_join(address: str) -> None:
    with trio.fail_after(20):
        async with raw_client(address) as first, first.join() as join:
            assert (await join.call(reset("r"))).reset is not None
            async with raw_client(address) as second:
                refused = await refused_status(second)
                assert refused.status is Status.FAILED_PRECONDITION
                assert "only one client may be connected at a time" in str(refused.message)
            assert (await join.call(step("s", 1))).step is not None
        await assert_served(address)


async def test_client_vanishes_mid_step() -> None:
    gate = ThreadGate()
    with trio.fail_after(20), gate:
        async with running_server(SlowEnv(gate=gate)) as address, raw_client(address) as client:
            async with client.join() as join:
                await join.call(reset("r"))
                await join.send(step("s", 1))
                await gate.entered()
            # Stream reset and connection closed while the env is still stepping; the step
            # then finishes with nobody to answer.
            gate.open()
            await assert_served(address)


async def test_wrong_token() -> None:
    with trio.fail_after(20):
        async with running_server(SlowEnv(), token="good") as address:
            async with raw_client(address, "bad") as client:
                refused = await refused_status(client)
                assert refused.status is Status.UNAUTHENTICATED
                assert refused.message == "invalid env token"
                with pytest.raises(GRPCError):
                    await client.shutdown()
            async with raw_client(address, "good") as client, client.join() as join:
                assert (await join.call(reset("r"))).reset is not None
