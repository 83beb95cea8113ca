"""A recorded run's Minari dataset holds exactly the report's episodes, as the env made them."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import trio
import trio.testing

import trio_rlmesh
from trio_rlmesh import EnvError, RecordingError, RunLocalOptions, SpecError, run_local
from trio_rlmesh.record import RecordOptions, open_recording
from trio_rlmesh.runtime import (
    ActionReceived,
    EpisodeCompleted,
    RuntimeDriver,
    RuntimeHooks,
    RuntimeReport,
)
from trio_rlmesh.transports.grpc import serve_env

from .envs import Balancer, CannotDraw, Chunks, Cycle, Stepper, needs_minari, rollout

pytestmark = needs_minari


def _dataset(path: Path) -> Any:
    import minari

    return minari.MinariDataset(path / "data")


def _assert_matches_report(dataset: Any, report: RuntimeReport) -> None:
    """Episode count, order, lengths, returns (1e-6) and end flags equal the report's."""
    episodes = list(dataset.iterate_episodes())
    assert len(episodes) == dataset.total_episodes == len(report.episodes)
    for episode, record in zip(episodes, report.episodes, strict=True):
        assert len(episode.rewards) == len(episode.actions) == record.steps
        assert len(episode.observations) == record.steps + 1
        assert float(np.sum(episode.rewards)) == pytest.approx(record.reward, abs=1e-6)
        assert bool(episode.terminations[-1]) == record.terminated
        assert bool(episode.truncations[-1]) == record.truncated
        assert not episode.terminations[:-1].any()
        assert not episode.truncations[:-1].any()
    metadata = list(dataset.storage.get_episode_metadata(range(dataset.total_episodes)))
    assert [m["trio_rlmesh.episode_id"] for m in metadata] == [
        e.episode_id for e in report.episodes
    ]


async def test_a_recorded_cartpole_run_equals_its_report_and_a_direct_rollout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "cartpole-eval-v0"
    options = RunLocalOptions(
        gym.make("CartPole-v1"),
        episode_seeds=(3, 4, 5),
        max_episodes=3,
        max_episode_steps=60,
        user_code="inline",
        record=path,
    )
    report = await run_local(Balancer(), options)
    dataset = _dataset(path)
    _assert_matches_report(dataset, report)
    assert dataset.observation_space == gym.make("CartPole-v1").observation_space
    assert dataset.action_space == gym.spaces.Discrete(2)
    for episode, record in zip(dataset.iterate_episodes(), report.episodes, strict=True):
        env = gym.make("CartPole-v1")
        obs, _ = env.reset(seed=record.seed)
        np.testing.assert_array_equal(episode.observations[0], obs)
        for t, action in enumerate(episode.actions):
            assert action == Balancer().predict(episode.observations[t])
            obs, reward, terminated, _, _ = env.step(action)
            np.testing.assert_array_equal(episode.observations[t + 1], obs)
            assert episode.rewards[t] == reward
        assert terminated == record.terminated
    # Minari finds it by name under its datasets root, and the metadata says what ran.
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    import minari

    loaded = minari.load_dataset("cartpole-eval-v0")
    assert loaded.total_episodes == 3
    meta = loaded.storage.metadata
    assert meta["trio_rlmesh.env_id"] == "CartPole-v1"
    assert meta["trio_rlmesh.model"] == "tests.record.envs.Balancer"
    assert meta["trio_rlmesh.episode_seeds"] == [3, 4, 5]
    assert meta["trio_rlmesh.version"] == trio_rlmesh.__version__
    assert meta["algorithm_name"] == "tests.record.envs.Balancer"
    seeds = [m["seed"] for m in loaded.storage.get_episode_metadata(range(3))]
    assert seeds == [3, 4, 5]
    # The env's own spec, with the run's cap: the dataset makes the env it ran again.
    for eval_env in (False, True):
        recovered = loaded.recover_environment(eval_env=eval_env).spec
        assert (recovered.id, recovered.max_episode_steps) == ("CartPole-v1", 60)


