"""The driver's deadlines hold for hung user code in the in-process adapters.

With ``user_code="thread"`` an in-process env and model run their code on worker threads,
so a hung predict, step or reset fails at exactly its ``RuntimeLimits`` deadline, a cancel
while user code hangs returns at once with the finished episodes, and closing after a hang
does not wait for it. A model in ``"auto"`` mode (the adapter's default) keeps that promise
until its predicts have proved quick; a predict that then blocks the loop inline is refused
as late when it returns, as in inline mode. (Inline mode cannot promise more: see
``tests/runtime/test_inline_calls.py`` for what it does promise.)
"""

from __future__ import annotations

import functools
import threading
from typing import Any

import numpy as np
import pytest
import trio
from trio.testing import MockClock

from trio_rlmesh import OperationTimeout, RunLocalOptions, run_local
from trio_rlmesh.model import ModelHandler, as_handler
from trio_rlmesh.runtime import RuntimeDriver, RuntimeLimits

from ..._hang import Hang, hold_clock
from .test_gym_env import Countdown


class Policy:
    def __init__(self, hang: Hang | None = None) -> None:
        self.hang = hang

    def predict(self, observation: Any) -> Any:
        if self.hang is not None:
            self.hang.point()
        return np.int64(1)


class SlowAt(Policy):
    """Quick predicts, except predict ``at`` (1-based), which takes ``seconds`` of the
    run's MockClock on whatever thread runs it."""

    def __init__(self, hang: Hang, clock: MockClock, at: int, seconds: float) -> None:
        super().__init__()
        self.hang, self.clock, self.at, self.seconds = hang, clock, at, seconds
        self.threads: list[int] = []

    def predict(self, observation: Any) -> Any:
        self.threads.append(threading.get_ident())
        if len(self.threads) == self.at:
            self.hang.entered.set()  # the clock may move from now on
            self.clock.jump(self.seconds)
        return np.int64(1)


class HangingCountdown(Countdown):
    """Countdown whose ``reset`` or ``step`` passes through ``hang``."""

    def __init__(self, hang: Hang, where: str) -> None:
        super().__init__(3)
        self.hang = hang
        self.where = where
        self.closed = False

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        if self.where == "reset":
            self.hang.point()
        return super().reset(seed=seed, options=options)

    def step(self, action: Any) -> Any:
        if self.where == "step":
            self.hang.point()
        return super().step(action)

    def close(self) -> None:
        self.closed = True


def _options(env: Any, env_code: str = "thread", **limits: Any) -> RunLocalOptions:
    """A run of ``env`` in this process, its code where ``env_code`` says. (The model's
    place is its handler's own: :func:`as_handler`'s ``user_code``, which the run's
    ``user_code`` does not override.)"""
    return RunLocalOptions(
        env, max_episodes=10, close_env=True, user_code=env_code, limits=RuntimeLimits(**limits)
    )


async def _run_until_hung(hang: Hang, model: ModelHandler, options: RunLocalOptions) -> Exception:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(hold_clock, hang)
        with pytest.raises(Exception) as info:
            await run_local(model, options)
    assert isinstance(info.value, Exception)
    return info.value


@pytest.mark.parametrize("user_code", ["thread", None])
async def test_a_hung_predict_fails_at_exactly_the_predict_deadline(
    autojump_clock: MockClock, user_code: Any
) -> None:
    # None: the default "auto" runs a model's first predicts on its thread as well.
    with Hang(after=4) as hang:  # episode 1 takes predicts 1-3; predict 5 hangs
        model = as_handler(Policy(hang), user_code=user_code)
        options = _options(Countdown(3), "inline", model_predict_timeout=2)
        error = await _run_until_hung(hang, model, options)
        assert isinstance(error, OperationTimeout)
        assert (error.operation, error.timeout, error.step) == ("model.predict", 2, 4)
        assert "model.predict timed out after 2s" in str(error)
        assert trio.current_time() == 2
        assert error.report is not None
        assert [episode.steps for episode in error.report.episodes] == [3]


@pytest.mark.parametrize(
    ("where", "limit", "operation"),
    [("step", "env_step_timeout", "env.step"), ("reset", "env_reset_timeout", "env.reset")],
)
async def test_a_hung_env_call_fails_at_its_deadline_and_closing_does_not_wait_for_it(
    autojump_clock: MockClock, where: str, limit: str, operation: str
) -> None:
    with Hang(after=5) as hang:  # the 6th step or reset hangs
        user_env = HangingCountdown(hang, where)
        model = as_handler(Policy(), user_code="inline")
        options = _options(user_env, **{limit: 3, "service_close_timeout": 5})
        error = await _run_until_hung(hang, model, options)
        assert isinstance(error, OperationTimeout)
        assert error.operation == operation
        # Failed at the deadline, and closed at once: the close did not wait 5 s.
        assert trio.current_time() == 3
        assert error.report is not None
        (advisory,) = [a for a in error.report.advisories if a.startswith("env.close")]
        assert f"env.close cannot run: {operation} is still running" in advisory
        assert not user_env.closed


def _session(env: Any, model: ModelHandler) -> Any:
    """:func:`run_local` for ``nursery.start``, which hands back the driver."""
    return functools.partial(run_local, model, _options(env))


async def test_cancelling_the_callers_scope_while_user_code_hangs_returns_at_once(
    autojump_clock: MockClock,
) -> None:
    with Hang(after=7) as hang:  # two 3-step episodes take 6 predicts (+1 of the third)
        env = Countdown(3)
        model = as_handler(Policy(hang))
        with trio.move_on_after(50) as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(hold_clock, hang)
                driver: RuntimeDriver = await nursery.start(_session(env, model))
        assert scope.cancelled_caught
        assert trio.current_time() == 50
        report = driver.report
        assert report is not None
        assert report.status == "cancelled"
        assert [episode.steps for episode in report.episodes] == [3, 3]


async def test_driver_cancel_while_user_code_hangs_returns_the_report_at_once(
    autojump_clock: MockClock,
) -> None:
    with Hang(after=3) as hang:
        env = HangingCountdown(hang, "step")
        model = as_handler(Policy())
        async with trio.open_nursery() as nursery:
            nursery.start_soon(hold_clock, hang)
            driver: RuntimeDriver = await nursery.start(_session(env, model))
            await trio.sleep(7)  # the clock moves only once the step hangs
            driver.cancel("operator")
        assert trio.current_time() == 7
        report = driver.report
        assert report is not None
        assert (report.status, report.reason) == ("cancelled", "operator")
        assert [episode.steps for episode in report.episodes] == [3]


async def test_auto_refuses_a_late_inline_predict_as_inline_mode_does(
    autojump_clock: MockClock,
) -> None:
    # Predicts 1-8 run on the model's thread; from the 9th they run inline. Predict 10
    # blocks the loop for 3 s: no scope can cut it off, and its late answer fails the run.
    with Hang() as hang:
        policy = SlowAt(hang, autojump_clock, at=10, seconds=3)
        options = _options(Countdown(3), "inline", model_predict_timeout=2)
        error = await _run_until_hung(hang, as_handler(policy), options)
    here = threading.get_ident()
    assert [thread == here for thread in policy.threads] == [False] * 8 + [True] * 2
    assert isinstance(error, OperationTimeout)
    assert (error.operation, error.timeout) == ("model.predict", 2)
    assert trio.current_time() == 3
    assert error.report is not None
    assert [episode.steps for episode in error.report.episodes] == [3, 3, 3]
