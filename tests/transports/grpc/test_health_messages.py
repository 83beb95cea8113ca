"""The hand-written ``grpc.health.v1`` messages: encoding, and parsing that skips unknowns."""

from __future__ import annotations

import pytest

from trio_rlmesh.transports.grpc._health import (
    HealthCheckRequest,
    HealthCheckResponse,
    ServingStatus,
)


@pytest.mark.parametrize(
    ("service", "wire"),
    [
        ("", b""),
        ("rlmesh.env.v1.EnvService", b"\x0a\x18rlmesh.env.v1.EnvService"),
        ("é" * 70, None),
    ],
)
def test_requests_round_trip(service: str, wire: bytes | None) -> None:
    data = HealthCheckRequest(service).SerializeToString()
    if wire is not None:
        assert data == wire
    else:
        assert data[:3] == b"\x0a\x8c\x01"  # a two-byte length: 140 bytes of UTF-8
    assert HealthCheckRequest.FromString(data).service == service


@pytest.mark.parametrize("status", list(ServingStatus))
def test_responses_round_trip(status: ServingStatus) -> None:
    data = HealthCheckResponse(status).SerializeToString()
    assert data == (b"\x08" + bytes((status,)) if status else b"")
    assert HealthCheckResponse.FromString(data).status is status


def test_unknown_fields_are_skipped_and_the_last_value_wins() -> None:
    unknown = b"\x10\x05" + b"\x19" + b"\x00" * 8 + b"\x25" + b"\x00" * 4 + b"\x2a\x01z"
    data = b"\x0a\x01a" + unknown + b"\x0a\x01b"
    assert HealthCheckRequest.FromString(data).service == "b"
    assert HealthCheckResponse.FromString(unknown + b"\x08\x02").status is ServingStatus.NOT_SERVING


def test_an_unknown_status_reads_as_unknown() -> None:
    assert HealthCheckResponse.FromString(b"\x08\x63").status is ServingStatus.UNKNOWN


@pytest.mark.parametrize(
    "data",
    [
        b"\x0a\x05abc",  # length past the end
        b"\x08",  # varint missing
        b"\x08\xff",  # varint cut
        b"\x19\x00\x00",  # fixed64 cut
        b"\x1d\x00",  # fixed32 cut
        b"\x0b",  # a group
        b"\x08" + b"\xff" * 10 + b"\x01",  # an 11-byte varint
    ],
)
def test_malformed_messages_raise(data: bytes) -> None:
    with pytest.raises(ValueError):
        HealthCheckRequest.FromString(data)
    with pytest.raises(ValueError):
        HealthCheckResponse.FromString(data)


def test_wrong_wire_types_raise() -> None:
    with pytest.raises(ValueError, match="must be a string"):
        HealthCheckRequest.FromString(b"\x08\x01")
    with pytest.raises(ValueError, match="must be a varint"):
        HealthCheckResponse.FromString(b"\x0a\x00")


def test_a_service_name_that_is_not_utf8_is_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match=r"^HealthCheckRequest\.service is not valid UTF-8$"):
        HealthCheckRequest.FromString(b"\x0a\x02\xff\xfe")
