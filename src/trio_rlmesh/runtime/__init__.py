"""The transport-agnostic runtime core: session spec, driver, hooks, telemetry and report.

>>> import trio_rlmesh.runtime as rt
>>> rt.RuntimeLimits().service_close_timeout
5.0

A run is ``await RuntimeDriver(spec, env, model, hooks).run()``, where ``env`` and
``model`` are any objects satisfying :class:`RuntimeEnv` and :class:`RuntimeModel`
(``trio_rlmesh.testing`` has scripted fakes). Importing this package imports neither
asyncio nor grpclib.
"""

from __future__ import annotations

from .._errors import EnvError as EnvError
from .._errors import Error as Error
from .._errors import HookError as HookError
from .._errors import ModelError as ModelError
from .._errors import OperationTimeout as OperationTimeout
from .._errors import ProtocolError as ProtocolError
from .._errors import SpecError as SpecError
from .._errors import TransportError as TransportError
from ._driver import RuntimeDriver as RuntimeDriver
from ._episodes import EpisodeBook as EpisodeBook
from ._episodes import LaneEvent as LaneEvent
from ._episodes import LaneState as LaneState
from ._episodes import LaneStateError as LaneStateError
from ._hooks import ActionReceived as ActionReceived
from ._hooks import EpisodeCompleted as EpisodeCompleted
from ._hooks import EpisodeStarted as EpisodeStarted
from ._hooks import ObservationEmitted as ObservationEmitted
from ._hooks import ResetCompleted as ResetCompleted
from ._hooks import RuntimeHooks as RuntimeHooks
from ._hooks import SessionEnded as SessionEnded
from ._hooks import SessionFailed as SessionFailed
from ._hooks import SessionStarted as SessionStarted
from ._hooks import StepCompleted as StepCompleted
from ._hooks import Telemetry as Telemetry
from ._ids import deterministic_reset_seed as deterministic_reset_seed
from ._ids import mint_uuid7 as mint_uuid7
from ._interfaces import EndpointTimings as EndpointTimings
from ._interfaces import EnvResetResult as EnvResetResult
from ._interfaces import EnvStepResult as EnvStepResult
from ._interfaces import ModelPrediction as ModelPrediction
from ._interfaces import RuntimeEnv as RuntimeEnv
from ._interfaces import RuntimeModel as RuntimeModel
from ._report import EpisodeRecord as EpisodeRecord
from ._report import RunStatus as RunStatus
from ._report import RuntimeReport as RuntimeReport
from ._spec import DEFAULT_MAX_EPISODE_STEPS as DEFAULT_MAX_EPISODE_STEPS
from ._spec import PeerCeiling as PeerCeiling
from ._spec import RuntimeLimits as RuntimeLimits
from ._spec import RuntimeSessionSpec as RuntimeSessionSpec
from ._telemetry import TelemetryRecorder as TelemetryRecorder
from ._telemetry import TelemetryRow as TelemetryRow
from ._telemetry import format_telemetry as format_telemetry

__all__ = [
    "DEFAULT_MAX_EPISODE_STEPS",
    "ActionReceived",
    "EndpointTimings",
    "EnvError",
    "EnvResetResult",
    "EnvStepResult",
    "EpisodeBook",
    "EpisodeCompleted",
    "EpisodeRecord",
    "EpisodeStarted",
    "Error",
    "HookError",
    "LaneEvent",
    "LaneState",
    "LaneStateError",
    "ModelError",
    "ModelPrediction",
    "ObservationEmitted",
    "OperationTimeout",
    "PeerCeiling",
    "ProtocolError",
    "ResetCompleted",
    "RunStatus",
    "RuntimeDriver",
    "RuntimeEnv",
    "RuntimeHooks",
    "RuntimeLimits",
    "RuntimeModel",
    "RuntimeReport",
    "RuntimeSessionSpec",
    "SessionEnded",
    "SessionFailed",
    "SessionStarted",
    "SpecError",
    "StepCompleted",
    "Telemetry",
    "TelemetryRecorder",
    "TelemetryRow",
    "TransportError",
    "deterministic_reset_seed",
    "format_telemetry",
    "mint_uuid7",
]
