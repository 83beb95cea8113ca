"""Hand-written protobuf codec for the per-step Join messages.

betterproto2 0.10 serializes and parses through a generic, reflective path that costs tens
of microseconds even for a CartPole-sized step. The few messages a run sends on every step
(env Join step/reset requests and their replies, the model Join predict request and reply)
are encoded and decoded here by explicit per-message code instead. The functions take and
return the same generated message objects, so callers do not change.

Contract, pinned by ``tests/protocol/test_fastwire.py``:

* Encoding yields exactly ``bytes(message)``: betterproto2's field order (dataclass order,
  so a oneof arm numbered after ``request_id`` still comes first), zero values skipped
  (``-0.0`` is zero), explicit-presence fields and message fields written whenever they are
  not ``None`` (an empty message is ``tag 00``), repeated scalars packed, ``MetaMap``
  entries written as RLMesh writes them (an empty key and a null value left out; see
  ``_metamap``), each message's ``_unknown_fields`` appended last.
  Anything the fast path does not cover (another oneof arm, a value of an unexpected
  type) is handed to ``bytes(message)`` for the whole message.
* Decoding yields a message equal to ``Message.FromString(data)``: packed and unpacked
  repeated scalars are both read, the last occurrence of a singular field wins (a message
  field is replaced, not merged, as betterproto2 does), and integers are masked and
  sign-converted like betterproto2's, and a ``MetaMap`` entry without a value holds a
  null ``MetaValue()``. Input the fast path does not cover (an unknown field number, a
  known field with another wire type, a oneof arm it does not read, two arms of one
  oneof) makes it hand the whole message to a fallback, by default ``FromString``, so
  the result never differs from betterproto2's (``_unknown_fields`` included).
* Unlike betterproto2, the fast decoder never returns a partial message: a varint or a
  length-delimited field running past the end of its message, an overlong varint, a
  packed double field of the wrong length or invalid UTF-8 raise ``ValueError``. (A
  message cut exactly between two top-level fields is still a valid, shorter message.)
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, Final, NoReturn, TypeVar

from ._generated.rlmesh.env import v1 as env_v1
from ._generated.rlmesh.model import v1 as model_v1
from ._generated.rlmesh.spaces import v1 as spaces_v1

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

_U32: Final = 0xFFFF_FFFF
_U64: Final = 0xFFFF_FFFF_FFFF_FFFF
_SIGN64: Final = 1 << 63
_TWO64: Final = 1 << 64

_DOUBLE: Final = struct.Struct("<d")
_pack_double: Final = _DOUBLE.pack
_unpack_double: Final = _DOUBLE.unpack_from

_SMALL: Final = tuple(bytes((i,)) for i in range(0x80))


class _Fallback(Exception):
    """The fast path does not cover this message; betterproto2 handles all of it."""


# ---------------------------------------------------------------------------- encoding


def _uvarint(value: int) -> bytes:
    """A varint as betterproto2 writes it (negative numbers as their 64-bit two's complement)."""
    if 0 <= value < 0x80:
        return _SMALL[value]
    if value < 0:
        if value < -_SIGN64:
            raise ValueError(f"{value} is not representable as a 64-bit integer")
        value += _TWO64
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _packed_varints(tag: bytes, values: list[int]) -> bytes:
    body = b"".join([_uvarint(v) for v in values])
    return tag + _uvarint(len(body)) + body


def _len_field(tag: bytes, payload: bytes) -> bytes:
    return tag + _uvarint(len(payload)) + payload


def _text_field(tag: bytes, text: str) -> bytes:
    raw = text.encode("utf-8")
    return tag + _uvarint(len(raw)) + raw


def _enc_space_value(m: spaces_v1.SpaceValue) -> bytes:
    parts: list[bytes] = []
    for leaf in m.leaves:
        parts += (b"\x0a", _uvarint(len(leaf)), leaf)
    if m._unknown_fields:
        parts.append(m._unknown_fields)
    return b"".join(parts)


def _enc_meta_value(m: spaces_v1.MetaValue) -> bytes:
    if type(m) is not spaces_v1.MetaValue:
        raise _Fallback  # betterproto2 decides what a non-MetaValue map value means
    parts: list[bytes] = []
    if m.integer is not None:
        parts += (b"\x08", _uvarint(m.integer))
    if m.number is not None:
        parts += (b"\x11", _pack_double(m.number))
    if m.text is not None:
        parts.append(_text_field(b"\x1a", m.text))
    if m.bool is not None:
        parts += (b"\x20", _uvarint(m.bool))
    if m.bytes is not None:
        parts += (b"\x2a", _uvarint(len(m.bytes)), m.bytes)
    if m.list is not None:
        parts.append(_len_field(b"\x32", _enc_meta_list(m.list)))
    if m.map is not None:
        parts.append(_len_field(b"\x3a", _enc_meta_map(m.map)))
    if m._unknown_fields:
        parts.append(m._unknown_fields)
    return b"".join(parts)


def _enc_meta_list(m: spaces_v1.MetaList) -> bytes:
    parts = [_len_field(b"\x0a", _enc_meta_value(item)) for item in m.items]
    if m._unknown_fields:
        parts.append(m._unknown_fields)
    return b"".join(parts)


def _enc_meta_map(m: spaces_v1.MetaMap) -> bytes:
    parts: list[bytes] = []
    for key, value in m.entries.items():
        # As prost (and _metamap) writes an entry: no empty key, no null value.
        entry = _text_field(b"\x0a", key) if key else b""
        if value is not None:
            encoded = _enc_meta_value(value)
            if encoded:
                entry += b"\x12" + _uvarint(len(encoded)) + encoded
        parts += (b"\x0a", _uvarint(len(entry)), entry)
    if m._unknown_fields:
        parts.append(m._unknown_fields)
    return b"".join(parts)


def _enc_episode_metadata(m: env_v1.EpisodeMetadata) -> bytes:
    parts: list[bytes] = []
    if m.episode_id:
        parts.append(_text_field(b"\x0a", m.episode_id))
    if m.seed is not None:
        parts += (b"\x10", _uvarint(m.seed))
    if m.env_index:
        parts += (b"\x18", _uvarint(m.env_index))
    if m.step_count:
        parts += (b"\x20", _uvarint(m.step_count))
    if m.cumulative_reward:
        parts += (b"\x29", _pack_double(m.cumulative_reward))
    if m.terminated:
        parts += (b"\x30", _uvarint(m.terminated))
    if m.truncated:
        parts += (b"\x38", _uvarint(m.truncated))
    if m.start_timestamp_ns:
        parts += (b"\x40", _uvarint(m.start_timestamp_ns))
    if m.end_timestamp_ns:
        parts += (b"\x48", _uvarint(m.end_timestamp_ns))
    if m.final_info is not None:
        parts.append(_len_field(b"\x52", _enc_meta_map(m.final_info)))
    if m._unknown_fields:
        parts.append(m._unknown_fields)
    return b"".join(parts)


def _enc_step_request(m: env_v1.StepRequest) -> bytes:
    parts: list[bytes] = []
    if m.action is not None:
        parts.append(_len_field(b"\x0a", _enc_space_value(m.action)))
    if m.timeout_ms:
        parts += (b"\x10", _uvarint(m.timeout_ms))
    if m.env_indices:
        parts.append(_packed_varints(b"\x1a", m.env_indices))
    for episode_id in m.episode_ids:
        parts.append(_text_field(b"\x22", episode_id))
    if m._unknown_fields:
        parts.append(m._unknown_fields)
    return b"".join(parts)


def _enc_reset_request(m: env_v1.ResetRequest) -> bytes:
    parts: list[bytes] = []
    if m.seeds:
        parts.append(_packed_varints(b"\x0a", m.seeds))
    if m.options is not None:
        parts.append(_len_field(b"\x12", _enc_meta_map(m.options)))
    if m.timeout_ms:
        parts += (b"\x18", _uvarint(m.timeout_ms))
    if m.env_indices:
        parts.append(_packed_varints(b"\x22", m.env_indices))
    for episode_id in m.episode_ids:
        parts.append(_text_field(b"\x2a", episode_id))
    if m._unknown_fields:
        parts.append(m._unknown_fields)
    return b"".join(parts)


def _enc_step_response(m: env_v1.StepResponse) -> bytes:
    parts: list[bytes] = []
    if m.observation is not None:
        parts.append(_len_field(b"\x0a", _enc_space_value(m.observation)))
    rewards = m.rewards
    if rewards:
        n = len(rewards)
        packed = _pack_double(rewards[0]) if n == 1 else struct.pack(f"<{n}d", *rewards)
        parts += (b"\x12", _uvarint(len(packed)), packed)
    if m.terminated_mask:
        parts += (b"\x1a", _uvarint(len(m.terminated_mask)), m.terminated_mask)
    if m.truncated_mask:
        parts += (b"\x22", _uvarint(len(m.truncated_mask)), m.truncated_mask)
    if m.infos is not None:
        parts.append(_len_field(b"\x2a", _enc_meta_map(m.infos)))
    for episode in m.completed_episodes:
        parts.append(_len_field(b"\x32", _enc_episode_metadata(episode)))
    if m.env_indices:
        parts.append(_packed_varints(b"\x3a", m.env_indices))
    if m._unknown_fields:
        parts.append(m._unknown_fields)
    return b"".join(parts)


def _enc_reset_response(m: env_v1.ResetResponse) -> bytes:
    parts: list[bytes] = []
    if m.observation is not None:
        parts.append(_len_field(b"\x0a", _enc_space_value(m.observation)))
    if m.infos is not None:
        parts.append(_len_field(b"\x12", _enc_meta_map(m.infos)))
    if m._unknown_fields:
        parts.append(m._unknown_fields)
    return b"".join(parts)


def _enc_env_error(m: env_v1.EnvError) -> bytes:
    parts: list[bytes] = []
    if m.code:
        parts += (b"\x08", _uvarint(m.code))
    if m.message:
        parts.append(_text_field(b"\x12", m.message))
    if m.is_recoverable:
        parts += (b"\x18", _uvarint(m.is_recoverable))
    if m.debug_info:
        parts.append(_text_field(b"\x22", m.debug_info))
    for episode in m.interrupted_episodes:
        parts.append(_len_field(b"\x2a", _enc_episode_metadata(episode)))
    if m._unknown_fields:
        parts.append(m._unknown_fields)
    return b"".join(parts)


def _enc_env_join(m: env_v1.JoinRequest) -> bytes:
    if m.render is not None or m.close is not None or m.configure is not None:
        raise _Fallback
    parts: list[bytes] = []
    if m.reset is not None:
        parts.append(_len_field(b"\x0a", _enc_reset_request(m.reset)))
    if m.step is not None:
        parts.append(_len_field(b"\x12", _enc_step_request(m.step)))
    if m.request_id:
        parts.append(_text_field(b"\x2a", m.request_id))
    if m._unknown_fields:
        parts.append(m._unknown_fields)
    return b"".join(parts)


_ENV_TIMINGS: Final = (
    (b"\x30", "endpoint_total_ns"),
    (b"\x58", "decode_ns"),
    (b"\x60", "user_ns"),
    (b"\x68", "encode_ns"),
    (b"\x70", "lane_skew_ns"),
    (b"\x78", "queue_ns"),
)


def _join_response_tail(
    m: env_v1.JoinResponse | model_v1.JoinResponse,
    parts: list[bytes],
    timings: tuple[tuple[bytes, str], ...],
) -> bytes:
    """Finish a Join response: request id, the explicit-presence timings, unknown fields."""
    if m.request_id:
        parts.append(_text_field(b"\x2a", m.request_id))
    for tag, name in timings:
        value = getattr(m, name)
        if value is not None:
            parts += (tag, _uvarint(value))
    if m._unknown_fields:
        parts.append(m._unknown_fields)
    return b"".join(parts)


def _encoded(fast: Callable[[Any], bytes], message: Any) -> bytes:
    """``fast(message)``, or betterproto2's bytes when the fast path declines or trips.

    The fallback covers every input, so a gap in the fast path costs speed, never bytes.
    """
    try:
        return fast(message)
    except Exception:
        return bytes(message)


def _enc_env_join_response(m: env_v1.JoinResponse) -> bytes:
    if m.render is not None or m.close is not None:
        raise _Fallback
    parts: list[bytes] = []
    if m.reset is not None:
        parts.append(_len_field(b"\x0a", _enc_reset_response(m.reset)))
    if m.step is not None:
        parts.append(_len_field(b"\x12", _enc_step_response(m.step)))
    if m.configure is not None:
        parts.append(_len_field(b"\x3a", m.configure._unknown_fields))
    if m.error is not None:
        parts.append(_len_field(b"\x52", _enc_env_error(m.error)))
    return _join_response_tail(m, parts, _ENV_TIMINGS)


def encode_env_join(message: env_v1.JoinRequest) -> bytes:
    """``bytes(message)`` for an env JoinRequest; step and reset requests take the fast path."""
    return _encoded(_enc_env_join, message)


def encode_env_timing_tail(
    *, total_ns: int, decode_ns: int, user_ns: int, encode_ns: int, queue_ns: int
) -> bytes:
    """The env JoinResponse timing fields 6, 11, 12, 13 and 15, ready to append.

    They go on every response and are only known once the body is encoded (``encode_ns``),
    so a server appends them to the serialized body: protobuf reads the concatenation as
    one message with the fields set. Explicit presence: zeros are written.
    """
    fields = ((b"\x30", total_ns), (b"\x58", decode_ns), (b"\x60", user_ns), (b"\x68", encode_ns))
    parts = [tag + _uvarint(min(max(value, 0), _U64)) for tag, value in fields]
    parts.append(b"\x78" + _uvarint(min(max(queue_ns, 0), _U64)))
    return b"".join(parts)


def encode_env_join_response(message: env_v1.JoinResponse) -> bytes:
    """``bytes(message)`` for an env JoinResponse; every arm but render and close is fast."""
    return _encoded(_enc_env_join_response, message)


# ---------------------------------------------------------------------------- decoding


def _varint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """Read a varint at ``pos``; returns (value, next position). At most 10 bytes."""
    result = 0
    shift = 0
    while pos < end:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift == 70:
            raise ValueError("varint longer than 10 bytes")
    raise ValueError("message truncated inside a varint")


def _span(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """Read a length prefix at ``pos``; returns the (start, stop) of the payload."""
    if pos < end and data[pos] < 0x80:
        stop = pos + 1 + data[pos]
        pos += 1
    else:
        length, pos = _varint(data, pos, end)
        stop = pos + length
    if stop > end:
        raise ValueError("a length-delimited field runs past the end of its message")
    return pos, stop


def _fixed64(pos: int, end: int) -> int:
    if pos + 8 > end:
        raise ValueError("message truncated inside a 64-bit field")
    return pos + 8


def _unexpected(data: bytes, pos: int, end: int) -> NoReturn:
    """The tag at ``pos`` is one the fast path does not read: hand over the message.

    The tag itself is read first, so a message cut inside a multi-byte tag still raises.
    """
    _varint(data, pos, end)
    raise _Fallback


def _as_int64(value: int) -> int:
    value &= _U64
    return value - _TWO64 if value >= _SIGN64 else value


def _read_varints(data: bytes, start: int, stop: int, out: list[int], mask: int) -> None:
    """Append the packed varints in ``data[start:stop]``; ``mask`` 0 means int64."""
    pos = start
    while pos < stop:
        byte = data[pos]
        if byte < 0x80:
            out.append(byte)
            pos += 1
        else:
            value, pos = _varint(data, pos, stop)
            out.append(value & mask if mask else _as_int64(value))


def _dec_space_value(data: bytes, pos: int, end: int) -> spaces_v1.SpaceValue:
    leaves: list[bytes] = []
    while pos < end:
        if data[pos] != 0x0A:
            _unexpected(data, pos, end)
        start, pos = _span(data, pos + 1, end)
        leaves.append(data[start:pos])
    return spaces_v1.SpaceValue(leaves=leaves)


_META_ARMS: Final = {
    1: "integer",
    2: "number",
    3: "text",
    4: "bool",
    5: "bytes",
    6: "list",
    7: "map",
}


def _dec_meta_value(data: bytes, pos: int, end: int) -> spaces_v1.MetaValue:
    arm = 0
    value: Any = None
    while pos < end:
        key = data[pos]
        pos += 1
        if key == 0x08:
            raw, pos = _varint(data, pos, end)
            value = _as_int64(raw)
        elif key == 0x11:
            start, pos = pos, _fixed64(pos, end)
            value = _unpack_double(data, start)[0]
        elif key == 0x1A:
            start, pos = _span(data, pos, end)
            value = data[start:pos].decode("utf-8")
        elif key == 0x20:
            raw, pos = _varint(data, pos, end)
            value = raw > 0
        elif key == 0x2A:
            start, pos = _span(data, pos, end)
            value = data[start:pos]
        elif key == 0x32:
            start, pos = _span(data, pos, end)
            value = _dec_meta_list(data, start, pos)
        elif key == 0x3A:
            start, pos = _span(data, pos, end)
            value = _dec_meta_map(data, start, pos)
        else:
            _unexpected(data, pos - 1, end)
        if arm and arm != key >> 3:
            raise _Fallback  # betterproto2 keeps both arms set
        arm = key >> 3
    if not arm:
        return spaces_v1.MetaValue()
    return spaces_v1.MetaValue(**{_META_ARMS[arm]: value})


def _dec_meta_list(data: bytes, pos: int, end: int) -> spaces_v1.MetaList:
    items: list[spaces_v1.MetaValue] = []
    while pos < end:
        if data[pos] != 0x0A:
            _unexpected(data, pos, end)
        start, pos = _span(data, pos + 1, end)
        items.append(_dec_meta_value(data, start, pos))
    return spaces_v1.MetaList(items=items)


def _dec_meta_map(data: bytes, pos: int, end: int) -> spaces_v1.MetaMap:
    entries: dict[str, spaces_v1.MetaValue] = {}
    while pos < end:
        if data[pos] != 0x0A:
            _unexpected(data, pos, end)
        at, stop = _span(data, pos + 1, end)
        key = ""
        value: spaces_v1.MetaValue | None = None
        while at < stop:
            tag = data[at]
            if tag == 0x0A:
                start, at = _span(data, at + 1, stop)
                key = data[start:at].decode("utf-8")
            elif tag == 0x12:
                start, at = _span(data, at + 1, stop)
                value = _dec_meta_value(data, start, at)
            else:
                _unexpected(data, at, stop)
        # A missing value is a null (protobuf's map rule, and what _metamap's load does).
        entries[key] = spaces_v1.MetaValue() if value is None else value
        pos = stop
    return spaces_v1.MetaMap(entries=entries)


def _dec_episode_metadata(data: bytes, pos: int, end: int) -> env_v1.EpisodeMetadata:
    episode_id = ""
    seed: int | None = None
    env_index = step_count = start_ns = end_ns = 0
    reward = 0.0
    terminated = truncated = False
    final_info: spaces_v1.MetaMap | None = None
    while pos < end:
        key = data[pos]
        pos += 1
        if key == 0x0A:
            start, pos = _span(data, pos, end)
            episode_id = data[start:pos].decode("utf-8")
        elif key == 0x10:
            raw, pos = _varint(data, pos, end)
            seed = _as_int64(raw)
        elif key == 0x18:
            raw, pos = _varint(data, pos, end)
            env_index = raw & _U32
        elif key == 0x20:
            raw, pos = _varint(data, pos, end)
            step_count = _as_int64(raw)
        elif key == 0x29:
            start, pos = pos, _fixed64(pos, end)
            reward = _unpack_double(data, start)[0]
        elif key == 0x30:
            raw, pos = _varint(data, pos, end)
            terminated = raw > 0
        elif key == 0x38:
            raw, pos = _varint(data, pos, end)
            truncated = raw > 0
        elif key == 0x40:
            raw, pos = _varint(data, pos, end)
            start_ns = _as_int64(raw)
        elif key == 0x48:
            raw, pos = _varint(data, pos, end)
            end_ns = _as_int64(raw)
        elif key == 0x52:
            start, pos = _span(data, pos, end)
            final_info = _dec_meta_map(data, start, pos)
        else:
            _unexpected(data, pos - 1, end)
    return env_v1.EpisodeMetadata(
        episode_id=episode_id,
        seed=seed,
        env_index=env_index,
        step_count=step_count,
        cumulative_reward=reward,
        terminated=terminated,
        truncated=truncated,
        start_timestamp_ns=start_ns,
        end_timestamp_ns=end_ns,
        final_info=final_info,
    )


def _dec_step_request(data: bytes, pos: int, end: int) -> env_v1.StepRequest:
    action: spaces_v1.SpaceValue | None = None
    timeout_ms = 0
    env_indices: list[int] = []
    episode_ids: list[str] = []
    while pos < end:
        key = data[pos]
        pos += 1
        if key == 0x0A:
            start, pos = _span(data, pos, end)
            action = _dec_space_value(data, start, pos)
        elif key == 0x10:
            timeout_ms, pos = _varint(data, pos, end)
            timeout_ms &= _U64
        elif key == 0x1A:
            start, pos = _span(data, pos, end)
            _read_varints(data, start, pos, env_indices, _U32)
        elif key == 0x18:
            raw, pos = _varint(data, pos, end)
            env_indices.append(raw & _U32)
        elif key == 0x22:
            start, pos = _span(data, pos, end)
            episode_ids.append(data[start:pos].decode("utf-8"))
        else:
            _unexpected(data, pos - 1, end)
    return env_v1.StepRequest(
        action=action, timeout_ms=timeout_ms, env_indices=env_indices, episode_ids=episode_ids
    )


def _dec_reset_request(data: bytes, pos: int, end: int) -> env_v1.ResetRequest:
    seeds: list[int] = []
    options: spaces_v1.MetaMap | None = None
    timeout_ms = 0
    env_indices: list[int] = []
    episode_ids: list[str] = []
    while pos < end:
        key = data[pos]
        pos += 1
        if key == 0x0A:
            start, pos = _span(data, pos, end)
            _read_varints(data, start, pos, seeds, 0)
        elif key == 0x08:
            raw, pos = _varint(data, pos, end)
            seeds.append(_as_int64(raw))
        elif key == 0x12:
            start, pos = _span(data, pos, end)
            options = _dec_meta_map(data, start, pos)
        elif key == 0x18:
            timeout_ms, pos = _varint(data, pos, end)
            timeout_ms &= _U64
        elif key == 0x22:
            start, pos = _span(data, pos, end)
            _read_varints(data, start, pos, env_indices, _U32)
        elif key == 0x20:
            raw, pos = _varint(data, pos, end)
            env_indices.append(raw & _U32)
        elif key == 0x2A:
            start, pos = _span(data, pos, end)
            episode_ids.append(data[start:pos].decode("utf-8"))
        else:
            _unexpected(data, pos - 1, end)
    return env_v1.ResetRequest(
        seeds=seeds,
        options=options,
        timeout_ms=timeout_ms,
        env_indices=env_indices,
        episode_ids=episode_ids,
    )


def _dec_step_response(data: bytes, pos: int, end: int) -> env_v1.StepResponse:
    observation: spaces_v1.SpaceValue | None = None
    rewards: list[float] = []
    terminated = truncated = b""
    infos: spaces_v1.MetaMap | None = None
    completed: list[env_v1.EpisodeMetadata] = []
    env_indices: list[int] = []
    while pos < end:
        key = data[pos]
        pos += 1
        if key == 0x0A:
            start, pos = _span(data, pos, end)
            observation = _dec_space_value(data, start, pos)
        elif key == 0x12:
            start, pos = _span(data, pos, end)
            size = pos - start
            if size & 7:
                raise ValueError("packed double field length is not a multiple of 8")
            if size == 8:
                rewards.append(_unpack_double(data, start)[0])
            elif size:
                rewards.extend(struct.unpack_from(f"<{size >> 3}d", data, start))
        elif key == 0x11:
            start, pos = pos, _fixed64(pos, end)
            rewards.append(_unpack_double(data, start)[0])
        elif key == 0x1A:
            start, pos = _span(data, pos, end)
            terminated = data[start:pos]
        elif key == 0x22:
            start, pos = _span(data, pos, end)
            truncated = data[start:pos]
        elif key == 0x2A:
            start, pos = _span(data, pos, end)
            infos = _dec_meta_map(data, start, pos)
        elif key == 0x32:
            start, pos = _span(data, pos, end)
            completed.append(_dec_episode_metadata(data, start, pos))
        elif key == 0x3A:
            start, pos = _span(data, pos, end)
            _read_varints(data, start, pos, env_indices, _U32)
        elif key == 0x38:
            raw, pos = _varint(data, pos, end)
            env_indices.append(raw & _U32)
        else:
            _unexpected(data, pos - 1, end)
    return env_v1.StepResponse(
        observation=observation,
        rewards=rewards,
        terminated_mask=terminated,
        truncated_mask=truncated,
        infos=infos,
        completed_episodes=completed,
        env_indices=env_indices,
    )


def _dec_reset_response(data: bytes, pos: int, end: int) -> env_v1.ResetResponse:
    observation: spaces_v1.SpaceValue | None = None
    infos: spaces_v1.MetaMap | None = None
    while pos < end:
        key = data[pos]
        pos += 1
        if key == 0x0A:
            start, pos = _span(data, pos, end)
            observation = _dec_space_value(data, start, pos)
        elif key == 0x12:
            start, pos = _span(data, pos, end)
            infos = _dec_meta_map(data, start, pos)
        else:
            _unexpected(data, pos - 1, end)
    return env_v1.ResetResponse(observation=observation, infos=infos)


def _dec_env_error(data: bytes, pos: int, end: int) -> env_v1.EnvError:
    code = 0
    message = debug_info = ""
    recoverable = False
    interrupted: list[env_v1.EpisodeMetadata] = []
    while pos < end:
        key = data[pos]
        pos += 1
        if key == 0x08:
            raw, pos = _varint(data, pos, end)
            code = _as_int64(raw)
        elif key == 0x12:
            start, pos = _span(data, pos, end)
            message = data[start:pos].decode("utf-8")
        elif key == 0x18:
            raw, pos = _varint(data, pos, end)
            recoverable = raw > 0
        elif key == 0x22:
            start, pos = _span(data, pos, end)
            debug_info = data[start:pos].decode("utf-8")
        elif key == 0x2A:
            start, pos = _span(data, pos, end)
            interrupted.append(_dec_episode_metadata(data, start, pos))
        else:
            _unexpected(data, pos - 1, end)
    return env_v1.EnvError(
        code=env_v1.EnvErrorCode(code),
        message=message,
        is_recoverable=recoverable,
        debug_info=debug_info,
        interrupted_episodes=interrupted,
    )


def _dec_empty(data: bytes, pos: int, end: int) -> None:
    if pos < end:
        _unexpected(data, pos, end)


def _dec_env_join_request(data: bytes) -> env_v1.JoinRequest:
    pos, end = 0, len(data)
    arm = 0
    reset: env_v1.ResetRequest | None = None
    step: env_v1.StepRequest | None = None
    request_id = ""
    while pos < end:
        key = data[pos]
        pos += 1
        if key == 0x12:
            start, pos = _span(data, pos, end)
            step = _dec_step_request(data, start, pos)
        elif key == 0x2A:
            start, pos = _span(data, pos, end)
            request_id = data[start:pos].decode("utf-8")
            continue
        elif key == 0x0A:
            start, pos = _span(data, pos, end)
            reset = _dec_reset_request(data, start, pos)
        else:
            _unexpected(data, pos - 1, end)
        if arm and arm != key:
            raise _Fallback
        arm = key
    return env_v1.JoinRequest(reset=reset, step=step, request_id=request_id)


def _dec_env_join_response(data: bytes) -> env_v1.JoinResponse:
    pos, end = 0, len(data)
    arm = 0
    reset: env_v1.ResetResponse | None = None
    step: env_v1.StepResponse | None = None
    configure: env_v1.ConfigureEnvResponse | None = None
    error: env_v1.EnvError | None = None
    request_id = ""
    timings: list[int | None] = [None] * 16
    while pos < end:
        key = data[pos]
        pos += 1
        if key & 7 == 0 and key >> 3 in _ENV_TIMING_NUMBERS:
            raw, pos = _varint(data, pos, end)
            timings[key >> 3] = raw & _U64
            continue
        if key == 0x2A:
            start, pos = _span(data, pos, end)
            request_id = data[start:pos].decode("utf-8")
            continue
        if key == 0x12:
            start, pos = _span(data, pos, end)
            step = _dec_step_response(data, start, pos)
        elif key == 0x0A:
            start, pos = _span(data, pos, end)
            reset = _dec_reset_response(data, start, pos)
        elif key == 0x52:
            start, pos = _span(data, pos, end)
            error = _dec_env_error(data, start, pos)
        elif key == 0x3A:
            start, pos = _span(data, pos, end)
            _dec_empty(data, start, pos)
            configure = env_v1.ConfigureEnvResponse()
        else:
            _unexpected(data, pos - 1, end)
        if arm and arm != key:
            raise _Fallback
        arm = key
    return env_v1.JoinResponse(
        reset=reset,
        step=step,
        configure=configure,
        error=error,
        request_id=request_id,
        endpoint_total_ns=timings[6],
        decode_ns=timings[11],
        user_ns=timings[12],
        encode_ns=timings[13],
        lane_skew_ns=timings[14],
        queue_ns=timings[15],
    )


_ENV_TIMING_NUMBERS: Final = frozenset((6, 11, 12, 13, 14, 15))


def _decode(fast: Callable[[bytes], _M], data: bytes, fallback: Callable[[bytes], _M]) -> _M:
    if type(data) is not bytes:
        data = bytes(data)
    try:
        return fast(data)
    except _Fallback:
        return fallback(data)


def decode_env_join_request(
    data: bytes, fallback: Callable[[bytes], env_v1.JoinRequest] | None = None
) -> env_v1.JoinRequest:
    """Parse an env JoinRequest; step and reset requests take the fast path.

    Anything else goes to ``fallback`` (default ``env_v1.JoinRequest.FromString``), which
    gets the whole message. Malformed input on the fast path raises ``ValueError``.
    """
    return _decode(_dec_env_join_request, data, fallback or env_v1.JoinRequest.FromString)


def decode_env_join_response(
    data: bytes, fallback: Callable[[bytes], env_v1.JoinResponse] | None = None
) -> env_v1.JoinResponse:
    """Parse an env JoinResponse; reset, step, configure and error replies take the fast path.

    Anything else goes to ``fallback`` (default ``env_v1.JoinResponse.FromString``).
    Malformed input on the fast path raises ``ValueError``.
    """
    return _decode(_dec_env_join_response, data, fallback or env_v1.JoinResponse.FromString)


# ---------------------------------------------------------------------------- model side


def _enc_adapter_context(m: model_v1.AdapterContext) -> bytes:
    parts: list[bytes] = []
    if m.session_id:
        parts.append(_text_field(b"\x0a", m.session_id))
    if m.env_id:
        parts.append(_text_field(b"\x12", m.env_id))
    if m.request_id:
        parts.append(_text_field(b"\x1a", m.request_id))
    if m._unknown_fields:
        parts.append(m._unknown_fields)
    return b"".join(parts)


def _enc_episode_info(m: model_v1.EpisodeInfo) -> bytes:
    parts: list[bytes] = []
    if m.episode_id:
        parts.append(_text_field(b"\x0a", m.episode_id))
    if m.seed is not None:
        parts += (b"\x10", _uvarint(m.seed))
    if m._unknown_fields:
        parts.append(m._unknown_fields)
    return b"".join(parts)


def _enc_history_frame(m: model_v1.ObservationHistoryFrame) -> bytes:
    parts: list[bytes] = []
    if m.observation is not None:
        parts.append(_len_field(b"\x0a", _enc_space_value(m.observation)))
    if m.episode is not None:
        parts.append(_len_field(b"\x12", _enc_episode_info(m.episode)))
    if m.step:
        parts += (b"\x18", _uvarint(m.step))
    if m._unknown_fields:
        parts.append(m._unknown_fields)
    return b"".join(parts)


def _enc_predict_request(m: model_v1.PredictRequest) -> bytes:
    parts: list[bytes] = []
    if m.context is not None:
        parts.append(_len_field(b"\x0a", _enc_adapter_context(m.context)))
    if m.observation is not None:
        parts.append(_len_field(b"\x12", _enc_space_value(m.observation)))
    for info in m.episode_info:
        parts.append(_len_field(b"\x1a", _enc_episode_info(info)))
    for frame in m.history:
        parts.append(_len_field(b"\x22", _enc_history_frame(frame)))
    if m.step is not None:
        parts += (b"\x28", _uvarint(m.step))
    if m._unknown_fields:
        parts.append(m._unknown_fields)
    return b"".join(parts)


def _enc_reset_adapter_request(m: model_v1.ResetAdapterRequest) -> bytes:
    parts: list[bytes] = []
    if m.context is not None:
        parts.append(_len_field(b"\x0a", _enc_adapter_context(m.context)))
    for episode_id in m.episode_ids:
        parts.append(_text_field(b"\x12", episode_id))
    if m._unknown_fields:
        parts.append(m._unknown_fields)
    return b"".join(parts)


def _enc_predict_response(m: model_v1.PredictResponse) -> bytes:
    parts: list[bytes] = []
    if m.context is not None:
        parts.append(_len_field(b"\x0a", _enc_adapter_context(m.context)))
    for action in m.actions:
        parts.append(_len_field(b"\x12", _enc_space_value(action)))
    if m._unknown_fields:
        parts.append(m._unknown_fields)
    return b"".join(parts)


def _enc_model_error(m: model_v1.ModelError) -> bytes:
    parts: list[bytes] = []
    if m.code:
        parts += (b"\x08", _uvarint(m.code))
    if m.message:
        parts.append(_text_field(b"\x12", m.message))
    if m.is_recoverable:
        parts += (b"\x18", _uvarint(m.is_recoverable))
    if m.debug_info:
        parts.append(_text_field(b"\x22", m.debug_info))
    if m._unknown_fields:
        parts.append(m._unknown_fields)
    return b"".join(parts)


def _enc_model_join(m: model_v1.JoinRequest) -> bytes:
    if (
        m.resolve_adapter is not None
        or m.release_adapter is not None
        or m.close is not None
        or m.grouped_predict is not None
    ):
        raise _Fallback
    parts: list[bytes] = []
    if m.predict is not None:
        parts.append(_len_field(b"\x12", _enc_predict_request(m.predict)))
    if m.reset_adapter is not None:
        parts.append(_len_field(b"\x3a", _enc_reset_adapter_request(m.reset_adapter)))
    if m.request_id:
        parts.append(_text_field(b"\x2a", m.request_id))
    if m._unknown_fields:
        parts.append(m._unknown_fields)
    return b"".join(parts)


_MODEL_TIMINGS: Final = (
    (b"\x30", "endpoint_total_ns"),
    (b"\x58", "decode_ns"),
    (b"\x60", "user_ns"),
    (b"\x68", "encode_ns"),
    (b"\x70", "queue_ns"),
    (b"\x78", "in_flight"),
    (b"\x80\x01", "adapter_ns"),
    (b"\x88\x01", "held_episodes"),
    (b"\x90\x01", "held_state_bytes"),
)


def _enc_model_join_response(m: model_v1.JoinResponse) -> bytes:
    if m.resolve_adapter is not None or m.close is not None or m.grouped_predict is not None:
        raise _Fallback
    parts: list[bytes] = []
    if m.predict is not None:
        parts.append(_len_field(b"\x12", _enc_predict_response(m.predict)))
    if m.release_adapter is not None:
        parts.append(_len_field(b"\x1a", m.release_adapter._unknown_fields))
    if m.reset_adapter is not None:
        parts.append(_len_field(b"\x42", m.reset_adapter._unknown_fields))
    if m.error is not None:
        parts.append(_len_field(b"\x52", _enc_model_error(m.error)))
    return _join_response_tail(m, parts, _MODEL_TIMINGS)


def encode_model_join(message: model_v1.JoinRequest) -> bytes:
    """``bytes(message)`` for a model JoinRequest; predict and reset_adapter are fast."""
    return _encoded(_enc_model_join, message)


def encode_model_join_response(message: model_v1.JoinResponse) -> bytes:
    """``bytes(message)`` for a model JoinResponse; predict, reset/release and error are fast."""
    return _encoded(_enc_model_join_response, message)


def _dec_adapter_context(data: bytes, pos: int, end: int) -> model_v1.AdapterContext:
    texts = ["", "", ""]
    while pos < end:
        key = data[pos]
        if key not in (0x0A, 0x12, 0x1A):
            _unexpected(data, pos, end)
        start, pos = _span(data, pos + 1, end)
        texts[(key >> 3) - 1] = data[start:pos].decode("utf-8")
    return model_v1.AdapterContext(session_id=texts[0], env_id=texts[1], request_id=texts[2])


def _dec_episode_info(data: bytes, pos: int, end: int) -> model_v1.EpisodeInfo:
    episode_id = ""
    seed: int | None = None
    while pos < end:
        key = data[pos]
        pos += 1
        if key == 0x0A:
            start, pos = _span(data, pos, end)
            episode_id = data[start:pos].decode("utf-8")
        elif key == 0x10:
            raw, pos = _varint(data, pos, end)
            seed = _as_int64(raw)
        else:
            _unexpected(data, pos - 1, end)
    return model_v1.EpisodeInfo(episode_id=episode_id, seed=seed)


def _dec_history_frame(data: bytes, pos: int, end: int) -> model_v1.ObservationHistoryFrame:
    observation: spaces_v1.SpaceValue | None = None
    episode: model_v1.EpisodeInfo | None = None
    step = 0
    while pos < end:
        key = data[pos]
        pos += 1
        if key == 0x0A:
            start, pos = _span(data, pos, end)
            observation = _dec_space_value(data, start, pos)
        elif key == 0x12:
            start, pos = _span(data, pos, end)
            episode = _dec_episode_info(data, start, pos)
        elif key == 0x18:
            step, pos = _varint(data, pos, end)
            step &= _U64
        else:
            _unexpected(data, pos - 1, end)
    return model_v1.ObservationHistoryFrame(observation=observation, episode=episode, step=step)


def _dec_predict_request(data: bytes, pos: int, end: int) -> model_v1.PredictRequest:
    context: model_v1.AdapterContext | None = None
    observation: spaces_v1.SpaceValue | None = None
    infos: list[model_v1.EpisodeInfo] = []
    history: list[model_v1.ObservationHistoryFrame] = []
    step: int | None = None
    while pos < end:
        key = data[pos]
        pos += 1
        if key == 0x0A:
            start, pos = _span(data, pos, end)
            context = _dec_adapter_context(data, start, pos)
        elif key == 0x12:
            start, pos = _span(data, pos, end)
            observation = _dec_space_value(data, start, pos)
        elif key == 0x1A:
            start, pos = _span(data, pos, end)
            infos.append(_dec_episode_info(data, start, pos))
        elif key == 0x22:
            start, pos = _span(data, pos, end)
            history.append(_dec_history_frame(data, start, pos))
        elif key == 0x28:
            raw, pos = _varint(data, pos, end)
            step = raw & _U64
        else:
            _unexpected(data, pos - 1, end)
    return model_v1.PredictRequest(
        context=context, observation=observation, episode_info=infos, history=history, step=step
    )


def _dec_reset_adapter_request(data: bytes, pos: int, end: int) -> model_v1.ResetAdapterRequest:
    context: model_v1.AdapterContext | None = None
    episode_ids: list[str] = []
    while pos < end:
        key = data[pos]
        pos += 1
        if key == 0x0A:
            start, pos = _span(data, pos, end)
            context = _dec_adapter_context(data, start, pos)
        elif key == 0x12:
            start, pos = _span(data, pos, end)
            episode_ids.append(data[start:pos].decode("utf-8"))
        else:
            _unexpected(data, pos - 1, end)
    return model_v1.ResetAdapterRequest(context=context, episode_ids=episode_ids)


def _dec_predict_response(data: bytes, pos: int, end: int) -> model_v1.PredictResponse:
    context: model_v1.AdapterContext | None = None
    actions: list[spaces_v1.SpaceValue] = []
    while pos < end:
        key = data[pos]
        pos += 1
        if key == 0x0A:
            start, pos = _span(data, pos, end)
            context = _dec_adapter_context(data, start, pos)
        elif key == 0x12:
            start, pos = _span(data, pos, end)
            actions.append(_dec_space_value(data, start, pos))
        else:
            _unexpected(data, pos - 1, end)
    return model_v1.PredictResponse(context=context, actions=actions)


def _dec_model_error(data: bytes, pos: int, end: int) -> model_v1.ModelError:
    code = 0
    message = debug_info = ""
    recoverable = False
    while pos < end:
        key = data[pos]
        pos += 1
        if key == 0x08:
            raw, pos = _varint(data, pos, end)
            code = _as_int64(raw)
        elif key == 0x12:
            start, pos = _span(data, pos, end)
            message = data[start:pos].decode("utf-8")
        elif key == 0x18:
            raw, pos = _varint(data, pos, end)
            recoverable = raw > 0
        elif key == 0x22:
            start, pos = _span(data, pos, end)
            debug_info = data[start:pos].decode("utf-8")
        else:
            _unexpected(data, pos - 1, end)
    return model_v1.ModelError(
        code=model_v1.ModelErrorCode(code),
        message=message,
        is_recoverable=recoverable,
        debug_info=debug_info,
    )


def _dec_model_join_request(data: bytes) -> model_v1.JoinRequest:
    pos, end = 0, len(data)
    arm = 0
    predict: model_v1.PredictRequest | None = None
    reset_adapter: model_v1.ResetAdapterRequest | None = None
    request_id = ""
    while pos < end:
        key = data[pos]
        pos += 1
        if key == 0x12:
            start, pos = _span(data, pos, end)
            predict = _dec_predict_request(data, start, pos)
        elif key == 0x2A:
            start, pos = _span(data, pos, end)
            request_id = data[start:pos].decode("utf-8")
            continue
        elif key == 0x3A:
            start, pos = _span(data, pos, end)
            reset_adapter = _dec_reset_adapter_request(data, start, pos)
        else:
            _unexpected(data, pos - 1, end)
        if arm and arm != key:
            raise _Fallback
        arm = key
    return model_v1.JoinRequest(predict=predict, reset_adapter=reset_adapter, request_id=request_id)


# Varint field number -> (slot, mask) of the model JoinResponse's explicit-presence scalars.
_MODEL_SCALARS: Final = {
    6: (0, _U64),
    11: (1, _U64),
    12: (2, _U64),
    13: (3, _U64),
    14: (4, _U64),
    15: (5, _U32),
    16: (6, _U64),
    17: (7, _U32),
    18: (8, _U64),
}


def _dec_model_join_response(data: bytes) -> model_v1.JoinResponse:
    pos, end = 0, len(data)
    arm = 0
    predict: model_v1.PredictResponse | None = None
    release: model_v1.ReleaseAdapterResponse | None = None
    reset: model_v1.ResetAdapterResponse | None = None
    error: model_v1.ModelError | None = None
    request_id = ""
    scalars: list[int | None] = [None] * 9
    while pos < end:
        key = data[pos]
        pos += 1
        if key >= 0x80:
            key, pos = _varint(data, pos - 1, end)
        if key & 7 == 0 and key >> 3 in _MODEL_SCALARS:
            slot, mask = _MODEL_SCALARS[key >> 3]
            raw, pos = _varint(data, pos, end)
            scalars[slot] = raw & mask
            continue
        if key == 0x2A:
            start, pos = _span(data, pos, end)
            request_id = data[start:pos].decode("utf-8")
            continue
        if key == 0x12:
            start, pos = _span(data, pos, end)
            predict = _dec_predict_response(data, start, pos)
        elif key == 0x52:
            start, pos = _span(data, pos, end)
            error = _dec_model_error(data, start, pos)
        elif key == 0x42:
            start, pos = _span(data, pos, end)
            _dec_empty(data, start, pos)
            reset = model_v1.ResetAdapterResponse()
        elif key == 0x1A:
            start, pos = _span(data, pos, end)
            _dec_empty(data, start, pos)
            release = model_v1.ReleaseAdapterResponse()
        else:
            raise _Fallback
        if arm and arm != key:
            raise _Fallback
        arm = key
    return model_v1.JoinResponse(
        predict=predict,
        release_adapter=release,
        reset_adapter=reset,
        error=error,
        request_id=request_id,
        endpoint_total_ns=scalars[0],
        decode_ns=scalars[1],
        user_ns=scalars[2],
        encode_ns=scalars[3],
        queue_ns=scalars[4],
        in_flight=scalars[5],
        adapter_ns=scalars[6],
        held_episodes=scalars[7],
        held_state_bytes=scalars[8],
    )


def decode_model_join_request(
    data: bytes, fallback: Callable[[bytes], model_v1.JoinRequest] | None = None
) -> model_v1.JoinRequest:
    """Parse a model JoinRequest; predict and reset_adapter requests take the fast path.

    Anything else goes to ``fallback`` (default ``model_v1.JoinRequest.FromString``).
    """
    return _decode(_dec_model_join_request, data, fallback or model_v1.JoinRequest.FromString)


def decode_model_join_response(
    data: bytes, fallback: Callable[[bytes], model_v1.JoinResponse] | None = None
) -> model_v1.JoinResponse:
    """Parse a model JoinResponse; predict, reset/release and error replies are fast.

    Anything else goes to ``fallback`` (default ``model_v1.JoinResponse.FromString``).
    """
    return _decode(_dec_model_join_response, data, fallback or model_v1.JoinResponse.FromString)
