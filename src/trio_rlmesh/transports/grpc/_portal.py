"""The bridge between trio and the asyncio loop that hosts grpclib.

grpclib only runs on asyncio, and trio must never see asyncio. So one asyncio
event loop runs in a daemon helper thread, shared by the whole process and
reference-counted through :func:`open_portal`. Trio code hands it a coroutine
function with :meth:`Portal.run`, which costs exactly two cross-thread wake-ups:
one to start the coroutine on the loop, one to resume the trio task. Callers put
a whole RPC round trip (send and receive) in one coroutine so that each round
trip crosses once.

Theory of operation for :meth:`Portal.run`:

* the asyncio task is created *on the loop thread* (``call_soon_threadsafe``),
  never through ``run_coroutine_threadsafe``: the future that returns reports
  "cancelled" before the task has unwound, and we must not let trio continue
  while the asyncio side still touches shared state;
* the trio task sleeps in ``wait_task_rescheduled``. Its abort callback only
  asks the loop to cancel the asyncio task and returns ``Abort.FAILED``, so the
  trio task keeps waiting;
* the trio task is resumed only from the asyncio task's done-callback, through
  ``TrioToken.run_sync_soon``, i.e. after the coroutine has really finished;
* if the coroutine finished normally despite the cancel request (it raced the
  cancellation), its result is returned and trio delivers the cancellation at
  the next checkpoint; if it was cancelled, a checkpoint raises ``trio.Cancelled``.

Two threads that both run Python take turns on the GIL, and a thread that wants it waits
up to the interpreter's switch interval for the other to let go. While the loop thread
runs, that interval is at most :data:`~trio_rlmesh._timeouts.GIL_SWITCH_INTERVAL` (it is
put back when the thread ends, unless someone changed it meanwhile): with the default 5 ms,
a well-behaved client's p99 on a grpclib server under a frame flood from another
connection was 4.2-5.5 times its unloaded p99, and 2.8-3.1 times with 0.5 ms
(``bench/bench_abuse.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import sys
import threading
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, Final, TypeVar

import attrs
import outcome
import trio

from ..._errors import TransportError
from ..._timeouts import GIL_SWITCH_INTERVAL, PORTAL_SHUTDOWN_GRACE

__all__ = ["Portal", "PortalClosedError", "open_portal"]

T = TypeVar("T")

THREAD_NAME: Final = "trio-rlmesh-asyncio"
"""Name of the helper thread, so tests (and humans in a debugger) can find it."""


class PortalClosedError(TransportError, trio.ClosedResourceError):
    """The portal's asyncio loop was stopped while (or before) a call ran on it.

    Also a :class:`trio.ClosedResourceError`.
    """


class _Cancelled:
    """Sentinel outcome: the asyncio task ended cancelled (or never started)."""


_CANCELLED: Final = _Cancelled()


@attrs.define(eq=False)
class _Call:
    """State one :meth:`Portal.run` shares between the trio and the loop thread."""

    trio_task: trio.lowlevel.Task
    token: trio.lowlevel.TrioToken
    cancel_requested: bool = False
    task: asyncio.Task[Any] | None = None
    resumed: bool = False


def _resume(call: _Call, result: outcome.Outcome[Any]) -> None:
    with contextlib.suppress(trio.RunFinishedError):
        call.token.run_sync_soon(trio.lowlevel.reschedule, call.trio_task, result)


class _LoopHost:
    """One asyncio loop in one daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.closed = False
        self.stopped = threading.Event()
        self._on_stopped: list[Callable[[], None]] = []
        self._lock = threading.Lock()
        self.calls: set[_Call] = set()
        """Calls not yet resumed; whatever is left when the loop dies is resumed then."""
        self.thread = threading.Thread(target=self._main, name=THREAD_NAME, daemon=True)
        self.thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            _restore_switch_interval(self)
            try:
                self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            finally:
                self.loop.close()
                asyncio.set_event_loop(None)
                with self._lock:
                    self.stopped.set()
                    callbacks, self._on_stopped = self._on_stopped, []
                    orphans, self.calls = self.calls, set()
                    for call in orphans:
                        call.resumed = True
                for call in orphans:
                    _resume(call, outcome.Value(_CANCELLED))
                for callback in callbacks:
                    callback()

    def register(self, call: _Call) -> None:
        with self._lock:
            if self.stopped.is_set():
                raise PortalClosedError("the asyncio portal is closed")
            self.calls.add(call)

    def unregister(self, call: _Call) -> bool:
        """Forget ``call``; returns whether it was still waiting to be resumed."""
        with self._lock:
            if call.resumed:
                return False
            call.resumed = True
            self.calls.discard(call)
            return True

    def notify_when_stopped(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (from any thread) once the loop thread has finished."""
        with self._lock:
            if not self.stopped.is_set():
                self._on_stopped.append(callback)
                return
        callback()

    async def _drain(self) -> None:
        # Cancel whatever is still running (readers, half-finished calls) and let
        # it unwind before the loop stops, so nothing is destroyed while pending.
        me = asyncio.current_task()
        pending = [t for t in asyncio.all_tasks() if t is not me]
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=PORTAL_SHUTDOWN_GRACE)
        self.loop.stop()

    def begin_shutdown(self) -> None:
        """Ask the loop to drain and stop (from any thread)."""
        self.closed = True
        with contextlib.suppress(RuntimeError):  # the loop is already closed
            self.loop.call_soon_threadsafe(self._start_drain)

    def _start_drain(self) -> None:
        self.loop.create_task(self._drain())


@attrs.define(eq=False)
class Portal:
    """A handle on the shared asyncio loop; get one with :func:`open_portal`."""

    _host: _LoopHost

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The asyncio loop (use only from coroutines run through :meth:`run`)."""
        return self._host.loop

    @property
    def closed(self) -> bool:
        """Whether the loop behind this portal is shutting down or gone."""
        return self._host.closed

    async def run(self, async_fn: Callable[..., Coroutine[Any, Any, T]], *args: Any) -> T:
        """Run ``async_fn(*args)`` as an asyncio task on the loop and return its result.

        Exceptions propagate with their original type. Cancelling the calling trio
        task cancels the asyncio task and waits until it has unwound.

        Raises:
            PortalClosedError: the loop was stopped before or during the call.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        host = self._host
        if host.closed:
            raise PortalClosedError("the asyncio portal is closed")
        call = _Call(trio.lowlevel.current_task(), trio.lowlevel.current_trio_token())
        loop = host.loop

        def resume(result: outcome.Outcome[Any]) -> None:
            if host.unregister(call):
                _resume(call, result)

        def on_done(task: asyncio.Task[Any]) -> None:
            if task.cancelled():
                resume(outcome.Value(_CANCELLED))
                return
            exc = task.exception()
            resume(outcome.Error(exc) if exc is not None else outcome.Value(task.result()))

        def start() -> None:
            if call.cancel_requested:
                resume(outcome.Value(_CANCELLED))
                return
            try:
                task = loop.create_task(async_fn(*args))
            except BaseException as exc:  # the call itself raised before awaiting
                resume(outcome.Error(exc))
                return
            call.task = task
            task.add_done_callback(on_done)

        def cancel() -> None:
            if call.task is not None:
                call.task.cancel()

        def abort(_: Any) -> trio.lowlevel.Abort:
            call.cancel_requested = True
            # If the loop is gone, start() and on_done() already ran or never
            # will; the shutdown path resumes us (see below).
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(cancel)
            return trio.lowlevel.Abort.FAILED

        host.register(call)
        try:
            loop.call_soon_threadsafe(start)
        except RuntimeError:
            host.unregister(call)
            raise PortalClosedError("the asyncio portal is closed") from None
        result = await trio.lowlevel.wait_task_rescheduled(abort)
        if result is _CANCELLED:
            if call.cancel_requested:
                await trio.lowlevel.checkpoint()
            raise PortalClosedError("the asyncio task was cancelled by the portal shutting down")
        return result  # type: ignore[no-any-return]


# Process-wide shared host, reference-counted by open_portal().
_lock = threading.Lock()
_host: _LoopHost | None = None
_users = 0
_saved_switch_interval: float | None = None
"""The interpreter's switch interval before a loop thread shortened it."""


def _shorten_switch_interval() -> None:
    """A loop thread starts (``_lock`` is held)."""
    global _saved_switch_interval
    current = sys.getswitchinterval()
    if _saved_switch_interval is None and current > GIL_SWITCH_INTERVAL:
        _saved_switch_interval = current
        sys.setswitchinterval(GIL_SWITCH_INTERVAL)


def _restore_switch_interval(ending: _LoopHost) -> None:
    """Put the switch interval back as ``ending`` stops, unless another loop thread has
    started since, or someone changed the interval meanwhile."""
    global _saved_switch_interval
    with _lock:
        if _host is not None and _host is not ending:
            return
        ours = math.isclose(sys.getswitchinterval(), GIL_SWITCH_INTERVAL)
        if _saved_switch_interval is not None and ours:
            sys.setswitchinterval(_saved_switch_interval)
        _saved_switch_interval = None


def _acquire() -> _LoopHost:
    global _host, _users
    with _lock:
        if _host is None or _host.closed:
            _shorten_switch_interval()
            _host = _LoopHost()
            _users = 0
        _users += 1
        return _host


def _release(host: _LoopHost) -> bool:
    """Drop one user; returns whether the caller must shut ``host`` down."""
    global _host, _users
    with _lock:
        if host is not _host:
            return False
        _users -= 1
        if _users > 0:
            return False
        _host = None
        return True


async def _stop(host: _LoopHost) -> None:
    done = trio.Event()
    token = trio.lowlevel.current_trio_token()

    def wake() -> None:
        with contextlib.suppress(trio.RunFinishedError):
            token.run_sync_soon(done.set)

    host.begin_shutdown()
    host.notify_when_stopped(wake)
    with trio.CancelScope(shield=True), trio.move_on_after(PORTAL_SHUTDOWN_GRACE * 2):
        await done.wait()
    if done.is_set():
        host.thread.join()


@contextlib.asynccontextmanager
async def open_portal() -> AsyncIterator[Portal]:
    """Share the process's asyncio loop for the duration of the block.

    The loop thread starts on first use and stops (after cancelling whatever is
    still running on it) when the last block exits.

    >>> async def main():
    ...     async with open_portal() as portal:
    ...         return await portal.run(asyncio.sleep, 0, "done")
    >>> trio.run(main)
    'done'
    """
    host = _acquire()
    try:
        yield Portal(host)
    finally:
        if _release(host):
            await _stop(host)
