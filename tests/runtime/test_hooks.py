from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pytest
import trio
from trio.testing import MockClock

from trio_rlmesh import HookError, ProtocolError
from trio_rlmesh.runtime import (
    ActionReceived,
    EnvResetResult,
    ObservationEmitted,
    RuntimeHooks,
    StepCompleted,
)
from trio_rlmesh.runtime._hooks import HookDispatcher
from trio_rlmesh.testing import FakeEnv, FakeModel
from trio_rlmesh.testing._fakes import decode_observation

from ._support import Recorder, run


async def test_firing_order_for_one_two_step_episode(autojump_clock: MockClock) -> None:
    hooks = Recorder()
    await run(FakeEnv(episode_length=2), FakeModel(), hooks, limits={"telemetry_window": None})
    assert hooks.names() == [
        "session_started",
        "episode_started",
        "transform_observation",
        "observation_emitted",
        "transform_action",
        "action_received",
        "step_completed",
        "transform_observation",
        "observation_emitted",
        "transform_action",
        "action_received",
        "step_completed",
        "episode_completed",
        "session_ended",
        "on_telemetry",
    ]
    observed = hooks.of("observation_emitted")
    assert [(o.step, o.is_reset) for o in observed] == [(0, True), (1, False)]
    assert [a.step for a in hooks.of("action_received")] == [1, 2]
    assert [s.step for s in hooks.of("step_completed")] == [1, 2]
    (started,) = hooks.of("episode_started")
    assert (started.index, started.env_index, started.auto_reset) == (0, 0, False)
    (completed,) = hooks.of("episode_completed")
    assert completed.record.episode_id == started.episode_id
    assert hooks.of("on_telemetry")[0].horizon == "session"


async def test_failure_order_ends_with_telemetry_then_session_failed(
    autojump_clock: MockClock,
) -> None:
    hooks = Recorder()
    with pytest.raises(ProtocolError):
        await run(FakeEnv(), FakeModel(empty_actions=True), hooks)
    assert hooks.names()[-2:] == ["on_telemetry", "session_failed"]


async def test_payloads_are_numpy_batches_of_the_event_lanes(autojump_clock: MockClock) -> None:
    hooks = Recorder()
    env = FakeEnv(num_envs=2, autoreset="next_step", episode_length=2)
    await run(env, FakeModel(), hooks, max_episodes=2)
    first = hooks.of("observation_emitted")[0]
    assert first.env_indices == (0, 1)
    assert isinstance(first.observation, np.ndarray)
    assert first.observation.dtype == np.float32
    # FakeEnv rows: [episode step, lane, episodes started on the lane, 0].
    assert first.observation.tolist() == [[0, 0, 1, 0], [0, 1, 1, 0]]
    action = hooks.of("action_received")[0]
    assert isinstance(action.action, np.ndarray)
    assert (action.action.dtype, action.action.shape) == (np.dtype(np.int64), (2,))
    assert action.action.tolist() == list(env.actions[0][1])


class Shift(RuntimeHooks):
    async def transform_observation(self, event: ObservationEmitted) -> Any:
        return event.observation + 100


async def test_observations_carry_the_transformed_payload(autojump_clock: MockClock) -> None:
    emitted: list[Any] = []

    class Watch(Shift):
        async def observation_emitted(self, event: ObservationEmitted) -> None:
            emitted.append(event.observation)

    model = FakeModel()
    await run(FakeEnv(episode_length=2), model, Watch())
    assert [e.tolist() for e in emitted] == [[[100, 100, 101, 100]], [[101, 100, 101, 100]]]
    seen = [decode_observation(p.observation.leaves).tolist() for p in model.predicts]
    assert seen == [e.tolist() for e in emitted]


async def test_transform_action_replaces_what_the_env_gets(autojump_clock: MockClock) -> None:
    received: list[Any] = []

    class Flip(RuntimeHooks):
        async def transform_action(self, event: ActionReceived) -> Any:
            return 1 - event.action

        async def action_received(self, event: ActionReceived) -> None:
            received.append(event.action.tolist())

    env = FakeEnv(episode_length=3)
    await run(env, FakeModel(), Flip())  # FakeModel answers 0
    assert [a for _, (a,) in env.actions] == [1, 1, 1]
    assert received == [[1], [1], [1]]


