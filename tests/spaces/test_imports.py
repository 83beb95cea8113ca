from __future__ import annotations

import subprocess
import sys


def test_importing_spaces_does_not_import_gymnasium() -> None:
    code = "import sys, trio_rlmesh.spaces; assert 'gymnasium' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
