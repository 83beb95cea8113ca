"""Tags travel in an env's contract: ``tag`` writes them, the handshake carries them (as a
protocol ``EnvContract``, its metadata a MetaMap), ``resolve_from_contract`` reads them."""

from __future__ import annotations

import types
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from trio_rlmesh import adapters as adapt
from trio_rlmesh.protocol import make_env_contract, read_env_contract
from trio_rlmesh.spaces import from_gymnasium


class Arm(gym.Env[Any, Any]):
    metadata = {"render_modes": []}  # noqa: RUF012 (gymnasium's own class attribute)
    observation_space = spaces.Dict(
        {
            "pos": spaces.Box(-1, 1, (3,), np.float32),
            "quat": spaces.Box(-1, 1, (4,), np.float32),
            "task": spaces.Text(16),
        }
    )
    action_space = spaces.Box(-1, 1, (4,), np.float32)


def tags() -> adapt.EnvTags:
    return adapt.EnvTags(
        {
            "pos": adapt.StateTag(adapt.EEF_POS),
            "quat": adapt.StateTag(adapt.EEF_ROT, encoding="quat_xyzw"),
            "task": adapt.TextTag(adapt.INSTRUCTION),
        },
        adapt.Action(
            adapt.Actuator(adapt.ACTION_DELTA_POS, 3), adapt.Actuator(adapt.ACTION_GRIPPER, 1)
        ),
    )


SPEC = adapt.ModelSpec(
    {
        "state": adapt.Concat(adapt.EEF_POS, adapt.State(adapt.EEF_ROT, encoding="rot6d")),
        "text": adapt.Text(adapt.INSTRUCTION),
    },
    adapt.Action(
        adapt.Actuator(adapt.ACTION_GRIPPER, 1), adapt.Actuator(adapt.ACTION_DELTA_POS, 3)
    ),
)

OBS = {
    "pos": np.array([0.1, 0.2, 0.3], np.float32),
    "quat": np.array([0.0, 0.0, 0.0, 1.0], np.float32),
    "task": "stack",
}


def _contract() -> Any:
    env = adapt.tag(Arm(), tags())
    return make_env_contract(
        "Arm-v0",
        from_gymnasium(env.observation_space),
        from_gymnasium(env.action_space),
        metadata=env.metadata,
    )


@pytest.mark.parametrize("decoded", [False, True], ids=["EnvContract", "EnvContractInfo"])
def test_a_contract_resolves_as_the_tags_do(decoded: bool) -> None:
    contract = _contract()
    if decoded:
        contract = read_env_contract(contract)
    adapter = adapt.resolve_from_contract(contract, SPEC)
    direct = adapt.resolve(tags(), Arm.observation_space, Arm.action_space, SPEC)
    assert adapter.explain() == direct.explain()
    payload = adapter.transform_obs(OBS)
    assert payload["state"].tolist() == direct.transform_obs(OBS)["state"].tolist()
    assert payload["text"] == "stack"
    action = adapter.transform_action(np.array([0.5, 1.0, 2.0, 3.0], np.float32))
    assert action.tolist() == [1.0, 2.0, 3.0, 0.5]


def test_an_untagged_contract_says_how_to_tag() -> None:
    contract = types.SimpleNamespace(
        metadata={}, observation_space=Arm.observation_space, action_space=Arm.action_space
    )
    with pytest.raises(adapt.AdapterResolutionError, match=r"no adapter tags under .*tag\("):
        adapt.resolve_from_contract(contract, SPEC)


def test_a_peer_tag_of_an_unknown_kind_is_ignored_unless_needed() -> None:
    env = adapt.tag(Arm(), tags())
    document = dict(env.metadata[adapt.ENV_METADATA_KEY])
    observation = dict(document["observation"])
    observation["task"] = {"type": "audio", "role": "audio/mic"}  # a kind from a newer peer
    document["observation"] = observation
    contract = types.SimpleNamespace(
        metadata={adapt.ENV_METADATA_KEY: document},
        observation_space=Arm.observation_space,
        action_space=Arm.action_space,
    )
    state_only = adapt.ModelSpec({"state": adapt.Concat(adapt.EEF_POS)}, SPEC.output)
    explained = adapt.resolve_from_contract(contract, state_only).explain()
    assert "concat(pos)" in explained
    assert 'unrecognized kind "audio"; ignored (no model input requires it)' in explained
    with pytest.raises(adapt.AdapterResolutionError, match="text/instruction"):
        adapt.resolve_from_contract(contract, SPEC)
