"""Every message captured between real rlmesh 0.1.0 peers decodes with no unknown fields and
re-encodes to the captured bytes.

Capture H holds MetaMap entries whose value is absent (a null): they decode to an empty
``MetaValue`` and are written back as the key alone, as RLMesh writes them.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, cast

import betterproto2
import pytest

from trio_rlmesh.protocol import env_v1, model_v1, spaces_v1

CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "captures"

MESSAGE_TYPES: dict[str, type[betterproto2.Message]] = {
    "env_HandshakeRequest": env_v1.HandshakeRequest,
    "env_HandshakeResponse": env_v1.HandshakeResponse,
    "env_JoinRequest": env_v1.JoinRequest,
    "env_JoinResponse": env_v1.JoinResponse,
    "model_HandshakeRequest": model_v1.HandshakeRequest,
    "model_HandshakeResponse": model_v1.HandshakeResponse,
    "model_JoinRequest": model_v1.JoinRequest,
    "model_JoinResponse": model_v1.JoinResponse,
}


def _captures() -> list[Path]:
    return sorted(CAPTURES.glob("*.hex"))


def _message_type(path: Path) -> type[betterproto2.Message]:
    for key, message_type in MESSAGE_TYPES.items():
        if f"_{key}_" in path.name or path.name.endswith(f"_{key}.hex"):
            return message_type
    raise AssertionError(f"no message type for capture {path.name}")


def _children(message: betterproto2.Message) -> list[betterproto2.Message]:
    found: list[betterproto2.Message] = []
    for field in dataclasses.fields(cast(Any, message)):
        value = getattr(message, field.name)
        values = value.values() if isinstance(value, dict) else value
        if not isinstance(values, (list, type({}.values()))):
            values = [values]
        found.extend(v for v in values if isinstance(v, betterproto2.Message))
    return found


def _unknown_fields(message: betterproto2.Message, path: str = "$") -> list[str]:
    problems = [f"{path}: {message._unknown_fields.hex()}"] if message._unknown_fields else []
    for index, child in enumerate(_children(message)):
        problems += _unknown_fields(child, f"{path}/{type(child).__name__}#{index}")
    return problems


@pytest.mark.parametrize("path", _captures(), ids=lambda p: p.stem)
def test_capture_decodes_without_unknown_fields(path: Path) -> None:
    raw = bytes.fromhex(path.read_text().strip())
    message = _message_type(path).parse(raw)
    assert _unknown_fields(message) == []


@pytest.mark.parametrize("path", _captures(), ids=lambda p: p.stem)
def test_capture_reencodes(path: Path) -> None:
    raw = bytes.fromhex(path.read_text().strip())
    message = _message_type(path).parse(raw)
    assert bytes(message) == raw


def _null_entries(message: betterproto2.Message) -> list[str]:
    found: list[str] = []
    if isinstance(message, spaces_v1.MetaMap):
        found += [key for key, value in message.entries.items() if value == spaces_v1.MetaValue()]
    for child in _children(message):
        found += _null_entries(child)
    return found


def test_capture_h_null_map_values_survive_a_round_trip() -> None:
    (path,) = CAPTURES.glob("H_*.hex")
    raw = bytes.fromhex(path.read_text().strip())
    message = model_v1.JoinRequest.parse(raw)
    assert sorted(_null_entries(message)) == ["clip", "encoding", "encoding", "range"]
    again = model_v1.JoinRequest.parse(bytes(message))
    assert again == message
    assert bytes(again) == raw


def test_all_captures_present() -> None:
    assert len(_captures()) == 16
