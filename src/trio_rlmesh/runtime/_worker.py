"""Where blocking user code runs: a dedicated worker thread per user object, or inline.

Theory of operation. A model's predict corners, a Gymnasium env's reset/step/close,
a model's load/close are *user code*: ordinary blocking Python that may take a
microsecond or hang forever. Run on the trio thread, a hung call can never be
interrupted: no deadline fires, Ctrl-C is not seen, no report is written. So every
user object gets a :class:`Worker`, and every call into the object goes through it:

* :class:`ThreadWorker` (``user_code="thread"``, the default) owns one daemon thread
  for the object's whole life, so the object's calls run one at a time, in the order
  they were made, always on the same thread (many simulators are thread-affine). A
  call is handed over with ``queue.SimpleQueue.put``. When no other task is ready to
  run, the caller then waits for it *synchronously* for a short window (``sync_wait``,
  250 µs by default): a quick call (most env steps and predicts) comes back through a
  ``threading.Lock`` in two thread switches. A call that outlasts the window parks the
  task, and the thread posts the result back with ``TrioToken.run_sync_soon`` +
  ``trio.lowlevel.reschedule``. No thread pool, no capacity limiter, no context copy.
  ``bench/bench_worker.py`` measures both paths against ``trio.to_thread.run_sync``.
* :class:`InlineWorker` (``user_code="inline"``) calls the object on the trio thread.
  It is the fastest path (:meth:`Worker.run` then never yields, which adapters report
  through their ``runs_inline``), but nothing can interrupt a call that blocks.
* :class:`AdaptiveWorker` (``user_code="auto"``: env servers, and models run against a
  served env) runs chosen operations (``env.step``, ``model.predict``) inline while
  :class:`InlinePolicy` finds the object's recent calls quick,
  and everything else on a :class:`ThreadWorker`. It trades the guarantee that a call
  never blocks the loop for the speed of inline calls, bounded as its docstring says.

Cancellation. When the trio caller of :meth:`ThreadWorker.run` is cancelled (a
deadline, Ctrl-C, the run's scope), it is released at once: the call is *abandoned*.
Its thread stays occupied until the user code returns; the late result (or error) is
dropped and logged. (Trio cannot deliver a cancel during the short synchronous wait: a
deadline fires at most ``sync_wait`` late in real time. The thread worker's methods are
protected from ``KeyboardInterrupt`` the way trio's own internals are, so Ctrl-C arrives
at the caller's next checkpoint, at most ``sync_wait`` later, and never between handing a
call over and taking it back; another signal handler that raises during the wait abandons
the call.)

While an abandoned call still runs, every new call on that worker fails at once with
:class:`WorkerStuck`, naming the operation that is stuck and for how long. It never
queues behind it (the hang may be forever), and it never starts a second thread (the
object is in the middle of a call; touching it from another thread is what
thread-affine code cannot take). When the stuck call returns, the worker serves calls
again. Calls made while another call is *running* (not abandoned) wait their turn in
order; if that call is then abandoned, they fail with :class:`WorkerStuck` too.

Closing (:meth:`Worker.aclose`) runs the object's close as the worker's last call, then
lets the thread end. It never joins the thread: closing a worker whose call is stuck
does not run the close (the object is busy) and raises :class:`WorkerStuck`; the
thread ends when the stuck call returns, or with the process (the thread is a daemon,
so interpreter exit never waits for it).

This module imports only trio (with its ``outcome`` dependency) and the standard
library, so any layer can use it.
"""

from __future__ import annotations

import abc
import dataclasses
import logging
import queue
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Collection
from typing import Any, Final, Literal, TypeVar

import outcome
import trio

__all__ = [
    "SERVING_USER_CODE_MODES",
    "USER_CODE_MODES",
    "AdaptiveWorker",
    "InlinePolicy",
    "InlineWorker",
    "ServingUserCode",
    "ThreadWorker",
    "UserCode",
    "Worker",
    "WorkerClosed",
    "WorkerStatistics",
    "WorkerStuck",
    "WorkerUnavailable",
    "busy_worker_threads",
    "check_serving_user_code",
    "check_user_code",
    "new_worker",
]

_T = TypeVar("_T")
_E = TypeVar("_E", bound=BaseException)
_log = logging.getLogger("trio_rlmesh.worker")

