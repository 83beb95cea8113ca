"""Every fixed time bound of the package, in one place (seconds).

A call's own deadline comes from the caller (``RuntimeLimits``, a request's ``timeout_ms``);
these are the bounds nobody passes in: how long a close, a stop or a goodbye may take, and
the grace periods that order the timers of one served env step (the server answers TIMEOUT
at the request's ``timeout_ms``; the client's own timer fires :data:`LOCAL_TIMEOUT_GRACE`
later; the driver cuts the call off :data:`ENDPOINT_GRACE` after the limit, later still, so
the server's answer, with its code, is what the caller sees).
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "CLOSE_TIMEOUT",
    "ENDPOINT_GRACE",
    "GOAWAY_GRACE",
    "LOCAL_TIMEOUT_GRACE",
    "PORTAL_SHUTDOWN_GRACE",
    "SERVER_CLOSE_GRACE",
    "SYNC_CLOSE_TIMEOUT",
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

LOCAL_TIMEOUT_GRACE: Final = 1.0
"""How long the gRPC env client's own timer waits beyond a request's ``timeout_ms``, so the
server's TIMEOUT answer (which names the operation) normally arrives first."""

ENDPOINT_GRACE: Final = 2.0
"""How long past a limit the driver waits for an env that ``enforces_deadlines`` itself:
longer than :data:`LOCAL_TIMEOUT_GRACE`, so the endpoint's answer, not the driver's own
scope, is what the caller sees."""

PORTAL_SHUTDOWN_GRACE: Final = 5.0
"""How long closing the last asyncio portal waits for its helper thread to finish."""

SYNC_CLOSE_TIMEOUT: Final = 10.0
"""How long a synchronous remote Gymnasium env's ``close()`` (and its exit-time finalizer)
waits for its trio thread to end."""