@pytest.mark.parametrize("data_format", ["hdf5", "arrow"])
def test_infos_observations_and_spaces_round_trip(tmp_path: Path, data_format: str) -> None:
    if data_format == "arrow":
        pytest.importorskip("pyarrow", reason="the arrow backend is optional (pip install pyarrow)")
    path = tmp_path / "stepper-v3"
    report = trio_rlmesh.run(
        Cycle(),
        Stepper(),
        episode_seeds=[0, 1, 2],
        max_episodes=3,
        record=RecordOptions(path, data_format=data_format),
    )
    dataset = _dataset(path)
    _assert_matches_report(dataset, report)
    for episode, seed in zip(dataset.iterate_episodes(), [0, 1, 2], strict=True):
        observations, rewards, infos = rollout(seed, episode.actions)
        np.testing.assert_array_equal(episode.observations, np.stack(observations))
        np.testing.assert_allclose(episode.rewards, rewards)
        # Every step's info, the reset's first; keys missing at some steps get a mask.
        np.testing.assert_array_equal(episode.infos["t"], [i["t"] for i in infos])
        np.testing.assert_array_equal(episode.infos["_pos"], [False] + [True] * len(rewards))
        np.testing.assert_array_equal(
            episode.infos["pos"], [[0.0, 0.0]] + [i["pos"] for i in infos[1:]]
        )
        outcome = [_text(v) for v in episode.infos["outcome"]]
        assert outcome == [""] * len(rewards) + [infos[-1]["outcome"]]
        assert list(episode.infos["_outcome"]) == [False] * len(rewards) + [True]


@pytest.mark.network
async def test_an_env_made_from_no_id_records_no_spec_and_a_given_one_is_recorded(
    tmp_path: Path,
) -> None:
    plain = RunLocalOptions(Stepper(), max_episodes=1, record=tmp_path / "plain-v0")
    await run_local(Cycle(), plain)
    assert _dataset(tmp_path / "plain-v0").spec.env_spec is None
    # A served env's origin is unknown here; the caller can say it.
    given = RecordOptions(
        tmp_path / "given-v0", env_spec="CartPole-v1", eval_env_spec=gym.spec("Acrobot-v1")
    )
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            address = await nursery.start(serve_env, gym.make("CartPole-v1"), "127.0.0.1:0")
            options = RunLocalOptions(address, max_episodes=1, max_episode_steps=10, record=given)
            await run_local(Balancer(), options)
            nursery.cancel_scope.cancel()
    dataset = _dataset(tmp_path / "given-v0")
    assert dataset.recover_environment().spec.id == "CartPole-v1"
    assert dataset.recover_environment(eval_env=True).spec.id == "Acrobot-v1"
    with pytest.raises(SpecError, match="'NoSuchEnv-v0' is no registered Gymnasium env"):
        RecordOptions(tmp_path / "bad-v0", env_spec="NoSuchEnv-v0")
    with pytest.raises(SpecError, match="a Gymnasium EnvSpec or a registered id, got int"):
        RecordOptions(tmp_path / "bad-v0", env_spec=3)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class SentActions(RuntimeHooks):
    """The action the env got, per step (one lane), and whether it was replayed."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, bool]] = []

    async def action_received(self, event: ActionReceived) -> None:
        (action,) = event.action.tolist()
        self.sent.append((action, event.replayed))


def test_replayed_chunk_frames_record_the_action_sent(tmp_path: Path) -> None:
    path = tmp_path / "chunks-v0"
    hooks = SentActions()
    options = RunLocalOptions(
        Stepper(), episode_seeds=(2, 4), max_episodes=2, execution_horizon=3, record=path
    )
    report = trio.run(lambda: run_local(Chunks(), options, hooks=hooks))
    assert any(replayed for _, replayed in hooks.sent)
    recorded = [int(a) for e in _dataset(path).iterate_episodes() for a in e.actions]
    sent = [action for action, _ in hooks.sent]
    assert recorded == sent
    assert len(sent) == report.total_steps


def test_lanes_of_a_lane_endpoint_never_mix(tmp_path: Path) -> None:
    path = tmp_path / "lanes-v0"
    seeds = tuple(range(9))
    report = trio_rlmesh.run(
        Cycle(), [Stepper() for _ in range(3)], episode_seeds=seeds, max_episodes=9, record=path
    )
    assert {e.env_index for e in report.episodes} == {0, 1, 2}
    dataset = _dataset(path)
    _assert_matches_report(dataset, report)
    for episode, record in zip(dataset.iterate_episodes(), report.episodes, strict=True):
        observations, rewards, _ = rollout(record.seed, episode.actions)
        np.testing.assert_array_equal(episode.observations, np.stack(observations))
        np.testing.assert_allclose(episode.rewards, rewards)


def test_a_next_step_vector_env_records_each_lane_by_itself(tmp_path: Path) -> None:
    path = tmp_path / "vector-v0"

    def vector() -> Any:
        return gym.vector.SyncVectorEnv(
            [Stepper for _ in range(2)], autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP
        )

    class BatchCycle:
        def predict_batch(self, observations: Any) -> Any:
            return np.array([Cycle().predict(row) for row in observations], dtype=np.int64)

    report = trio_rlmesh.run(BatchCycle(), vector, base_seed=7, max_episodes=6, record=path)
    dataset = _dataset(path)
    _assert_matches_report(dataset, report)
    for episode in dataset.iterate_episodes():
        # Each episode is one lane's own: its observations count its steps from 0, and
        # its infos are that lane's entries of the vector's per-lane lists.
        np.testing.assert_array_equal(
            episode.observations[:, 1], np.arange(len(episode.rewards) + 1)
        )
        np.testing.assert_array_equal(
            episode.infos["t"][1:], np.arange(1, len(episode.rewards) + 1)
        )


class Cancel(RuntimeHooks):
    """Cancels the driver when the ``at``-th episode is counted."""

    def __init__(self, at: int) -> None:
        self.at = at
        self.driver: RuntimeDriver | None = None
        self.records: list[Any] = []

    def started(self, value: Any = None) -> None:  # a task_status
        self.driver = value

    async def episode_completed(self, event: EpisodeCompleted) -> None:
        self.records.append(event.record)
        if len(self.records) == self.at:
            assert self.driver is not None
            self.driver.cancel("enough")


async def test_a_cancelled_run_leaves_exactly_its_finished_episodes(tmp_path: Path) -> None:
    path = tmp_path / "cancelled-v0"
    hooks = Cancel(at=4)
    options = RunLocalOptions(
        [Stepper() for _ in range(3)],
        episode_seeds=tuple(range(30)),
        max_episodes=30,
        user_code="inline",
        record=RecordOptions(path, max_pending_episodes=1),
    )
    report = await run_local(Cycle(), options, hooks=hooks, task_status=hooks)  # type: ignore[arg-type]
    assert report.status == "cancelled"
    # Seeds 0, 1, 2 start on lanes 0, 1, 2 and end at steps 3, 4, 5 (an episode of seed s
    # lasts 3 + s % 3 steps); seed 3 follows on lane 0 and ends at step 6; the next end is
    # seed 4's at step 8. The cancel asked at the fourth end stops the run before it. The
    # lanes are separate tasks, and a lane that ends an episode waits for the recorder's
    # thread, so seeds 2 and 3 may end in either order: the report lists episodes as they end.
    assert sorted(record.seed for record in report.episodes) == [0, 1, 2, 3]
    _assert_matches_report(_dataset(path), report)


async def test_the_callers_cancel_scope_still_leaves_the_counted_episodes(tmp_path: Path) -> None:
    path = tmp_path / "scope-v0"
    seen: list[Any] = []

    class CancelScopeAt(RuntimeHooks):
        async def episode_completed(self, event: EpisodeCompleted) -> None:
            seen.append(event.record)
            if len(seen) == 3:
                scope.cancel()

    options = RunLocalOptions(
        Stepper(), episode_seeds=tuple(range(10)), max_episodes=10, record=path
    )
    with trio.CancelScope() as scope:
        await run_local(Cycle(), options, hooks=CancelScopeAt())
    assert scope.cancelled_caught
    dataset = _dataset(path)
    assert dataset.total_episodes == len(seen) == 3
    assert [
        m["trio_rlmesh.episode_id"] for m in dataset.storage.get_episode_metadata(range(3))
    ] == [r.episode_id for r in seen]


class BreaksAt(Stepper):
    """Raises in ``step`` on the 3rd reset's 2nd step."""

    resets = 0

    def reset(self, **kwargs: Any) -> Any:
        BreaksAt.resets += 1
        return super().reset(**kwargs)

    def step(self, action: Any) -> Any:
        if BreaksAt.resets == 3 and self.t == 1:
            raise RuntimeError("the env broke")
        return super().step(action)


