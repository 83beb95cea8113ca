"""How a command ends: exit statuses, the one error-to-message path, and signals.

Every command of the ``trio-rlmesh`` script ends through this module: errors are unwrapped
from the exception groups nurseries raise (:func:`unwrap`) and turned into one line and an
exit status (:func:`describe`); SIGINT and SIGTERM go through one :class:`Interrupts`.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from types import FrameType
from typing import Final

import attrs
import trio

from .._errors import Error, SpecError
from ..model._internal import without_route_ids

__all__ = [
    "EXIT_CANCELLED",
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_USAGE",
    "Failure",
    "Interrupts",
    "UsageError",
    "describe",
    "unwrap",
]

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
EXIT_CANCELLED: Final = 130
"""A run cancelled by SIGINT or SIGTERM; a server stopped by SIGINT."""


DEBUG_VARIABLE: Final = "TRIO_RLMESH_DEBUG"
"""Set it (to anything but empty) to get the traceback of an unexpected error."""


class UsageError(SpecError):
    """A mistake on the command line (exit status 2); the message says what to do instead."""


def unwrap(exc: BaseException) -> BaseException:
    """The error that matters in what a nursery raised.

    Nurseries wrap errors in (nested) exception groups. The leaves are searched for the
    first :class:`~trio_rlmesh.Error`, else the first leaf that is not a cancellation;
    a group of cancellations alone is returned as is.
    """
    leaves = _leaves(exc)
    for leaf in leaves:
        if isinstance(leaf, Error):
            return leaf
    for leaf in leaves:
        if not isinstance(leaf, trio.Cancelled):
            return leaf
    return exc


def _leaves(exc: BaseException) -> list[BaseException]:
    inner = getattr(exc, "exceptions", None)
    if not isinstance(inner, tuple):
        return [exc]
    return [leaf for member in inner for leaf in _leaves(member)]


@attrs.frozen
class Failure:
    """What a command prints and returns for an error."""

    message: str
    """One line, without the command prefix."""
    exit_code: int
    reason: str
    """The report's ``reason``: ``"<ErrorClass>: <message>"``."""


def describe(exc: BaseException, options: Mapping[str, str] | None = None) -> Failure:
    """One line and an exit status for ``exc`` (unwrapped first).

    * a :class:`~trio_rlmesh.SpecError` raised before the run started (a bad argument, a
      target that cannot be loaded, an option the env cannot run with): exit status 2;
    * any other :class:`~trio_rlmesh.Error` (env, model, transport, protocol, timeout):
      exit status 1, its message as it is, but for route ids (the report's ``reason``
      keeps them);
    * anything else is unexpected: exit status 1, the exception's class and message (and
      its traceback on stderr when ``TRIO_RLMESH_DEBUG`` is set).

    ``options`` maps the Python API's parameter names to the command's options: errors
    the API words for its callers (``drop episode_seeds``) name the option the command
    line user typed instead (``drop --seeds``).
    """
    cause = unwrap(exc)
    text = _in_words_of(options or {}, _one_line(str(cause)))
    reason = f"{type(cause).__name__}: {text}"
    # The report keeps the route ids that match the servers' logs; the line for a human
    # names envs by name only.
    if isinstance(cause, SpecError) and cause.report is None:
        return Failure(without_route_ids(text), EXIT_USAGE, reason)
    if isinstance(cause, Error):
        return Failure(without_route_ids(text), EXIT_FAILED, reason)
    if os.environ.get(DEBUG_VARIABLE):
        traceback.print_exception(cause)
        return Failure(reason, EXIT_FAILED, reason)
    return Failure(f"{reason} (set {DEBUG_VARIABLE}=1 for the traceback)", EXIT_FAILED, reason)


def _in_words_of(options: Mapping[str, str], text: str) -> str:
    """``text`` with each API parameter name of ``options`` replaced by its option.

    >>> _in_words_of({"episode_seeds": "--seeds"}, "drop episode_seeds, or RunLocalOptions.x")
    'drop --seeds, or RunLocalOptions.x'
    """
    if not options:
        return text
    # A whole name only: not a part of a longer one, nor an attribute (RunLocalOptions.x).
    names = "|".join(re.escape(name) for name in sorted(options, key=len, reverse=True))
    return re.sub(rf"(?<![\w.])({names})(?!\w)", lambda m: options[m.group()], text)


def _one_line(text: str) -> str:
    """A message with its lines joined by ``; `` (some errors add detail lines).

    >>> _one_line("predict failed\\n  model input: float32[4]\\n")
    'predict failed; model input: float32[4]'
    """
    return "; ".join(line.strip() for line in text.splitlines() if line.strip())


OnSignal = Callable[[signal.Signals], None]

LOOP_ANSWER: Final = 1.0
"""Seconds the trio loop has to take the first signal before the process ends anyway: a
loop that cannot run the signal's callback is held by user code running inline on it (an
env step or a predict that does not return), and nothing it would do can stop that."""


