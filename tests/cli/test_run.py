"""``trio-rlmesh run``: arguments, the JSON report contract, exit codes."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from trio_rlmesh._cli import main
from trio_rlmesh._cli._run import parse_seeds

from .support import serving

ROOT = Path(__file__).resolve().parents[2]
EPISODE_KEYS = {
    "endpoint",
    "index",
    "seed",
    "steps",
    "reward",
    "terminated",
    "truncated",
    "success",
    "duration_s",
}
TELEMETRY_KEYS = {"op", "metric", "unit", "count", "avg", "p50", "p95", "p99"}


@pytest.mark.parametrize(
    ("text", "seeds"),
    [("0,1,2", [0, 1, 2]), ("0..3", [0, 1, 2, 3]), ("5", [5]), (" 7, 9 ", [7, 9])],
)
def test_parse_seeds(text: str, seeds: list[int]) -> None:
    assert parse_seeds(text) == seeds


@pytest.mark.parametrize("text", ["3..1", "a,b", "0..x"])
def test_parse_seeds_rejects_nonsense(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        parse_seeds(text)


REPORT_KEYS = [
    "status",
    "reason",
    "total_steps",
    "env_step_calls",
    "mean_reward",
    "success_rate",
    "episodes",
    "telemetry",
]


def _check_report_schema(report: dict[str, object]) -> None:
    assert list(report) == REPORT_KEYS
    for episode in report["episodes"]:  # type: ignore[attr-defined]
        assert set(episode) == EPISODE_KEYS
    for row in report["telemetry"]:  # type: ignore[attr-defined]
        assert set(row) == TELEMETRY_KEYS


def test_the_documented_json_keys_are_the_reported_ones() -> None:
    text = (ROOT / "docs" / "cli.md").read_text()
    table = text[text.index("| key | type | meaning |") :].split("\n\n")[0]
    documented = re.findall(r"^\| `([a-z_]+)` \|", table, flags=re.M)
    assert documented == REPORT_KEYS
    example = json.loads(re.findall(r"```json\n(.*?)\n```", text, flags=re.S)[0])
    _check_report_schema(example)


def test_run_with_seeds_writes_the_documented_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report.json"
    code = main(
        ["run", "--seeds", "3..5", "--max-episode-steps", "20", "--no-progress", "--json", str(out)]
    )
    assert code == 0
    report = json.loads(out.read_text())
    _check_report_schema(report)
    assert report["status"] == "completed"
    assert [e["seed"] for e in report["episodes"]] == [3, 4, 5]
    assert all(e["steps"] <= 20 for e in report["episodes"])
    assert report["total_steps"] == sum(e["steps"] for e in report["episodes"])
    ops = {row["op"] for row in report["telemetry"]}
    assert {"env.step", "env.reset", "model.predict"} <= ops
    printed = capsys.readouterr().out
    assert "completed: 3 episodes" in printed


def test_episodes_disagreeing_with_seeds_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["run", "--seeds", "0,1", "--episodes", "3", "--no-progress"])
    assert code == 2
    assert "disagrees with the 2 seeds" in capsys.readouterr().err


def test_a_model_without_predict_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["run", "--episodes", "1", "--model", "tests.cli.models:NoPredict", "--no-progress"]
    )
    assert code == 2
    assert "no predict" in capsys.readouterr().err


def test_a_failing_model_exits_1_with_a_failed_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "failed.json"
    code = main(
        [
            "run",
            "--episodes",
            "2",
            "--model",
            "tests.cli.models:Broken",
            "--no-progress",
            "--json",
            str(out),
        ]
    )
    assert code == 1
    report = json.loads(out.read_text())
    _check_report_schema(report)
    assert report["status"] == "failed"
    assert "deliberate failure in predict" in report["reason"]
    assert "deliberate failure in predict" in capsys.readouterr().err


@pytest.mark.network
def test_run_against_a_served_model_and_env(tmp_path: Path) -> None:
    """serve-env and serve-model as processes, then `run --env ADDR --model ADDR`."""
    ready = tmp_path / "env.addr"
    with (
        serving(["serve-env", "gymnasium:CartPole-v1", "--ready-file", str(ready)]) as env,
        serving(["serve-model", "tests.cli.models:AlwaysLeft"]) as model,
    ):
        assert ready.read_text().strip() == env
        out = tmp_path / "remote.json"
        code = main(
            [
                *("run", "--env", env, "--model", model, "--seeds", "1,2"),
                *("--no-progress", "--json", str(out)),
            ]
        )
    assert code == 0
    report = json.loads(out.read_text())
    assert report["status"] == "completed"
    # Always pushing left topples CartPole within a handful of steps.
    assert all(e["terminated"] and e["steps"] < 30 for e in report["episodes"])
