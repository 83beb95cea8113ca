"""gRPC transports over grpclib: env and model clients and servers for rlmesh-wire-v1.

This is the only package of trio-rlmesh that imports asyncio or grpclib. grpclib
runs on one asyncio loop in a helper thread shared by the process; trio code
reaches it through the portal (:func:`open_portal`), one crossing per round trip.

>>> from trio_rlmesh.transports.grpc import parse_address
>>> str(parse_address("127.0.0.1:50051"))
'tcp://127.0.0.1:50051'
"""

from __future__ import annotations

from ._common import Address as Address
from ._common import parse_address as parse_address
from ._common import parse_bind_address as parse_bind_address
from ._env_client import EnvClient as EnvClient
from ._env_client import EnvClientRuntimeEnv as EnvClientRuntimeEnv
from ._env_client import EnvClientStatistics as EnvClientStatistics
from ._env_client import RemoteEnvError as RemoteEnvError
from ._env_client import open_env_client as open_env_client
from ._env_server import serve_env as serve_env
from ._model_client import ModelClient as ModelClient
from ._model_client import ModelClientRuntimeModel as ModelClientRuntimeModel
from ._model_client import open_model_client as open_model_client
from ._model_server import serve_model as serve_model
from ._portal import Portal as Portal
from ._portal import PortalClosedError as PortalClosedError
from ._portal import open_portal as open_portal

__all__ = [
    "Address",
    "EnvClient",
    "EnvClientRuntimeEnv",
    "EnvClientStatistics",
    "ModelClient",
    "ModelClientRuntimeModel",
    "Portal",
    "PortalClosedError",
    "RemoteEnvError",
    "open_env_client",
    "open_model_client",
    "open_portal",
    "parse_address",
    "parse_bind_address",
    "serve_env",
    "serve_model",
]
