"""The worker primitive: user code on a dedicated thread, abandoned by deadlines, never joined."""

from __future__ import annotations

import gc
import logging
import signal
import threading
from typing import Any

import pytest
import trio
from trio.testing import MockClock

from trio_rlmesh.runtime._worker import (
    AUTO_PROMOTE_MAX,
    SYNC_WAIT,
    AdaptiveWorker,
    InlinePolicy,
    InlineWorker,
    ThreadWorker,
    WorkerClosed,
    WorkerStatistics,
    WorkerStuck,
    check_serving_user_code,
    check_user_code,
    new_worker,
)

from .._hang import Hang, hold_clock, wait_until


@pytest.fixture(params=[SYNC_WAIT, 0.0], ids=["sync-wait", "always-park"])
def sync_wait(request: pytest.FixtureRequest) -> float:
    """Every thread-worker behaviour holds with and without the short synchronous wait."""
    value: float = request.param
    return value


def _ident(*_args: Any) -> int:
    return threading.get_ident()


async def test_calls_run_in_order_on_one_dedicated_daemon_thread(sync_wait: float) -> None:
    worker = ThreadWorker("env Test", sync_wait=sync_wait)
    seen = [await worker.run("op", _ident) for _ in range(5)]
    assert len(set(seen)) == 1
    assert seen[0] != threading.get_ident()
    assert worker._thread is not None
    assert worker._thread.daemon
    assert worker._thread.name == "trio-rlmesh worker: env Test"
    assert await worker.run("op", lambda a, b: a + b, 2, 3) == 5
    await worker.aclose()


async def test_errors_of_user_code_keep_their_type(sync_wait: float) -> None:
    worker = ThreadWorker("m", sync_wait=sync_wait)

    def boom() -> None:
        raise KeyError("missing")

    with pytest.raises(KeyError, match="missing"):
        await worker.run("op", boom)
    assert await worker.run("op", lambda: 1) == 1


async def test_concurrent_calls_take_turns_in_call_order(sync_wait: float) -> None:
    worker = ThreadWorker("m", sync_wait=sync_wait)
    order: list[int] = []
    active = 0
    overlap = False

    def call(index: int) -> None:
        nonlocal active, overlap
        active += 1
        overlap = overlap or active > 1
        order.append(index)
        active -= 1

    async with trio.open_nursery() as nursery:
        for index in range(6):
            nursery.start_soon(worker.run, "op", call, index)
            # start_soon order is not run order; one scheduling pass pins it.
            await trio.testing.wait_all_tasks_blocked()
    assert order == list(range(6))
    assert not overlap


async def test_a_hung_call_is_abandoned_exactly_at_the_deadline(
    autojump_clock: MockClock, sync_wait: float
) -> None:
    worker = ThreadWorker("env Test", sync_wait=sync_wait)
    with Hang() as hang:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(hold_clock, hang)
            with pytest.raises(trio.TooSlowError):
                with trio.fail_after(2):
                    await worker.run("env.step", hang.point)
        assert trio.current_time() == 2
        assert hang.entered.is_set()
        assert worker.stuck_operation == "env.step"


async def test_the_next_call_on_a_stuck_worker_fails_at_once_naming_the_stuck_call(
    autojump_clock: MockClock, sync_wait: float
) -> None:
    worker = ThreadWorker("env Test", sync_wait=sync_wait)
    ran: list[str] = []
    with Hang() as hang:
        with trio.move_on_after(1):
            await worker.run("env.step", hang.point)
        with pytest.raises(WorkerStuck) as info:
            await worker.run("env.reset", ran.append, "reset")
        assert trio.current_time() == 1
    error = info.value
    assert (error.worker, error.operation, error.stuck_operation) == (
        "env Test",
        "env.reset",
        "env.step",
    )
    assert error.stuck_for >= 0
    assert "env Test: env.reset cannot run: env.step is still running" in str(error)
    assert ran == []