WORKER_THREAD_PREFIX: Final = "trio-rlmesh worker: "
"""How a :class:`ThreadWorker`'s thread is named, before the worker's own name."""

UserCode = Literal["thread", "inline"]
"""Where user code runs: ``"thread"`` (a dedicated worker thread) or ``"inline"``."""

USER_CODE_MODES: Final[tuple[str, ...]] = ("thread", "inline")

ServingUserCode = Literal["auto", "thread", "inline"]
"""Where a server runs user code: ``"auto"`` (an :class:`AdaptiveWorker`) or a :data:`UserCode`."""

SERVING_USER_CODE_MODES: Final[tuple[str, ...]] = ("auto", "thread", "inline")


def check_user_code(value: object) -> UserCode:
    """``value`` as a :data:`UserCode`, or :class:`ValueError` naming the choices."""
    if value == "thread":
        return "thread"
    if value == "inline":
        return "inline"
    raise ValueError(f"user_code must be 'thread' or 'inline', got {value!r}")


def check_serving_user_code(value: object) -> ServingUserCode:
    """``value`` as a :data:`ServingUserCode`, or :class:`ValueError` naming the choices."""
    if value == "auto":
        return "auto"
    if value in USER_CODE_MODES:
        return check_user_code(value)
    raise ValueError(f"user_code must be 'auto', 'thread' or 'inline', got {value!r}")


class WorkerUnavailable(Exception):
    """A call could not start on a worker (base of :class:`WorkerStuck`, :class:`WorkerClosed`).

    Adapters turn it into their own error class with :meth:`as_error`.
    """

    code = "UNAVAILABLE"
    """The wire error code name adapters report it with."""

    def __init__(self, message: str, *, worker: str, operation: str) -> None:
        super().__init__(message)
        self.worker = worker
        """The worker's name (the user object it serves)."""
        self.operation = operation
        """The operation that was refused."""

    def as_error(self, error_class: Callable[..., _E]) -> _E:
        """This refusal as ``error_class`` (an ``EnvError``/``ModelError``), chained to it."""
        error = error_class(str(self), recoverable=False, operation=self.operation, code=self.code)
        error.__cause__ = self
        return error


class WorkerStuck(WorkerUnavailable):
    """An abandoned call still occupies the worker's thread, so nothing else can run there."""

    code = "BUSY"

    def __init__(
        self, *, worker: str, operation: str, stuck_operation: str, stuck_for: float
    ) -> None:
        super().__init__(
            f"{worker}: {operation} cannot run: {stuck_operation} is still running in user "
            f"code, {stuck_for:.1f}s after its caller gave up on it (a hung call cannot be "
            "interrupted; this object refuses calls until it returns)",
            worker=worker,
            operation=operation,
        )
        self.stuck_operation = stuck_operation
        """The abandoned operation that has not returned yet."""
        self.stuck_for = stuck_for
        """Real seconds since that operation was abandoned."""


class WorkerClosed(WorkerUnavailable):
    """The worker was closed before (or while) the call waited for its turn."""

    code = "CLOSED"

    def __init__(self, *, worker: str, operation: str) -> None:
        super().__init__(
            f"{worker}: {operation} cannot run: the object was closed",
            worker=worker,
            operation=operation,
        )


@dataclasses.dataclass(frozen=True)
class WorkerStatistics:
    """A snapshot of a worker's counters (see :meth:`Worker.statistics`)."""

    calls: int
    """Calls that started (ran or are running) in user code."""
    parked: int
    """Of those, calls whose caller parked and was woken through trio (thread mode only);
    the others were handed back inside the short synchronous wait, or ran inline."""
    abandoned: int
    """Calls whose caller gave up (cancelled) before the user code returned."""
    stuck_operation: str | None
    """The abandoned operation still occupying the worker, if any."""


