"""TrioThread: a Ctrl-C that lands anywhere in a call cancels that call and nothing else.

A real Ctrl-C is a signal whose ``KeyboardInterrupt`` the main thread raises at its next
bytecode boundary, wherever that is. On a loaded machine the caller can be preempted right
after it handed its call to the trio thread and before it starts waiting; these tests put the
interrupt exactly there (and before the hand-off), so the outcome does not depend on timing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import pytest
import trio

from trio_rlmesh.gym._thread import TrioThread


@asynccontextmanager
async def _open_log() -> AsyncIterator[list[str]]:
    yield []


async def _wait_until_cancelled(log: list[str]) -> None:
    log.append("started")
    try:
        await trio.sleep_forever()
    except trio.Cancelled:
        log.append("cancelled")
        raise


async def _note(log: list[str], text: str) -> str:
    log.append(text)
    return text


class _InterruptedAfterHandOff(TrioThread[list[str]]):
    """Ctrl-C arrives once the next call is queued on the trio thread, before its caller waits."""

    armed = False

    def _submit(self, job: Any) -> bool:
        submitted = super()._submit(job)
        if self.armed:
            self.armed = False
            raise KeyboardInterrupt
        return submitted


class _InterruptedBeforeHandOff(TrioThread[list[str]]):
    """Ctrl-C arrives before the next call reaches the trio thread."""

    armed = False

    def _submit(self, job: Any) -> bool:
        if self.armed:
            self.armed = False
            raise KeyboardInterrupt
        return super()._submit(job)


@contextmanager
def _interrupted_once(kind: type[TrioThread[list[str]]]) -> Iterator[TrioThread[list[str]]]:
    """A runner of ``kind``, armed to raise KeyboardInterrupt in its next call; its thread
    must end when it is closed."""
    runner = kind(_open_log, name="test interrupted", close_timeout=5)
    try:
        runner.armed = True  # type: ignore[attr-defined]
        yield runner
    finally:
        runner.close()
    assert not runner.thread.is_alive()


def test_ctrl_c_right_after_the_hand_off_cancels_the_call() -> None:
    with _interrupted_once(_InterruptedAfterHandOff) as runner:
        log = runner.resource
        with pytest.raises(KeyboardInterrupt):
            runner.call(_wait_until_cancelled, log)
        # The call ended (cancelled) before the interrupt went on: nothing runs unattended.
        assert log == ["started", "cancelled"]
        assert runner.call(_note, log, "next") == "next"
        assert log[-1] == "next"


def test_ctrl_c_before_the_hand_off_runs_nothing() -> None:
    with _interrupted_once(_InterruptedBeforeHandOff) as runner:
        log = runner.resource
        with pytest.raises(KeyboardInterrupt):
            runner.call(_note, log, "never")
        assert runner.call(_note, log, "next") == "next"
        assert log == ["next"]
