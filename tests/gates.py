"""A blocking point for user code in worker threads, driven by a trio test.

A gate stands where a fake env or model used to ``time.sleep``: the worker blocks in
:meth:`ThreadGate.wait` until the test calls :meth:`ThreadGate.open`, and the test awaits
:meth:`ThreadGate.entered` to know the worker got there. So "the step is still running"
and "the step has finished" are facts the test sets, not durations it hopes for.
"""

from __future__ import annotations

import contextlib
import threading
from types import TracebackType

import trio

SAFETY_LIMIT = 60.0
"""Seconds a worker waits at most, so a failing test never leaves a thread blocked for good
(longer than every test's ``fail_after`` guard: it is never part of what a test checks)."""


class ThreadGate:
    """Blocks worker threads until opened; counts the arrivals for the trio side.

    Create it inside the trio test (it remembers that run's token). As a context manager it
    opens on exit, which releases any worker still waiting.
    """

    def __init__(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._open = threading.Event()
        self._arrived = 0
        self._waiters: list[tuple[int, trio.Event]] = []

    def wait(self) -> None:
        """Called from a worker thread: note the arrival, then block until :meth:`open`."""
        with contextlib.suppress(trio.RunFinishedError):
            self._token.run_sync_soon(self._note_arrival)
        if not self._open.wait(SAFETY_LIMIT):
            raise TimeoutError("the test never opened this gate")

    def _note_arrival(self) -> None:
        self._arrived += 1
        for count, event in self._waiters:
            if self._arrived >= count:
                event.set()
        self._waiters = [(count, event) for count, event in self._waiters if not event.is_set()]

    @property
    def arrived(self) -> int:
        """How many waits have started (read from the trio thread)."""
        return self._arrived

    async def entered(self, count: int = 1) -> None:
        """Return once ``count`` workers have reached :meth:`wait` in total."""
        if self._arrived >= count:
            return
        event = trio.Event()
        self._waiters.append((count, event))
        await event.wait()

    def open(self) -> None:
        """Release every waiting worker and every later one."""
        self._open.set()

    @property
    def is_open(self) -> bool:
        return self._open.is_set()

    def __enter__(self) -> ThreadGate:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.open()
