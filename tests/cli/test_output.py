"""``run``'s output: results first, a summary, telemetry on request, ``--json -``, ``--version``."""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest

from trio_rlmesh._cli import main
from trio_rlmesh._cli._output import format_endpoints, format_summary
from trio_rlmesh.runtime import EndpointReport, EpisodeRecord, RuntimeReport

COUNTER = ("--env", "tests.cli.envs:Counter", "--env-arg", "length=2")


def _episode(index: int, steps: int, reward: float, success: bool | None) -> EpisodeRecord:
    return EpisodeRecord(
        index, 0, f"e{index}", None, index, steps, reward, True, False, success, 0.0, 0.0, 0.0
    )


def test_summary_of_episodes_with_success() -> None:
    report = RuntimeReport(
        "completed",
        None,
        "s",
        "e",
        (_episode(0, 4, 1.0, True), _episode(1, 6, 3.0, False), _episode(2, 5, 2.0, True)),
        env_step_calls=15,
    )
    assert format_summary(report).splitlines() == [
        "completed: 3 episodes, 15 steps",
        "reward 2.00 ± 0.82 (min 1.00, max 3.00), mean length 5.0 steps",
        "success rate 66.7% (2 of 3)",
        "mean 2.000 [1.000, 3.000] · IQM 2.000 [1.000, 3.000] · success 67% [21%, 94%] (n=3)",
    ]


def test_summary_without_success_or_episodes() -> None:
    one = RuntimeReport("completed", None, "s", "e", (_episode(0, 7, 7.0, None),), 7)
    assert format_summary(one).splitlines() == [
        "completed: 1 episode, 7 steps",
        "reward 7.00 ± 0.00 (min 7.00, max 7.00), mean length 7.0 steps",
        "mean 7.000 · IQM 7.000 (n=1)",  # no interval from one episode
    ]
    none = RuntimeReport("cancelled", "interrupted by SIGINT", "s", "e", (), 0)
    assert format_summary(none) == "cancelled: 0 episodes, 0 steps (interrupted by SIGINT)"


def test_a_fleet_prints_each_endpoints_intervals() -> None:
    pytest.importorskip("rliable.library", reason="needs the analysis extra")
    episodes = [_episode(i, 3, float(i), None) for i in range(5)]
    episodes = [attrs.evolve(e, endpoint="a:1" if e.index < 3 else "b:2") for e in episodes]
    endpoints = (
        EndpointReport("a:1", "completed", None, 3, 9),
        EndpointReport("b:2", "completed", None, 2, 6),
        EndpointReport("c:3", "failed", "TransportError: reset", 0, 0),
    )
    report = RuntimeReport("completed", None, "s", "f", tuple(episodes), 15, endpoints=endpoints)
    assert format_endpoints(report).splitlines() == [
        "endpoint a:1: completed, 3 episodes, 9 env steps",
        "  mean 1.000 [0.000, 2.000] · IQM 1.000 [0.000, 2.000] (n=3)",
        "endpoint b:2: completed, 2 episodes, 6 env steps",
        "  mean 3.500 [3.000, 4.000] · IQM 3.500 [3.000, 4.000] (n=2)",
        "endpoint c:3: failed, 0 episodes, 0 env steps",
        "  lost: TransportError: reset; started again elsewhere: none",
    ]


def test_results_then_summary_and_telemetry_only_on_request(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["run", *COUNTER, "--env-arg", "success=true", "--seeds", "0..3", "--no-progress"]
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["#", "seed", "steps", "reward", "ended", "success"]
    assert [line.split() for line in out[2:6]] == [
        [str(i), str(i), "2", "2.00", "terminated", "yes" if i % 2 == 0 else "no"] for i in range(4)
    ]
    assert out[-4:] == [
        "completed: 4 episodes, 8 steps",
        "reward 2.00 ± 0.00 (min 2.00, max 2.00), mean length 2.0 steps",
        "success rate 50.0% (2 of 4)",
        "mean 2.000 [2.000, 2.000] · IQM 2.000 [2.000, 2.000] · success 50% [15%, 85%] (n=4)",
    ]
    assert not any(line.startswith("op ") for line in out)
    assert main([*argv, "--telemetry"]) == 0
    out = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(out) if line.startswith("op "))
    assert out[header - 1].startswith("mean 2.000 [2.000, 2.000] · IQM")
    assert any(line.startswith("env.step ") for line in out[header:])


def test_columns_that_would_say_nothing_are_left_out(capsys: pytest.CaptureFixture[str]) -> None:
    # No seed was sent and the env reports no success: no column of dashes for either.
    assert main(["run", *COUNTER, "--episodes", "2", "--no-progress"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["#", "steps", "reward", "ended"]
    assert out[2].split() == ["0", "2", "2.00", "terminated"]


def test_where_the_report_and_the_recording_went(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "out" / "report.json"
    argv = ["run", *COUNTER, "--episodes", "2", "--no-progress", "--json", str(report)]
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == f"report written to {report}"
    assert main(["run", *COUNTER, "--episodes", "2", "--no-progress", "--json", "-"]) == 0
    captured = capsys.readouterr()
    assert "written to" not in captured.out + captured.err  # the report is stdout itself


def test_json_dash_writes_only_the_report_to_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", *COUNTER, "--episodes", "2", "--no-progress", "--json", "-"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert (report["status"], report["total_steps"]) == ("completed", 4)
    assert not Path("-").exists()
    assert "completed: 2 episodes, 4 steps" in captured.err


def test_json_dash_for_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--env", "foo", "--json", "-"]) == 2
    captured = capsys.readouterr()
    assert json.loads(captured.out)["status"] == "failed"
    assert "ENV must be" in captured.err


def test_a_failed_run_still_prints_the_episodes_it_finished(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report.json"
    model = "tests.cli.models:FailsOnFifthPredict"
    argv = ["run", *COUNTER, "--model", model, "--episodes", "5", "--no-progress"]
    assert main([*argv, "--json", str(out)]) == 1
    captured = capsys.readouterr()
    printed = captured.out.splitlines()
    # header, rule, two episodes, three summary lines, where the report went
    assert len(printed) == 2 + 2 + 3 + 1
    assert printed[4] == "failed: 2 episodes, 4 steps"
    assert printed[7] == f"report written to {out}"
    errors = captured.err.strip().splitlines()
    assert errors[-1].startswith("trio-rlmesh run: model 'FailsOnFifthPredict' failed")
    assert "deliberate failure on the fifth predict" in errors[-1]
    report = json.loads(out.read_text())
    assert (report["status"], len(report["episodes"]), report["total_steps"]) == ("failed", 2, 4)


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["--version"])
    assert caught.value.code == 0
    assert capsys.readouterr().out.startswith("trio-rlmesh 0.")


def test_each_file_written_gets_its_line(tmp_path: Path) -> None:
    import argparse

    from trio_rlmesh._cli._run import _written

    dataset, videos = tmp_path / "runs" / "c-v0", tmp_path / "videos"
    args = argparse.Namespace(json=tmp_path / "r.json", record=dataset, record_video=videos)
    report = RuntimeReport("completed", None, "s", "e", (_episode(0, 4, 1.0, None),), 4)
    assert _written(args, report, report_written=True) == [f"report written to {args.json}"]
    dataset.mkdir(parents=True)
    videos.mkdir()
    assert _written(args, report, report_written=False) == [
        f"dataset written to {dataset} (1 episode)",
        f"videos written to {videos} (1 episode, one MP4 each)",
    ]
