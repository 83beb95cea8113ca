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

from ._driver import RuntimeDriver as RuntimeDriver
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
from ._interfaces import EndpointTimings as EndpointTimings
from ._interfaces import EnvResetResult as EnvResetResult
from ._interfaces import EnvStepResult as EnvStepResult
from ._interfaces import ModelPrediction as ModelPrediction
from ._interfaces import RuntimeEnv as RuntimeEnv
from ._interfaces import RuntimeModel as RuntimeModel
from ._report import EndpointReport as EndpointReport
from ._report import EpisodeRecord as EpisodeRecord
from ._report import RunSetup as RunSetup
from ._report import RunStatus as RunStatus
from ._report import RuntimeReport as RuntimeReport
from ._spec import PeerCeiling as PeerCeiling
from ._spec import RuntimeLimits as RuntimeLimits
from ._spec import RuntimeSessionSpec as RuntimeSessionSpec
from ._summary import RunSummary as RunSummary
from ._telemetry import TelemetryRow as TelemetryRow

__all__ = [
    "ActionReceived",
    "EndpointReport",
    "EndpointTimings",
    "EnvResetResult",
    "EnvStepResult",
    "EpisodeCompleted",
    "EpisodeRecord",
    "EpisodeStarted",
    "ModelPrediction",
    "ObservationEmitted",
    "PeerCeiling",
    "ResetCompleted",
    "RunSetup",
    "RunStatus",
    "RunSummary",
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
    "StepCompleted",
    "Telemetry",
    "TelemetryRow",
]
