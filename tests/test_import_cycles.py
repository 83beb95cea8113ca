"""No import cycle inside ``src/trio_rlmesh``.

The graph is the layering test's (:func:`tests.test_layering.imported_modules`): every
import counts, module-level, function-local and type-only alike, since each is a
dependency all the same. A cycle means two modules cannot be understood, tested or moved
one without the other; the failure prints each cycle as ``a -> b -> a``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from .test_layering import GENERATED, PACKAGE, SRC, _module_of, _tree, imported_modules


def import_graph(src: Path) -> dict[str, set[str]]:
    """Module -> the ``trio_rlmesh`` modules it imports (generated code left out)."""
    graph: dict[str, set[str]] = {}
    for path in sorted((src / PACKAGE).rglob("*.py")):
        module, is_package = _module_of(path, src)
        if module == GENERATED or module.startswith(GENERATED + "."):
            continue
        graph[module] = set(imported_modules(path.read_text(), module, is_package, src))
    for targets in graph.values():
        targets.intersection_update(graph)
    return graph


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (or a module
    that imports itself), as the path ``[a, b, ..., a]``, in a stable order."""
    found = []
    for component in _components(graph):
        start = min(component)
        if len(component) == 1 and start not in graph[start]:
            continue
        found.append(_cycle_through(graph, start, component))
    return sorted(found)


def _components(graph: Mapping[str, set[str]]) -> list[set[str]]:
    """Tarjan's strongly connected components, without recursion."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, pending = work[-1]
            if pending:
                target = pending.pop()
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, sorted(graph[target])))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                found.append(component)
    return found


def _cycle_through(graph: Mapping[str, set[str]], start: str, within: set[str]) -> list[str]:
    """A shortest path from ``start`` back to itself inside one component."""
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in sorted(graph[node] & within):
                if target == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [*reversed(path), start]
                if target not in previous:
                    previous[target] = node
                    following.append(target)
        frontier = following
    raise AssertionError(f"{start} is in a component but on no cycle")  # pragma: no cover


def _shown(found: Sequence[Sequence[str]]) -> str:
    return "\n".join(" -> ".join(cycle) for cycle in found)


def test_src_has_no_import_cycle() -> None:
    found = cycles(import_graph(SRC))
    assert not found, "import cycles in src/trio_rlmesh:\n" + _shown(found)


# The checker itself, on small trees written for it.
CYCLIC = {
    "two modules": (
        ("trio_rlmesh/runtime/_a.py", "from ._b import B\n"),
        ("trio_rlmesh/runtime/_b.py", "from ._a import A\n"),
    ),
    "type-only": (
        ("trio_rlmesh/runtime/_a.py", "from ._b import B\n"),
        (
            "trio_rlmesh/runtime/_b.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ._a import A\n",
        ),
    ),
    "function-local, three modules": (
        ("trio_rlmesh/runtime/_a.py", "from ._b import B\n"),
        ("trio_rlmesh/runtime/_b.py", "from ._c import C\n"),
        ("trio_rlmesh/runtime/_c.py", "def f():\n    from ._a import A\n"),
    ),
}


def _written(tmp_path: Path, files: Sequence[tuple[str, str]]) -> Path:
    for path, source in files:
        _tree(tmp_path, path, source)
    return tmp_path


@pytest.mark.parametrize("case", sorted(CYCLIC))
def test_the_checker_reports_a_cycle_as_a_path(tmp_path: Path, case: str) -> None:
    files = CYCLIC[case]
    found = cycles(import_graph(_written(tmp_path, files)))
    modules = sorted(path.removesuffix(".py").replace("/", ".") for path, _ in files)
    assert found == [[modules[0], *modules[1:], modules[0]]]


def test_the_checker_accepts_imports_that_only_point_one_way(tmp_path: Path) -> None:
    files = (
        ("trio_rlmesh/runtime/_a.py", "from ._b import B\nfrom ._c import C\n"),
        ("trio_rlmesh/runtime/_b.py", "from ._c import C\n"),
        ("trio_rlmesh/runtime/_c.py", "from ..._errors import Error\n"),
    )
    assert cycles(import_graph(_written(tmp_path, files))) == []
