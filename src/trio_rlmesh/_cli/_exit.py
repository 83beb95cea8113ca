"""How a command ends: exit statuses, the one error-to-message path, and signals.

Every command of the ``trio-rlmesh`` script ends through this module: errors are unwrapped
from the exception groups nurseries raise (:func:`unwrap`) and turned into one line and an
exit status (:func:`describe`); SIGINT and SIGTERM are watched by one task
(:func:`watch_signals`).
"""

from __future__ import annotations

import os
import signal
import traceback
from collections.abc import Callable
from typing import Final

import attrs
import trio

from .._errors import Error, SpecError

__all__ = [
    "EXIT_CANCELLED",
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_USAGE",
    "Failure",
    "UsageError",
    "describe",
    "unwrap",
    "watch_signals",
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


def describe(exc: BaseException) -> Failure:
    """One line and an exit status for ``exc`` (unwrapped first).

    * a :class:`~trio_rlmesh.SpecError` raised before the run started (a bad argument, a
      target that cannot be loaded, an option the env cannot run with): exit status 2;
    * any other :class:`~trio_rlmesh.Error` (env, model, transport, protocol, timeout):
      exit status 1, its message as it is;
    * anything else is unexpected: exit status 1, the exception's class and message (and
      its traceback on stderr when ``TRIO_RLMESH_DEBUG`` is set).
    """
    cause = unwrap(exc)
    text = _one_line(str(cause))
    reason = f"{type(cause).__name__}: {text}"
    if isinstance(cause, SpecError) and cause.report is None:
        return Failure(text, EXIT_USAGE, reason)
    if isinstance(cause, Error):
        return Failure(text, EXIT_FAILED, reason)
    if os.environ.get(DEBUG_VARIABLE):
        traceback.print_exception(cause)
        return Failure(reason, EXIT_FAILED, reason)
    return Failure(f"{reason} (set {DEBUG_VARIABLE}=1 for the traceback)", EXIT_FAILED, reason)


def _one_line(text: str) -> str:
    """A message with its lines joined by ``; `` (some errors add detail lines).

    >>> _one_line("predict failed\\n  model input: float32[4]\\n")
    'predict failed; model input: float32[4]'
    """
    return "; ".join(line.strip() for line in text.splitlines() if line.strip())


async def watch_signals(
    on_signal: Callable[[signal.Signals], None],
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Call ``on_signal`` for the first SIGINT or SIGTERM, then return."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        task_status.started()
        async for signum in signals:
            on_signal(signal.Signals(signum))
            return
