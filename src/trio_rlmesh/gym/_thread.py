"""A trio run on a private thread that hosts one async resource, for synchronous callers.

Theory of operation. :class:`TrioThread` starts a daemon thread running ``trio.run``. Its main
task enters the async context manager it was given (for the sync envs,
:func:`~trio_rlmesh.gym.open_remote_env`), hands the resource to the constructor, then serves
calls one after another until it is told to stop, and leaves the context (closing the
resource, shielded and bounded by the resource's own cleanup).

One call is one hand-off each way: the caller queues a job with ``TrioToken.run_sync_soon``,
which wakes the serving task directly (no task is spawned per call, unlike
``trio.from_thread.run``); the task awaits the job and releases a ``threading.Lock`` the
caller is blocked on. Calls from several threads are serialised by a lock.

If the caller is interrupted during a call (Ctrl-C raises ``KeyboardInterrupt`` in the main
thread, at whichever bytecode it is), the job's cancel scope is cancelled on the trio thread and
the caller waits, at most ``CANCEL_WAIT`` seconds, for the job to end before the interrupt goes
on. The cancel travels by ``run_sync_soon`` too, so it runs after the job's own hand-off if
that was queued at all: an interrupt that lands between the hand-off and the wait (a caller
preempted there on a loaded machine) cancels the job like one that lands in the wait, and one
that lands before the hand-off releases the caller at once. The resource stays usable: a
cancelled env call's late reply is dropped by the env client.

When the trio run ends for any reason, every job still waiting is released with a
:class:`~trio_rlmesh.TransportError`, so no caller can block forever. A forked child has a
copy of the object but not the thread: calls there raise at once instead of waiting.
"""

from __future__ import annotations

import collections
import os
import threading
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, Final, Generic, TypeVar

import trio

from .._errors import TransportError

__all__ = ["CANCEL_WAIT", "SIGNAL_POLL", "TrioThread"]

T = TypeVar("T")

CANCEL_WAIT: Final = 5.0
"""Seconds an interrupted caller waits for its cancelled call to end."""

SIGNAL_POLL: Final = 0.2
"""Longest slice, in seconds, of a caller's wait: a signal is noticed within it."""


