"""Every message captured between real rlmesh 0.1.0 peers decodes with no unknown fields and
re-encodes to the captured bytes.

Capture H holds MetaMap entries whose value is absent (a null). betterproto2 0.10 parses such
an entry to ``None`` and then cannot serialize it, so the test replaces those ``None`` values
with an empty ``MetaValue()`` (the same null) before re-encoding. The bytes then differ only
by the two-byte empty value (``12 00``) each null entry gains; H is checked for semantic
equality, every other capture for exact bytes.
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
WITH_NULL_MAP_VALUES = {"H"}


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


def _fill_null_map_values(message: betterproto2.Message) -> int:
    """Replace ``None`` MetaMap entry values with ``MetaValue()``; return how many."""
    filled = 0
    if isinstance(message, spaces_v1.MetaMap):
        for key, value in message.entries.items():
            # betterproto2 types the value as MetaValue, but a null entry parses to None.
            if cast("spaces_v1.MetaValue | None", value) is None:
                message.entries[key] = spaces_v1.MetaValue()
                filled += 1
    for child in _children(message):
        filled += _fill_null_map_values(child)
    return filled


@pytest.mark.parametrize("path", _captures(), ids=lambda p: p.stem)
def test_capture_decodes_without_unknown_fields(path: Path) -> None:
    raw = bytes.fromhex(path.read_text().strip())
    message = _message_type(path).parse(raw)
    assert _unknown_fields(message) == []


@pytest.mark.parametrize("path", _captures(), ids=lambda p: p.stem)
def test_capture_reencodes(path: Path) -> None:
    raw = bytes.fromhex(path.read_text().strip())
    message_type = _message_type(path)
    message = message_type.parse(raw)
    if path.name[0] in WITH_NULL_MAP_VALUES:
        nulls = _fill_null_map_values(message)
        assert nulls > 0, "capture H is expected to carry null MetaMap values"
        again = bytes(message)
        # Each null entry gains an explicit empty value field: tag 0x12, length 0.
        assert len(again) == len(raw) + 2 * nulls
        reparsed = message_type.parse(again)
        _fill_null_map_values(reparsed)
        assert reparsed == message
        assert bytes(reparsed) == again
    else:
        assert bytes(message) == raw


def test_all_captures_present() -> None:
    assert len(_captures()) == 16
