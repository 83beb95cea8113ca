"""``protocol._checked``: strict parsing, the fallback behind the fast decoders."""

from __future__ import annotations

import pytest

from trio_rlmesh.protocol import env_v1, model_v1, spaces_v1
from trio_rlmesh.protocol._checked import check_wire, decode_checked


def _ld(tag: int, payload: bytes) -> bytes:
    assert len(payload) < 0x80
    return bytes((tag, len(payload))) + payload


def test_well_formed_input_parses_like_betterproto2() -> None:
    message = env_v1.JoinRequest(render=env_v1.RenderRequest(env_indices=[1, 300]), request_id="r")
    data = bytes(message) + b"\x98\x06\x05"  # plus an unknown varint field (99)
    decoded = decode_checked(env_v1.JoinRequest, data)
    assert decoded == env_v1.JoinRequest.FromString(data)
    assert decoded._unknown_fields == b"\x98\x06\x05"


@pytest.mark.parametrize(
    ("message_type", "data", "fault"),
    [
        (env_v1.StepRequest, b"\x08\x01", "StepRequest.action arrived with wire type 0"),
        (env_v1.StepRequest, _ld(0x0A, b"") + b"\x10", "field 2: message truncated"),
        (env_v1.JoinRequest, b"\x2a\x05abc", "field 5: a length-delimited field runs past"),
        (env_v1.JoinRequest, _ld(0x2A, b"\xff"), "JoinRequest.request_id is not valid UTF-8"),
        (env_v1.JoinRequest, b"\x0b", "field 1 uses unsupported wire type 3"),
        (env_v1.JoinRequest, b"\x00\x01", "field number 0"),
        (env_v1.JoinRequest, b"\x80", "truncated inside a varint"),
        (env_v1.JoinRequest, b"\xff" * 10 + b"\x01", "longer than 10 bytes"),
        (env_v1.StepResponse, b"\x11" + b"\x00" * 7, "field 2: message truncated"),
        (
            spaces_v1.MetaMap,
            _ld(0x0A, _ld(0x0A, b"k") + b"\x10\x01"),
            "MetaMap.entries map entry has a field of wire type 0",
        ),
    ],
)
def test_malformed_input_names_the_fault(message_type: type, data: bytes, fault: str) -> None:
    with pytest.raises(ValueError, match=fault):
        check_wire(data, message_type)
    with pytest.raises(ValueError, match=fault):
        decode_checked(message_type, data)


def test_the_last_oneof_arm_wins_at_every_level() -> None:
    # Two arms of JoinResponse.kind, and two arms of a nested MetaValue.
    value = b"\x08\x01" + _ld(0x1A, b"x")
    infos = _ld(0x0A, _ld(0x0A, b"k") + _ld(0x12, value))
    data = _ld(0x0A, _ld(0x12, infos)) + _ld(0x3A, b"")
    decoded = decode_checked(env_v1.JoinResponse, data)
    assert decoded.reset is None
    assert decoded.configure == env_v1.ConfigureEnvResponse()

    data = _ld(0x0A, _ld(0x12, infos))
    decoded = decode_checked(env_v1.JoinResponse, data)
    assert decoded.reset is not None
    assert decoded.reset.infos is not None
    assert decoded.reset.infos.entries["k"] == spaces_v1.MetaValue(text="x")


def test_packed_and_unpacked_repeated_scalars_are_both_accepted() -> None:
    data = b"\x18\x05" + _ld(0x1A, b"\x01\x02")
    assert decode_checked(env_v1.StepRequest, data).env_indices == [5, 1, 2]


def test_unknown_fields_of_any_wire_type_are_skipped() -> None:
    data = b"\x98\x06\x05" + b"\x99\x06" + b"\x00" * 8 + b"\x9d\x06" + b"\x00" * 4
    assert decode_checked(model_v1.AdapterContext, data + _ld(0x0A, b"s")).session_id == "s"