def _wait(lock: threading.Lock, timeout: float | None = None) -> bool:
    """Acquire ``lock`` (within ``timeout`` seconds, if given); noticing signals meanwhile.

    CPython runs a signal's Python handler (Ctrl-C's ``KeyboardInterrupt``) when a blocking
    wait is interrupted or returns. A signal that arrives after the interpreter's last check
    but before the thread is asleep in the wait (a thread preempted there on a loaded
    machine; or one tripped with ``_thread.interrupt_main``) interrupts nothing, and would
    wait for the lock. Waiting in slices of :data:`SIGNAL_POLL` seconds bounds that delay.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        left = SIGNAL_POLL if deadline is None else min(SIGNAL_POLL, deadline - time.monotonic())
        if lock.acquire(timeout=max(left, 0.0)):
            return True
        if deadline is not None and time.monotonic() >= deadline:
            return False


class _Job:
    __slots__ = ("afn", "args", "delivered", "error", "kwargs", "lock", "scope", "value")

    def __init__(
        self, afn: Callable[..., Awaitable[Any]], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        self.afn = afn
        self.args = args
        self.kwargs = kwargs
        self.value: Any = None
        self.error: BaseException | None = None
        self.scope = trio.CancelScope()
        self.delivered = False
        """Set on the trio thread when the job reached it (it then releases :attr:`lock`)."""
        self.lock = threading.Lock()
        self.lock.acquire()

    async def run(self) -> None:
        try:
            with self.scope:
                self.value = await self.afn(*self.args, **self.kwargs)
        except BaseException as exc:  # handed to the caller's thread, raised there
            self.error = exc
        finally:
            self.lock.release()

    def fail(self, error: BaseException) -> None:
        self.error = error
        self.lock.release()


_STOP: Final = object()


class TrioThread(Generic[T]):
    """Run ``open_resource()`` (an async context manager) on a private trio thread.

    The constructor returns once the resource is open (and raises what opening raised).
    :meth:`call` runs an async function of it there and returns its result in the calling
    thread; :meth:`close` leaves the context and ends the thread.

    Example:
        >>> import contextlib
        >>> @contextlib.asynccontextmanager
        ... async def open_counter():
        ...     yield [0]
        >>> runner = TrioThread(open_counter, name="example")
        >>> async def bump(counter, by):
        ...     await trio.lowlevel.checkpoint()
        ...     counter[0] += by
        ...     return counter[0]
        >>> runner.call(bump, runner.resource, 2)
        2
        >>> runner.close()
    """

    def __init__(
        self,
        open_resource: Callable[[], AbstractAsyncContextManager[T]],
        *,
        name: str,
        close_timeout: float = 10.0,
    ) -> None:
        self._jobs: collections.deque[Any] = collections.deque()
        self._parked = False
        self._server: Any = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._calling = threading.Lock()
        self._closed = False
        self._finished = False
        self._close_timeout = close_timeout
        self._pid = os.getpid()
        self._opened = _Job(_noop, (), {})
        self._thread = threading.Thread(
            target=trio.run, args=(self._main, open_resource), name=name, daemon=True
        )
        self._thread.start()
        _wait(self._opened.lock)
        if self._opened.error is not None:
            self._thread.join()
            error, self._opened.error = self._opened.error, None
            raise error
        self.resource: T = self._opened.value
        """The open resource (use it only through :meth:`call`)."""

    @property
    def thread(self) -> threading.Thread:
        """The private thread."""
        return self._thread

    async def _main(self, open_resource: Callable[[], AbstractAsyncContextManager[T]]) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._server = trio.lowlevel.current_task()
        opened = False
        try:
            async with open_resource() as resource:
                opened = True
                self._opened.value = resource
                self._opened.lock.release()
                await self._serve()
        except BaseException as exc:
            if not opened:
                self._opened.fail(exc)
            # after opening, a failure to close is not the caller's: the session is over
        finally:
            self._finished = True
            error = TransportError("the remote env's trio thread has ended (it was closed)")
            while self._jobs:
                job = self._jobs.popleft()
                if isinstance(job, _Job):
                    job.fail(error)

    async def _serve(self) -> None:
        while True:
            while not self._jobs:
                self._parked = True
                await trio.lowlevel.wait_task_rescheduled(self._abort)
            job = self._jobs.popleft()
            if job is _STOP:
                return
            await job.run()

    def _abort(self, _: Any) -> trio.lowlevel.Abort:
        self._parked = False
        return trio.lowlevel.Abort.SUCCEEDED

    def _deliver(self, job: object) -> None:
        """On the trio thread: queue ``job`` and wake the serving task if it is parked."""
        if isinstance(job, _Job):
            job.delivered = True
        if self._finished:
            if isinstance(job, _Job):
                job.fail(TransportError("the remote env's trio thread has ended"))
            return
        self._jobs.append(job)
        if self._parked:
            self._parked = False
            trio.lowlevel.reschedule(self._server)

    def _submit(self, job: object) -> bool:
        token = self._token
        if token is None:
            return False
        try:
            token.run_sync_soon(self._deliver, job)
        except trio.RunFinishedError:
            return False
        return True

    def call(self, afn: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> Any:
        """Run ``await afn(*args, **kwargs)`` on the trio thread; return or raise its outcome.

        Raises:
            TransportError: the thread was closed (or has ended).
        """
        with self._calling:
            if self._closed:
                raise TransportError("the remote env is closed")
            if os.getpid() != self._pid:
                raise TransportError(
                    "the remote env was created in another process (this one was forked "
                    "from it) and its connection stayed there; create it in this process"
                )
            job = _Job(afn, args, kwargs)
            try:
                if not self._submit(job):
                    raise TransportError("the remote env is closed")
                _wait(job.lock)
            except BaseException:
                # Whether the hand-off was queued or not (the interrupt may have come at
                # any bytecode): _cancel finds out on the trio thread.
                self._cancel(job)
                raise
            error = job.error
            if error is not None:
                job.error = None
                try:
                    raise error
                finally:
                    del error
            return job.value

    def _cancel(self, job: _Job) -> None:
        """The caller was interrupted (KeyboardInterrupt): cancel its call, let it end."""
        token = self._token
        if token is None:
            return
        try:
            token.run_sync_soon(self._abandon, job)
        except trio.RunFinishedError:
            return
        _wait(job.lock, CANCEL_WAIT)

    @staticmethod
    def _abandon(job: _Job) -> None:
        """On the trio thread, after the job's own hand-off if that was queued (callbacks run
        in order): cancel a delivered job; release the caller of one that never came."""
        if job.delivered:
            job.scope.cancel()
        else:
            job.lock.release()

    def close(self) -> None:
        """Leave the resource's context and end the thread; idempotent, never raises.

        Waits at most ``close_timeout`` seconds (the thread is a daemon, so the process can
        exit even if it has not ended). From the private thread itself (a finalizer running
        there), it only asks the thread to stop.
        """
        if self._closed:
            return
        self._closed = True
        if os.getpid() != self._pid:
            return  # a forked child: the thread and the session belong to the parent
        if not self._submit(_STOP):
            return
        if threading.current_thread() is not self._thread:
            self._thread.join(self._close_timeout)


async def _noop() -> None:
    """A placeholder job: the constructor's hand-off of the opened resource."""
