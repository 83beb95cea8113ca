"""The asyncio portal the grpclib backend runs on: results, exceptions, cancellation at every
point, clean shutdown."""

from __future__ import annotations

import asyncio
import sys
import threading

import pytest
import trio
import trio.testing

from trio_rlmesh._timeouts import GIL_SWITCH_INTERVAL
from trio_rlmesh.transports.grpc._portal import THREAD_NAME, PortalClosedError, open_portal


def portal_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == THREAD_NAME]


async def other_tasks() -> int:
    me = asyncio.current_task()
    return len([t for t in asyncio.all_tasks() if t is not me])


class Boom(Exception):
    pass


async def test_returns_result_and_runs_on_the_loop_thread() -> None:
    async def where(x: int) -> tuple[int, str, bool]:
        await asyncio.sleep(0)
        return x * 2, threading.current_thread().name, asyncio.get_running_loop().is_running()

    with trio.fail_after(10):
        async with open_portal() as portal:
            assert await portal.run(where, 21) == (42, THREAD_NAME, True)


async def test_exceptions_keep_their_type() -> None:
    async def fail() -> None:
        await asyncio.sleep(0)
        raise Boom("original")

    async def fail_before_awaiting() -> None:
        raise KeyError("k")

    with trio.fail_after(10):
        async with open_portal() as portal:
            with pytest.raises(Boom, match="original"):
                await portal.run(fail)
            with pytest.raises(KeyError):
                await portal.run(fail_before_awaiting)
            assert await portal.run(other_tasks) == 0


async def test_cancelled_before_start_never_runs_the_coroutine() -> None:
    started = threading.Event()

    async def record() -> None:
        started.set()

    with trio.fail_after(10):
        async with open_portal() as portal:
            with trio.CancelScope() as scope:
                scope.cancel()
                await portal.run(record)
            assert scope.cancelled_caught
            assert await portal.run(other_tasks) == 0
    assert not started.is_set()


async def test_cancel_while_running_waits_for_asyncio_to_unwind() -> None:
    unwound = threading.Event()
    running = trio.Event()
    token = trio.lowlevel.current_trio_token()

    async def slow() -> None:
        token.run_sync_soon(running.set)
        try:
            await asyncio.sleep(60)
        finally:
            # Take a while to unwind: trio must keep waiting until this is done.
            await asyncio.sleep(0.05)
            unwound.set()

    with trio.fail_after(10):
        async with open_portal() as portal:
            scope = trio.CancelScope()
            seen_unwound: list[bool] = []

            async def call() -> None:
                with scope:
                    await portal.run(slow)
                seen_unwound.append(unwound.is_set())

            async with trio.open_nursery() as nursery:
                nursery.start_soon(call)
                await running.wait()
                scope.cancel()
            assert scope.cancelled_caught
            assert seen_unwound == [True]
            assert await portal.run(other_tasks) == 0


async def test_cancel_racing_completion_keeps_the_result() -> None:
    # The coroutine finishes in the same loop iteration the cancel request arrives
    # in; whichever wins, trio sees either the result or Cancelled, never a hang,
    # and the asyncio side is clean afterwards.
    async def quick(i: int) -> int:
        return i

    outcomes = {"value": 0, "cancelled": 0}
    with trio.fail_after(20):
        async with open_portal() as portal:
            for i in range(200):
                with trio.move_on_after(0) if i % 2 else trio.CancelScope() as scope:
                    if i % 3 == 0:
                        scope.cancel()
                    value = await portal.run(quick, i)
                    assert value == i
                    outcomes["value"] += 1
                if scope.cancelled_caught:
                    outcomes["cancelled"] += 1
            assert await portal.run(other_tasks) == 0
    assert outcomes["value"] + outcomes["cancelled"] >= 200


async def test_random_cancellations_leave_no_tasks() -> None:
    async def sleepy(delay: float) -> float:
        await asyncio.sleep(delay)
        return delay

    with trio.fail_after(20):
        async with open_portal() as portal:
            for i in range(50):
                with trio.move_on_after(0.001 * (i % 5)):
                    await portal.run(sleepy, 0.001 * ((i * 7) % 6))
            assert await portal.run(other_tasks) == 0


async def test_concurrent_calls_share_one_loop() -> None:
    async def echo(i: int) -> int:
        await asyncio.sleep(0.01 * (i % 3))
        return i

    results: list[int] = []
    with trio.fail_after(10):
        async with open_portal() as portal, trio.open_nursery() as nursery:
            for i in range(20):

                async def one(i: int = i) -> None:
                    results.append(await portal.run(echo, i))

                nursery.start_soon(one)
    assert sorted(results) == list(range(20))


async def test_refcounted_and_no_thread_left_after_close() -> None:
    with trio.fail_after(10):
        async with open_portal() as outer:
            async with open_portal() as inner:
                assert inner.loop is outer.loop
            assert not outer.closed
            assert await outer.run(asyncio.sleep, 0, "still") == "still"
            assert len(portal_threads()) == 1
        assert outer.closed
        assert outer.loop.is_closed()
        assert portal_threads() == []
        with pytest.raises(PortalClosedError):
            await outer.run(asyncio.sleep, 0)
        # A new block starts a fresh loop.
        async with open_portal() as again:
            assert again.loop is not outer.loop
            assert await again.run(asyncio.sleep, 0, 1) == 1
    assert portal_threads() == []


async def test_closing_cancels_calls_still_running() -> None:
    # A call still running when the loop shuts down is resumed with
    # PortalClosedError rather than hanging.
    errors: list[BaseException] = []
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery, open_portal() as portal:

            async def run_forever() -> None:
                try:
                    await portal.run(asyncio.sleep, 3600)
                except PortalClosedError as exc:
                    errors.append(exc)

            nursery.start_soon(run_forever)
            await trio.testing.wait_all_tasks_blocked()
            portal._host.begin_shutdown()
    assert len(errors) == 1
    assert portal_threads() == []


async def test_the_loop_thread_shortens_the_switch_interval_while_it_runs() -> None:
    """Each call crosses between the trio and asyncio threads twice; with Python's 5 ms
    default, a busy loop thread could hold every crossing up that long."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(0.005)
    try:
        with trio.fail_after(10):
            async with open_portal():
                assert sys.getswitchinterval() == pytest.approx(GIL_SWITCH_INTERVAL)
                async with open_portal():  # a second user: the same thread, no change
                    assert sys.getswitchinterval() == pytest.approx(GIL_SWITCH_INTERVAL)
            assert sys.getswitchinterval() == pytest.approx(0.005)  # back once it ends
            sys.setswitchinterval(0.0002)  # shorter already: left alone
            async with open_portal():
                assert sys.getswitchinterval() == pytest.approx(0.0002)
            assert sys.getswitchinterval() == pytest.approx(0.0002)
    finally:
        sys.setswitchinterval(before)
