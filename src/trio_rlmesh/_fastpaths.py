"""The one switch for the fast paths: ``TRIO_RLMESH_NO_FAST_PATHS``.

A fast path is a second way of doing what a plain, always-correct path already does, kept
because it is measurably faster and relying on something outside this project's control.
Today there is one: the DATA frames of open gRPC calls bypass h2 by reading its internals
(:mod:`trio_rlmesh.transports.grpc._h2`, only with the h2 releases it was checked against).
Setting ``TRIO_RLMESH_NO_FAST_PATHS=1`` before the package is imported turns every fast path
off, so the plain path runs as a whole configuration: ``nox -s tests_slow_paths`` runs the
suite that way, and a user can rule a fast path out when chasing a problem.
"""

from __future__ import annotations

import os
from typing import Final

__all__ = ["FAST_PATHS", "SWITCH"]

SWITCH: Final = "TRIO_RLMESH_NO_FAST_PATHS"
"""The environment variable: any value but empty or ``0`` switches the fast paths off."""

FAST_PATHS: Final[bool] = os.environ.get(SWITCH, "").strip() in ("", "0")
"""Whether fast paths may be taken (read once, at import)."""
