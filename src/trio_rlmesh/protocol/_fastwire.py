"""The fast protobuf codec for the per-step Join messages: public face and contract.

betterproto2 0.10 serializes and parses through a generic, reflective path that costs tens
of microseconds even for a CartPole-sized step. The few messages a run sends on every step
(env Join step/reset requests and their replies, the model Join predict request and reply)
are encoded and decoded by explicit per-message code instead, generated from betterproto2's
own field metadata into ``_generated/fastwire.py`` by ``tools/gen_fastwire.py`` (``nox -s
protos``; ``nox -s protos_check`` fails when it is stale). The functions here take and
return the same generated message objects, so callers do not change.

Contract, pinned by ``tests/protocol/test_fastwire.py``:

* Encoding yields exactly ``bytes(message)``: betterproto2's field order (dataclass order,
  so a oneof arm numbered after ``request_id`` still comes first), zero values skipped
  (``-0.0`` is zero), explicit-presence fields and message fields written whenever they are
  not ``None`` (an empty message is ``tag 00``), repeated scalars packed, ``MetaMap``
  entries written as RLMesh writes them (an empty key and a null value left out; see
  ``_metamap``), each message's ``_unknown_fields`` appended last.
  Anything the fast path does not cover (a declined oneof arm, a value of an unexpected
  type) is handed to ``bytes(message)`` for the whole message.
* Decoding yields a message equal to ``Message.FromString(data)``: packed and unpacked
  repeated scalars are both read, the last occurrence of a singular field wins (a message
  field is replaced, not merged, as betterproto2 does), and integers are masked and
  sign-converted like betterproto2's, and a ``MetaMap`` entry without a value holds a
  null ``MetaValue()``. Input the fast path does not cover (an unknown field number, a
  known field with another wire type, a declined oneof arm, two arms of one oneof) makes
  it hand the whole message to a fallback, by default ``FromString``, so the result never
  differs from betterproto2's (``_unknown_fields`` included).
* Unlike betterproto2, the fast decoder never returns a partial message: a varint or a
  length-delimited field running past the end of its message, an overlong varint, a
  packed fixed-width field of the wrong length or invalid UTF-8 raise ``ValueError``. (A
  message cut exactly between two top-level fields is still a valid, shorter message.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, TypeVar

from ._generated import fastwire as _gen
from ._generated.rlmesh.env import v1 as env_v1
from ._generated.rlmesh.model import v1 as model_v1
from ._wire import U64, WIRE_VARINT, Fallback, encode_tag, encode_varint

__all__ = [
    "decode_env_join_request",
    "decode_env_join_response",
    "decode_model_join_request",
    "decode_model_join_response",
    "encode_env_join",
    "encode_env_join_response",
    "encode_env_timing_tail",
    "encode_model_join",
    "encode_model_join_response",
]

_M = TypeVar("_M")


def _encoded(fast: Callable[[Any], bytes], message: Any) -> bytes:
    """``fast(message)``, or betterproto2's bytes when the fast path declines or trips.

    The fallback covers every input, so a gap in the fast path costs speed, never bytes.
    """
    try:
        return fast(message)
    except Exception:
        return bytes(message)


def _decode(
    fast: Callable[[bytes, int, int], _M], data: bytes, fallback: Callable[[bytes], _M]
) -> _M:
    if type(data) is not bytes:
        data = bytes(data)
    try:
        return fast(data, 0, len(data))
    except Fallback:
        return fallback(data)


def encode_env_join(message: env_v1.JoinRequest) -> bytes:
    """``bytes(message)`` for an env JoinRequest; step and reset requests take the fast path."""
    return _encoded(_gen.enc_env_v1_JoinRequest, message)


def encode_env_join_response(message: env_v1.JoinResponse) -> bytes:
    """``bytes(message)`` for an env JoinResponse; every arm but render and close is fast."""
    return _encoded(_gen.enc_env_v1_JoinResponse, message)


def encode_model_join(message: model_v1.JoinRequest) -> bytes:
    """``bytes(message)`` for a model JoinRequest; predict and reset_adapter are fast."""
    return _encoded(_gen.enc_model_v1_JoinRequest, message)


def encode_model_join_response(message: model_v1.JoinResponse) -> bytes:
    """``bytes(message)`` for a model JoinResponse; predict, reset/release and error are fast."""
    return _encoded(_gen.enc_model_v1_JoinResponse, message)


def decode_env_join_request(
    data: bytes, fallback: Callable[[bytes], env_v1.JoinRequest] | None = None
) -> env_v1.JoinRequest:
    """Parse an env JoinRequest; step and reset requests take the fast path.

    Anything else goes to ``fallback`` (default ``env_v1.JoinRequest.FromString``), which
    gets the whole message. Malformed input on the fast path raises ``ValueError``.
    """
    return _decode(_gen.dec_env_v1_JoinRequest, data, fallback or env_v1.JoinRequest.FromString)


def decode_env_join_response(
    data: bytes, fallback: Callable[[bytes], env_v1.JoinResponse] | None = None
) -> env_v1.JoinResponse:
    """Parse an env JoinResponse; reset, step, configure and error replies take the fast path.

    Anything else goes to ``fallback`` (default ``env_v1.JoinResponse.FromString``).
    Malformed input on the fast path raises ``ValueError``.
    """
    return _decode(_gen.dec_env_v1_JoinResponse, data, fallback or env_v1.JoinResponse.FromString)


def decode_model_join_request(
    data: bytes, fallback: Callable[[bytes], model_v1.JoinRequest] | None = None
) -> model_v1.JoinRequest:
    """Parse a model JoinRequest; predict and reset_adapter requests take the fast path.

    Anything else goes to ``fallback`` (default ``model_v1.JoinRequest.FromString``).
    """
    return _decode(_gen.dec_model_v1_JoinRequest, data, fallback or model_v1.JoinRequest.FromString)


def decode_model_join_response(
    data: bytes, fallback: Callable[[bytes], model_v1.JoinResponse] | None = None
) -> model_v1.JoinResponse:
    """Parse a model JoinResponse; predict, reset/release and error replies are fast.

    Anything else goes to ``fallback`` (default ``model_v1.JoinResponse.FromString``).
    """
    return _decode(
        _gen.dec_model_v1_JoinResponse, data, fallback or model_v1.JoinResponse.FromString
    )


def _varint_tag(name: str) -> bytes:
    """The key of the env JoinResponse varint field ``name``, from the message metadata."""
    message: Any = env_v1.JoinResponse  # betterproto2's metadata property is loosely typed
    meta = message._betterproto.meta_by_field_name[name]
    assert meta.proto_type == "uint64", (name, meta.proto_type)
    assert meta.optional, name  # explicit presence: a zero is written, not skipped
    return encode_tag(meta.number, WIRE_VARINT)


_TIMING_TAGS: Final = tuple(
    _varint_tag(name) for name in ("endpoint_total_ns", "decode_ns", "user_ns", "encode_ns")
)
_QUEUE_TAG: Final = _varint_tag("queue_ns")


def encode_env_timing_tail(
    *, total_ns: int, decode_ns: int, user_ns: int, encode_ns: int, queue_ns: int
) -> bytes:
    """The env JoinResponse timing fields (``endpoint_total_ns`` to ``queue_ns``), to append.

    They go on every response and are only known once the body is encoded (``encode_ns``),
    so a server appends them to the serialized body: protobuf reads the concatenation as
    one message with the fields set. Explicit presence: zeros are written. Each value is
    clamped to ``[0, 2**64 - 1]``.
    """
    total_tag, decode_tag, user_tag, encode_tag_ = _TIMING_TAGS
    return b"".join(
        (
            total_tag,
            encode_varint(min(max(total_ns, 0), U64)),
            decode_tag,
            encode_varint(min(max(decode_ns, 0), U64)),
            user_tag,
            encode_varint(min(max(user_ns, 0), U64)),
            encode_tag_,
            encode_varint(min(max(encode_ns, 0), U64)),
            _QUEUE_TAG,
            encode_varint(min(max(queue_ns, 0), U64)),
        )
    )
