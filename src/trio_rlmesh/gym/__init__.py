"""Remote envs with Gymnasium's shape: async for trio programs, sync for everything else.

* :func:`open_remote_env` / :func:`open_remote_vector_env` (async context managers) yield an
  :class:`AsyncRemoteEnv` / :class:`AsyncRemoteVectorEnv` whose ``reset``, ``step`` and
  ``render`` are awaited, each under a deadline.
* :class:`RemoteEnv` (a ``gymnasium.Env``) and :class:`RemoteVectorEnv` (a
  ``gymnasium.vector.VectorEnv``) are for synchronous code, such as a training loop; each
  runs the async env on a private trio thread.

All of them work against any rlmesh-wire-v1 env server, ours or RLMesh's, and speak numpy:
no protobuf message ever reaches the caller.

Importing this module registers ``trio_rlmesh/Remote-v0`` with Gymnasium, so
``gymnasium.make("trio_rlmesh/Remote-v0", address=...)`` builds a :class:`RemoteEnv` and
``gymnasium.make_vec("trio_rlmesh/Remote-v0", num_envs=N, address=...)`` a
:class:`RemoteVectorEnv`. ``gymnasium.make("trio_rlmesh.gym:trio_rlmesh/Remote-v0", ...)``
imports this module first by itself. (Gymnasium 1.x no longer loads plugins from entry
points, so registering on import is the only way; the registration itself imports nothing.)

Example::

    import gymnasium
    import trio_rlmesh.gym

    env = gymnasium.make("trio_rlmesh/Remote-v0", address="127.0.0.1:50051")
    obs, info = env.reset(seed=0)
"""

from __future__ import annotations

from .._png import PngError as PngError
from .._png import decode_png as decode_png
from ._async import DEFAULT_REQUEST_TIMEOUT as DEFAULT_REQUEST_TIMEOUT
from ._async import AsyncRemoteEnv as AsyncRemoteEnv
from ._async import AsyncRemoteVectorEnv as AsyncRemoteVectorEnv
from ._async import open_remote_env as open_remote_env
from ._async import open_remote_vector_env as open_remote_vector_env
from ._registration import ENV_ID as ENV_ID
from ._registration import register as register
from ._sync import RemoteEnv as RemoteEnv
from ._sync import RemoteVectorEnv as RemoteVectorEnv

__all__ = [
    "DEFAULT_REQUEST_TIMEOUT",
    "ENV_ID",
    "AsyncRemoteEnv",
    "AsyncRemoteVectorEnv",
    "PngError",
    "RemoteEnv",
    "RemoteVectorEnv",
    "decode_png",
    "open_remote_env",
    "open_remote_vector_env",
    "register",
]

register()