class Worker(abc.ABC):
    """Runs one user object's blocking calls (see the module docstring)."""

    user_code: ServingUserCode
    """``"thread"``, ``"inline"`` or ``"auto"``."""

    def __init__(self, name: str) -> None:
        self.name = name
        """How errors and the thread name the user object (``"env CartPole-v1"``)."""
        self._closed = False
        self._calls = 0
        self._parked = 0
        self._abandoned_calls = 0

    def statistics(self) -> WorkerStatistics:
        """The worker's counters so far."""
        return WorkerStatistics(
            self._calls, self._parked, self._abandoned_calls, self.stuck_operation
        )

    @property
    def closed(self) -> bool:
        """Whether :meth:`aclose` has begun."""
        return self._closed

    @property
    def stuck_operation(self) -> str | None:
        """The abandoned operation still occupying the worker, if any."""
        return None

    def runs_inline(self, operation: str) -> bool:
        """Whether a call of ``operation`` made now would run on the trio thread (:meth:`run`
        then does not yield)."""
        return False

    @abc.abstractmethod
    async def run(self, operation: str, fn: Callable[..., _T], *args: Any) -> _T:
        """Call ``fn(*args)`` as this object's next call; ``operation`` names it in errors.

        Raises:
            WorkerStuck: an abandoned call still occupies the worker.
            WorkerClosed: the worker was closed.
            BaseException: whatever ``fn`` raised.
        """

    @abc.abstractmethod
    async def aclose(
        self, operation: str = "close", fn: Callable[..., object] | None = None, *args: Any
    ) -> None:
        """Run ``fn(*args)`` (the object's close) as the last call, then retire the worker.

        Idempotent: only the first call runs ``fn``. Bound it with your own cancel scope;
        a close that hangs is abandoned like any call, and the worker is closed anyway.

        Raises:
            WorkerStuck: an abandoned call still occupies the worker, so ``fn`` did not
                run (the worker is closed all the same).
            BaseException: whatever ``fn`` raised.
        """


def new_worker(
    user_code: ServingUserCode | str, name: str, *, inline_operations: Collection[str] = ()
) -> Worker:
    """A :class:`ThreadWorker`, an :class:`InlineWorker` or (``"auto"``) an
    :class:`AdaptiveWorker` that may run ``inline_operations`` inline."""
    mode = check_serving_user_code(user_code)
    if mode == "thread":
        return ThreadWorker(name)
    if mode == "auto":
        return AdaptiveWorker(name, inline_operations=inline_operations)
    return InlineWorker(name)


class InlineWorker(Worker):
    """Calls the object on the trio thread: fastest, but a blocking call blocks the loop.

    :meth:`run` does not checkpoint; a call that never returns cannot be interrupted.
    """

    user_code: UserCode = "inline"

    def runs_inline(self, operation: str) -> bool:
        return not self._closed

    async def run(self, operation: str, fn: Callable[..., _T], *args: Any) -> _T:
        if self._closed:
            raise WorkerClosed(worker=self.name, operation=operation)
        self._calls += 1
        return fn(*args)

    async def aclose(
        self, operation: str = "close", fn: Callable[..., object] | None = None, *args: Any
    ) -> None:
        if self._closed:
            return
        self._closed = True
        if fn is not None:
            self._calls += 1
            fn(*args)


class _Job:
    """One call in flight on a :class:`ThreadWorker`.

    Delivery is decided by whoever takes ``claim`` first: the thread, when the caller
    still waits synchronously (it then releases ``done``), or the caller, when it gives
    up waiting synchronously (the thread then posts the result back through trio).
    """

    __slots__ = (
        "abandoned_at",
        "args",
        "claim",
        "done",
        "elapsed_ns",
        "fn",
        "operation",
        "outwaited",
        "result",
        "task",
        "token",
        "worker",
    )

    def __init__(
        self,
        worker: ThreadWorker | None,
        operation: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        task: trio.lowlevel.Task | None,
        token: trio.lowlevel.TrioToken | None,
    ) -> None:
        self.worker = worker
        self.operation = operation
        self.fn = fn
        self.args = args
        self.task = task
        self.token = token
        self.claim = threading.Lock()
        self.done = threading.Lock()
        self.done.acquire()
        self.result: outcome.Outcome[Any] | None = None
        self.elapsed_ns = 0
        """Time the user code took, measured on the worker thread."""
        self.outwaited = False
        """Whether the caller's synchronous wait ran out before the call finished."""
        self.abandoned_at: float | None = None
        """``time.monotonic()`` when the caller gave up; ``None`` while it waits."""

    def abort(self, _raise_cancel: Any) -> trio.lowlevel.Abort:
        # The caller is cancelled: let it go now; the thread finishes the call alone.
        self.abandoned_at = time.monotonic()
        assert self.worker is not None
        self.worker._abandoned(self)
        return trio.lowlevel.Abort.SUCCEEDED