def test_a_failed_run_leaves_exactly_the_episodes_of_its_report(tmp_path: Path) -> None:
    path = tmp_path / "failed-v0"
    BreaksAt.resets = 0
    with pytest.raises(EnvError) as caught:
        trio_rlmesh.run(Cycle(), BreaksAt(), episode_seeds=range(5), max_episodes=5, record=path)
    report = caught.value.report
    assert report is not None
    assert len(report.episodes) == 2
    _assert_matches_report(_dataset(path), report)


def test_a_failure_before_any_episode_leaves_the_directories_as_they_were(
    tmp_path: Path,
) -> None:
    """A run that fails at its first render writes no episode: what the recording made goes,
    what was there before stays."""
    pytest.importorskip("imageio_ffmpeg", reason="videos need the record extra")
    path, videos = tmp_path / "kept-v0", tmp_path / "videos"
    path.mkdir()
    (path / "notes.txt").write_text("mine")
    videos.mkdir()
    (videos / "older.mp4").write_bytes(b"mine")
    record = RecordOptions(path, video=videos)
    with pytest.raises(EnvError, match="pygame is not installed"):
        trio_rlmesh.run(Cycle(), CannotDraw(render_mode="rgb_array"), max_episodes=2, record=record)
    assert sorted(p.name for p in path.iterdir()) == ["notes.txt"]
    assert sorted(p.name for p in videos.iterdir()) == ["older.mp4"]
    trio_rlmesh.run(Cycle(), Stepper(render_mode="rgb_array"), max_episodes=2, record=record)
    assert _dataset(path).total_episodes == 2
    assert sorted(p.name for p in videos.iterdir()) == [
        "episode-000000.mp4",
        "episode-000001.mp4",
        "older.mp4",
    ]


