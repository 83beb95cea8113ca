"""What both ends of either service agree on before any Join, and the one handshake
both clients make.

Method paths, the PeerInfo this package sends, the 0.1.0 handshake messages and the token
header are pure functions and constants. :func:`handshake` and :func:`connecting` are the
handshake itself, written once for the env client and the model client; the servers answer
with :func:`handshake_response`, whose generation rule (:func:`is_generation_compatible`)
is the one the clients' peers apply.

The rules, the same on both sides (``<side>`` is ``env`` or ``model``)
----------------------------------------------------------------------

Every error names the operation ``<side>.handshake``, the server's address, and what to
change; its message starts ``<side>.handshake to <address>``.

=====================================  ========================================================
what happened                          what the caller gets
=====================================  ========================================================
the answer has no base                 :class:`~trio_rlmesh.ProtocolError`, not recoverable
the server refused our generation      :class:`~trio_rlmesh.ProtocolError`, not recoverable,
                                       with the server's own reason
no workflow edition in common          :class:`~trio_rlmesh.ProtocolError`, not recoverable,
                                       listing both sides' editions
no answer within ``connect_timeout``   :class:`~trio_rlmesh.OperationTimeout`, recoverable,
(connecting included)                  ``timeout`` set
anything on the wire                   :func:`~._errors.map_transport_error`'s table (a token
                                       refused, nothing listening, another service...)
=====================================  ========================================================

Why these: RLMesh 0.1.0's clients fail all three refusals as one ``HandshakeFailed``
protocol error, and none of them is a mistake in the caller's options that a
:class:`~trio_rlmesh.SpecError` (a usage error, exit status 2 on the command line) would
say: the two peers do not speak a common protocol, and the remedy is to run matching
releases. A timeout is recoverable: the same server may answer once it has started. The
connect deadline is this process's own: like RLMesh's clients, the handshake carries no
``grpc-timeout``. The model client opens its Join stream within the same deadline.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import platform
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final, Generic, Literal, TypeVar, overload

import attrs
import trio

from ..._errors import OperationTimeout, ProtocolError, where
from ..._version import __version__
from ...protocol import (
    PROTOCOL_GENERATION,
    SUPPORTED_WORKFLOW_EDITIONS,
    WORKFLOW_EDITION,
    core_v1,
    env_v1,
    model_v1,
)
from ...protocol._internal import (
    COMPONENT_ENV,
    COMPONENT_MODEL,
    EXTRA_BUILD_COHORT,
    EXTRA_BUILD_SOURCE,
    EXTRA_WORKFLOW_BASE,
    EXTRA_WORKFLOW_EDITION,
    check_token,
    highest_shared_edition,
)
from ._backend import Channel
from ._codec import decode, encode
from ._errors import map_transport_error

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
    "Handshake",
    "Side",
    "auth_metadata",
    "connecting",
    "generation_mismatch_message",
    "handshake",
    "handshake_operation",
    "handshake_request",
    "handshake_response",
    "is_generation_compatible",
    "peer_info",
    "refused",
]

Side = Literal["env", "model"]
"""The service a handshake is for."""

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
    message, and its capabilities all the same, as RLMesh 0.1.0's servers answer (an
    env server also leaves the contract out). With ``request=None`` the answer is
    compatible.
    """
    listed = [e for e in editions if e.strip()]
    compatible = request is None or is_generation_compatible(request.protocol_generation)
    response = core_v1.HandshakeResponse(
        compatible=compatible,
        peer_info=peer_info(component),
        capabilities=dict(capabilities or {}),
        supported_workflow_editions=listed,
        preferred_workflow_edition=listed[0] if listed else "",
    )
    if not compatible:
        assert request is not None
        response.error_message = generation_mismatch_message(request.protocol_generation)
    return response


# --------------------------------------------------------------------------- auth


def auth_metadata(token: str | None) -> dict[str, str] | None:
    """Client metadata carrying ``token``; ``None`` (no header at all) for no token.

    Raises:
        SpecError: a blank token (see :func:`~trio_rlmesh.protocol._constants.check_token`).
    """
    token = check_token(token)
    return {AUTHORIZATION_HEADER: token} if token is not None else None


# --------------------------------------------------------------------------- the client's handshake

_Reply = TypeVar("_Reply", env_v1.HandshakeResponse, model_v1.HandshakeResponse)

