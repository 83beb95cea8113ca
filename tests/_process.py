"""Child processes that say they are ready by printing a line: read it as it comes."""

from __future__ import annotations

import trio


async def first_line(process: trio.Process, what: str) -> str:
    """The first line ``process`` prints on its stdout (a pipe), without its newline.

    Read as the bytes arrive (no polling); ``RuntimeError`` naming ``what`` and the exit
    status when the process ends first. Bound it with the caller's ``fail_after``.
    """
    assert process.stdout is not None, "start the process with stdout=subprocess.PIPE"
    line = bytearray()
    while not line.endswith(b"\n"):
        chunk = await process.stdout.receive_some(1)
        if not chunk:
            raise RuntimeError(
                f"{what} exited with status {await process.wait()} before it was ready"
            )
        line += chunk
    return line.decode().strip()
