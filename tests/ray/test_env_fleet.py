"""Env fleets on Ray: ``trio_rlmesh.ray.env_fleet`` and ``trio-rlmesh run --ray-envs``.

A local Ray (``ray.init(num_cpus=2, include_dashboard=False)``) runs every actor on this
machine, so the servers bind loopback (given as ``host="127.0.0.1"``, or found out); every
fleet's servers require its token. Run by ``nox -s ray``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import trio

from trio_rlmesh import Error, RunLocalOptions, SpecError, TransportError, run_local
from trio_rlmesh.runtime import EpisodeCompleted, RuntimeHooks, RuntimeReport
from trio_rlmesh.transports.grpc import open_env_client, serve_env

ray = pytest.importorskip("ray")

from trio_rlmesh.ray import RayEnvFleet, env_fleet  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.network]

TARGET = "gymnasium:CartPole-v1"
LOOPBACK = "127.0.0.1"
STEPS = 30


@pytest.fixture(scope="module", autouse=True)
def local_ray() -> Iterator[None]:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


class Batched:
    def predict_batch(self, observations: Any) -> Any:
        rows = np.asarray(observations)
        return (rows[:, 2] + 0.5 * rows[:, 3] > 0).astype(np.int64)


def per_seed(report: RuntimeReport) -> dict[int | None, tuple[Any, ...]]:
    return {e.seed: (e.steps, e.reward, e.terminated, e.truncated) for e in report.episodes}


def options(addresses: Any, seeds: tuple[int, ...], **more: Any) -> RunLocalOptions:
    return RunLocalOptions(
        addresses, episode_seeds=seeds, max_episodes=len(seeds), max_episode_steps=STEPS, **more
    )


async def refused(address: str, token: str) -> bool:
    """Whether nothing serves ``address`` any more (a server still there would let a client
    with its ``token`` in)."""
    with trio.fail_after(30):
        try:
            async with open_env_client(address, token=token):
                return False
        except TransportError:
            return True


async def test_a_fleet_on_ray_gives_each_seed_the_episode_one_local_server_gives() -> None:
    seeds = tuple(range(40, 48))
    with trio.fail_after(180):
        async with env_fleet(TARGET, 2, {"num_cpus": 0}, host=LOOPBACK) as fleet:
            assert isinstance(fleet, RayEnvFleet)
            assert len(fleet) == len(fleet.actors) == 2
            assert all(address.startswith(f"{LOOPBACK}:") for address in fleet)
            report = await run_local(Batched(), options(fleet, seeds))
            served: set[str] = set()
            for address in fleet:
                async with open_env_client(address, token=fleet.token) as client:
                    await client.reset()
                served.add(address)
        async with trio.open_nursery() as nursery:
            local = await nursery.start(serve_env, gym.make("CartPole-v1"), "127.0.0.1:0")
            alone = await run_local(Batched(), options(local, seeds))
            nursery.cancel_scope.cancel()
    assert report.status == "completed"
    assert [e.seed for e in report.episodes] == list(seeds)
    assert per_seed(report) == per_seed(alone)
    # Episodes go to whichever endpoint is free: on a loaded machine one of the two can take
    # all eight while the other is still starting, so each actor's server is checked apart.
    assert {e.endpoint for e in report.episodes} <= set(fleet)
    assert served == set(fleet)
    # Leaving the block stopped every actor, and with it its server.
    for address in fleet:
        assert await refused(address, fleet.token)


async def test_cancelling_inside_the_block_stops_the_actors() -> None:
    with trio.fail_after(180):
        with trio.CancelScope() as scope:
            async with env_fleet(TARGET, 2, {"num_cpus": 0}, host=LOOPBACK) as fleet:
                started = tuple(fleet)
                scope.cancel()
                await trio.sleep_forever()
        for address in started:
            assert await refused(address, fleet.token)


async def test_a_fleet_on_this_machine_binds_loopback_and_requires_its_own_token() -> None:
    seeds = (0, 1, 2, 3)
    with trio.fail_after(180):
        async with env_fleet(TARGET, 2, {"num_cpus": 0}) as fleet:  # no host given
            assert all(address.startswith(f"{LOOPBACK}:") for address in fleet)
            assert isinstance(fleet.token, str)
            assert len(fleet.token) >= 32
            for address in fleet:
                with pytest.raises(TransportError) as caught:
                    async with open_env_client(address):
                        pytest.fail(f"{address} let a client without the token in")
                assert caught.value.code == "UNAUTHENTICATED"
            # The run takes the token from the fleet.
            report = await run_local(Batched(), options(fleet, seeds))
            async with env_fleet(TARGET, 1, {"num_cpus": 0}) as other:
                assert other.token != fleet.token
    assert report.status == "completed"
    assert [e.seed for e in report.episodes] == list(seeds)


async def test_a_fleet_the_cluster_cannot_hold_fails_at_once_saying_why() -> None:
    # The start timeout is 120 s: the refusal must come from the check, before any actor.
    with trio.fail_after(30):
        with pytest.raises(SpecError) as info:
            async with env_fleet(TARGET, 8, {"num_cpus": 1}):
                pytest.fail("the fleet started")
    assert str(info.value).startswith(
        "8 env servers on Ray asking {'num_cpus': 1} each cannot all be placed: the cluster "
        "has CPU 2 on 1 node, room for 2 of them; "
    )
    assert info.value.operation == "ray.env_fleet"


async def test_actors_waiting_for_resources_in_use_time_out_saying_what_is_free() -> None:
    with trio.fail_after(60):
        with pytest.raises(Error) as info:
            async with env_fleet(
                TARGET, 3, {"num_cpus": 1}, start_timeout=5.0, check_resources=False
            ):
                pytest.fail("the fleet started")
    # Two of the three hold the 2 CPUs (how much is free at that moment is Ray's timing).
    assert re.fullmatch(
        r"3 env servers on Ray did not all start within 5\.0 s; each asks for "
        r"\{'num_cpus': 1\}, and the cluster has CPU [0-9.]+ free",
        str(info.value),
    )


class KillActor(RuntimeHooks):
    """``ray.kill``s one actor of the fleet once ``after`` episodes have completed."""

    def __init__(self, actor: Any, after: int) -> None:
        self.actor, self.after, self.completed = actor, after, 0

    async def episode_completed(self, event: EpisodeCompleted) -> None:
        self.completed += 1
        if self.completed == self.after:
            ray.kill(self.actor, no_restart=True)


async def test_an_actor_dying_is_an_endpoint_failure() -> None:
    seeds = tuple(range(10))
    with trio.fail_after(240):
        async with env_fleet(TARGET, 2, {"num_cpus": 0}, host=LOOPBACK) as fleet:
            hooks = KillActor(fleet.actors[0], after=2)
            tolerated = await run_local(
                Batched(), options(fleet, seeds, tolerate_endpoint_failures=True), hooks=hooks
            )
            survivor = fleet[1]
        async with env_fleet(TARGET, 2, {"num_cpus": 0}, host=LOOPBACK) as fleet:
            hooks = KillActor(fleet.actors[1], after=2)
            with pytest.raises(TransportError) as caught:
                await run_local(Batched(), options(fleet, seeds), hooks=hooks)
    assert tolerated.status == "completed"
    assert [e.seed for e in tolerated.episodes] == list(seeds)
    lost = tolerated.endpoints[0]
    assert lost.status == "failed"
    assert lost.retried
    for index, seed in lost.retried:
        (again,) = [e for e in tolerated.episodes if e.index == index]
        assert (again.seed, again.endpoint) == (seed, survivor)
    failed = caught.value.report
    assert failed is not None
    assert failed.status == "failed"
    assert failed.endpoints[1].status == "failed"
    assert len({e.index for e in failed.episodes}) == len(failed.episodes) >= 2


async def test_an_env_target_that_cannot_load_fails_the_fleet_with_its_error() -> None:
    with trio.fail_after(180):
        with pytest.raises(Error, match="no_such_module_for_ray") as info:
            async with env_fleet("no_such_module_for_ray:Env", 1, {"num_cpus": 0}, host=LOOPBACK):
                pytest.fail("the fleet started")
    assert str(info.value).startswith("an env server actor failed to start: ")
    assert "Traceback" not in str(info.value)
    assert "\x1b[" not in str(info.value)  # no terminal colours from Ray's remote traceback


async def test_a_server_that_cannot_start_names_its_own_error_not_a_group() -> None:
    with trio.fail_after(180):
        with pytest.raises(Error) as info:
            async with env_fleet(
                "gymnasium:CartPole-v1",
                1,
                {"num_cpus": 0},
                host=LOOPBACK,
                serve_options={"no_such_option": 1},
            ):
                pytest.fail("the fleet started")
    assert str(info.value) == (
        "an env server actor failed to start: the env server did not start: TypeError: "
        "serve_env() got an unexpected keyword argument 'no_such_option'"
    )


def test_run_with_ray_envs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from trio_rlmesh._cli import main

    out = tmp_path / "report.json"
    code = main(
        [
            *("run", "--ray-envs", "2", "--seeds", "0..5", "--max-episode-steps", "20"),
            # Goes to each actor's serve_env (and to the model here): a wrong pass-through
            # would fail the servers' start.
            *("--user-code", "thread", "--no-progress", "--json", str(out)),
        ]
    )
    assert code == 0, capsys.readouterr().err
    report = json.loads(out.read_text())
    assert report["status"] == "completed"
    assert [e["seed"] for e in report["episodes"]] == list(range(6))
    assert len(report["endpoints"]) == 2
    assert all(p["endpoint"].startswith(f"{LOOPBACK}:") for p in report["endpoints"])
    assert "starting 2 env servers on Ray" in capsys.readouterr().err
