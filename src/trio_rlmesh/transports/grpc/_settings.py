"""The knobs of a gRPC connection, shared by every backend, and the limits a server holds
every client to."""

from __future__ import annotations

from typing import Any, Final

import attrs

from ...protocol._internal import MAX_MESSAGE_SIZE

__all__ = [
    "DEFAULT_LIMITS",
    "DEFAULT_SETTINGS",
    "DESCRIPTOR_RELIEF",
    "GrpcSettings",
    "ServerLimits",
]

_MiB: Final = 1024 * 1024


def _positive_or_none(_: object, attribute: Any, value: Any) -> None:
    if value is not None and not value > 0:
        raise ValueError(f"{attribute.name} must be > 0 or None, got {value!r}")


def _positive(_: object, attribute: Any, value: Any) -> None:
    if not value > 0:
        raise ValueError(f"{attribute.name} must be > 0, got {value!r}")


@attrs.frozen
class GrpcSettings:
    """How one gRPC connection (client or server side) behaves.

    >>> GrpcSettings(keepalive_interval=None).keepalive_interval is None
    True
    """

    max_message_size: int = attrs.field(default=MAX_MESSAGE_SIZE, validator=_positive)
    """Largest message accepted, in bytes. A message announcing more is refused at its
    header with RESOURCE_EXHAUSTED, before any of it is buffered."""
    keepalive_interval: float | None = attrs.field(default=10.0, validator=_positive_or_none)
    """Seconds of silence from the peer, while a call is open, after which an HTTP/2 PING
    is sent. ``None`` turns keepalive off."""
    keepalive_timeout: float = attrs.field(default=20.0, validator=_positive)
    """Seconds to wait for anything (the PING's answer included) before the peer is
    declared unresponsive and every call on the connection fails. With the defaults a
    frozen peer is noticed within 30 s."""
    write_timeout: float = attrs.field(default=20.0, validator=_positive)
    """Seconds a write may wait for the peer to accept bytes (flow control or a full
    socket buffer) before the connection is given up."""
    stream_window: int = 4 * _MiB
    """HTTP/2 flow-control window granted per stream (bounds unread data per call)."""
    connection_window: int = 16 * _MiB
    """HTTP/2 flow-control window granted per connection."""
    max_frame_size: int = _MiB
    """Largest HTTP/2 frame the peer may send us."""


DEFAULT_SETTINGS: Final = GrpcSettings()


@attrs.frozen
class ServerLimits:
    """What a server lets one client connection do before it cuts it off.

    Each budget is a bucket of ``N`` frames of one kind, refilled at ``N`` per ``window``
    seconds: a burst of ``N`` is fine, a sustained rate above ``N`` per ``window`` is not.
    Past a budget, or past the header block cap, the connection gets GOAWAY
    ``ENHANCE_YOUR_CALM`` and is closed, and one line is logged (at most one per 10 s).
    Keepalive (PINGs to a silent peer) is configured in :class:`GrpcSettings`, which
    clients share.

    >>> ServerLimits(max_connections=64).max_header_block
    65536
    """

    max_connections: int | None = attrs.field(default=512, validator=_positive_or_none)
    """Connections served at once. A new connection past it closes the connection that has
    been idle (no call) longest; when none is idle, the new one is closed. ``None``: no
    limit (descriptor exhaustion is still handled the same way)."""
    max_concurrent_streams: int = attrs.field(default=1000, validator=_positive)
    """Calls one connection may have open at once (advertised in SETTINGS), counting calls
    whose handler is still finishing: a call past it is refused (RST_STREAM
    ``REFUSED_STREAM``)."""
    max_header_block: int = attrs.field(default=64 * 1024, validator=_positive)
    """Bytes of one request's header block (a HEADERS frame and its CONTINUATION frames),
    counted from the frame headers before any of it is buffered."""
    handshake_timeout: float | None = attrs.field(default=5.0, validator=_positive_or_none)
    """Seconds a new connection has to send the HTTP/2 preface and its first SETTINGS."""
    idle_connection_timeout: float | None = attrs.field(default=300.0, validator=_positive_or_none)
    """Seconds a connection may stay open with no call before it is closed (GOAWAY
    ``NO_ERROR``). PINGs do not count as activity."""
    window: float = attrs.field(default=10.0, validator=_positive)
    """The period of the frame budgets below, in seconds."""
    resets_per_window: int = attrs.field(default=500, validator=_positive)
    """RST_STREAM frames (rapid reset)."""
    pings_per_window: int = attrs.field(default=100, validator=_positive)
    """PING frames that are not acknowledgements."""
    settings_per_window: int = attrs.field(default=100, validator=_positive)
    """SETTINGS frames that are not acknowledgements."""
    empty_frames_per_window: int = attrs.field(default=100, validator=_positive)
    """Frames that carry nothing: empty DATA, HEADERS or CONTINUATION frames that end
    nothing, PRIORITY frames and frames of unknown types."""


DEFAULT_LIMITS: Final = ServerLimits()

DESCRIPTOR_RELIEF: Final = 16
"""Connections a server closes (the longest-idle first) each time ``accept`` finds the
process out of descriptors, so the clients queued behind a flood of idle ones get in."""
