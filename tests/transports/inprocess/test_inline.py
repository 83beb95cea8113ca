"""The in-process adapters' synchronous forms: same answers as the awaited calls."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import trio
from trio.testing import MockClock

from tests.model.helpers import (
    BOX_ROUTE,
    BROKEN,
    DISCRETE_ROUTE,
    broken_request,
    predict_request,
    resolve_request,
)
from trio_rlmesh import EnvError, ModelError
from trio_rlmesh.model import Model, RouteContract, as_handler
from trio_rlmesh.protocol import env_v1, spaces_v1
from trio_rlmesh.runtime._interfaces import EnvResetResult, EnvStepResult
from trio_rlmesh.spaces import encode_batch
from trio_rlmesh.transports.inprocess import GymEnvRuntimeEnv, ModelHandlerRuntimeModel

from .test_gym_env import Countdown


def _step(env: GymEnvRuntimeEnv, action: int, episode: str = "ep") -> env_v1.StepRequest:
    leaves = encode_batch(env.info.action_space, np.array([action]), 1)
    return env_v1.StepRequest(action=spaces_v1.SpaceValue(leaves=leaves), episode_ids=[episode])


def _same_answer(a: Any, b: Any) -> None:
    """Equal responses; timings differ by nature, so only their presence is compared."""
    ra, rb = a.response, b.response
    if hasattr(ra, "completed_episodes"):
        for meta in [*ra.completed_episodes, *rb.completed_episodes]:
            meta.start_timestamp_ns = meta.end_timestamp_ns = 0
    assert ra == rb
    assert (a.timings.total_ns is None) == (b.timings.total_ns is None)


async def test_env_inline_reset_and_step_match_the_awaited_calls() -> None:
    awaited = GymEnvRuntimeEnv(Countdown(), user_code="inline")
    inline = GymEnvRuntimeEnv(Countdown(), user_code="inline")
    reset = env_v1.ResetRequest(seeds=[3], episode_ids=["ep"])
    inline_reset = inline.reset_inline(reset)
    assert isinstance(inline_reset, EnvResetResult)
    _same_answer(await awaited.reset(reset), inline_reset)
    ended = []
    for _ in range(3):  # the third step ends the episode
        inline_step = inline.step_inline(_step(inline, 1))
        assert isinstance(inline_step, EnvStepResult)
        _same_answer(await awaited.step(_step(awaited, 1)), inline_step)
        ended += inline_step.response.completed_episodes
    assert len(ended) == 1


async def test_env_inline_errors_match_the_awaited_calls() -> None:
    env = GymEnvRuntimeEnv(Countdown(), user_code="inline")
    bad = _step(env, 1)
    assert bad.action is not None
    bad.action.leaves = [b"\x05" + b"\x00" * 7]  # Discrete(2) does not hold 5
    with pytest.raises(EnvError) as awaited:
        await env.step(bad)
    with pytest.raises(EnvError) as inline:
        env.step_inline(bad)
    assert inline.value.message == awaited.value.message
    assert inline.value.code == awaited.value.code == "INVALID_ACTION"

    class Broken(Countdown):
        def step(self, action: Any) -> Any:
            return (np.zeros(1, np.float32), 1.0)  # not a 5-tuple

    broken = GymEnvRuntimeEnv(Broken(), user_code="inline")
    await broken.reset(env_v1.ResetRequest(episode_ids=["ep"]))
    with pytest.raises(EnvError) as awaited:
        await broken.step(_step(broken, 1))
    with pytest.raises(EnvError) as inline:
        broken.step_inline(_step(broken, 1))
    assert inline.value.message == awaited.value.message
    # The served env's wording, from the one env host both paths share.
    assert "env.step failed: ValueError" in inline.value.message


async def test_env_inline_declines_in_thread_mode_when_closed_or_replaced() -> None:
    # The default mode runs the env on its worker thread: never synchronously.
    threaded = GymEnvRuntimeEnv(Countdown())
    assert threaded.user_code == "thread"
    assert threaded.reset_inline(env_v1.ResetRequest(episode_ids=["ep"])) is None
    assert threaded.step_inline(_step(threaded, 1)) is None

    closed = GymEnvRuntimeEnv(Countdown(), user_code="inline")
    await closed.close(1.0)
    assert closed.reset_inline(env_v1.ResetRequest(episode_ids=["ep"])) is None

    class Custom(GymEnvRuntimeEnv):
        async def step(self, request: env_v1.StepRequest) -> EnvStepResult:
            return await super().step(request)

    custom = Custom(Countdown(), user_code="inline")
    assert custom.step_inline(_step(custom, 1)) is None
    assert custom.reset_inline(env_v1.ResetRequest(episode_ids=["ep"])) is not None

    patched = GymEnvRuntimeEnv(Countdown(), user_code="inline")
    patched.reset = patched.reset  # type: ignore[method-assign]
    assert patched.reset_inline(env_v1.ResetRequest(episode_ids=["ep"])) is None


async def resolved(
    model: object, route: RouteContract = BOX_ROUTE, *env_ids: str, **options: Any
) -> ModelHandlerRuntimeModel:
    """The model in process, with a route resolved for each env id (``"e"`` by default)."""
    seat = ModelHandlerRuntimeModel(model, **options)
    for env_id in env_ids or ("e",):
        await seat.resolve(resolve_request(route, env_id))
    return seat


class Halve(Model):
    def predict(self, observation: Any) -> Any:
        return np.clip(observation / 10, -1, 1)


class Picks(Model):
    def __init__(self, action: Any) -> None:
        self.action = action

    def predict(self, observation: Any) -> Any:
        if isinstance(self.action, Exception):
            raise self.action
        return self.action


async def test_model_inline_predict_matches_predict() -> None:
    model = await resolved(Halve(), BOX_ROUTE, "env-1", user_code="inline")
    request = predict_request("env-1", [4.0])
    inline = model.predict_inline(request)
    assert inline is not None
    awaited = await model.predict(request)
    assert inline.response == awaited.response
    assert inline.response.context is request.context
    assert inline.timings.held_episodes == awaited.timings.held_episodes == 0
    assert inline.timings.adapter_ns is not None


@pytest.mark.parametrize(
    "action",
    [np.int64(7), np.float64(1.5), "left", np.zeros(2), RuntimeError("boom")],
    ids=["domain", "dtype", "text", "shape", "raise"],
)
async def test_model_inline_errors_match_predict(action: Any) -> None:
    model = await resolved(Picks(action), DISCRETE_ROUTE, "env-7", user_code="inline")
    request = predict_request("env-7", [1.0])
    with pytest.raises(ModelError) as awaited:
        await model.predict(request)
    with pytest.raises(ModelError) as inline:
        model.predict_inline(request)
    assert inline.value.message == awaited.value.message
    assert (inline.value.lane, inline.value.recoverable) == (0, False)


@pytest.mark.parametrize("broken", BROKEN)
async def test_model_inline_refuses_a_bad_request_as_predict_does(broken: str) -> None:
    model = await resolved(Halve(), BOX_ROUTE, "env-3", user_code="inline")
    request = broken_request("env-3", broken)
    with pytest.raises(ModelError) as awaited:
        await model.predict(request)
    with pytest.raises(ModelError) as inline:
        model.predict_inline(request)
    assert inline.value.message == awaited.value.message
    assert "env-3" in inline.value.message
    assert (inline.value.operation, inline.value.recoverable) == ("model.predict", False)


async def test_model_inline_declines_when_it_cannot_answer_synchronously() -> None:
    request = predict_request("e", [1.0])
    # The default mode ("auto") starts the model on its worker thread: not synchronously.
    assert (await resolved(Halve())).predict_inline(request) is None
    threaded = await resolved(as_handler(Halve(), user_code="thread"))
    assert threaded.predict_inline(request) is None
    legacy = await resolved(as_handler(Halve(), offload=True))
    assert legacy.predict_inline(request) is None

    closed = await resolved(Halve(), user_code="inline")
    await closed.aclose()
    assert closed.predict_inline(request) is None

    busy = await resolved(Halve(), user_code="inline")
    async with busy._host.lock:  # an eviction in progress
        assert busy.predict_inline(request) is None
    assert busy.predict_inline(request) is not None

    class Custom(ModelHandlerRuntimeModel):
        async def predict(self, request: Any) -> Any:
            await trio.lowlevel.checkpoint()
            return await super().predict(request)

    custom = Custom(Halve(), user_code="inline")
    await custom.resolve(resolve_request(BOX_ROUTE, "e"))
    assert custom.predict_inline(request) is None


class SlowAt(Model):
    """Halves; predict ``at`` (1-based) takes ``seconds`` of the run's MockClock."""

    def __init__(self, clock: MockClock, at: int, seconds: float) -> None:
        self.clock, self.at, self.seconds = clock, at, seconds
        self.calls = 0

    def predict(self, observation: Any) -> Any:
        self.calls += 1
        if self.calls == self.at:
            self.clock.jump(self.seconds)
        return np.clip(observation / 10, -1, 1)


async def test_model_inline_answers_in_auto_mode_while_predicts_are_quick(
    mock_clock: MockClock,
) -> None:
    model = await resolved(SlowAt(mock_clock, at=10, seconds=0.05))
    request = predict_request("e", [4.0])
    awaited = [await model.predict(request) for _ in range(8)]  # on the model's thread
    inline = model.predict_inline(request)  # 9: quick ones made it inline
    assert inline is not None
    assert inline.response == awaited[0].response
    assert model.predict_inline(request) is not None  # 10: inline, and slow
    assert model.predict_inline(request) is None  # so the next runs on the thread
    await model.aclose()
