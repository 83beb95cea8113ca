"""Env servers in subprocesses (so a server never shares the client's GIL)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

HERE = Path(__file__).resolve().parent
STARTUP_TIMEOUT = 60.0

OUR_TARGETS = {
    "cartpole": "gymnasium:CartPole-v1",
    "vector16": "bench_envs:make_vector16",
    "image": "bench_envs:make_image",
}
"""``trio-rlmesh serve-env`` ENV arguments per env kind."""


def _child_env() -> dict[str, str]:
    import trio_rlmesh

    package_root = str(Path(trio_rlmesh.__file__).resolve().parent.parent)
    paths = [str(HERE), package_root]
    current = os.environ.get("PYTHONPATH")
    if current:
        paths.append(current)
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "PYTHONWARNINGS": "ignore"}


def rlmesh_argv(kind: str, ready: Path) -> list[str]:
    """``rlmesh.EnvServer`` serving ``bench_envs.BUILDERS[kind]``."""
    return [sys.executable, str(HERE / "serve_rlmesh_env.py"), kind, str(ready)]


def our_argv(kind: str, ready: Path, backend: str = "trio") -> list[str]:
    """``trio-rlmesh serve-env`` serving the same env (on ``backend``'s gRPC)."""
    target = OUR_TARGETS[kind]
    return [
        *(sys.executable, "-m", "trio_rlmesh", "serve-env", target),
        *("--ready-file", str(ready), "--grpc-backend", backend),
    ]


@dataclass
class _Server:
    what: str
    process: subprocess.Popen[bytes]
    ready: Path
    log: IO[bytes]

    def wait_ready(self) -> str:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while True:
            text = self.ready.read_text().strip() if self.ready.exists() else ""
            if text:
                return text
            if self.process.poll() is not None:
                self.log.seek(0)
                detail = self.log.read().decode(errors="replace")[-2000:]
                raise RuntimeError(
                    f"{self.what} exited early ({self.process.returncode}):\n{detail}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.what} did not become ready in {STARTUP_TIMEOUT} s")
            time.sleep(0.02)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@contextlib.contextmanager
def servers(
    kind: str, *, ours: bool = True, theirs: bool = True, ours_grpclib: bool = False
) -> Iterator[dict[str, str]]:
    """Start the requested servers for ``kind`` together; yield
    ``{"ours"|"ours_grpclib"|"theirs": address}`` (``ours_grpclib``: our server on the
    grpclib backend)."""
    ours_what = f"trio-rlmesh serve-env {OUR_TARGETS[kind]}"
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        started: dict[str, _Server] = {}
        for side, wanted, argv, what in (
            ("ours", ours, lambda ready: our_argv(kind, ready), ours_what),
            (
                "ours_grpclib",
                ours_grpclib,
                lambda ready: our_argv(kind, ready, "grpclib"),
                f"{ours_what} --grpc-backend grpclib",
            ),
            ("theirs", theirs, lambda ready: rlmesh_argv(kind, ready), f"rlmesh.EnvServer({kind})"),
        ):
            if not wanted:
                continue
            ready = Path(tmp) / f"{side}.address"
            log = stack.enter_context(tempfile.TemporaryFile())
            process = subprocess.Popen(
                argv(ready),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                env=_child_env(),
            )
            server = _Server(what, process, ready, log)
            stack.callback(server.stop)
            started[side] = server
        yield {side: server.wait_ready() for side, server in started.items()}
