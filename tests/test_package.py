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


# The project must be self-contained: a fresh clone has nothing beside it, so no file may
# reach into a sibling folder (the wire captures were once read from one). The folder's name
# is spelled apart below so that this module does not match its own patterns.
SCANNED = [
    "src",
    "tests",
    "docs",
    "bench",
    "examples",
    "tools",
    "noxfile.py",
    "pyproject.toml",
    ".ci",
]
SKIPPED_DIRS = {"__pycache__", "_build", ".nox", ".tools", ".mypy_cache", ".ruff_cache"}
_SIBLING = "sha" + "red"
SIBLING_REFERENCES = [
    # the folder reached through "..", with either separator, one or more levels up
    re.compile(rf"\.\.[/\\]+(?:\.\.[/\\]+)*{_SIBLING}\b"),
    # a string literal that is the folder's name, alone or leading a path: the segment of
    # `parents[3] / <name>`, joinpath(<name>), os.path.join(root, <name>), "<name>/specs"
    re.compile(rf"""["']{_SIBLING}(?:[/\\][^"'\n]*)?["']"""),
    # an absolute path into the sibling folder
    re.compile(rf"/work/{_SIBLING}\b"),
]


def sibling_references(text: str) -> list[str]:
    """The lines of ``text`` that refer to a folder beside the repository."""
    return [
        line.strip()
        for line in text.splitlines()
        if any(pattern.search(line) for pattern in SIBLING_REFERENCES)
    ]


def _scanned_files() -> list[Path]:
    files: list[Path] = []
    for name in SCANNED:
        top = ROOT / name
        if top.is_file():
            files.append(top)
            continue
        for path in sorted(top.rglob("*")):
            if SKIPPED_DIRS.intersection(path.relative_to(ROOT).parts):
                continue
            if path.is_file() or path.is_symlink():
                files.append(path)
    return files


@pytest.mark.parametrize(
    "line",
    [
        # The line the protocol tests used before the captures moved into tests/fixtures.
        f'CAPTURES = Path(__file__).resolve().parents[3] / "{_SIBLING}" / "specs" / "captures"',
        f'ROOT.parent / "{_SIBLING}/specs/captures"',
        f"open('../{_SIBLING}/specs/captures/A_env_HandshakeRequest.hex')",
        f'os.path.join(here, "..", "..", "{_SIBLING}", "specs")',
        f"Path('/work/{_SIBLING}/specs')",
        f"see ../../{_SIBLING}/notes/transport-spike.md",
    ],
)
def test_sibling_reference_patterns_catch_known_forms(line: str) -> None:
    assert sibling_references(line) == [line]


@pytest.mark.parametrize(
    "line",
    ["one portal shared by the process", "highest_shared_edition(a, b)", "shared_state = {}"],
)
def test_sibling_reference_patterns_leave_ordinary_words(line: str) -> None:
    assert sibling_references(line) == []


def test_nothing_reads_a_folder_beside_the_repository() -> None:
    files = _scanned_files()
    assert len(files) > 100  # the scan really walked the tree
    found: list[str] = []
    for path in files:
        relative = path.relative_to(ROOT)
        if path.is_symlink() and not path.resolve().is_relative_to(ROOT):
            found.append(f"{relative}: symlink to {path.resolve()}")
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # binary files cannot name a path we would read
        found += [f"{relative}: {line}" for line in sibling_references(text)]
    assert found == [], "the project must be self-contained:\n" + "\n".join(found)


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```console\n(.*?)\n```", text, flags=re.S)


def test_ci_runs_the_readme_test_command_in_a_fresh_clone() -> None:
    commands = _readme_commands()
    assert len(commands) >= 2
    test_command = commands[1]
    assert test_command.endswith("&& nox")
    script = ROOT / ".ci" / "run"
    assert script.stat().st_mode & 0o111, ".ci/run must be executable"
    lines = [line.strip() for line in script.read_text().splitlines()]
    code = [line for line in lines if line and not line.startswith("#")]
    # No stdin from the first line on, so nothing can wait for input.
    assert "exec </dev/null" in code[:3]
    # What is committed, cloned into a folder of its own, is what the command runs in.
    clone = next(i for i, line in enumerate(code) if " git clone " in f" {line} ")
    enter = code.index('cd "$CLONE"')
    assert clone < enter
    assert code[-1] == test_command, "CI must end with the README's test command, verbatim"


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
