"""Start real ``rlmesh.EnvServer`` processes for the interop tests.

Every test here needs the released ``rlmesh==0.1.0`` (``nox -s interop`` installs
it); without it the fixtures skip.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import pytest
import trio

from trio_rlmesh.transports.grpc import BACKENDS, BackendName

from .._process import first_line

HERE = Path(__file__).parent
SERVE_ENV = HERE / "serve_env.py"
STARTUP_TIMEOUT = 60.0


@contextlib.asynccontextmanager
async def script_server(
    script: Path, kind: str, env: dict[str, str] | None = None, args: Sequence[str] = ()
) -> AsyncIterator[str]:
    """Run ``script KIND READY_FILE *args`` in a subprocess; yield the address it prints
    (first stdout line) once serving, as it also writes to ``READY_FILE``.

    Both the rlmesh server scripts and ours follow that protocol. The process is
    terminated (then killed after 10 s) when the block exits.
    """
    with tempfile.TemporaryDirectory() as tmp:
        ready = Path(tmp) / "address"
        process = await trio.lowlevel.open_process(
            [sys.executable, str(script), kind, str(ready), *args],
            stdout=subprocess.PIPE,
            env={**os.environ, **(env or {})},
        )
        try:
            with trio.fail_after(STARTUP_TIMEOUT):
                address = await first_line(process, f"{script.name} for {kind!r}")
            yield address
        finally:
            process.terminate()
            with trio.CancelScope(shield=True), trio.move_on_after(10) as scope:
                await process.wait()
            if scope.cancelled_caught:
                process.kill()
                with trio.CancelScope(shield=True):
                    await process.wait()


@contextlib.asynccontextmanager
async def rlmesh_env_server(kind: str) -> AsyncIterator[str]:
    """Serve env ``kind`` (see ``envs.build``) with rlmesh in a subprocess; yield the address."""
    pytest.importorskip("rlmesh")
    async with script_server(SERVE_ENV, kind, {"PYTHONWARNINGS": "ignore"}) as address:
        yield address


@pytest.fixture
def env_server() -> Callable[[str], AbstractAsyncContextManager[str]]:
    """``async with env_server("cartpole") as address: ...``"""
    return rlmesh_env_server


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> BackendName:
    """Our side's gRPC backend, where our side is under test."""
    name: BackendName = request.param
    return name
