"""The pure parts of the transport: addresses, the one error map, the status helpers,
framing and settings (no I/O)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_rlmesh import Error, OperationTimeout, TransportError
from trio_rlmesh.transports.grpc import GrpcSettings, parse_address, parse_bind_address
from trio_rlmesh.transports.grpc._errors import map_transport_error
from trio_rlmesh.transports.grpc._framing import MessageDecoder, check_header, frame
from trio_rlmesh.transports.grpc._status import (
    ConnectionLost,
    GrpcError,
    Status,
    decode_grpc_message,
    encode_grpc_message,
    format_grpc_timeout,
    parse_grpc_timeout,
)

# ----------------------------------------------------------------------------- addresses


@pytest.mark.parametrize(
    ("text", "display"),
    [
        ("localhost:50051", "tcp://localhost:50051"),
        ("tcp://10.0.0.1:1", "tcp://10.0.0.1:1"),
        ("http://host:8080", "tcp://host:8080"),
        ("[::1]:9000", "tcp://[::1]:9000"),
        ("unix:///tmp/env.sock", "unix:///tmp/env.sock"),
        ("memory://a-name", "memory://a-name"),
    ],
)
def test_parse_address(text: str, display: str) -> None:
    assert str(parse_address(text)) == display


@pytest.mark.parametrize(
    "text",
    ["https://host:1", "ftp://host:1", ":50051", "host", "host:port", "host:70000", "memory://"],
)
def test_parse_address_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="invalid address"):
        parse_address(text)


@pytest.mark.parametrize(
    ("text", "display"),
    [
        ("0", "tcp://127.0.0.1:0"),
        ("localhost:7", "tcp://127.0.0.1:7"),
        (":7", "tcp://127.0.0.1:7"),
        ("tcp://0.0.0.0:7", "tcp://0.0.0.0:7"),
        ("unix:///tmp/s", "unix:///tmp/s"),
        ("memory://x", "memory://x"),
    ],
)
def test_parse_bind_address(text: str, display: str) -> None:
    assert str(parse_bind_address(text)) == display


# ----------------------------------------------------------------------------- the error map


@pytest.mark.parametrize(
    ("status", "kind", "recoverable"),
    [
        (Status.UNAVAILABLE, TransportError, True),
        (Status.RESOURCE_EXHAUSTED, TransportError, True),
        (Status.ABORTED, TransportError, True),
        (Status.UNAUTHENTICATED, TransportError, False),
        (Status.INTERNAL, TransportError, False),
        (Status.FAILED_PRECONDITION, TransportError, False),
        (Status.UNIMPLEMENTED, TransportError, False),
        (Status.DEADLINE_EXCEEDED, OperationTimeout, True),
    ],
)
def test_map_statuses(status: Status, kind: type[Error], recoverable: bool) -> None:
    error = map_transport_error(
        GrpcError(status, "detail"), operation="env.step", address="tcp://h:1", step=4, lane=2
    )
    assert type(error) is kind
    assert error.recoverable is recoverable
    assert error.code == status.name
    assert (error.operation, error.address, error.step, error.lane) == (
        "env.step",
        "tcp://h:1",
        4,
        2,
    )
    assert "env.step to tcp://h:1 at step 4 on lane 2" in str(error)


def test_unauthenticated_says_whether_a_token_was_sent() -> None:
    error = GrpcError(Status.UNAUTHENTICATED, "invalid env token")
    sent = map_transport_error(error, operation="env.handshake", address="a", token_sent=True)
    unsent = map_transport_error(error, operation="env.handshake", address="a", token_sent=False)
    assert "rejected the token" in str(sent)
    assert "requires a token" in str(unsent)


def test_unimplemented_names_the_service() -> None:
    error = map_transport_error(
        GrpcError(Status.UNIMPLEMENTED), operation="env.handshake", address="a"
    )
    assert "does not serve rlmesh.env.v1.EnvService" in str(error)


@pytest.mark.parametrize(
    "exc",
    [
        ConnectionLost("the peer reset the stream (CANCEL)"),
        ConnectionResetError("reset by peer"),
    ],
)
def test_map_connection_lost(exc: Exception) -> None:
    error = map_transport_error(exc, operation="env.reset", address="tcp://h:1", step=9)
    assert type(error) is TransportError
    assert error.code is None
    assert str(error).startswith("connection lost during env.reset to tcp://h:1 at step 9")


def test_a_lost_connection_names_its_address_once() -> None:
    lost = ConnectionLost("the connection broke (reset)", peer="tcp://h:1")
    error = map_transport_error(lost, operation="env.step", address="tcp://h:1", step=3)
    assert str(error) == "connection lost during env.step to tcp://h:1 at step 3: " + (
        "the connection broke (reset)"
    )
    elsewhere = ConnectionLost("the connection broke (reset)", peer="tcp://proxy:2")
    error = map_transport_error(elsewhere, operation="env.step", address="tcp://h:1")
    assert str(error).endswith("the connection broke (reset) (with tcp://proxy:2)")


def test_a_step_learned_later_joins_the_place_the_message_names() -> None:
    """The model client does not know the runtime's step; the driver fills it in."""
    lost = ConnectionLost("the peer closed the connection", peer="tcp://h:1")
    error = map_transport_error(lost, operation="model.predict", address="tcp://h:1")
    error.with_context(step=12, lane=0, operation="model.predict")
    assert str(error) == (
        "connection lost during model.predict to tcp://h:1 at step 12 on lane 0: "
        "the peer closed the connection"
    )
    assert error.args == (str(error),)
    error.with_context(step=99)  # never overwritten, nor re-worded
    assert "at step 12 on lane 0" in str(error)


