"""gRPC status codes, the two transport-level exceptions, and their wire forms.

Every gRPC backend raises only these two exceptions for what happens on the wire, and
:mod:`._errors` turns them (and OS errors) into :class:`trio_rlmesh.Error` subclasses in
one table:

* :class:`GrpcError` — the peer (or this side, for a refused message) ended a call with a
  non-OK ``grpc-status``;
* :class:`ConnectionLost` — the call ended with no status at all: the connection dropped,
  the stream was reset, the peer went away with GOAWAY or stopped answering PINGs.

The helpers here are pure: the ``grpc-message`` percent-encoding, the ``grpc-timeout``
header, and the status a server answers for a handler's outcome.
"""

from __future__ import annotations

import enum
import errno
import math
import socket
from typing import Final

__all__ = [
    "ConnectionLost",
    "GrpcError",
    "Status",
    "again",
    "decode_grpc_message",
    "encode_grpc_message",
    "format_grpc_timeout",
    "parse_grpc_timeout",
    "socket_reason",
]


class Status(enum.IntEnum):
    """The gRPC status codes."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16

    @classmethod
    def of(cls, value: int | str | None) -> Status:
        """The status for a ``grpc-status`` value; anything unknown is UNKNOWN."""
        try:
            return cls(int(value))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return cls.UNKNOWN


class GrpcError(Exception):
    """A call ended with a non-OK gRPC status (sent by the peer, or decided here)."""

    def __init__(self, status: Status, message: str = "") -> None:
        super().__init__(f"{status.name}: {message}" if message else status.name)
        self.status = status
        self.message = message

    def again(self) -> GrpcError:
        """A fresh copy, for raising one stored outcome to many callers without their
        tracebacks piling up on one object."""
        return GrpcError(self.status, self.message)


class ConnectionLost(Exception):
    """A call ended without a status: the connection or the stream is gone.

    ``reason`` says why in words a user can act on ("connection refused", "the peer
    reset the stream (CANCEL)", "no answer to a keepalive PING within 20 s", ...);
    ``peer`` names the other side when the backend knows it, kept apart so that a message
    that names the address already does not name it twice (``str()`` has both).
    """

    def __init__(self, reason: str, *, refused: bool = False, peer: str | None = None) -> None:
        super().__init__(f"{reason} (with {peer})" if peer else reason)
        self.reason = reason
        self.refused = refused
        """True when no connection was ever made (nothing reached the peer)."""
        self.peer = peer

    def again(self) -> ConnectionLost:
        """A fresh copy (see :meth:`GrpcError.again`)."""
        return ConnectionLost(self.reason, refused=self.refused, peer=self.peer)

    @classmethod
    def could_not_connect(cls, exc: OSError, target: str) -> ConnectionLost:
        """Why connecting to ``target`` failed, in words that say what to check.

        >>> ConnectionLost.could_not_connect(ConnectionRefusedError(), "tcp://h:1").reason
        'could not connect to tcp://h:1: connection refused; is the server running?'
        """
        return cls(f"could not connect to {target}: {socket_reason(exc)}", refused=True)


def socket_reason(exc: OSError, *, listening: bool = False) -> str:
    """Why a socket could not connect (or, with ``listening``, could not listen), in words
    that say what to check.

    >>> socket_reason(OSError(errno.EADDRINUSE, "Address already in use"), listening=True)
    'the address is already in use; is another server listening there?'
    """
    exc = _root_os_error(exc)
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve the host ({exc.strerror or exc})"
    if listening:
        if exc.errno == errno.EADDRINUSE:
            return "the address is already in use; is another server listening there?"
        if exc.errno == errno.EADDRNOTAVAIL:
            return "the address is not one of this machine's"
        if isinstance(exc, FileNotFoundError):
            return "the socket file's directory does not exist"
    elif isinstance(exc, ConnectionRefusedError):
        return "connection refused; is the server running?"
    elif isinstance(exc, FileNotFoundError):
        return "no such socket file; is the server running?"
    return (exc.strerror or str(exc) or type(exc).__name__).lower()


def _root_os_error(exc: OSError) -> OSError:
    """The first specific OSError behind ``exc`` (trio's ``open_tcp_stream`` wraps the
    errors of every address it tried in one "all attempts failed" error)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno is not None:
            return current
        inner = getattr(current, "exceptions", None)
        current = inner[0] if inner else (current.__cause__ or current.__context__)
    return exc


def again(exc: BaseException) -> BaseException:
    """A fresh copy of a stored transport outcome to raise; other exceptions as they are."""
    if isinstance(exc, (GrpcError, ConnectionLost)):
        return exc.again()
    return exc


# ------------------------------------------------------------------------- grpc-message

_UNRESERVED: Final = frozenset(range(0x20, 0x7F)) - {ord("%")}


def encode_grpc_message(message: str) -> str:
    """Percent-encode a status message as the gRPC HTTP/2 spec asks.

    >>> encode_grpc_message("50% done: ✓")
    '50%25 done: %E2%9C%93'
    """
    raw = message.encode("utf-8")
    if all(byte in _UNRESERVED for byte in raw):
        return message
    return "".join(chr(byte) if byte in _UNRESERVED else f"%{byte:02X}" for byte in raw)


def decode_grpc_message(text: str) -> str:
    """Undo :func:`encode_grpc_message`; malformed escapes are kept as they are.

    >>> decode_grpc_message('50%25 done: %E2%9C%93')
    '50% done: ✓'
    """
    if "%" not in text:
        return text
    out = bytearray()
    raw = text.encode("utf-8", "replace")
    i = 0
    while i < len(raw):
        byte = raw[i]
        if byte == 0x25 and _is_hex(raw[i + 1 : i + 3]):
            out.append(int(raw[i + 1 : i + 3], 16))
            i += 3
        else:
            out.append(byte)
            i += 1
    return out.decode("utf-8", "replace")


def _is_hex(pair: bytes) -> bool:
    return len(pair) == 2 and all(chr(b) in "0123456789abcdefABCDEF" for b in pair)


# ------------------------------------------------------------------------- grpc-timeout

_UNITS: Final = (("n", 1e-9), ("u", 1e-6), ("m", 1e-3), ("S", 1.0), ("M", 60.0), ("H", 3600.0))
_MAX_DIGITS: Final = 99_999_999


def format_grpc_timeout(seconds: float) -> str:
    """The ``grpc-timeout`` header for ``seconds`` (at most 8 digits, rounded up).

    >>> format_grpc_timeout(0.25), format_grpc_timeout(10), format_grpc_timeout(0)
    ('250000u', '10000000u', '0n')
    """
    if seconds <= 0:
        return "0n"
    for unit, scale in _UNITS[1:]:
        amount = math.ceil(seconds / scale - 1e-9)
        if amount <= _MAX_DIGITS:
            return f"{amount}{unit}"
    return f"{_MAX_DIGITS}H"


def parse_grpc_timeout(value: str) -> float | None:
    """Seconds from a ``grpc-timeout`` header; ``None`` when it is malformed.

    >>> parse_grpc_timeout("250m"), parse_grpc_timeout("2S"), parse_grpc_timeout("x")
    (0.25, 2.0, None)
    """
    value = value.strip()
    if len(value) < 2 or not value[:-1].isdigit() or len(value) > 9:
        return None
    scale = dict(_UNITS).get(value[-1])
    if scale is None:
        return None
    return int(value[:-1]) * scale