_RESERVED: Final = _Job(None, "", lambda: None, (), None, None)
"""Placeholder in ``ThreadWorker._current``: the worker was handed to a woken waiter."""

_STOP: Final = object()
"""Queued to end a worker thread."""

SYNC_WAIT: Final = 250e-6
"""Default :attr:`ThreadWorker.sync_wait`, in seconds."""


def _serve(jobs: queue.SimpleQueue[Any]) -> None:
    """A worker thread's loop. It holds no reference to its worker between calls."""
    clock = time.perf_counter_ns
    while True:
        job = jobs.get()
        if job is _STOP:
            return
        started = clock()
        job.result = outcome.capture(job.fn, *job.args)
        job.elapsed_ns = clock() - started
        if job.claim.acquire(False):
            # The caller is still blocked in its short synchronous wait.
            job.done.release()
        else:
            try:
                job.token.run_sync_soon(job.worker._deliver, job)
            except trio.RunFinishedError:
                # The trio run that made the call is over; nobody waits for the result.
                job.worker._orphaned(job)
        del job


class _TaskInLine:
    """A task waiting for its turn on the worker, and the operation it will run."""

    __slots__ = ("operation", "task")

    def __init__(self, task: trio.lowlevel.Task, operation: str) -> None:
        self.task = task
        self.operation = operation


