"""Cancellation at every phase, and deadlines that fire exactly at their bound."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from trio.testing import MockClock

from trio_rlmesh import OperationTimeout
from trio_rlmesh.protocol import env_v1
from trio_rlmesh.runtime import EnvResetResult, EnvStepResult, RuntimeReport
from trio_rlmesh.testing import FakeEnv, FakeModel, Fault

from ._support import Recorder, driver

# Each phase: (env kwargs, model kwargs, completed episodes before the hang).
PHASES: dict[str, tuple[dict[str, Any], dict[str, Any], int]] = {
    "reset": ({"faults": [Fault("env.reset", at=2, kind="hang")]}, {}, 1),
    "cold-reset": ({"faults": [Fault("env.reset", at=1, kind="hang")]}, {}, 0),
    "predict": ({}, {"faults": [Fault("model.predict", at=3, kind="hang")]}, 1),
    "step": ({"faults": [Fault("env.step", at=4, kind="hang")]}, {}, 1),
}


def living_tasks() -> int:
    return trio.lowlevel.current_statistics().tasks_living


def check_consistent(report: RuntimeReport, env: FakeEnv, model: FakeModel, done: int) -> None:
    assert report.status == "cancelled"
    assert report.total_episodes == done
    assert all(e.steps == 2 for e in report.episodes)
    # Cleanup ran: release always, close because the run owns the env.
    assert model.released
    assert env.closed


@pytest.mark.parametrize("phase", sorted(PHASES))
async def test_caller_cancel_scope_wins_at_every_phase(
    phase: str, autojump_clock: MockClock
) -> None:
    env_kw, model_kw, done = PHASES[phase]
    env, model = FakeEnv(episode_length=2, **env_kw), FakeModel(**model_kw)
    hooks = Recorder()
    d = driver(env, model, hooks, max_episodes=5, close_env_on_end=True)
    before = living_tasks()
    with trio.move_on_after(10) as scope:
        await d.run()
    assert scope.cancelled_caught
    assert trio.current_time() == 10
    assert living_tasks() == before
    assert d.report is not None
    check_consistent(d.report, env, model, done)
    assert d.report.reason == "cancelled by the caller's cancel scope"
    (failed,) = hooks.of("session_failed")
    assert failed.error is None
    assert hooks.names()[-2:] == ["on_telemetry", "session_failed"] or hooks.names()[-1] == (
        "session_failed"
    )


@pytest.mark.parametrize("phase", sorted(PHASES))
async def test_driver_cancel_returns_a_cancelled_report_at_every_phase(
    phase: str, autojump_clock: MockClock
) -> None:
    env_kw, model_kw, done = PHASES[phase]
    env, model = FakeEnv(episode_length=2, **env_kw), FakeModel(**model_kw)
    hooks = Recorder()
    d = driver(env, model, hooks, max_episodes=5, close_env_on_end=True)
    before = living_tasks()
    report: RuntimeReport | None = None

    async def runner() -> None:
        nonlocal report
        report = await d.run()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(runner)
        await trio.sleep(3)
        d.cancel("operator requested shutdown")
    assert trio.current_time() == 3
    assert living_tasks() == before
    assert report is not None
    assert report is d.report
    check_consistent(report, env, model, done)
    assert report.reason == "operator requested shutdown"
    assert model.releases[0].reason == "operator requested shutdown"
    (ended,) = hooks.of("session_ended")
    assert (ended.status, ended.reason, ended.total_episodes) == (
        "cancelled",
        "operator requested shutdown",
        done,
    )
    assert hooks.of("session_failed") == []


async def test_cancel_before_run_starts(autojump_clock: MockClock) -> None:
    env, model = FakeEnv(), FakeModel()
    d = driver(env, model)
    d.cancel()
    report = await d.run()
    assert (report.status, report.reason, report.total_steps) == (
        "cancelled",
        "cancelled by caller",
        0,
    )
    assert "sibling" not in (report.reason or "")
    assert model.released


async def test_cancel_an_endless_run_with_instant_endpoints(autojump_clock: MockClock) -> None:
    # max_episodes=None never ends on its own; endpoints that never block must not starve
    # the task that cancels.
    env, model = FakeEnv(episode_length=3), FakeModel()
    d = driver(env, model, max_episodes=None)
    report: RuntimeReport | None = None

    async def runner() -> None:
        nonlocal report
        report = await d.run()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(runner)
        for _ in range(50):
            await trio.lowlevel.checkpoint()
        d.cancel("enough")
    assert report is not None
    assert report.status == "cancelled"
    assert report.total_steps > 0
    assert report.total_episodes == report.total_steps // 3


async def test_hung_close_is_bounded_even_when_the_caller_cancels(
    autojump_clock: MockClock,
) -> None:
    env = FakeEnv(episode_length=1, faults=[Fault("env.close", kind="hang")])
    model = FakeModel()
    d = driver(env, model, close_env_on_end=True)
    with trio.move_on_after(1):
        report = await d.run()
    # Shutdown is shielded and bounded by service_close_timeout (5 s).
    assert trio.current_time() == 5
    assert report.status == "completed"
    assert any("env.close failed" in a for a in report.advisories)
    assert model.released


async def test_an_env_that_enforces_deadlines_bounds_its_own_close(
    autojump_clock: MockClock,
) -> None:
    # One bound: the env's own close(timeout) (the gRPC client's), no driver scope over it.
    env = FakeEnv(episode_length=1, delays={"env.close": 7.0})
    env.enforces_deadlines = True
    report = await driver(env, FakeModel(), close_env_on_end=True).run()
    assert trio.current_time() == 7.0
    assert env.closed
    assert not any("env.close" in a for a in report.advisories)


@pytest.mark.parametrize(
    ("fault", "limit", "bound", "lane"),
    [
        (Fault("env.reset", kind="hang"), "env_reset_timeout", 2.0, 0),
        (Fault("env.step", kind="hang"), "env_step_timeout", 0.25, 0),
        (Fault("model.predict", kind="hang"), "model_predict_timeout", 0.005, 0),
    ],
)
async def test_deadlines_fire_exactly_at_their_bound(
    fault: Fault, limit: str, bound: float, lane: int, autojump_clock: MockClock
) -> None:
    env_faults = [fault] if fault.op.startswith("env") else []
    model_faults = [fault] if fault.op.startswith("model") else []
    env, model = FakeEnv(faults=env_faults), FakeModel(faults=model_faults)
    hooks = Recorder()
    d = driver(env, model, hooks, limits={limit: bound})
    with pytest.raises(OperationTimeout) as info:
        await d.run()
    error = info.value
    assert trio.current_time() == bound
    assert isinstance(error, TimeoutError)
    assert (error.operation, error.lane, error.timeout) == (fault.op, lane, bound)
    assert error.step == (1 if fault.op == "env.step" else 0)
    assert f"RuntimeLimits.{limit}" in str(error)
    assert error.report is not None
    assert error.report.status == "failed"
    assert len(hooks.of("session_failed")) == 1
    telemetry = hooks.of("on_telemetry")
    assert [t.horizon for t in telemetry] == ["session"]
    assert model.released


async def test_predict_timeout_message_names_the_route(autojump_clock: MockClock) -> None:
    model = FakeModel(delays={"model.predict": 0.05})
    with pytest.raises(
        OperationTimeout, match=r"model.predict timed out after 5ms on route fake-env"
    ):
        await driver(FakeEnv(), model, limits={"model_predict_timeout": 0.005}).run()


async def test_no_deadline_means_none(autojump_clock: MockClock) -> None:
    model = FakeModel(delays={"model.predict": 10_000.0})
    report = await driver(
        FakeEnv(episode_length=1), model, limits={"model_predict_timeout": None}
    ).run()
    assert report.status == "completed"
    assert trio.current_time() == 10_000.0


class SelfTimedEnv(FakeEnv):
    """Ends each call by its deadline itself, as the gRPC env client does on its own I/O.

    The deadline is the request's ``timeout_ms`` from the call's start and covers the whole
    call, the answer's trip back (``latency`` seconds) included; past it the env raises its
    own :class:`OperationTimeout` (``code="TIMEOUT"``).
    """

    enforces_deadlines = True

    def __init__(self, *, latency: float = 0.125, **kw: Any) -> None:
        super().__init__(**kw)
        self.latency = latency
        self.raised: list[OperationTimeout] = []

    async def _timed(self, op: str, timeout_ms: int, call: Any) -> Any:
        with trio.move_on_after(timeout_ms / 1000) as scope:
            result = await call
            await trio.sleep(self.latency)
            return result
        assert scope.cancelled_caught
        error = OperationTimeout(
            f"{op} on the env timed out after {timeout_ms}ms",
            code="TIMEOUT",
            timeout=timeout_ms / 1000,
        )
        self.raised.append(error)
        raise error

    async def reset(self, request: env_v1.ResetRequest) -> EnvResetResult:
        result: EnvResetResult = await self._timed(
            "env.reset", request.timeout_ms, super().reset(request)
        )
        return result

    async def step(self, request: env_v1.StepRequest) -> EnvStepResult:
        result: EnvStepResult = await self._timed(
            "env.step", request.timeout_ms, super().step(request)
        )
        return result


@pytest.mark.parametrize(
    ("op", "limit", "bound", "answered_at"),
    [
        ("env.reset", "env_reset_timeout", 2.0, 2.0),
        # The reset's answer took 0.125 s to come back before the step was sent.
        ("env.step", "env_step_timeout", 0.25, 0.375),
    ],
)
async def test_an_env_that_enforces_deadlines_answers_its_own_timeout(
    op: str, limit: str, bound: float, answered_at: float, autojump_clock: MockClock
) -> None:
    env = SelfTimedEnv(faults=[Fault(op, kind="hang")])
    with pytest.raises(OperationTimeout) as info:
        await driver(env, FakeModel(), limits={limit: bound}).run()
    # The env's own error at the deadline, the driver's context filled in.
    (raised,) = env.raised
    assert info.value is raised
    assert info.value.code == "TIMEOUT"
    assert trio.current_time() == answered_at
    assert (info.value.operation, info.value.lane) == (op, 0)
    assert info.value.step == (1 if op == "env.step" else 0)
    assert info.value.report is not None
    assert info.value.report.status == "failed"


async def test_the_driver_stacks_no_scope_over_an_env_that_enforces_deadlines(
    autojump_clock: MockClock,
) -> None:
    # The endpoint is the one enforcer: an answer it gives past the limit is its business
    # (a driver scope there would be a second timer racing the endpoint's own).
    env = FakeEnv(episode_length=1, delays={"env.step": 5.0})
    env.enforces_deadlines = True
    report = await driver(env, FakeModel(), limits={"env_step_timeout": 0.25}).run()
    assert report.status == "completed"
    assert trio.current_time() == 5.0
