"""What the command line offers the rest of trio-rlmesh; none of it is public API.

:mod:`trio_rlmesh.ray` loads env targets on its actors the way ``serve-env`` loads them, and
reports an actor's failure to start by the error that matters, as the CLI does.
"""

from __future__ import annotations

from ._exit import unwrap
from ._targets import load_env_target

__all__ = ["load_env_target", "unwrap"]
