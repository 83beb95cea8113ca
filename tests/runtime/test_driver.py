from __future__ import annotations

import numpy as np
import pytest
import trio
from trio.testing import MockClock

from trio_rlmesh import EnvError, Error, ProtocolError, TransportError
from trio_rlmesh._errors import where
from trio_rlmesh.protocol import meta_to_python, model_v1
from trio_rlmesh.runtime._ids import deterministic_reset_seed
from trio_rlmesh.runtime._spec import DEFAULT_MAX_EPISODE_STEPS
from trio_rlmesh.testing import FakeEnv, FakeModel, Fault
from trio_rlmesh.testing._fakes import decode_observation

from ._support import UUID7, driver, row, run


async def test_one_episode_completes_and_closes_the_route(autojump_clock: MockClock) -> None:
    env, model = FakeEnv(episode_length=1), FakeModel()
    report = await run(env, model, close_env_on_end=True)
    assert (report.status, report.reason) == ("completed", None)
    assert (report.total_steps, report.total_episodes) == (1, 1)
    predict = row(report, "model.predict")
    assert predict.count == 1
    rnd = row(report, "runner.round")
    assert rnd.count == 1
    assert rnd.avg >= predict.avg
    assert row(report, "env.step", "endpoint.total").avg == 0.002
    assert row(report, "model.predict", "predict.adapter").count == 1
    assert env.closed
    assert model.released
    assert model.releases[0].reason == "completed requested episodes"


async def test_close_env_only_when_asked(autojump_clock: MockClock) -> None:
    env = FakeEnv(episode_length=1)
    await run(env, FakeModel())
    assert not env.closed


async def test_runtime_mints_uuid7_ids_and_evicts_each_finished_episode(
    autojump_clock: MockClock,
) -> None:
    env, model = FakeEnv(episode_length=2), FakeModel()
    report = await run(env, model, max_episodes=2)
    assert len(model.evicted) == 2
    assert all(len(ids) == 1 and UUID7.match(ids[0]) for ids in model.evicted)
    assert [ids[0] for ids in model.evicted] == [e.episode_id for e in report.episodes]
    assert [r.episode_ids[0] for r in env.resets] == [e.episode_id for e in report.episodes]
    assert report.episodes[0].episode_id != report.episodes[1].episode_id


async def test_replays_chunk_frames_without_predicting(autojump_clock: MockClock) -> None:
    env, model = FakeEnv(episode_length=6), FakeModel(chunk=3)
    report = await run(env, model)
    assert (report.total_steps, report.total_episodes) == (6, 1)
    assert len(model.predicts) == 2
    assert [a for _, (a,) in env.actions] == [0, 1, 0, 0, 1, 0]
    # Predicts are made on the reset observation and on the third step's observation.
    assert [decode_observation(p.observation.leaves)[0, 0] for p in model.predicts] == [0, 3]
    assert row(report, "model.predict").count == 2
    assert row(report, "env.step").count == 6


async def test_non_terminal_steps_continue(autojump_clock: MockClock) -> None:
    env, model = FakeEnv(episode_length=2), FakeModel()
    report = await run(env, model)
    assert (report.total_steps, report.total_episodes, len(model.predicts)) == (2, 1, 2)
    (episode,) = report.episodes
    assert (episode.steps, episode.reward, episode.terminated, episode.truncated) == (
        2,
        2.0,
        True,
        False,
    )


async def test_request_ids_and_contexts(autojump_clock: MockClock) -> None:
    env, model = FakeEnv(episode_length=1), FakeModel()
    await run(env, model, max_episodes=2)
    ids = [p.context.request_id for p in model.predicts]
    assert ids == ["fake-env:reset_observation:000001", "fake-env:reset_observation:000003"]
    assert [c.session_id for c in (p.context for p in model.predicts)] == ["fake-session"] * 2
    assert model.releases[0].context.request_id == "fake-env:release_adapter:000005"


