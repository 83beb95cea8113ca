from __future__ import annotations

from typing import ClassVar

import numpy as np
import pytest
import trio
from trio.testing import MockClock

from trio_rlmesh import EnvError, ModelError
from trio_rlmesh.protocol import env_v1, model_v1, space_to_spec, spaces_v1, spec_to_space
from trio_rlmesh.runtime import EnvStepResult, ModelPrediction, RuntimeEnv, RuntimeModel
from trio_rlmesh.spaces import Box, Dict, Discrete, Text, Tuple, decode_batch, encode_lanes
from trio_rlmesh.testing import (
    ConformanceError,
    FakeEnv,
    FakeModel,
    Fault,
    check_runtime_env,
    check_runtime_model,
)


@pytest.mark.parametrize(
    "env",
    [
        FakeEnv(),
        FakeEnv(num_envs=3, autoreset="next_step", episode_length=1),
        FakeEnv(num_envs=4, subset_step=True),
        FakeEnv(obs_dim=1, n_actions=5, episode_length=None),
    ],
)
async def test_fake_env_passes_its_conformance_check(env: FakeEnv) -> None:
    assert isinstance(env, RuntimeEnv)
    await check_runtime_env(env, env.contract, subset_step=env.subset_step)
    assert env.closed


@pytest.mark.parametrize(
    "model", [FakeModel(), FakeModel(chunk=4, fuses_predicts=True, wants_history=True)]
)
@pytest.mark.parametrize("lanes", [1, 3])
async def test_fake_model_passes_its_conformance_check(model: FakeModel, lanes: int) -> None:
    assert isinstance(model, RuntimeModel)
    await check_runtime_model(model, FakeEnv().contract, lanes=lanes)
    assert model.released
    assert model.evicted


async def test_env_check_catches_a_wrong_reward_width() -> None:
    class Wide(FakeEnv):
        async def step(self, request: env_v1.StepRequest) -> EnvStepResult:
            result = await super().step(request)
            result.response.rewards = [0.0] * 5
            return result

    env = Wide()
    with pytest.raises(ConformanceError, match="5 rewards for 1 lane"):
        await check_runtime_env(env, env.contract)


async def test_env_check_catches_a_hang(autojump_clock: MockClock) -> None:
    env = FakeEnv(faults=[Fault("env.step", kind="hang")])
    with pytest.raises(ConformanceError, match=r"env.step did not answer within 2s"):
        await check_runtime_env(env, env.contract, call_timeout=2)
    assert trio.current_time() == 2


async def test_checks_catch_a_call_that_yields_although_runs_inline_said_it_would_not(
    autojump_clock: MockClock,
) -> None:
    class Claims(FakeEnv):
        def runs_inline(self, method: str) -> bool:
            return method == "step"

    env = Claims(delays={"env.step": 0.1})  # a step that sleeps: it yields
    with pytest.raises(ConformanceError, match=r"env\.step yielded to the event loop"):
        await check_runtime_env(env, env.contract)
    await check_runtime_env(Claims(), Claims().contract)  # no delay: it does not yield

    class Lies(FakeModel):
        def runs_inline(self, method: str) -> bool:
            return True

    with pytest.raises(ConformanceError, match=r"model\.predict yielded"):
        await check_runtime_model(Lies(delays={"model.predict": 0.1}), FakeEnv().contract)


def test_the_checks_want_every_member_of_the_seam() -> None:
    class Partial:
        """Written from the old docs: reset, step and close only."""

        async def reset(self, request: env_v1.ResetRequest) -> None: ...
        async def step(self, request: env_v1.StepRequest) -> None: ...
        async def close(self, timeout: float) -> None: ...  # noqa: ASYNC109

    assert not isinstance(Partial(), RuntimeEnv)
    with pytest.raises(ConformanceError, match="render, runs_inline and enforces_deadlines"):
        trio.run(check_runtime_env, Partial(), FakeEnv().contract)


async def test_model_check_catches_a_context_that_is_not_echoed() -> None:
    with pytest.raises(ConformanceError, match="echo the request's AdapterContext"):
        await check_runtime_model(FakeModel(mismatch_context=True), FakeEnv().contract)


async def test_model_check_catches_wrong_frame_width() -> None:
    class Narrow(FakeModel):
        async def predict(self, request: model_v1.PredictRequest) -> ModelPrediction:
            prediction = await super().predict(request)
            prediction.response.actions[0].leaves = [b"\x00"]
            return prediction

    with pytest.raises(
        ConformanceError, match=r"frame 0 is not a 1-lane value of its space: .* got 1 bytes"
    ):
        await check_runtime_model(Narrow(), FakeEnv().contract)


