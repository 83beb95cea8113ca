from __future__ import annotations

import string
from typing import Any

import numpy as np
import pytest

from trio_rlmesh import SpaceError
from trio_rlmesh.spaces import (
    Box,
    Dict,
    Discrete,
    DType,
    MultiBinary,
    MultiDiscrete,
    Space,
    Text,
    Tuple,
    from_gymnasium,
    to_gymnasium,
)

from .catalogue import CATALOGUE

gym = pytest.importorskip("gymnasium")
spaces = gym.spaces


def _canonical(space: Space) -> bool:
    """Whether ``space`` is what a Python peer emits (Discrete/MultiDiscrete INT64, ...)."""
    if isinstance(space, Dict):
        return all(_canonical(child) for child in space.values())
    if isinstance(space, Tuple):
        return all(_canonical(child) for child in space)
    if isinstance(space, Discrete | MultiDiscrete):
        return space.dtype is DType.INT64
    if isinstance(space, MultiBinary):
        return space.dtype is DType.UINT8
    return True


# gymnasium stores nvec in the space dtype, so nvec itself must fit (ours: only nvec - 1).
NOT_IN_GYMNASIUM = MultiDiscrete([2, 256], DType.UINT8)


@pytest.mark.parametrize("space", CATALOGUE)
def test_catalogue_round_trips(space: Space) -> None:
    if space == NOT_IN_GYMNASIUM:
        with pytest.raises(SpaceError, match=r"^\$: gymnasium rejects this space"):
            to_gymnasium(space)
        return
    gym_space = to_gymnasium(space)
    ours = from_gymnasium(gym_space)
    # gym -> ours -> gym is always lossless for what to_gymnasium produced ...
    if _canonical(space):
        assert ours == space
        assert to_gymnasium(ours) == gym_space
    else:
        # ... except that, like the reference, integer-set spaces take the wire dtype a
        # Python peer emits.
        assert ours == from_gymnasium(to_gymnasium(ours))


GYM_SPACES = [
    pytest.param(spaces.Box(-1.0, 1.0, (2, 3), np.float32), id="box-f32"),
    pytest.param(spaces.Box(-np.inf, np.inf, (2,), np.float16), id="box-f16-unbounded"),
    pytest.param(
        spaces.Box(np.array([-np.inf, 0.0]), np.array([0.0, np.inf]), dtype=np.float64),
        id="box-f64-half-open",
    ),
    pytest.param(spaces.Box(0, 255, (4, 4, 3), np.uint8), id="box-u8"),
    pytest.param(spaces.Box(-np.inf, np.inf, (2,), np.int64), id="box-i64-limits"),
    pytest.param(spaces.Box(0, 2**64 - 1, (2,), np.uint64), id="box-u64"),
    pytest.param(spaces.Box(0, 1, (3,), np.bool_), id="box-bool"),
    pytest.param(spaces.Discrete(3, start=-1), id="discrete-start"),
    pytest.param(spaces.MultiBinary(5), id="multibinary"),
    pytest.param(spaces.MultiBinary([2, 3]), id="multibinary-2d"),
    pytest.param(spaces.MultiDiscrete([3, 4]), id="multidiscrete"),
    pytest.param(spaces.MultiDiscrete(np.array([[2, 3], [4, 5]])), id="multidiscrete-2d"),
    pytest.param(spaces.Text(8), id="text-default"),
    pytest.param(spaces.Text(5, min_length=2, charset=string.digits), id="text-digits"),
    pytest.param(
        spaces.Dict(
            {"z": spaces.Discrete(2), "a": spaces.Text(3), "m": spaces.MultiBinary(2)},
            sort_keys=False,
        ),
        id="dict-unsorted",
    ),
    pytest.param(
        spaces.Tuple([spaces.Discrete(2), spaces.Dict({"x": spaces.Tuple([spaces.Discrete(3)])})]),
        id="tuple-nested",
    ),
    pytest.param(spaces.Dict({}), id="dict-empty"),
    pytest.param(spaces.Tuple([]), id="tuple-empty"),
]


