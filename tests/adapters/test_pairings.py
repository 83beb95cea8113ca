"""Hand-written pairings against RLMesh 0.1.0's answers (``golden_pairings.json``).

Each pairing resolves to the same ``explain()`` text, advisories and history windows as the
wheel's, or fails with the same error; each step gives the same payload and env action
(images that were resampled within one uint8 step, everything else to float32 rounding).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from trio_rlmesh import adapters as adapt

from . import pairings

GOLDEN = pairings.load_golden()


def _close(got: Any, want: Any, atol: float, where: str) -> None:
    if isinstance(want, dict) and "dtype" in want:
        assert got["dtype"] == want["dtype"], where
        assert got["shape"] == want["shape"], where
        np.testing.assert_allclose(got["data"], want["data"], atol=atol, rtol=0, err_msg=where)
    elif isinstance(want, dict) and "map" in want:
        assert list(got["map"]) == list(want["map"]), where
        for key in want["map"]:
            _close(got["map"][key], want["map"][key], atol, f"{where}.{key}")
    elif isinstance(want, dict) and "list" in want:
        assert len(got["list"]) == len(want["list"]), where
        for index, (a, b) in enumerate(zip(got["list"], want["list"], strict=True)):
            _close(a, b, atol, f"{where}[{index}]")
    else:
        assert got == want, where


def test_every_pairing_has_a_golden() -> None:
    assert sorted(GOLDEN) == sorted(pairings.PAIRINGS)


@pytest.mark.parametrize("name", sorted(pairings.PAIRINGS))
def test_pairing_answers_as_rlmesh(name: str) -> None:
    want = GOLDEN[name]
    got = pairings.run(adapt, name)
    if "error" in want:
        assert got.get("error", "").replace("SpecError", "ValueError") == want["error"]
        return
    assert "error" not in got, got.get("error")
    assert got["explain"] == want["explain"]
    assert got["advisories"] == want["advisories"]
    assert got["history_keys"] == want["history_keys"]
    assert got["history_windows"] == want["history_windows"]
    resampled = "resize" in want["explain"] or "zoom" in want["explain"]
    for index, (step, expected) in enumerate(zip(got["steps"], want["steps"], strict=True)):
        assert sorted(step) == sorted(expected), f"step {index}"
        for key, value in expected.items():
            atol = 1.0 if resampled and key == "payload" else 1e-6
            _close(step[key], value, atol, f"{name} step {index} {key}")
