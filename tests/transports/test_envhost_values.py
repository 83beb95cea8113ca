"""The env host's value gate: actions in (decoded and checked), per the conformance policy."""

from __future__ import annotations

import numpy as np
import pytest

from trio_rlmesh.protocol import env_v1, spaces_v1
from trio_rlmesh.spaces import Box, Discrete, MultiDiscrete, Space, encode_batch
from trio_rlmesh.transports._envhost import WireError
from trio_rlmesh.transports._envhost._values import ValueGate

OBS = Box.from_bounds(-1.0, 1.0, shape=(2,))


def _action(space: Space, value: object, n: int) -> spaces_v1.SpaceValue:
    return spaces_v1.SpaceValue(leaves=encode_batch(space, value, n))


def _raw(dtype: str, values: list[int]) -> spaces_v1.SpaceValue:
    return spaces_v1.SpaceValue(leaves=[np.asarray(values, dtype=dtype).tobytes()])


@pytest.mark.parametrize("policy", ["warn", "strict", "off"])
@pytest.mark.parametrize(
    ("space", "good", "bad", "n"),
    [
        (Discrete(3), [0, 2, 1], _raw("<i8", [0, 3, 1]), 3),
        (Discrete(3, start=-1), [-1], _raw("<i8", [-2]), 1),
        (MultiDiscrete([2, 3]), [[1, 2], [0, 0]], _raw("<i8", [1, 2, 0, 3]), 2),
    ],
)
def test_integer_actions_outside_their_domain_are_refused_under_every_policy(
    space: Space, good: object, bad: spaces_v1.SpaceValue, n: int, policy: str
) -> None:
    gate = ValueGate(OBS, space, policy)  # type: ignore[arg-type]
    batch, warnings = gate.decode_actions(_action(space, good, n), n)
    assert np.asarray(batch).tolist() == good
    assert warnings == []
    with pytest.raises(WireError) as info:
        gate.decode_actions(bad, n)
    assert info.value.wire_code == env_v1.EnvErrorCode.INVALID_ACTION


def test_box_actions_are_still_checked_for_range_and_nan() -> None:
    space = Box.from_bounds(-1.0, 1.0, shape=(2,))
    gate = ValueGate(OBS, space, "warn")
    _, warnings = gate.decode_actions(_action(space, [[0.5, 2.0]], 1), 1)
    assert [w["path"] for w in warnings] == ["$"]
    with pytest.raises(WireError, match="NaN"):
        gate.decode_actions(_action(space, [[0.5, np.nan]], 1), 1)
    strict = ValueGate(OBS, space, "strict")
    with pytest.raises(WireError, match="out of range"):
        strict.decode_actions(_action(space, [[0.5, 2.0]], 1), 1)
