"""Rust's float and string forms, which RLMesh's messages and ``explain()`` use.

The expected strings were printed by Rust (``{:?}`` and ``{}`` of an ``f64``).
"""

from __future__ import annotations

import pytest

from trio_rlmesh.adapters._fmt import debug_float, display_float, quoted, render_placement

FLOATS = [
    (1.0, "1.0", "1"),
    (0.5, "0.5", "0.5"),
    (1e-7, "1e-7", "0.0000001"),
    (1e-4, "0.0001", "0.0001"),
    (1.5e-5, "1.5e-5", "0.000015"),
    (1e16, "1e16", "10000000000000000"),
    (-1.0, "-1.0", "-1"),
    (-0.0, "-0.0", "-0"),
    (0.07999999821186066, "0.07999999821186066", "0.07999999821186066"),
    # Halfway between two shortest candidates: Rust takes the larger (Python the even).
    (0.247058868408203125, "0.24705886840820313", "0.24705886840820313"),
    (9007199254740993.0, "9007199254740992.0", "9007199254740992"),
    (float("inf"), "inf", "inf"),
    (float("-inf"), "-inf", "-inf"),
    (float("nan"), "NaN", "NaN"),
]


@pytest.mark.parametrize(("value", "debug", "display"), FLOATS)
def test_floats_print_as_rust_prints_them(value: float, debug: str, display: str) -> None:
    assert debug_float(value) == debug
    assert display_float(value) == display


def test_strings_quote_as_rust_debug_quotes_them() -> None:
    assert quoted('a"b\\c\n\t\x01é') == '"a\\"b\\\\c\\n\\t\\u{1}é"'


def test_placements_render_keys_and_indices() -> None:
    assert render_placement(()) == "<root>"
    assert render_placement(("a", 0, "b", 1)) == "a[0].b[1]"
    assert render_placement((2,)) == "[2]"
