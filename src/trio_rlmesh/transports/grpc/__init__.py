"""gRPC transports: env and model clients and servers for rlmesh-wire-v1.

Every client and server is written once over a small backend interface and runs on
either backend:

* ``"trio"`` (the default): gRPC over ``h2`` on trio sockets, with no other event loop;
  it also serves and reaches in-memory addresses (``memory://name``) for tests;
* ``"grpclib"``: grpclib on an asyncio loop in a helper thread, bridged to trio. It is the
  only code of trio-rlmesh that imports asyncio or grpclib, and only when selected.

>>> from trio_rlmesh.transports.grpc import parse_address
>>> str(parse_address("127.0.0.1:50051"))
'tcp://127.0.0.1:50051'
"""

from __future__ import annotations

from ._address import Address as Address
from ._address import parse_address as parse_address
from ._address import parse_bind_address as parse_bind_address
from ._backend import BackendName as BackendName
from ._env_client import EnvClient as EnvClient
from ._env_client import EnvClientRuntimeEnv as EnvClientRuntimeEnv
from ._env_client import EnvClientStatistics as EnvClientStatistics
from ._env_client import RemoteEnvError as RemoteEnvError
from ._env_client import RemoteEnvTimeout as RemoteEnvTimeout
from ._env_client import open_env_client as open_env_client
from ._env_server import serve_env as serve_env
from ._model_client import ModelClient as ModelClient
from ._model_client import ModelClientRuntimeModel as ModelClientRuntimeModel
from ._model_client import open_model_client as open_model_client
from ._model_server import serve_model as serve_model
from ._registry import BACKENDS as BACKENDS
from ._settings import GrpcSettings as GrpcSettings
from ._settings import ServerLimits as ServerLimits

__all__ = [
    "BACKENDS",
    "Address",
    "BackendName",
    "EnvClient",
    "EnvClientRuntimeEnv",
    "EnvClientStatistics",
    "GrpcSettings",
    "ModelClient",
    "ModelClientRuntimeModel",
    "RemoteEnvError",
    "RemoteEnvTimeout",
    "ServerLimits",
    "open_env_client",
    "open_model_client",
    "parse_address",
    "parse_bind_address",
    "serve_env",
    "serve_model",
]