async def test_calls_waiting_behind_a_call_that_is_then_abandoned_are_refused(
    autojump_clock: MockClock, sync_wait: float
) -> None:
    worker = ThreadWorker("m", sync_wait=sync_wait)
    outcomes: list[str] = []

    async def queued(name: str) -> None:
        try:
            await worker.run(name, outcomes.append, name)
        except WorkerStuck as exc:
            outcomes.append(f"refused {exc.operation} behind {exc.stuck_operation}")

    with Hang() as hang:
        async with trio.open_nursery() as nursery:
            caller = trio.CancelScope()

            async def hung_call() -> None:
                with caller:
                    await worker.run("model.predict", hang.point)

            nursery.start_soon(hung_call)
            await wait_until(hang.entered.is_set)
            nursery.start_soon(queued, "first")
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(queued, "second")
            await trio.testing.wait_all_tasks_blocked()
            caller.cancel()
    # Both are refused at once (trio may run the two wake-ups in either order).
    assert sorted(outcomes) == [
        "refused first behind model.predict",
        "refused second behind model.predict",
    ]


async def test_a_stuck_worker_serves_again_once_the_call_returns_and_the_late_result_is_dropped(
    autojump_clock: MockClock, caplog: pytest.LogCaptureFixture, sync_wait: float
) -> None:
    worker = ThreadWorker("env Test", sync_wait=sync_wait)
    hang = Hang()

    def late() -> str:
        hang.point()
        return "late"

    with trio.move_on_after(1):
        await worker.run("env.step", late)
    assert worker.stuck_operation == "env.step"
    with caplog.at_level(logging.WARNING, logger="trio_rlmesh.worker"):
        hang.release()
        await wait_until(lambda: worker.stuck_operation is None)
    assert await worker.run("env.step", lambda: "fresh") == "fresh"
    assert "env Test: abandoned env.step returned" in caplog.text
    assert "its result was dropped" in caplog.text


async def test_a_call_whose_caller_is_already_cancelled_never_starts(sync_wait: float) -> None:
    worker = ThreadWorker("m", sync_wait=sync_wait)
    ran: list[int] = []
    with trio.CancelScope() as scope:
        scope.cancel()
        await worker.run("op", ran.append, 1)
    assert ran == []
    assert worker.stuck_operation is None
    assert await worker.run("op", lambda: 2) == 2


async def test_a_waiter_cancelled_in_line_leaves_the_others_in_order(sync_wait: float) -> None:
    worker = ThreadWorker("m", sync_wait=sync_wait)
    order: list[str] = []
    with Hang() as hang:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(worker.run, "op", hang.point)
            await wait_until(hang.entered.is_set)
            leaver = trio.CancelScope()

            async def leaving() -> None:
                with leaver:
                    await worker.run("op", order.append, "leaver")

            nursery.start_soon(leaving)
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(worker.run, "op", order.append, "stays")
            await trio.testing.wait_all_tasks_blocked()
            leaver.cancel()
            await trio.testing.wait_all_tasks_blocked()
            hang.release()
    assert order == ["stays"]


async def test_aclose_runs_the_close_last_on_the_worker_thread_once(sync_wait: float) -> None:
    worker = ThreadWorker("env Test", sync_wait=sync_wait)
    first = await worker.run("op", _ident)
    closes: list[int] = []
    await worker.aclose("env.close", lambda: closes.append(threading.get_ident()))
    await worker.aclose("env.close", lambda: closes.append(0))
    assert closes == [first]
    assert worker.closed
    with pytest.raises(WorkerClosed, match=r"env\.step cannot run: the object was closed"):
        await worker.run("env.step", _ident)
    assert worker._thread is not None
    worker._thread.join(10)
    assert not worker._thread.is_alive()


