"""gRPC's length-prefixed message framing, with the size limit checked before buffering.

Each message on a gRPC stream is one byte of compression flag, a big-endian 32-bit length,
then that many bytes. :class:`MessageDecoder` turns a stream's DATA payloads back into
messages. It looks at the announced length as soon as the five header bytes are in, so a
peer announcing 4 GB is refused at once, before a single byte of the body is kept, and the
rule lives here for every backend (:func:`check_header` is the same rule for a backend that
reads the header itself).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Final

from ._status import GrpcError, Status

__all__ = ["HEADER_SIZE", "MessageDecoder", "check_header", "frame"]

HEADER_SIZE: Final = 5
_HEADER: Final = struct.Struct(">BI")


def frame(message: bytes) -> bytes:
    """``message`` with its gRPC length prefix (never compressed).

    >>> frame(b"ab")
    b'\\x00\\x00\\x00\\x00\\x02ab'
    """
    return _HEADER.pack(0, len(message)) + message


def check_header(header: bytes, max_size: int) -> int:
    """The body length a five-byte message header announces, if it is acceptable.

    Raises:
        GrpcError: RESOURCE_EXHAUSTED when the length exceeds ``max_size``; INTERNAL for a
            compressed message (no compression is ever negotiated) or a bad flag byte.
    """
    flag: int
    length: int
    flag, length = _HEADER.unpack(header)
    if flag:
        what = "compressed" if flag == 1 else f"flag byte {flag:#x}"
        raise GrpcError(
            Status.INTERNAL, f"received a {what} message, but no compression was negotiated"
        )
    if length > max_size:
        raise GrpcError(
            Status.RESOURCE_EXHAUSTED,
            f"message of {length} bytes exceeds the limit of {max_size} bytes",
        )
    return length


class MessageDecoder:
    """Reassembles messages from a stream's DATA payloads.

    >>> decoder = MessageDecoder(max_size=10)
    >>> list(decoder.feed(frame(b"hi") + frame(b"there")[:3])), decoder.partial
    ([b'hi'], True)
    >>> list(decoder.feed(frame(b"there")[3:])), decoder.partial
    ([b'there'], False)
    """

    __slots__ = ("_buffer", "_need", "max_size")

    def __init__(self, max_size: int) -> None:
        self.max_size = max_size
        self._buffer = bytearray()
        self._need = -1
        """Body length of the message being assembled; -1 while its header is incomplete."""

    @property
    def partial(self) -> bool:
        """Whether bytes of an incomplete message are held."""
        return bool(self._buffer) or self._need >= 0

    def feed(self, data: bytes | bytearray | memoryview) -> Iterator[bytes]:
        """Yield every message that ``data`` completes.

        Raises:
            GrpcError: as :func:`check_header`, as soon as a header is complete; the
                decoder then holds nothing and must not be fed again.
        """
        if self._need < 0 and not self._buffer:
            # The common case: whole messages, each in one payload. No copy of the
            # stream into a buffer first. (An empty buffer with a header already read
            # means the body is next, not a header.)
            view = memoryview(data)
            pos, end = 0, len(data)
            while end - pos >= HEADER_SIZE:
                length = self._checked(view[pos : pos + HEADER_SIZE])
                if end - pos - HEADER_SIZE < length:
                    break
                start = pos + HEADER_SIZE
                pos = start + length
                yield bytes(view[start:pos])
            if pos == end:
                return
            data = bytes(view[pos:])
        self._buffer += data
        while True:
            if self._need < 0:
                if len(self._buffer) < HEADER_SIZE:
                    return
                self._need = self._checked(self._buffer[:HEADER_SIZE])
                del self._buffer[:HEADER_SIZE]
            if len(self._buffer) < self._need:
                return
            message = bytes(self._buffer[: self._need])
            del self._buffer[: self._need]
            self._need = -1
            yield message

    def _checked(self, header: bytes | memoryview | bytearray) -> int:
        try:
            return check_header(bytes(header), self.max_size)
        except GrpcError:
            self._buffer = bytearray()
            self._need = -1
            raise
