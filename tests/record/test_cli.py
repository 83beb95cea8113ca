"""``trio-rlmesh run --record/--record-video`` and ``trio-rlmesh show``."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import trio_rlmesh
from trio_rlmesh._cli import main
from trio_rlmesh.record import RecordOptions, _options

from ..cli.support import serving, start, stop, wait_for
from .envs import Cycle, Stepper, needs_minari, read_video, rollout

PNG = b"\x89PNG\r\n\x1a\n"


def _dataset(path: Path) -> Any:
    import minari

    return minari.MinariDataset(path / "data")


def _matches(dataset: Any, episodes: list[dict[str, Any]]) -> None:
    """The dataset holds the JSON report's episodes: count, lengths, returns, seeds."""
    recorded = list(dataset.iterate_episodes())
    assert len(recorded) == dataset.total_episodes == len(episodes)
    for episode, expected in zip(recorded, episodes, strict=True):
        assert len(episode.rewards) == expected["steps"]
        assert float(np.sum(episode.rewards)) == pytest.approx(expected["reward"], abs=1e-6)
        assert bool(episode.terminations[-1]) == expected["terminated"]
        assert bool(episode.truncations[-1]) == expected["truncated"]
    # Minari leaves out an episode's seed when it had none.
    metadata = dataset.storage.get_episode_metadata(range(len(episodes)))
    seeds = [m.get("seed") for m in metadata]
    assert seeds == [e["seed"] for e in episodes]


@needs_minari
def test_run_record_then_show_and_plot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # a relative DATASET_DIR
    argv = ["run", "--seeds", "0..3", "--max-episode-steps", "40", "--no-progress"]
    assert main([*argv, "--json", "report.json", "--record", "runs/cartpole-v0"]) == 0
    report = json.loads(Path("report.json").read_text())
    _matches(_dataset(tmp_path / "runs" / "cartpole-v0"), report["episodes"])
    assert capsys.readouterr().out.splitlines()[-2:] == [
        "report written to report.json",
        "dataset written to runs/cartpole-v0 (4 episodes)",
    ]
    assert main(["show", "runs/cartpole-v0", "--plot", "plots/returns.png"]) == 0
    printed = capsys.readouterr().out
    assert "env       CartPole-v1" in printed
    assert "model     trio-rlmesh heuristic CartPole policy" in printed
    assert "episodes  4 (0 terminated, 4 truncated)" in printed
    assert "steps     160 (mean length 40.0)" in printed
    assert "return    mean 40.000" in printed
    # The intervals of the run's own report, as it printed them.
    intervals = report["summary"]
    assert (intervals["mean"], intervals["iqm"]) == (40.0, 40.0)
    assert "intervals mean 40.00 [40.00, 40.00] · IQM 40.00 [40.00, 40.00] (n=4)" in printed
    assert Path("plots/returns.png").read_bytes().startswith(PNG)


@pytest.mark.network
@needs_minari
def test_run_records_a_served_env_with_videos(tmp_path: Path) -> None:
    """serve-env as a process, then ``run --env ADDR --record --record-video``."""
    pytest.importorskip("imageio_ffmpeg", reason="videos need the record extra")

    env_argv = ["serve-env", "tests.record.envs:Stepper", "--env-arg", "render_mode=rgb_array"]
    with serving(env_argv) as env:
        code = main(
            [
                *("run", "--env", env, "--model", "tests.record.envs:Cycle", "--seeds", "0..4"),
                *("--no-progress", "--json", str(tmp_path / "report.json")),
                *("--record", str(tmp_path / "stepper-v2")),
                *("--record-video", str(tmp_path / "videos")),
            ]
        )
    assert code == 0
    episodes = json.loads((tmp_path / "report.json").read_text())["episodes"]
    dataset = _dataset(tmp_path / "stepper-v2")
    _matches(dataset, episodes)
    # Equal to a direct Gymnasium rollout with the same seeds and the recorded actions.
    for episode, expected in zip(dataset.iterate_episodes(), episodes, strict=True):
        observations, rewards, _ = rollout(expected["seed"], episode.actions)
        np.testing.assert_array_equal(episode.observations, np.stack(observations))
        np.testing.assert_allclose(episode.rewards, rewards)
    assert dataset.storage.metadata["trio_rlmesh.model"] == "tests.record.envs:Cycle"
    videos = sorted((tmp_path / "videos").iterdir())
    assert [v.name for v in videos] == [f"episode-{i:06d}.mp4" for i in range(5)]
    for video, expected in zip(videos, episodes, strict=True):
        frames = read_video(video, 8, 10)
        # One frame per observation: the reset's, then one per step. Stepper paints a
        # red band 1 + t columns wide (7x9 frames are padded to 8x10 for H.264).
        assert frames.shape == (expected["steps"] + 1, 8, 10, 3)
        assert [int((f[3, :, 0] > 100).sum()) for f in frames] == list(
            range(1, expected["steps"] + 2)
        )