@pytest.mark.parametrize("gym_space", GYM_SPACES)
def test_gym_round_trips(gym_space: Any) -> None:
    ours = from_gymnasium(gym_space)
    back = to_gymnasium(ours)
    assert back == gym_space
    assert type(back) is type(gym_space)
    assert from_gymnasium(back) == ours


def test_box_keeps_dtype_and_bounds() -> None:
    low, high = np.array([-1.0, 0.0], np.float16), np.array([1.0, 5.0], np.float16)
    ours = from_gymnasium(spaces.Box(low, high, dtype=np.float16))
    assert ours == Box.from_bounds([-1.0, 0.0], [1.0, 5.0], None, DType.FLOAT16)
    back = to_gymnasium(ours)
    assert back.dtype == np.float16
    assert back.low.tolist() == [-1.0, 0.0]


def test_integer_set_spaces_take_python_wire_dtypes() -> None:
    assert from_gymnasium(spaces.Discrete(4, start=2, dtype=np.int32)) == Discrete(4, start=2)
    assert from_gymnasium(spaces.MultiDiscrete([2, 3], dtype=np.uint8)) == MultiDiscrete([2, 3])
    assert from_gymnasium(spaces.MultiBinary(3)) == MultiBinary((3,), DType.UINT8)


def test_text_charsets() -> None:
    assert from_gymnasium(spaces.Text(4)) == Text(4)
    assert from_gymnasium(spaces.Text(4, charset="cab")) == Text(4, charset="abc")
    assert from_gymnasium(spaces.Text(4, charset=frozenset("xy"))) == Text(4, charset="xy")
    assert to_gymnasium(Text(4)) == spaces.Text(4)
    assert to_gymnasium(Text(4, charset="ba")).character_set == frozenset("ab")
    with pytest.raises(SpaceError, match="empty charset"):
        from_gymnasium(spaces.Text(4, charset=""))


def test_dict_keeps_gym_key_order() -> None:
    gym_space = spaces.Dict({"b": spaces.Discrete(2), "a": spaces.Discrete(3)})  # sorted
    assert from_gymnasium(gym_space) == Dict({"a": Discrete(3), "b": Discrete(2)})
    unsorted = spaces.Dict([("b", spaces.Discrete(2)), ("a", spaces.Discrete(3))])
    assert from_gymnasium(unsorted) == Dict({"b": Discrete(2), "a": Discrete(3)})
    assert list(to_gymnasium(Dict({"b": Discrete(2), "a": Discrete(3)})).spaces) == ["b", "a"]


@pytest.mark.parametrize(
    ("child", "name"),
    [
        (spaces.Sequence(spaces.Discrete(2)), "Sequence"),
        (spaces.Graph(node_space=spaces.Discrete(2), edge_space=None), "Graph"),
        (spaces.OneOf([spaces.Discrete(2), spaces.Discrete(3)]), "OneOf"),
    ],
)
def test_unsupported_spaces_name_their_path(child: Any, name: str) -> None:
    gym_space = spaces.Dict({"obs": spaces.Tuple([spaces.Discrete(2), spaces.Discrete(3), child])})
    with pytest.raises(SpaceError) as info:
        from_gymnasium(gym_space)
    assert str(info.value) == f"$.obs[2]: gymnasium {name} cannot be expressed on rlmesh-wire-v1"
    assert info.value.path == "$.obs[2]"


def test_unknown_and_unexpressible_spaces() -> None:
    custom = type("Custom", (spaces.Space,), {})

    with pytest.raises(SpaceError, match=r"^\$\[0\]: Custom is not a gymnasium space"):
        from_gymnasium(spaces.Tuple([custom()]))
    with pytest.raises(SpaceError, match=r"^\$: gymnasium MultiDiscrete with a non-zero start"):
        from_gymnasium(spaces.MultiDiscrete([2, 3], start=[1, 0]))
    with pytest.raises(SpaceError, match="not a str"):
        from_gymnasium(spaces.Dict({1: spaces.Discrete(2)}))


def test_to_gymnasium_reports_rejected_spaces() -> None:
    with pytest.raises(SpaceError, match=r"^\$\.a: gymnasium rejects this space"):
        to_gymnasium(Dict({"a": Discrete(0)}))
