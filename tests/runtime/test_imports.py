from __future__ import annotations

import subprocess
import sys


def test_runtime_imports_neither_asyncio_nor_grpclib() -> None:
    code = (
        "import sys, trio_rlmesh.runtime, trio_rlmesh.testing;"
        "bad = [m for m in ('asyncio', 'grpclib') if m in sys.modules];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
