"""Every script in ``examples/`` runs, finishes and prints what it promises."""

from __future__ import annotations

import os
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
    return proc.stdout


def test_serve_env_serves_then_stops() -> None:
    out = _run(str(EXAMPLES / "serve_env.py"), "--seconds", "2")
    lines = out.splitlines()
    assert lines[0].startswith("serving CartPole-v1 at 127.0.0.1:")
    assert lines[-1] == "stopped"


def test_evaluate_model_in_process_and_served() -> None:
    out = _run(str(EXAMPLES / "evaluate_model.py"))
    assert "in process against 127.0.0.1:" in out
    assert "served at 127.0.0.1:" in out
    assert out.count(": completed, ") == 2
    assert "same episodes both ways: True" in out


def test_concurrent_envs_prints_three_columns() -> None:
    out = _run(str(EXAMPLES / "concurrent_envs.py"))
    status = next(line for line in out.splitlines() if line.startswith("status"))
    assert status.split() == ["status", "completed", "completed", "completed"]


def test_evaluate_in_trio() -> None:
    out = _run(str(EXAMPLES / "evaluate_in_trio.py"))
    assert out.startswith("completed [")


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
