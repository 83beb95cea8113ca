"""Fleet runs: one ``run_local`` over several env endpoints, one model, fused predicts.

The endpoints are real served envs (``serve_env`` in this process, or ``serve-env``
child processes that a test kills mid-run). CartPole is deterministic given its seed and
the model is a pure function of its observation, so every episode of a fleet run must be
the episode one endpoint gives for the same seed, whichever endpoint ran it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
import trio

from trio_rlmesh import ModelError, RunLocalOptions, SpecError, TransportError, run_local
from trio_rlmesh.runtime import EpisodeCompleted, ResetCompleted, RuntimeHooks, RuntimeReport

from .helpers import CARTPOLE, Balancer, BatchedBalancer, Declines, env_process, serving

pytestmark = pytest.mark.network

STEPS = 40
"""Episode cap: a balancing CartPole episode would last 500 steps."""


def per_seed(report: RuntimeReport) -> dict[int | None, tuple[Any, ...]]:
    """What an episode is, by seed: it must not depend on the endpoint that ran it."""
    return {
        e.seed: (e.steps, e.reward, e.terminated, e.truncated)
        for e in sorted(report.episodes, key=lambda e: e.index)
    }


@asynccontextmanager
async def served(count: int, make: Any = lambda: gym.make(CARTPOLE)) -> AsyncIterator[list[str]]:
    async with AsyncExitStack() as stack:
        yield [await stack.enter_async_context(serving(make())) for _ in range(count)]


@asynccontextmanager
async def processes(count: int) -> AsyncIterator[list[tuple[str, trio.Process]]]:
    async with AsyncExitStack() as stack:
        started: list[tuple[str, trio.Process]] = []

        async def start(k: int) -> None:
            entered = await stack.enter_async_context(env_process("gymnasium:CartPole-v1"))
            slots[k] = entered

        # Started side by side, so the children's interpreter startups overlap; the list
        # keeps the order k = 0..count-1 whichever child is ready first.
        slots: list[tuple[str, trio.Process] | None] = [None] * count
        async with trio.open_nursery() as nursery:
            for k in range(count):
                nursery.start_soon(start, k)
        for entry in slots:
            assert entry is not None
            started.append(entry)
        yield started


async def one_at_a_time(address: str, seeds: Sequence[int], steps: int = STEPS) -> RuntimeReport:
    return await run_local(
        Balancer(),
        RunLocalOptions(
            address, episode_seeds=tuple(seeds), max_episodes=len(seeds), max_episode_steps=steps
        ),
    )


class KillAfter(RuntimeHooks):
    """Kills ``process`` once ``after`` episodes have completed (from the trio thread)."""

    def __init__(self, process: trio.Process, after: int) -> None:
        self.process = process
        self.after = after
        self.completed = 0

    async def episode_completed(self, event: EpisodeCompleted) -> None:
        self.completed += 1
        if self.completed == self.after:
            self.process.kill()


class KillMidRun(RuntimeHooks):
    """Kills the victim endpoint's process once it completed an episode, mid-run by design.

    The victim is killed from its own ``episode_completed`` hook: its driver goes on to
    take its next episode and finds the process dead, so it always dies holding one. The
    other endpoints wait in their first ``episode_completed`` until the kill, so they
    cannot take every episode first, however the machine schedules the processes.
    """

    def __init__(self, victim_address: str, process: trio.Process) -> None:
        self.victim_address = victim_address
        self.process = process
        self.killed = trio.Event()
        self.completed = 0

    async def episode_completed(self, event: EpisodeCompleted) -> None:
        self.completed += 1
        if event.record.endpoint == self.victim_address:
            if not self.killed.is_set():
                self.process.kill()
                await self.process.wait()
                self.killed.set()
        else:
            await self.killed.wait()


async def test_a_fleet_gives_each_seed_the_episode_one_endpoint_gives() -> None:
    seeds = tuple(range(100, 112))
    model = BatchedBalancer()
    with trio.fail_after(120):
        async with served(3) as addresses:
            report = await run_local(
                model,
                RunLocalOptions(
                    addresses, episode_seeds=seeds, max_episodes=12, max_episode_steps=STEPS
                ),
            )
            alone = await one_at_a_time(addresses[0], seeds)
    assert report.status == "completed"
    assert [e.index for e in report.episodes] == list(range(12))
    assert [e.seed for e in report.episodes] == list(seeds)
    assert per_seed(report) == per_seed(alone)
    # Every endpoint ran episodes, and each record names the endpoint it ran on.
    assert {e.endpoint for e in report.episodes} == set(addresses)
    assert [p.endpoint for p in report.endpoints] == list(addresses)
    assert sum(p.episodes for p in report.endpoints) == 12
    assert sum(p.env_step_calls for p in report.endpoints) == report.env_step_calls
    assert all(p.status == "completed" and p.error is None for p in report.endpoints)
    # One model, one batch for rows from several endpoints.
    assert max(model.batch_sizes) > 1
    assert sum(model.batch_sizes) == report.env_step_calls
    sizes = [r for r in report.telemetry if (r.op, r.metric) == ("model.predict", "group.size")]
    assert sizes[0].count == len(model.batch_sizes)
    data = json.loads(json.dumps(report.to_json_dict()))
    assert [e["endpoint"] for e in data["episodes"]] == [e.endpoint for e in report.episodes]
    assert [p["endpoint"] for p in data["endpoints"]] == list(addresses)


async def test_a_fleet_with_a_base_seed_runs_the_seeds_of_one_single_lane_endpoint() -> None:
    options = {"base_seed": 7, "max_episodes": 6, "max_episode_steps": STEPS}
    with trio.fail_after(120):
        async with served(2) as addresses:
            fleet = await run_local(BatchedBalancer(), RunLocalOptions(addresses, **options))
            alone = await run_local(BatchedBalancer(), RunLocalOptions(addresses[1], **options))
    assert [e.seed for e in fleet.episodes] == [e.seed for e in alone.episodes]
    assert per_seed(fleet) == per_seed(alone)


async def test_a_lane_endpoint_and_single_envs_share_one_run() -> None:
    seeds = tuple(range(20, 30))
    lanes = [gym.make(CARTPOLE) for _ in range(3)]
    with trio.fail_after(120):
        async with served(1) as single, serving(lanes) as lane_endpoint:
            addresses = [*single, lane_endpoint]
            report = await run_local(
                BatchedBalancer(),
                RunLocalOptions(
                    addresses, episode_seeds=seeds, max_episodes=10, max_episode_steps=STEPS
                ),
            )
            alone = await one_at_a_time(single[0], seeds)
    assert report.status == "completed"
    assert sorted(e.index for e in report.episodes) == list(range(10))
    assert per_seed(report) == per_seed(alone)
    assert {e.env_index for e in report.episodes if e.endpoint == lane_endpoint} <= {0, 1, 2}


async def test_a_killed_endpoint_fails_the_run_with_what_was_finished() -> None:
    seeds = tuple(range(12))
    with trio.fail_after(120):
        async with processes(3) as started:
            addresses = [address for address, _ in started]
            victim_address, victim = started[1]
            hooks = KillAfter(victim, after=3)
            with pytest.raises(TransportError) as caught:
                await run_local(
                    BatchedBalancer(),
                    RunLocalOptions(
                        addresses, episode_seeds=seeds, max_episodes=12, max_episode_steps=STEPS
                    ),
                    hooks=hooks,
                )
    error = caught.value
    assert error.operation is not None
    assert error.operation.startswith("env.")
    assert error.address is not None
    report = error.report
    assert report is not None
    assert report.status == "failed"
    indices = [e.index for e in report.episodes]
    assert len(indices) == len(set(indices)) == hooks.completed >= 3
    by_endpoint = {p.endpoint: p for p in report.endpoints}
    assert by_endpoint[victim_address].status == "failed"
    assert by_endpoint[victim_address].error is not None
    assert by_endpoint[victim_address].retried == ()
    assert {p.status for a, p in by_endpoint.items() if a != victim_address} == {"cancelled"}
    data = report.to_json_dict()
    assert data["status"] == "failed"
    assert len(data["episodes"]) == hooks.completed


async def test_a_killed_endpoint_is_tolerated_and_its_episodes_run_elsewhere() -> None:
    seeds = tuple(range(50, 62))
    with trio.fail_after(120):
        async with processes(3) as started:
            addresses = [address for address, _ in started]
            victim_address, victim = started[0]
            hooks = KillMidRun(victim_address, victim)
            report = await run_local(
                BatchedBalancer(),
                RunLocalOptions(
                    addresses,
                    episode_seeds=seeds,
                    max_episodes=12,
                    max_episode_steps=STEPS,
                    tolerate_endpoint_failures=True,
                ),
                hooks=hooks,
            )
            alone = await one_at_a_time(addresses[1], seeds)
    assert report.status == "completed"
    # Every episode exactly once, each with its own seed and the episode that seed gives.
    assert [e.index for e in report.episodes] == list(range(12))
    assert [e.seed for e in report.episodes] == list(seeds)
    assert per_seed(report) == per_seed(alone)
    assert hooks.completed == 12
    lost = {p.endpoint: p for p in report.endpoints}[victim_address]
    assert lost.status == "failed"
    assert lost.error is not None
    assert "TransportError" in lost.error
    # It finished one episode, then died holding the next one the pool handed it: that
    # one was started again on another endpoint, with its seed.
    assert lost.episodes == 1
    assert len(lost.retried) == 1
    for index, seed in lost.retried:
        (again,) = [e for e in report.episodes if e.index == index]
        assert again.seed == seed
        assert again.endpoint != victim_address
    assert any(victim_address in text and "lost" in text for text in report.advisories)
    data = report.to_json_dict()
    (entry,) = [p for p in data["endpoints"] if p["endpoint"] == victim_address]
    assert entry["retried"] == [{"index": i, "seed": s} for i, s in lost.retried]


async def test_an_unreachable_endpoint_is_tolerated_or_fails_the_run(tmp_path: Path) -> None:
    seeds = tuple(range(6))
    dead = f"unix://{tmp_path / 'nobody.sock'}"
    with trio.fail_after(120):
        async with served(2) as addresses:
            fleet = [*addresses, dead]
            report = await run_local(
                Balancer(),
                RunLocalOptions(
                    fleet,
                    episode_seeds=seeds,
                    max_episodes=6,
                    max_episode_steps=STEPS,
                    tolerate_endpoint_failures=True,
                ),
            )
            with pytest.raises(TransportError) as caught:
                await run_local(
                    Balancer(),
                    RunLocalOptions(
                        fleet, episode_seeds=seeds, max_episodes=6, max_episode_steps=STEPS
                    ),
                )
    assert report.status == "completed"
    assert [e.seed for e in report.episodes] == list(seeds)
    assert {p.endpoint: p.status for p in report.endpoints}[dead] == "failed"
    assert caught.value.operation == "env.handshake"
    assert caught.value.report is not None
    assert caught.value.report.status == "failed"


async def test_losing_every_endpoint_fails_even_when_tolerated(tmp_path: Path) -> None:
    with trio.fail_after(60):
        dead = [f"unix://{tmp_path / f'{k}.sock'}" for k in range(2)]
        with pytest.raises(TransportError) as caught:
            await run_local(
                Balancer(),
                RunLocalOptions(dead, max_episodes=2, tolerate_endpoint_failures=True),
            )
    report = caught.value.report
    assert report is not None
    assert report.status == "failed"
    assert [p.status for p in report.endpoints] == ["failed", "failed"]


async def test_a_model_failure_fails_a_tolerant_fleet() -> None:
    with trio.fail_after(60):
        async with served(2) as addresses:
            with pytest.raises(ModelError):
                await run_local(
                    Declines(at=5),
                    RunLocalOptions(
                        addresses,
                        max_episodes=4,
                        max_episode_steps=STEPS,
                        tolerate_endpoint_failures=True,
                    ),
                )


async def test_cancelling_a_fleet_reports_every_endpoint_and_leaves_nothing_running() -> None:
    with trio.fail_after(60):
        async with served(3) as addresses, trio.open_nursery() as nursery:
            hooks = Stopper()
            report_box: list[RuntimeReport] = []

            async def go(task_status: trio.TaskStatus[Any]) -> None:
                report_box.append(
                    await run_local(
                        BatchedBalancer(),
                        RunLocalOptions(addresses, max_episode_steps=STEPS),
                        hooks=hooks,
                        task_status=task_status,
                    )
                )

            run = await nursery.start(go)
            await hooks.enough.wait()
            run.cancel("enough")
    (report,) = report_box
    assert report.status == "cancelled"
    assert report.reason == "enough"
    assert len(report.episodes) >= 4
    assert [p.status for p in report.endpoints] == ["cancelled"] * 3


class CountsResets(RuntimeHooks):
    def __init__(self) -> None:
        self.resets = 0

    async def reset_completed(self, event: ResetCompleted) -> None:
        self.resets += 1


async def test_a_fleet_whose_servers_serve_different_spaces_is_refused_before_any_episode() -> None:
    hooks = CountsResets()
    with trio.fail_after(60):
        async with (
            serving(gym.make(CARTPOLE)) as cartpole,
            serving(gym.make("Pendulum-v1")) as pendulum,
        ):
            with pytest.raises(SpecError) as info:
                await run_local(
                    Balancer(), RunLocalOptions([cartpole, pendulum], max_episodes=4), hooks=hooks
                )
    message = str(info.value)
    assert message.startswith(f"fleet of {cartpole}, {pendulum} refused: {pendulum} serves ")
    assert (
        f"{pendulum} serves observation space Box(shape=(3,), dtype=FLOAT32), {cartpole} "
        "Box(shape=(4,), dtype=FLOAT32)" in message
    )
    assert f"{pendulum} serves action space Box(" in message
    assert info.value.report is None
    assert hooks.resets == 0


def test_a_fleet_object_gives_its_token_unless_one_is_given() -> None:
    from trio_rlmesh.ray import RayEnvFleet

    fleet = RayEnvFleet(("127.0.0.1:1", "127.0.0.1:2"), (), "fleet-secret")
    assert RunLocalOptions(fleet).token == "fleet-secret"
    assert list(RunLocalOptions(fleet).env_address) == ["127.0.0.1:1", "127.0.0.1:2"]
    assert RunLocalOptions(fleet, token="mine").token == "mine"
    alone = RunLocalOptions(RayEnvFleet(("127.0.0.1:1",), (), "fleet-secret"))
    assert (alone.env_address, alone.token) == ("127.0.0.1:1", "fleet-secret")
    assert RunLocalOptions(["127.0.0.1:1", "127.0.0.1:2"]).token is None


async def test_a_fleet_of_servers_that_require_its_token_runs_without_being_told() -> None:
    from trio_rlmesh.ray import RayEnvFleet

    with trio.fail_after(60):
        async with (
            serving(gym.make(CARTPOLE), token="t0k") as a,
            serving(gym.make(CARTPOLE), token="t0k") as b,
        ):
            options = RunLocalOptions(
                RayEnvFleet((a, b), (), "t0k"), max_episodes=4, max_episode_steps=STEPS
            )
            report = await run_local(BatchedBalancer(), options)
            with pytest.raises(TransportError, match="UNAUTHENTICATED"):
                await run_local(BatchedBalancer(), RunLocalOptions([a, b], max_episodes=1))
    assert report.status == "completed"
    assert len(report.episodes) == 4


async def test_the_same_address_twice_is_refused() -> None:
    with pytest.raises(SpecError, match="listed twice"):
        RunLocalOptions(["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:1"])


class Stopper(RuntimeHooks):
    def __init__(self) -> None:
        self.enough = trio.Event()
        self.completed = 0

    async def episode_completed(self, event: EpisodeCompleted) -> None:
        self.completed += 1
        if self.completed >= 4:
            self.enough.set()


async def test_a_fleet_against_a_served_model_fuses_its_predicts_there() -> None:
    from trio_rlmesh import run_remote
    from trio_rlmesh.transports.grpc import serve_model

    seeds = tuple(range(70, 79))
    model = BatchedBalancer()
    with trio.fail_after(120):
        async with served(3) as addresses, trio.open_nursery() as nursery:
            model_address = await nursery.start(serve_model, model)
            report = await run_remote(
                model_address,
                RunLocalOptions(
                    addresses, episode_seeds=seeds, max_episodes=9, max_episode_steps=STEPS
                ),
            )
            alone = await one_at_a_time(addresses[2], seeds)
            nursery.cancel_scope.cancel()
    assert report.status == "completed"
    assert [e.seed for e in report.episodes] == list(seeds)
    assert per_seed(report) == per_seed(alone)
    assert {e.endpoint for e in report.episodes} == set(addresses)
    # The server's model saw rows from several endpoints in one call.
    assert max(model.batch_sizes) > 1


class _Threads(Balancer):
    """Notes the thread each (grouped) predict runs on."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: list[int] = []

    def predict(self, observation: Any) -> Any:
        self.threads.append(threading.get_ident())
        return super().predict(observation)


@pytest.mark.parametrize(("user_code", "first_on_loop"), [(None, False), ("inline", True)])
async def test_a_fleets_model_runs_auto_by_default_as_for_one_served_env(
    user_code: str | None, first_on_loop: bool
) -> None:
    # "auto" (the default for served envs, a fleet's included) starts on the model's
    # thread; an in-process env's default, "inline", would run it on the loop.
    model = _Threads()
    with trio.fail_after(60):
        async with served(2) as addresses:
            options = RunLocalOptions(
                addresses, max_episodes=2, max_episode_steps=3, user_code=user_code
            )
            assert (await run_local(model, options)).status == "completed"
    assert (model.threads[0] == threading.get_ident()) is first_on_loop
