"""The in-process adapters' ``runs_inline``: a call it announces returns without yielding.

The driver skips its cancel scope for such a call, so the promise must hold: each test
drives the announced call by hand and fails if it yields once.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, TypeVar

import numpy as np
import pytest
import trio
from trio.testing import MockClock

from tests.model.helpers import (
    BOX_ROUTE,
    DISCRETE_ROUTE,
    predict_request,
    resolve_request,
)
from trio_rlmesh import EnvError, ModelError
from trio_rlmesh.model import Model, RouteContract, as_handler
from trio_rlmesh.protocol import env_v1, spaces_v1
from trio_rlmesh.runtime._interfaces import EnvStepResult
from trio_rlmesh.spaces import encode_batch
from trio_rlmesh.transports.inprocess import GymEnvRuntimeEnv, ModelHandlerRuntimeModel

from .test_gym_env import Countdown

_T = TypeVar("_T")


def at_once(call: Awaitable[_T]) -> _T:
    """The answer of ``call``, which must come without yielding to the event loop."""
    steps = call.__await__()
    try:
        steps.send(None)
    except StopIteration as done:
        result: _T = done.value
        return result
    raise AssertionError("the call yielded")


def _step(env: GymEnvRuntimeEnv, action: int, episode: str = "ep") -> env_v1.StepRequest:
    leaves = encode_batch(env.info.action_space, np.array([action]), 1)
    return env_v1.StepRequest(action=spaces_v1.SpaceValue(leaves=leaves), episode_ids=[episode])


async def test_an_inline_env_resets_and_steps_without_yielding() -> None:
    env = GymEnvRuntimeEnv(Countdown(), user_code="inline")
    assert env.runs_inline("reset")
    assert env.runs_inline("step")
    at_once(env.reset(env_v1.ResetRequest(seeds=[3], episode_ids=["ep"])))
    ended = []
    for _ in range(3):  # the third step ends the episode
        ended += at_once(env.step(_step(env, 1))).response.completed_episodes
    assert len(ended) == 1
    bad = _step(env, 1, "ep2")
    assert bad.action is not None
    bad.action.leaves = [b"\x05" + b"\x00" * 7]  # Discrete(2) does not hold 5
    with pytest.raises(EnvError) as info:
        at_once(env.step(bad))
    assert info.value.code == "INVALID_ACTION"


async def test_an_inline_lane_env_steps_its_lanes_one_after_the_other_without_yielding() -> None:
    env = GymEnvRuntimeEnv([Countdown(), Countdown()], user_code="inline")
    assert env.runs_inline("reset")
    reset = at_once(env.reset(env_v1.ResetRequest(episode_ids=["a", "b"])))
    assert reset.response.observation is not None


async def test_an_env_says_its_calls_may_yield_in_thread_mode_when_closed_or_replaced() -> None:
    # The default mode runs the env on its worker thread.
    threaded = GymEnvRuntimeEnv(Countdown())
    assert threaded.user_code == "thread"
    assert not threaded.runs_inline("reset")
    assert not threaded.runs_inline("step")

    closed = GymEnvRuntimeEnv(Countdown(), user_code="inline")
    await closed.close(1.0)
    assert not closed.runs_inline("reset")

    class Custom(GymEnvRuntimeEnv):
        async def step(self, request: env_v1.StepRequest) -> EnvStepResult:
            return await super().step(request)

    custom = Custom(Countdown(), user_code="inline")
    assert not custom.runs_inline("step")
    assert custom.runs_inline("reset")
    assert not custom.runs_inline("render")

    patched = GymEnvRuntimeEnv(Countdown(), user_code="inline")
    patched.reset = patched.reset  # type: ignore[method-assign]
    assert not patched.runs_inline("reset")


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


async def test_an_inline_model_predicts_without_yielding() -> None:
    model = await resolved(Halve(), BOX_ROUTE, "env-1", user_code="inline")
    request = predict_request("env-1", [4.0])
    assert model.runs_inline("predict")
    answer = at_once(model.predict(request))
    assert answer.response.context is request.context
    assert answer.timings.held_episodes == 0
    assert answer.timings.adapter_ns is not None
    failing = await resolved(
        Picks(RuntimeError("boom")), DISCRETE_ROUTE, "env-7", user_code="inline"
    )
    with pytest.raises(ModelError) as info:
        at_once(failing.predict(predict_request("env-7", [1.0])))
    assert (info.value.lane, info.value.recoverable) == (0, False)


async def test_a_model_says_its_predict_may_yield_when_it_cannot_answer_at_once() -> None:
    # The default mode ("auto") starts the model on its worker thread.
    assert not (await resolved(Halve())).runs_inline("predict")
    threaded = await resolved(as_handler(Halve(), user_code="thread"))
    assert not threaded.runs_inline("predict")
    legacy = await resolved(as_handler(Halve(), offload=True))
    assert not legacy.runs_inline("predict")

    closed = await resolved(Halve(), user_code="inline")
    await closed.aclose()
    assert not closed.runs_inline("predict")

    busy = await resolved(Halve(), user_code="inline")
    async with busy._host.lock:  # an eviction in progress
        assert not busy.runs_inline("predict")
    assert busy.runs_inline("predict")
    assert not busy.runs_inline("predict_group")

    class Custom(ModelHandlerRuntimeModel):
        async def predict(self, request: Any) -> Any:
            await trio.lowlevel.checkpoint()
            return await super().predict(request)

    custom = Custom(Halve(), user_code="inline")
    await custom.resolve(resolve_request(BOX_ROUTE, "e"))
    assert not custom.runs_inline("predict")


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


async def test_an_auto_model_predicts_at_once_while_its_predicts_are_quick(
    mock_clock: MockClock,
) -> None:
    model = await resolved(SlowAt(mock_clock, at=10, seconds=0.05))
    request = predict_request("e", [4.0])
    awaited = [await model.predict(request) for _ in range(8)]  # on the model's thread
    assert model.runs_inline("predict")  # quick ones made it inline
    assert at_once(model.predict(request)).response == awaited[0].response  # 9
    assert model.runs_inline("predict")
    at_once(model.predict(request))  # 10: inline, and slow
    assert not model.runs_inline("predict")  # so the next runs on the thread
    await model.aclose()
