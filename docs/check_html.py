"""Check built HTML for mistakes Sphinx and MyST build without a warning.

Usage: ``python docs/check_html.py BUILD_DIR`` (``nox -s docs`` runs it after
``sphinx-build``). Exits 1 and names every page and problem found:

* directive or role text that reached the page instead of being rendered: a broken fence
  (`````` ``{eval-rst} `````` with two backticks) shows ``{eval-rst}``, ``.. automodule::``
  and ``:members:`` as literal text, and so do stray ``{py:...}`` roles, ```` ``` ```` and
  ``:::`` fences;
* table rows that lose text: ``||`` in a Markdown row makes an empty cell and silently
  drops the row's last one, so the built page shows empty cells, and the Markdown source
  (copied into ``_sources/``) has rows with more cells than the header;
* API pages (under ``api/``) whose autodoc directive documented no object at all.

Only the standard library is used, so any Python that builds the docs can run it.
"""

from __future__ import annotations

import re
import sys
from html.parser import HTMLParser
from pathlib import Path

__all__ = ["check_markdown_tables", "check_page", "check_tree", "main"]

# Text that only shows up on a page when Markdown or reStructuredText was not parsed.
UNRENDERED = [
    (
        "MyST directive",
        re.compile(
            r"\{(?:eval-rst|toctree|automodule|autoclass|autofunction"
            r"|code-block|literalinclude|include|note|warning|admonition"
            r"|seealso|contents)\}"
        ),
    ),
    ("MyST role", re.compile(r"\{(?:py|std|rst|c|cpp|js):[a-z-]+\}")),
    ("MyST role", re.compile(r"\{(?:doc|ref|term|any|download|numref|eq|math|abbr)\}`")),
    ("code fence", re.compile(r"```")),
    ("colon fence", re.compile(r":::")),
    ("reST directive", re.compile(r"\.\. [a-z][\w-]*(?::[\w-]+)?::")),
    (
        "directive option",
        re.compile(
            r":(?:members|imported-members|undoc-members|exclude-members|show-inheritance"
            r"|maxdepth|caption|hidden|glob):"
        ),
    ),
]
# Pages Sphinx writes itself; their text is not ours.
GENERATED_PAGES = {"genindex.html", "search.html", "py-modindex.html"}


class _Page(HTMLParser):
    """Collects a page's main text, its empty table cells and its documented objects."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.text: list[str] = []
        self.empty_cells: list[str] = []
        self.objects = 0
        self._skip = 0  # depth inside <script>/<style>
        self._cell: list[str] | None = None
        self._row: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        classes = (dict(attrs).get("class") or "").split()
        if tag in ("script", "style"):
            self._skip += 1
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "dl" and "py" in classes:
            self.objects += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style"):
            self._skip = max(0, self._skip - 1)
        elif tag in ("td", "th") and self._cell is not None:
            text = " ".join("".join(self._cell).split())
            self._row.append(text)
            if not text:
                first = next((cell for cell in self._row if cell), "")
                self.empty_cells.append(
                    f"empty table cell {len(self._row)} in the row starting {first!r}"
                )
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)


def check_page(html: str, *, api_page: bool = False) -> list[str]:
    """The problems on one built page (``api_page``: it must document at least one object)."""
    page = _Page()
    page.feed(html)
    page.close()
    text = " ".join("".join(page.text).split())
    problems: list[str] = []
    for name, pattern in UNRENDERED:
        for match in pattern.finditer(text):
            start = max(0, match.start() - 30)
            problems.append(
                f"unrendered {name} {match.group()!r} in {text[start : match.end() + 30]!r}"
            )
    problems += page.empty_cells
    if api_page and not page.objects:
        problems.append("API page documents no object (did its autodoc directive run?)")
    return problems


_FENCE = re.compile(r"^\s*(`{3,}|~{3,}|:{3,})")
_DELIMITER_ROW = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")


def _cells(row: str) -> int:
    inner = row.strip()
    inner = inner.removeprefix("|")
    if inner.endswith("|") and not inner.endswith("\\|"):
        inner = inner[:-1]
    # GFM splits on every unescaped pipe, inside code spans too.
    return len(re.split(r"(?<!\\)\|", inner))


def check_markdown_tables(markdown: str) -> list[str]:
    """Rows whose cell count differs from their table's header (text lost or cells missing)."""
    problems: list[str] = []
    lines = markdown.splitlines()
    fence: str | None = None
    header: int | None = None
    for number, line in enumerate(lines, 1):
        opened = _FENCE.match(line)
        if fence is not None:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = None
            continue
        if opened:
            fence, header = opened.group(1), None
            continue
        if header is not None and line.strip().startswith("|"):
            if _cells(line) != header:
                problems.append(
                    f"line {number}: table row has {_cells(line)} cells, header has {header}: "
                    f"{line.strip()[:80]!r}"
                )
            continue
        header = None
        if (
            line.strip().startswith("|")
            and number < len(lines)
            and _DELIMITER_ROW.match(lines[number])
        ):
            header = _cells(line)
    return problems


def check_tree(build_dir: Path) -> dict[str, list[str]]:
    """The problems of every page under ``build_dir``, keyed by its relative path."""
    found: dict[str, list[str]] = {}
    for path in sorted(build_dir.rglob("*.html")):
        relative = path.relative_to(build_dir)
        if relative.parts[0].startswith("_") or relative.name in GENERATED_PAGES:
            continue
        problems = check_page(path.read_text(encoding="utf-8"), api_page=relative.parts[0] == "api")
        if problems:
            found[relative.as_posix()] = problems
    # Sphinx copies each page's source next to the HTML; MyST sources are checked for tables.
    for path in sorted((build_dir / "_sources").rglob("*.md.txt")):
        problems = check_markdown_tables(path.read_text(encoding="utf-8"))
        if problems:
            found[path.relative_to(build_dir).as_posix()] = problems
    return found


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python docs/check_html.py BUILD_DIR", file=sys.stderr)
        return 2
    build_dir = Path(args[0])
    pages = sorted(build_dir.rglob("*.html"))
    if not pages:
        print(f"check_html: no HTML pages under {build_dir}", file=sys.stderr)
        return 1
    found = check_tree(build_dir)
    for page, problems in found.items():
        for problem in problems:
            print(f"{page}: {problem}", file=sys.stderr)
    if found:
        print(f"check_html: {len(found)} page(s) did not render cleanly", file=sys.stderr)
        return 1
    print(f"check_html: {len(pages)} pages rendered cleanly")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