class ThreadWorker(Worker):
    """Runs the object's calls in order on one dedicated daemon thread (started lazily).

    Args:
        name: how errors and the thread name the object.
        sync_wait: how long (seconds) a call first waits for the thread *synchronously*,
            blocking the event loop, before it parks the task and lets trio run other
            work until the thread posts the result back. Most env steps and predicts
            finish within it, and then the hand-off costs two thread switches instead
            of a full trip through trio's scheduler and wake-up socket (about half,
            see ``bench/bench_worker.py``). The loop stalls for at most this long per
            call, and only when no other task is ready to run; a worker whose last call
            outlasted the window skips the wait until a call is fast again. ``0`` always
            parks. (So :meth:`run` is always a cancel point, but a schedule point only
            when it parks.)

    Example::

        worker = ThreadWorker("env CartPole-v1")
        with trio.fail_after(2):  # abandons a hung step after 2 s
            obs, reward, terminated, truncated, info = await worker.run(
                "env.step", env.step, action
            )
        with trio.move_on_after(5):
            await worker.aclose("env.close", env.close)
    """

    user_code: UserCode = "thread"

    def __init__(self, name: str, *, sync_wait: float = SYNC_WAIT) -> None:
        super().__init__(name)
        if not sync_wait >= 0:
            raise ValueError(f"sync_wait must be >= 0 seconds, got {sync_wait!r}")
        self.sync_wait = sync_wait
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._current: _Job | None = None
        self._waiters: deque[_TaskInLine] = deque()
        self._fast = sync_wait > 0
        """Whether the next call waits synchronously first (the last one was quick)."""

    @property
    def stuck_operation(self) -> str | None:
        current = self._current
        if current is not None and current.abandoned_at is not None:
            return current.operation
        return None

    @property
    def idle(self) -> bool:
        """Whether a call made now would start at once: open, no call running, queued or
        abandoned here."""
        return self._current is None and not self._waiters and not self._closed

    @trio.lowlevel.enable_ki_protection
    async def run(self, operation: str, fn: Callable[..., _T], *args: Any) -> _T:
        if not self.idle:
            await self._wait_turn(operation)
        else:
            # Never start user code for a caller that is already cancelled.
            await trio.lowlevel.checkpoint_if_cancelled()
        job = _Job(
            self,
            operation,
            fn,
            args,
            trio.lowlevel.current_task(),
            trio.lowlevel.current_trio_token(),
        )
        self._current = job
        self._calls += 1
        if self._thread is None:
            self._start_thread()
        if not self._fast or trio.lowlevel.current_statistics().tasks_runnable:
            # Park at once: the last call was slow, or other tasks are ready to run and
            # blocking the loop would hold them up. The thread posts the result back.
            job.claim.acquire()
            self._jobs.put(job)
        else:
            self._jobs.put(job)
            if self._wait_sync(job):
                self._current = None
                self._next()
                result: _T = job.result.unwrap()  # type: ignore[union-attr]
                return result
        self._parked += 1
        return await trio.lowlevel.wait_task_rescheduled(job.abort)  # type: ignore[no-any-return]

    def _wait_sync(self, job: _Job) -> bool:
        """Block up to ``sync_wait`` for ``job``; False (and the claim taken) if it runs on."""
        try:
            if job.done.acquire(True, self.sync_wait):
                return True
            if job.claim.acquire(False):
                job.outwaited = True
                self._fast = False
                return False
            # The thread finished just now and is releasing ``done``.
            job.done.acquire()
            return True
        except BaseException:
            # A signal handler raised while we were blocked (not KeyboardInterrupt: run is
            # KI-protected, so trio defers that to the next checkpoint).
            if job.claim.acquire(False):
                job.abandoned_at = time.monotonic()
                self._abandoned(job)
            else:
                job.done.acquire()
                self._current = None
                self._next()
            raise

    @trio.lowlevel.enable_ki_protection
    async def aclose(
        self, operation: str = "close", fn: Callable[..., object] | None = None, *args: Any
    ) -> None:
        if self._closed:
            return
        try:
            if fn is not None:
                await self.run(operation, fn, *args)
        finally:
            self._closed = True
            self._refuse_waiters()
            if self._thread is not None:
                # Ends the thread after the call in flight, if any; never joined.
                self._jobs.put(_STOP)

    # -- turn-taking (trio thread) ---------------------------------------------------------

    def _refusal(self, operation: str) -> WorkerUnavailable | None:
        if self._closed:
            return WorkerClosed(worker=self.name, operation=operation)
        current = self._current
        if current is not None and current.abandoned_at is not None:
            return WorkerStuck(
                worker=self.name,
                operation=operation,
                stuck_operation=current.operation,
                stuck_for=time.monotonic() - current.abandoned_at,
            )
        return None

    async def _wait_turn(self, operation: str) -> None:
        """Return once this task owns the worker; raise if it cannot get it."""
        refusal = self._refusal(operation)
        if refusal is not None:
            raise refusal
        waiter = _TaskInLine(trio.lowlevel.current_task(), operation)
        self._waiters.append(waiter)

        def abort(_raise_cancel: Any) -> trio.lowlevel.Abort:
            self._waiters.remove(waiter)
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)
        # Woken with the worker reserved for us; a cancel that arrived meanwhile must
        # hand it on rather than start a call nobody waits for.
        try:
            await trio.lowlevel.checkpoint_if_cancelled()
        except BaseException:
            self._current = None
            self._next()
            raise

    def _next(self) -> None:
        """The worker is free: hand it to the first waiter, or refuse them all."""
        if not self._waiters:
            return
        if self._closed:
            self._refuse_waiters()
            return
        waiter = self._waiters.popleft()
        self._current = _RESERVED
        trio.lowlevel.reschedule(waiter.task, outcome.Value(None))

    def _refuse_waiters(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            refusal = self._refusal(waiter.operation)
            assert refusal is not None
            trio.lowlevel.reschedule(waiter.task, outcome.Error(refusal))

    def _abandoned(self, job: _Job) -> None:
        self._abandoned_calls += 1
        # Everyone queued behind a call that may never return is told so now.
        self._refuse_waiters()

    def _deliver(self, job: _Job) -> None:
        """The thread finished ``job`` (runs on the trio thread)."""
        assert job.result is not None
        if job.abandoned_at is None:
            assert job.task is not None
            trio.lowlevel.reschedule(job.task, job.result)
        else:
            self._report_late(job)
        if self.sync_wait > 0:
            # A call the caller's wait gave up on is slow, however little of the window the
            # thread itself measured (it may have started late on a loaded machine).
            self._fast = not job.outwaited and job.elapsed_ns < self.sync_wait * 1e9
        if self._current is job:
            self._current = None
            self._next()

    def _orphaned(self, job: _Job) -> None:
        """The thread finished ``job`` after its trio run ended (runs on the worker thread)."""
        self._report_late(job)
        if self._current is job:
            self._current = None

    def _report_late(self, job: _Job) -> None:
        late = time.monotonic() - job.abandoned_at if job.abandoned_at is not None else 0.0
        error = job.result.error if isinstance(job.result, outcome.Error) else None
        _log.warning(
            "%s: abandoned %s returned %.1fs after its caller gave up; its %s was dropped",
            self.name,
            job.operation,
            late,
            f"error ({type(error).__name__}: {error})" if error is not None else "result",
        )

    def _start_thread(self) -> None:
        thread = threading.Thread(
            target=_serve,
            args=(self._jobs,),
            name=f"{WORKER_THREAD_PREFIX}{self.name}",
            daemon=True,
        )
        thread.start()
        self._thread = thread
        # A worker dropped without aclose still ends its idle thread.
        weakref.finalize(self, self._jobs.put, _STOP)


AUTO_THRESHOLD: Final = 5e-3
"""Default :attr:`InlinePolicy.threshold`: a call this long (seconds) or longer is slow.

CPython's default thread switch interval (``sys.getswitchinterval()``): a call shorter than
that which holds the GIL keeps the event loop waiting about as long on a worker thread as
it does inline, since the loop needs the GIL to run."""
AUTO_PROMOTE: Final = 8
"""Default :attr:`InlinePolicy.promote`: quick calls in a row before going inline."""
AUTO_PROMOTE_MAX: Final = 1024
"""The most quick calls in a row :class:`InlinePolicy` ever asks for."""
AUTO_RELAX: Final = 8
"""After this many times :attr:`InlinePolicy.needed` quick calls in a row, it halves."""


class InlinePolicy:
    """Decides, from the durations of a worker's recent calls, whether the next runs inline.

    Pure bookkeeping (no clock, no I/O): its decisions are a function of the durations fed
    to :meth:`observe`.

    * A worker starts on its thread. After :attr:`needed` quick calls in a row (each
      shorter than ``threshold``; ``promote`` at first), the next calls run inline.
    * Any slow call (``threshold`` or longer, or abandoned) sends the worker back to its
      thread and restarts the count. If that slow call ran inline (it blocked the event
      loop), :attr:`needed` doubles, up to 1024.
    * After ``8 × needed`` quick calls in a row, :attr:`needed` halves (down to
      ``promote``): a machine so busy that a quick call is now and then descheduled for
      longer than the threshold does not keep a quick object on its thread for good.

    So a slow inline call blocks the loop at most once per :attr:`needed` quick calls,
    and an object whose slow calls recur spends most of its calls on its thread.

    Args:
        threshold: seconds; a call that takes this long or longer is slow.
        promote: quick calls in a row before calls first run inline (at least 1).
    """

    __slots__ = ("_needed", "_streak", "inline", "promote", "threshold")

    def __init__(self, threshold: float = AUTO_THRESHOLD, promote: int = AUTO_PROMOTE) -> None:
        if not threshold > 0:
            raise ValueError(f"threshold must be > 0 seconds, got {threshold!r}")
        if promote < 1:
            raise ValueError(f"promote must be at least 1, got {promote!r}")
        self.threshold = threshold
        self.promote = promote
        self._needed = promote
        self._streak = 0
        self.inline = False
        """Whether the next call runs inline."""

    @property
    def needed(self) -> int:
        """Quick calls in a row needed (now) before calls run inline."""
        return self._needed

    def observe(self, elapsed: float | None, *, ran_inline: bool) -> None:
        """Account one finished call: ``elapsed`` seconds in user code (``None``: abandoned)."""
        if elapsed is not None and elapsed < self.threshold:
            streak = self._streak = self._streak + 1
            if streak >= self._needed:
                self.inline = True
                if streak >= AUTO_RELAX * self._needed and self._needed > self.promote:
                    self._needed = max(self._needed // 2, self.promote)
                    self._streak = self._needed
            return
        self._streak = 0
        self.inline = False
        if ran_inline:
            self._needed = min(self._needed * 2, AUTO_PROMOTE_MAX)


def _timed(
    clock: Callable[[], float], elapsed: list[float], fn: Callable[..., _T], args: tuple[Any, ...]
) -> _T:
    """Call ``fn(*args)`` (on the worker thread) and put its duration in ``elapsed``."""
    started = clock()
    try:
        return fn(*args)
    finally:
        elapsed.append(clock() - started)


class AdaptiveWorker(Worker):
    """Runs quick calls inline and the others on a :class:`ThreadWorker` (``user_code="auto"``).

    Only calls named in ``inline_operations`` (``env.step`` for an env server,
    ``model.predict`` for a model) may run inline, and only while :class:`InlinePolicy`
    says so from the durations of this worker's recent calls of those operations, and
    while the thread is idle (no call running, queued or abandoned there). Everything else
    (the first calls, reset, render, close, calls after a slow one) runs on the thread
    exactly as :class:`ThreadWorker` runs it. The object's calls still run one at a time,
    in call order, but not always on the same thread: thread-affine code needs
    ``"thread"``.

    An inline call cannot be interrupted: the event loop is blocked for as long as it runs
    (one unexpectedly slow call blocks it once, for its whole duration; a call that hangs
    after a run of quick ones hangs the loop). It never starts for a caller that is
    already cancelled.

    Args:
        name: how errors and the thread name the object.
        inline_operations: the operations that may run inline.
        policy: when they do (default: ``InlinePolicy()``, 5 ms threshold).

    Durations are measured with the trio run's clock (``trio.lowlevel.current_clock()``),
    on whichever thread ran the call, so tests decide them with a ``MockClock``.
    """

    user_code: ServingUserCode = "auto"

    def __init__(
        self,
        name: str,
        *,
        inline_operations: Collection[str],
        policy: InlinePolicy | None = None,
    ) -> None:
        super().__init__(name)
        self.policy = InlinePolicy() if policy is None else policy
        self.inline_operations = frozenset(inline_operations)
        self.thread = ThreadWorker(name)
        """Where calls that do not run inline go."""

    def statistics(self) -> WorkerStatistics:
        on_thread = self.thread.statistics()
        return WorkerStatistics(
            self._calls + on_thread.calls,
            on_thread.parked,
            on_thread.abandoned,
            on_thread.stuck_operation,
        )

    @property
    def closed(self) -> bool:
        return self.thread.closed

    @property
    def stuck_operation(self) -> str | None:
        return self.thread.stuck_operation

    def runs_inline(self, operation: str) -> bool:
        """Whether a call of ``operation`` made now would run inline."""
        return self.policy.inline and operation in self.inline_operations and self.thread.idle

    async def run(self, operation: str, fn: Callable[..., _T], *args: Any) -> _T:
        if operation not in self.inline_operations:
            return await self.thread.run(operation, fn, *args)
        if self.runs_inline(operation):
            await trio.lowlevel.checkpoint_if_cancelled()
            return self._call_inline(operation, fn, *args)
        clock = trio.lowlevel.current_clock().current_time
        elapsed: list[float] = []
        try:
            return await self.thread.run(operation, _timed, clock, elapsed, fn, args)
        finally:
            # A refused call (closed, stuck) never ran and says nothing about the object's
            # speed; one abandoned or refused because a call is stuck counts as slow.
            if elapsed or self.thread._current is not None:
                self.policy.observe(elapsed[0] if elapsed else None, ran_inline=False)

    def _call_inline(self, operation: str, fn: Callable[..., _T], *args: Any) -> _T:
        clock = trio.lowlevel.current_clock().current_time
        self._calls += 1
        started = clock()
        try:
            return fn(*args)
        finally:
            self.policy.observe(clock() - started, ran_inline=True)

    async def aclose(
        self, operation: str = "close", fn: Callable[..., object] | None = None, *args: Any
    ) -> None:
        await self.thread.aclose(operation, fn, *args)


def busy_worker_threads(wait: float = 0.0) -> list[str]:
    """The names of the workers whose thread is still alive after at most ``wait`` seconds.

    Once every worker is closed, a thread still alive is running a call it was abandoned
    in (a hung env step or predict): the process exits with it running (it is a daemon).
    """
    deadline = time.monotonic() + wait
    alive: list[str] = []
    for thread in threading.enumerate():
        if thread.name.startswith(WORKER_THREAD_PREFIX):
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                alive.append(thread.name[len(WORKER_THREAD_PREFIX) :])
    return alive
