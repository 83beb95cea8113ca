"""Collect the fragments in ``changelog.d/`` into ``CHANGELOG.md``.

Usage (from the repository root; ``nox -s changelog`` and ``nox -s changelog_check`` run it)::

    python tools/changelog.py          # rewrite CHANGELOG.md from the fragments
    python tools/changelog.py --check  # exit 1 when CHANGELOG.md differs from the fragments

A fragment is named ``<issue>.<topic>.<kind>.md`` (older ones ``<issue>.<kind>.md``), kind one
of ``feature``, ``fix``, ``doc``, ``removal``; see ``changelog.d/README.md``. Fragments are
kept after a build: ``CHANGELOG.md`` is always the whole of them, grouped by kind and ordered
by issue and topic, so regenerating it is deterministic and merges resolve by rerunning.
Only the standard library is used.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["KINDS", "Fragment", "FragmentError", "main", "read_fragments", "render"]

ROOT = Path(__file__).resolve().parents[1]
KINDS = {
    "feature": "Features",
    "fix": "Fixes",
    "doc": "Documentation",
    "removal": "Removals",
}
NAME = re.compile(r"^(?P<issue>[0-9]+)\.(?:(?P<topic>[a-z0-9][a-z0-9-]*)\.)?(?P<kind>[a-z]+)\.md$")
REGENERATE = "nox -s changelog"
HEADER = f"""\
# Changelog

Every user-visible change, collected from the fragments in `changelog.d/`. This file is
generated: add a fragment there (see `changelog.d/README.md`) and run `{REGENERATE}`.
"""


class FragmentError(ValueError):
    """A file in ``changelog.d/`` is not a valid fragment."""


class Fragment:
    """One fragment: its issue, topic (may be empty), kind and text."""

    def __init__(self, issue: int, topic: str, kind: str, text: str) -> None:
        self.issue, self.topic, self.kind, self.text = issue, topic, kind, text

    @classmethod
    def from_path(cls, path: Path) -> Fragment:
        match = NAME.match(path.name)
        if match is None or match.group("kind") not in KINDS:
            raise FragmentError(
                f"{path.name}: name a fragment <issue>.<topic>.<kind>.md, "
                f"kind one of {', '.join(KINDS)}"
            )
        text = path.read_text(encoding="utf-8").strip()
        if not text:
            raise FragmentError(f"{path.name}: the fragment is empty")
        return cls(int(match.group("issue")), match.group("topic") or "", match.group("kind"), text)

    def sort_key(self) -> tuple[int, str]:
        return (self.issue, self.topic)


def read_fragments(directory: Path) -> list[Fragment]:
    """Every fragment in ``directory`` (its README.md aside); raises on a misnamed file."""
    fragments: list[Fragment] = []
    for path in sorted(directory.iterdir()):
        if path.name == "README.md" or path.name.startswith("."):
            continue
        fragments.append(Fragment.from_path(path))
    return fragments


def _item(fragment: Fragment) -> str:
    lines = f"{fragment.text} (issue {fragment.issue})".splitlines()
    return "\n".join([f"- {lines[0]}", *(f"  {line}" if line else "" for line in lines[1:])])


def render(fragments: Sequence[Fragment]) -> str:
    """The text of ``CHANGELOG.md`` for ``fragments``."""
    parts = [HEADER, "## Unreleased\n"]
    for kind, title in KINDS.items():
        items = sorted((f for f in fragments if f.kind == kind), key=Fragment.sort_key)
        if items:
            parts.append(f"### {title}\n\n" + "\n".join(_item(f) for f in items) + "\n")
    return "\n".join(parts)


def main(argv: Sequence[str] | None = None, root: Path = ROOT) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    check = args == ["--check"]
    if args and not check:
        print("usage: python tools/changelog.py [--check]", file=sys.stderr)
        return 2
    target = root / "CHANGELOG.md"
    try:
        text = render(read_fragments(root / "changelog.d"))
    except FragmentError as error:
        print(f"changelog: {error}", file=sys.stderr)
        return 1
    if check:
        current = target.read_text(encoding="utf-8") if target.exists() else ""
        if current != text:
            print(
                f"changelog: CHANGELOG.md does not match changelog.d/; run `{REGENERATE}` "
                "and commit the result",
                file=sys.stderr,
            )
            return 1
        print("changelog: CHANGELOG.md matches changelog.d/")
        return 0
    target.write_text(text, encoding="utf-8")
    print(f"changelog: wrote {target.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
