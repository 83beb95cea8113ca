"""Every fixed time bound of the package, in one place (seconds).

A call's own deadline comes from the caller (``RuntimeLimits``, a request's ``timeout_ms``)
and is enforced once, where the call's I/O is, with no grace on top; these are the bounds
nobody passes in: how long a close, a stop or a goodbye may take. :func:`in_time` is the one
rule for an answer that could not be interrupted and comes back at its deadline, and
:func:`fmt_seconds` the one way a bound is written in a message.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "CLOSE_TIMEOUT",
    "GIL_SWITCH_INTERVAL",
    "GOAWAY_GRACE",
    "PORTAL_SHUTDOWN_GRACE",
    "SERVER_CLOSE_GRACE",
    "SYNC_CLOSE_TIMEOUT",
    "fmt_seconds",
    "in_time",
]

CLOSE_TIMEOUT: Final = 5.0
"""How long a close nobody bounded may take: an env's or a model's own ``close()`` when its
server stops, and a client's close of its session."""

SERVER_CLOSE_GRACE: Final = 1.0
"""How long a stopping server waits for cancelled handlers and closing connections (their
last frames, GOAWAY) before aborting them."""

GOAWAY_GRACE: Final = 1.0
"""How long a connection a server closes (past a limit, idle, to make room) has for its
socket to take the GOAWAY before it is closed anyway (the peer may not be reading)."""

PORTAL_SHUTDOWN_GRACE: Final = 5.0
"""How long closing the last asyncio portal waits for its helper thread to finish."""

SYNC_CLOSE_TIMEOUT: Final = 10.0
"""How long a synchronous remote Gymnasium env's ``close()`` (and its exit-time finalizer)
waits for its trio thread to end."""

GIL_SWITCH_INTERVAL: Final = 0.0005
"""The longest the interpreter lets one thread hold the GIL while another waits for it, as
long as the grpclib backend's asyncio thread runs (Python's default is 0.005). Every call on
that backend crosses between the trio thread and the asyncio thread twice; with the asyncio
thread busy (a flood of frames on another connection, say), each crossing could wait for a
whole interval."""


def in_time(finished: float, deadline: float) -> bool:
    """Whether an answer that came back at ``finished`` met ``deadline`` (trio's clock).

    An answer exactly at its deadline is in time: the deadline is the last instant a call
    may end, as ``RuntimeLimits`` describes it. Only calls nothing could interrupt (an
    inline env or model call) need the check; every other call is cut off at the deadline.
    """
    return finished <= deadline


def fmt_seconds(seconds: float | None) -> str:
    """A bound as messages write it: ``250ms``, ``2.5s``, ``no deadline``."""
    if seconds is None:
        return "no deadline"
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    return f"{seconds:g}s"
