"""The standard ``grpc.health.v1.Health`` service, with a tiny hand-written message codec.

The two messages have one field each, so they are encoded here by hand (this package does not
depend on google-protobuf). Health calls need no token, as on the reference servers.

Like the reference servers, only the overall service name ``""`` is registered; it reports
SERVING from the moment the listener is bound and is never downgraded. Any other name gets
NOT_FOUND from Check and SERVICE_UNKNOWN from Watch.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, Final

import trio

from ...protocol._internal import WIRE_LEN, WIRE_VARINT, encode_varint, read_varint, skip_field
from ._backend import Handler, ServerCall
from ._handshake import HEALTH_CHECK, HEALTH_WATCH
from ._status import GrpcError, Status

__all__ = [
    "HEALTH_HANDLERS",
    "HealthCheckRequest",
    "HealthCheckResponse",
    "ServingStatus",
    "check",
    "watch",
]


class ServingStatus(enum.IntEnum):
    """``HealthCheckResponse.ServingStatus``."""

    UNKNOWN = 0
    SERVING = 1
    NOT_SERVING = 2
    SERVICE_UNKNOWN = 3


def _fields(data: bytes) -> dict[int, Any]:
    """Last value of each field number; unknown fields of any wire type are skipped."""
    found: dict[int, Any] = {}
    pos, end = 0, len(data)
    while pos < end:
        key, pos = read_varint(data, pos, end)
        start, pos = skip_field(data, pos, end, key)
        if key & 7 == WIRE_VARINT:
            found[key >> 3] = read_varint(data, start, pos)[0]
        elif key & 7 == WIRE_LEN:
            found[key >> 3] = data[start:pos]
    return found


class HealthCheckRequest:
    """``grpc.health.v1.HealthCheckRequest{1: string service}``."""

    def __init__(self, service: str = "") -> None:
        self.service = service

    def SerializeToString(self) -> bytes:
        if not self.service:
            return b""
        raw = self.service.encode("utf-8")
        return b"\x0a" + encode_varint(len(raw)) + raw

    @classmethod
    def FromString(cls, data: bytes) -> HealthCheckRequest:
        value = _fields(data).get(1, b"")
        if not isinstance(value, bytes):
            raise ValueError("HealthCheckRequest.service must be a string")
        try:
            return cls(value.decode("utf-8"))
        except UnicodeDecodeError:
            raise ValueError("HealthCheckRequest.service is not valid UTF-8") from None


class HealthCheckResponse:
    """``grpc.health.v1.HealthCheckResponse{1: ServingStatus status}``."""

    def __init__(self, status: ServingStatus = ServingStatus.UNKNOWN) -> None:
        self.status = status

    def SerializeToString(self) -> bytes:
        if not self.status:
            return b""
        return b"\x08" + encode_varint(int(self.status))

    @classmethod
    def FromString(cls, data: bytes) -> HealthCheckResponse:
        value = _fields(data).get(1, 0)
        if not isinstance(value, int):
            raise ValueError("HealthCheckResponse.status must be a varint")
        try:
            return cls(ServingStatus(value))
        except ValueError:
            return cls(ServingStatus.UNKNOWN)


def _request(data: bytes | None) -> HealthCheckRequest:
    if data is None:
        raise GrpcError(Status.INTERNAL, "the health check carried no request")
    try:
        return HealthCheckRequest.FromString(data)
    except ValueError as exc:
        raise GrpcError(Status.INTERNAL, f"failed to decode HealthCheckRequest: {exc}") from None


async def check(call: ServerCall) -> None:
    """``Health/Check``: SERVING for ``""``, NOT_FOUND for any other service name."""
    request = _request(await call.receive_message())
    if request.service != "":
        raise GrpcError(Status.NOT_FOUND, f"unknown service {request.service!r}")
    await call.send_message(HealthCheckResponse(ServingStatus.SERVING).SerializeToString())


async def watch(call: ServerCall) -> None:
    """``Health/Watch``: one status, then the stream stays open until the server stops."""
    request = _request(await call.receive_message())
    status = ServingStatus.SERVING if request.service == "" else ServingStatus.SERVICE_UNKNOWN
    await call.send_message(HealthCheckResponse(status).SerializeToString())
    await trio.sleep_forever()


HEALTH_HANDLERS: Final[Mapping[str, Handler]] = {HEALTH_CHECK: check, HEALTH_WATCH: watch}
"""The health service's handlers, by method path; every server of this package has them."""
