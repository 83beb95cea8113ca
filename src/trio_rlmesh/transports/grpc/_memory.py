"""In-memory addresses (``memory://name``): real HTTP/2 between a client and a server in
the same trio run, over in-memory byte streams instead of sockets.

Tests use it to run the real clients against the real servers, through the whole h2 layer,
with no port, no socket and trio's virtual clock. Names live for one ``trio.run``.
"""

from __future__ import annotations

import math

import trio
import trio.testing

from ._status import ConnectionLost

__all__ = ["MemoryListener", "connect_memory", "listen_memory"]

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
            f"could not connect to memory://{name}: nothing listens there", refused=True
        )
    client, server = trio.testing.memory_stream_pair()
    listener.deliver(server)
    return client
