"""trio-rlmesh: a trio-native runtime speaking RLMesh's wire protocol (rlmesh-wire-v1).

Importing this package never imports grpclib or asyncio; the gRPC transports live in
``trio_rlmesh.transports.grpc`` and are imported on demand.
"""

from __future__ import annotations

from ._errors import CodecError as CodecError
from ._errors import EnvError as EnvError
from ._errors import Error as Error
from ._errors import HookError as HookError
from ._errors import MetaConversionError as MetaConversionError
from ._errors import ModelError as ModelError
from ._errors import OperationTimeout as OperationTimeout
from ._errors import ProtocolError as ProtocolError
from ._errors import RecordingError as RecordingError
from ._errors import SpaceError as SpaceError
from ._errors import SpecError as SpecError
from ._errors import TransportError as TransportError
from ._facade import RunLocalOptions as RunLocalOptions
from ._facade import run as run
from ._facade import run_local as run_local
from ._facade import run_remote as run_remote
from ._version import __version__ as __version__

# In reading order: the API page lists the names in this order (autodoc's "bysource").
__all__ = [  # noqa: RUF022 - reading order, not alphabetical
    "run",
    "run_local",
    "run_remote",
    "RunLocalOptions",
    "Error",
    "SpecError",
    "SpaceError",
    "CodecError",
    "MetaConversionError",
    "EnvError",
    "ModelError",
    "TransportError",
    "OperationTimeout",
    "ProtocolError",
    "HookError",
    "RecordingError",
    "__version__",
]