async def test_step_observation_phase_between_resets(autojump_clock: MockClock) -> None:
    env, model = FakeEnv(episode_length=3), FakeModel()
    await run(env, model)
    phases = [p.context.request_id.split(":")[1] for p in model.predicts]
    assert phases == ["reset_observation", "step_observation", "step_observation"]


async def test_mismatched_context_is_a_protocol_error(autojump_clock: MockClock) -> None:
    env, model = FakeEnv(), FakeModel(mismatch_context=True)
    with pytest.raises(ProtocolError, match="mismatched route identity") as info:
        await run(env, model, close_env_on_end=True)
    assert info.value.report is not None
    assert info.value.report.status == "failed"
    assert env.closed
    assert model.released


async def test_zero_action_frames_is_a_protocol_error(autojump_clock: MockClock) -> None:
    with pytest.raises(ProtocolError, match="no actions") as info:
        await run(FakeEnv(), FakeModel(empty_actions=True))
    assert info.value.operation == "model.predict"


async def test_explicit_seeds_reach_resets_and_predicts(autojump_clock: MockClock) -> None:
    env, model = FakeEnv(episode_length=1), FakeModel()
    report = await run(env, model, max_episodes=3, episode_seeds=[7, 8])
    assert [list(r.seeds) for r in env.resets] == [[7], [8], []]
    assert [p.episode_info[0].seed for p in model.predicts] == [7, 8, None]
    assert [e.seed for e in report.episodes] == [7, 8, None]


async def test_base_seed_is_deterministic_per_generation(autojump_clock: MockClock) -> None:
    seeds = []
    for _ in range(2):
        env = FakeEnv(episode_length=1)
        await run(env, FakeModel(), max_episodes=2, base_seed=1234, session_id="session-1")
        seeds.append([list(r.seeds) for r in env.resets])
    assert (
        seeds[0]
        == seeds[1]
        == [
            [deterministic_reset_seed(1234, "session-1", 0, 0)],
            [deterministic_reset_seed(1234, "session-1", 1, 0)],
        ]
    )


async def test_unseeded_episodes_have_no_seed(autojump_clock: MockClock) -> None:
    env, model = FakeEnv(episode_length=1), FakeModel()
    await run(env, model)
    assert list(env.resets[0].seeds) == []
    assert model.predicts[0].episode_info[0].seed is None


async def test_trial_index_sent_only_when_declared(autojump_clock: MockClock) -> None:
    env = FakeEnv(episode_length=1, reset_options=["trial_index"])
    report = await run(env, FakeModel(), max_episodes=2, trial_index_base=10)
    assert [meta_to_python(r.options) for r in env.resets] == [
        {"trial_index": 10},
        {"trial_index": 11},
    ]
    assert [e.trial for e in report.episodes] == [10, 11]
    plain = FakeEnv(episode_length=1)
    await run(plain, FakeModel(), trial_index_base=10)
    assert plain.resets[0].options is None


async def test_reset_carries_timeout_and_ids(autojump_clock: MockClock) -> None:
    env = FakeEnv(episode_length=1)
    await run(env, FakeModel(), limits={"env_reset_timeout": 2.5, "env_step_timeout": None})
    assert env.resets[0].timeout_ms == 2500
    assert list(env.resets[0].env_indices) == []
    assert env.steps[0].timeout_ms == 0


