"""Remote envs with Gymnasium's shape, for trio programs.

:func:`open_remote_env` / :func:`open_remote_vector_env` (async context managers) yield an
:class:`AsyncRemoteEnv` / :class:`AsyncRemoteVectorEnv` whose ``reset``, ``step`` and
``render`` are awaited, each under a deadline. They work against any rlmesh-wire-v1 env
server, ours or RLMesh's, and speak numpy: no protobuf message ever reaches the caller.

Example::

    async with open_remote_env("127.0.0.1:50051") as env:
        obs, info = await env.reset(seed=0)
"""

from __future__ import annotations

from ._async import DEFAULT_REQUEST_TIMEOUT as DEFAULT_REQUEST_TIMEOUT
from ._async import AsyncRemoteEnv as AsyncRemoteEnv
from ._async import AsyncRemoteVectorEnv as AsyncRemoteVectorEnv
from ._async import open_remote_env as open_remote_env
from ._async import open_remote_vector_env as open_remote_vector_env
from ._png import PngError as PngError
from ._png import decode_png as decode_png

__all__ = [
    "DEFAULT_REQUEST_TIMEOUT",
    "AsyncRemoteEnv",
    "AsyncRemoteVectorEnv",
    "PngError",
    "decode_png",
    "open_remote_env",
    "open_remote_vector_env",
]
