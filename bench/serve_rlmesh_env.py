"""Serve one benchmark env with the real ``rlmesh.EnvServer`` (run in a subprocess).

Usage: ``python serve_rlmesh_env.py KIND READY_FILE``; KIND is a key of
``bench_envs.BUILDERS``. Writes the bound address to READY_FILE, then serves on this
process's main thread until terminated.
"""

from __future__ import annotations

import os
import sys
import warnings


def main() -> None:
    kind, ready_file = sys.argv[1], sys.argv[2]
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    warnings.simplefilter("ignore")  # rlmesh warns about unpinned workflow editions

    import bench_envs
    import rlmesh

    server = rlmesh.EnvServer(bench_envs.BUILDERS[kind](), address="tcp://127.0.0.1:0")
    tmp = ready_file + ".tmp"
    with open(tmp, "w") as out:
        out.write(server.address)
    os.replace(tmp, ready_file)
    server.serve()


if __name__ == "__main__":
    main()
