"""Fixtures of the gRPC transport tests: the backend under test, its clock and addresses.

Tests taking ``backend`` run once per backend. The thing under test (our client, or our
server) runs on that backend; the instruments around it (the fake servers and the raw
client of :mod:`.wire`) always run on the trio backend.

* ``address("name")`` is somewhere the backend under test can reach or serve:
  ``memory://name`` for trio (no socket at all), a Unix socket in a short temporary folder
  for grpclib (which has no in-memory transport).
* ``clock`` is trio's autojump clock for the trio backend, so timeouts run in virtual time
  and tests assert exact virtual times; ``None`` (the real clock) for grpclib, whose asyncio
  loop in a helper thread makes virtual time jump while it works. Virtual time also jumps
  while every task waits on a worker thread, so tests that run env code in threads are
  guarded in real time (:func:`.servers.within`), never with a virtual ``fail_after``.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import trio.testing

from trio_rlmesh.transports.grpc import BACKENDS, BackendName


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> BackendName:
    name: BackendName = request.param
    return name


@pytest.fixture
def clock(backend: BackendName, request: pytest.FixtureRequest) -> trio.testing.MockClock | None:
    """The autojump clock on trio. A test module whose env or model code runs in worker
    threads sets ``AUTOJUMP_THRESHOLD`` (real seconds of idleness before virtual time
    jumps), so that time does not jump while a quick worker call is under way."""
    if backend != "trio":
        return None
    threshold = getattr(request.module, "AUTOJUMP_THRESHOLD", 0.0)
    return trio.testing.MockClock(autojump_threshold=threshold)


@pytest.fixture
def sockdir() -> Iterator[Path]:
    # pytest's tmp_path can exceed the 107 bytes a Unix socket path may have.
    path = Path(tempfile.mkdtemp(prefix="trm-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def address(backend: BackendName, sockdir: Path) -> Callable[[str], str]:
    def where(name: str) -> str:
        if backend == "trio":
            return f"memory://{name}"
        return f"unix://{sockdir / name}.sock"

    return where
