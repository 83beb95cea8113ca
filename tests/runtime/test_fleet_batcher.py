"""The fleet's predict batcher: a group waits, bounded, only for endpoints due to join it."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import trio
from trio.testing import MockClock

from trio_rlmesh import Error, ModelError, ProtocolError
from trio_rlmesh.protocol import model_v1
from trio_rlmesh.runtime import ModelPrediction, RuntimeLimits
from trio_rlmesh.runtime._calls import Outcome
from trio_rlmesh.runtime._fleet import Fleet, FleetBatcher
from trio_rlmesh.runtime._fleetrun import FleetRun
from trio_rlmesh.runtime._pool import EpisodePool
from trio_rlmesh.testing import FakeEnv, FakeModel, Fault

from ._support import ShortModel, fake_endpoints


def request(n: int) -> model_v1.PredictRequest:
    return model_v1.PredictRequest(context=model_v1.AdapterContext(request_id=f"r{n}"))


def recording(
    groups: list[tuple[float, list[str]]], batcher: list[FleetBatcher[str]]
) -> FleetBatcher[str]:
    """A batcher whose fused call notes (time, keys) and answers everything, as a fleet's
    does (``served`` included)."""

    async def fused(
        requests: Sequence[model_v1.PredictRequest], keys: Sequence[str]
    ) -> list[Outcome]:
        groups.append((trio.current_time(), sorted(keys)))
        batcher[0].served(keys, trio.current_time(), 0.0)
        return [ModelPrediction(model_v1.PredictResponse(context=r.context)) for r in requests]

    batcher.append(FleetBatcher(fused, wait=5.0))
    return batcher[0]


async def test_a_waiting_batcher_goes_when_every_participant_is_in(
    autojump_clock: MockClock,
) -> None:
    groups: list[tuple[float, list[str]]] = []

    async def fused(
        requests: Sequence[model_v1.PredictRequest], keys: Sequence[str]
    ) -> list[Outcome]:
        groups.append((trio.current_time(), sorted(keys)))
        return [ModelPrediction(model_v1.PredictResponse(context=r.context)) for r in requests]

    batcher: FleetBatcher[str] = FleetBatcher(fused, wait=5.0)
    for _ in range(3):
        batcher.join()

    async def endpoint(name: str, ready_at: float) -> None:
        await trio.sleep(ready_at)
        await batcher.submit(request(0), name)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(batcher.serve)
        # Two arrive 1 s apart: the group waits for the third, which comes at 2 s.
        nursery.start_soon(endpoint, "a", 0.0)
        nursery.start_soon(endpoint, "b", 1.0)
        nursery.start_soon(endpoint, "c", 2.0)
        await trio.sleep(10)
        # c never comes back (nobody knows when it will): a and b wait the whole bound
        # (5 s), then go without it.
        nursery.start_soon(endpoint, "a", 0.0)
        nursery.start_soon(endpoint, "b", 0.0)
        await trio.sleep(20)
        # c leaves: a group waiting for it goes at once.
        nursery.start_soon(endpoint, "a", 0.0)
        nursery.start_soon(endpoint, "b", 0.0)
        await trio.sleep(1)
        batcher.leave()
        await trio.sleep(1)
        nursery.cancel_scope.cancel()
    assert groups == [
        (2.0, ["a", "b", "c"]),
        (15.0, ["a", "b"]),
        (31.0, ["a", "b"]),
    ]


async def test_a_group_does_not_wait_for_an_endpoint_a_whole_turnaround_away(
    autojump_clock: MockClock,
) -> None:
    groups: list[tuple[float, list[str]]] = []
    batcher = recording(groups, [])
    turnaround = {"a": 2.0, "b": 2.0, "c": 10.0}  # c's env steps slowly

    async def endpoint(name: str) -> None:
        batcher.join()
        while True:
            await batcher.submit(request(0), name)
            await trio.sleep(turnaround[name])

    async with trio.open_nursery() as nursery:
        nursery.start_soon(batcher.serve)
        for name in "abc":
            nursery.start_soon(endpoint, name)
        await trio.sleep(16)
        nursery.cancel_scope.cancel()
    assert groups == [
        (0.0, ["a", "b", "c"]),
        # c's turnaround is not known yet: a and b wait the bound for it.
        (7.0, ["a", "b"]),
        # c is overdue by more than the bound: not waited for.
        (9.0, ["a", "b"]),
        # c is in at 10; a and b are due at 11, within the bound: c waits for them.
        (11.0, ["a", "b", "c"]),
        # From now on c is due 10 s after its answer, past every bound: no waiting.
        (13.0, ["a", "b"]),
        (15.0, ["a", "b"]),
    ]


SLOW_MODEL_GROUPS = {
    # Answered at 4, a is back at 5 and b, due at 7, within one call's time: they go
    # together at 7, then every 7 s (4 s of model, 3 s of b's env).
    1.0: [(0.0, ["a", "b"]), (7.0, ["a", "b"]), (14.0, ["a", "b"])],
    # wait=0 takes what is ready: the two drift apart and each pays for its own calls.
    0.0: [(0.0, ["a", "b"]), (5.0, ["a"]), (9.0, ["b"]), (13.0, ["a"]), (17.0, ["b"])],
}


@pytest.mark.parametrize("wait", sorted(SLOW_MODEL_GROUPS))
async def test_a_slow_model_keeps_the_fleet_in_one_group(
    autojump_clock: MockClock, wait: float
) -> None:
    """When a fused call takes longer than ``wait``, a group waits up to one call's time for
    an endpoint that is due: letting it miss the call would cost the model another."""
    groups: list[tuple[float, list[str]]] = []
    batcher: list[FleetBatcher[str]] = []

    async def fused(
        requests: Sequence[model_v1.PredictRequest], keys: Sequence[str]
    ) -> list[Outcome]:
        started = trio.current_time()
        groups.append((started, sorted(keys)))
        await trio.sleep(4.0)  # the model's fixed cost per call
        batcher[0].served(keys, trio.current_time(), trio.current_time() - started)
        return [ModelPrediction(model_v1.PredictResponse(context=r.context)) for r in requests]

    batcher.append(FleetBatcher(fused, wait=wait))
    turnaround = {"a": 1.0, "b": 3.0}  # b's env steps a little slower

    async def endpoint(name: str) -> None:
        batcher[0].join()
        while True:
            await batcher[0].submit(request(0), name)
            await trio.sleep(turnaround[name])

    async with trio.open_nursery() as nursery:
        nursery.start_soon(batcher[0].serve)
        for name in "ab":
            nursery.start_soon(endpoint, name)
        await trio.sleep(20)
        nursery.cancel_scope.cancel()
    assert groups == SLOW_MODEL_GROUPS[wait]


async def test_a_cancelled_submit_does_not_reach_the_model(autojump_clock: MockClock) -> None:
    groups: list[tuple[float, list[str]]] = []
    batcher = recording(groups, [])
    batcher.join()
    batcher.join()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(batcher.serve)
        with trio.move_on_after(1):
            await batcher.submit(request(0), "gone")
        await trio.sleep(10)
        nursery.cancel_scope.cancel()
    assert groups == []


async def test_a_driver_waiting_for_work_is_not_waited_for(autojump_clock: MockClock) -> None:
    pool = EpisodePool(max_episodes=1)
    fleet = Fleet(pool, FakeModel(fuses_predicts=True), RuntimeLimits(), fuse_wait=5.0)
    batcher = fleet.batcher
    assert batcher is not None
    batcher.join()
    batcher.join()
    pool.claim("elsewhere", [0])  # the one episode runs on another endpoint: nothing to start
    async with trio.open_nursery() as nursery:
        nursery.start_soon(fleet.wait_for_work, "here")
        await trio.sleep(1)
        assert batcher.participants == 1
        pool.complete(0)
        fleet.changed()
        await trio.sleep(1)
    assert batcher.participants == 2


class TimedModel(FakeModel):
    """Notes the trio time of each fused call."""

    called: list[float]

    async def predict_group(
        self, requests: Sequence[model_v1.PredictRequest]
    ) -> list[ModelPrediction | Error]:
        self.called = [*getattr(self, "called", []), trio.current_time()]
        return await super().predict_group(requests)


async def test_a_slow_endpoint_does_not_hold_back_a_fleets_predicts(
    autojump_clock: MockClock,
) -> None:
    """End to end through the drivers: the fast endpoint's predicts wait for the slow one
    only while its timing is unknown, so the fast endpoint gets through its episodes in
    about the time of its own steps."""
    fast = FakeEnv(episode_length=5, delays={"env.step": 1.0})
    slow = FakeEnv(episode_length=5, delays={"env.step": 30.0})
    envs = {"fast:1": fast, "slow:1": slow}
    model = TimedModel(fuses_predicts=True)
    pool = EpisodePool(max_episodes=4)
    fleet = Fleet(pool, model, RuntimeLimits(env_step_timeout=100.0), fuse_wait=3.0)
    run = FleetRun(list(envs), fleet, session_id="s")
    report = await run.run(*fake_endpoints(envs, model))
    assert report.status == "completed"
    counts = {part.endpoint: part.episodes for part in report.endpoints}
    assert counts == {"fast:1": 3, "slow:1": 1}
    # 15 fast steps of 1 s, one predict before each: the fast endpoint's predicts waited
    # for the slow one at most twice (while its turnaround was unknown, then once while
    # it was overdue), never the bound every time.
    assert len(model.group_sizes) >= 15
    assert model.called[14] <= 15.0 + 2 * 3.0


async def test_a_fused_answer_of_the_wrong_length_fails_the_fleet(
    autojump_clock: MockClock,
) -> None:
    """The fleet's fused call checks the answer count by the drivers' own rule, and names
    the model as a driver would."""
    envs = {f"env:{k}": FakeEnv(episode_length=3, delays={"env.step": 1.0}) for k in (1, 2)}
    model = ShortModel(fuses_predicts=True)
    fleet = Fleet(EpisodePool(max_episodes=4), model, RuntimeLimits(), fuse_wait=3.0)

    with pytest.raises(ProtocolError) as info:
        await FleetRun(list(envs), fleet, session_id="s").run(*fake_endpoints(envs, model))
    assert info.value.operation == "model.predict"
    assert "model endpoint local-model answered 1 results for a group of 2 predicts" in str(
        info.value
    )
    assert model.group_sizes == [2]


async def test_a_failed_fused_call_names_the_step_it_failed_at(autojump_clock: MockClock) -> None:
    """A fused call's error is the drivers' own: it names the runtime step and the lane."""
    envs = {f"env:{k}": FakeEnv(episode_length=5, delays={"env.step": 1.0}) for k in (1, 2)}
    model = FakeModel(fuses_predicts=True, faults=[Fault("model.predict", at=3)])
    fleet = Fleet(EpisodePool(max_episodes=4), model, RuntimeLimits(), fuse_wait=3.0)

    with pytest.raises(ModelError) as info:
        await FleetRun(list(envs), fleet, session_id="s").run(*fake_endpoints(envs, model))
    assert model.group_sizes == [2, 2, 2]
    # Both endpoints stepped twice before the third fused call (reset, step 1, step 2).
    assert (info.value.operation, info.value.step, info.value.lane) == ("model.predict", 2, 0)


class PendingModel(FakeModel):
    """Notes, at each fused call, the most samples the fleet's own telemetry holds unfolded."""

    fleet: Fleet
    most = 0

    async def predict_group(
        self, requests: Sequence[model_v1.PredictRequest]
    ) -> list[ModelPrediction | Error]:
        pending = (len(series.pending) for series in self.fleet.telemetry._series.values())
        self.most = max(self.most, *pending, 0)
        return await super().predict_group(requests)


async def test_a_long_fleet_run_keeps_its_own_telemetry_bounded(autojump_clock: MockClock) -> None:
    """The fleet records each fused call once; over a long run those samples are folded
    into reservoirs now and then instead of piling up, and none is lost."""
    envs = {f"env:{k}": FakeEnv(episode_length=600) for k in (1, 2)}
    model = PendingModel(fuses_predicts=True)
    model.fleet = fleet = Fleet(EpisodePool(max_episodes=4), model, RuntimeLimits(), fuse_wait=3.0)
    run = FleetRun(list(envs), fleet, session_id="s")
    report = await run.run(*fake_endpoints(envs, model, max_episodes=4))
    calls = len(model.group_sizes)
    assert calls > 1100
    assert 0 < model.most <= 1024
    (size,) = [r for r in report.telemetry if (r.op, r.metric) == ("model.predict", "group.size")]
    assert size.count == calls
