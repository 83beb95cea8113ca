"""Stopping ``serve_env`` with clients connected: the clients hear about it at once, and the
stop itself is bounded by ``drain_timeout`` (Python 3.12.1+ asyncio waits for open
connections when a server closes, so an unclosed connection would hang the stop)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import attrs
import gymnasium as gym
import numpy as np
import pytest
import trio
from grpclib.const import Cardinality

import trio_rlmesh
from trio_rlmesh import RunLocalOptions, TransportError
from trio_rlmesh.protocol import env_v1, spaces_v1
from trio_rlmesh.runtime import RuntimeHooks, RuntimeLimits
from trio_rlmesh.transports.grpc._common import HEALTH_WATCH
from trio_rlmesh.transports.grpc._env_client import open_env_client
from trio_rlmesh.transports.grpc._env_server import serve_env
from trio_rlmesh.transports.grpc._health import HealthCheckRequest, HealthCheckResponse

from .env_server_support import SlowEnv, raw_client

pytestmark = pytest.mark.network

PROMPT = 1.0
"""Seconds within which a client must learn that the server went away."""
SLACK = 1.0
"""Seconds ``serve_env`` may take beyond ``drain_timeout`` to return."""


@attrs.define(eq=False)
class Served:
    """A ``serve_env`` running in its own cancel scope, so a test can stop just the server."""

    address: str
    scope: trio.CancelScope
    returned: trio.Event = attrs.field(factory=trio.Event)
    cancelled_at: float = 0.0
    returned_at: float = 0.0

    def stop(self) -> None:
        self.cancelled_at = time.monotonic()
        self.scope.cancel()

    async def wait_returned(self) -> float:
        """Seconds from :meth:`stop` until ``serve_env`` returned."""
        await self.returned.wait()
        return self.returned_at - self.cancelled_at


@asynccontextmanager
async def serving(env: Any, **kwargs: Any) -> AsyncIterator[Served]:
    async with trio.open_nursery() as nursery:
        scope = trio.CancelScope()
        holder: list[Served] = []

        async def run(task_status: trio.TaskStatus[str]) -> None:
            with scope:
                await serve_env(env, task_status=task_status, **kwargs)
            holder[0].returned_at = time.monotonic()
            holder[0].returned.set()

        address: str = await nursery.start(run)
        holder.append(Served(address, scope))
        try:
            yield holder[0]
        finally:
            scope.cancel()


def cartpole_step() -> env_v1.StepRequest:
    leaf = np.asarray([1], dtype="<i8").tobytes()
    return env_v1.StepRequest(action=spaces_v1.SpaceValue(leaves=[leaf]))


async def seconds_until_failure(call: Callable[[], Any]) -> float:
    started = time.monotonic()
    with pytest.raises(TransportError):
        await call()
    return time.monotonic() - started


async def test_idle_client_gets_a_prompt_transport_error() -> None:
    with trio.fail_after(15):
        async with (
            serving(gym.make("CartPole-v1"), drain_timeout=2.0) as served,
            open_env_client(served.address, request_timeout=30) as env,
        ):
            await env.reset(env_v1.ResetRequest(seeds=[0]))
            await env.step(cartpole_step())
            served.stop()
            assert await served.wait_returned() < SLACK
            assert await seconds_until_failure(lambda: env.step(cartpole_step())) < PROMPT


async def test_client_mid_step_is_answered_then_refused() -> None:
    """The step in progress finishes inside the drain; the next request fails at once."""
    with trio.fail_after(15):
        async with (
            serving(SlowEnv(delay=0.5), drain_timeout=5.0) as served,
            open_env_client(served.address, request_timeout=30) as env,
        ):
            await env.reset()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(env.step, cartpole_step())
                await trio.sleep(0.1)
                served.stop()
            # The in-flight step got its answer (the nursery did not raise).
            assert await served.wait_returned() < 0.5 + SLACK
            assert await seconds_until_failure(lambda: env.step(cartpole_step())) < PROMPT


async def test_client_mid_step_past_the_drain_gets_a_prompt_transport_error() -> None:
    drain = 0.3
    with trio.fail_after(15):
        async with (
            serving(SlowEnv(delay=2.0), drain_timeout=drain) as served,
            open_env_client(served.address, request_timeout=30) as env,
        ):
            await env.reset()
            failed_after: list[float] = []

            async def step() -> None:
                failed_after.append(await seconds_until_failure(lambda: env.step(cartpole_step())))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(step)
                await trio.sleep(0.1)
                served.stop()
            assert await served.wait_returned() < drain + SLACK
            assert failed_after[0] < 0.1 + drain + PROMPT


async def test_stop_is_bounded_with_an_open_health_watch() -> None:
    """A client holding a stream that never ends by itself does not hold the server up."""
    with trio.fail_after(15):
        async with (
            serving(gym.make("CartPole-v1"), drain_timeout=0.5) as served,
            raw_client(served.address) as client,
        ):

            async def open_watch() -> tuple[Any, HealthCheckResponse]:
                stream = client.channel.request(
                    HEALTH_WATCH, Cardinality.UNARY_STREAM, HealthCheckRequest, HealthCheckResponse
                )
                await stream.__aenter__()
                await stream.send_message(HealthCheckRequest(""), end=True)
                first = await stream.recv_message()
                assert first is not None
                return stream, first

            async def rest(stream: Any) -> str:
                try:
                    await stream.recv_message()
                except Exception as exc:  # the connection went away
                    return type(exc).__name__
                finally:
                    with contextlib.suppress(Exception):
                        await stream.__aexit__(None, None, None)
                return "ended"

            stream, first = await client.portal.run(open_watch)
            assert first.status == 1
            served.stop()
            assert await served.wait_returned() < SLACK
            started = time.monotonic()
            await client.portal.run(rest, stream)
            assert time.monotonic() - started < PROMPT


class _CancelAt(RuntimeHooks):
    def __init__(self, step: int, served: Served) -> None:
        self.step = step
        self.served = served
        self.steps = 0

    async def step_completed(self, event: Any) -> None:
        self.steps += 1
        if self.steps == self.step:
            self.served.stop()


class _Zero:
    def predict(self, observation: Any) -> Any:
        return 0


async def test_run_local_ends_with_transport_error_when_the_server_stops() -> None:
    with trio.fail_after(15):
        async with serving(gym.make("CartPole-v1")) as served:
            options = RunLocalOptions(
                served.address,
                max_episodes=1000,
                limits=RuntimeLimits(env_step_timeout=2),
            )
            with pytest.raises(TransportError):
                await trio_rlmesh.run_local(_Zero(), options, hooks=_CancelAt(7, served))
            assert time.monotonic() - served.cancelled_at < PROMPT
            assert await served.wait_returned() < SLACK