async def test_next_step_vector_completes_lanes_without_resetting(
    autojump_clock: MockClock,
) -> None:
    env, model = (
        FakeEnv(num_envs=4, autoreset="next_step", episode_length=[2, 3, 2, 4]),
        FakeModel(),
    )
    report = await run(env, model, max_episodes=8)
    assert len(env.resets) == 1
    assert report.total_episodes == 8
    assert len(model.predicts) == report.env_step_calls == len(env.steps)
    # RLMesh's RunResult.total_steps: the counted episodes' lane steps, not the calls.
    assert report.total_steps == sum(e.steps for e in report.episodes)
    assert report.total_steps > report.env_step_calls
    assert all(len(p.episode_info) == 4 for p in model.predicts)
    # The autoreset step's reward 0 is not counted: every episode's reward is its length.
    assert all(e.reward == e.steps == [2, 3, 2, 4][e.env_index] for e in report.episodes)
    # The id minted at completion is pushed on the next step and then adopted.
    first_lane0 = report.episodes[0]
    assert first_lane0.env_index in (0, 2)
    # Lane 0 ends at step 2: step 2 still pushes its old id, step 3 pushes the minted one,
    # which the episode started by that roll then carries.
    cold = env.resets[0].episode_ids[0]
    assert env.steps[1].episode_ids[0] == cold
    rolled = env.steps[2].episode_ids[0]
    assert rolled != cold
    assert UUID7.match(rolled)
    assert rolled in [e.episode_id for e in report.episodes if e.env_index == 0]


async def test_max_episodes_is_exact_when_lanes_finish_together(autojump_clock: MockClock) -> None:
    env, model = FakeEnv(num_envs=2, autoreset="next_step", episode_length=2), FakeModel()
    report = await run(env, model, max_episodes=1)
    assert report.total_episodes == 1
    assert report.total_steps == 2
    assert "dropped 1 completion(s) beyond max_episodes=1" in report.advisories


async def test_chunking_on_a_lockstep_vector_discards_frames_with_advisory(
    autojump_clock: MockClock,
) -> None:
    env = FakeEnv(num_envs=2, autoreset="next_step", episode_length=[2, 3])
    model = FakeModel(chunk=5)
    report = await run(env, model, max_episodes=4)
    assert report.total_episodes == 4
    assert len(model.predicts) < report.total_steps
    evicted = [i for ids in model.evicted for i in ids]
    assert len(evicted) >= report.total_episodes
    assert all(UUID7.match(i) for i in evicted)
    assert any("lockstep vector env" in a for a in report.advisories)


async def test_next_step_eviction_follows_the_terminal_predict(autojump_clock: MockClock) -> None:
    env = FakeEnv(num_envs=2, autoreset="next_step", episode_length=[1, 5])
    model = FakeModel()
    report = await run(env, model, max_episodes=2)
    first = report.episodes[0].episode_id
    # The terminal observation's predict still names the finished episode...
    last_use = max(i for i, p in enumerate(model.predicts) if p.episode_info[0].episode_id == first)
    assert last_use == 1
    # ...and it is evicted once (after that predict), not before.
    assert [ids for ids in model.evicted if first in ids] == [[first]]


async def test_runtime_step_cap_truncates_and_drops_the_env_echo(autojump_clock: MockClock) -> None:
    env = FakeEnv(episode_length=None)
    report = await run(env, FakeModel(), max_episodes=2, max_episode_steps=4)
    assert report.total_steps == 8
    assert [(e.steps, e.reward, e.truncated, e.terminated) for e in report.episodes] == [
        (4, 4.0, True, False)
    ] * 2
    assert any("stale episode completion" in a for a in report.advisories)


async def test_runtime_time_cap_uses_the_trio_clock(autojump_clock: MockClock) -> None:
    env = FakeEnv(episode_length=None, delays={"env.step": 0.01})
    report = await run(env, FakeModel(), max_episode_seconds=0.05)
    (episode,) = report.episodes
    assert episode.truncated
    assert episode.steps == 5
    assert episode.duration_s == pytest.approx(0.05)
    assert episode.step_ms == pytest.approx(10.0)


async def test_implicit_step_cap_under_driver_owned_resets(autojump_clock: MockClock) -> None:
    d = driver(FakeEnv(), FakeModel())
    assert d._book.step_cap == DEFAULT_MAX_EPISODE_STEPS
    vector = driver(FakeEnv(num_envs=2, autoreset="next_step"), FakeModel())
    assert vector._book.step_cap is None


async def test_success_from_final_info(autojump_clock: MockClock) -> None:
    env = FakeEnv(episode_length=1, final_info={"is_success": True})
    report = await run(env, FakeModel())
    assert report.episodes[0].success is True
    report = await run(FakeEnv(episode_length=1, final_info={"success": 0}), FakeModel())
    assert report.episodes[0].success is False


