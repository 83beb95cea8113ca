"""The public surface, pinned: every public module's ``__all__``, name by name.

A public module is one whose dotted path has no ``_`` component. Changing what one exports
means changing the list below in the same commit, on purpose (and a changelog fragment).
The generic checks keep the surface honest: what ``__all__`` names exists and is
documented, nothing public is exported by accident or left out of ``__all__``, and every
exception a user can catch belongs to the :class:`trio_rlmesh.Error` family.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path
from types import GenericAlias, ModuleType
from typing import Any

import pytest
import trio

import trio_rlmesh
import trio_rlmesh.gym

PUBLIC: dict[str, list[str]] = {
    "trio_rlmesh": [
        "CodecError",
        "EnvError",
        "Error",
        "HookError",
        "MetaConversionError",
        "ModelError",
        "OperationTimeout",
        "ProtocolError",
        "RecordingError",
        "RunLocalOptions",
        "SpaceError",
        "SpecError",
        "TransportError",
        "__version__",
        "run",
        "run_local",
        "run_remote",
    ],
    "trio_rlmesh.adapters": [
        "ACTION_DELTA_POS",
        "ACTION_DELTA_ROT",
        "ACTION_EEF_POS",
        "ACTION_EEF_ROT",
        "ACTION_GRIPPER",
        "ACTION_JOINT_POS",
        "ACTION_JOINT_VEL",
        "Action",
        "Actuator",
        "Adapter",
        "AdapterBase",
        "AdapterResolutionError",
        "Advisory",
        "BASE",
        "BASE_ANG_VEL",
        "BASE_ROT",
        "COMMAND_BASE_VEL",
        "Concat",
        "ConcatPart",
        "Constant",
        "Custom",
        "CustomEncoding",
        "EEF_POS",
        "EEF_ROT",
        "EEF_WRENCH",
        "ENV_BRANCH_METADATA_KEY",
        "ENV_METADATA_KEY",
        "EnvTags",
        "Field",
        "FitMode",
        "Frame",
        "GRIPPER_POS",
        "HEAD",
        "IMAGE_PRIMARY",
        "IMAGE_SECONDARY",
        "IMAGE_WRIST",
        "INSTRUCTION",
        "Image",
        "ImageLayout",
        "ImageTag",
        "InputNode",
        "JOINT_POS",
        "JOINT_VEL",
        "LEFT_ARM",
        "LEFT_LEG",
        "MODEL_METADATA_KEY",
        "ModelLeaf",
        "ModelSpec",
        "ObsLeaf",
        "ObsNode",
        "ObsTransform",
        "ObservationRoles",
        "PARTS",
        "Previous",
        "Provenance",
        "RIGHT_ARM",
        "RIGHT_LEG",
        "ROTATION_DIMS",
        "Reference",
        "Resample",
        "Rotation",
        "RotationEncoding",
        "RotationTransform",
        "Split",
        "StackPad",
        "StackSpec",
        "State",
        "StateTag",
        "TORSO",
        "Text",
        "TextTag",
        "resolve",
        "resolve_from_contract",
        "tag",
    ],
    "trio_rlmesh.adapters.constants": [
        "ACTION_DELTA_POS",
        "ACTION_DELTA_ROT",
        "ACTION_EEF_POS",
        "ACTION_EEF_ROT",
        "ACTION_GRIPPER",
        "ACTION_JOINT_POS",
        "ACTION_JOINT_VEL",
        "BASE",
        "BASE_ANG_VEL",
        "BASE_ROT",
        "COMMAND_BASE_VEL",
        "EEF_POS",
        "EEF_ROT",
        "EEF_WRENCH",
        "ENV_BRANCH_METADATA_KEY",
        "ENV_METADATA_KEY",
        "GRIPPER_POS",
        "HEAD",
        "IMAGE_PRIMARY",
        "IMAGE_SECONDARY",
        "IMAGE_WRIST",
        "INSTRUCTION",
        "JOINT_POS",
        "JOINT_VEL",
        "LEFT_ARM",
        "LEFT_LEG",
        "MODEL_METADATA_KEY",
        "PARTS",
        "RIGHT_ARM",
        "RIGHT_LEG",
        "TORSO",
    ],
    "trio_rlmesh.adapters.constants.parts": [
        "BASE",
        "HEAD",
        "LEFT_ARM",
        "LEFT_LEG",
        "PARTS",
        "RIGHT_ARM",
        "RIGHT_LEG",
        "TORSO",
    ],
    "trio_rlmesh.adapters.constants.roles": [
        "ACTION_DELTA_POS",
        "ACTION_DELTA_ROT",
        "ACTION_EEF_POS",
        "ACTION_EEF_ROT",
        "ACTION_GRIPPER",
        "ACTION_JOINT_POS",
        "ACTION_JOINT_VEL",
        "BASE_ANG_VEL",
        "BASE_ROT",
        "COMMAND_BASE_VEL",
        "EEF_POS",
        "EEF_ROT",
        "EEF_WRENCH",
        "GRIPPER_POS",
        "IMAGE_PRIMARY",
        "IMAGE_SECONDARY",
        "IMAGE_WRIST",
        "INSTRUCTION",
        "JOINT_POS",
        "JOINT_VEL",
    ],
    "trio_rlmesh.adapters.helpers": ["render_placement"],
    "trio_rlmesh.adapters.specs": [
        "Action",
        "Actuator",
        "Concat",
        "ConcatPart",
        "Constant",
        "Custom",
        "CustomEncoding",
        "EnvTags",
        "Field",
        "FitMode",
        "Frame",
        "Image",
        "ImageLayout",
        "ImageTag",
        "InputNode",
        "ModelLeaf",
        "ModelSpec",
        "ObsLeaf",
        "ObsNode",
        "ObsTransform",
        "ObservationRoles",
        "Previous",
        "Provenance",
        "ROTATION_DIMS",
        "Reference",
        "Resample",
        "Rotation",
        "RotationEncoding",
        "RotationTransform",
        "Split",
        "StackPad",
        "StackSpec",
        "State",
        "StateTag",
        "Text",
        "TextTag",
    ],
    "trio_rlmesh.gym": [
        "AsyncRemoteEnv",
        "AsyncRemoteVectorEnv",
        "DEFAULT_REQUEST_TIMEOUT",
        "ENV_ID",
        "PngError",
        "RemoteEnv",
        "RemoteVectorEnv",
        "decode_png",
        "open_remote_env",
        "open_remote_vector_env",
        "register",
    ],
    "trio_rlmesh.model": [
        "EpisodeRef",
        "HeldState",
        "HistoryRow",
        "Model",
        "ModelEngine",
        "ModelHandler",
        "ModelObservation",
        "PredictContext",
        "PredictFrames",
        "ResolveOptions",
        "RouteContract",
        "RouteNeeds",
        "RouteSetup",
        "as_handler",
        "predict_seed",
    ],
    "trio_rlmesh.protocol": [
        "EnvContractInfo",
        "PROTOCOL_GENERATION",
        "SUPPORTED_WORKFLOW_EDITIONS",
        "WORKFLOW_EDITION",
        "core_v1",
        "env_v1",
        "make_env_contract",
        "meta_to_python",
        "model_v1",
        "python_to_meta",
        "read_env_contract",
        "space_to_spec",
        "spaces_v1",
        "spec_to_space",
        "value_to_python",
    ],
    "trio_rlmesh.ray": ["RayEnvFleet", "RayEnvServer", "env_fleet"],
    "trio_rlmesh.record": [
        "DatasetSummary",
        "RecordOptions",
        "RecordingHooks",
        "open_recording",
        "plot_returns",
        "summarize",
    ],
    "trio_rlmesh.runtime": [
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
    ],
    "trio_rlmesh.spaces": [
        "BoundsKind",
        "Box",
        "DType",
        "Dict",
        "Discrete",
        "LeafBuffer",
        "MultiBinary",
        "MultiDiscrete",
        "Space",
        "Text",
        "Tuple",
        "decode_batch",
        "decode_lanes",
        "decode_value",
        "encode_batch",
        "encode_lanes",
        "encode_value",
        "from_gymnasium",
        "stack_lanes",
        "to_gymnasium",
        "unstack",
        "validate",
    ],
    "trio_rlmesh.testing": [
        "ConformanceError",
        "FakeEnv",
        "FakeModel",
        "Fault",
        "check_runtime_env",
        "check_runtime_model",
    ],
    "trio_rlmesh.transports": [],
    "trio_rlmesh.transports.grpc": [
        "Address",
        "BACKENDS",
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
    ],
    "trio_rlmesh.transports.inprocess": [
        "GymEnvRuntimeEnv",
        "ModelHandlerRuntimeModel",
        "link_in_process",
    ],
}

# Exception classes that never reach a user, each turned into an Error where it is caught.
INTERNAL_EXCEPTIONS = {
    "trio_rlmesh.runtime._worker.WorkerUnavailable": (
        "a worker refusing a call; every adapter turns it into its EnvError/ModelError "
        "(WorkerUnavailable.as_error, or a BUSY wire error)"
    ),
    "trio_rlmesh.runtime._worker.WorkerStuck": "a WorkerUnavailable",
    "trio_rlmesh.runtime._worker.WorkerClosed": "a WorkerUnavailable",
    "trio_rlmesh.protocol._wire.Fallback": (
        "the fast codec handing a message to betterproto2; caught in protocol._fastwire"
    ),
    "trio_rlmesh.transports.grpc._status.GrpcError": (
        "a call's gRPC status; map_transport_error turns it into a TransportError or an "
        "OperationTimeout at the client boundary, servers send it as the status"
    ),
    "trio_rlmesh.transports.grpc._guard.Abuse": (
        "a client past a server limit; the server answers GOAWAY ENHANCE_YOUR_CALM and "
        "closes that connection"
    ),
    "trio_rlmesh.transports.grpc._status.ConnectionLost": (
        "a call that ended without a status; map_transport_error turns it into a TransportError"
    ),
}


def _public_modules() -> list[str]:
    found = ["trio_rlmesh"]
    for info in pkgutil.walk_packages(trio_rlmesh.__path__, "trio_rlmesh."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            found.append(info.name)
    return sorted(found)


def _all_modules() -> list[ModuleType]:
    modules = [trio_rlmesh]
    for info in pkgutil.walk_packages(trio_rlmesh.__path__, "trio_rlmesh."):
        if "._generated" not in info.name:
            modules.append(importlib.import_module(info.name))
    return modules


def _ours(value: Any) -> bool:
    return str(getattr(value, "__module__", "")).startswith("trio_rlmesh.") or (
        getattr(value, "__module__", None) == "trio_rlmesh"
    )


def test_every_public_module_is_pinned() -> None:
    assert _public_modules() == sorted(PUBLIC)


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_all_is_exactly_the_pinned_list(name: str) -> None:
    module = importlib.import_module(name)
    exported = list(getattr(module, "__all__", []))
    assert len(exported) == len(set(exported)), "a name is listed twice"
    assert sorted(exported) == PUBLIC[name]


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_every_exported_name_exists(name: str) -> None:
    module = importlib.import_module(name)
    missing = [n for n in PUBLIC[name] if not hasattr(module, n)]
    assert missing == []


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_nothing_public_is_left_out_of_all(name: str) -> None:
    """A public attribute that is one of our classes or functions is exported, or renamed
    with a leading underscore (trio's rule: no accidental public names)."""
    module = importlib.import_module(name)
    stray = [
        attr
        for attr, value in vars(module).items()
        if not attr.startswith("_")
        and (inspect.isclass(value) or inspect.isfunction(value))
        and _ours(value)
        and attr not in PUBLIC[name]
    ]
    assert stray == []


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_every_public_object_has_a_docstring(name: str) -> None:
    module = importlib.import_module(name)
    assert (module.__doc__ or "").strip(), f"{name} has no docstring"
    undocumented = [
        n
        for n in PUBLIC[name]
        if (inspect.isclass(obj := getattr(module, n)) or inspect.isfunction(obj))
        # A parametrized alias (``Callable[..., Any]``) counts as a class on Python 3.10,
        # and takes no docstring of its own.
        and not isinstance(obj, GenericAlias)
        and not (obj.__doc__ or "").strip()
    ]
    assert undocumented == []


def test_every_exported_exception_is_an_error() -> None:
    exported = {
        f"{name}.{n}": getattr(importlib.import_module(name), n)
        for name, names in PUBLIC.items()
        for n in names
    }
    exceptions = {k: v for k, v in exported.items() if isinstance(v, type)}
    exceptions = {k: v for k, v in exceptions.items() if issubclass(v, BaseException)}
    assert len(exceptions) >= 12  # the scan saw the errors
    outside = [k for k, v in exceptions.items() if not issubclass(v, trio_rlmesh.Error)]
    assert outside == []


def test_each_error_has_one_public_home() -> None:
    homes: dict[type, list[str]] = {}
    for name, names in PUBLIC.items():
        module = importlib.import_module(name)
        for n in names:
            value = getattr(module, n)
            if isinstance(value, type) and issubclass(value, BaseException):
                homes.setdefault(value, []).append(f"{name}.{n}")
    assert {k.__name__: v for k, v in homes.items() if len(v) > 1} == {}


def test_every_exception_class_is_an_error_or_declared_internal() -> None:
    """A new exception class either joins the Error family or says here why no user sees it."""
    found: dict[str, type] = {}
    for module in _all_modules():
        for value in vars(module).values():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == module.__name__
                and not value.__name__.startswith("_")
            ):
                found[f"{value.__module__}.{value.__qualname__}"] = value
    assert len(found) >= 20  # the walk really imported the package
    outside = sorted(k for k, v in found.items() if not issubclass(v, trio_rlmesh.Error))
    assert outside == sorted(INTERNAL_EXCEPTIONS)


