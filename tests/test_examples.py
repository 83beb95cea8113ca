"""Every script in ``examples/`` runs, finishes and prints what it promises."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
TIMEOUT = 120

pytestmark = pytest.mark.network  # the scripts bind loopback sockets


def _env() -> dict[str, str]:
    paths = [str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}


def _run(*args: str) -> str:
    return _run_both(*args)[0]


def _run_both(*args: str) -> tuple[str, str]:
    """Run a script: its stdout and stderr."""
    proc = subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert proc.returncode == 0, f"{args} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout, proc.stderr


def test_serve_env_serves_then_stops() -> None:
    # --seconds counts from when serving began, so 0 serves (and says so) and stops at once.
    out = _run(str(EXAMPLES / "serve_env.py"), "--seconds", "0")
    assert out.splitlines() == [out.splitlines()[0], "stopped"]
    assert out.startswith("serving CartPole-v1 at 127.0.0.1:")


def test_serve_env_stops_on_a_signal() -> None:
    proc = subprocess.Popen(
        [sys.executable, str(EXAMPLES / "serve_env.py")],
        cwd=ROOT,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        # The signal handler is in place before serving starts (and this line is printed).
        assert proc.stdout.readline().startswith("serving CartPole-v1 at 127.0.0.1:")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert out.splitlines() == ["received SIGINT", "stopped"]


def test_evaluate_model_in_process_and_served() -> None:
    out = _run(str(EXAMPLES / "evaluate_model.py"))
    assert "in process against 127.0.0.1:" in out
    assert "served at 127.0.0.1:" in out
    assert out.count(": completed, ") == 2
    assert "same episodes both ways: True" in out


def test_adapted_arm_gives_the_same_episodes_on_every_server() -> None:
    pytest.importorskip("rlmesh")
    out = _run(str(EXAMPLES / "adapted_arm.py"))
    assert '"state" <- concat(eef_pos, eef_quat (quat_xyzw->rot6d), gripper_qpos)' in out
    rows = [line for line in out.splitlines() if line.count(":") == 1 and "  -" in line]
    assert [row.split(":")[0].strip() for row in rows] == [
        "in process",
        "trio-rlmesh serve_env",
        "rlmesh.EnvServer",
    ]
    assert len({row.split(":")[1] for row in rows}) == 1
    assert out.rstrip().endswith("same episodes everywhere: True")


def test_concurrent_envs_prints_three_columns() -> None:
    out = _run(str(EXAMPLES / "concurrent_envs.py"))
    status = next(line for line in out.splitlines() if line.startswith("status"))
    assert status.split() == ["status", "completed", "completed", "completed"]


def test_evaluate_in_trio() -> None:
    out = _run(str(EXAMPLES / "evaluate_in_trio.py"))
    assert out.startswith("completed [")


def test_memory_transport_runs_without_sockets_under_a_mock_clock() -> None:
    out = _run(str(EXAMPLES / "memory_transport.py"))
    assert out.splitlines() == ["memory://cartpole: completed, 3 episodes"]


def test_the_fakes_example_passes_under_pytest() -> None:
    out = _run(
        "-m",
        "pytest",
        str(EXAMPLES / "test_with_fakes.py"),
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
    )
    assert "6 passed" in out


def test_train_remote_env_runs_a_synchronous_loop() -> None:
    out, err = _run_both(str(EXAMPLES / "train_remote_env.py"), "--iterations", "5")
    lines = out.splitlines()
    assert lines[0].startswith("observation space Box(")
    assert lines[0].endswith("action space Discrete(2)")
    assert lines[1].startswith("5 episodes, best return ")
    assert err == ""  # stopping the server it started is no news


def test_step_vector_env_in_trio_counts_episodes() -> None:
    out = _run(str(EXAMPLES / "step_vector_env_in_trio.py"), "--steps", "100")
    lines = out.splitlines()
    assert lines[0] == "4 lanes, autoreset NEXT_STEP"
    steps, episodes = lines[1].split(", ")[:2]
    assert steps == "100 steps"
    assert int(episodes.split()[0]) > 0


@pytest.mark.skipif(sys.version_info < (3, 11), reason="Minari needs Python >= 3.11")
def test_record_and_plot_records_loads_and_plots(tmp_path: Path) -> None:
    out = _run(str(EXAMPLES / "record_and_plot.py"), "--out", str(tmp_path))
    lines = out.splitlines()
    assert lines[0] == "completed: 8 episodes, " + lines[0].split(", ")[1]
    assert lines[1].startswith("loaded 8 episodes; episode 0: ")
    assert lines[2] == "dataset returns equal the report's: True"
    assert "episodes  8 (" in out
    assert (tmp_path / "cartpole-eval-v0" / "data" / "metadata.json").exists()
    assert (tmp_path / "returns.png").read_bytes().startswith(b"\x89PNG")
    assert lines[-1] == f"plot written to {tmp_path / 'returns.png'}"


@pytest.mark.skipif(sys.version_info < (3, 11), reason="Minari needs Python >= 3.11")
def test_record_and_plot_leaves_what_it_names_by_default(tmp_path: Path) -> None:
    """Without --out it writes to a new temporary directory, and keeps it: the paths it
    prints are there to open."""
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "record_and_plot.py")],
        cwd=ROOT,
        env={**_env(), "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    plot = Path(proc.stdout.splitlines()[-1].removeprefix("plot written to "))
    assert plot.parent.parent == tmp_path
    assert plot.read_bytes().startswith(b"\x89PNG")
    assert (plot.parent / "cartpole-eval-v0" / "data" / "metadata.json").exists()
