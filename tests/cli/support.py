"""Subprocesses for the CLI tests: ``python -m trio_rlmesh ...``, waited on with deadlines."""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT = 60.0
TOKEN_VARIABLES = ("TRIO_RLMESH_TOKEN", "TRIO_RLMESH_ENV_TOKEN", "TRIO_RLMESH_MODEL_TOKEN")


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a child: this checkout importable, plus ``extra``."""
    paths = [str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    for variable in TOKEN_VARIABLES:
        env.pop(variable, None)
    return {**env, **(extra or {})}


def start(
    argv: Sequence[str],
    *,
    extra_env: Mapping[str, str] | None = None,
    preexec_fn: Callable[[], object] | None = None,
) -> subprocess.Popen[str]:
    """Start ``trio-rlmesh ARGV`` with piped, text-mode stdout and stderr (``preexec_fn``
    runs in the child before it starts, e.g. to lower its resource limits)."""
    return subprocess.Popen(
        [sys.executable, "-m", "trio_rlmesh", *argv],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(extra_env),
        cwd=ROOT,
        preexec_fn=preexec_fn,
    )


def read_line(stream: object, timeout: float, *, what: str = "a line") -> str:
    """One line from a child's pipe ("" at its end), or AssertionError after ``timeout``
    seconds.

    Read a byte at a time from the descriptor: a buffered ``readline`` would take the lines
    after this one into Python's buffer, where the next wait (on the descriptor) cannot see
    them. A later ``stream.read()`` still gets everything not read here.
    """
    fd = stream.fileno()  # type: ignore[attr-defined]
    deadline = time.monotonic() + timeout
    line = bytearray()
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while True:
            remaining = deadline - time.monotonic()
            if not selector.select(max(0.0, remaining)):
                raise AssertionError(f"no {what} within {timeout} s")
            byte = os.read(fd, 1)
            line += byte
            if not byte or byte == b"\n":
                return line.decode()


def wait_for(process: subprocess.Popen[str], text: str, timeout: float = 60.0) -> None:
    """Read the process's stderr until a line contains ``text``.

    AssertionError after ``timeout`` seconds, or at once when stderr ends first (the
    process exited: its status is in the message).
    """
    assert process.stderr is not None
    deadline = time.monotonic() + timeout
    while True:
        line = read_line(process.stderr, max(0.0, deadline - time.monotonic()), what=repr(text))
        if text in line:
            return
        if not line:  # end of the stream
            try:
                status: int | None = process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                status = None
            raise AssertionError(f"stderr ended (exit status {status}) before {text!r}")


def stop(process: subprocess.Popen[str], sig: int = signal.SIGTERM, timeout: float = 30) -> int:
    """Signal ``process`` and wait for it (killing it after ``timeout``); its exit status."""
    if process.poll() is None:
        process.send_signal(sig)
    try:
        return process.wait(timeout=timeout)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for pipe in (process.stdout, process.stderr):
            if pipe is not None:
                pipe.close()


@contextlib.contextmanager
def serving(argv: Sequence[str], *, extra_env: Mapping[str, str] | None = None) -> Iterator[str]:
    """``trio-rlmesh serve-* ARGV`` for the block; yields the address it prints."""
    process = start(argv, extra_env=extra_env)
    try:
        assert process.stdout is not None
        address = read_line(process.stdout, STARTUP_TIMEOUT, what="address").strip()
        if not address:
            assert process.stderr is not None
            raise AssertionError(f"{argv[0]} did not start: {process.stderr.read()}")
        yield address
    finally:
        stop(process)
