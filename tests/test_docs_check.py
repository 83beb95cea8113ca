"""``docs/check_html.py``: the check ``nox -s docs`` runs on the built HTML.

The broken ``docs/api/protocol.md`` of issue 9 built without a single Sphinx warning; these
tests feed the checker what Sphinx made of that page and of its source.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_html", ROOT / "docs" / "check_html.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


check_html = _load()

# What sphinx-build (MyST) wrote for the old page: the two-backtick fence became inline code
# (the markup is Sphinx's, only wrapped to fit the line length).
BROKEN_FENCE = """
<article role="main"><section id="trio-rlmesh-protocol">
<h1><code class="docutils literal notranslate">
<span class="pre">trio_rlmesh.protocol</span></code></h1>
<p><code class="docutils literal notranslate"><span class="pre">{eval-rst}</span>
<span class="pre">..</span> <span class="pre">automodule::</span>
<span class="pre">trio_rlmesh.protocol</span>&#160;&#160;&#160;
<span class="pre">:members:</span>&#160;&#160;&#160;
<span class="pre">:imported-members:</span> </code></p>
</section></article>
"""
# ... and for one of its `||` rows: the third cell empty, the fourth dropped.
EMPTY_CELL_ROW = """
<table class="docutils align-default"><tbody>
<tr class="row-even"><td><p><code class="docutils literal notranslate">
<span class="pre">EXTRA_WORKFLOW_BASE</span></code></p></td>
<td><p><code class="docutils literal notranslate">
<span class="pre">'rlmesh.workflow.base'</span></code></p></td>
<td><p></p></td>
</tr></tbody></table>
"""
DOCUMENTED = """
<article role="main"><h1>trio_rlmesh.protocol</h1>
<dl class="py function"><dt class="sig sig-object py" id="trio_rlmesh.protocol.meta_to_python">
<span class="sig-name descname">meta_to_python</span></dt><dd><p>Convert a MetaMap.</p></dd></dl>
<table><tr><td><p>PROTOCOL_GENERATION</p></td><td><p>'rlmesh-wire-v1'</p></td></tr></table>
<div class="highlight"><pre>python3 -m pip install nox uv &amp;&amp; nox</pre></div>
</article>
"""
OLD_TABLE = """\
| name | value | meaning |
|---|---|---|
| `COMPONENT_MODEL` | `'rlmesh-model'` | PeerInfo component named by whoever speaks. |
| `EXTRA_WORKFLOW_BASE` | `'rlmesh.workflow.base'` || `PeerInfo.extra` key every peer sends. |
"""


def test_the_old_broken_fence_is_reported() -> None:
    problems = check_html.check_page(BROKEN_FENCE, api_page=True)
    assert any("'{eval-rst}'" in p for p in problems), problems
    assert any("'.. automodule::'" in p for p in problems), problems
    assert any("':members:'" in p for p in problems), problems
    assert problems[-1] == "API page documents no object (did its autodoc directive run?)"


def test_the_old_empty_cells_are_reported() -> None:
    problems = check_html.check_page(EMPTY_CELL_ROW)
    assert problems == ["empty table cell 3 in the row starting 'EXTRA_WORKFLOW_BASE'"]


def test_the_old_table_rows_are_reported_in_the_source() -> None:
    problems = check_html.check_markdown_tables(OLD_TABLE)
    assert problems == [
        "line 4: table row has 4 cells, header has 3: "
        "\"| `EXTRA_WORKFLOW_BASE` | `'rlmesh.workflow.base'` || `PeerInfo.extra` key every\""
    ]


def test_a_rendered_api_page_passes() -> None:
    assert check_html.check_page(DOCUMENTED, api_page=True) == []


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("see {py:class}`~trio_rlmesh.Error`", "MyST role"),
        ("```python", "code fence"),
        (":::{note}", "colon fence"),
        ("{toctree} :maxdepth: 1", "MyST directive"),
    ],
)
def test_other_unrendered_markup_is_reported(text: str, name: str) -> None:
    problems = check_html.check_page(f"<p>{text}</p>")
    assert any(p.startswith(f"unrendered {name}") for p in problems), problems


def test_tables_inside_code_fences_are_not_checked() -> None:
    fenced = "```text\n| a | b |\n|---|---|\n| 1 | 2 | 3 |\n```\n"
    assert check_html.check_markdown_tables(fenced) == []
    assert check_html.check_markdown_tables(fenced.replace("```text\n", "")) != []


DOCS_PAGES = sorted(p for p in (ROOT / "docs").rglob("*.md") if "_build" not in p.parts)


@pytest.mark.parametrize("page", DOCS_PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_docs_page_has_whole_table_rows(page: Path) -> None:
    assert check_html.check_markdown_tables(page.read_text(encoding="utf-8")) == []


def test_main_reports_a_tree_with_a_broken_page(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "api").mkdir()
    (tmp_path / "index.html").write_text(DOCUMENTED)
    (tmp_path / "api" / "protocol.html").write_text(BROKEN_FENCE)
    assert check_html.main([str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "api/protocol.html: unrendered MyST directive '{eval-rst}'" in err
    (tmp_path / "api" / "protocol.html").write_text(DOCUMENTED)
    assert check_html.main([str(tmp_path)]) == 0
    assert check_html.main([str(tmp_path / "missing")]) == 1
