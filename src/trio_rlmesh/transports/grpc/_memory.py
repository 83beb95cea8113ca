"""In-memory addresses (``memory://name``): real HTTP/2 between a client and a server in
the same trio run, over in-memory byte streams instead of sockets.

Tests use it to run the real clients against the real servers, through the whole h2 layer,
with no port, no socket and trio's virtual clock. Names live for one ``trio.run``.
"""

from __future__ import annotations

import math

import trio

from ._status import ConnectionLost

__all__ = [
    "MemoryListener",
    "MemoryStream",
    "connect_memory",
    "listen_memory",
    "memory_stream_pair",
]

_LISTENERS: trio.lowlevel.RunVar[dict[str, MemoryListener]] = trio.lowlevel.RunVar(
    "trio_rlmesh_memory_listeners"
)


def _registry() -> dict[str, MemoryListener]:
    try:
        return _LISTENERS.get()
    except LookupError:
        listeners: dict[str, MemoryListener] = {}
        _LISTENERS.set(listeners)
        return listeners


class _Pipe:
    """Bytes one way: an unbounded buffer, a reader waiting on it, and an end flag."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.closed = False
        self.lot = trio.lowlevel.ParkingLot()


class MemoryStream(trio.abc.Stream):
    """One end of an in-memory byte stream pair (see :func:`memory_stream_pair`).

    (``trio.testing`` has one too, but importing it imports pytest.)
    """

    def __init__(self, incoming: _Pipe, outgoing: _Pipe) -> None:
        self._in = incoming
        self._out = outgoing

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await trio.lowlevel.checkpoint()
        if self._out.closed:
            raise trio.ClosedResourceError("this end of the memory stream is closed")
        self._out.buffer += data
        self._out.lot.unpark_all()

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        await trio.lowlevel.checkpoint_if_cancelled()
        while not self._in.buffer:
            if self._in.closed:
                await trio.lowlevel.cancel_shielded_checkpoint()
                return b""
            await self._in.lot.park()
        size = len(self._in.buffer) if max_bytes is None else max_bytes
        data = bytes(self._in.buffer[:size])
        del self._in.buffer[:size]
        return data

    async def aclose(self) -> None:
        # Closing one end ends both directions, like a socket closing.
        for pipe in (self._in, self._out):
            pipe.closed = True
            pipe.lot.unpark_all()
        await trio.lowlevel.checkpoint()


def memory_stream_pair() -> tuple[MemoryStream, MemoryStream]:
    """Two connected in-memory byte streams."""
    one, two = _Pipe(), _Pipe()
    return MemoryStream(one, two), MemoryStream(two, one)


class MemoryListener(trio.abc.Listener[trio.abc.Stream]):
    """Accepts the in-memory connections made to one name."""

    def __init__(self, name: str) -> None:
        self.name = name
        send, receive = trio.open_memory_channel[trio.abc.Stream](math.inf)
        self._send = send
        self._receive = receive

    async def accept(self) -> trio.abc.Stream:
        try:
            return await self._receive.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            raise trio.ClosedResourceError("the memory listener is closed") from None

    def deliver(self, stream: trio.abc.Stream) -> None:
        self._send.send_nowait(stream)

    async def aclose(self) -> None:
        listeners = _registry()
        if listeners.get(self.name) is self:
            del listeners[self.name]
        self._send.close()
        self._receive.close()
        await trio.lowlevel.checkpoint()


def listen_memory(name: str) -> MemoryListener:
    """Start listening on ``memory://name``.

    Raises:
        OSError: another server already listens on that name (like a port in use).
    """
    listeners = _registry()
    if name in listeners:
        raise OSError(f"memory://{name} is already in use")
    listener = MemoryListener(name)
    listeners[name] = listener
    return listener


async def connect_memory(name: str) -> trio.abc.Stream:
    """Connect to ``memory://name``.

    Raises:
        ConnectionLost: nothing listens there (``refused``).
    """
    await trio.lowlevel.checkpoint()
    listener = _registry().get(name)
    if listener is None:
        raise ConnectionLost(
            f"could not connect to memory://{name}: nothing listens there; is the server running?",
            refused=True,
        )
    client, server = memory_stream_pair()
    listener.deliver(server)
    return client