class Interrupts:
    """SIGINT and SIGTERM for one command: the first stops it, the next ends the process.

    The first signal is handed to the trio loop (:meth:`arm`'s callback, which cancels the
    run or stops the server) and starts a watchdog: if the loop has not taken it within
    :data:`LOOP_ANSWER` seconds (user code running inline holds the loop), or if the process
    is still alive ``grace`` seconds later (cleanup is stuck, or interpreter shutdown waits
    for a stuck worker thread), it ends the process (``grace=None``: a slow stop never
    does, as a server asked to drain without a limit must not be cut short). A second
    signal ends it at once. Ending the process writes the command's last words first
    (:meth:`last_words`: a run's finished episodes), unless its normal output is already
    written, and exits with ``exit_code(first signal)``.

    The handlers are plain ``signal.signal`` handlers, not trio's signal receiver: Python
    runs them in the main thread even while the trio loop is busy, or after ``trio.run``
    has returned, so the second signal always works. The first reaches the loop through
    ``TrioToken.run_sync_soon``, which is safe to call from a signal handler.
    """

    SIGNALS: Final = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, *, grace: float | None, exit_code: Callable[[signal.Signals], int]) -> None:
        self.grace = grace
        self.received: signal.Signals | None = None
        """The first signal, once one came."""
        self._exit_code = exit_code
        self._token: trio.lowlevel.TrioToken | None = None
        self._on_signal: OnSignal | None = None
        self._last_words: Callable[[], object] | None = None
        self._output = threading.Lock()
        self._status: int | None = None
        self._taken = threading.Event()
        """Set once the loop has run the first signal's callback."""
        self._loop_running = False

    @contextlib.contextmanager
    def installed(self) -> Iterator[Interrupts]:
        """Handle SIGINT and SIGTERM for the block (from the main thread only).

        The previous handlers come back afterwards, unless a signal came: then the process
        is on its way out, and a further signal must still end it at once.
        """
        previous = {sig: signal.signal(sig, self._handle) for sig in self.SIGNALS}
        try:
            yield self
        finally:
            if self.received is None:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

    def arm(self, on_signal: OnSignal) -> None:
        """From inside ``trio.run``: call ``on_signal`` (in the loop) for the first signal.

        A signal that came before is handed over at once.
        """
        self._token = trio.lowlevel.current_trio_token()
        self._on_signal = on_signal
        if self.received is not None:
            self._taken.set()
            on_signal(self.received)

    def disarm(self) -> None:
        """Stop handing signals to the loop (call before ``trio.run`` returns)."""
        self._token = None
        self._on_signal = None

    def last_words(self, write: Callable[[], object] | None) -> None:
        """What to write if the process has to be ended before its normal output."""
        self._last_words = write

    @contextlib.contextmanager
    def final_output(self, status: int) -> Iterator[None]:
        """Write the command's normal output in this block; ``status`` is its exit status.

        Once in here, ending the process writes no last words (the output is written, or
        being written) and exits with ``status``.
        """
        with self._output:
            self._last_words = None
            self._status = status
            yield

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        del frame
        if self.received is not None:
            self.exit_now(f"second {signal.Signals(signum).name}")
            return
        self.received = sig = signal.Signals(signum)
        token, on_signal = self._token, self._on_signal
        self._loop_running = token is not None and on_signal is not None
        threading.Thread(target=self._watchdog, name="trio-rlmesh-watchdog", daemon=True).start()
        if token is not None and on_signal is not None:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(self._take, on_signal, sig)

    def _take(self, on_signal: OnSignal, sig: signal.Signals) -> None:
        self._taken.set()
        on_signal(sig)

    def _watchdog(self) -> None:
        # Written here, not in the handler: a handler that writes could interrupt the main
        # thread in the middle of its own write to the same stream.
        name = self.received.name if self.received is not None else "the signal"
        grace = self.grace
        at_most = "" if grace is None else f" (at most {grace:g} s)"
        with contextlib.suppress(Exception):
            sys.stderr.write(
                f"trio-rlmesh: stopping after {name}{at_most}; send it again to exit now\n"
            )
            sys.stderr.flush()
        started = time.monotonic()
        answer = LOOP_ANSWER if grace is None else min(LOOP_ANSWER, grace)
        if self._loop_running and not self._taken.wait(answer):
            self.exit_now(
                f"the event loop did not take {name} within {LOOP_ANSWER:g} s (user code "
                "running inline on it has not returned, and is left running)"
            )
        if grace is None:
            return
        time.sleep(max(0.0, grace - (time.monotonic() - started)))
        self.exit_now(f"still stopping {grace:g} s after {name}")

    def exit_now(self, why: str) -> None:
        """End the process now: last words (if still owed), then ``os._exit``."""
        assert self.received is not None
        status = self._exit_code(self.received)
        # The normal output may be under way in the main thread, which may be the very
        # thread running this handler: wait for it a little, never forever.
        if self._output.acquire(timeout=1.0):
            words, self._last_words = self._last_words, None
            if self._status is not None:
                status = self._status
            with contextlib.suppress(Exception):
                sys.stderr.write(f"trio-rlmesh: {why}: exiting now\n")
                if words is not None:
                    words()
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(status)
