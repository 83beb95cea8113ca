"""User code that hangs on cue, for tests of deadlines around worker threads.

A hung call blocks its worker thread on a ``threading.Event`` the test releases (always:
use :class:`Hang` as a context manager), never on a real sleep.

Why :func:`hold_clock` exists: trio's ``autojump_clock`` jumps to the next deadline as
soon as every task is blocked, and a task waiting for a worker thread *is* blocked, even
while the thread is merely busy for a microsecond. So a test that lets user code run in
a thread holds the clock still (one task that keeps checkpointing) until the user code
has actually hung; from then on the clock jumps exactly as it does for any blocked
task, and virtual times stay exact.
"""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Any

import trio


class Hang:
    """A switch user code calls through: ``hang.point()`` blocks once armed, until released."""

    def __init__(self, *, after: int = 0) -> None:
        self.after = after
        """How many ``point()`` calls pass before one blocks (0: the first blocks)."""
        self.calls = 0
        self.entered = threading.Event()
        """Set once user code is blocked in ``point()``."""
        self.released = threading.Event()
        self.thread: int | None = None
        """The thread ident that hung."""

    def point(self, *_args: Any) -> None:
        """Return at once until ``after`` calls have passed; then block until released."""
        self.calls += 1
        if self.calls <= self.after:
            return
        self.thread = threading.get_ident()
        self.entered.set()
        self.released.wait()

    def release(self) -> None:
        self.released.set()

    def __enter__(self) -> Hang:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


async def hold_clock(hang: Hang) -> None:
    """Keep the run busy, so an autojump clock stands still, until ``hang`` has hung."""
    while not hang.entered.is_set():
        await trio.lowlevel.checkpoint()


async def wait_until(predicate: Any) -> None:
    """Checkpoint until ``predicate()`` holds (for results a worker thread posts back)."""
    while not predicate():
        await trio.lowlevel.checkpoint()
