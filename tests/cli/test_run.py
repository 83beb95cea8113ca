"""``trio-rlmesh run``: arguments, the JSON report contract, exit codes, signals."""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trio_rlmesh._cli import main
from trio_rlmesh._cli._run import parse_seeds

ROOT = Path(__file__).resolve().parents[2]
EPISODE_KEYS = {
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


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_cancels_cleanly_with_exit_130(tmp_path: Path, signum: signal.Signals) -> None:
    out = tmp_path / "cancelled.json"
    pythonpath = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": pythonpath}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trio_rlmesh",
            "run",
            "--episodes",
            "100000",
            "--no-progress",
            "--json",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert "evaluating" in line, line
        time.sleep(1.5)  # let a few episodes finish; the assertion below does not depend on it
        proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    report = json.loads(out.read_text())
    _check_report_schema(report)
    assert report["status"] == "cancelled"
    assert signal.Signals(signum).name in report["reason"]
    assert report["total_steps"] >= sum(e["steps"] for e in report["episodes"])
    assert "cancelled" in stdout


def test_run_against_a_served_model_and_env(tmp_path: Path) -> None:
    """serve-env and serve-model as processes, then `run --env ADDR --model ADDR`."""
    pythonpath = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": pythonpath}
    servers = []
    addresses = []
    try:
        for argv in (
            ["serve-env", "gymnasium:CartPole-v1"],
            ["serve-model", "tests.cli.models:AlwaysLeft"],
        ):
            ready = tmp_path / f"{argv[0]}.addr"
            proc = subprocess.Popen(
                [sys.executable, "-m", "trio_rlmesh", *argv, "--ready-file", str(ready)],
                stdout=subprocess.PIPE,
                text=True,
                env=env,
                cwd=ROOT,
            )
            servers.append(proc)
            assert proc.stdout is not None
            printed = proc.stdout.readline().strip()
            assert printed == ready.read_text().strip()
            addresses.append(printed)
        out = tmp_path / "remote.json"
        code = main(
            [
                *("run", "--env", addresses[0], "--model", addresses[1], "--seeds", "1,2"),
                *("--no-progress", "--json", str(out)),
            ]
        )
        assert code == 0
        report = json.loads(out.read_text())
        assert report["status"] == "completed"
        # Always pushing left topples CartPole within a handful of steps.
        assert all(e["terminated"] and e["steps"] < 30 for e in report["episodes"])
    finally:
        for proc in servers:
            proc.send_signal(signal.SIGTERM)
        for proc in servers:
            assert proc.wait(timeout=30) == 0
            if proc.stdout is not None:
                proc.stdout.close()
