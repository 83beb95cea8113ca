"""Endpoints whose calls do not yield (``runs_inline``), as the in-process adapters' are.

The driver asks ``runs_inline`` before each call and skips its cancel scope for a call that
will not yield. Deadlines keep their meaning either way: such a call that comes back after
its bound is a timeout, and any other call is cut off exactly at it.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
from trio.testing import MockClock

from trio_rlmesh import OperationTimeout
from trio_rlmesh.protocol import env_v1
from trio_rlmesh.runtime._interfaces import EnvResetResult, EnvStepResult
from trio_rlmesh.testing import FakeEnv, FakeModel

from ._support import driver, row


class InlineEnv(FakeEnv):
    """A FakeEnv that says its calls do not yield (true without delays), unless told not to."""

    def __init__(self, clock: MockClock | None = None, **kw: Any) -> None:
        super().__init__(**kw)
        self.clock = clock
        self.decline = False
        self.slow_step: float = 0.0
        self.inline_calls = 0
        self.awaited_calls = 0
        self._announced = False

    def runs_inline(self, method: str) -> bool:
        self._announced = not self.decline
        return self._announced

    def _count(self) -> None:
        if self._announced:
            self.inline_calls += 1
        else:
            self.awaited_calls += 1
        self._announced = False

    async def reset(self, request: env_v1.ResetRequest) -> EnvResetResult:
        self._count()
        return await super().reset(request)

    async def step(self, request: env_v1.StepRequest) -> EnvStepResult:
        self._count()
        if self.slow_step and self.clock is not None:
            self.clock.jump(self.slow_step)  # a step that blocks the loop this long
        return await super().step(request)


class InlineModel(FakeModel):
    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.inline_calls = 0

    def runs_inline(self, method: str) -> bool:
        self.inline_calls += 1
        return True


async def test_calls_announced_inline_leave_the_report_unchanged(
    autojump_clock: MockClock,
) -> None:
    plain = await driver(FakeEnv(episode_length=3), FakeModel(), max_episodes=2).run()
    env, model = InlineEnv(episode_length=3), InlineModel()
    report = await driver(env, model, max_episodes=2).run()
    assert env.awaited_calls == 0
    assert env.inline_calls == 2 + 6  # two resets, six steps
    assert model.inline_calls == 6
    assert [(e.steps, e.reward, e.terminated) for e in report.episodes] == [
        (e.steps, e.reward, e.terminated) for e in plain.episodes
    ]
    assert [(r.op, r.metric, r.count) for r in report.telemetry] == [
        (r.op, r.metric, r.count) for r in plain.telemetry
    ]


async def test_a_call_not_announced_inline_is_awaited_under_a_scope(
    autojump_clock: MockClock,
) -> None:
    env = InlineEnv(episode_length=2)
    env.decline = True
    report = await driver(env, InlineModel()).run()
    assert report.status == "completed"
    assert (env.inline_calls, env.awaited_calls) == (0, 3)


async def test_a_late_inline_answer_is_a_timeout(autojump_clock: MockClock) -> None:
    env = InlineEnv(autojump_clock, episode_length=5)
    env.slow_step = 0.5
    with pytest.raises(OperationTimeout) as info:
        await driver(env, InlineModel(), limits={"env_step_timeout": 0.25}).run()
    error = info.value
    assert (error.operation, error.step, error.timeout) == ("env.step", 1, 0.25)
    assert "env.step timed out after 250ms" in str(error)
    assert trio.current_time() == 0.5


async def test_an_inline_answer_exactly_at_the_bound_is_in_time(autojump_clock: MockClock) -> None:
    env = InlineEnv(autojump_clock, episode_length=2)
    env.slow_step = 0.25
    report = await driver(env, InlineModel(), limits={"env_step_timeout": 0.25}).run()
    assert report.status == "completed"


async def test_a_call_not_announced_inline_keeps_its_exact_deadline(
    autojump_clock: MockClock,
) -> None:
    env = InlineEnv(episode_length=5, delays={"env.step": 10.0})
    env.decline = True
    with pytest.raises(OperationTimeout):
        await driver(env, InlineModel(), limits={"env_step_timeout": 0.25}).run()
    assert trio.current_time() == 0.25


async def test_long_runs_keep_every_telemetry_sample(autojump_clock: MockClock) -> None:
    # More rounds than the driver's fold period: samples recorded through its sinks
    # before and after each fold must all be counted.
    env, model = InlineEnv(episode_length=700), InlineModel()
    report = await driver(env, model, max_episodes=2).run()
    assert report.total_steps == 1400
    assert row(report, "env.step").count == 1400
    assert row(report, "runner.round").count == 1400
    assert row(report, "model.predict").count == 1400
    assert row(report, "env.step", "endpoint.total").count == 1400