async def test_fake_env_next_step_rolls_and_adopts_pushed_ids() -> None:
    env = FakeEnv(num_envs=2, autoreset="next_step", episode_length=[1, 2])
    await env.reset(env_v1.ResetRequest(episode_ids=["a", "b"]))
    action = spaces_v1.SpaceValue(leaves=encode_lanes(spec_to_space(env.action_space), [0, 0]))
    first = (await env.step(env_v1.StepRequest(action=action, episode_ids=["a", "b"]))).response
    assert [(m.episode_id, m.env_index) for m in first.completed_episodes] == [("a", 0)]
    assert first.terminated_mask == b"\x01\x00"
    second = (await env.step(env_v1.StepRequest(action=action, episode_ids=["c", "b"]))).response
    assert list(second.rewards) == [0.0, 1.0]
    assert [m.episode_id for m in second.completed_episodes] == ["b"]
    observations = decode_batch(spec_to_space(env.observation_space), second.observation.leaves, 2)
    assert observations[0].tolist() == [0.0, 0.0, 2.0, 0.0]


async def test_fake_env_echoes_interrupted_episodes() -> None:
    env = FakeEnv(episode_length=None)
    await env.reset(env_v1.ResetRequest(episode_ids=["a"], seeds=[3]))
    await env.reset(env_v1.ResetRequest(episode_ids=["b"]))
    action = spaces_v1.SpaceValue(leaves=encode_lanes(spec_to_space(env.action_space), [0]))
    response = (await env.step(env_v1.StepRequest(action=action))).response
    (echo,) = response.completed_episodes
    assert (echo.episode_id, echo.seed, echo.truncated, echo.terminated) == ("a", 3, True, False)


async def test_fake_faults_and_bad_actions() -> None:
    env = FakeEnv(faults=[Fault("env.reset", recoverable=True, message="flaky")])
    with pytest.raises(EnvError, match=r"flaky \(env.reset call 1\)") as info:
        await env.reset(env_v1.ResetRequest())
    assert info.value.recoverable
    await env.reset(env_v1.ResetRequest())
    with pytest.raises(EnvError, match="expected one int64 action leaf") as bad:
        await env.step(env_v1.StepRequest(action=spaces_v1.SpaceValue(leaves=[b"\x00"])))
    assert bad.value.code == "INVALID_ACTION"
    model = FakeModel(faults=[Fault("model.predict", at=2)])
    request = model_v1.PredictRequest(episode_info=[model_v1.EpisodeInfo(episode_id="x")])
    await model.predict(request)
    with pytest.raises(ModelError):
        await model.predict(request)


async def test_fake_model_policy_and_chunks() -> None:
    model = FakeModel(chunk=2, policy=lambda frame, lane: 10 * frame + lane)
    request = model_v1.PredictRequest(
        episode_info=[model_v1.EpisodeInfo(episode_id=i) for i in "ab"]
    )
    prediction = await model.predict(request)
    frames = [frame.leaves[0] for frame in prediction.response.actions]
    assert [int.from_bytes(f[i : i + 8], "little") for f in frames for i in (0, 8)] == [
        0,
        1,
        10,
        11,
    ]


async def test_the_env_check_steps_with_the_simplest_value_of_any_action_space() -> None:
    """The action the check sends when given none: zeros clipped into a Box's bounds, a
    Discrete's start, the shortest Text of its charset, in Dict and Tuple containers."""
    tree = Dict(
        {
            "a": Box.from_bounds(np.array([0.5, -2.0]), np.array([1.0, 2.0]), shape=(2,)),
            "b": Tuple([Discrete(3, start=-1), Text(4, min_length=2, charset="xy")]),
        }
    )

    class TreeActions(FakeEnv):
        sent: ClassVar[list[list[bytes]]] = []

        @property
        def action_space(self) -> spaces_v1.SpaceSpec:
            return space_to_spec(tree)

        async def step(self, request: env_v1.StepRequest) -> EnvStepResult:
            self.sent.append(request.action.leaves)
            lanes = len(request.env_indices) or self.num_envs
            plain = encode_lanes(spec_to_space(super().action_space), [0] * lanes)
            request.action = spaces_v1.SpaceValue(leaves=plain)
            return await super().step(request)

    env = TreeActions(num_envs=2)
    await check_runtime_env(env, env.contract)
    first = env.sent[0]
    value = decode_batch(tree, first, 2)
    a, (b, c) = value["a"], value["b"]
    assert a.tolist() == [[0.5, 0.0]] * 2
    assert b.tolist() == [-1, -1]
    assert list(c) == ["xx", "xx"]