async def test_reset_adapter_runs_in_the_background(autojump_clock: MockClock) -> None:
    env = FakeEnv(episode_length=1)
    model = FakeModel(delays={"model.reset_adapter": 1.0})
    report = await run(env, model, max_episodes=3)
    assert report.total_episodes == 3
    # The loop never waited for an eviction; the run ends when the last one finishes.
    assert trio.current_time() == 1.0
    assert row(report, "model.reset_adapter").count == 3


async def test_reset_adapter_failures_are_counted_not_fatal(autojump_clock: MockClock) -> None:
    model = FakeModel(faults=[Fault("model.reset_adapter", at=1)])
    report = await run(FakeEnv(episode_length=1), model, max_episodes=2)
    assert report.status == "completed"
    assert any("model.reset_adapter failed 1 time(s)" in a for a in report.advisories)


async def test_hung_release_is_bounded_by_service_close(autojump_clock: MockClock) -> None:
    model = FakeModel(faults=[Fault("model.release_adapter", kind="hang")])
    report = await run(FakeEnv(episode_length=1), model, limits={"service_close_timeout": 0.05})
    assert report.total_episodes == 1
    assert not model.released
    assert trio.current_time() == 0.05
    assert any("model.release_adapter failed" in a and "timed out" in a for a in report.advisories)


async def test_env_error_keeps_its_class_and_gains_context(autojump_clock: MockClock) -> None:
    env = FakeEnv(episode_length=2, faults=[Fault("env.step", at=4, recoverable=True)])
    model = FakeModel()
    with pytest.raises(EnvError) as info:
        await run(env, model, max_episodes=3, close_env_on_end=True)
    error = info.value
    assert error.recoverable
    assert (error.operation, error.step, error.lane) == ("env.step", 4, 0)
    assert error.report is not None
    assert error.report.status == "failed"
    assert error.report.reason == str(error)
    assert len(error.report.episodes) == 1
    assert error.report.env_step_calls == 3
    assert error.report.total_steps == 2  # the one counted episode
    assert env.closed
    assert model.released
    assert model.releases[0].reason == str(error)


async def test_endpoint_error_chain_is_kept(autojump_clock: MockClock) -> None:
    class Chained(FakeEnv):
        async def step(self, request):  # type: ignore[no-untyped-def]
            try:
                raise ConnectionResetError("peer went away")
            except ConnectionResetError as exc:
                raise EnvError("transport dropped", recoverable=True, lane=7) from exc

    with pytest.raises(EnvError) as info:
        await run(Chained(), FakeModel())
    assert isinstance(info.value.__cause__, ConnectionResetError)
    # Context the endpoint already set is never overwritten.
    assert (info.value.lane, info.value.operation, info.value.step) == (7, "env.step", 1)


async def test_reset_failure_names_the_reset(autojump_clock: MockClock) -> None:
    env = FakeEnv(episode_length=1, faults=[Fault("env.reset", at=2)])
    with pytest.raises(EnvError) as info:
        await run(env, FakeModel(), max_episodes=2)
    assert (info.value.operation, info.value.step, info.value.recoverable) == (
        "env.reset",
        1,
        False,
    )


async def test_foreign_exceptions_are_wrapped(autojump_clock: MockClock) -> None:
    class Broken(FakeModel):
        async def predict(self, request: model_v1.PredictRequest):  # type: ignore[no-untyped-def]
            raise KeyError("boom")

    with pytest.raises(Error) as info:
        await run(FakeEnv(), Broken())
    assert type(info.value).__name__ == "ModelError"
    assert isinstance(info.value.__cause__, KeyError)
    assert info.value.operation == "model.predict"


