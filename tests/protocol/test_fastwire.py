"""The hand-written per-step codec (``protocol._fastwire``) agrees with betterproto2 exactly.

For arbitrary valid messages: the fast encoders produce ``bytes(message)`` byte for byte, and
the fast decoders produce what ``FromString`` produces (compared field by field with floats
compared bitwise, with ``==``, and by re-serializing). The private ``_enc_*``/``_dec_*``
entry points are called directly where a test must prove the fast path itself handled the
message rather than the betterproto2 fallback. Input the fast path does not cover falls back
to betterproto2 with the same result; malformed or truncated input raises ``ValueError``.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import betterproto2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trio_rlmesh.protocol import _fastwire as fw
from trio_rlmesh.protocol import env_v1, model_v1, spaces_v1

CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "captures"

T = TypeVar("T")
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# ---------------------------------------------------------------------------- comparison


def _same(a: Any, b: Any) -> bool:
    """Deep equality: same types, floats bitwise, dict order, ``_unknown_fields`` too."""
    if isinstance(a, betterproto2.Message):
        if type(a) is not type(b) or a._unknown_fields != b._unknown_fields:
            return False
        return all(
            _same(getattr(a, name), getattr(b, name)) for name in a._betterproto.meta_by_field_name
        )
    if isinstance(a, float) or isinstance(b, float):
        return type(a) is type(b) and struct.pack("<d", a) == struct.pack("<d", b)
    if isinstance(a, list):
        return type(b) is list and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, dict):
        return (
            type(b) is dict
            and list(a) == list(b)
            and all(_same(value, b[key]) for key, value in a.items())
        )
    return type(a) is type(b) and bool(a == b)


def _nan_in_a_list(value: Any) -> bool:
    """Whether a NaN sits in a repeated float field (``==`` on lists cannot match those)."""
    if isinstance(value, betterproto2.Message):
        return any(
            _nan_in_a_list(getattr(value, name)) for name in value._betterproto.meta_by_field_name
        )
    if isinstance(value, list):
        return any(
            (isinstance(item, float) and math.isnan(item)) or _nan_in_a_list(item) for item in value
        )
    if isinstance(value, dict):
        return any(_nan_in_a_list(item) for item in value.values())
    return False


def _check_decoded(got: betterproto2.Message, data: bytes) -> None:
    ref = type(got).FromString(data)
    assert _same(got, ref), (got, ref)
    if not _nan_in_a_list(ref):
        assert got == ref
    assert bytes(got) == bytes(ref)


def _boundaries(data: bytes) -> set[int]:
    """Offsets where a top-level field ends (a cut there leaves a valid, shorter message)."""
    offsets = {0}
    at = 0
    for parsed in betterproto2.parse_fields(data):
        at += len(parsed.raw)
        offsets.add(at)
    assert at == len(data)
    return offsets


# ---------------------------------------------------------------------------- strategies

I64 = st.integers(-(2**63), 2**63 - 1) | st.sampled_from([0, 1, -1, -(2**63), 2**63 - 1])
U64 = st.integers(0, 2**64 - 1) | st.sampled_from([0, 1, 127, 128, 2**63, 2**64 - 1])
U32 = st.integers(0, 2**32 - 1) | st.sampled_from([0, 1, 127, 128, 2**32 - 1])
TEXT = st.text(max_size=8) | st.sampled_from(["", "grpc-req-1", "01a22bf2-711c-74c3", "é🦀\u0000"])
BLOB = st.binary(max_size=20)
FLOAT = st.floats(width=64) | st.sampled_from(
    [0.0, -0.0, math.inf, -math.inf, math.nan, 1.0, 5e-324, struct.unpack("<d", b"\x01" * 8)[0]]
)


def _opt(strategy: st.SearchStrategy[T]) -> st.SearchStrategy[T | None]:
    return st.none() | strategy


def _meta_value_leaf() -> st.SearchStrategy[spaces_v1.MetaValue]:
    return st.one_of(
        st.builds(spaces_v1.MetaValue),
        st.builds(spaces_v1.MetaValue, integer=I64),
        st.builds(spaces_v1.MetaValue, number=FLOAT),
        st.builds(spaces_v1.MetaValue, text=TEXT),
        st.builds(spaces_v1.MetaValue, bool=st.booleans()),
        st.builds(spaces_v1.MetaValue, bytes=BLOB),
    )


def _meta_value_nest(
    children: st.SearchStrategy[spaces_v1.MetaValue],
) -> st.SearchStrategy[spaces_v1.MetaValue]:
    return st.one_of(
        st.lists(children, max_size=3).map(
            lambda items: spaces_v1.MetaValue(list=spaces_v1.MetaList(items=items))
        ),
        st.dictionaries(TEXT, _opt(children), max_size=3).map(
            lambda entries: spaces_v1.MetaValue(map=spaces_v1.MetaMap(entries=entries))  # type: ignore[arg-type]
        ),
    )


# Map values include None: a null entry may be built that way, and encodes like MetaValue().
META_VALUE = st.recursive(_meta_value_leaf(), _meta_value_nest, max_leaves=6)
META_MAP = st.dictionaries(TEXT, _opt(META_VALUE), max_size=3).map(
    lambda entries: spaces_v1.MetaMap(entries=entries)  # type: ignore[arg-type]
)
SPACE_VALUE = st.lists(BLOB, max_size=4).map(lambda leaves: spaces_v1.SpaceValue(leaves=leaves))
INDICES = st.lists(U32, max_size=4)
IDS = st.lists(TEXT, max_size=3)

EPISODE = st.builds(
    env_v1.EpisodeMetadata,
    episode_id=TEXT,
    seed=_opt(I64),
    env_index=U32,
    step_count=I64,
    cumulative_reward=FLOAT,
    terminated=st.booleans(),
    truncated=st.booleans(),
    start_timestamp_ns=I64,
    end_timestamp_ns=I64,
    final_info=_opt(META_MAP),
)
STEP_REQUEST = st.builds(
    env_v1.StepRequest,
    action=_opt(SPACE_VALUE),
    timeout_ms=U64,
    env_indices=INDICES,
    episode_ids=IDS,
)
RESET_REQUEST = st.builds(
    env_v1.ResetRequest,
    seeds=st.lists(I64, max_size=4),
    options=_opt(META_MAP),
    timeout_ms=U64,
    env_indices=INDICES,
    episode_ids=IDS,
)
STEP_RESPONSE = st.builds(
    env_v1.StepResponse,
    observation=_opt(SPACE_VALUE),
    rewards=st.lists(FLOAT, max_size=4),
    terminated_mask=BLOB,
    truncated_mask=BLOB,
    infos=_opt(META_MAP),
    completed_episodes=st.lists(EPISODE, max_size=2),
    env_indices=INDICES,
)
RESET_RESPONSE = st.builds(
    env_v1.ResetResponse, observation=_opt(SPACE_VALUE), infos=_opt(META_MAP)
)
ENV_CODE = st.sampled_from(list(env_v1.EnvErrorCode)) | st.integers(0, 300).map(env_v1.EnvErrorCode)
ENV_ERROR = st.builds(
    env_v1.EnvError,
    code=ENV_CODE,
    message=TEXT,
    is_recoverable=st.booleans(),
    debug_info=TEXT,
    interrupted_episodes=st.lists(EPISODE, max_size=2),
)

ENV_JOIN_REQUEST = st.one_of(
    st.builds(env_v1.JoinRequest, step=STEP_REQUEST, request_id=TEXT),
    st.builds(env_v1.JoinRequest, reset=RESET_REQUEST, request_id=TEXT),
    st.builds(env_v1.JoinRequest, request_id=TEXT),
)
ENV_RESPONSE_ARM: st.SearchStrategy[dict[str, Any]] = st.one_of(
    st.fixed_dictionaries({"step": STEP_RESPONSE}),
    st.fixed_dictionaries({"reset": RESET_RESPONSE}),
    st.fixed_dictionaries({"error": ENV_ERROR}),
    st.fixed_dictionaries({"configure": st.builds(env_v1.ConfigureEnvResponse)}),
    st.just({}),
)
ENV_JOIN_RESPONSE = st.builds(
    lambda arm, **fields: env_v1.JoinResponse(**arm, **fields),
    ENV_RESPONSE_ARM,
    request_id=TEXT,
    endpoint_total_ns=_opt(U64),
    decode_ns=_opt(U64),
    user_ns=_opt(U64),
    encode_ns=_opt(U64),
    lane_skew_ns=_opt(U64),
    queue_ns=_opt(U64),
)

CONTEXT = st.builds(model_v1.AdapterContext, session_id=TEXT, env_id=TEXT, request_id=TEXT)
EPISODE_INFO = st.builds(model_v1.EpisodeInfo, episode_id=TEXT, seed=_opt(I64))
FRAME = st.builds(
    model_v1.ObservationHistoryFrame,
    observation=_opt(SPACE_VALUE),
    episode=_opt(EPISODE_INFO),
    step=U64,
)
PREDICT_REQUEST = st.builds(
    model_v1.PredictRequest,
    context=_opt(CONTEXT),
    observation=_opt(SPACE_VALUE),
    episode_info=st.lists(EPISODE_INFO, max_size=3),
    history=st.lists(FRAME, max_size=2),
    step=_opt(U64),
)
MODEL_JOIN_REQUEST = st.one_of(
    st.builds(model_v1.JoinRequest, predict=PREDICT_REQUEST, request_id=TEXT),
    st.builds(
        model_v1.JoinRequest,
        reset_adapter=st.builds(
            model_v1.ResetAdapterRequest, context=_opt(CONTEXT), episode_ids=IDS
        ),
        request_id=TEXT,
    ),
    st.builds(model_v1.JoinRequest, request_id=TEXT),
)
MODEL_ERROR = st.builds(
    model_v1.ModelError,
    code=st.sampled_from(list(model_v1.ModelErrorCode)),
    message=TEXT,
    is_recoverable=st.booleans(),
    debug_info=TEXT,
)
MODEL_RESPONSE_ARM: st.SearchStrategy[dict[str, Any]] = st.one_of(
    st.fixed_dictionaries(
        {
            "predict": st.builds(
                model_v1.PredictResponse,
                context=_opt(CONTEXT),
                actions=st.lists(SPACE_VALUE, max_size=3),
            )
        }
    ),
    st.fixed_dictionaries({"error": MODEL_ERROR}),
    st.fixed_dictionaries({"reset_adapter": st.builds(model_v1.ResetAdapterResponse)}),
    st.fixed_dictionaries({"release_adapter": st.builds(model_v1.ReleaseAdapterResponse)}),
    st.just({}),
)
MODEL_JOIN_RESPONSE = st.builds(
    lambda arm, **fields: model_v1.JoinResponse(**arm, **fields),
    MODEL_RESPONSE_ARM,
    request_id=TEXT,
    endpoint_total_ns=_opt(U64),
    decode_ns=_opt(U64),
    user_ns=_opt(U64),
    encode_ns=_opt(U64),
    queue_ns=_opt(U64),
    in_flight=_opt(U32),
    adapter_ns=_opt(U64),
    held_episodes=_opt(U32),
    held_state_bytes=_opt(U64),
)

# (strategy, fast encoder, public encoder, fast decoder, public decoder) per Join message.
Codec = tuple[
    st.SearchStrategy[Any],
    Callable[[Any], bytes],
    Callable[[Any], bytes],
    Callable[[bytes], Any],
    Callable[[bytes], Any],
]
CODECS: dict[str, Codec] = {
    "env_request": (
        ENV_JOIN_REQUEST,
        fw._enc_env_join,
        fw.encode_env_join,
        fw._dec_env_join_request,
        fw.decode_env_join_request,
    ),
    "env_response": (
        ENV_JOIN_RESPONSE,
        fw._enc_env_join_response,
        fw.encode_env_join_response,
        fw._dec_env_join_response,
        fw.decode_env_join_response,
    ),
    "model_request": (
        MODEL_JOIN_REQUEST,
        fw._enc_model_join,
        fw.encode_model_join,
        fw._dec_model_join_request,
        fw.decode_model_join_request,
    ),
    "model_response": (
        MODEL_JOIN_RESPONSE,
        fw._enc_model_join_response,
        fw.encode_model_join_response,
        fw._dec_model_join_response,
        fw.decode_model_join_response,
    ),
}


# ---------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("name", sorted(CODECS))
def test_fast_path_matches_betterproto2(name: str) -> None:
    strategy, fast_encode, encode, fast_decode, decode = CODECS[name]

    @SETTINGS
    @given(strategy)
    def check(message: betterproto2.Message) -> None:
        data = bytes(message)
        assert fast_encode(message) == data
        assert encode(message) == data
        _check_decoded(fast_decode(data), data)
        _check_decoded(decode(data), data)

    check()


def _capture(stem: str) -> bytes:
    (path,) = CAPTURES.glob(f"{stem}_*.hex")
    return bytes.fromhex(path.read_text().strip())


@pytest.mark.parametrize(
    ("stem", "fast_decode", "fast_encode"),
    [
        ("D", fw._dec_env_join_response, fw._enc_env_join_response),
        ("E", fw._dec_env_join_response, fw._enc_env_join_response),
        ("J", fw._dec_model_join_request, fw._enc_model_join),
        ("K", fw._dec_model_join_response, fw._enc_model_join_response),
        ("L", fw._dec_model_join_request, fw._enc_model_join),
        ("M", fw._dec_model_join_response, fw._enc_model_join_response),
        ("O", fw._dec_model_join_response, fw._enc_model_join_response),
    ],
)
def test_captures_take_the_fast_path(
    stem: str,
    fast_decode: Callable[[bytes], betterproto2.Message],
    fast_encode: Callable[[Any], bytes],
) -> None:
    data = _capture(stem)
    message = fast_decode(data)
    _check_decoded(message, data)
    assert fast_encode(message) == data


def test_capture_e_fields() -> None:
    response = fw.decode_env_join_response(_capture("E"))
    assert response.step is not None
    assert response.step.rewards == [1.0]
    assert response.step.terminated_mask == b"\x00"
    assert response.step.infos == spaces_v1.MetaMap()
    assert response.request_id == "grpc-req-3"
    assert response.endpoint_total_ns is not None
    assert response.decode_ns is not None
    assert response.user_ns is not None
    assert response.encode_ns is not None
    assert response.lane_skew_ns is None
    assert response.queue_ns is not None


@pytest.mark.parametrize(
    ("stem", "decode", "message_type"),
    [
        ("C", fw.decode_env_join_request, env_v1.JoinRequest),
        ("H", fw.decode_model_join_request, model_v1.JoinRequest),
        ("I", fw.decode_model_join_response, model_v1.JoinResponse),
        ("N", fw.decode_model_join_response, model_v1.JoinResponse),
    ],
)
def test_captures_outside_the_fast_path_fall_back(
    stem: str,
    decode: Callable[[bytes], betterproto2.Message],
    message_type: type[betterproto2.Message],
) -> None:
    data = _capture(stem)
    assert _same(decode(data), message_type.FromString(data))


# ---------------------------------------------------------------------------- unpacked input


def _uvarint(value: int) -> bytes:
    value &= 2**64 - 1
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _ld(tag: int, payload: bytes) -> bytes:
    return bytes((tag,)) + _uvarint(len(payload)) + payload


def _repeated(
    chunks: list[tuple[bool, list[Any]]], number: int, item: Callable[[Any], bytes], wire: int
) -> bytes:
    """Each chunk written packed (one LEN field) or unpacked (one field per value)."""
    out = b""
    for packed, values in chunks:
        if packed:
            out += _ld(number << 3 | 2, b"".join(map(item, values)))
        else:
            out += b"".join(bytes((number << 3 | wire,)) + item(v) for v in values)
    return out


def _chunks(values: st.SearchStrategy[T]) -> st.SearchStrategy[list[tuple[bool, list[T]]]]:
    return st.lists(st.tuples(st.booleans(), st.lists(values, max_size=3)), max_size=3)


def _double(value: float) -> bytes:
    return struct.pack("<d", value)


# Oversized varints (over 2**32 for uint32, over 2**64 on ten bytes) are masked like betterproto2.
WIDE = st.integers(0, 2**70 - 1)


def _wide(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


@SETTINGS
@given(_chunks(FLOAT), _chunks(WIDE), _chunks(st.integers(0, 2**64 - 1) | WIDE), WIDE)
def test_unpacked_and_packed_repeated_scalars_decode(
    rewards: list[tuple[bool, list[float]]],
    indices: list[tuple[bool, list[int]]],
    seeds: list[tuple[bool, list[int]]],
    timing: int,
) -> None:
    step = _repeated(rewards, 2, _double, 1) + _repeated(indices, 7, _wide, 0)
    response = _ld(0x12, step) + _ld(0x2A, b"grpc-req-9") + b"\x30" + _wide(timing)
    _check_decoded(fw._dec_env_join_response(response), response)
    model = _ld(0x12, b"") + b"\x78" + _wide(timing) + b"\x88\x01" + _wide(timing)
    _check_decoded(fw._dec_model_join_response(model), model)

    reset = _repeated(seeds, 1, _wide, 0) + _repeated(indices, 4, _wide, 0)
    request = _ld(0x0A, reset)
    _check_decoded(fw._dec_env_join_request(request), request)

    step_request = _repeated(indices, 3, _wide, 0)
    request = _ld(0x12, step_request)
    _check_decoded(fw._dec_env_join_request(request), request)


def test_repeated_singular_fields_last_wins_like_betterproto2() -> None:
    observation_a = _ld(0x0A, _ld(0x0A, b"first"))
    observation_b = _ld(0x0A, _ld(0x0A, b"second") + _ld(0x0A, b""))
    body = observation_a + _ld(0x1A, b"\x01") + observation_b + _ld(0x1A, b"\x00\x01")
    data = _ld(0x12, body) + _ld(0x2A, b"a") + _ld(0x2A, b"b") + b"\x30\x05\x30\x07"
    decoded = fw._dec_env_join_response(data)
    _check_decoded(decoded, data)
    assert decoded.request_id == "b"
    assert decoded.endpoint_total_ns == 7


# ---------------------------------------------------------------------------- null map values


def _field(data: bytes, number: int) -> bytes:
    (value,) = [bytes(p.value) for p in betterproto2.parse_fields(data) if p.number == number]
    return value


def _capture_h_metadata() -> bytes:
    """JoinRequest.resolve_adapter (1) -> env_spec (2) -> metadata (4), as RLMesh wrote it."""
    return _field(_field(_field(_capture("H"), 1), 2), 4)


def test_key_only_map_entries_decode_as_null_and_reencode_to_rlmesh_bytes() -> None:
    # Capture H's metadata, as RLMesh 0.1.0 wrote it, carried in an env reset reply.
    metadata = _capture_h_metadata()
    assert b"\x0a\x07\x0a\x05range" in metadata  # a key-only (null) entry
    data = _ld(0x0A, _ld(0x12, metadata)) + _ld(0x2A, b"r")
    decoded = fw._dec_env_join_response(data)
    _check_decoded(decoded, data)
    assert decoded.reset is not None
    assert decoded.reset.infos is not None
    tags = decoded.reset.infos.entries["rlmesh.adapters.v1.env_tags"].map
    assert tags is not None
    observation = tags.entries["observation"].map
    assert observation is not None
    assert observation.entries["range"] == spaces_v1.MetaValue()
    assert fw._enc_env_join_response(decoded) == data
    assert bytes(decoded) == data


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        (("k", spaces_v1.MetaValue()), _ld(0x0A, b"k")),
        (("k", None), _ld(0x0A, b"k")),
        (("", spaces_v1.MetaValue(integer=1)), _ld(0x12, b"\x08\x01")),
        (("", spaces_v1.MetaValue()), b""),
        (("k", spaces_v1.MetaValue(text="")), _ld(0x0A, b"k") + _ld(0x12, b"\x1a\x00")),
    ],
    ids=["null", "None", "empty key", "empty key and null", "empty text is not null"],
)
def test_map_entries_are_written_as_rlmesh_writes_them(
    entry: tuple[str, spaces_v1.MetaValue | None], expected: bytes
) -> None:
    # Byte for byte what rlmesh 0.1.0 (prost) puts on the wire for these entries.
    key, value = entry
    meta = spaces_v1.MetaMap(entries={key: value})  # type: ignore[dict-item]
    wire = _ld(0x0A, expected)
    assert bytes(meta) == wire
    assert fw._enc_meta_map(meta) == wire
    again = fw._dec_meta_map(wire, 0, len(wire))
    assert again == spaces_v1.MetaMap.FromString(wire)
    assert again.entries == {key: value or spaces_v1.MetaValue()}


# ---------------------------------------------------------------------------- fallback


def _unknown(number: int, wire: int, payload: bytes) -> bytes:
    return _uvarint(number << 3 | wire) + payload


FALLBACK_CASES = {
    "top-level unknown varint": _capture("E") + _unknown(99, 0, b"\x05"),
    "top-level unknown fixed32": _unknown(20, 5, b"\x01\x02\x03\x04") + _capture("E"),
    "unknown inside the step arm": _ld(0x12, _ld(0x0A, b"") + _unknown(9, 2, b"\x02hi")),
    "unknown inside the observation": _ld(0x12, _ld(0x0A, _unknown(2, 0, b"\x01"))),
    "unknown inside a MetaValue": _ld(
        0x12, _ld(0x2A, _ld(0x0A, _ld(0x0A, b"k") + _ld(0x12, _unknown(9, 0, b"\x01"))))
    ),
    "known field, other wire type": _ld(0x12, b"\x10\x01"),
    "render arm": _ld(0x1A, b"\x10\x01") + _ld(0x2A, b"r"),
    "close arm": _ld(0x22, b""),
    "two oneof arms": _ld(0x12, b"") + _ld(0x0A, b""),
    "two MetaValue arms": _ld(0x0A, _ld(0x12, _ld(0x0A, _ld(0x12, b"\x08\x01\x20\x01")))),
    "non-empty configure arm": _ld(0x3A, _unknown(1, 0, b"\x01")),
    "field number 0": b"\x00\x01",
    "multi-byte tag": _unknown(300, 0, b"\x01"),
}


@pytest.mark.parametrize("name", sorted(FALLBACK_CASES))
def test_unhandled_input_falls_back_to_betterproto2(name: str) -> None:
    data = FALLBACK_CASES[name]
    with pytest.raises(fw._Fallback):
        fw._dec_env_join_response(data)
    assert _same(fw.decode_env_join_response(data), env_v1.JoinResponse.FromString(data))
    seen: list[bytes] = []

    def fallback(raw: bytes) -> env_v1.JoinResponse:
        seen.append(raw)
        return env_v1.JoinResponse(request_id="fallback")

    assert fw.decode_env_join_response(data, fallback).request_id == "fallback"
    assert seen == [data]


def test_fallback_keeps_unknown_fields() -> None:
    data = FALLBACK_CASES["unknown inside the step arm"] + _unknown(99, 0, b"\x05")
    decoded = fw.decode_env_join_response(data)
    assert decoded._unknown_fields == b"\x98\x06\x05"
    assert decoded.step is not None
    assert decoded.step._unknown_fields == b"\x4a\x02hi"
    assert bytes(decoded) == data
    # Encoding a message that carries unknown fields stays on the fast path and keeps them.
    assert fw._enc_env_join_response(decoded) == bytes(decoded)


@pytest.mark.parametrize(
    ("decode", "data", "message_type"),
    [
        (fw.decode_env_join_request, _ld(0x32, _ld(0x0A, b"2026.06")), env_v1.JoinRequest),
        (fw.decode_env_join_request, _ld(0x22, _ld(0x0A, b"bye")), env_v1.JoinRequest),
        (fw.decode_env_join_request, _ld(0x12, _unknown(7, 0, b"\x01")), env_v1.JoinRequest),
        (fw.decode_model_join_request, _ld(0x0A, b""), model_v1.JoinRequest),
        (fw.decode_model_join_request, _ld(0x12, b"\x30\x01"), model_v1.JoinRequest),
        (fw.decode_model_join_response, _ld(0x0A, b"\x08\x03"), model_v1.JoinResponse),
        (fw.decode_model_join_response, _unknown(19, 0, b"\x01"), model_v1.JoinResponse),
    ],
)
def test_other_messages_fall_back(
    decode: Callable[[bytes], betterproto2.Message],
    data: bytes,
    message_type: type[betterproto2.Message],
) -> None:
    assert _same(decode(data), message_type.FromString(data))


@pytest.mark.parametrize(
    ("encode", "message"),
    [
        (fw.encode_env_join, env_v1.JoinRequest(render=env_v1.RenderRequest(env_indices=[0]))),
        (fw.encode_env_join, env_v1.JoinRequest(close=env_v1.CloseEnvsRequest(reason="x"))),
        (
            fw.encode_env_join,
            env_v1.JoinRequest(configure=env_v1.ConfigureEnvRequest("2026.06"), request_id="r"),
        ),
        (fw.encode_env_join_response, env_v1.JoinResponse(render=env_v1.RenderResponse(b""))),
        (fw.encode_env_join_response, env_v1.JoinResponse(close=env_v1.CloseEnvsResponse())),
        (
            fw.encode_model_join,
            model_v1.JoinRequest(close=model_v1.CloseParticipantRequest("x")),
        ),
        (
            fw.encode_model_join_response,
            model_v1.JoinResponse(resolve_adapter=model_v1.ResolveAdapterResponse(3)),
        ),
    ],
)
def test_encoding_other_arms_falls_back(
    encode: Callable[[Any], bytes], message: betterproto2.Message
) -> None:
    assert encode(message) == bytes(message)


def test_encoding_odd_values_falls_back_to_the_same_outcome() -> None:
    # A map value that is not a MetaValue fails the same way on the public path.
    broken = env_v1.JoinResponse(
        reset=env_v1.ResetResponse(infos=spaces_v1.MetaMap(entries={"k": "text"}))  # type: ignore[dict-item]
    )
    with pytest.raises(fw._Fallback):
        fw._enc_env_join_response(broken)
    with pytest.raises(Exception) as fast:
        fw.encode_env_join_response(broken)
    with pytest.raises(Exception) as slow:
        bytes(broken)
    assert type(fast.value) is type(slow.value)


# ---------------------------------------------------------------------------- malformed input


@pytest.mark.parametrize("name", sorted(CODECS))
def test_truncation_raises_unless_cut_between_fields(name: str) -> None:
    strategy, _, _, fast_decode, decode = CODECS[name]

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(strategy)
    def check(message: betterproto2.Message) -> None:
        data = bytes(message)
        boundaries = _boundaries(data)
        for cut in range(len(data)):
            prefix = data[:cut]
            if cut in boundaries:
                _check_decoded(fast_decode(prefix), prefix)
            else:
                with pytest.raises(ValueError):
                    fast_decode(prefix)
                with pytest.raises(ValueError):
                    decode(prefix)

    check()


@pytest.mark.parametrize("stem", ["D", "E"])
def test_truncated_captures_raise(stem: str) -> None:
    data = _capture(stem)
    boundaries = _boundaries(data)
    for cut in range(len(data)):
        if cut not in boundaries:
            with pytest.raises(ValueError):
                fw.decode_env_join_response(data[:cut])


MALFORMED = {
    "overlong varint": b"\x30" + b"\xff" * 10 + b"\x01",
    "varint runs off the end": b"\x30\xff\xff",
    "length past the end": b"\x2a\x05abc",
    "nested length past its message": _ld(0x12, b"\x0a\x05abc") + b"de",
    "packed doubles of 7 bytes": _ld(0x12, _ld(0x12, b"\x00" * 7)),
    "unpacked double cut short": _ld(0x12, b"\x11" + b"\x00" * 7),
    "bad UTF-8 request id": _ld(0x2A, b"\xff\xfe"),
    "bad UTF-8 map key": _ld(0x12, _ld(0x2A, _ld(0x0A, _ld(0x0A, b"\xc3") + _ld(0x12, b"")))),
    "cut inside a two-byte tag": _ld(0x2A, b"x") + b"\x80",
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_input_raises_value_error(name: str) -> None:
    with pytest.raises(ValueError):
        fw.decode_env_join_response(MALFORMED[name])


def test_malformed_model_response_raises() -> None:
    data = _capture("M")
    with pytest.raises(ValueError):
        fw.decode_model_join_response(data + b"\x88")  # a cut two-byte tag (field 17)
    with pytest.raises(ValueError):
        fw.decode_model_join_response(data + b"\x88\x01")  # field 17 with no value


def test_non_bytes_input_is_accepted() -> None:
    data = _capture("E")
    assert fw.decode_env_join_response(bytearray(data)) == env_v1.JoinResponse.FromString(data)
    assert fw.decode_env_join_response(memoryview(data)) == env_v1.JoinResponse.FromString(data)
