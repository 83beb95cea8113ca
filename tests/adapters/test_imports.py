"""The adapters layer is numpy only: no trio and no I/O; Gymnasium and Pillow are imported
when a Gymnasium space or a JPEG actually shows up, never by ``import``."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ADAPTERS = Path(__file__).resolve().parents[2] / "src" / "trio_rlmesh" / "adapters"
NEVER = ("trio", "asyncio", "socket", "h2", "grpclib", "threading", "subprocess")
LAZY = ("gymnasium", "PIL")


def _imports(tree: ast.AST) -> list[tuple[str, int]]:
    """``(top-level package, depth)`` per import; depth 0 is module level."""
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST, depth: int) -> None:
        for child in ast.iter_child_nodes(node):
            inner = depth + isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.Import):
                found.extend((alias.name.split(".")[0], depth) for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and not child.level and child.module:
                found.append((child.module.split(".")[0], depth))
            visit(child, inner)

    visit(tree, 0)
    return found


@pytest.mark.parametrize("path", sorted(ADAPTERS.rglob("*.py")), ids=lambda p: p.name)
def test_a_module_imports_no_io_and_its_optional_packages_lazily(path: Path) -> None:
    for package, depth in _imports(ast.parse(path.read_text())):
        assert package not in NEVER, f"{path.name} imports {package}"
        if package in LAZY:
            assert depth > 0, f"{path.name} imports {package} at module level"


def test_importing_the_adapters_pulls_in_neither_gymnasium_nor_pillow() -> None:
    probe = (
        f"import sys, trio_rlmesh.adapters; print(sorted(m for m in {LAZY!r} if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]"


def test_importing_the_adapters_binds_rlmesh_s_public_submodules() -> None:
    # As ``import rlmesh.adapters`` does: ``adapt.helpers`` works without importing it first.
    probe = (
        "import trio_rlmesh.adapters as adapt; "
        "print([name for name in ('constants', 'helpers', 'specs') if hasattr(adapt, name)])"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "['constants', 'helpers', 'specs']"