async def test_report_json_schema(autojump_clock: MockClock) -> None:
    report = await run(FakeEnv(episode_length=2), FakeModel(), max_episodes=2, episode_seeds=[3, 4])
    data = report.to_json_dict()
    assert list(data) == [
        "status",
        "reason",
        "total_steps",
        "env_step_calls",
        "mean_reward",
        "success_rate",
        "episodes",
        "telemetry",
        "summary",
        "setup",
        "pairing",
    ]
    assert data["pairing"] is None  # no spec'd model
    assert (data["total_steps"], data["env_step_calls"], data["success_rate"]) == (4, 4, None)
    assert data["status"] == "completed"
    assert data["mean_reward"] == 2.0
    assert [list(e) for e in data["episodes"]] == [
        [
            "index",
            "seed",
            "steps",
            "reward",
            "terminated",
            "truncated",
            "success",
            "duration_s",
            "endpoint",
        ]
    ] * 2
    # An env with no address (here a fake) names no endpoint.
    assert [e["endpoint"] for e in data["episodes"]] == [None, None]
    assert [e["seed"] for e in data["episodes"]] == [3, 4]
    assert all(
        list(r) == ["op", "metric", "unit", "count", "avg", "p50", "p95", "p99"]
        for r in data["telemetry"]
    )
    import json

    json.dumps(data)


async def test_run_is_single_shot(autojump_clock: MockClock) -> None:
    d = driver(FakeEnv(episode_length=1), FakeModel())
    await d.run()
    with pytest.raises(RuntimeError, match="runs once"):
        await d.run()


async def test_invalid_spec_has_no_side_effects(autojump_clock: MockClock) -> None:
    env, model = FakeEnv(), FakeModel()
    with pytest.raises(Error, match="max_episodes"):
        await run(env, model, max_episodes=0, close_env_on_end=True)
    assert (env.resets, model.predicts, model.releases, env.closed) == ([], [], [], False)


async def test_episode_predict_and_step_means(autojump_clock: MockClock) -> None:
    env = FakeEnv(episode_length=2, delays={"env.step": 0.02})
    model = FakeModel(delays={"model.predict": 0.005})
    report = await run(env, model)
    (episode,) = report.episodes
    assert episode.predict_ms == pytest.approx(5.0)
    assert episode.step_ms == pytest.approx(20.0)
    assert episode.duration_s == pytest.approx(0.05)


def test_observation_helper() -> None:
    rows = decode_observation([np.arange(8, dtype="<f4").tobytes()])
    assert rows.shape == (2, 4)


class _LosesItsServer(FakeModel):
    """A model whose server goes away at its third predict, as a killed model server's
    client reports it (an unrecoverable TransportError without the runtime's step)."""

    calls = 0

    async def predict(self, request):  # type: ignore[no-untyped-def]
        self.calls += 1
        if self.calls == 3:
            raise TransportError(
                f"connection lost during {where('model.predict', 'tcp://h:1', None, None)}: "
                "the peer closed the connection",
                operation="model.predict",
                address="tcp://h:1",
            )
        return await super().predict(request)


async def test_a_lost_model_server_is_named_with_its_step_and_not_released(
    autojump_clock: MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    model = _LosesItsServer()
    with pytest.raises(TransportError) as info:
        await run(FakeEnv(episode_length=5), model, max_episodes=2, close_env_on_end=True)
    assert str(info.value) == (
        "connection lost during model.predict to tcp://h:1 at step 2 on lane 0: "
        "the peer closed the connection"
    )
    assert (info.value.step, info.value.lane) == (2, 0)
    # No release over the connection that is gone, and no warning that "the run goes on".
    assert model.releases == []
    assert not [r for r in caplog.records if "release_adapter" in r.getMessage()]


async def test_a_release_that_fails_at_the_end_is_not_said_to_let_the_run_go_on(
    autojump_clock: MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    model = FakeModel(faults=[Fault("model.release_adapter")])
    await run(FakeEnv(episode_length=1), model)
    [record] = [r for r in caplog.records if "release_adapter" in r.getMessage()]
    assert record.getMessage().startswith("release_adapter failed (as the run ended): ModelError")