async def test_closing_a_stuck_worker_skips_the_close_and_returns_at_once(
    autojump_clock: MockClock, sync_wait: float
) -> None:
    worker = ThreadWorker("env Test", sync_wait=sync_wait)
    closes: list[str] = []
    with Hang() as hang:
        with trio.move_on_after(3):
            await worker.run("env.step", hang.point)
        with pytest.raises(WorkerStuck) as info:
            await worker.aclose("env.close", closes.append, "closed")
        assert trio.current_time() == 3
        assert info.value.operation == "env.close"
        assert worker.closed
        assert worker._thread is not None
        assert worker._thread.is_alive()  # still inside the hung step; never joined
    # Released: the hung step returns and the thread ends by itself.
    worker._thread.join(10)
    assert not worker._thread.is_alive()
    assert closes == []


async def test_a_close_that_hangs_is_bounded_by_the_callers_scope(
    autojump_clock: MockClock, sync_wait: float
) -> None:
    worker = ThreadWorker("m", sync_wait=sync_wait)
    with Hang() as hang:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(hold_clock, hang)
            with trio.move_on_after(5) as scope:
                await worker.aclose("model.close", hang.point)
        assert scope.cancelled_caught
        assert trio.current_time() == 5
        assert worker.closed


async def test_calls_queued_behind_a_running_call_are_refused_when_the_worker_closes(
    sync_wait: float,
) -> None:
    worker = ThreadWorker("m", sync_wait=sync_wait)
    refused: list[str] = []

    async def queued() -> None:
        try:
            await worker.run("late", _ident)
        except WorkerClosed as exc:
            refused.append(exc.operation)

    with Hang() as hang:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(worker.run, "op", hang.point)
            await wait_until(hang.entered.is_set)
            nursery.start_soon(queued)
            await trio.testing.wait_all_tasks_blocked()
            await worker.aclose()
            hang.release()
    assert refused == ["late"]


def test_a_call_that_returns_after_its_trio_run_ended_frees_the_worker_for_the_next_run(
    sync_wait: float,
) -> None:
    worker = ThreadWorker("env Test", sync_wait=sync_wait)
    hang = Hang()

    async def first() -> None:
        with trio.move_on_after(1):
            await worker.run("env.step", hang.point)

    trio.run(first, clock=MockClock(autojump_threshold=0))
    assert worker.stuck_operation == "env.step"
    hang.release()

    async def second() -> int | None:
        # The thread finds the first run gone and frees the worker itself.
        await wait_until(lambda: worker.stuck_operation is None)
        return await worker.run("env.step", _ident)

    thread = worker._thread
    assert thread is not None
    assert trio.run(second) == thread.ident


async def test_a_worker_dropped_without_aclose_ends_its_thread(sync_wait: float) -> None:
    worker = ThreadWorker("m", sync_wait=sync_wait)
    await worker.run("op", _ident)
    thread = worker._thread
    assert thread is not None
    del worker
    gc.collect()
    thread.join(10)
    assert not thread.is_alive()


async def test_inline_worker_runs_on_the_trio_thread() -> None:
    worker = InlineWorker("m")
    assert worker.user_code == "inline"
    assert await worker.run("op", _ident) == threading.get_ident()
    closes: list[int] = []
    await worker.aclose("close", closes.append, 1)
    await worker.aclose("close", closes.append, 2)
    assert closes == [1]
    with pytest.raises(WorkerClosed):
        await worker.run("op", _ident)


def test_user_code_modes() -> None:
    assert isinstance(new_worker("thread", "x"), ThreadWorker)
    assert isinstance(new_worker("inline", "x"), InlineWorker)
    assert isinstance(new_worker("auto", "x"), AdaptiveWorker)
    assert check_user_code("inline") == "inline"
    with pytest.raises(ValueError, match="user_code must be 'thread' or 'inline', got 'auto'"):
        check_user_code("auto")
    assert check_serving_user_code("auto") == "auto"
    with pytest.raises(
        ValueError, match="user_code must be 'auto', 'thread' or 'inline', got 'threads'"
    ):
        new_worker("threads", "x")


