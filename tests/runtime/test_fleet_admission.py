"""Fleet admission: every endpoint connects, then one comparison of their contracts decides
whether one model can drive them all, before any episode starts."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import pytest
import trio
from trio.testing import MockClock

from trio_rlmesh import EnvError, SpecError
from trio_rlmesh.runtime import RuntimeDriver, RuntimeLimits
from trio_rlmesh.runtime._fleet import Fleet
from trio_rlmesh.runtime._fleetrun import FleetRun
from trio_rlmesh.runtime._pool import EpisodePool
from trio_rlmesh.testing import FakeEnv, FakeModel

from ._support import fake_endpoints


def fleet_run(envs: Mapping[str, FakeEnv], model: FakeModel, *, tolerate: bool = False) -> FleetRun:
    fleet = Fleet(EpisodePool(max_episodes=4), model, RuntimeLimits(), fuse_wait=0.0)
    return FleetRun(list(envs), fleet, session_id="s", tolerate_endpoint_failures=tolerate)


def delayed(
    envs: Mapping[str, FakeEnv],
    model: FakeModel,
    delays: Mapping[str, float],
    refused: Sequence[str] = (),
) -> tuple[
    Callable[[str], AbstractAsyncContextManager[FakeEnv]],
    Callable[[str, FakeEnv, Fleet], Awaitable[RuntimeDriver]],
]:
    """``fake_endpoints`` whose connects take ``delays`` seconds (by address); those
    ``refused`` then fail as a server that is not there."""
    open_endpoint, prepare = fake_endpoints(envs, model)

    @asynccontextmanager
    async def opened(address: str) -> AsyncIterator[FakeEnv]:
        await trio.sleep(delays.get(address, 0.0))
        if address in refused:
            raise EnvError("connection refused", operation="env.handshake", address=address)
        async with open_endpoint(address) as env:
            yield env

    return opened, prepare


@pytest.mark.parametrize("tolerate", [False, True])
async def test_a_fleet_whose_spaces_differ_is_refused_before_any_episode(
    autojump_clock: MockClock, tolerate: bool
) -> None:
    envs = {"cart:1": FakeEnv(obs_dim=4), "pendulum:2": FakeEnv(obs_dim=3)}
    model = FakeModel()
    run = fleet_run(envs, model, tolerate=tolerate)
    # The odd one connects last: the first must not have started an episode meanwhile.
    with pytest.raises(SpecError) as info:
        await run.run(*delayed(envs, model, {"pendulum:2": 5.0}))
    assert str(info.value) == (
        "fleet of cart:1, pendulum:2 refused: pendulum:2 serves observation space "
        "Box(shape=(3,), dtype=FLOAT32), cart:1 Box(shape=(4,), dtype=FLOAT32); one model "
        "drives every endpoint of a fleet, so they must all serve the same spaces (run each "
        "kind of env in its own run)"
    )
    assert info.value.operation == "fleet.connect"
    assert info.value.report is None  # nothing ran
    assert [env.resets for env in envs.values()] == [[], []]
    assert model.group_sizes == []


async def test_every_endpoint_that_differs_is_named(autojump_clock: MockClock) -> None:
    envs = {
        "a:1": FakeEnv(n_actions=2),
        "b:1": FakeEnv(n_actions=2),
        "c:1": FakeEnv(n_actions=3),
        "d:1": FakeEnv(obs_dim=5, n_actions=3),
    }
    with pytest.raises(SpecError) as info:
        await fleet_run(envs, FakeModel()).run(*fake_endpoints(envs, FakeModel()))
    message = str(info.value)
    assert "c:1 serves action space Discrete(n=3" in message
    assert "d:1 serves observation space Box(shape=(5,)" in message
    assert "d:1 serves action space Discrete(n=3" in message
    assert "b:1 serves" not in message


async def test_lane_counts_and_autoreset_modes_may_differ(autojump_clock: MockClock) -> None:
    """Each endpoint's driver keeps its own lanes; the model sees one row per lane."""
    envs = {
        "vector:1": FakeEnv(num_envs=2, autoreset="next_step"),
        "single:1": FakeEnv(autoreset="disabled"),
    }
    model = FakeModel()
    report = await fleet_run(envs, model).run(*fake_endpoints(envs, model))
    assert report.status == "completed"
    assert len(report.episodes) == 4


async def test_an_endpoint_that_cannot_connect_does_not_hold_the_others(
    autojump_clock: MockClock,
) -> None:
    envs = {"up:1": FakeEnv(), "down:1": FakeEnv()}
    model = FakeModel()
    start = trio.current_time()
    run = fleet_run(envs, model, tolerate=True)
    report = await run.run(*delayed(envs, model, {"down:1": 3.0}, refused=["down:1"]))
    assert report.status == "completed"
    up, down = report.endpoints
    assert (up.status, up.episodes, down.status) == ("completed", 4, "failed")
    # The healthy endpoint waited for the other's connect to fail, and no longer (its
    # episodes take no trio time).
    assert trio.current_time() - start == 3.0
