from __future__ import annotations

from typing import Any

import attrs
import pytest

from trio_rlmesh import SpecError
from trio_rlmesh.protocol import core_v1
from trio_rlmesh.runtime import RuntimeLimits, RuntimeSessionSpec
from trio_rlmesh.runtime._spec import DEFAULT_MAX_EPISODE_STEPS, timeout_ms
from trio_rlmesh.testing import FakeEnv

NEXT_STEP = core_v1.AutoresetMode.NEXT_STEP
DISABLED = core_v1.AutoresetMode.DISABLED


def spec(mode: str = "disabled", num_envs: int = 1, **overrides: Any) -> RuntimeSessionSpec:
    return FakeEnv(num_envs=num_envs, autoreset=mode).session_spec(**overrides)  # type: ignore[arg-type]


def message(s: RuntimeSessionSpec) -> str:
    with pytest.raises(SpecError) as info:
        s.validate()
    return str(info.value)


def test_valid_specs_pass() -> None:
    spec().validate()
    spec("next_step", 4).validate()
    spec("next_step", 4, base_seed=3).validate()
    spec("disabled", 4, subset_step=True, episode_seeds=[1, 2, 3]).validate()
    spec(episode_seeds=[1, 2], max_episode_steps=5, trial_index_base=10).validate()


@pytest.mark.parametrize(
    ("field", "text"),
    [
        ("session_id", "runtime session_id must not be empty"),
        ("env_id", "runtime env_id must not be empty"),
        ("env_component_id", "runtime env_component_id must not be empty"),
        ("model_component_id", "runtime model_component_id must not be empty"),
    ],
)
def test_blank_identifiers(field: str, text: str) -> None:
    assert message(spec(**{field: "  "})) == text


def test_rule_order_identifiers_before_counts() -> None:
    assert message(spec(session_id="", num_envs=0)) == "runtime session_id must not be empty"
    assert message(spec(num_envs=0)) == "runtime num_envs must be greater than zero"


def test_missing_spaces() -> None:
    contract = FakeEnv().contract
    assert contract.spec is not None
    no_obs = core_v1.EnvContract(spec=core_v1.EnvSpec(action_space=contract.spec.action_space))
    no_act = core_v1.EnvContract(
        spec=core_v1.EnvSpec(observation_space=contract.spec.observation_space)
    )
    assert message(spec(env_contract=no_obs)) == "runtime env_contract is missing observation_space"
    assert message(spec(env_contract=no_act)) == "runtime env_contract is missing action_space"
    empty = spec(env_contract=core_v1.EnvContract())
    assert empty.observation_space is None
    assert empty.action_space is None


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        ({"max_episodes": 0}, "max_episodes must be greater than zero"),
        ({"max_episode_steps": 0}, "max_episode_steps must be greater than zero"),
        ({"max_episode_seconds": 0.0}, "max_episode_seconds must be greater than zero"),
        ({"max_episode_seconds": float("nan")}, "max_episode_seconds must be greater than zero"),
    ],
)
def test_positive_caps(overrides: dict[str, Any], needle: str) -> None:
    assert needle in message(spec(**overrides))


def test_an_infinite_time_cap_is_no_cap() -> None:
    capped = spec("next_step", 2, max_episode_seconds=float("inf"))
    assert capped.max_episode_seconds is None
    capped.validate()  # no cap: no rule about who owns resets


def test_vector_seeds_must_cover_whole_batches_before_autoreset_rule() -> None:
    assert "must be a multiple of num_envs (2)" in message(
        spec("next_step", 2, episode_seeds=[1, 2, 3])
    )
    assert "episode_seeds requires an env with autoreset disabled" in message(
        spec("next_step", 2, episode_seeds=[1, 2, 3, 4])
    )


def test_env_owned_resets_refuse_caps_and_trial_index() -> None:
    assert "max_episode_steps / max_episode_seconds require" in message(
        spec("next_step", 2, max_episode_steps=3)
    )
    assert "max_episode_steps / max_episode_seconds require" in message(
        spec("next_step", 2, max_episode_seconds=1.0)
    )
    assert "trial_index_base requires" in message(spec("next_step", 2, trial_index_base=0))


def test_lane_endpoints_own_per_lane_resets() -> None:
    # A lane endpoint consumes seeds one lane reset at a time: no whole-batch rule.
    lanes = spec("disabled", 3, subset_step=True, episode_seeds=[1, 2], max_episode_steps=9)
    lanes.validate()
    assert lanes.lanes_step_individually
    assert not spec("disabled", 1, subset_step=True).lanes_step_individually
    assert not spec("next_step", 3, subset_step=True).lanes_step_individually


def test_unknown_mode_with_seeds_fails_on_the_seed_rule() -> None:
    contract = attrs.evolve(spec()).env_contract
    contract = core_v1.EnvContract(spec=contract.spec, num_envs=1, autoreset_mode=9)
    assert "episode_seeds requires" in message(spec(env_contract=contract, episode_seeds=[1]))
    assert "unknown autoreset mode 9" in message(spec(env_contract=contract))


def test_edition_must_be_supported() -> None:
    text = message(spec(workflow_edition="2099.01"))
    assert "2099.01" in text
    assert "cannot drive" in text


def test_same_step_refused() -> None:
    assert "SAME_STEP" in message(spec("same_step"))


@pytest.mark.parametrize("mode", ["disabled", "unspecified"])
def test_vector_needs_next_step_or_lane_endpoint(mode: str) -> None:
    text = message(spec(mode, 4))
    assert "NEXT_STEP" in text
    assert "subset_step" in text


def test_limits_defaults_and_wire_milliseconds() -> None:
    limits = RuntimeLimits()
    assert (
        limits.env_reset_timeout,
        limits.env_step_timeout,
        limits.model_predict_timeout,
        limits.service_close_timeout,
        limits.telemetry_window,
    ) == (300.0, 300.0, 300.0, 5.0, 1.0)
    assert timeout_ms(300.0) == 300_000
    assert timeout_ms(None) == 0
    assert timeout_ms(0.0005) == 0
    with pytest.raises(SpecError, match="env_step_timeout"):
        RuntimeLimits(env_step_timeout=-1)


def test_step_cap_defaults_only_when_the_driver_owns_resets() -> None:
    assert spec().step_cap == DEFAULT_MAX_EPISODE_STEPS
    assert spec(max_episode_steps=7).step_cap == 7
    assert spec("next_step", 2).step_cap is None


def test_trial_index_needs_the_env_to_declare_it() -> None:
    assert FakeEnv(reset_options=["trial_index"]).session_spec().sends_trial_index
    assert not FakeEnv(reset_options=["other"]).session_spec().sends_trial_index
    assert not FakeEnv().session_spec().sends_trial_index
