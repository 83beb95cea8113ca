"""Several hook objects at once, the reset answer's event, and the driver's render check."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from trio.testing import MockClock

from trio_rlmesh import SpecError
from trio_rlmesh.runtime import (
    ActionReceived,
    ResetCompleted,
    RuntimeDriver,
    RuntimeEnv,
    RuntimeHooks,
    StepCompleted,
)
from trio_rlmesh.spaces import Discrete, encode_batch
from trio_rlmesh.testing import FakeEnv, FakeModel


class Named(RuntimeHooks):
    """Logs its name per event into a shared list; replaces actions with its own value."""

    def __init__(self, name: str, log: list[Any], value: int | None = None) -> None:
        self.name, self.log, self.value = name, log, value

    async def step_completed(self, event: StepCompleted) -> None:
        self.log.append((self.name, "step", event._raw_action))

    async def transform_action(self, event: ActionReceived) -> Any:
        self.log.append((self.name, "transform", event.action.tolist()))
        if self.value is None:
            return None
        return np.full_like(event.action, self.value)


async def test_each_event_goes_to_every_hook_object_and_transforms_chain(
    autojump_clock: MockClock,
) -> None:
    log: list[Any] = []
    env = FakeEnv(episode_length=1, n_actions=4)
    first, second = Named("a", log, 3), Named("b", log)
    await RuntimeDriver(env.session_spec(max_episodes=1), env, FakeModel(), (first, second)).run()
    (t_a, t_b, s_a, s_b) = log
    assert (t_a[:2], t_b[:2], s_a[:2], s_b[:2]) == (
        ("a", "transform"),
        ("b", "transform"),
        ("a", "step"),
        ("b", "step"),
    )
    assert t_a[2] != [3]  # the model's own action, before any transform
    # The second transform sees the first one's replacement batch, and the env got it.
    assert t_b[2] == [3]
    assert env.actions[-1][1] == (3,)
    assert s_a[2] == s_b[2] == tuple(encode_batch(Discrete(4), np.array([3]), 1))


class Resets(RuntimeHooks):
    def __init__(self) -> None:
        self.resets: list[ResetCompleted] = []
        self.order: list[str] = []

    async def episode_started(self, event: Any) -> None:
        self.order.append("episode_started")

    async def reset_completed(self, event: ResetCompleted) -> None:
        self.order.append("reset_completed")
        self.resets.append(event)


async def test_reset_completed_follows_episode_started_with_the_envs_answer(
    autojump_clock: MockClock,
) -> None:
    env = FakeEnv(episode_length=2)
    hooks = Resets()
    report = await RuntimeDriver(env.session_spec(max_episodes=2), env, FakeModel(), hooks).run()
    assert hooks.order == ["episode_started", "reset_completed"] * 2
    assert [r.episode_ids[0] for r in hooks.resets] == [e.episode_id for e in report.episodes]
    assert all(r.env_indices == (0,) and r._raw_observation for r in hooks.resets)
    assert all(r.frames == () for r in hooks.resets)


def test_render_needs_an_env_with_a_render_call() -> None:
    env = FakeEnv()
    assert type(env).render is RuntimeEnv.render  # the seam's default: no render call
    with pytest.raises(SpecError, match="render call"):
        RuntimeDriver(env.session_spec(max_episodes=1), env, FakeModel(), render=True)
