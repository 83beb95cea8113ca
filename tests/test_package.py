"""Package-level promises: import isolation, the public surface, and README/CI agreement."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import trio_rlmesh

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "module",
    ["trio_rlmesh", "trio_rlmesh.protocol", "trio_rlmesh.spaces", "trio_rlmesh.runtime"],
)
def test_import_does_not_pull_in_grpclib_or_asyncio(module: str) -> None:
    code = (
        f"import sys, {module}; "
        "bad = sorted(m for m in ('grpclib', 'asyncio') if m in sys.modules); "
        "print(','.join(bad))"
    )
    out = subprocess.run(
        [sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == ""


def test_public_names_exist() -> None:
    for name in trio_rlmesh.__all__:
        assert hasattr(trio_rlmesh, name), name


def test_errors_share_one_root_and_carry_context() -> None:
    err = trio_rlmesh.OperationTimeout("env.step timed out", operation="env.step", step=3)
    assert isinstance(err, trio_rlmesh.Error)
    assert isinstance(err, TimeoutError)
    assert err.recoverable is True
    err.with_context(step=9, lane=2)
    assert (err.step, err.lane) == (3, 2)
    assert not trio_rlmesh.SpecError("bad").recoverable
    assert isinstance(trio_rlmesh.TransportError("gone"), ConnectionError)


def test_errors_pickle_with_their_context() -> None:
    import pickle

    err = trio_rlmesh.EnvError("boom", recoverable=True, operation="env.reset", code="INTERNAL")
    clone = pickle.loads(pickle.dumps(err))
    assert type(clone) is trio_rlmesh.EnvError
    assert (clone.message, clone.recoverable, clone.operation, clone.code) == (
        "boom",
        True,
        "env.reset",
        "INTERNAL",
    )


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```console\n(.*?)\n```", text, flags=re.S)


def test_ci_runs_the_readme_test_command() -> None:
    commands = _readme_commands()
    assert len(commands) >= 2
    test_command = commands[1]
    assert test_command.endswith("&& nox")
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert "nox" in [line.strip() for line in ci], "CI must run the README's `nox`"


def test_readme_names_the_console_script() -> None:
    install = _readme_commands()[0]
    assert "trio-rlmesh run" in install


def test_readme_library_example_runs() -> None:
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)\n```", text, flags=re.S)
    assert len(blocks) == 1
    out = subprocess.run(
        [sys.executable, "-W", "error", "-c", blocks[0]],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("completed [")