def test_map_refused_says_could_not_connect() -> None:
    refused = ConnectionLost("could not connect to tcp://h:1: connection refused", refused=True)
    error = map_transport_error(refused, operation="env.handshake", address="tcp://h:1")
    assert str(error) == "could not connect to tcp://h:1: connection refused (env.handshake)"


def test_map_keeps_our_errors_and_fills_context() -> None:
    mine = TransportError("already ours")
    mapped = map_transport_error(mine, operation="model.predict", address="x")
    assert mapped is not None
    assert (mapped.operation, mapped.address) == ("model.predict", "x")


# ----------------------------------------------------------------------------- status helpers


@pytest.mark.parametrize(
    "message", ["", "plain", "50% done: ✓", "line\nbreak\ttab", "%41%", "ünïcödé " * 20]
)
def test_grpc_message_round_trips(message: str) -> None:
    encoded = encode_grpc_message(message)
    assert all(0x20 <= ord(c) < 0x7F for c in encoded)
    assert decode_grpc_message(encoded) == message


@pytest.mark.parametrize("seconds", [0.001, 0.25, 1.0, 2.5, 90.0, 7200.0, 10**9])
def test_grpc_timeout_round_trips_rounding_up(seconds: float) -> None:
    header = format_grpc_timeout(seconds)
    assert len(header) <= 9
    parsed = parse_grpc_timeout(header)
    assert parsed is not None
    assert parsed >= min(seconds, 99_999_999 * 3600) - 1e-9


def test_status_of_unknown_values() -> None:
    assert Status.of("13") is Status.INTERNAL
    assert Status.of("999") is Status.UNKNOWN
    assert Status.of(None) is Status.UNKNOWN


# ----------------------------------------------------------------------------- framing


def test_decoder_refuses_at_the_header_and_holds_nothing() -> None:
    decoder = MessageDecoder(max_size=10)
    with pytest.raises(GrpcError) as info:
        list(decoder.feed(b"\x00\xff\xff\xff\xff" + b"\x00" * 16))
    assert info.value.status is Status.RESOURCE_EXHAUSTED
    assert not decoder.partial
    with pytest.raises(GrpcError, match="compressed"):
        check_header(b"\x01\x00\x00\x00\x01", 10)


def test_decoder_reassembles_split_messages() -> None:
    decoder = MessageDecoder(max_size=100)
    stream = frame(b"a" * 10) + frame(b"") + frame(b"b" * 30)
    out: list[bytes] = []
    for i in range(0, len(stream), 3):
        out.extend(decoder.feed(stream[i : i + 3]))
    assert out == [b"a" * 10, b"", b"b" * 30]
    assert not decoder.partial


@given(
    sizes=st.lists(st.integers(0, 40), min_size=1, max_size=5),
    cuts=st.lists(st.integers(0, 250), max_size=12),
)
def test_decoder_reassembles_messages_split_anywhere(sizes: list[int], cuts: list[int]) -> None:
    messages = [bytes([i + 1]) * size for i, size in enumerate(sizes)]
    stream = b"".join(frame(message) for message in messages)
    bounds = sorted({0, len(stream), *(cut for cut in cuts if cut < len(stream))})
    decoder = MessageDecoder(max_size=100)
    out: list[bytes] = []
    for start, end in itertools.pairwise(bounds):
        out.extend(decoder.feed(stream[start:end]))
    assert out == messages
    assert not decoder.partial


def test_a_payload_of_exactly_one_header_leaves_the_body_to_come() -> None:
    decoder = MessageDecoder(max_size=100)
    framed = frame(b"\x0a\x03abc")
    assert list(decoder.feed(framed[:5])) == []
    assert decoder.partial
    assert list(decoder.feed(framed[5:])) == [b"\x0a\x03abc"]
    assert not decoder.partial


def test_settings_validation() -> None:
    with pytest.raises(ValueError, match="keepalive_interval"):
        GrpcSettings(keepalive_interval=0)
    with pytest.raises(ValueError, match="max_message_size"):
        GrpcSettings(max_message_size=0)
    default = GrpcSettings()
    assert default.keepalive_interval == 10.0
    assert default.keepalive_interval + default.keepalive_timeout <= 30.0
