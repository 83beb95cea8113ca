"""MetaMap conversion (wire spec §9): Python values to MetaValue arms and back."""

from __future__ import annotations

import enum
from collections import namedtuple
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from trio_rlmesh import MetaConversionError
from trio_rlmesh.protocol import (
    meta_to_python,
    model_v1,
    python_to_meta,
    spaces_v1,
    value_to_python,
)


def _arm(value: spaces_v1.MetaValue) -> str | None:
    for name in ("integer", "number", "text", "bool", "bytes", "list", "map"):
        if getattr(value, name) is not None:
            return name
    return None


def _single(value: Any) -> spaces_v1.MetaValue:
    return python_to_meta({"v": value}).entries["v"]


class Color(enum.Enum):
    RED = 1
    BLUE = "blue"


class Mode(enum.Enum):
    AUTO = None


Point = namedtuple("Point", ["x", "y"])


@pytest.mark.parametrize(
    ("value", "arm", "back"),
    [
        (None, None, None),
        (True, "bool", True),
        (0, "integer", 0),
        (-(2**63), "integer", -(2**63)),
        (2**63 - 1, "integer", 2**63 - 1),
        (2**63, "number", float(2**63)),
        (-(2**63) - 1, "number", float(-(2**63) - 1)),
        (1.5, "number", 1.5),
        ("hé", "text", "hé"),
        (b"\x00\xff", "bytes", b"\x00\xff"),
        (bytearray(b"ab"), "bytes", b"ab"),
        ([1, "a", None], "list", [1, "a", None]),
        ((1, 2.0), "list", [1, 2.0]),
        ({"a": {"b": [True]}}, "map", {"a": {"b": [True]}}),
        (np.int32(7), "integer", 7),
        (np.uint64(2**64 - 1), "number", float(2**64 - 1)),
        (np.float32(0.5), "number", 0.5),
        (np.bool_(False), "bool", False),
        (np.arange(3, dtype=np.int16), "list", [0, 1, 2]),
        (np.array([[1.0, 2.0]], dtype=np.float32), "list", [[1.0, 2.0]]),
        (np.array([True, False]), "list", [True, False]),
        (np.array(["a", "b"]), "list", ["a", "b"]),
        (Point(1, 2.5), "map", {"x": 1, "y": 2.5}),
        (Color.RED, "integer", 1),
        (Color.BLUE, "text", "blue"),
        (Mode.AUTO, "text", "AUTO"),
    ],
    ids=repr,
)
def test_python_value_to_meta(value: Any, arm: str | None, back: Any) -> None:
    meta_value = _single(value)
    assert _arm(meta_value) == arm
    assert value_to_python(meta_value) == back
    # Survives the wire.
    wire = spaces_v1.MetaMap.parse(bytes(python_to_meta({"v": value})))
    assert meta_to_python(wire) == {"v": back}


def test_nested_structures_keep_order_and_types() -> None:
    info = {
        "final_info": [{"is_success": np.bool_(True)}, None],
        "_final_info": np.array([True, False]),
        "episode": {"r": np.array([1.0, 2.0]), "l": np.array([3, 4])},
    }
    assert meta_to_python(python_to_meta(info)) == {
        "final_info": [{"is_success": True}, None],
        "_final_info": [True, False],
        "episode": {"r": [1.0, 2.0], "l": [3, 4]},
    }


def test_null_value_and_absent_map() -> None:
    assert value_to_python(None) is None
    assert value_to_python(spaces_v1.MetaValue()) is None
    assert meta_to_python(None) == {}
    # The null is written as the key alone, as RLMesh 0.1.0 writes it.
    assert bytes(python_to_meta({"n": None})).hex() == "0a030a016e"
    assert meta_to_python(spaces_v1.MetaMap.FromString(bytes.fromhex("0a030a016e"))) == {"n": None}


def test_capture_h_metadata_round_trips_through_python_byte_for_byte() -> None:
    # A model ResolveAdapterRequest from RLMesh 0.1.0 whose env_tags hold nulls.
    path = Path(__file__).resolve().parents[1] / "fixtures" / "captures"
    (capture,) = path.glob("H_*.hex")
    raw = bytes.fromhex(capture.read_text().strip())
    message = model_v1.JoinRequest.FromString(raw)
    assert message.resolve_adapter is not None
    spec = message.resolve_adapter.env_spec
    assert spec is not None
    as_python = meta_to_python(spec.metadata)
    tags = as_python["rlmesh.adapters.v1.env_tags"]
    assert tags["observation"] == {
        "range": None,
        "encoding": None,
        "role": "proprio/joint_pos",
        "type": "state",
    }
    assert tags["action"]["clip"] is None
    spec.metadata = python_to_meta(as_python)
    assert bytes(message) == raw


def test_non_str_key_error_names_the_path() -> None:
    with pytest.raises(MetaConversionError, match=r"\$\.outer\.inner: MetaMap keys must be str"):
        python_to_meta({"outer": {"inner": {1: "x"}}})


def test_unconvertible_value_error_names_the_path() -> None:
    with pytest.raises(MetaConversionError, match=r"\$\.a\[1\]: a object has no MetaValue form"):
        python_to_meta({"a": [1, object()]})


def test_custom_root_path() -> None:
    with pytest.raises(MetaConversionError, match=r"^\$\.metadata\.x: "):
        python_to_meta({"x": object()}, path="$.metadata")
