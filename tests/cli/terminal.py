"""A pseudo-terminal for the CLI tests: run ``trio-rlmesh`` on one, and read the screen back.

:func:`run_on_terminal` starts the command with a pty as its stdin, stdout and stderr (so
both streams are a terminal of the given width, as in a shell) and collects everything it
writes. :func:`render` then replays those bytes the way a terminal does (carriage returns,
line erases, cursor moves, wrapping at the right margin) and returns the logical lines left
on the screen: a bar drawn by hand before a line, or glued to an error, or wider than the
terminal, leaves garbled lines there that a plain ``splitlines`` would not show.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import selectors
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Callable, Sequence

from .support import ROOT, child_env

DEADLINE = 60.0
"""Seconds a command under the pty may take, start to end."""
_TERMINAL_VARIABLES = ("COLUMNS", "LINES", "FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE")
_CSI = re.compile(r"\x1b\[([0-9;?]*)([A-Za-z])")


def run_on_terminal(
    argv: Sequence[str],
    *,
    columns: int = 80,
    on_output: Callable[[str, int], bool] | None = None,
) -> tuple[str, int]:
    """Run ``trio-rlmesh ARGV`` on a pty ``columns`` wide; its whole output and exit status.

    ``on_output(text so far, pid)`` is called as output arrives until it returns True (to
    send a signal at the right moment, say). The child is killed after :data:`DEADLINE`.
    """
    leader, follower = os.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env = {key: value for key, value in child_env().items() if key not in _TERMINAL_VARIABLES}
    env["TERM"] = "xterm-256color"
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "trio_rlmesh", *argv],
            stdin=follower,
            stdout=follower,
            stderr=follower,
            env=env,
            cwd=ROOT,
            start_new_session=True,
        )
    finally:
        os.close(follower)
    chunks: list[bytes] = []
    deadline = time.monotonic() + DEADLINE
    watching = on_output is not None
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(leader, selectors.EVENT_READ)
            while time.monotonic() < deadline:
                if not selector.select(max(0.0, deadline - time.monotonic())):
                    continue
                try:
                    data = os.read(leader, 65536)
                except OSError:  # EIO: every copy of the follower is closed
                    break
                if not data:
                    break
                chunks.append(data)
                if watching and on_output is not None:
                    watching = not on_output(b"".join(chunks).decode(errors="replace"), process.pid)
        status = process.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGKILL)
            process.wait()
        os.close(leader)
    return b"".join(chunks).decode(errors="replace"), status


def render(output: str, columns: int) -> list[str]:
    """The logical lines a terminal ``columns`` wide shows after ``output``.

    Rows that wrapped at the right margin are joined back into their line; trailing blanks
    are dropped. Only the control sequences rich and the CLI use are understood: anything
    else fails the test, so nothing is silently misread.
    """
    rows: list[list[str]] = [[]]
    wrapped: set[int] = set()  # rows that continue on the next one
    row = col = 0
    i = 0
    while i < len(output):
        char = output[i]
        if char == "\x1b":
            match = _CSI.match(output, i)
            assert match is not None, f"unexpected escape sequence {output[i : i + 12]!r}"
            params, command = match.groups()
            i = match.end()
            if command == "K":  # erase in line: 2 the whole line, 0 (default) to its end
                line = rows[row]
                rows[row] = [] if params == "2" else line[:col]
                wrapped.discard(row)
            elif command == "A":  # cursor up
                row = max(0, row - int(params or 1))
            elif command not in "mhl":  # colours, styles, cursor shown or hidden
                raise AssertionError(f"unexpected escape sequence {match.group()!r}")
            continue
        i += 1
        if char == "\r":
            col = 0
        elif char == "\n":
            row, col = row + 1, 0
        else:
            if col >= columns:  # the right margin: the line goes on below
                wrapped.add(row)
                row, col = row + 1, 0
            while len(rows) <= row:
                rows.append([])
            line = rows[row]
            line.extend(" " * (col - len(line)))
            if col < len(line):
                line[col] = char
            else:
                line.append(char)
            col += 1
        while len(rows) <= row:
            rows.append([])
    lines: list[str] = []
    joined = ""
    for index, cells in enumerate(rows):
        joined += "".join(cells)
        if index not in wrapped:
            lines.append(joined.rstrip())
            joined = ""
    while lines and not lines[-1]:
        lines.pop()
    return lines
