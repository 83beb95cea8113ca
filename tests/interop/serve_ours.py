"""Serve one env with trio-rlmesh's ``serve_env`` on 127.0.0.1:0 (interop tests' helper).

Usage: ``python serve_ours.py KIND READY_FILE [BACKEND]``. ``KIND`` names an env built by the
sibling ``envs.py`` (``build(kind)``); ``BACKEND`` is the gRPC backend (``trio``, the
default, or ``grpclib``). The bound address is written to ``READY_FILE`` (atomically) and
printed; the server runs until the process gets SIGTERM or SIGINT.
"""

from __future__ import annotations

import os
import signal
import sys


def main() -> None:
    kind, ready_file = sys.argv[1], sys.argv[2]
    backend = sys.argv[3] if len(sys.argv) > 3 else "trio"
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

    import envs  # type: ignore[import-not-found]  # the sibling file, put on sys.path above
    import trio

    from trio_rlmesh.transports.grpc import serve_env
    from trio_rlmesh.transports.grpc._registry import check_backend

    async def run() -> None:
        async with trio.open_nursery() as nursery:
            address = await nursery.start(
                lambda task_status: serve_env(
                    envs.build(kind), backend=check_backend(backend), task_status=task_status
                )
            )
            tmp = trio.Path(ready_file + ".tmp")
            await tmp.write_text(address)
            await tmp.replace(ready_file)
            print(address, flush=True)
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for _ in signals:
                    nursery.cancel_scope.cancel()
                    return

    trio.run(run)


if __name__ == "__main__":
    main()
