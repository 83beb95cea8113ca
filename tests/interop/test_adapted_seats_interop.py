"""A tagged env and a spec'd model against the real rlmesh 0.1.0, in every seat.

The env and the model are ``examples/adapted_arm.py``'s: a tagged arm (camera, quaternion
pose, gripper, instruction; 7-D delta actions) whose rewards read every action value, and a
model with a resized stacked camera and a ``rot6d`` state. The reference is RLMesh's own
runtime with its own adapter (``rlmesh.numpy.Model(fn, spec=...).run(env)``, in process);
every seat must give the same episodes, reward for reward.

Also here: a tagged env's handshake contract is byte for byte RLMesh's, from our server and
from ``rlmesh.EnvServer``, whichever package tagged it. Byte for byte up to the order of map
entries, which protobuf leaves unspecified: RLMesh's server writes a nested metadata map in
a hash map's order, which changes from process to process, so both contracts are compared
with every map's entries sorted by key (every value's bytes unchanged).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest
import trio

from tests.transports.grpc.servers import env_handshake
from tests.transports.grpc.wire import open_raw_client
from trio_rlmesh import RunLocalOptions, run_local
from trio_rlmesh.protocol import spaces_v1
from trio_rlmesh.runtime import RuntimeReport
from trio_rlmesh.transports.grpc import serve_env, serve_model

from . import envs
from .conftest import rlmesh_env_server
from .test_env_server_interop import our_env_server

pytestmark = [pytest.mark.interop, pytest.mark.network]

SEEDS = (11, 12, 13, 14)
GUARD = 180.0

Episodes = dict[int | None, tuple[int, float]]


def ours(report: RuntimeReport) -> Episodes:
    assert report.status == "completed", report.status
    return {e.seed: (e.steps, e.reward) for e in report.episodes}


def theirs(result: Any) -> Episodes:
    return {e.seed: (e.steps, e.reward) for e in result.episodes}


def wheel_model() -> Any:
    """RLMesh's model with RLMesh's adapter: the example's predict under the same spec."""
    import rlmesh.adapters
    from rlmesh.numpy import Model

    arm = envs.arm_example()
    spec = rlmesh.adapters.ModelSpec.from_dict(arm.ReachPolicy.spec.to_dict())
    return Model(arm.ReachPolicy().predict, spec=spec)


def rlmesh_run(model: Any, env: Any, seeds: Sequence[int | None] = SEEDS) -> Any:
    import rlmesh

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # editions not pinned by the env
        return rlmesh.run(model, env, seeds=list(seeds), workflow_edition="2026.06")


def policy() -> Any:
    return envs.arm_example().ReachPolicy()


def options(env: Any, **extra: Any) -> RunLocalOptions:
    return RunLocalOptions(env, episode_seeds=SEEDS, **extra)


async def in_process() -> Episodes:
    return ours(await run_local(policy(), options(envs.build("arm"))))


async def ours_on_rlmeshs_env() -> Episodes:
    async with rlmesh_env_server("arm") as address:
        return ours(await run_local(policy(), options(address)))


async def rlmesh_runtime_on_our_model() -> Episodes:
    import rlmesh

    async with rlmesh_env_server("arm") as env, trio.open_nursery() as nursery:
        address = await nursery.start(functools.partial(serve_model, policy(), "127.0.0.1:0"))
        model = rlmesh.RemoteModel(f"tcp://{address}")
        result = await trio.to_thread.run_sync(rlmesh_run, model, env)
        nursery.cancel_scope.cancel()
    return theirs(result)


async def rlmesh_runtime_on_our_env() -> Episodes:
    async with our_env_server("arm") as address:
        return theirs(await trio.to_thread.run_sync(rlmesh_run, wheel_model(), address))


async def vector_of_four() -> Episodes:
    # A NEXT_STEP vector env resets its own lanes, so the runtime seeds only the first
    # episode of each: one episode per lane, its seed derived from base_seed.
    vector = RunLocalOptions(envs.build("arm4"), base_seed=5, max_episodes=4)
    report = await run_local(policy(), vector)
    assert {e.env_index for e in report.episodes} == {0, 1, 2, 3}
    # Its groups take no history rows, so none is offered, and none asked for in vain.
    assert report.advisories == ()
    return ours(report)


async def fleet_of_two() -> Episodes:
    async with trio.open_nursery() as nursery:
        first, second = [
            await nursery.start(serve_env, envs.build("arm"), "127.0.0.1:0") for _ in range(2)
        ]
        report = await run_local(policy(), options([first, second]))
        nursery.cancel_scope.cancel()
    assert {e.endpoint for e in report.episodes} == {first, second}
    return ours(report)


SEATS: dict[str, Callable[[], Awaitable[Episodes]]] = {
    "ours-in-process": in_process,
    "ours-on-rlmesh-env-server": ours_on_rlmeshs_env,
    "rlmesh-runtime-on-our-serve-model": rlmesh_runtime_on_our_model,
    "rlmesh-runtime-on-our-serve-env": rlmesh_runtime_on_our_env,
    "ours-4-lane-vector-env": vector_of_four,
    "ours-fleet-of-two": fleet_of_two,
}


def reference(seeds: Sequence[int | None]) -> Episodes:
    """RLMesh in process: its runtime, its adapter, the env tagged by its ``tag``."""
    episodes = theirs(rlmesh_run(wheel_model(), envs.build("arm-wheel"), seeds))
    assert sorted(episodes) == sorted(seeds)  # type: ignore[type-var]
    assert len({reward for _, reward in episodes.values()}) == len(seeds)  # not trivial
    return episodes


@pytest.mark.parametrize("seat", sorted(SEATS))
async def test_every_seat_gives_rlmeshs_episodes(seat: str) -> None:
    pytest.importorskip("rlmesh")
    with trio.fail_after(GUARD):
        episodes = await SEATS[seat]()
    assert episodes == reference(list(episodes))


@pytest.mark.parametrize("kind", ["arm", "arm-wheel"])
async def test_a_tagged_envs_contract_is_rlmeshs_byte_for_byte(kind: str) -> None:
    pytest.importorskip("rlmesh")
    contracts = {}
    with trio.fail_after(GUARD):
        for name, server in (("ours", our_env_server), ("rlmesh", rlmesh_env_server)):
            async with server(kind) as address, open_raw_client(address) as raw:
                response = await env_handshake(raw)
                assert response.env_contract is not None
                assert response.env_contract.spec is not None
                response.env_contract.spec.metadata = sorted_maps(
                    response.env_contract.spec.metadata
                )
                contracts[name] = bytes(response.env_contract)
    assert contracts["ours"] == contracts["rlmesh"]
    assert b"rlmesh.adapters.v1.env_tags" in contracts["ours"]


def sorted_maps(meta: spaces_v1.MetaMap | None) -> spaces_v1.MetaMap | None:
    """``meta`` with the entries of every map in it in key order."""
    if meta is None:
        return None
    return spaces_v1.MetaMap(
        entries={key: _sorted_value(meta.entries[key]) for key in sorted(meta.entries)}
    )


def _sorted_value(value: spaces_v1.MetaValue) -> spaces_v1.MetaValue:
    if value.map is not None:
        value.map = sorted_maps(value.map)
    elif value.list is not None:
        value.list.items = [_sorted_value(item) for item in value.list.items]
    return value
