"""Stopping ``serve_env`` (each backend) with clients connected: every open call ends with a
status (UNAVAILABLE "... shutting down", never a bare reset), clients hear it at once, and
the stop is bounded by ``drain_timeout`` even when env code is stuck.

On trio the times are exact virtual times (autojump clock); on grpclib they are real and
checked against bounds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import trio
import trio.testing

import trio_rlmesh
from trio_rlmesh import RunLocalOptions, TransportError
from trio_rlmesh.protocol import env_v1, spaces_v1
from trio_rlmesh.runtime import RuntimeHooks, RuntimeLimits
from trio_rlmesh.transports.grpc import BackendName, open_env_client, serve_env
from trio_rlmesh.transports.grpc._handshake import HEALTH_WATCH
from trio_rlmesh.transports.grpc._health import HealthCheckRequest, HealthCheckResponse
from trio_rlmesh.transports.grpc._status import Status

from .servers import Gate, Served, ToyEnv, env_join, reset, serving, step, within
from .wire import expect_status, open_raw_client

Where = Callable[[str], str]

AUTOJUMP_THRESHOLD = 0.2
SHUTTING_DOWN = (Status.UNAVAILABLE, "the server is shutting down")
SLACK = 1.0
"""Real seconds (grpclib) a stop or a client's failure may take beyond its due time."""


def took(clock: object, start: float | None, expected: float) -> bool:
    """Exactly ``expected`` virtual seconds since ``start``, or (real clock) not much more."""
    assert start is not None
    elapsed = trio.current_time() - start
    if clock is not None:
        return elapsed == pytest.approx(expected, abs=1e-6)
    return elapsed < expected + SLACK


def cartpole_step() -> env_v1.StepRequest:
    leaf = np.asarray([1], dtype="<i8").tobytes()
    return env_v1.StepRequest(action=spaces_v1.SpaceValue(leaves=[leaf]))


async def test_an_idle_join_ends_with_unavailable(
    backend: BackendName, clock: object, address: Where
) -> None:
    with within(20):
        async with (
            serving(serve_env, ToyEnv(), address("env"), drain_timeout=2.0, backend=backend) as s,
            open_raw_client(s.address) as raw,
            env_join(raw) as join,
        ):
            await join.call(reset("r"))
            s.stop()
            assert await expect_status(join.raw) == SHUTTING_DOWN
            assert took(clock, s.stopped_at, 0.0)
            assert await s.wait_returned() < (1e-6 if clock is not None else SLACK)


async def test_idle_client_gets_a_prompt_recoverable_transport_error(
    backend: BackendName, clock: object, address: Where
) -> None:
    with within(20):
        async with (
            serving(
                serve_env,
                gym.make("CartPole-v1"),
                address("env"),
                drain_timeout=2.0,
                backend=backend,
            ) as s,
            open_env_client(s.address, request_timeout=30, backend=backend) as env,
        ):
            await env.reset(env_v1.ResetRequest(seeds=[0]))
            await env.step(cartpole_step())
            s.stop()
            await s.returned.wait()
            assert took(clock, s.stopped_at, 0.0)
            with pytest.raises(TransportError, match="shutting down") as info:
                await env.step(cartpole_step())
            assert took(clock, s.stopped_at, 0.0)
    assert info.value.code == "UNAVAILABLE"
    assert info.value.recoverable


async def test_client_mid_step_is_answered_within_the_drain_then_refused(
    backend: BackendName, clock: object, address: Where
) -> None:
    gate = Gate()
    with within(20):
        async with (
            serving(
                serve_env, ToyEnv(gate=gate), address("env"), drain_timeout=5.0, backend=backend
            ) as s,
            open_env_client(s.address, request_timeout=30, backend=backend) as env,
        ):
            await env.reset()
            answers: list[Any] = []

            async def one_step() -> None:
                answers.append(await env.step(cartpole_step()))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(one_step)
                await gate.entered.wait()
                s.stop()
                await trio.testing.wait_all_tasks_blocked()  # the server is draining now
                assert not s.returned.is_set()
                gate.release()
            # The step in progress got its answer; then the server stopped.
            assert len(answers) == 1
            await s.returned.wait()
            with pytest.raises(TransportError, match="shutting down"):
                await env.step(cartpole_step())


async def test_client_mid_step_past_the_drain_gets_a_prompt_status(
    backend: BackendName, clock: object, address: Where
) -> None:
    drain = 0.3
    gate = Gate()
    try:
        with within(20):
            async with (
                serving(
                    serve_env,
                    ToyEnv(gate=gate),
                    address("env"),
                    drain_timeout=drain,
                    backend=backend,
                ) as s,
                open_raw_client(s.address) as raw,
                env_join(raw) as join,
            ):
                await join.call(reset("r"))
                await join.send(step("stuck", 1))
                await gate.entered.wait()
                s.stop()
                # The env stays stuck: at the end of the drain the call ends with a status,
                # and the server returns (the stuck worker is abandoned).
                assert await expect_status(join.raw) == SHUTTING_DOWN
                assert took(clock, s.stopped_at, drain)
                await s.returned.wait()
                assert took(clock, s.stopped_at, drain)
    finally:
        gate.release()


async def test_stop_is_bounded_with_an_open_health_watch(
    backend: BackendName, clock: object, address: Where
) -> None:
    """A stream that never ends by itself does not hold the server up, and it too ends
    with a status."""
    with within(20):
        async with (
            serving(serve_env, ToyEnv(), address("env"), drain_timeout=0.5, backend=backend) as s,
            open_raw_client(s.address) as raw,
        ):
            watch = await raw.open(HEALTH_WATCH)
            await watch.send(HealthCheckRequest("").SerializeToString(), end=True)
            first = await watch.receive_bytes()
            assert first is not None
            assert HealthCheckResponse.FromString(first).status == 1
            s.stop()
            assert await expect_status(watch) == SHUTTING_DOWN
            await s.returned.wait()
            assert took(clock, s.stopped_at, 0.0)


class _StopAt(RuntimeHooks):
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


async def test_run_local_ends_with_transport_error_when_the_server_stops(
    backend: BackendName, clock: object, address: Where
) -> None:
    with within(20):
        async with serving(
            serve_env, gym.make("CartPole-v1"), address("env"), backend=backend
        ) as s:
            options = RunLocalOptions(
                s.address, max_episodes=1000, limits=RuntimeLimits(env_step_timeout=2)
            )
            with pytest.raises(TransportError, match="shutting down"):
                await trio_rlmesh.run_local(_Zero(), options, hooks=_StopAt(7, s))
            assert took(clock, s.stopped_at, 0.0)
            await s.returned.wait()
            assert took(clock, s.stopped_at, 0.0)
