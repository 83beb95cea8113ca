"""The one place where what happened on the wire becomes a :class:`trio_rlmesh.Error`.

Both backends raise only :class:`~._status.GrpcError` (a call ended with a status) and
:class:`~._status.ConnectionLost` (it ended without one); the clients call
:func:`map_transport_error` at their boundary and nowhere else. The table:

==============================  ===========================================================
what happened                   what the caller gets
==============================  ===========================================================
UNAUTHENTICATED                 TransportError: "rejected the token" when one was sent,
                                "requires a token" when none was sent
DEADLINE_EXCEEDED, TimeoutError OperationTimeout
UNIMPLEMENTED                   TransportError saying the server does not serve the
                                operation's service (another kind of server?)
UNAVAILABLE, RESOURCE_EXHAUSTED recoverable TransportError
ABORTED
other statuses                  TransportError carrying the status name as ``code``
ConnectionLost, refused         TransportError "could not connect to ..."
a server's listen failed        TransportError "the env server could not listen on ..."
ConnectionLost, OSError, EOF    TransportError "connection lost during ...: <reason>"
an Error                        itself, with missing context filled in
==============================  ===========================================================
"""

from __future__ import annotations

import socket
from typing import Any, Final

import trio

from ..._errors import Error, OperationTimeout, TransportError, where
from ._status import ConnectionLost, GrpcError, Status, socket_reason

__all__ = ["could_not_listen", "map_transport_error", "where"]

_RETRYABLE: Final = frozenset({Status.UNAVAILABLE, Status.RESOURCE_EXHAUSTED, Status.ABORTED})


_SERVICES: Final = {"env": "rlmesh.env.v1.EnvService", "model": "rlmesh.model.v1.ModelService"}


def _service(operation: str) -> str:
    """The service an operation belongs to (``env.*``: EnvService, ``model.*``: ModelService)."""
    return _SERVICES.get(operation.partition(".")[0], "this service")


def map_transport_error(
    exc: BaseException,
    *,
    operation: str,
    address: str | None,
    step: int | None = None,
    lane: int | None = None,
    token_sent: bool | None = None,
) -> Error:
    """Turn a backend, socket or timeout exception into this package's error.

    ``token_sent`` says whether the call carried a token (``None``: unknown), for
    UNAUTHENTICATED. The original exception should become ``__cause__``.
    """
    context: dict[str, Any] = {
        "operation": operation,
        "address": address,
        "step": step,
        "lane": lane,
    }
    at = where(operation, address, step, lane)
    if isinstance(exc, Error):
        return exc.with_context(**context)
    if isinstance(exc, OSError) and not isinstance(exc, TimeoutError):
        # A raw socket error (a backend's own errors are ConnectionLost): was it the connect?
        failure = ConnectionLost.could_not_connect(exc, address or "the server")
        if isinstance(exc, (ConnectionRefusedError, FileNotFoundError, socket.gaierror)):
            exc = failure
        else:
            exc = ConnectionLost(exc.strerror or str(exc) or type(exc).__name__)
    if isinstance(exc, GrpcError):
        status = exc.status
        detail = f": {exc.message}" if exc.message else ""
        if status is Status.UNAUTHENTICATED:
            if token_sent is None:
                problem = "the server refused the call: the token is missing or wrong"
            elif token_sent:
                problem = "the server rejected the token"
            else:
                problem = "the server requires a token and none was sent"
            return TransportError(
                f"{at} failed: {problem} (UNAUTHENTICATED{detail}); "
                "pass the token the server was started with",
                code=status.name,
                **context,
            )
        if status is Status.DEADLINE_EXCEEDED:
            return OperationTimeout(
                f"{at} timed out (DEADLINE_EXCEEDED{detail})", code=status.name, **context
            )
        if status is Status.UNIMPLEMENTED:
            return TransportError(
                f"{at} failed: the server does not serve {_service(operation)} "
                f"(UNIMPLEMENTED{detail}); is the address right?",
                code=status.name,
                **context,
            )
        return TransportError(
            f"{at} failed with gRPC status {status.name}{detail}",
            recoverable=status in _RETRYABLE,
            code=status.name,
            **context,
        )
    if isinstance(exc, ConnectionLost):
        if exc.refused:
            return TransportError(f"{exc.reason} ({operation})", **context)
        # ``at`` names the address already: the peer only when it is another one.
        why = exc.reason if exc.peer in (None, address) else str(exc)
        return TransportError(f"connection lost during {at}: {why}", **context)
    if isinstance(exc, (TimeoutError, trio.TooSlowError)):
        return OperationTimeout(f"{at} timed out", **context)
    if isinstance(exc, EOFError):
        return TransportError(f"connection lost during {at}: the stream ended", **context)
    return TransportError(f"{at} failed: {type(exc).__name__}: {exc}", **context)


def could_not_listen(exc: OSError, component: str, address: str) -> TransportError:
    """A server that could not listen on ``address`` (``component``: ``"env"`` or
    ``"model"``), saying why in words a user can act on.

    >>> could_not_listen(socket.gaierror(-2, "Name or service not known"), "env", "h:1").message
    'the env server could not listen on h:1: cannot resolve the host (Name or service not known)'
    """
    return TransportError(
        f"the {component} server could not listen on {address}: "
        f"{socket_reason(exc, listening=True)}",
        operation=f"{component}.serve",
        address=address,
    )