def test_errors_keep_the_builtin_bases_users_catch() -> None:
    from trio_rlmesh.testing import ConformanceError
    from trio_rlmesh.transports.grpc._portal import PortalClosedError

    bases = {
        trio_rlmesh.CodecError: ValueError,
        trio_rlmesh.MetaConversionError: TypeError,
        trio_rlmesh.OperationTimeout: TimeoutError,
        trio_rlmesh.SpaceError: trio_rlmesh.SpecError,
        trio_rlmesh.SpecError: ValueError,
        trio_rlmesh.TransportError: ConnectionError,
        trio_rlmesh.gym.PngError: ValueError,
        ConformanceError: AssertionError,
        PortalClosedError: trio.ClosedResourceError,
    }
    assert [e for e, base in bases.items() if not issubclass(e, base)] == []
    assert issubclass(PortalClosedError, trio_rlmesh.TransportError)


def test_every_public_module_has_an_api_page_documenting_its_all() -> None:
    """docs/api documents each public module with ``automodule`` ``:members:`` (which
    follows ``__all__``, so a removed name leaves the page too); ``trio_rlmesh.transports``
    exports nothing and has no page. An ``:exclude-members:`` must name exported names."""
    pages = (Path(__file__).resolve().parents[1] / "docs" / "api").glob("*.md")
    documented: dict[str, str] = {}
    for page in pages:
        text = page.read_text()
        for match in re.finditer(r"\.\. automodule:: (\S+)\n((?:   :.*\n)*)", text):
            documented[match[1]] = match[2]
    assert sorted(documented) == sorted(n for n in PUBLIC if PUBLIC[n])
    for name, options in documented.items():
        assert "   :members:" in options, name
        excluded = re.search(r":exclude-members: (.*)", options)
        if excluded:
            names = [n.strip() for n in excluded[1].split(",")]
            assert set(names) <= set(PUBLIC[name]), name


def test_the_api_page_opens_with_the_entry_points() -> None:
    """autodoc lists a module's members in ``__all__``'s order ("bysource"): the root
    package's page starts with what runs an evaluation, then the errors, root first."""
    conf = (Path(__file__).resolve().parents[1] / "docs" / "conf.py").read_text()
    assert 'autodoc_member_order = "bysource"' in conf
    assert trio_rlmesh.__all__[:5] == ["run", "run_local", "run_remote", "RunLocalOptions", "Error"]
