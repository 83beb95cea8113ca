from __future__ import annotations

import pytest

from trio_rlmesh import protocol
from trio_rlmesh.protocol import _constants


def test_wire_identity() -> None:
    assert protocol.PROTOCOL_GENERATION == "rlmesh-wire-v1"
    assert protocol.WORKFLOW_EDITION == "2026.06"
    assert protocol.SUPPORTED_WORKFLOW_EDITIONS == ("2026.06",)
    assert _constants.MAX_MESSAGE_SIZE == 268_435_456


@pytest.mark.parametrize(
    ("caps", "expected"),
    [({"subset_step": "true"}, True), ({"subset_step": "TRUE"}, False), ({}, False)],
)
def test_capabilities_need_the_exact_true_string(caps: dict[str, str], expected: bool) -> None:
    assert _constants.has_capability(caps, _constants.CAP_SUBSET_STEP) is expected


def test_edition_order_puts_suffixed_cohorts_above_the_sealed_edition() -> None:
    editions = ["2026.06-0.1.0-rc.5", "2026.06", "2025.12", "2026.06-dev.abc"]
    assert sorted(editions, key=_constants.edition_sort_key) == [
        "2025.12",
        "2026.06",
        "2026.06-0.1.0-rc.5",
        "2026.06-dev.abc",
    ]


def test_highest_shared_edition_trims_and_ignores_empty() -> None:
    assert _constants.highest_shared_edition([" 2026.06 ", ""], ["2026.06"]) == "2026.06"
    assert _constants.highest_shared_edition([""], [""]) is None
    assert _constants.highest_shared_edition(["2026.06"], ["2026.06-0.1.0-rc.5"]) is None
    assert _constants.highest_shared_edition() is None