async def test_a_run_cancelled_before_an_episode_counted_leaves_nothing(tmp_path: Path) -> None:
    path = tmp_path / "runs" / "early-v0"
    hooks = Cancel(at=0)  # cancelled at its first reset, below

    class CancelAtReset(RuntimeHooks):
        async def reset_completed(self, event: Any) -> None:
            assert hooks.driver is not None
            hooks.driver.cancel("early")

    options = RunLocalOptions(Stepper(), max_episodes=3, record=path)
    report = await run_local(Cycle(), options, hooks=CancelAtReset(), task_status=hooks)  # type: ignore[arg-type]
    assert (report.status, report.episodes) == ("cancelled", ())
    assert not (tmp_path / "runs").exists()


def test_a_writer_failure_stops_the_run_and_keeps_what_was_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trio_rlmesh.record import _writer

    path = tmp_path / "full-v0"
    original = _writer.DatasetWriter._write_dataset
    calls = []

    def fails_second(self: Any, episodes: Any, first: int) -> None:
        calls.append(len(episodes))
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        original(self, episodes, first)

    monkeypatch.setattr(_writer.DatasetWriter, "_write_dataset", fails_second)
    with pytest.raises(RecordingError, match="No space left on device"):
        trio_rlmesh.run(Cycle(), Stepper(), episode_seeds=range(50), max_episodes=50, record=path)
    dataset = _dataset(path)
    assert dataset.total_episodes == calls[0]
    assert len(list(dataset.iterate_episodes())) == calls[0]


async def test_a_slow_writer_holds_the_run_back_with_bounded_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trio_rlmesh.record import _writer

    path = tmp_path / "slow-v0"
    entered, release = threading.Event(), threading.Event()
    batches: list[int] = []
    original = _writer.DatasetWriter.write

    def slow(self: Any, batch: Any) -> int:
        batches.append(len(batch))
        entered.set()
        release.wait()
        return original(self, batch)

    monkeypatch.setattr(_writer.DatasetWriter, "write", slow)
    counted: list[Any] = []

    class Count(RuntimeHooks):
        async def episode_completed(self, event: EpisodeCompleted) -> None:
            counted.append(event.record)

    options = RunLocalOptions(
        Stepper(),
        episode_seeds=tuple(range(12)),
        max_episodes=12,
        user_code="inline",
        record=RecordOptions(path, max_pending_episodes=2),
    )
    reports: list[RuntimeReport] = []

    async def evaluate() -> None:
        reports.append(await run_local(Cycle(), options, hooks=Count()))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(evaluate)
        await trio.to_thread.run_sync(entered.wait)
        await trio.testing.wait_all_tasks_blocked()
        # The writer holds its first batch; the channel holds 2; one more is counted and
        # waits to be handed over. Nothing else runs.
        assert len(counted) == batches[0] + 2 + 1
        release.set()
    assert len(reports[0].episodes) == 12
    _assert_matches_report(_dataset(path), reports[0])


def test_a_dataset_directory_must_be_new_and_named_like_a_dataset_id(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="name-v<N>"):
        trio_rlmesh.run(Cycle(), Stepper(), max_episodes=1, record=tmp_path / "no-version")
    path = tmp_path / "taken-v1"
    trio_rlmesh.run(Cycle(), Stepper(), max_episodes=1, record=path)
    with pytest.raises(SpecError, match="already holds a dataset"):
        trio_rlmesh.run(Cycle(), Stepper(), max_episodes=1, record=path)


async def test_open_recording_records_runs_driven_by_hand(tmp_path: Path) -> None:
    path = tmp_path / "by-hand-v0"
    async with open_recording(path, metadata={"model": "cycle"}) as recording:
        first = await run_local(
            Cycle(),
            RunLocalOptions(Stepper(), episode_seeds=(0, 1), max_episodes=2),
            hooks=recording,
        )
        second = await run_local(
            Cycle(), RunLocalOptions(Stepper(), episode_seeds=(2,), max_episodes=1), hooks=recording
        )
    dataset = _dataset(path)
    combined = first.episodes + second.episodes
    assert dataset.total_episodes == 3
    lengths = [len(e.rewards) for e in dataset.iterate_episodes()]
    assert lengths == [e.steps for e in combined]
    assert len(dataset.storage.metadata["trio_rlmesh.sessions"]) == 2
    assert dataset.storage.metadata["algorithm_name"] == "cycle"
