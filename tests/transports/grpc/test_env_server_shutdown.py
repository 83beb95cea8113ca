"""Stopping ``serve_env`` with clients connected: the clients hear about it at once, and the
stop itself is bounded by ``drain_timeout`` (Python 3.12.1+ asyncio waits for open
connections when a server closes, so an unclosed connection would hang the stop).

Nothing here measures time. "At once" means: before anything that would otherwise end the
wait. The drain and request timeouts are set far beyond each test's ``fail_after`` guard, so
a stop that waited for the drain, or a client that only learned of the stop from its own
request timeout, fails the guard; envs that must still be stepping wait at a gate.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import attrs
import gymnasium as gym
import numpy as np
import pytest
import trio
import trio.testing
from grpclib.const import Cardinality

import trio_rlmesh
from tests.gates import ThreadGate
from trio_rlmesh import RunLocalOptions, TransportError
from trio_rlmesh.protocol import env_v1, spaces_v1
from trio_rlmesh.runtime import RuntimeHooks, RuntimeLimits
from trio_rlmesh.transports.grpc._common import HEALTH_WATCH
from trio_rlmesh.transports.grpc._env_client import open_env_client
from trio_rlmesh.transports.grpc._env_server import serve_env
from trio_rlmesh.transports.grpc._health import HealthCheckRequest, HealthCheckResponse

from .env_server_support import SlowEnv, raw_client

pytestmark = pytest.mark.network

GUARD = 15.0
"""Each test's ``fail_after``: the bound on everything that must happen "at once"."""
FOREVER = 3600.0
"""A drain or request timeout no test may wait for (far beyond ``GUARD``)."""


@attrs.define(eq=False)
class Served:
    """A ``serve_env`` running in its own cancel scope, so a test can stop just the server."""

    address: str
    scope: trio.CancelScope
    returned: trio.Event = attrs.field(factory=trio.Event)

    def stop(self) -> None:
        self.scope.cancel()


@asynccontextmanager
async def serving(env: Any, **kwargs: Any) -> AsyncIterator[Served]:
    async with trio.open_nursery() as nursery:
        scope = trio.CancelScope()
        holder: list[Served] = []

        async def run(task_status: trio.TaskStatus[str]) -> None:
            with scope:
                await serve_env(env, task_status=task_status, **kwargs)
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


async def fails(call: Callable[[], Any]) -> None:
    with pytest.raises(TransportError):
        await call()


async def test_idle_client_gets_a_prompt_transport_error() -> None:
    with trio.fail_after(GUARD):
        async with (
            serving(gym.make("CartPole-v1"), drain_timeout=FOREVER) as served,
            open_env_client(served.address, request_timeout=FOREVER) as env,
        ):
            await env.reset(env_v1.ResetRequest(seeds=[0]))
            await env.step(cartpole_step())
            served.stop()
            # Nothing in flight: the stop does not wait for the drain.
            await served.returned.wait()
            await fails(lambda: env.step(cartpole_step()))


async def test_client_mid_step_is_answered_then_refused() -> None:
    """The step in progress finishes inside the drain; the next request fails at once."""
    gate = ThreadGate()
    with trio.fail_after(GUARD), gate:
        async with (
            serving(SlowEnv(gate=gate), drain_timeout=FOREVER) as served,
            open_env_client(served.address, request_timeout=FOREVER) as env,
        ):
            await env.reset()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(env.step, cartpole_step())
                await gate.entered()
                served.stop()
                # The drain waits for the step in progress.
                await trio.testing.wait_all_tasks_blocked()
                assert not served.returned.is_set()
                gate.open()
            # The in-flight step got its answer (the nursery did not raise), then the drain
            # ended without waiting for its timeout.
            await served.returned.wait()
            await fails(lambda: env.step(cartpole_step()))


async def test_client_mid_step_past_the_drain_gets_a_prompt_transport_error() -> None:
    gate = ThreadGate()
    with trio.fail_after(GUARD), gate:
        async with (
            serving(SlowEnv(gate=gate), drain_timeout=0.3) as served,
            open_env_client(served.address, request_timeout=FOREVER) as env,
        ):
            await env.reset()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(fails, lambda: env.step(cartpole_step()))
                await gate.entered()
                served.stop()
            # The env is still inside its step (the gate is shut): the client heard at the
            # end of the drain, and serve_env returned without waiting for the step.
            await served.returned.wait()
            assert not gate.is_open


async def test_stop_is_bounded_with_an_open_health_watch() -> None:
    """A client holding a stream that never ends by itself does not hold the server up."""
    with trio.fail_after(GUARD):
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
            await served.returned.wait()
            # The watch ends with the server instead of waiting forever.
            await client.portal.run(rest, stream)


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
    with trio.fail_after(GUARD):
        async with serving(gym.make("CartPole-v1"), drain_timeout=FOREVER) as served:
            options = RunLocalOptions(
                served.address,
                max_episodes=1000,
                limits=RuntimeLimits(env_step_timeout=FOREVER),
            )
            # A TransportError, not the step timeout: the run heard of the stop itself.
            with pytest.raises(TransportError):
                await trio_rlmesh.run_local(_Zero(), options, hooks=_CancelAt(7, served))
            await served.returned.wait()