async def test_a_transform_returning_what_the_space_cannot_hold_fails_the_run(
    autojump_clock: MockClock,
) -> None:
    class Wrong(RuntimeHooks):
        async def transform_observation(self, event: ObservationEmitted) -> Any:
            return np.zeros((1, 3), np.float32)  # the space is float32[4]

    env = FakeEnv()
    with pytest.raises(HookError, match="transform_observation returned a batch the") as info:
        await run(env, FakeModel(), Wrong(), close_env_on_end=True)
    assert info.value.operation == "hooks.transform_observation"
    assert info.value.__cause__ is not None
    assert env.closed


async def test_an_observation_that_does_not_decode_is_a_protocol_error(
    autojump_clock: MockClock,
) -> None:
    class Truncating(FakeEnv):
        async def reset(self, request: Any) -> EnvResetResult:
            result = await super().reset(request)
            leaves = result.response.observation.leaves
            leaves[0] = leaves[0][:-1]
            return result

    class Watch(RuntimeHooks):
        async def observation_emitted(self, event: ObservationEmitted) -> None:
            pass

    with pytest.raises(ProtocolError, match="env's observation does not decode") as info:
        await run(Truncating(), FakeModel(), Watch())
    assert info.value.operation == "env.reset"


async def test_a_failing_transform_fails_the_run_and_still_closes(
    autojump_clock: MockClock,
) -> None:
    class Bad(RuntimeHooks):
        async def transform_action(self, event: ActionReceived) -> Any:
            raise ValueError("nope")

    env, model = FakeEnv(), FakeModel()
    with pytest.raises(HookError, match="transform_action failed: ValueError: nope") as info:
        await run(env, model, Bad(), close_env_on_end=True)
    assert isinstance(info.value.__cause__, ValueError)
    assert info.value.report is not None
    assert env.closed
    assert model.released


async def test_observer_failures_are_logged_counted_and_ignored(
    autojump_clock: MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    class Noisy(RuntimeHooks):
        async def step_completed(self, event: StepCompleted) -> None:
            raise RuntimeError("observer bug")

    with caplog.at_level(logging.WARNING, logger="trio_rlmesh.runtime"):
        report = await run(FakeEnv(episode_length=3), FakeModel(), Noisy())
    assert report.status == "completed"
    assert report.hook_errors == 3
    assert sum("step_completed raised" in r.getMessage() for r in caplog.records) == 3


def test_only_overridden_hooks_are_dispatched() -> None:
    class One(RuntimeHooks):
        async def step_completed(self, event: StepCompleted) -> None:
            pass

    assert HookDispatcher(One()).overridden == frozenset({"step_completed"})
    assert HookDispatcher(RuntimeHooks()).overridden == frozenset()
    assert HookDispatcher(None).overridden == frozenset()


async def test_window_telemetry_ticks_during_a_stalled_predict(autojump_clock: MockClock) -> None:
    hooks = Recorder()
    model = FakeModel(delays={"model.predict": 0.1})
    report = await run(FakeEnv(episode_length=1), model, hooks, limits={"telemetry_window": 0.01})
    horizons = [t.horizon for t in hooks.of("on_telemetry")]
    assert horizons.count("window") >= 1
    assert horizons[-1] == "session"
    assert horizons.count("session") == 1
    assert hooks.of("on_telemetry")[-1].rows == report.telemetry
    assert any(r.op == "model.predict" for r in report.telemetry)


async def test_zero_window_disables_streaming_but_keeps_the_final_push(
    autojump_clock: MockClock,
) -> None:
    hooks = Recorder()
    model = FakeModel(delays={"model.predict": 0.1})
    report = await run(FakeEnv(episode_length=1), model, hooks, limits={"telemetry_window": 0})
    assert [t.horizon for t in hooks.of("on_telemetry")] == ["session"]
    assert hooks.of("on_telemetry")[0].rows
    assert any(r.op == "model.predict" for r in report.telemetry)
    assert trio.current_time() == 0.1


async def test_next_step_rolls_fire_episode_started_with_auto_reset(
    autojump_clock: MockClock,
) -> None:
    hooks = Recorder()
    env = FakeEnv(num_envs=2, autoreset="next_step", episode_length=[1, 3])
    await run(env, FakeModel(), hooks, max_episodes=2)
    started = hooks.of("episode_started")
    assert [(s.env_index, s.auto_reset) for s in started[:3]] == [(0, False), (1, False), (0, True)]
    assert [s.index for s in started] == list(range(len(started)))
