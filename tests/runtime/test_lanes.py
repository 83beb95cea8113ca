"""Lane endpoints (subset_step), fused predicts, prefetch and observation history."""

from __future__ import annotations

import pytest
import trio
from trio.testing import MockClock

from trio_rlmesh import EnvError, ProtocolError
from trio_rlmesh.testing import FakeEnv, FakeModel, Fault
from trio_rlmesh.testing._fakes import decode_observation

from ._support import UUID7, Recorder, ShortModel, driver, run


def lane_env(**kw: object) -> FakeEnv:
    kw.setdefault("num_envs", 3)
    return FakeEnv(subset_step=True, **kw)  # type: ignore[arg-type]


async def test_lanes_step_and_reset_individually(autojump_clock: MockClock) -> None:
    env = lane_env(episode_length=[2, 3, 5], delays={"env.step": 0.01})
    model = FakeModel()
    report = await run(env, model, max_episodes=6)
    assert report.total_episodes == 6
    assert all(len(r.env_indices) == 1 and len(r.episode_ids) == 1 for r in env.resets)
    assert all(len(s.env_indices) == 1 and len(s.episode_ids) == 1 for s in env.steps)
    assert all(len(p.episode_info) == 1 for p in model.predicts)
    assert env.max_in_flight == 3
    # A lane that finishes starts its next episode at once, whatever the others do: lane 0
    # runs three 2-step episodes while lane 2 runs one 5-step episode; six in all start.
    assert report.total_steps == len(env.steps) == 3 * 2 + 2 * 3 + 5
    assert sorted((e.env_index, e.steps) for e in report.episodes) == [
        (0, 2),
        (0, 2),
        (0, 2),
        (1, 3),
        (1, 3),
        (2, 5),
    ]
    assert len(env.resets) == 6
    assert trio.current_time() == pytest.approx(0.06)


async def test_first_episodes_are_planned_in_lane_order(autojump_clock: MockClock) -> None:
    env = lane_env(episode_length=1)
    report = await run(env, FakeModel(), max_episodes=3, episode_seeds=[10, 11, 12])
    first = sorted(env.resets[:3], key=lambda r: r.env_indices[0])
    assert [(r.env_indices[0], list(r.seeds)) for r in first] == [(0, [10]), (1, [11]), (2, [12])]
    assert sorted((e.env_index, e.seed, e.index) for e in report.episodes) == [
        (0, 10, 0),
        (1, 11, 1),
        (2, 12, 2),
    ]


async def test_lanes_retire_once_enough_episodes_started(autojump_clock: MockClock) -> None:
    env = lane_env(episode_length=2)
    report = await run(env, FakeModel(), max_episodes=2)
    assert report.total_episodes == 2
    assert len(env.resets) == 2
    assert not report.advisories


async def test_waiting_lanes_fuse_into_one_predict_group(autojump_clock: MockClock) -> None:
    env = lane_env(episode_length=2, delays={"env.step": 0.01})
    model = FakeModel(fuses_predicts=True)
    report = await run(env, model, max_episodes=3)
    assert report.total_episodes == 3
    assert model.group_sizes == [3, 3]
    group = [r for r in report.telemetry if r.metric == "group.size"]
    assert group[0].avg == 3.0
    # Each lane still gets its own identity and request id.
    ids = [p.context.request_id for p in model.predicts]
    assert len(set(ids)) == len(ids)


async def test_a_fused_answer_of_the_wrong_length_fails_the_run(
    autojump_clock: MockClock,
) -> None:
    env = lane_env(episode_length=2, delays={"env.step": 0.01})
    with pytest.raises(ProtocolError) as info:
        await run(env, ShortModel(fuses_predicts=True), max_episodes=3)
    assert info.value.operation == "model.predict"
    assert "model endpoint local-model answered 2 results for a group of 3 predicts" in str(
        info.value
    )
    assert info.value.report is not None
    assert info.value.report.status == "failed"


async def test_without_fusion_each_lane_predicts_alone(autojump_clock: MockClock) -> None:
    model = FakeModel(fuses_predicts=False)
    await run(lane_env(episode_length=2), model, max_episodes=3)
    assert model.group_sizes == []
    assert len(model.predicts) == 6


async def test_a_failing_lane_fails_the_run(autojump_clock: MockClock) -> None:
    env = lane_env(episode_length=5, faults=[Fault("env.step", at=4)], delays={"env.step": 0.01})
    model = FakeModel()
    before = trio.lowlevel.current_statistics().tasks_living
    with pytest.raises(EnvError) as info:
        await run(env, model, max_episodes=10)
    assert info.value.lane in (0, 1, 2)
    assert info.value.operation == "env.step"
    assert trio.lowlevel.current_statistics().tasks_living == before
    assert model.released


