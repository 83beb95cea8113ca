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

HERE = Path(__file__).parent
SERVE_ENV = HERE / "serve_env.py"
STARTUP_TIMEOUT = 60.0


@contextlib.asynccontextmanager
async def script_server(
    script: Path, kind: str, env: dict[str, str] | None = None, args: Sequence[str] = ()
) -> AsyncIterator[str]:
    """Run ``script KIND READY_FILE *args`` in a subprocess; yield the address it writes there.

    Both the rlmesh server script and ours follow that protocol. The process is
    terminated (then killed after 10 s) when the block exits.
    """
    with tempfile.TemporaryDirectory() as tmp:
        ready = Path(tmp) / "address"
        process = await trio.lowlevel.open_process(
            [sys.executable, str(script), kind, str(ready), *args],
            stdout=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
        )
        try:
            with trio.fail_after(STARTUP_TIMEOUT):
                while not ready.exists():
                    if process.poll() is not None:
                        raise RuntimeError(f"{script.name} for {kind!r} exited early")
                    await trio.sleep(0.05)
            yield ready.read_text().strip()
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