_SERVICES: Final[dict[str, tuple[str, str, type[Any], type[Any]]]] = {
    "env": (COMPONENT_ENV, ENV_HANDSHAKE, env_v1.HandshakeRequest, env_v1.HandshakeResponse),
    "model": (
        COMPONENT_MODEL,
        MODEL_HANDSHAKE,
        model_v1.HandshakeRequest,
        model_v1.HandshakeResponse,
    ),
}


def handshake_operation(side: Side) -> str:
    """How errors name the handshake with a ``side`` server.

    >>> handshake_operation("model")
    'model.handshake'
    """
    return f"{side}.handshake"


def refused(side: Side, address: str, problem: str) -> ProtocolError:
    """The error for a handshake answer this client cannot accept (see the module's table).

    >>> str(refused("env", "tcp://h:1", "the answer carries no env contract"))
    'env.handshake to tcp://h:1 failed: the answer carries no env contract'
    """
    operation = handshake_operation(side)
    return ProtocolError(
        f"{where(operation, address, None, None)} failed: {problem}",
        recoverable=False,
        operation=operation,
        address=address,
    )


@contextlib.contextmanager
def connecting(side: Side, address: str, *, timeout: float, token_sent: bool) -> Iterator[None]:
    """The deadline and the error mapping of connecting to a ``side`` server.

    The block (the handshake, and for the model its Join stream) gets ``timeout``
    seconds, connecting included; what fails in it becomes this package's error, named
    ``<side>.handshake`` (see the module's table).
    """
    operation = handshake_operation(side)
    try:
        with trio.fail_after(timeout):
            yield
    except trio.TooSlowError:
        raise OperationTimeout(
            f"{where(operation, address, None, None)} timed out after {timeout:g} s: no "
            f"handshake answer; check that a {side} server runs there and is not stuck, or "
            "allow more time (connect_timeout)",
            timeout=timeout,
            recoverable=True,
            operation=operation,
            address=address,
        ) from None
    except Exception as exc:
        error = map_transport_error(
            exc, operation=operation, address=address, token_sent=token_sent
        )
        if error is exc:
            raise
        raise error from exc


@attrs.frozen
class Handshake(Generic[_Reply]):
    """A handshake the client accepted."""

    reply: _Reply
    """The service's HandshakeResponse (the env's also carries its contract)."""
    base: core_v1.HandshakeResponse
    """Its core part: capabilities, editions, PeerInfo."""
    workflow_edition: str
    """The highest edition both sides support."""


@overload
async def handshake(
    channel: Channel,
    side: Literal["env"],
    *,
    editions: tuple[str, ...],
    metadata: Mapping[str, str] | None,
) -> Handshake[env_v1.HandshakeResponse]: ...


@overload
async def handshake(
    channel: Channel,
    side: Literal["model"],
    *,
    editions: tuple[str, ...],
    metadata: Mapping[str, str] | None,
) -> Handshake[model_v1.HandshakeResponse]: ...


async def handshake(
    channel: Channel,
    side: Side,
    *,
    editions: tuple[str, ...],
    metadata: Mapping[str, str] | None,
) -> Handshake[Any]:
    """Handshake with the ``side`` server on ``channel``, as a 0.1.0 client does, and
    check its answer; call it inside :func:`connecting`.

    Raises:
        ProtocolError: the answer has no base, the server refused our protocol
            generation, or no workflow edition is in common.
    """
    component, path, request_type, reply_type = _SERVICES[side]
    request = request_type(base=handshake_request(component, editions=editions))
    reply = decode(reply_type, await channel.unary(path, encode(request), metadata))
    address = channel.label
    base = reply.base
    if base is None:
        raise refused(
            side,
            address,
            f"the answer has no base handshake (every rlmesh-wire-v1 {side} server sends "
            f"one); point the client at a trio-rlmesh or RLMesh {side} server",
        )
    if not base.compatible:
        raise refused(
            side,
            address,
            f"the server refused protocol generation {PROTOCOL_GENERATION} "
            f"({base.error_message or 'it gave no reason'}); run a {side} server that speaks "
            f"{PROTOCOL_GENERATION} (trio-rlmesh, or RLMesh 0.1)",
        )
    offered = list(base.supported_workflow_editions)
    edition = highest_shared_edition(offered, editions)
    if edition is None:
        raise refused(
            side,
            address,
            f"no workflow edition in common: the server offers {offered}, this client "
            f"accepts {list(editions)}; run a {side} server that offers one of the "
            "client's, or let the client accept one of the server's",
        )
    return Handshake(reply, base, edition)
