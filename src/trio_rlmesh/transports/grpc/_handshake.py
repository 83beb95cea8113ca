"""What both ends of either service agree on before any Join: method paths, the
PeerInfo this package sends, the 0.1.0 handshake messages and the token header.

Pure functions and constants; no I/O.
"""

from __future__ import annotations

import functools
import importlib.metadata
import platform
from collections.abc import Iterable, Mapping
from typing import Final

from ..._version import __version__
from ...protocol import PROTOCOL_GENERATION, SUPPORTED_WORKFLOW_EDITIONS, WORKFLOW_EDITION, core_v1
from ...protocol._internal import (
    EXTRA_BUILD_COHORT,
    EXTRA_BUILD_SOURCE,
    EXTRA_WORKFLOW_BASE,
    EXTRA_WORKFLOW_EDITION,
)

__all__ = [
    "AUTHORIZATION_HEADER",
    "ENV_HANDSHAKE",
    "ENV_JOIN",
    "ENV_SHUTDOWN",
    "HEALTH_CHECK",
    "HEALTH_WATCH",
    "MODEL_HANDSHAKE",
    "MODEL_JOIN",
    "MODEL_SHUTDOWN",
    "PACKAGE_NAME",
    "auth_metadata",
    "generation_mismatch_message",
    "handshake_request",
    "handshake_response",
    "is_generation_compatible",
    "peer_info",
]

# Full method paths, exactly as the reference's tonic services register them.
ENV_HANDSHAKE: Final = "/rlmesh.env.v1.EnvService/Handshake"
ENV_JOIN: Final = "/rlmesh.env.v1.EnvService/Join"
ENV_SHUTDOWN: Final = "/rlmesh.env.v1.EnvService/Shutdown"
MODEL_HANDSHAKE: Final = "/rlmesh.model.v1.ModelService/Handshake"
MODEL_JOIN: Final = "/rlmesh.model.v1.ModelService/Join"
MODEL_SHUTDOWN: Final = "/rlmesh.model.v1.ModelService/Shutdown"
HEALTH_CHECK: Final = "/grpc.health.v1.Health/Check"
HEALTH_WATCH: Final = "/grpc.health.v1.Health/Watch"

AUTHORIZATION_HEADER: Final = "authorization"
"""Metadata key carrying the raw token (no ``Bearer`` prefix), as the reference does."""

PACKAGE_NAME: Final = "trio-rlmesh"

# What a stable release build of the reference puts in PeerInfo.extra.
_BUILD_COHORT: Final = "stable"
_BUILD_SOURCE: Final = "release"

# Frameworks whose versions PeerInfo reports when they are installed.
_FRAMEWORKS: Final = ("numpy", "gymnasium", "trio", "grpclib")


# --------------------------------------------------------------------------- handshake


@functools.cache  # reading installed metadata takes about 0.1 ms a package; once per process
def _distribution_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _os_name() -> str:
    system = platform.system().lower()
    return "macos" if system == "darwin" else system


def peer_info(component: str) -> core_v1.PeerInfo:
    """The PeerInfo this package sends, shaped like a Python-hosted 0.1.0 peer's.

    ``component`` is ``rlmesh-env`` or ``rlmesh-model`` (the service spoken, by
    either side).
    """
    frameworks = {}
    for name in _FRAMEWORKS:
        version = _distribution_version(name)
        if version is not None:
            frameworks[name] = version
    return core_v1.PeerInfo(
        component=component,
        package_version=_distribution_version(PACKAGE_NAME) or __version__,
        language="python",
        language_version=platform.python_version(),
        os=_os_name(),
        os_version=platform.release(),
        arch=platform.machine(),
        framework_versions=frameworks,
        extra={
            EXTRA_WORKFLOW_EDITION: WORKFLOW_EDITION,
            EXTRA_WORKFLOW_BASE: WORKFLOW_EDITION.partition("-")[0],
            EXTRA_BUILD_COHORT: _BUILD_COHORT,
            EXTRA_BUILD_SOURCE: _BUILD_SOURCE,
        },
    )


def handshake_request(
    component: str,
    capabilities: Mapping[str, str] | None = None,
    *,
    editions: Iterable[str] = SUPPORTED_WORKFLOW_EDITIONS,
) -> core_v1.HandshakeRequest:
    """The core HandshakeRequest a 0.1.0 client sends: generation, PeerInfo,
    capabilities (empty by default), supported editions and the preferred one
    (the first listed)."""
    listed = [e for e in editions if e.strip()]
    return core_v1.HandshakeRequest(
        protocol_generation=PROTOCOL_GENERATION,
        peer_info=peer_info(component),
        capabilities=dict(capabilities or {}),
        supported_workflow_editions=listed,
        preferred_workflow_edition=listed[0] if listed else "",
    )


def is_generation_compatible(generation: str) -> bool:
    """The reference's whole compatibility rule: the trimmed generation must match exactly."""
    return generation.strip() == PROTOCOL_GENERATION


def generation_mismatch_message(generation: str) -> str:
    """The reference server's ``error_message`` for an incompatible generation."""
    return f"protocol generation {generation} not compatible with server {PROTOCOL_GENERATION}"


def handshake_response(
    component: str,
    request: core_v1.HandshakeRequest | None = None,
    *,
    capabilities: Mapping[str, str] | None = None,
    editions: Iterable[str] = SUPPORTED_WORKFLOW_EDITIONS,
) -> core_v1.HandshakeResponse:
    """The core HandshakeResponse a 0.1.0 server sends for ``request``.

    Compatibility depends only on the request's generation (editions are the
    client's business). An incompatible answer carries the reference's error
    message and no capabilities. With ``request=None`` the answer is compatible.
    """
    listed = [e for e in editions if e.strip()]
    compatible = request is None or is_generation_compatible(request.protocol_generation)
    response = core_v1.HandshakeResponse(
        compatible=compatible,
        peer_info=peer_info(component),
        capabilities=dict(capabilities or {}) if compatible else {},
        supported_workflow_editions=listed,
        preferred_workflow_edition=listed[0] if listed else "",
    )
    if not compatible:
        assert request is not None
        response.error_message = generation_mismatch_message(request.protocol_generation)
    return response


# --------------------------------------------------------------------------- auth


def auth_metadata(token: str | None) -> dict[str, str] | None:
    """Client metadata carrying ``token``; ``None`` (no header at all) for no or empty token."""
    return {AUTHORIZATION_HEADER: token} if token else None
