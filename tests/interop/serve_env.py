"""Serve one env with the real ``rlmesh.EnvServer`` on 127.0.0.1:0 (interop tests' helper).

Usage: ``python serve_env.py KIND READY_FILE``. ``KIND`` names an env built by
:func:`tests.interop.envs.build` (or this file's sibling ``envs.py`` when run as a
script). The bound address is written to ``READY_FILE`` (atomically) and printed;
the server runs until the process is terminated.
"""

from __future__ import annotations

import os
import sys
import warnings


def main() -> None:
    kind, ready_file = sys.argv[1], sys.argv[2]
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    warnings.simplefilter("ignore")  # rlmesh warns about unpinned editions

    import envs
    import rlmesh

    server = rlmesh.EnvServer(envs.build(kind), address="tcp://127.0.0.1:0")
    tmp = ready_file + ".tmp"
    with open(tmp, "w") as out:
        out.write(server.address)
    os.replace(tmp, ready_file)
    print(server.address, flush=True)
    server.serve()


if __name__ == "__main__":
    main()
