"""Helpers for the synchronous remote-env tests: a server on a background trio thread."""

from __future__ import annotations

import contextlib
import functools
import queue
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import trio

from trio_rlmesh.transports.grpc import serve_env

STOP_TIMEOUT = 30.0


@contextlib.contextmanager
def served_in_thread(env: Any, **kwargs: Any) -> Iterator[str]:
    """Serve ``env`` with our ``serve_env`` on 127.0.0.1:0 in a background trio thread."""
    ready: queue.SimpleQueue[Any] = queue.SimpleQueue()

    async def main() -> None:
        try:
            async with trio.open_nursery() as nursery:
                address = await nursery.start(functools.partial(serve_env, env, **kwargs))
                ready.put((address, trio.lowlevel.current_trio_token(), nursery.cancel_scope))
        except BaseException as exc:
            ready.put(exc)
            raise

    thread = threading.Thread(target=trio.run, args=(main,), daemon=True, name="test server")
    thread.start()
    started = ready.get(timeout=STOP_TIMEOUT)
    if isinstance(started, BaseException):
        raise started
    address, token, scope = started
    try:
        yield address
    finally:
        token.run_sync_soon(scope.cancel)
        thread.join(STOP_TIMEOUT)
        assert not thread.is_alive(), "the test server did not stop"


def gymnasium_warnings(check: Callable[[], object]) -> list[str]:
    """Run ``check()`` and return the texts of the warnings it emitted, in order."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check()
    return [str(warning.message) for warning in caught]


NO_SPEC_WARNING = "Not able to test alternative render modes"
"""What ``check_env`` says of any env that ``gymnasium.make`` did not build."""