async def test_quick_calls_are_handed_back_inside_the_synchronous_wait() -> None:
    worker = ThreadWorker("m", sync_wait=10.0)  # generous: no call here comes near it
    for _ in range(20):
        await worker.run("op", _ident)
    assert worker.statistics() == WorkerStatistics(20, 0, 0, None)
    parking = ThreadWorker("m", sync_wait=0)
    for _ in range(3):
        await parking.run("op", _ident)
    assert parking.statistics() == WorkerStatistics(3, 3, 0, None)


async def test_a_call_that_outlasts_the_wait_parks_and_the_next_quick_call_rearms_it() -> None:
    # The window is long enough for a no-op on a loaded machine; the slow call is held
    # by the gate, which only opens once its caller has parked. That call counts as slow
    # however little of it the thread measured (a thread that starts late on a loaded
    # machine times only the end of the wait), so the next call parks at once.
    worker = ThreadWorker("m", sync_wait=0.5)
    gate = threading.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(worker.run, "slow", gate.wait)
        # The caller parks once the window has passed; only then is the gate opened.
        await trio.testing.wait_all_tasks_blocked()
        gate.set()
    assert worker.statistics().parked == 1
    await worker.run("quick", _ident)  # skips the wait: the last call was slow
    assert worker.statistics().parked == 2
    await worker.run("quick", _ident)  # the last call was quick: waits again
    assert worker.statistics().parked == 2


@pytest.mark.skipif(not hasattr(signal, "pthread_kill"), reason="POSIX signals")
async def test_a_signal_handler_raising_during_the_synchronous_wait_abandons_the_call() -> None:
    class Interrupted(Exception):
        pass

    handled = threading.Event()

    def handler(signum: int, frame: Any) -> None:
        handled.set()
        raise Interrupted

    main = threading.get_ident()
    worker = ThreadWorker("m", sync_wait=60.0)
    previous = signal.signal(signal.SIGUSR1, handler)
    try:
        with Hang() as hang:

            def interrupt_then_hang() -> None:
                # A signal that lands before the caller blocks is only handled once the
                # wait ends; one that lands while it blocks interrupts the wait. Repeat
                # until the handler ran (each try is paced, not timed).
                for _ in range(2000):
                    signal.pthread_kill(main, signal.SIGUSR1)
                    if handled.wait(0.005):
                        break
                hang.point()

            with pytest.raises(Interrupted):
                await worker.run("env.step", interrupt_then_hang)
            assert worker.statistics().abandoned == 1
            await wait_until(hang.entered.is_set)
            assert worker.stuck_operation == "env.step"
            with pytest.raises(WorkerStuck):
                await worker.run("env.reset", _ident)
        await wait_until(lambda: worker.stuck_operation is None)
        assert await worker.run("env.reset", lambda: "ok") == "ok"
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_sync_wait_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match="sync_wait must be >= 0"):
        ThreadWorker("m", sync_wait=-1)


def test_a_refusal_becomes_the_adapters_error_class() -> None:
    from trio_rlmesh import EnvError, ModelError

    stuck = WorkerStuck(
        worker="env X", operation="env.reset", stuck_operation="env.step", stuck_for=1
    )
    error = stuck.as_error(EnvError)
    assert isinstance(error, EnvError)
    assert (error.code, error.operation, error.recoverable) == ("BUSY", "env.reset", False)
    assert error.message == str(stuck)
    assert error.__cause__ is stuck
    closed = WorkerClosed(worker="model M", operation="model.predict").as_error(ModelError)
    assert (closed.code, closed.operation) == ("CLOSED", "model.predict")


async def test_the_synchronous_wait_never_holds_up_a_task_that_is_ready_to_run() -> None:
    worker = ThreadWorker("m", sync_wait=10.0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.lowlevel.checkpoint)  # ready to run, not yet run
        await worker.run("op", _ident)
    assert worker.statistics().parked == 1
    await worker.run("op", _ident)  # nothing else is ready: waits synchronously
    assert worker.statistics().parked == 1


