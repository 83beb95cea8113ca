"""What the gRPC transport offers the rest of trio-rlmesh; none of it is public API.

The command line tells a failed handshake by the operation its error names, and offers the
autoreset modes ``serve_env`` declares.
"""

from __future__ import annotations

from ._env_server import AUTORESET_MODES
from ._handshake import handshake_operation

__all__ = ["AUTORESET_MODES", "handshake_operation"]
