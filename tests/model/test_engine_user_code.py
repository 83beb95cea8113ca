"""Where the engine runs the model's code: its own worker thread, inline, or "auto" (both)."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest
import trio
from trio.testing import MockClock

from trio_rlmesh import ModelError
from trio_rlmesh.model import Model, ModelEngine, ResolveOptions, as_handler

from .._hang import Hang, hold_clock, wait_until
from .helpers import BOX_ROUTE, observation


class Where(Model):
    """Records the thread of every call into the model."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def _note(self, name: str) -> None:
        self.calls.append((name, threading.get_ident()))

    def load(self) -> None:
        self._note("load")

    def predict(self, observation: Any) -> Any:
        self._note("predict")
        return observation

    def on_episode_end(self, episode_id: str) -> None:
        self._note("on_episode_end")

    def close(self) -> None:
        self._note("close")


def _engine(model: object, **kw: Any) -> ModelEngine:
    engine = as_handler(model, **kw)
    assert isinstance(engine, ModelEngine)
    return engine


async def _exercise(engine: ModelEngine) -> None:
    setup = engine.route_setup()
    await setup.resolve_adapter("e", BOX_ROUTE, ResolveOptions())
    (result,) = await engine.predict_grouped([observation("e", [1], ids=["ep"])])
    assert not isinstance(result, Exception), result
    await engine.reset_adapter("e", ["ep"])
    await engine.close()


@pytest.mark.parametrize("user_code", [None, "thread"])
async def test_every_call_into_the_model_starts_on_one_thread_of_its_own(
    user_code: str | None,
) -> None:
    # The default ("auto") too: its first calls run on the thread, as "thread" runs them all.
    model = Where()
    engine = _engine(model, user_code=user_code)
    assert engine.user_code == (user_code or "auto")
    assert model.calls == []  # load waits for the first call that needs the model
    await _exercise(engine)
    assert [name for name, _ in model.calls] == ["load", "predict", "on_episode_end", "close"]
    threads = {thread for _, thread in model.calls}
    assert len(threads) == 1
    assert threads != {threading.get_ident()}


async def test_inline_runs_every_call_on_the_trio_thread() -> None:
    model = Where()
    engine = _engine(model, user_code="inline")
    await _exercise(engine)
    assert [name for name, _ in model.calls] == ["load", "predict", "on_episode_end", "close"]
    assert {thread for _, thread in model.calls} == {threading.get_ident()}


def test_offload_is_the_older_spelling_of_user_code() -> None:
    assert _engine(Where(), offload=True).user_code == "thread"
    assert _engine(Where(), offload=False).user_code == "inline"
    assert _engine(Where(), offload=False, user_code="inline").user_code == "inline"
    with pytest.raises(ValueError, match="offload=False contradicts user_code='thread'"):
        as_handler(Where(), offload=False, user_code="thread")
    with pytest.raises(ValueError, match="user_code must be 'auto', 'thread' or 'inline'"):
        as_handler(Where(), user_code="gpu")  # type: ignore[arg-type]


@pytest.mark.parametrize("user_code", ["thread", "inline"])
async def test_a_failing_load_fails_every_call_once_and_is_not_retried(user_code: str) -> None:
    loads: list[int] = []

    class Broken(Model):
        def load(self) -> None:
            loads.append(1)
            raise OSError("weights missing")

        def predict(self, observation: Any) -> Any:
            return observation

    engine = _engine(Broken(), user_code=user_code)
    for _ in range(2):
        with pytest.raises(ModelError, match="failed to load: OSError: weights missing") as info:
            await engine.route_setup().resolve_adapter("e", BOX_ROUTE, ResolveOptions())
        assert info.value.operation == "model.load"
    with pytest.raises(ModelError, match="failed to load"):
        await engine.predict_grouped([observation("e", [1])])
    assert loads == [1]


async def test_concurrent_first_calls_load_the_model_once() -> None:
    loads: list[int] = []

    class Slow(Model):
        def load(self) -> None:
            loads.append(1)

        def predict(self, observation: Any) -> Any:
            return observation

    engine = _engine(Slow())
    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(engine.predict_grouped, [observation("e", [1])])
    assert loads == [1]


class Hangs(Model):
    def __init__(self, hang: Hang) -> None:
        self.hang = hang
        self.closed = False

    def predict(self, observation: Any) -> Any:
        self.hang.point()
        return observation

    def close(self) -> None:
        self.closed = True


