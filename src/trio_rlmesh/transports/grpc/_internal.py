"""What the gRPC transport offers the rest of trio-rlmesh; none of it is public API.

The command line tells a failed handshake by the operation its error names.
"""

from __future__ import annotations

from ._handshake import handshake_operation

__all__ = ["handshake_operation"]