async def test_lane_endpoint_episode_ids_are_uuid7(autojump_clock: MockClock) -> None:
    env = lane_env(episode_length=1)
    report = await run(env, FakeModel(), max_episodes=4)
    assert all(UUID7.match(e.episode_id) for e in report.episodes)


async def test_lanes_replay_chunks_per_lane(autojump_clock: MockClock) -> None:
    env = lane_env(num_envs=2, episode_length=[3, 5])
    model = FakeModel(chunk=2)
    report = await run(env, model, max_episodes=2)
    assert report.total_episodes == 2
    assert not any("lockstep" in a for a in report.advisories)
    # Lane 0: 3 steps -> 2 predicts; lane 1: 5 steps -> 3 predicts.
    assert len(model.predicts) == 5


async def test_prefetch_overlaps_the_next_predict_with_replay(autojump_clock: MockClock) -> None:
    env = FakeEnv(episode_length=6)
    model = FakeModel(chunk=3)
    report = await run(env, model, prefetch_lead=1)
    assert report.total_steps == 6
    # Predicts on the observations of steps 0, 2 and 4: each prefetch starts when one
    # frame of the current chunk is left, and its first frame (for that step) is skipped.
    assert [decode_observation(p.observation.leaves)[0, 0] for p in model.predicts] == [0, 2, 4]
    assert [a for _, (a,) in env.actions] == [0, 1, 0, 1, 0, 1]


async def test_prefetch_hides_predict_latency(autojump_clock: MockClock) -> None:
    delays = {"env.step": 0.1}
    slow = {"model.predict": 0.1}
    await run(FakeEnv(episode_length=6, delays=delays), FakeModel(chunk=3, delays=slow))
    serial = trio.current_time()
    start = trio.current_time()
    await run(
        FakeEnv(episode_length=6, delays=delays),
        FakeModel(chunk=3, delays=slow),
        prefetch_lead=1,
    )
    overlapped = trio.current_time() - start
    assert serial == pytest.approx(0.8)
    assert overlapped == pytest.approx(0.7)


async def test_prefetch_is_dropped_at_an_episode_end(autojump_clock: MockClock) -> None:
    env = FakeEnv(episode_length=2)
    model = FakeModel(chunk=3, delays={"model.predict": 0.01})
    report = await run(env, model, prefetch_lead=2, max_episodes=2)
    assert report.total_episodes == 2
    # Each episode: one predict, then a prefetch that the episode end cancels.
    phases = [p.context.request_id.split(":")[1] for p in model.predicts]
    assert phases.count("reset_observation") == 2


async def test_history_rows_for_replayed_steps(autojump_clock: MockClock) -> None:
    env = FakeEnv(episode_length=6)
    model = FakeModel(chunk=3, wants_history=True)
    await run(env, model, max_episodes=2, episode_seeds=[5, 6])
    steps = [(p.step, [h.step for h in p.history]) for p in model.predicts]
    # The counter runs across episodes (the reset does not advance it).
    assert steps == [(0, []), (3, [1, 2]), (6, []), (9, [7, 8])]
    row = model.predicts[1].history[0]
    assert row.episode is not None
    assert (row.episode.episode_id, row.episode.seed) == (
        model.predicts[1].episode_info[0].episode_id,
        5,
    )
    assert decode_observation(row.observation.leaves)[0, 0] == 1


async def test_no_history_unless_asked(autojump_clock: MockClock) -> None:
    model = FakeModel(chunk=3)
    await run(FakeEnv(episode_length=6), model)
    assert all(p.step is None and not p.history for p in model.predicts)


async def test_history_is_not_split_across_a_lockstep_vector(autojump_clock: MockClock) -> None:
    env = FakeEnv(num_envs=2, autoreset="next_step", episode_length=3)
    model = FakeModel(chunk=2, wants_history=True)
    report = await run(env, model, max_episodes=2)
    assert all(not p.history for p in model.predicts)
    assert any("observation history" in a for a in report.advisories)


async def test_lane_hooks_name_their_lane(autojump_clock: MockClock) -> None:
    hooks = Recorder()
    await driver(lane_env(num_envs=2, episode_length=1), FakeModel(), hooks, max_episodes=2).run()
    lanes = sorted(o.env_indices for o in hooks.of("observation_emitted"))
    assert lanes == [(0,), (1,)]
    assert hooks.of("session_started")[0].lanes_step_individually
