"""Every Python snippet in ``README.md`` and ``docs/`` runs as written.

Each ```` ```python ```` block is run on its own, in a fresh interpreter, from an empty
temporary directory, with a deadline. What a reader sees in the docs decides how:

* a block whose first line is ``# <name>.py`` is a file to save under that name: a
  ``test_*.py`` file runs under pytest, any other runs as a script;
* a block whose first line is ``# needs: pip install 'trio-rlmesh[<extra>]'`` runs when that
  extra is installed, and is skipped otherwise (the extras such a marker may name are
  listed below, reviewed: keep the list tiny);
* ``127.0.0.1:50051`` is where the docs' console steps serve CartPole (``trio-rlmesh
  serve-env gymnasium:CartPole-v1 --bind 127.0.0.1:50051``): the test serves it on a free
  port and puts that port in the block instead.

A fragment that cannot run alone (a line from inside an async function, say) is no
```` ```python ```` block: it is a ```` ```{code-block} python ```` whose caption says it is a
fragment, which the last test checks.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from .cli.support import child_env, serving

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
TIMEOUT = 120
SERVED_CARTPOLE = "127.0.0.1:50051"
EXTRAS = {"ray": "ray", "record": "minari"}
"""The extras a ``# needs:`` marker may name, and the module that says one is installed
(Minari for ``record``: on Python 3.10 the extra installs without it, Minari's own floor
being 3.11)."""
_NEEDS = re.compile(r"^# needs: pip install 'trio-rlmesh\[(\w+)\]'$")
_FILE = re.compile(r"^# ([\w.]+\.py)$")

pytestmark = pytest.mark.network  # many snippets serve an env on loopback


@attrs.frozen
class Snippet:
    page: Path
    line: int
    code: str

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def first_line(self) -> str:
        return self.code.splitlines()[0] if self.code else ""


def _blocks(page: Path, fence: str) -> Iterator[tuple[int, str]]:
    """``(line, text)`` of each block of ``page`` opened by the line ``fence``."""
    lines = page.read_text().splitlines()
    start: int | None = None
    for number, line in enumerate(lines, 1):
        if start is None and line == fence:
            start = number
        elif start is not None and line.startswith("```"):
            yield start, "\n".join(lines[start : number - 1]) + "\n"
            start = None


def _snippets() -> list[Snippet]:
    return [
        Snippet(page, line, code) for page in PAGES for line, code in _blocks(page, "```python")
    ]


SNIPPETS = _snippets()


def _params() -> list[object]:
    """The snippets as test cases; one that needs Ray starts a local Ray, so it is marked
    ``ray`` (``nox -s ray`` runs it)."""
    params = []
    for snippet in SNIPPETS:
        needs = _NEEDS.match(snippet.first_line)
        marks = [pytest.mark.ray] if needs is not None and needs[1] == "ray" else []
        params.append(pytest.param(snippet, id=snippet.id, marks=marks))
    return params


def test_the_pages_have_snippets() -> None:
    assert len(SNIPPETS) > 15


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        cwd=cwd,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


@pytest.mark.parametrize("snippet", _params())
def test_the_snippet_runs_as_written(snippet: Snippet, tmp_path: Path) -> None:
    needs = _NEEDS.match(snippet.first_line)
    if needs is not None:
        extra = needs[1]
        assert extra in EXTRAS, f"{snippet.id} needs {extra!r}, which is not a reviewed extra"
        if importlib.util.find_spec(EXTRAS[extra]) is None:
            pytest.skip(f"{snippet.id} needs the {extra} extra ({EXTRAS[extra]} is not installed)")
    code = snippet.code
    # Servers in snippets bind loopback on a free port; only the docs' own CartPole server
    # has a fixed one, and the test serves it on a free port instead.
    assert "0.0.0.0" not in code
    assert not re.search(r"127\.0\.0\.1:(?!0\b|50051\b)\d+", code), snippet.id
    named = _FILE.match(snippet.first_line)
    script = tmp_path / (named[1] if named else "snippet.py")
    if SERVED_CARTPOLE in code:
        with serving(["serve-env", "gymnasium:CartPole-v1"]) as address:
            script.write_text(code.replace(SERVED_CARTPOLE, address))
            result = _run([sys.executable, script.name], tmp_path)
    else:
        script.write_text(code)
        if script.name.startswith("test_"):
            argv = ["-m", "pytest", script.name, "-q", "-p", "no:cacheprovider"]
            result = _run([sys.executable, *argv], tmp_path)
        else:
            result = _run([sys.executable, script.name], tmp_path)
    assert result.returncode == 0, f"{snippet.id}\n{result.stdout}\n{result.stderr}"


def test_every_python_fragment_says_it_is_one() -> None:
    fragments = [
        (page, line, code)
        for page in PAGES
        for line, code in _blocks(page, "```{code-block} python")
    ]
    assert fragments, "no fragment left: drop this test"
    for page, line, code in fragments:
        caption = next((x for x in code.splitlines() if x.startswith(":caption:")), "")
        assert caption.startswith(":caption: A fragment"), f"{page.name}:{line}"