# ------------------------------------------------------------------ user_code="auto"


def test_inline_policy_goes_inline_after_a_run_of_quick_calls_and_back_on_a_slow_one() -> None:
    policy = InlinePolicy(threshold=1e-3, promote=3)
    for _ in range(2):
        policy.observe(0.5e-3, ran_inline=False)
    assert not policy.inline
    policy.observe(0.999e-3, ran_inline=False)
    assert policy.inline
    # A slow call on the thread sends it back without raising the bar.
    policy.observe(1e-3, ran_inline=False)
    assert not policy.inline
    assert policy.needed == 3
    # An abandoned call is slow; the run of quick calls starts over.
    policy.observe(0.0, ran_inline=False)
    policy.observe(None, ran_inline=False)
    policy.observe(0.0, ran_inline=False)
    policy.observe(0.0, ran_inline=False)
    assert not policy.inline
    policy.observe(0.0, ran_inline=False)
    assert policy.inline


def test_inline_policy_backs_off_after_each_slow_inline_call_and_relaxes_after_quick_ones() -> None:
    policy = InlinePolicy(threshold=1e-3, promote=2)
    needed = []
    for _ in range(12):
        while not policy.inline:
            policy.observe(0.0, ran_inline=False)
        policy.observe(0.5, ran_inline=True)  # blocked the loop
        needed.append(policy.needed)
    assert needed == [4, 8, 16, 32, 64, 128, 256, 512, 1024, 1024, 1024, 1024]
    assert AUTO_PROMOTE_MAX == 1024
    # 1024 quick calls on the thread, then 7 x 1024 inline: still 1024 ...
    for _ in range(8 * 1024 - 1):
        policy.observe(0.0, ran_inline=policy.inline)
    assert policy.inline
    assert policy.needed == 1024
    # ... the 8 x 1024th halves it, and so on down to promote.
    policy.observe(0.0, ran_inline=True)
    assert policy.needed == 512
    for _ in range(100_000):
        policy.observe(0.0, ran_inline=True)
    assert policy.needed == 2
    assert policy.inline
    # A slow call on the thread never raises the bar.
    policy.observe(None, ran_inline=False)
    assert (policy.inline, policy.needed) == (False, 2)


def test_inline_policy_rejects_bad_settings() -> None:
    with pytest.raises(ValueError, match="threshold must be > 0"):
        InlinePolicy(threshold=0)
    with pytest.raises(ValueError, match="promote must be at least 1"):
        InlinePolicy(promote=0)


class _Timed:
    """A user call that takes ``durations[i]`` seconds of the run's MockClock."""

    def __init__(self, clock: MockClock, durations: list[float]) -> None:
        self.clock = clock
        self.durations = durations
        self.threads: list[int] = []

    def __call__(self) -> int:
        self.clock.jump(self.durations[len(self.threads)])
        self.threads.append(threading.get_ident())
        return len(self.threads)


async def test_auto_runs_a_call_inline_only_after_quick_ones_and_not_after_a_slow_one(
    mock_clock: MockClock,
) -> None:
    policy = InlinePolicy(threshold=1.0, promote=2)
    worker = AdaptiveWorker("env Test", inline_operations=("env.step",), policy=policy)
    step = _Timed(mock_clock, [0.5, 0.5, 0.5, 2.0, 0.5, 0.5, 0.5, 0.5])
    for _ in range(8):
        assert await worker.run("env.step", step) == len(step.threads)
    here = threading.get_ident()
    on_loop = [thread == here for thread in step.threads]
    # thread, thread (2 quick) -> inline, inline (slow: back off to 4) -> 4 on the thread,
    # and the next goes inline again.
    assert on_loop == [False, False, True, True, False, False, False, False]
    assert policy.needed == 4
    assert policy.inline
    stats = worker.statistics()
    assert stats.calls == 8
    await worker.aclose()


