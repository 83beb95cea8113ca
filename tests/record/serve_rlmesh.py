"""Serve :class:`envs.Stepper` (rendering ``rgb_array``) with the real ``rlmesh.EnvServer``.

Usage: ``python serve_rlmesh.py KIND READY_FILE`` (``KIND`` is ``stepper``), the protocol of
``tests.interop.conftest.script_server``: the bound address goes to ``READY_FILE`` and
stdout.
"""

from __future__ import annotations

import os
import sys
import warnings


def main() -> None:
    kind, ready_file = sys.argv[1], sys.argv[2]
    if kind != "stepper":
        raise SystemExit(f"unknown env kind {kind!r}")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    warnings.simplefilter("ignore")  # rlmesh warns about unpinned editions

    import envs
    import rlmesh

    server = rlmesh.EnvServer(envs.Stepper(render_mode="rgb_array"), address="tcp://127.0.0.1:0")
    tmp = ready_file + ".tmp"
    with open(tmp, "w") as out:
        out.write(server.address)
    os.replace(tmp, ready_file)
    print(server.address, flush=True)
    server.serve()


if __name__ == "__main__":
    main()
