"""RLMesh's adapter conformance vectors, v1 (vendored under ``conformance/v1``): every case.

Where ``rlmesh==0.1.0`` itself disagrees with a vector the wheel wins, and the case's
expectation is overridden below with the wheel's answer (``docs/adapters.md`` lists them).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from trio_rlmesh import adapters as adapt

CASES = Path(__file__).parent / "conformance" / "v1" / "cases"

# The wheel no longer registers "proprio/eef_pos_2", so filling it draws an ad-hoc-role note.
WHEEL_DESCRIBE = {
    "resolve_rot6d_with_optional_zero_fill": (
        '\ndropped:\n  model declares ad-hoc role "proprio/eef_pos_2" that this env does not: '
        "an ad-hoc role matches only on the exact string, so it resolves to a fill here -- use "
        'a registered role, or the "x/" namespace to mark it intentionally non-standard'
    )
}


def _case_names() -> list[str]:
    return sorted(path.stem for path in CASES.glob("*.json"))


def load(name: str) -> dict[str, Any]:
    return json.loads((CASES / f"{name}.json").read_text())  # type: ignore[no-any-return]


def decode(value: dict[str, Any]) -> Any:
    """A vector's encoded value as a Python/numpy value."""
    kind = value["kind"]
    if kind == "array":
        return np.array(value["data"], dtype=value["dtype"]).reshape(value["shape"])
    if kind == "map":
        return {key: decode(child) for key, child in value["data"].items()}
    if kind == "list":
        return [decode(item) if isinstance(item, dict) else item for item in value["data"]]
    return value["data"]


def assert_matches(got: Any, expected: dict[str, Any], atol: float) -> None:
    kind = expected["kind"]
    if kind == "array":
        want = decode(expected)
        assert isinstance(got, np.ndarray)
        assert got.dtype == want.dtype
        assert got.shape == want.shape
        np.testing.assert_allclose(
            got.astype(np.float64), want.astype(np.float64), atol=atol, rtol=0
        )
    elif kind == "map":
        assert isinstance(got, dict)
        assert sorted(got) == sorted(expected["data"])
        for key, child in expected["data"].items():
            assert_matches(got[key], child, atol)
    elif kind == "list":
        np.testing.assert_allclose(np.asarray(got, np.float64), expected["data"], atol=atol)
    else:
        assert got == expected["data"]


def resolve_case(case: dict[str, Any]) -> adapt.Adapter:
    return adapt.resolve(
        adapt.EnvTags.from_dict(case["env_tags"]),
        case["observation_space"],
        case["action_space"],
        adapt.ModelSpec.from_dict(case["model_spec"]),
    )


@pytest.mark.parametrize("name", _case_names())
def test_vector(name: str) -> None:
    case = load(name)
    kind = case["kind"]
    if kind == "serialization":
        spec_class = adapt.EnvTags if case["side"] == "env" else adapt.ModelSpec
        assert spec_class.from_dict(case["doc"]).to_dict() == case["doc"]
        return
    expect = case["expect"]
    if "error_contains" in expect:
        with pytest.raises(adapt.AdapterResolutionError) as caught:
            resolve_case(case)
        assert expect["error_contains"] in str(caught.value)
        return
    adapter = resolve_case(case)
    if kind == "resolve":
        assert adapter.explain() == expect["describe"] + WHEEL_DESCRIBE.get(name, "")
        return
    atol = expect.get("atol", 1e-6)
    assert_matches(adapter.transform_obs(decode(case["observation"])), expect["payload"], atol)
    assert_matches(adapter.transform_action(decode(case["model_output"])), expect["action"], atol)


def test_every_vector_is_vendored() -> None:
    """The 28 v1 cases (a vector is never deleted within v1)."""
    assert len(_case_names()) == 28
