from __future__ import annotations

import re

import pytest

from trio_rlmesh.runtime._ids import deterministic_reset_seed, format_request_id, mint_uuid7

UUID7 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def test_uuid7_format_and_order() -> None:
    ids = [mint_uuid7() for _ in range(2000)]
    assert all(UUID7.match(i) for i in ids)
    assert all(len(i) == 36 and i[14] == "7" and i.count("-") == 4 for i in ids)
    assert len(set(ids)) == len(ids)
    # Minted in one process, ids sort in minting order (timestamp, then counter).
    assert ids == sorted(ids)


@pytest.mark.parametrize(
    ("base_seed", "session_id", "generation", "env_index", "expected"),
    [
        (1234, "session-1", 0, 0, 5827150907976557851),
        (1234, "session-1", 1, 0, 6673286045664998248),
        (0, "s", 0, 0, 7640836888766875734),
        (-1, "session-vec", 0, 3, 3251356440544801871),
        (42, "", 7, 1, 5596706874467500517),
    ],
)
def test_reset_seed_law_matches_reference_vectors(
    base_seed: int, session_id: str, generation: int, env_index: int, expected: int
) -> None:
    assert deterministic_reset_seed(base_seed, session_id, generation, env_index) == expected


def test_reset_seed_is_never_negative() -> None:
    for base in range(-50, 50):
        assert 0 <= deterministic_reset_seed(base, "x", base & 3, 2) < 2**63


def test_request_ids_are_env_scoped_and_zero_padded() -> None:
    assert format_request_id("test-env", "reset_observation", 1) == (
        "test-env:reset_observation:000001"
    )
    assert format_request_id("env-a", "reset_adapter", 1) != format_request_id(
        "env-b", "reset_adapter", 1
    )
    assert format_request_id("e", "step_observation", 1234567) == "e:step_observation:1234567"