def test_videos_alone_need_no_minari(tmp_path: Path) -> None:
    """Videos work on every Python (3.10 included): no dataset, no Minari."""
    pytest.importorskip("imageio_ffmpeg", reason="videos need the record extra")
    report = trio_rlmesh.run(
        Cycle(),
        Stepper(render_mode="rgb_array"),
        episode_seeds=[4, 5],
        max_episodes=2,
        record=RecordOptions(video=tmp_path / "videos"),
    )
    videos = sorted((tmp_path / "videos").iterdir())
    assert [v.name for v in videos] == ["episode-000000.mp4", "episode-000001.mp4"]
    for video, episode in zip(videos, report.episodes, strict=True):
        frames = read_video(video, 8, 10)
        assert [int((f[3, :, 0] > 100).sum()) for f in frames] == list(range(1, episode.steps + 2))


def test_record_video_of_an_env_that_cannot_render_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("imageio_ffmpeg", reason="videos need the record extra")
    code = main(
        [
            *("run", "--env", "tests.record.envs:Stepper", "--seeds", "0"),
            *("--model", "tests.record.envs:Cycle", "--no-progress"),
            *("--record-video", str(tmp_path / "videos")),
        ]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert "recording videos needs an env that renders rgb_array frames" in err
    assert "render mode None" in err
    assert '--env-kwargs \'{"render_mode": "rgb_array"}\'' in err
    assert not (tmp_path / "videos").exists() or not any((tmp_path / "videos").iterdir())


def test_the_documented_record_video_command_records_cartpole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``run --env gymnasium:CartPole-v1 --record-video DIR``, as docs/recording.md has it:
    the env is made with rgb_array frames, drawn without a display."""
    pytest.importorskip("imageio_ffmpeg", reason="videos need the record extra")
    pytest.importorskip("pygame", reason="CartPole's frames need the record extra")
    monkeypatch.chdir(tmp_path)
    for variable in ("SDL_VIDEODRIVER", "SDL_AUDIODRIVER"):
        monkeypatch.delenv(variable, raising=False)  # restored after the test
    argv = ["run", "--env", "gymnasium:CartPole-v1", "--record-video", "videos"]
    code = main([*argv, "--seeds", "0,1", "--max-episode-steps", "5", "--no-progress"])
    assert code == 0
    videos = sorted(Path("videos").iterdir())
    assert [v.name for v in videos] == ["episode-000000.mp4", "episode-000001.mp4"]
    for video in videos:
        frames = read_video(video, 400, 600)
        assert len(frames) == 6  # the reset's frame, then one per step
        assert frames[0].mean() > 200  # CartPole's white background, not a black frame
    assert (os.environ["SDL_VIDEODRIVER"], os.environ["SDL_AUDIODRIVER"]) == ("dummy", "dummy")


@needs_minari
def test_a_recording_that_fails_at_its_first_render_leaves_nothing_and_runs_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("imageio_ffmpeg", reason="videos need the record extra")
    monkeypatch.chdir(tmp_path)

    def argv(env: str) -> list[str]:
        return [
            *("run", "--env", f"tests.record.envs:{env}", "--env-arg", "render_mode=rgb_array"),
            *("--model", "tests.record.envs:Cycle", "--seeds", "0..2", "--no-progress"),
            *("--record", "runs/stepper-v0", "--record-video", "runs/videos"),
        ]

    assert main(argv("CannotDraw")) == 1
    assert "pygame is not installed" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # not even runs/, which the recording made
    assert main(argv("Stepper")) == 0, capsys.readouterr().err
    assert _dataset(tmp_path / "runs" / "stepper-v0").total_episodes == 3
    assert len(list((tmp_path / "runs" / "videos").iterdir())) == 3


@needs_minari
def test_a_gymnasium_target_records_the_spec_that_makes_it_again(tmp_path: Path) -> None:
    path = tmp_path / "cartpole-v3"
    code = main(
        [
            *("run", "--env", "gymnasium:CartPole-v1", "--env-arg", "sutton_barto_reward=true"),
            *("--seeds", "7", "--max-episode-steps", "30", "--no-progress"),
            *("--record", str(path)),
        ]
    )
    assert code == 0
    dataset = _dataset(path)
    for eval_env in (False, True):
        env = dataset.recover_environment(eval_env=eval_env)
        assert env.spec.id == "CartPole-v1"
        assert env.spec.kwargs == {"sutton_barto_reward": True}
        assert env.spec.max_episode_steps == 30  # the run's cap, shorter than the env's 500
    # The recovered env replays the recorded episode.
    (episode,) = dataset.iterate_episodes()
    env = dataset.recover_environment()
    observation, _ = env.reset(seed=7)
    np.testing.assert_array_equal(observation, episode.observations[0])
    for t, action in enumerate(episode.actions):
        observation, reward, *_ = env.step(action)
        np.testing.assert_array_equal(observation, episode.observations[t + 1])
        assert reward == episode.rewards[t]


def test_datasets_say_plainly_when_python_is_too_old(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # What Python 3.10 prints (Minari's floor moved past this interpreter).
    monkeypatch.setattr(_options, "MINARI_PYTHON", (99, 0))
    argv = ["run", "--seeds", "0", "--no-progress", "--record", str(tmp_path / "d-v0")]
    assert main(argv) == 2
    assert "needs Minari, which needs Python >= 99.0" in capsys.readouterr().err
    assert main(["show", str(tmp_path / "d-v0")]) == 2
    err = capsys.readouterr().err
    assert "trio-rlmesh show: reading a Minari dataset needs Minari" in err
    assert "Videos (--record-video, RecordOptions(video=...)) work on any Python" in err


@needs_minari
def test_show_names_a_directory_without_a_dataset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["show", str(tmp_path / "nothing-v0")]) != 0
    assert f"trio-rlmesh show: {tmp_path / 'nothing-v0'}" in capsys.readouterr().err


def _recorded_run(out: Path, path: Path) -> Any:
    return start(
        [
            *("run", "--env", "tests.cli.envs:Counter", "--env-arg", "announce=true"),
            *("--episodes", "100000", "--no-progress", "--json", str(out)),
            *("--record", str(path)),
        ]
    )


@pytest.mark.network
@needs_minari
def test_sigint_leaves_a_dataset_of_exactly_the_reports_episodes(tmp_path: Path) -> None:
    out, path = tmp_path / "report.json", tmp_path / "counter-v0"
    run = _recorded_run(out, path)
    try:
        wait_for(run, "counter: reset 40")
        run.send_signal(signal.SIGINT)
        assert run.wait(timeout=60) == 130
    finally:
        stop(run, signal.SIGKILL, timeout=10)
    report = json.loads(out.read_text())
    assert report["status"] == "cancelled"
    assert len(report["episodes"]) >= 39
    _matches(_dataset(path), report["episodes"])


@pytest.mark.network
@needs_minari
def test_a_second_sigint_leaves_a_loadable_prefix_of_the_reports_episodes(
    tmp_path: Path,
) -> None:
    """Ending at once stops between two writes: never a corrupt file or half an episode."""
    out, path = tmp_path / "report.json", tmp_path / "counter-v0"
    run = _recorded_run(out, path)
    try:
        wait_for(run, "counter: reset 40")
        run.send_signal(signal.SIGINT)
        wait_for(run, "stopping after SIGINT")
        run.send_signal(signal.SIGINT)
        assert run.wait(timeout=60) == 130
    finally:
        stop(run, signal.SIGKILL, timeout=10)
    episodes = json.loads(out.read_text())["episodes"]
    assert len(episodes) >= 39
    dataset = _dataset(path)
    _matches(dataset, episodes[: dataset.total_episodes])
