"""The knobs of a gRPC connection, shared by every backend."""

from __future__ import annotations

from typing import Any, Final

import attrs

from ...protocol._internal import MAX_MESSAGE_SIZE

__all__ = ["DEFAULT_SETTINGS", "GrpcSettings"]

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
    max_concurrent_streams: int = 1000
    """Streams a server lets one connection open at a time."""


DEFAULT_SETTINGS: Final = GrpcSettings()
