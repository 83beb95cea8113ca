"""The golden byte vectors of wire spec §17: each message built here encodes to exactly the
reference (prost) bytes, and parses back to an equal message."""

from __future__ import annotations

import betterproto2
import pytest

from trio_rlmesh.protocol import core_v1, env_v1, model_v1, space_to_spec, spaces_v1, spec_to_space
from trio_rlmesh.spaces import Box, DType

SPACE_VALUE = spaces_v1.SpaceValue(leaves=[b"\x01\x02\x03", b"\x04\x05"])
CONTEXT = model_v1.AdapterContext(session_id="sess-1", env_id="env-1", request_id="req-1")
BOX_SPEC = spaces_v1.SpaceSpec(
    shape=[2, 3],
    dtype=spaces_v1.DataType.FLOAT32,
    box=spaces_v1.BoxSpec(
        uniform=spaces_v1.UniformBounds(
            low=bytes.fromhex("000080bf"), high=bytes.fromhex("0000803f")
        )
    ),
)
META = spaces_v1.MetaMap(entries={"k": spaces_v1.MetaValue(integer=7)})
PREDICT = model_v1.PredictRequest(
    context=CONTEXT,
    observation=SPACE_VALUE,
    episode_info=[
        model_v1.EpisodeInfo(episode_id="ep-1", seed=7),
        model_v1.EpisodeInfo(episode_id="ep-2"),
    ],
)
EPISODE = env_v1.EpisodeMetadata(
    episode_id="ep-1",
    seed=7,
    env_index=3,
    step_count=42,
    cumulative_reward=1.25,
    terminated=True,
    truncated=True,
    start_timestamp_ns=1000,
    end_timestamp_ns=2000,
    final_info=META,
)
STEP_REQUEST = env_v1.StepRequest(
    action=SPACE_VALUE, timeout_ms=250, env_indices=[1], episode_ids=["ep-1", "ep-2"]
)

GOLDEN: list[tuple[str, betterproto2.Message, str]] = [
    ("SpaceValue", SPACE_VALUE, "0a030102030a020405"),
    ("SpaceSpec(Box)", BOX_SPEC, "0a020203100b520e120c0a04000080bf12040000803f"),
    (
        "PredictRequest",
        PREDICT,
        "0a160a06736573732d311205656e762d311a057265712d3112090a030102030a0204051a080a0465702d3110"
        "071a060a0465702d32",
    ),
    (
        "ResolveAdapterRequest",
        model_v1.ResolveAdapterRequest(
            context=CONTEXT,
            env_spec=core_v1.EnvSpec(
                id="env-spec-1", action_space=BOX_SPEC, observation_space=BOX_SPEC, metadata=META
            ),
            selected_workflow_edition="2026.06",
            execution_horizon=4,
        ),
        "0a160a06736573732d311205656e762d311a057265712d3112470a0a656e762d737065632d3112160a020203"
        "100b520e120c0a04000080bf12040000803f1a160a020203100b520e120c0a04000080bf12040000803f2209"
        "0a070a016b120208071a07323032362e30362004",
    ),
    (
        "model JoinRequest(predict)",
        model_v1.JoinRequest(predict=PREDICT, request_id="req-1"),
        "12350a160a06736573732d311205656e762d311a057265712d3112090a030102030a0204051a080a0465702d"
        "3110071a060a0465702d322a057265712d31",
    ),
    (
        "model JoinResponse(predict)",
        model_v1.JoinResponse(
            predict=model_v1.PredictResponse(context=CONTEXT, actions=[SPACE_VALUE]),
            request_id="req-1",
            endpoint_total_ns=1234,
        ),
        "12230a160a06736573732d311205656e762d311a057265712d3112090a030102030a0204052a057265712d31"
        "30d209",
    ),
    (
        "env StepRequest",
        STEP_REQUEST,
        "0a090a030102030a02040510fa011a0101220465702d31220465702d32",
    ),
    (
        "env StepResponse",
        env_v1.StepResponse(
            observation=SPACE_VALUE,
            rewards=[1.5, -0.5],
            terminated_mask=b"\x01\x00",
            truncated_mask=b"\x00\x01",
            infos=META,
            completed_episodes=[EPISODE],
            env_indices=[0, 1],
        ),
        "0a090a030102030a0204051210000000000000f83f000000000000e0bf1a020100220200012a090a070a016b"
        "12020807322a0a0465702d3110071803202a29000000000000f43f3001380140e80748d00f52090a070a016b"
        "120208073a020001",
    ),
    (
        "env JoinRequest(step)",
        env_v1.JoinRequest(step=STEP_REQUEST, request_id="req-1"),
        "121d0a090a030102030a02040510fa011a0101220465702d31220465702d322a057265712d31",
    ),
    (
        "core HandshakeRequest",
        core_v1.HandshakeRequest(
            protocol_generation="rlmesh-wire-v1",
            peer_info=core_v1.PeerInfo(
                component="rlmesh-model",
                package_version="0.1.0",
                language="rust",
                language_version="1.88.0",
                os="linux",
                os_version="6.1",
                arch="x86_64",
                framework_versions={"numpy": "1.26"},
                extra={"k": "v"},
            ),
            capabilities={"rlmesh.model.concurrent_predict.v1": "true"},
            supported_workflow_editions=["2026.06"],
        ),
        "0a0e726c6d6573682d776972652d7631124e0a0c726c6d6573682d6d6f64656c1205302e312e301a047275"
        "73742206312e38382e302a056c696e75783203362e313a067838365f3634420d0a056e756d70791204312e"
        "32367a060a016b1201761a2a0a22726c6d6573682e6d6f64656c2e636f6e63757272656e745f7072656469"
        "63742e76311204747275652207323032362e3036",
    ),
]


@pytest.mark.parametrize(("name", "message", "expected"), GOLDEN, ids=[g[0] for g in GOLDEN])
def test_golden_bytes(name: str, message: betterproto2.Message, expected: str) -> None:
    assert bytes(message).hex() == expected
    parsed = type(message).parse(bytes.fromhex(expected))
    assert parsed == message
    assert bytes(parsed).hex() == expected


def test_golden_box_spec_from_space_model() -> None:
    """The §17 Box SpaceSpec is what space_to_spec emits for that Box, and decodes back."""
    box = Box.from_bounds(-1.0, 1.0, shape=(2, 3), dtype=DType.FLOAT32)
    assert bytes(space_to_spec(box)).hex() == "0a020203100b520e120c0a04000080bf12040000803f"
    assert spec_to_space(BOX_SPEC) == box


def test_golden_seed_presence() -> None:
    """seed 0 is encoded (explicit presence) while an unset seed is not."""
    assert bytes(model_v1.EpisodeInfo(episode_id="e", seed=0)).hex() == "0a01651000"
    assert bytes(model_v1.EpisodeInfo(episode_id="e")).hex() == "0a0165"
    assert model_v1.EpisodeInfo.parse(bytes.fromhex("0a0165")).seed is None
