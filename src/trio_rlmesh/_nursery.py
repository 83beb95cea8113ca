"""Nurseries for the background tasks of an async context manager.

``open_env_client`` and friends keep a reader task running while the user's block runs.
Yielding inside a plain nursery would hand the user an :class:`ExceptionGroup` for any
exception of their own block (trio's strict exception groups). :func:`background_nursery`
cancels the background tasks when the block ends and lets the block's own exception out
as it was raised; a background task's failure still comes out as a group, beside it.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

if sys.version_info < (3, 11):  # pragma: no cover - exercised on 3.10 only
    from exceptiongroup import BaseExceptionGroup

__all__ = ["background_nursery", "shielded_nursery"]


@asynccontextmanager
async def background_nursery() -> AsyncIterator[trio.Nursery]:
    """Yield a nursery whose tasks are cancelled when the block exits.

    >>> async def main():
    ...     async with background_nursery() as nursery:
    ...         nursery.start_soon(trio.sleep_forever)
    ...         raise KeyError("mine")
    >>> trio.run(main)
    Traceback (most recent call last):
    ...
    KeyError: 'mine'
    """
    raised: BaseException | None = None
    try:
        async with trio.open_nursery() as nursery:
            try:
                yield nursery
            except BaseException as exc:
                raised = exc
                raise
            finally:
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        if raised is not None and len(group.exceptions) == 1 and group.exceptions[0] is raised:
            raise raised from raised.__cause__
        raise


@asynccontextmanager
async def shielded_nursery() -> AsyncIterator[trio.Nursery]:
    """Yield a nursery that a cancellation of the block does not reach; its tasks are
    cancelled when the block exits. Like :func:`background_nursery`, the block's own
    exception comes out as it was raised.

    For servers: a stop arrives as a cancellation of the block, and the calls in progress
    must live on through the orderly stop the block's cleanup performs (drain, final
    statuses, GOAWAY) instead of dying at once.

    >>> async def main():
    ...     with trio.CancelScope() as scope:
    ...         async with shielded_nursery() as nursery:
    ...             done = trio.Event()
    ...             nursery.start_soon(done.wait)
    ...             scope.cancel()
    ...             await trio.lowlevel.checkpoint_if_cancelled()
    ...     return scope.cancelled_caught
    >>> trio.run(main)
    True
    """
    async with background_nursery() as outer:
        inner: trio.Nursery = await outer.start(_hold_shielded)
        try:
            yield inner
        finally:
            inner.cancel_scope.cancel()


async def _hold_shielded(*, task_status: trio.TaskStatus[trio.Nursery]) -> None:
    async with trio.open_nursery() as nursery:
        nursery.cancel_scope.shield = True
        task_status.started(nursery)
        await trio.sleep_forever()
