"""``python -m trio_rlmesh._cli`` runs the ``trio-rlmesh`` console script."""

from __future__ import annotations

import sys

from . import main

if __name__ == "__main__":
    sys.exit(main())
