"""``trio-rlmesh run``: arguments, the JSON report contract, exit codes."""

from __future__ import annotations

import json
import re
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from trio_rlmesh._cli import main

from .envs import ThreadCounter
from .models import RecordsThreads, SeesThreads
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


REPORT_KEYS = [
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


@pytest.mark.parametrize("backend", ["grpclib", "trio"])
def test_grpc_backend_chooses_how_the_run_speaks_grpc(
    backend: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from trio_rlmesh.transports.grpc._portal import THREAD_NAME

    argv = ["run", "--env", "tests.cli.envs:Counter", "--model", "tests.cli.models:SeesThreads"]
    out = tmp_path / "report.json"
    code = main(
        [*argv, "--episodes", "2", "--no-progress", "--grpc-backend", backend, "--json", str(out)]
    )
    assert code == 0, capsys.readouterr().err
    assert json.loads(out.read_text())["total_steps"] == 6
    # grpclib runs on asyncio, in the helper thread; the trio backend needs none.
    assert (THREAD_NAME in SeesThreads.seen) == (backend == "grpclib")


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
    line = capsys.readouterr().err.splitlines()[-1]
    assert "deliberate failure in predict" in line
    # The env by its name on the line; the route id, which matches servers' logs, only in
    # the report.
    route = re.search(r"env 'CartPole-v1' \(route ([0-9a-f-]{36})\) lane 0", report["reason"])
    assert route is not None, report["reason"]
    assert "model 'Broken' failed on env 'CartPole-v1' lane 0: ValueError" in line
    assert route.group(1) not in line


@pytest.mark.parametrize("user_code", ["thread", "inline", None])
def test_user_code_says_where_the_model_and_the_env_served_here_run(
    user_code: str | None,
) -> None:
    """--user-code thread: every predict and step on a worker thread; inline: all on the
    thread running the CLI (the event loop's); not given: each one's own "auto" (the
    first 8 calls on its thread, the quick ones after them inline)."""
    RecordsThreads.threads.clear()
    ThreadCounter.threads.clear()
    chosen = () if user_code is None else ("--user-code", user_code)
    code = main(
        [
            *("run", "--env", "tests.cli.envs:ThreadCounter", "--env-arg", "length=4"),
            *("--model", "tests.cli.models:RecordsThreads", "--episodes", "4", "--no-progress"),
            *chosen,
        ]
    )
    assert code == 0
    loop = threading.current_thread().name
    for threads in (RecordsThreads.threads, ThreadCounter.threads):
        assert len(threads) == 16
        on_loop = [thread == loop for thread in threads]
        if user_code is None:
            assert on_loop == [False] * 8 + [True] * 8
        else:
            assert set(on_loop) == {user_code == "inline"}


def test_user_code_with_no_user_code_here_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(
        [
            *("run", "--env", "127.0.0.1:1", "--model", "127.0.0.1:2"),
            *("--user-code", "thread", "--no-progress"),
        ]
    )
    assert code == 2
    assert "--user-code sets where this process runs user code" in capsys.readouterr().err


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


def _episodes_by_seed(report: dict[str, Any]) -> dict[int, tuple[Any, ...]]:
    return {
        e["seed"]: (e["steps"], e["reward"], e["terminated"], e["truncated"])
        for e in report["episodes"]
    }


@pytest.mark.network
def test_a_fleet_from_repeated_env_and_an_envs_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Three served envs: two as --env, one in --envs-file; then the seeds on one alone."""
    serve = ["serve-env", "gymnasium:CartPole-v1"]
    with serving(serve) as a, serving(serve) as b, serving(serve) as c:
        listed = tmp_path / "envs.txt"
        listed.write_text(f"# the third server\n\n{c}  # comment\n")
        fleet_json, alone_json = tmp_path / "fleet.json", tmp_path / "alone.json"
        common = ["--seeds", "10..18", "--max-episode-steps", "30", "--no-progress"]
        code = main(
            [
                *("run", "--env", a, "--env", b, "--envs-file", str(listed)),
                *(*common, "--json", str(fleet_json)),
            ]
        )
        assert code == 0
        printed = capsys.readouterr()
        assert main(["run", "--env", b, *common, "--json", str(alone_json)]) == 0
        # Fusing no predicts (each goes as soon as it is ready) changes no episode.
        unfused_json = tmp_path / "unfused.json"
        fleet_args = ["run", "--env", a, "--env", b, "--env", c, "--fuse-wait", "0", *common]
        assert main([*fleet_args, "--json", str(unfused_json)]) == 0
    unfused = json.loads(unfused_json.read_text())
    fleet, alone = json.loads(fleet_json.read_text()), json.loads(alone_json.read_text())
    assert _episodes_by_seed(unfused) == _episodes_by_seed(alone)
    assert fleet["status"] == "completed"
    assert [e["seed"] for e in fleet["episodes"]] == list(range(10, 19))
    assert _episodes_by_seed(fleet) == _episodes_by_seed(alone)
    assert {e["endpoint"] for e in fleet["episodes"]} <= {a, b, c}
    assert [p["endpoint"] for p in fleet["endpoints"]] == [a, b, c]
    assert sum(p["episodes"] for p in fleet["endpoints"]) == 9
    assert all(e["endpoint"] == b for e in alone["episodes"])
    assert "endpoints" not in alone
    # The first line names every server; the summary lists each one's share.
    assert f"({a}, {b}, {c})" in printed.err
    assert f"endpoint {c}: completed" in printed.out


@pytest.mark.network
def test_a_fleet_with_a_dead_server_fails_or_goes_on_when_told(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dead = f"unix://{tmp_path / 'nobody.sock'}"
    common = ["--seeds", "0..3", "--max-episode-steps", "20", "--no-progress"]
    with serving(["serve-env", "gymnasium:CartPole-v1"]) as live:
        failed_json, tolerant_json = tmp_path / "failed.json", tmp_path / "tolerant.json"
        failed = main(["run", "--env", live, "--env", dead, *common, "--json", str(failed_json)])
        tolerant = main(
            [
                *("run", "--env", live, "--env", dead, "--tolerate-endpoint-failures"),
                *(*common, "--json", str(tolerant_json)),
            ]
        )
    assert failed == 1
    report = json.loads(failed_json.read_text())
    assert report["status"] == "failed"
    assert {p["endpoint"]: p["status"] for p in report["endpoints"]}[dead] == "failed"
    assert tolerant == 0
    report = json.loads(tolerant_json.read_text())
    assert report["status"] == "completed"
    assert [e["seed"] for e in report["episodes"]] == [0, 1, 2, 3]
    assert {e["endpoint"] for e in report["episodes"]} == {live}
    (lost,) = [p for p in report["endpoints"] if p["endpoint"] == dead]
    assert lost["status"] == "failed"
    assert "TransportError" in lost["error"]
    assert f"endpoint {dead}: failed" in capsys.readouterr().out


@pytest.mark.network
def test_a_fleet_whose_servers_differ_is_refused_before_any_episode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report_json = tmp_path / "report.json"
    with (
        serving(["serve-env", "gymnasium:CartPole-v1"]) as cartpole,
        serving(["serve-env", "gymnasium:Pendulum-v1"]) as pendulum,
    ):
        code = main(
            [
                *("run", "--env", cartpole, "--env", pendulum, "--episodes", "4"),
                *("--no-progress", "--json", str(report_json)),
            ]
        )
    assert code == 2
    (line,) = [x for x in capsys.readouterr().err.splitlines() if x.startswith("trio-rlmesh run:")]
    assert line.startswith(
        f"trio-rlmesh run: fleet of {cartpole}, {pendulum} refused: {pendulum} serves "
        "observation space Box(shape=(3,), dtype=FLOAT32)"
    )
    report = json.loads(report_json.read_text())
    assert (report["status"], report["episodes"]) == ("failed", [])
    assert report["reason"].startswith("SpecError: fleet of ")


def test_a_fleet_of_targets_or_a_bad_envs_file_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--episodes", "1", "--no-progress"]
    assert main(["run", "--env", "127.0.0.1:1", "--env", "gymnasium:CartPole-v1", *args]) == 2
    assert "not a server address" in capsys.readouterr().err
    listed = tmp_path / "envs.txt"
    listed.write_text("127.0.0.1:1\ngymnasium:CartPole-v1\n")
    assert main(["run", "--envs-file", str(listed), *args]) == 2
    assert "is not an env server address" in capsys.readouterr().err
    assert main(["run", "--envs-file", str(tmp_path / "missing.txt"), *args]) == 2
    assert "--envs-file" in capsys.readouterr().err
    assert main(["run", "--env", "127.0.0.1:1", "--env", "127.0.0.1:1", *args]) == 2
    assert "listed twice" in capsys.readouterr().err
    two = ["--env", "127.0.0.1:1", "--env", "127.0.0.1:2"]
    assert main(["run", *two, "--fuse-wait", "-1", *args]) == 2
    assert (
        "--fuse-wait must be a finite number of seconds >= 0, got -1.0" in capsys.readouterr().err
    )
    assert main(["run", "--env", "127.0.0.1:1", "--fuse-wait", "0", *args]) == 2
    assert "this run drives one env" in capsys.readouterr().err
    assert main(["run", "--fuse-wait", "0.01", *args]) == 2  # CartPole served here: one env
    assert "--fuse-wait tunes how a fleet's predicts are fused" in capsys.readouterr().err


def test_the_progress_line_shows_the_fleet() -> None:
    from trio_rlmesh._cli._terminal import RunProgress

    assert "endpoint" not in RunProgress(4).text()
    progress = RunProgress(4, endpoints=3)
    assert progress.text().endswith("3/3 endpoints up")
    progress.lost = lambda: 1
    assert progress.text().endswith("2/3 endpoints up")


def test_ray_envs_needs_a_target_and_ray(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--episodes", "1", "--no-progress"]
    assert main(["run", "--env", "127.0.0.1:1", "--ray-envs", "2", *args]) == 2
    assert "--ray-envs serves an env target" in capsys.readouterr().err
    assert main(["run", "--ray-envs", "0", *args]) == 2
    assert "--ray-envs must be greater than zero, got 0" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    assert main(["run", "--ray-envs", "2", *args]) == 2
    assert "pip install 'trio-rlmesh[ray]'" in capsys.readouterr().err
