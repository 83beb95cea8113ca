"""Recording a run against the real ``rlmesh.EnvServer`` 0.1.0 (``nox -s interop``)."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from trio_rlmesh import RunLocalOptions, run_local
from trio_rlmesh.record import RecordOptions

from ..interop.conftest import rlmesh_env_server, script_server
from .envs import Balancer, Cycle, needs_minari, read_video, rollout

SERVE = Path(__file__).with_name("serve_rlmesh.py")

pytestmark = [pytest.mark.interop, needs_minari]


@pytest.mark.parametrize("kind", ["cartpole", "lanes4"])
async def test_a_run_against_rlmesh_records_its_report_and_a_direct_rollout(
    tmp_path: Path, kind: str
) -> None:
    import minari

    path = tmp_path / f"rlmesh-{kind}-v0"
    seeds = tuple(range(10, 18))
    async with rlmesh_env_server(kind) as address:
        options = RunLocalOptions(
            address, episode_seeds=seeds, max_episodes=8, max_episode_steps=50, record=path
        )
        report = await run_local(Balancer(), options)
    dataset = minari.MinariDataset(path / "data")
    assert dataset.total_episodes == len(report.episodes) == 8
    assert dataset.observation_space == gym.make("CartPole-v1").observation_space
    assert dataset.storage.metadata["trio_rlmesh.env_id"] == "CartPole-v1"
    for episode, record in zip(dataset.iterate_episodes(), report.episodes, strict=True):
        assert len(episode.rewards) == record.steps
        assert float(np.sum(episode.rewards)) == pytest.approx(record.reward, abs=1e-6)
        assert bool(episode.truncations[-1]) == record.truncated
        env = gym.make("CartPole-v1")
        obs, _ = env.reset(seed=record.seed)
        np.testing.assert_array_equal(episode.observations[0], obs)
        for t, action in enumerate(episode.actions):
            obs, reward, _, _, _ = env.step(action)
            np.testing.assert_array_equal(episode.observations[t + 1], obs)
            assert episode.rewards[t] == reward
    assert {r.env_index for r in report.episodes} == ({0} if kind == "cartpole" else {0, 1, 2, 3})


async def test_videos_of_an_env_rendered_by_rlmesh(tmp_path: Path) -> None:
    """The frames come through rlmesh's own Render answer: one per observation."""
    pytest.importorskip("rlmesh")
    pytest.importorskip("imageio_ffmpeg", reason="videos need the record extra")
    record = RecordOptions(tmp_path / "stepper-v0", video=tmp_path / "videos")
    async with script_server(SERVE, "stepper", {"PYTHONWARNINGS": "ignore"}) as address:
        report = await run_local(
            Cycle(),
            RunLocalOptions(address, episode_seeds=(0, 1, 2), max_episodes=3, record=record),
        )
    videos = sorted((tmp_path / "videos").iterdir())
    assert len(videos) == len(report.episodes) == 3
    for video, episode in zip(videos, report.episodes, strict=True):
        frames = read_video(video, 8, 10)
        # Stepper paints a red band 1 + t columns wide at step t.
        bands = [int((frame[3, :, 0] > 100).sum()) for frame in frames]
        assert bands == list(range(1, episode.steps + 2))
    import minari

    dataset = minari.MinariDataset(tmp_path / "stepper-v0" / "data")
    for recorded, episode in zip(dataset.iterate_episodes(), report.episodes, strict=True):
        observations, _, _ = rollout(episode.seed, recorded.actions)
        np.testing.assert_array_equal(recorded.observations, np.stack(observations))
