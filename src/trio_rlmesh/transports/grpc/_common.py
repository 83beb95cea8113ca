"""Pieces every gRPC client and server of this package shares.

Method paths (the generated messages carry no service stubs, so the plumbing is
written by hand), address parsing, the PeerInfo and handshake messages this
package sends, the token check servers apply, and the one place where grpclib
and OS-level exceptions become :class:`trio_rlmesh.Error` subclasses.

This module runs on the portal's asyncio thread as well as on trio's; it keeps
no state of its own.
"""

from __future__ import annotations

import hmac
import importlib.metadata
import os
import platform
import socket
from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal

import attrs
from grpclib.const import Status
from grpclib.exceptions import GRPCError, StreamTerminatedError
from grpclib.exceptions import ProtocolError as GrpclibProtocolError

from ..._errors import Error, OperationTimeout, ProtocolError, TransportError
from ...protocol import (
    EXTRA_BUILD_COHORT,
    EXTRA_BUILD_SOURCE,
    EXTRA_WORKFLOW_BASE,
    EXTRA_WORKFLOW_EDITION,
    PROTOCOL_GENERATION,
    SUPPORTED_WORKFLOW_EDITIONS,
    WORKFLOW_EDITION,
    core_v1,
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
    "Address",
    "auth_metadata",
    "check_token",
    "generation_mismatch_message",
    "handshake_request",
    "handshake_response",
    "is_generation_compatible",
    "map_grpc_error",
    "parse_address",
    "parse_bind_address",
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


# --------------------------------------------------------------------------- addresses


@attrs.frozen
class Address:
    """A parsed endpoint address: TCP ``host:port`` or a Unix socket path.

    ``str(address)`` is the display form (``tcp://host:port`` or ``unix:///path``)
    used in every error message.
    """

    kind: Literal["tcp", "unix"]
    host: str | None = None
    port: int | None = None
    path: str | None = None

    @classmethod
    def tcp(cls, host: str, port: int) -> Address:
        """A TCP address."""
        return cls("tcp", host=host, port=port)

    @classmethod
    def unix(cls, path: str) -> Address:
        """A Unix socket address (the path is kept as given)."""
        return cls("unix", path=path)

    @property
    def authority(self) -> str:
        """``host:port`` for TCP (IPv6 hosts bracketed); the path for Unix sockets."""
        if self.kind == "unix":
            return str(self.path)
        host = str(self.host)
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"{host}:{self.port}"

    def __str__(self) -> str:
        if self.kind == "unix":
            return f"unix://{self.path}"
        return f"tcp://{self.authority}"


def _split_host_port(text: str, original: str) -> tuple[str, int]:
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or not rest.startswith(":"):
            raise ValueError(f"invalid address {original!r}: expected [ipv6]:port")
        port_text = rest[1:]
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            raise ValueError(f"invalid address {original!r}: expected host:port")
    if "/" in port_text:
        port_text = port_text.rstrip("/")
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(
            f"invalid address {original!r}: port {port_text!r} is not a number"
        ) from None
    if not 0 <= port <= 65535:
        raise ValueError(f"invalid address {original!r}: port {port} is out of range")
    return host, port


def _unix_path(rest: str, original: str) -> str:
    if not rest:
        raise ValueError(f"invalid address {original!r}: empty unix socket path")
    return rest if os.path.isabs(rest) else os.path.abspath(rest)


def parse_address(address: str) -> Address:
    """Parse a connect target: ``host:port``, ``tcp://host:port``, ``http://host:port``,
    or ``unix:///path``.

    Raises:
        ValueError: for ``https://``, any other scheme, an empty host, or a bad port.

    >>> str(parse_address("localhost:50051"))
    'tcp://localhost:50051'
    >>> str(parse_address("unix:///tmp/env.sock"))
    'unix:///tmp/env.sock'
    """
    text = address.strip()
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "tcp", text
    scheme = scheme.lower()
    if scheme == "unix":
        return Address.unix(_unix_path(rest, address))
    if scheme == "https":
        raise ValueError(
            f"invalid address {address!r}: https:// is not supported (rlmesh-wire-v1 is cleartext)"
        )
    if scheme not in ("tcp", "http"):
        raise ValueError(
            f"invalid address {address!r}: unknown scheme {scheme!r} "
            "(use host:port, tcp://host:port or unix:///path)"
        )
    host, port = _split_host_port(rest, address)
    if not host:
        raise ValueError(f"invalid address {address!r}: empty host")
    return Address.tcp(host, port)


def parse_bind_address(address: str) -> Address:
    """Parse a bind target: a bare ``port``, ``host:port``, ``tcp://host:port`` or
    ``unix:///path``. An empty host or ``localhost`` binds ``127.0.0.1``; port 0
    lets the OS choose.

    >>> str(parse_bind_address("0"))
    'tcp://127.0.0.1:0'
    >>> str(parse_bind_address("localhost:7000"))
    'tcp://127.0.0.1:7000'
    """
    text = address.strip()
    if text.isdigit():
        port = int(text)
        if port > 65535:
            raise ValueError(f"invalid bind address {address!r}: port {port} is out of range")
        return Address.tcp("127.0.0.1", port)
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "tcp", text
    scheme = scheme.lower()
    if scheme == "unix":
        return Address.unix(_unix_path(rest, address))
    if scheme != "tcp":
        raise ValueError(
            f"invalid bind address {address!r}: use port, host:port, tcp://host:port "
            "or unix:///path"
        )
    host, port = _split_host_port(rest, address)
    if host in ("", "localhost"):
        host = "127.0.0.1"
    return Address.tcp(host, port)


# --------------------------------------------------------------------------- handshake


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
    from ... import __version__

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


async def check_token(stream: Any, token: str | None, *, what: str = "env") -> None:
    """Reject a server call whose ``authorization`` header is not exactly ``token``.

    With no (or an empty) token configured, every call passes. Otherwise the call
    ends with UNAUTHENTICATED ``invalid <what> token`` before any processing, as
    the reference does. ``stream`` is a grpclib server stream.

    Raises:
        grpclib.exceptions.GRPCError: UNAUTHENTICATED on a missing or wrong token.
    """
    if not token:
        return
    metadata = getattr(stream, "metadata", None)
    presented = metadata.get(AUTHORIZATION_HEADER) if metadata is not None else None
    if not isinstance(presented, str):
        presented = ""
    if not hmac.compare_digest(presented.encode("utf-8"), token.encode("utf-8")):
        raise GRPCError(Status.UNAUTHENTICATED, f"invalid {what} token")


async def receive_base(stream: Any, token: str | None, *, what: str, call: str) -> Any:
    """Authenticate a unary Handshake/Shutdown call and return its request's ``base``.

    Raises:
        grpclib.exceptions.GRPCError: UNAUTHENTICATED, or INVALID_ARGUMENT when the request
            has no ``base`` (the reference's wording).
    """
    await check_token(stream, token, what=what)
    request = await stream.recv_message()
    if request.base is None:
        raise GRPCError(Status.INVALID_ARGUMENT, f"{call} request missing base")
    return request.base


async def answer_shutdown(
    stream: Any,
    token: str | None,
    *,
    what: str,
    response_type: Any,
    allowed: bool,
    disabled_message: str,
) -> str | None:
    """Serve one Shutdown call the reference's way.

    Returns the client's reason (possibly empty) when the shutdown was accepted, so the
    caller stops the server, or ``None`` when remote shutdown is disabled.
    """
    base = await receive_base(stream, token, what=what, call="shutdown")
    if not allowed:
        reply = core_v1.ShutdownResponse(message=disabled_message)
        await stream.send_message(response_type(base=reply))
        return None
    reason: str = base.reason
    message = f"shutdown accepted: {reason}" if reason else "shutdown accepted"
    await stream.send_message(
        response_type(base=core_v1.ShutdownResponse(accepted=True, message=message))
    )
    return reason


# --------------------------------------------------------------------------- errors

_RETRYABLE: Final = frozenset({Status.UNAVAILABLE, Status.RESOURCE_EXHAUSTED, Status.ABORTED})


def _where(operation: str, address: str | None, step: int | None, lane: int | None) -> str:
    parts = [operation]
    if address is not None:
        parts.append(f"to {address}")
    if step is not None:
        parts.append(f"at step {step}")
    if lane is not None:
        parts.append(f"on lane {lane}")
    return " ".join(parts)


_SERVICES: Final = {"env": "EnvService", "model": "ModelService"}


def _service(operation: str) -> str:
    """``rlmesh.env.v1.EnvService`` for ``env.*`` operations, and so on."""
    side = operation.partition(".")[0]
    name = _SERVICES.get(side)
    return f"rlmesh.{side}.v1.{name}" if name else "this service"


def _connect_failure(exc: OSError, address: str | None) -> str | None:
    """Why connecting failed, when ``exc`` says the connection was never made."""
    target = address or "the server"
    if isinstance(exc, ConnectionRefusedError):
        return f"could not connect to {target}: connection refused; is the server running?"
    if isinstance(exc, FileNotFoundError) and str(address or "").startswith("unix://"):
        return f"could not connect to {target}: no such socket file; is the server running?"
    if isinstance(exc, socket.gaierror):
        return f"could not connect to {target}: cannot resolve the host ({exc.strerror or exc})"
    return None


def map_grpc_error(
    exc: BaseException,
    *,
    operation: str,
    address: str | None,
    step: int | None = None,
    lane: int | None = None,
    token_sent: bool | None = None,
) -> Error:
    """Turn a grpclib, socket or timeout exception into this package's error.

    * UNAVAILABLE, RESOURCE_EXHAUSTED, ABORTED → recoverable :class:`TransportError`;
    * UNAUTHENTICATED → :class:`TransportError` saying the server rejected the token
      (``token_sent`` true) or requires one (``token_sent`` false: none was sent);
    * UNIMPLEMENTED → :class:`TransportError` saying the server does not serve the
      operation's service (``env.*``: EnvService, ``model.*``: ModelService), which
      usually means the address is another kind of server;
    * DEADLINE_EXCEEDED and :class:`TimeoutError` → :class:`OperationTimeout`;
    * any other status → :class:`TransportError` carrying the status name as ``code``;
    * a connection that could not be made (refused, no Unix socket file, an unresolvable
      host) → :class:`TransportError` saying it could not connect;
    * lost connections (other :class:`OSError`, grpclib's ``StreamTerminatedError``, EOF) →
      :class:`TransportError` naming the address, operation and step;
    * grpclib's own protocol violations → :class:`ProtocolError`.

    An exception that already is an :class:`Error` gets the missing context filled
    in and is returned as is. The original exception should become ``__cause__``
    (``raise map_grpc_error(exc, ...) from exc``).
    """
    context: dict[str, Any] = {
        "operation": operation,
        "address": address,
        "step": step,
        "lane": lane,
    }
    where = _where(operation, address, step, lane)
    if isinstance(exc, Error):
        return exc.with_context(**context)
    if isinstance(exc, GRPCError):
        status = exc.status
        detail = f": {exc.message}" if exc.message else ""
        if status is Status.UNAUTHENTICATED:
            if token_sent is None:
                problem = "the server refused the call: the token is missing or wrong"
            elif token_sent:
                problem = "the server rejected the token"
            else:
                problem = "the server requires a token and none was sent"
            return TransportError(
                f"{where} failed: {problem} (UNAUTHENTICATED{detail}); "
                "pass the token the server was started with",
                code=status.name,
                **context,
            )
        if status is Status.UNIMPLEMENTED:
            return TransportError(
                f"{where} failed: the server does not serve {_service(operation)} "
                f"(UNIMPLEMENTED{detail}); is the address right?",
                code=status.name,
                **context,
            )
        if status is Status.DEADLINE_EXCEEDED:
            return OperationTimeout(
                f"{where} timed out (DEADLINE_EXCEEDED{detail})", code=status.name, **context
            )
        return TransportError(
            f"{where} failed with gRPC status {status.name}{detail}",
            recoverable=status in _RETRYABLE,
            code=status.name,
            **context,
        )
    if isinstance(exc, TimeoutError):
        return OperationTimeout(f"{where} timed out", **context)
    if isinstance(exc, OSError):
        refused = _connect_failure(exc, address)
        if refused is not None:
            return TransportError(f"{refused} ({operation})", **context)
    if isinstance(exc, (OSError, StreamTerminatedError, EOFError)):
        reason = str(exc) or type(exc).__name__
        return TransportError(f"connection lost during {where}: {reason}", **context)
    if isinstance(exc, GrpclibProtocolError):
        return ProtocolError(f"{where} broke the gRPC protocol: {exc}", **context)
    return TransportError(f"{where} failed: {type(exc).__name__}: {exc}", **context)
