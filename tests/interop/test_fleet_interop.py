"""A fleet run over real ``rlmesh.EnvServer`` processes (and one of ours beside them).

CartPole is deterministic given its seed and the model is a pure function of its
observation, so each episode of a fleet run must equal the episode that one endpoint
alone gives for the same seed, whichever server ran it.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import trio

from trio_rlmesh import RunLocalOptions, SpecError, run_local
from trio_rlmesh.runtime import RuntimeReport
from trio_rlmesh.transports.grpc import serve_env

from .conftest import rlmesh_env_server

pytestmark = pytest.mark.interop

STEPS = 40


class Batched:
    """One forward for every row; remembers each batch's size."""

    def __init__(self) -> None:
        self.sizes: list[int] = []

    def predict_batch(self, observations: Any) -> Any:
        self.sizes.append(int(observations.shape[0]))
        rows = np.asarray(observations)
        return (rows[:, 2] + 0.5 * rows[:, 3] > 0).astype(np.int64)


def per_seed(report: RuntimeReport) -> dict[int | None, tuple[Any, ...]]:
    return {e.seed: (e.steps, e.reward, e.terminated, e.truncated) for e in report.episodes}


async def test_a_fleet_of_rlmesh_servers_and_ours_equals_one_endpoint_at_a_time() -> None:
    seeds = tuple(range(300, 312))
    options = {"episode_seeds": seeds, "max_episodes": len(seeds), "max_episode_steps": STEPS}
    model = Batched()
    with trio.fail_after(180):
        async with AsyncExitStack() as stack, trio.open_nursery() as nursery:
            theirs = [
                await stack.enter_async_context(rlmesh_env_server("cartpole")) for _ in range(2)
            ]
            ours = await nursery.start(serve_env, gym.make("CartPole-v1"), "127.0.0.1:0")
            fleet = await run_local(model, RunLocalOptions([*theirs, ours], **options))
            alone_theirs = await run_local(Batched(), RunLocalOptions(theirs[0], **options))
            alone_ours = await run_local(Batched(), RunLocalOptions(ours, **options))
            nursery.cancel_scope.cancel()
    assert fleet.status == "completed"
    assert [e.seed for e in fleet.episodes] == list(seeds)
    assert per_seed(fleet) == per_seed(alone_theirs) == per_seed(alone_ours)
    assert [p.endpoint for p in fleet.endpoints] == [*theirs, ours]
    assert {e.endpoint for e in fleet.episodes} == {*theirs, ours}
    assert max(model.sizes) > 1  # rows from several servers in one call


async def test_an_rlmesh_server_that_serves_other_spaces_is_refused_before_any_episode() -> None:
    with trio.fail_after(120):
        async with rlmesh_env_server("pendulum") as theirs, trio.open_nursery() as nursery:
            ours = await nursery.start(serve_env, gym.make("CartPole-v1"), "127.0.0.1:0")
            model = Batched()
            with pytest.raises(SpecError) as info:
                await run_local(model, RunLocalOptions([ours, theirs], max_episodes=4))
            nursery.cancel_scope.cancel()
    assert str(info.value).startswith(
        f"fleet of {ours}, {theirs} refused: {theirs} serves observation space "
        "Box(shape=(3,), dtype=FLOAT32), "
    )
    assert model.sizes == []  # no predict: no episode started
