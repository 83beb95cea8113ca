"""Apply on small hand-made pairings: what the payload and the env action are made of."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces

from trio_rlmesh import adapters as adapt
from trio_rlmesh.adapters._errors import ApplyError


def _passthrough() -> adapt.Adapter:
    """A pairing whose state, image and action all pass through unchanged."""
    action = adapt.Action(adapt.Actuator(adapt.ACTION_JOINT_POS, 2))
    tags = adapt.EnvTags(
        {"q": adapt.StateTag(adapt.JOINT_POS), "cam": adapt.ImageTag(adapt.IMAGE_PRIMARY)},
        action,
    )
    spec = adapt.ModelSpec(
        {"q": adapt.State(adapt.JOINT_POS), "i": adapt.Image(adapt.IMAGE_PRIMARY)}, action
    )
    observation = spaces.Dict(
        {
            "q": spaces.Box(-1, 1, (2,), np.float32),
            "cam": spaces.Box(0, 255, (4, 4, 3), np.uint8),
        }
    )
    return adapt.resolve(tags, observation, spaces.Box(-1, 1, (2,), np.float32), spec)


def test_payload_and_action_never_alias_their_inputs() -> None:
    # An env may write its next observation into the same buffers, and a model may reuse its
    # output array: what the adapter returned must not change under them.
    adapter = _passthrough()
    obs = {"q": np.zeros(2, np.float32), "cam": np.zeros((4, 4, 3), np.uint8)}
    payload = adapter.transform_obs(obs)
    out = np.zeros(2, np.float32)
    action = adapter.transform_action(out)
    obs["q"][:] = 1.0
    obs["cam"][:] = 255
    out[:] = 1.0
    assert payload["q"].tolist() == [0.0, 0.0]
    assert int(payload["i"].max()) == 0
    assert action.tolist() == [0.0, 0.0]


def test_float64_and_integer_observations_read_as_float32() -> None:
    adapter = _passthrough()
    cam = np.zeros((4, 4, 3), np.uint8)
    wide = adapter.transform_obs({"q": np.array([0.1, 1e-40]), "cam": cam})["q"]
    assert wide.dtype == np.float32
    assert wide.tolist() == np.array([0.1, 1e-40], np.float32).tolist()
    whole = adapter.transform_obs({"q": np.array([2**24 + 1, -3], np.int64), "cam": cam})["q"]
    assert whole.tolist() == [float(np.float32(np.float64(2**24 + 1))), -3.0]


def test_clip_keeps_negative_zero_as_rlmesh_does() -> None:
    # RLMesh clamps with Rust's f32::clamp, which leaves -0.0 at a bound of 0.0 alone.
    tags = adapt.EnvTags(
        {"q": adapt.StateTag(adapt.JOINT_POS)},
        adapt.Action(adapt.Actuator(adapt.ACTION_JOINT_POS, 2), clip=(0.0, 1.0)),
    )
    spec = adapt.ModelSpec(
        {"q": adapt.Concat(adapt.JOINT_POS, clip=(0.0, 1.0))},
        adapt.Action(adapt.Actuator(adapt.ACTION_JOINT_POS, 2)),
    )
    adapter = adapt.resolve(
        tags,
        spaces.Dict({"q": spaces.Box(-1, 1, (2,), np.float32)}),
        spaces.Box(-1, 1, (2,), np.float32),
        spec,
    )
    values = np.array([-0.0, 2.0], np.float32)
    assert np.signbit(adapter.transform_obs({"q": values})["q"]).tolist() == [True, False]
    assert adapter.transform_obs({"q": values})["q"].tolist() == [0.0, 1.0]
    assert np.signbit(adapter.transform_action(values)).tolist() == [True, False]


def test_observe_takes_rlmesh_s_bridge_keyword() -> None:
    # RLMesh's Adapter.observe(raw_obs, *, input_bridge=None): code passing it runs here too.
    adapter = adapt.resolve(
        adapt.EnvTags(
            {"q": adapt.StateTag(adapt.JOINT_POS)},
            adapt.Action(adapt.Actuator(adapt.ACTION_JOINT_POS, 2)),
        ),
        spaces.Dict({"q": spaces.Box(-1, 1, (2,), np.float32)}),
        spaces.Box(-1, 1, (2,), np.float32),
        adapt.ModelSpec(
            {"q": adapt.State(adapt.JOINT_POS), "p": adapt.Previous(adapt.ACTION_JOINT_POS)},
            adapt.Action(adapt.Actuator(adapt.ACTION_JOINT_POS, 2)),
        ),
    )
    adapter.transform_obs({"q": np.zeros(2, np.float32)})
    adapter.transform_action(np.array([0.5, 0.25], np.float32))
    adapter.observe({"q": np.zeros(2, np.float32)}, input_bridge=None)
    adapter.transform_action(np.array([1.0, 1.0], np.float32))
    assert adapter.transform_obs({"q": np.zeros(2, np.float32)})["p"].tolist() == [1.0, 1.0]


def test_a_missing_entry_or_key_lists_what_is_there_as_rlmesh_does() -> None:
    # The messages are RLMesh 0.1.0's for the same pairing and observations.
    action = adapt.Action(adapt.Actuator(adapt.ACTION_JOINT_POS, 2))
    tags = adapt.EnvTags(
        {"arm": {"q": adapt.StateTag(adapt.JOINT_POS)}, "cam": adapt.ImageTag(adapt.IMAGE_PRIMARY)},
        action,
    )
    spec = adapt.ModelSpec(
        {"q": adapt.State(adapt.JOINT_POS), "i": adapt.Image(adapt.IMAGE_PRIMARY)}, action
    )
    observation = spaces.Dict(
        {
            "arm": spaces.Dict({"q": spaces.Box(-1, 1, (2,), np.float32)}),
            "cam": spaces.Box(0, 255, (4, 4, 3), np.uint8),
        }
    )
    adapter = adapt.resolve(tags, observation, spaces.Box(-1, 1, (2,), np.float32), spec)
    cam = np.zeros((4, 4, 3), np.uint8)
    with pytest.raises(ApplyError) as entry:
        adapter.transform_obs({"cam": cam, "other": 1})
    assert str(entry.value) == (
        "observation is missing entry 'arm' for source 'arm.q'; available: ['cam']"
    )
    with pytest.raises(ApplyError) as key:
        adapter.transform_obs({"arm": {"p": np.zeros(2, np.float32), "r": 0}, "cam": cam})
    assert str(key.value) == "observation path 'q' is missing key 'q'; available: ['p', 'r']"
