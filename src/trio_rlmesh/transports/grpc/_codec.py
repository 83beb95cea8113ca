"""The one message codec path every client and server uses, on every backend.

Decoding is strict everywhere: the per-step Join messages take the hand-written fast path
(:mod:`trio_rlmesh.protocol._fastwire`), everything else (and whatever the fast path hands
back) goes through :func:`~trio_rlmesh.protocol._checked.decode_checked`. Malformed bytes
become one :class:`~._status.GrpcError` INTERNAL naming the message and the fault, the
status a gRPC server answers for a request it cannot parse.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, TypeVar

from ...protocol import env_v1, model_v1
from ...protocol._internal import (
    decode_checked,
    decode_env_join_request,
    decode_env_join_response,
    decode_model_join_request,
    decode_model_join_response,
    encode_env_join,
    encode_env_join_response,
    encode_model_join,
    encode_model_join_response,
)
from ._status import GrpcError, Status

__all__ = ["decode", "encode"]

_M = TypeVar("_M")

_FAST_DECODERS: Final[dict[type[Any], Callable[..., Any]]] = {
    env_v1.JoinRequest: decode_env_join_request,
    env_v1.JoinResponse: decode_env_join_response,
    model_v1.JoinRequest: decode_model_join_request,
    model_v1.JoinResponse: decode_model_join_response,
}
_FAST_ENCODERS: Final[dict[type[Any], Callable[[Any], bytes]]] = {
    env_v1.JoinRequest: encode_env_join,
    env_v1.JoinResponse: encode_env_join_response,
    model_v1.JoinRequest: encode_model_join,
    model_v1.JoinResponse: encode_model_join_response,
}


def decode(message_type: type[_M], data: bytes) -> _M:
    """Parse ``data`` as ``message_type``.

    Raises:
        GrpcError: INTERNAL ``failed to decode <Type>: <what is wrong>``.
    """
    try:
        fast = _FAST_DECODERS.get(message_type)
        if fast is None:
            return decode_checked(message_type, data)
        try:
            return fast(data, lambda whole: decode_checked(message_type, whole))  # type: ignore[no-any-return]
        except _DECODE_ERRORS:
            # The fast decoder fails in Python's words ("'utf-8' codec can't decode byte
            # 0xff"); the checked one names the field. Only a message that fails pays it.
            decode_checked(message_type, data)
            raise
    except _DECODE_ERRORS as exc:
        raise GrpcError(
            Status.INTERNAL, f"failed to decode {message_type.__name__}: {exc}"
        ) from None


_DECODE_ERRORS = (ValueError, TypeError, KeyError, EOFError, UnicodeDecodeError, OverflowError)


def encode(message: Any) -> bytes:
    """Serialize ``message`` (byte-identical to ``bytes(message)``)."""
    fast = _FAST_ENCODERS.get(type(message))
    if fast is not None:
        return fast(message)
    return bytes(message)