async def test_a_hung_predict_is_abandoned_at_the_deadline_and_the_model_refuses_calls(
    autojump_clock: MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    with Hang(after=1) as hang:
        model = Hangs(hang)
        engine = _engine(model)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(hold_clock, hang)
            await engine.predict_grouped([observation("e", [1])])  # the first one returns
            with pytest.raises(trio.TooSlowError), trio.fail_after(2):
                await engine.predict_grouped([observation("e", [2])])
        assert trio.current_time() == 2
        with pytest.raises(ModelError) as info:
            await engine.predict_grouped([observation("e", [3])])
        error = info.value
        assert (error.code, error.operation, error.recoverable) == ("BUSY", "model.predict", False)
        assert "model.predict cannot run: model.predict is still running" in error.message
        # Closing does not wait for the hung predict; it skips the model's close and says so.
        with caplog.at_level(logging.WARNING, logger="trio_rlmesh.model"):
            await engine.close()
        assert trio.current_time() == 2
        assert not model.closed
        assert "model.close cannot run: model.predict is still running" in caplog.text
        assert "its close() was skipped" in caplog.text


async def test_once_the_hung_predict_returns_the_model_serves_again(
    autojump_clock: MockClock,
) -> None:
    hang = Hang(after=0)
    engine = _engine(Hangs(hang))
    with trio.move_on_after(1):
        await engine.predict_grouped([observation("e", [1])])
    hang.after = 10  # later calls pass straight through
    hang.release()
    await wait_until(lambda: engine._worker.stuck_operation is None)
    (result,) = await engine.predict_grouped([observation("e", [4])])
    assert not isinstance(result, Exception)


async def test_load_can_be_run_up_front_on_the_worker_once() -> None:
    model = Where()
    engine = _engine(model)
    await engine.load()
    await engine.load()
    assert [name for name, _ in model.calls] == ["load"]
    assert model.calls[0][1] != threading.get_ident()
    await _exercise(engine)
    assert [name for name, _ in model.calls].count("load") == 1


class Timed(Model):
    """Each predict takes ``durations[i]`` seconds of the run's MockClock (0 once they run
    out) and notes its thread; the one at ``wait_at`` first waits for ``go`` (a trio task
    sets it) instead."""

    def __init__(
        self, clock: MockClock, durations: list[float], wait_at: int | None = None
    ) -> None:
        self.clock = clock
        self.durations = durations
        self.threads: list[int] = []
        self.wait_at = wait_at
        self.go = threading.Event()

    def predict(self, observation: Any) -> Any:
        index = len(self.threads)
        self.threads.append(threading.get_ident())
        if index == self.wait_at and not self.go.wait(timeout=30):
            raise RuntimeError("blocked the event loop: the task that sets go never ran")
        self.clock.jump(self.durations[index] if index < len(self.durations) else 0.0)
        return observation


async def test_auto_runs_predicts_inline_once_quick_and_on_the_thread_after_a_slow_one(
    mock_clock: MockClock,
) -> None:
    # 8 quick predicts (on the thread) -> inline; predict 11 takes 50 ms (inline, so it
    # blocks the loop once) -> the next ones run on the thread again.
    model = Timed(mock_clock, [0.0] * 10 + [0.05])
    engine = _engine(model)
    here = threading.get_ident()
    inline_before: list[bool] = []
    for k in range(14):
        inline_before.append(engine.runs_inline)
        (result,) = await engine.predict_grouped([observation("e", [k])])
        assert not isinstance(result, Exception), result
    on_loop = [thread == here for thread in model.threads]
    assert on_loop == [False] * 8 + [True] * 3 + [False] * 3
    assert inline_before == on_loop
    # Other calls into the model never run inline.
    await engine.reset_adapter("e", ["ep"])
    await engine.close()
    assert not engine.runs_inline


async def test_auto_a_slow_model_stops_blocking_the_loop_once_detected(
    mock_clock: MockClock,
) -> None:
    # After 8 quick predicts one is slow; the predict after it must leave the loop free:
    # it waits for an event only another trio task sets (had it run inline, that task
    # could never run and the predict would fail).
    model = Timed(mock_clock, [0.0] * 8 + [0.05], wait_at=9)
    engine = _engine(model)

    async def keepalive() -> None:
        await wait_until(lambda: len(model.threads) == 10)
        model.go.set()

    for k in range(9):
        await engine.predict_grouped([observation("e", [k])])
    assert model.threads[8] == threading.get_ident()  # the slow one ran inline
    assert not engine.runs_inline
    async with trio.open_nursery() as nursery:
        nursery.start_soon(keepalive)
        (result,) = await engine.predict_grouped([observation("e", [9])])
    assert not isinstance(result, Exception), result
    assert model.threads[9] != threading.get_ident()
    await engine.close()


async def test_runs_inline_says_when_predict_grouped_returns_without_yielding(
    mock_clock: MockClock,
) -> None:
    engine = _engine(Where(), user_code="thread")
    assert not engine.runs_inline
    await engine.close()
    inline = _engine(Where(), user_code="inline")
    assert not inline.runs_inline  # not loaded yet: the first call loads it on its thread
    await inline.load()
    assert inline.runs_inline
    steps = inline.predict_grouped([observation("e", [1])]).__await__()
    with pytest.raises(StopIteration) as done:
        steps.send(None)
    (result,) = done.value.value
    assert not isinstance(result, Exception), result
    await inline.close()
    assert not inline.runs_inline
