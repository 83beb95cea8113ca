"""The CLI package's modules import each other in one direction only."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import trio_rlmesh._cli

PACKAGE = Path(trio_rlmesh._cli.__file__).parent


def _cli_imports(path: Path) -> set[str]:
    """The sibling modules (``__init__`` included) that ``path`` imports."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module is None:
                found.add("__init__")
            else:
                found.add(node.module.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.level == 2 and node.module == "_cli":
            found.add("__init__")
    return found


def test_cli_modules_form_no_cycle_and_never_import_the_package() -> None:
    graph = {
        path.stem: _cli_imports(path) for path in PACKAGE.glob("*.py") if path.stem != "__main__"
    }
    for name, imports in graph.items():
        if name != "__init__":
            assert "__init__" not in imports, f"_cli.{name} imports the package itself"
    order = list(graphlib.TopologicalSorter(graph).static_order())  # raises CycleError
    assert order[-1] == "__init__"
