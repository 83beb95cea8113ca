"""``run_remote``: the same model served by our ``serve_model`` gives ``run_local``'s episodes."""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import pytest
import trio

from trio_rlmesh import RunLocalOptions, run_local, run_remote
from trio_rlmesh.transports.grpc import serve_model

from .helpers import (
    CARTPOLE,
    Balancer,
    BatchedBalancer,
    OpenLoopChunker,
    Recorder,
    TimeAware,
    check_totals,
    outcomes,
    serving,
)

pytestmark = pytest.mark.network


async def _both(env: Any, make_model: Any, options: dict[str, Any]) -> tuple[Any, ...]:
    """Run the same options locally and against a served copy of the model."""
    local_model, served_model = make_model(), make_model()
    local_hooks, remote_hooks = Recorder(), Recorder()
    with trio.fail_after(60):
        async with serving(env) as env_address, trio.open_nursery() as nursery:
            model_address = await nursery.start(serve_model, served_model)
            local = await run_local(
                local_model, RunLocalOptions(env_address, **options), hooks=local_hooks
            )
            remote = await run_remote(
                model_address, RunLocalOptions(env_address, **options), hooks=remote_hooks
            )
            nursery.cancel_scope.cancel()
    return local, remote, local_model, served_model, local_hooks, remote_hooks


async def test_plain_model_served_or_local_gives_the_same_episodes() -> None:
    options = {"episode_seeds": (31, 32, 33), "max_episodes": 3, "max_episode_steps": 40}
    local, remote, local_model, served_model, local_hooks, remote_hooks = await _both(
        gym.make(CARTPOLE), Balancer, options
    )
    assert local.status == remote.status == "completed"
    check_totals(remote)
    assert outcomes(remote) == outcomes(local)
    assert [e.seed for e in remote.episodes] == [31, 32, 33]
    assert remote.total_steps == local.total_steps
    assert served_model.calls == local_model.calls == remote.total_steps
    assert remote_hooks.observations == local_hooks.observations
    assert remote_hooks.actions == local_hooks.actions
    # The served model's own phase timings travel back with every answer.
    metrics = {(row.op, row.metric) for row in remote.telemetry}
    assert {("model.predict", "endpoint.total"), ("model.predict", "endpoint.user")} <= metrics


async def test_chunked_model_served_or_local_gives_the_same_episodes() -> None:
    options = {
        "episode_seeds": (3, 4, 5),
        "max_episodes": 3,
        "max_episode_steps": 40,
        "execution_horizon": 4,
    }
    local, remote, local_model, served_model, local_hooks, remote_hooks = await _both(
        TimeAware(), OpenLoopChunker, options
    )
    assert local.status == remote.status == "completed"
    check_totals(remote)
    assert outcomes(remote) == outcomes(local)
    assert remote_hooks.actions == local_hooks.actions
    # The horizon reached the served model at resolve: it chunked and the runtime replayed.
    assert set(served_model.horizons) == {4}
    assert served_model.calls == local_model.calls
    assert served_model.calls == sum(math.ceil(e.steps / 4) for e in remote.episodes)
    assert remote_hooks.replayed == remote.total_steps - served_model.calls


async def test_lane_endpoint_with_a_served_batched_model() -> None:
    seeds = tuple(range(40, 46))
    options = {"episode_seeds": seeds, "max_episodes": len(seeds), "max_episode_steps": 10}
    envs = [gym.make(CARTPOLE) for _ in range(3)]
    local, remote, _, served_model, _, _ = await _both(envs, BatchedBalancer, options)
    assert remote.status == "completed"
    check_totals(remote)
    # Which lane runs which later episode depends on timing; each seed's episode does not.
    by_seed = {e.seed: (e.steps, e.terminated, e.truncated) for e in remote.episodes}
    assert by_seed == {e.seed: (e.steps, e.terminated, e.truncated) for e in local.episodes}
    assert {e.env_index for e in remote.episodes} == {0, 1, 2}
    assert sum(served_model.batch_sizes) == remote.total_steps
