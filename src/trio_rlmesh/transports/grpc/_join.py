"""The Join-stream multiplexer both clients (env and model) use.

A Join stream carries many requests at once; replies come back in completion order and
are matched to their request by ``request_id``. Theory of operation:

* replies are pushed by the backend (:meth:`~._backend.ClientCall.deliver_to`), in its own
  task: each is decoded and completes the waiter registered under its id; a reply nobody
  waits for any more (its caller was cancelled or timed out) is counted as stale and
  dropped, which keeps the stream in sync;
* a request registers its waiter, then sends its message; the backends write a message
  whole even when its sender is cancelled, so the stream never carries half a message;
* when the stream ends or fails, every waiter fails with the cause, and the multiplexer
  stays failed: later requests fail at once with the same cause. Replies that arrived
  before the failure (an in-band error sent right before a reset) are still delivered.
* a request may carry a deadline: one watchdog task (in the nursery the multiplexer was
  given) fails overdue waiters with :class:`trio.TooSlowError`. It sleeps until the
  earliest deadline it knows of and is only moved when a request is due sooner, so a
  request pays a comparison, not a cancel scope of its own.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import attrs
import outcome
import trio

from ._backend import ClientCall
from ._status import ConnectionLost, again

__all__ = ["JoinMux", "JoinStatistics"]

_R = TypeVar("_R")


@attrs.frozen
class JoinStatistics:
    """A snapshot of one Join stream's traffic."""

    requests_sent: int
    """Requests written (including ConfigureEnv and Close for an env)."""
    replies_received: int
    """Replies read, stale ones included."""
    stale_replies: int
    """Replies dropped because nobody waited for their id any more."""
    in_flight: int
    """Requests waiting for their reply right now."""


class _PendingReply:
    """One request's pending reply: a task parked until the reader delivers an outcome."""

    __slots__ = ("deadline", "result", "task")

    def __init__(self, deadline: float) -> None:
        self.task: trio.lowlevel.Task | None = None
        self.result: outcome.Outcome[Any] | None = None
        self.deadline = deadline

    def deliver(self, result: outcome.Outcome[Any]) -> None:
        if self.result is not None:
            return
        self.result = result
        if self.task is not None:
            task, self.task = self.task, None
            trio.lowlevel.reschedule(task, result)

    async def wait(self) -> Any:
        if self.result is not None:
            await trio.lowlevel.checkpoint()
            return self.result.unwrap()
        self.task = trio.lowlevel.current_task()

        def abort(_: Any) -> trio.lowlevel.Abort:
            self.task = None
            return trio.lowlevel.Abort.SUCCEEDED

        return await trio.lowlevel.wait_task_rescheduled(abort)


class JoinMux(Generic[_R]):
    """Requests and replies on one Join call, matched by request id.

    Args:
        call: the open Join call.
        decode: turns a reply's bytes into a reply (raising a transport error if it can't).
        reply_id: the request id a reply answers.
        nursery: where the deadline watchdog runs (needed by requests with a deadline).
    """

    def __init__(
        self,
        call: ClientCall,
        decode: Callable[[bytes], _R],
        reply_id: Callable[[_R], str],
        nursery: trio.Nursery | None = None,
    ) -> None:
        self.call = call
        self._decode = decode
        self._reply_id = reply_id
        self._nursery = nursery
        self._alarm: trio.CancelScope | None = None
        """The watchdog's sleep; its deadline is the earliest request deadline it knows."""
        self._pending: dict[str, _PendingReply] = {}
        self._failure: BaseException | None = None
        self._finished = trio.Event()
        self.closing = False
        """Set before a deliberate end (Close), so the stream's end is not reported as a loss."""
        self.sent = 0
        self.received = 0
        self.stale = 0

    @property
    def failure(self) -> BaseException | None:
        """Why the stream failed, once it has."""
        return self._failure

    def statistics(self) -> JoinStatistics:
        return JoinStatistics(self.sent, self.received, self.stale, len(self._pending))

    def start(self) -> None:
        """Start receiving: replies are delivered by the backend as they arrive."""
        self.call.deliver_to(self._on_reply, self._on_end)

    def _on_reply(self, data: bytes) -> None:
        # Runs in the backend's own task: no task switch between a reply and its waiter.
        self.received += 1
        reply = self._decode(data)
        waiter = self._pending.pop(self._reply_id(reply), None)
        if waiter is None:
            self.stale += 1
        else:
            waiter.deliver(outcome.Value((reply, len(data))))

    def _on_end(self, end: BaseException | None) -> None:
        self._fail(end if end is not None else ConnectionLost("the server ended the Join stream"))
        self._finished.set()

    def _fail(self, failure: BaseException) -> None:
        if self._failure is None:
            self._failure = failure
        pending, self._pending = self._pending, {}
        for waiter in pending.values():
            waiter.deliver(outcome.Error(again(failure)))
        if self._alarm is not None:
            self._alarm.cancel()

    def _watch_deadline(self, deadline: float) -> None:
        alarm = self._alarm
        if alarm is None:
            if self._nursery is None:
                raise RuntimeError("a request with a deadline needs the multiplexer's nursery")
            self._alarm = trio.CancelScope(deadline=deadline)
            self._nursery.start_soon(self._watchdog, self._alarm)
        elif deadline < alarm.deadline:
            alarm.deadline = deadline

    async def _watchdog(self, alarm: trio.CancelScope) -> None:
        while True:
            with alarm:
                await trio.sleep_forever()
            if self._failure is not None:
                return
            now = trio.current_time()
            earliest = math.inf
            for request_id, waiter in list(self._pending.items()):
                if waiter.deadline <= now:
                    del self._pending[request_id]
                    waiter.deliver(outcome.Error(trio.TooSlowError()))
                else:
                    earliest = min(earliest, waiter.deadline)
            self._alarm = alarm = trio.CancelScope(deadline=earliest)

    async def request(
        self, request_id: str, data: bytes, *, end: bool = False, deadline: float = math.inf
    ) -> tuple[_R, int]:
        """Send one request and wait for its reply; returns the reply and its size.

        Raises:
            ValueError: ``request_id`` is already in flight.
            trio.TooSlowError: no reply by ``deadline`` (on trio's clock); a reply that
                comes later is dropped as stale.
            GrpcError, ConnectionLost, or the decode error: the stream failed.
        """
        # A caller cancelled before it starts sends nothing: the env must not step for a
        # request nobody will read the answer of.
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._failure is not None:
            raise again(self._failure)
        if request_id in self._pending:
            raise ValueError(f"request id {request_id!r} is already in flight")
        waiter = _PendingReply(deadline)
        if deadline != math.inf:
            self._watch_deadline(deadline)
        self._pending[request_id] = waiter
        try:
            await self.call.send_message(data, end=end)
            self.sent += 1
            reply: tuple[_R, int] = await waiter.wait()
            return reply
        except BaseException as exc:
            if isinstance(exc, ConnectionLost) and self._failure is not None:
                # A send that failed because the stream is gone: report why it went.
                raise again(self._failure) from None
            raise
        finally:
            if self._pending.get(request_id) is waiter:
                del self._pending[request_id]

    async def aclose(self, *, grace: float = 1.0) -> None:
        """Stop (after up to ``grace`` seconds for the server to end the stream, when
        closing) and cancel the call. Never raises."""
        with trio.CancelScope(shield=True):
            if self.closing and not self._finished.is_set():
                with trio.move_on_after(grace):
                    await self._finished.wait()
            with contextlib.suppress(Exception):
                await self.call.aclose()
            self._fail(ConnectionLost("the client closed the Join stream"))
