"""``tools/changelog.py``: CHANGELOG.md is generated from changelog.d/ and checked for staleness."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("changelog", ROOT / "tools" / "changelog.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


changelog = _load()


def _project(tmp_path: Path, fragments: dict[str, str]) -> Path:
    directory = tmp_path / "changelog.d"
    directory.mkdir()
    (directory / "README.md").write_text("How to write a fragment.\n")
    for name, text in fragments.items():
        (directory / name).write_text(text)
    return tmp_path


def test_fragments_are_grouped_by_kind_and_ordered_by_issue_and_topic(tmp_path: Path) -> None:
    root = _project(
        tmp_path,
        {
            "9.zeta.fix.md": "Zeta fixed.\n",
            "9.alpha.fix.md": "Alpha fixed,\nover two lines.\n",
            "10.fix.md": "Ten fixed.\n",
            "3.feature.md": "A feature.\n",
            "4.old-api.removal.md": "Gone.\n",
        },
    )
    assert changelog.main([], root) == 0
    text = (root / "CHANGELOG.md").read_text()
    body = text[text.index("## Unreleased") :]
    assert body == (
        "## Unreleased\n\n"
        "### Features\n\n"
        "- A feature. (issue 3)\n\n"
        "### Fixes\n\n"
        "- Alpha fixed,\n  over two lines. (issue 9)\n"
        "- Zeta fixed. (issue 9)\n"
        "- Ten fixed. (issue 10)\n\n"
        "### Removals\n\n"
        "- Gone. (issue 4)\n"
    )
    assert "nox -s changelog" in text[: text.index("## Unreleased")]


def test_check_fails_when_the_changelog_is_stale_or_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _project(tmp_path, {"9.one.fix.md": "One.\n"})
    assert changelog.main(["--check"], root) == 1  # no CHANGELOG.md yet
    assert changelog.main([], root) == 0
    assert changelog.main(["--check"], root) == 0
    (root / "changelog.d" / "9.two.feature.md").write_text("Two.\n")
    capsys.readouterr()
    assert changelog.main(["--check"], root) == 1
    assert "run `nox -s changelog`" in capsys.readouterr().err
    assert changelog.main([], root) == 0
    assert changelog.main(["--check"], root) == 0
    (root / "CHANGELOG.md").write_text((root / "CHANGELOG.md").read_text() + "hand edit\n")
    assert changelog.main(["--check"], root) == 1


@pytest.mark.parametrize(
    "name", ["9.fixed.md", "nine.fix.md", "9.Topic.fix.md", "9.fix.txt", "9.a.b.fix.md"]
)
def test_a_misnamed_fragment_is_refused(
    tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _project(tmp_path, {name: "Text.\n"})
    assert changelog.main([], root) == 1
    assert (
        f"changelog: {name}: name a fragment <issue>.<topic>.<kind>.md" in capsys.readouterr().err
    )
    assert not (root / "CHANGELOG.md").exists()


def test_an_empty_fragment_is_refused(tmp_path: Path) -> None:
    root = _project(tmp_path, {"9.empty.doc.md": "\n"})
    assert changelog.main(["--check"], root) == 1


def test_every_fragment_in_the_repository_is_well_named() -> None:
    fragments = changelog.read_fragments(ROOT / "changelog.d")
    assert fragments
    assert {f.kind for f in fragments} <= set(changelog.KINDS)