async def test_auto_runs_other_operations_on_the_thread_and_keeps_the_order(
    mock_clock: MockClock,
) -> None:
    policy = InlinePolicy(threshold=1.0, promote=1)
    worker = AdaptiveWorker("env Test", inline_operations=("env.step",), policy=policy)
    step = _Timed(mock_clock, [0.0] * 3)
    await worker.run("env.step", step)
    assert policy.inline
    here = threading.get_ident()
    # reset never runs inline, and does not count towards the policy.
    assert await worker.run("env.reset", _ident) != here
    assert policy.inline
    # While a call is running on the thread, a step queues behind it instead of
    # running inline ahead of it.
    release = threading.Event()
    order: list[str] = []

    def slow_reset() -> None:
        release.wait()
        order.append("reset")

    def step_after() -> int:
        order.append("step")
        return threading.get_ident()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(worker.run, "env.reset", slow_reset)
        await wait_until(lambda: worker.thread._current is not None)
        assert not worker.runs_inline("env.step")
        nursery.start_soon(worker.run, "env.step", step_after)
        await wait_until(lambda: bool(worker.thread._waiters))
        release.set()
    assert order == ["reset", "step"]
    await worker.aclose("env.close", step)
    assert worker.closed
    assert not worker.runs_inline("env.step")
    with pytest.raises(WorkerClosed):
        await worker.run("env.step", step)


async def test_auto_never_starts_an_inline_call_for_a_cancelled_caller(
    mock_clock: MockClock,
) -> None:
    policy = InlinePolicy(threshold=1.0, promote=1)
    worker = AdaptiveWorker("m", inline_operations=("env.step",), policy=policy)
    calls: list[int] = []
    await worker.run("env.step", calls.append, 1)
    assert worker.runs_inline("env.step")
    with trio.CancelScope() as scope:
        scope.cancel()
        await worker.run("env.step", calls.append, 2)
    assert scope.cancelled_caught
    assert calls == [1]
    await worker.aclose()


async def test_auto_counts_an_abandoned_call_as_slow(autojump_clock: MockClock) -> None:
    policy = InlinePolicy(threshold=10.0, promote=1)
    worker = AdaptiveWorker("env Test", inline_operations=("env.step",), policy=policy)
    with Hang() as hang:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(hold_clock, hang)
            with trio.move_on_after(1):
                await worker.run("env.step", hang.point)
        assert worker.stuck_operation == "env.step"
        assert not policy.inline
        assert worker.statistics().abandoned == 1
    await wait_until(lambda: worker.stuck_operation is None)
    await worker.run("env.step", _ident)
    assert policy.inline
    await worker.aclose()


def _at_once(call: Any) -> Any:
    steps = call.__await__()
    with pytest.raises(StopIteration) as done:
        steps.send(None)
    return done.value.value


async def test_run_does_not_yield_where_it_runs_inline(mock_clock: MockClock) -> None:
    assert not ThreadWorker("m").runs_inline("model.predict")
    inline = InlineWorker("m")
    assert inline.runs_inline("model.predict")
    assert _at_once(inline.run("model.predict", _ident)) == threading.get_ident()
    await inline.aclose()
    assert not inline.runs_inline("model.predict")
    with pytest.raises(WorkerClosed):
        await inline.run("model.predict", _ident)
    # "auto": a call that runs inline is timed and accounted, and does not yield either.
    policy = InlinePolicy(threshold=1.0, promote=1)
    worker = AdaptiveWorker("m", inline_operations=("model.predict",), policy=policy)
    assert not worker.runs_inline("model.predict")
    step = _Timed(mock_clock, [0.0, 2.0])
    await worker.run("model.predict", step)
    assert worker.runs_inline("model.predict")
    assert _at_once(worker.run("model.predict", step)) == 2
    assert step.threads[1] == threading.get_ident()
    assert not policy.inline
    assert policy.needed == 2
    assert worker.statistics().calls == 2
    await worker.aclose()
