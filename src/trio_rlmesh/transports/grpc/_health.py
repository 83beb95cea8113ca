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


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _write_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _fields(data: bytes) -> dict[int, Any]:
    """Last value of each field number; unknown fields of any wire type are skipped."""
    found: dict[int, Any] = {}
    pos = 0
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            found[number], pos = _read_varint(data, pos)
        elif wire_type == 2:
            length, pos = _read_varint(data, pos)
            if pos + length > len(data):
                raise ValueError("truncated length-delimited field")
            found[number], pos = data[pos : pos + length], pos + length
        elif wire_type == 1:
            pos += 8
        elif wire_type == 5:
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wire_type}")
    if pos != len(data):
        raise ValueError("truncated fixed-width field")
    return found


class HealthCheckRequest:
    """``grpc.health.v1.HealthCheckRequest{1: string service}``."""

    def __init__(self, service: str = "") -> None:
        self.service = service

    def SerializeToString(self) -> bytes:
        if not self.service:
            return b""
        raw = self.service.encode("utf-8")
        return b"\x0a" + _write_varint(len(raw)) + raw

    @classmethod
    def FromString(cls, data: bytes) -> HealthCheckRequest:
        value = _fields(data).get(1, b"")
        if not isinstance(value, bytes):
            raise ValueError("HealthCheckRequest.service must be a string")
        return cls(value.decode("utf-8"))


class HealthCheckResponse:
    """``grpc.health.v1.HealthCheckResponse{1: ServingStatus status}``."""

    def __init__(self, status: ServingStatus = ServingStatus.UNKNOWN) -> None:
        self.status = status

    def SerializeToString(self) -> bytes:
        if not self.status:
            return b""
        return b"\x08" + _write_varint(int(self.status))

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
    except (ValueError, UnicodeDecodeError) as exc:
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
