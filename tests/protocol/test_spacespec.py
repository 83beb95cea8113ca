"""SpaceSpec and EnvContract conversion (wire spec §7): emission, round trips, validation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.spaces.catalogue import catalogue_spaces
from trio_rlmesh import SpaceError, SpecError
from trio_rlmesh.protocol import (
    EnvContractInfo,
    core_v1,
    env_v1,
    make_env_contract,
    read_env_contract,
    space_to_spec,
    spaces_v1,
    spec_to_space,
)
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
)

CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "captures"

INF = np.inf

SPACES: list[Space] = [
    Box.from_bounds(-INF, INF, shape=(3,), dtype=DType.FLOAT32),
    Box.from_bounds(-INF, INF, shape=(2, 2), dtype=DType.FLOAT16),
    Box.from_bounds(0.0, INF, shape=(2,), dtype=DType.FLOAT64),
    Box.from_bounds(-1.0, 1.0, shape=(2, 3), dtype=DType.FLOAT32),
    Box.from_bounds([-1.0, -2.0], [1.0, 2.0], dtype=DType.FLOAT32),
    Box.from_bounds([0.0, -0.0], 1.0, dtype=DType.FLOAT32),
    Box.from_bounds(0, 255, shape=(4, 4, 3), dtype=DType.UINT8),
    Box.from_bounds([0, -5], [10, 5], dtype=DType.INT64),
    Box.from_bounds(-(2**63), 2**63 - 1, shape=(1,), dtype=DType.INT64),
    Box.from_bounds(0, 2**64 - 1, shape=(1,), dtype=DType.UINT64),
    Box.from_bounds(False, True, shape=(3,), dtype=DType.BOOL),
    Box.from_bounds(-3, 3, shape=(2,), dtype=DType.INT8),
    Discrete(2),
    Discrete(3, start=-1),
    Discrete(5, start=2, dtype=DType.INT32),
    Discrete(256, dtype=DType.UINT8),
    MultiBinary((5,)),
    MultiBinary((2, 3)),
    MultiBinary((1,), dtype=DType.BOOL),
    MultiDiscrete([2, 3, 4]),
    MultiDiscrete([[2, 3], [4, 5]]),
    MultiDiscrete([3, 3], dtype=DType.UINT8),
    Text(8),
    Text(4, min_length=2, charset="abc"),
    Dict({"zeta": Discrete(2), "alpha": Box.from_bounds(0.0, 1.0, shape=(1,))}),
    Dict({}),
    Tuple([]),
    Tuple([Discrete(4), Text(3), Tuple([MultiBinary((2,))])]),
    Dict(
        {
            "b": Box.from_bounds(-1.0, 1.0, shape=(2,)),
            "a": Tuple([Discrete(4), Dict({"y": Text(2), "x": MultiDiscrete([2])})]),
        }
    ),
]


@pytest.mark.parametrize("space", SPACES + catalogue_spaces(), ids=repr)
def test_round_trip(space: Space) -> None:
    spec = space_to_spec(space)
    assert spec_to_space(spec) == space
    wire = spaces_v1.SpaceSpec.parse(bytes(spec))
    assert spec_to_space(wire) == space
    assert bytes(space_to_spec(spec_to_space(wire))) == bytes(spec)


# --------------------------------------------------------------------------------------------
# Emission rules (§7.1, §7.2)


def _bounds_arm(space: Box) -> str:
    box = space_to_spec(space).box
    assert box is not None
    return next(arm for arm in ("unbounded", "uniform", "elementwise") if getattr(box, arm))


@pytest.mark.parametrize(
    ("space", "arm"),
    [
        (Box.from_bounds(-INF, INF, shape=(3,)), "unbounded"),
        (Box.from_bounds(-INF, 0.0, shape=(3,)), "uniform"),
        (Box.from_bounds(-1.0, 1.0, shape=(3,)), "uniform"),
        (Box.from_bounds([0.0, -0.0], 1.0), "elementwise"),
        (Box.from_bounds([-INF, -1.0], INF), "elementwise"),
        (Box.from_bounds(np.iinfo(np.int64).min, np.iinfo(np.int64).max, (2,), "int64"), "uniform"),
        (Box.from_bounds([0, 1], 5, dtype="int32"), "elementwise"),
        (Box.from_bounds(False, True, (2,), "bool"), "uniform"),
    ],
    ids=repr,
)
def test_box_bounds_arm(space: Box, arm: str) -> None:
    assert _bounds_arm(space) == arm


def test_box_emission_bytes() -> None:
    unbounded = space_to_spec(Box.from_bounds(-INF, INF, shape=(3,)))
    assert bytes(unbounded).hex() == "0a0103100b52020801"
    uniform_int = space_to_spec(Box.from_bounds(0, 255, shape=(2,), dtype=DType.UINT8))
    assert bytes(uniform_int).hex() == "0a01021002520812060a0100120" + "1ff"
    elementwise_bool = space_to_spec(Box.from_bounds([False, True], True, dtype=DType.BOOL))
    assert elementwise_bool.box is not None
    assert elementwise_bool.box.elementwise is not None
    assert elementwise_bool.box.elementwise.low == b"\x00\x01"
    assert elementwise_bool.box.elementwise.high == b"\x01\x01"
    half = space_to_spec(Box.from_bounds(-1.0, 1.0, shape=(1,), dtype=DType.FLOAT16))
    assert half.box is not None
    assert half.box.uniform is not None
    assert half.box.uniform.low == np.float16(-1.0).tobytes() == b"\x00\xbc"


def test_kind_conventions() -> None:
    discrete = space_to_spec(Discrete(3, start=-1))
    assert discrete.shape == []
    assert discrete.dtype == spaces_v1.DataType.INT64
    assert bytes(discrete).hex() == "10095a0d0803" + "10ff" + "ff" * 8 + "01"
    multi_binary = space_to_spec(MultiBinary((4,)))
    # The empty MultiBinarySpec arm must be on the wire (tag 12, length 0).
    assert bytes(multi_binary).hex() == "0a01041002" + "6200"
    multi_discrete = space_to_spec(MultiDiscrete([[2, 3], [4, 5]]))
    assert multi_discrete.shape == [2, 2]
    assert multi_discrete.multi_discrete is not None
    assert multi_discrete.multi_discrete.nvec == [2, 3, 4, 5]
    text = space_to_spec(Text(5, charset="xy"))
    assert text.shape == []
    assert text.dtype == spaces_v1.DataType.UINT8
    assert text.text == spaces_v1.TextSpec(min_length=1, max_length=5, charset="xy")
    tup = space_to_spec(Tuple([Discrete(2)]))
    assert tup.dtype == spaces_v1.DataType.UNSPECIFIED
    assert tup.shape == []


def test_dict_keys_keep_declared_order() -> None:
    spec = space_to_spec(Dict({"z": Discrete(2), "a": Discrete(3), "m": Text(1)}))
    assert spec.dict is not None
    assert spec.dict.keys == ["z", "a", "m"]
    assert [s.discrete.n if s.discrete else None for s in spec.dict.spaces] == [2, 3, None]
    decoded = spec_to_space(spec)
    assert isinstance(decoded, Dict)
    assert decoded.keys() == ("z", "a", "m")


def test_space_to_spec_rejects_non_space() -> None:
    with pytest.raises(TypeError, match="not a trio_rlmesh space"):
        space_to_spec(object())  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# Validation on decode (§7.3)

F32 = spaces_v1.DataType.FLOAT32
I64 = spaces_v1.DataType.INT64
U8 = spaces_v1.DataType.UINT8


def _uniform(low: bytes, high: bytes) -> spaces_v1.BoxSpec:
    return spaces_v1.BoxSpec(uniform=spaces_v1.UniformBounds(low=low, high=high))


ONE_F32 = np.float32(1.0).tobytes()
ZERO_F32 = np.float32(0.0).tobytes()
NAN_F32 = np.float32(np.nan).tobytes()


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (spaces_v1.SpaceSpec(shape=[1], dtype=spaces_v1.DataType(99)), r"\$: unknown DataType 99"),
        (spaces_v1.SpaceSpec(shape=[1], dtype=F32), r"\$: spec must be set"),
        (
            spaces_v1.SpaceSpec(dtype=F32, box=spaces_v1.BoxSpec(unbounded=True)),
            r"\$: Box shape must have rank >= 1",
        ),
        (
            spaces_v1.SpaceSpec(shape=[2, 0], dtype=F32, box=spaces_v1.BoxSpec(unbounded=True)),
            r"dims > 0",
        ),
        (
            spaces_v1.SpaceSpec(shape=[1], box=spaces_v1.BoxSpec(unbounded=True)),
            r"must not be UNSPECIFIED",
        ),
        (spaces_v1.SpaceSpec(shape=[1], dtype=F32, box=spaces_v1.BoxSpec()), r"bounds must be set"),
        (
            spaces_v1.SpaceSpec(shape=[1], dtype=F32, box=_uniform(b"\x00\x00", ONE_F32)),
            r"uniform low bounds must be 4 bytes",
        ),
        (
            spaces_v1.SpaceSpec(
                shape=[2],
                dtype=F32,
                box=spaces_v1.BoxSpec(
                    elementwise=spaces_v1.ElementwiseBounds(low=ZERO_F32 * 2, high=ONE_F32)
                ),
            ),
            r"elementwise high bounds must be 8 bytes",
        ),
        (
            spaces_v1.SpaceSpec(shape=[1], dtype=F32, box=_uniform(NAN_F32, ONE_F32)),
            r"NaN",
        ),
        (
            spaces_v1.SpaceSpec(shape=[1], dtype=F32, box=_uniform(ONE_F32, ZERO_F32)),
            r"low must be <= high",
        ),
        (
            spaces_v1.SpaceSpec(shape=[1], dtype=I64, discrete=spaces_v1.DiscreteSpec(n=2)),
            r"Discrete spec must have an empty shape",
        ),
        (
            spaces_v1.SpaceSpec(dtype=F32, discrete=spaces_v1.DiscreteSpec(n=2)),
            r"Discrete dtype must be INT64, INT32 or UINT8",
        ),
        (spaces_v1.SpaceSpec(dtype=I64, discrete=spaces_v1.DiscreteSpec(n=0)), r"n must be > 0"),
        (
            spaces_v1.SpaceSpec(dtype=U8, discrete=spaces_v1.DiscreteSpec(n=2, start=255)),
            r"does not fit dtype UINT8",
        ),
        (
            spaces_v1.SpaceSpec(
                shape=[2], dtype=spaces_v1.DataType.UINT16, multi_binary=spaces_v1.MultiBinarySpec()
            ),
            r"one byte wide",
        ),
        (
            spaces_v1.SpaceSpec(dtype=U8, multi_binary=spaces_v1.MultiBinarySpec()),
            r"rank >= 1",
        ),
        (
            spaces_v1.SpaceSpec(
                shape=[3], dtype=I64, multi_discrete=spaces_v1.MultiDiscreteSpec(nvec=[2, 2])
            ),
            r"nvec has 2 entries but shape \[3\] holds 3",
        ),
        (
            spaces_v1.SpaceSpec(
                shape=[2], dtype=I64, multi_discrete=spaces_v1.MultiDiscreteSpec(nvec=[2, 0])
            ),
            r"nvec must all be > 0",
        ),
        (
            spaces_v1.SpaceSpec(
                shape=[1], dtype=F32, multi_discrete=spaces_v1.MultiDiscreteSpec(nvec=[2])
            ),
            r"integer type",
        ),
        (
            spaces_v1.SpaceSpec(dtype=U8, text=spaces_v1.TextSpec(min_length=0, max_length=3)),
            r"0 < min_length <= max_length",
        ),
        (
            spaces_v1.SpaceSpec(dtype=U8, text=spaces_v1.TextSpec(min_length=4, max_length=3)),
            r"0 < min_length <= max_length",
        ),
        (
            spaces_v1.SpaceSpec(dtype=I64, text=spaces_v1.TextSpec(min_length=1, max_length=3)),
            r"Text spec dtype must be UINT8",
        ),
        (
            spaces_v1.SpaceSpec(dtype=U8, dict=spaces_v1.DictSpec()),
            r"Dict spec dtype must be UNSPECIFIED",
        ),
        (
            spaces_v1.SpaceSpec(shape=[1], tuple=spaces_v1.TupleSpec()),
            r"Tuple spec must have an empty shape",
        ),
        (
            spaces_v1.SpaceSpec(dict=spaces_v1.DictSpec(keys=["a", "b"], spaces=[])),
            r"2 keys but 0 spaces",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_invalid_spec_rejected(spec: spaces_v1.SpaceSpec, message: str) -> None:
    with pytest.raises(SpaceError, match=message):
        spec_to_space(spec)


def test_dict_key_rules() -> None:
    child = space_to_spec(Discrete(2))
    with pytest.raises(SpaceError, match="appears twice"):
        spec_to_space(
            spaces_v1.SpaceSpec(dict=spaces_v1.DictSpec(keys=["a", "a"], spaces=[child] * 2))
        )
    with pytest.raises(SpaceError, match="non-empty"):
        spec_to_space(spaces_v1.SpaceSpec(dict=spaces_v1.DictSpec(keys=[""], spaces=[child])))


def test_error_names_nested_path() -> None:
    bad = spaces_v1.SpaceSpec(dtype=U8, text=spaces_v1.TextSpec(min_length=0, max_length=1))
    spec = spaces_v1.SpaceSpec(
        dict=spaces_v1.DictSpec(
            keys=["obs"],
            spaces=[
                spaces_v1.SpaceSpec(
                    tuple=spaces_v1.TupleSpec(spaces=[space_to_spec(Discrete(2)), bad])
                )
            ],
        )
    )
    with pytest.raises(SpaceError) as info:
        spec_to_space(spec)
    assert info.value.path == "$.obs[1]"
    with pytest.raises(SpaceError) as info:
        spec_to_space(spec, path="$.observation_space")
    assert info.value.path == "$.observation_space.obs[1]"
    assert str(info.value).startswith("$.observation_space.obs[1]: ")
    # A wire-level problem deep inside is named at its own path too.
    unknown = spaces_v1.SpaceSpec(tuple=spaces_v1.TupleSpec(spaces=[spaces_v1.SpaceSpec()]))
    with pytest.raises(SpaceError, match=r"^\$\.act\[0\]: spec must be set"):
        spec_to_space(unknown, path="$.act")


def test_unbounded_integer_box_means_whole_dtype_range() -> None:
    spec = spaces_v1.SpaceSpec(
        shape=[2], dtype=spaces_v1.DataType.INT8, box=spaces_v1.BoxSpec(unbounded=False)
    )
    space = spec_to_space(spec)
    assert isinstance(space, Box)
    assert space.low.tolist() == [-128, -128]
    assert space.high.tolist() == [127, 127]


# --------------------------------------------------------------------------------------------
# EnvContract


def _contract_from_capture() -> core_v1.EnvContract:
    raw = bytes.fromhex((CAPTURES / "B_env_HandshakeResponse.hex").read_text().strip())
    contract = env_v1.HandshakeResponse.parse(raw).env_contract
    assert contract is not None
    return contract


def test_cartpole_contract_matches_real_server() -> None:
    gym = pytest.importorskip("gymnasium")
    env = gym.make("CartPole-v1")
    try:
        contract = make_env_contract(
            env.spec.id,
            from_gymnasium(env.observation_space),
            from_gymnasium(env.action_space),
            env.metadata,
            num_envs=1,
            render_mode=env.render_mode,
        )
    finally:
        env.close()
    # Equal as messages; the byte order of map entries may differ.
    assert contract == _contract_from_capture()


def test_read_env_contract_from_capture() -> None:
    info = read_env_contract(_contract_from_capture())
    assert info == EnvContractInfo(
        env_id="CartPole-v1",
        observation_space=info.observation_space,
        action_space=Discrete(2),
        metadata={"render_fps": 50, "render_modes": ["human", "rgb_array"]},
        num_envs=1,
        render_mode=None,
        autoreset=core_v1.AutoresetMode.DISABLED,
    )
    assert isinstance(info.observation_space, Box)
    assert info.observation_space.shape == (4,)


def test_contract_round_trip() -> None:
    obs = Dict({"pos": Box.from_bounds(-1.0, 1.0, shape=(2,)), "tag": Text(3)})
    contract = make_env_contract(
        "Custom-v0",
        obs,
        MultiDiscrete([3, 2]),
        {"autoreset_mode": "NextStep", "fps": 30},
        num_envs=4,
        render_mode="rgb_array",
        autoreset=core_v1.AutoresetMode.NEXT_STEP,
    )
    info = read_env_contract(core_v1.EnvContract.parse(bytes(contract)))
    assert info == EnvContractInfo(
        "Custom-v0",
        obs,
        MultiDiscrete([3, 2]),
        {"autoreset_mode": "NextStep", "fps": 30},
        4,
        "rgb_array",
        core_v1.AutoresetMode.NEXT_STEP,
    )


def test_contract_defaults_and_wire_zeroes() -> None:
    contract = make_env_contract("E", Discrete(2), Discrete(2))
    assert contract.spec is not None
    assert contract.spec.metadata is None
    contract.num_envs = 0
    contract.autoreset_mode = core_v1.AutoresetMode.UNSPECIFIED
    info = read_env_contract(contract)
    assert info.num_envs == 1
    assert info.autoreset is core_v1.AutoresetMode.DISABLED
    assert info.metadata == {}
    assert info.render_mode is None


def test_contract_rejections() -> None:
    contract = make_env_contract("E", Discrete(2), Discrete(2))
    contract.autoreset_mode = core_v1.AutoresetMode(7)
    with pytest.raises(SpecError, match="unknown autoreset mode 7"):
        read_env_contract(contract)
    with pytest.raises(SpecError, match="no spec"):
        read_env_contract(core_v1.EnvContract(num_envs=1))
    missing = make_env_contract("E", Discrete(2), Discrete(2))
    assert missing.spec is not None
    missing.spec.action_space = None
    with pytest.raises(SpaceError, match=r"^\$\.action_space: missing"):
        read_env_contract(missing)
    bad_obs = make_env_contract("E", Discrete(2), Discrete(2))
    assert bad_obs.spec is not None
    bad_obs.spec.observation_space = spaces_v1.SpaceSpec(
        dtype=I64, discrete=spaces_v1.DiscreteSpec(n=0)
    )
    with pytest.raises(SpaceError, match=r"^\$\.observation_space: Discrete n must be > 0"):
        read_env_contract(bad_obs)


def test_make_env_contract_validates() -> None:
    scalar_box = Box.from_bounds(0.0, 1.0)  # shape (): real clients reject it
    with pytest.raises(SpaceError, match=r"^\$\.observation_space: Box shape must have rank"):
        make_env_contract("E", scalar_box, Discrete(2))
    with pytest.raises(SpaceError, match=r"^\$\.action_space\.a: "):
        make_env_contract("E", Discrete(2), Dict({"a": Text(0)}))
    with pytest.raises(SpecError, match="num_envs"):
        make_env_contract("E", Discrete(2), Discrete(2), num_envs=0)
