"""Imports inside ``src/trio_rlmesh`` point down the layers, and stay out of other packages'
private modules.

The layers are DESIGN.md's, bottom first. A module may import its own layer and the layers
below it, never one above (type-only and function-local imports count: they are
dependencies all the same). A private module (``_name``) belongs to the package that holds
it: code outside that package reaches it only through the package's public names or its
``_internal`` module, the one place where a package lists what it offers the other layers
of trio-rlmesh (and not users). Every module must sit in a declared layer, so a new
subpackage has to be placed here before its imports are checked.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "trio_rlmesh"

# Bottom first. A module belongs to the layer whose entry is its longest dotted prefix; the
# root package itself (``trio_rlmesh/__init__.py``) only by the exact entry.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "base",
        (
            "trio_rlmesh._version",
            "trio_rlmesh._errors",
            "trio_rlmesh._nursery",
            "trio_rlmesh._png",
            "trio_rlmesh._fastpaths",
            "trio_rlmesh._timeouts",
        ),
    ),
    ("spaces", ("trio_rlmesh.spaces",)),
    ("protocol", ("trio_rlmesh.protocol",)),
    ("adapters", ("trio_rlmesh.adapters",)),
    ("runtime", ("trio_rlmesh.runtime",)),
    ("model", ("trio_rlmesh.model",)),
    ("env and model hosts", ("trio_rlmesh.transports",)),
    ("in-process transport", ("trio_rlmesh.transports.inprocess",)),
    ("gRPC transport", ("trio_rlmesh.transports.grpc",)),
    ("remote Gymnasium envs", ("trio_rlmesh.gym",)),
    ("recording", ("trio_rlmesh.record",)),
    ("facade", ("trio_rlmesh", "trio_rlmesh._facade")),
    ("testing", ("trio_rlmesh.testing",)),
    # Ray fleets load env targets as serve-env does, and the CLI's --ray-envs uses them.
    ("CLI", ("trio_rlmesh._cli", "trio_rlmesh.__main__", "trio_rlmesh.ray")),
]

# (importer prefix, imported private module) -> why the import is right where it is.
# Keep this short: prefer adding the name to the imported package's ``_internal``.
ALLOWED_PRIVATE: dict[tuple[str, str], str] = {}

GENERATED = "trio_rlmesh.protocol._generated"


def _is_private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def _module_of(path: Path, src: Path) -> tuple[str, bool]:
    """``(dotted name, is a package)`` of a source file under ``src``."""
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def _is_module(name: str, src: Path) -> bool:
    base = src.joinpath(*name.split("."))
    return base.is_dir() or base.with_suffix(".py").is_file()


def imported_modules(source: str, module: str, is_package: bool, src: Path) -> Iterator[str]:
    """Every ``trio_rlmesh`` module ``source`` imports (``from pkg import submodule`` names
    the submodule)."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.split(".")[0] == PACKAGE)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            if base.split(".")[0] != PACKAGE:
                continue
            for alias in node.names:
                child = f"{base}.{alias.name}"
                yield child if _is_module(child, src) else base


def layer_of(module: str) -> int | None:
    """The index in :data:`LAYERS` of the layer ``module`` belongs to, if any."""
    matches = [
        (len(prefix), index)
        for index, (_, prefixes) in enumerate(LAYERS)
        for prefix in prefixes
        if module == prefix or (prefix != PACKAGE and module.startswith(prefix + "."))
    ]
    return max(matches)[1] if matches else None


def private_reach(importer: str, is_package: bool, target: str) -> str | None:
    """The private module of another package that ``target`` reaches into, if any."""
    package = importer if is_package else importer.rpartition(".")[0]
    parts = target.split(".")
    for i, part in enumerate(parts):
        if not _is_private(part):
            continue
        owner = ".".join(parts[:i])
        if package == owner or package.startswith(owner + "."):
            continue
        if part == "_internal" and i == len(parts) - 1:
            continue
        return ".".join(parts[: i + 1])
    return None


def problems(src: Path) -> list[str]:
    """Every upward import, private reach-in and unplaced module under ``src``."""
    found: list[str] = []
    for path in sorted((src / PACKAGE).rglob("*.py")):
        module, is_package = _module_of(path, src)
        if module == GENERATED or module.startswith(GENERATED + "."):
            continue  # generated by betterproto2; it imports only itself
        layer = layer_of(module)
        if layer is None:
            found.append(f"{module}: in no layer (add it to LAYERS)")
            continue
        for target in sorted(set(imported_modules(path.read_text(), module, is_package, src))):
            target_layer = layer_of(target)
            if target_layer is not None and target_layer > layer:
                found.append(
                    f"{module} ({LAYERS[layer][0]}) imports {target} "
                    f"({LAYERS[target_layer][0]}, a higher layer)"
                )
            reached = private_reach(module, is_package, target)
            if reached is not None and not any(
                module.startswith(prefix) and reached == allowed
                for prefix, allowed in ALLOWED_PRIVATE
            ):
                found.append(f"{module} imports {target}, private to another package")
    return found


def test_imports_point_down_and_stay_out_of_other_packages_internals() -> None:
    assert problems(SRC) == []


def test_every_allowed_reach_in_is_still_needed() -> None:
    """An allow-list entry nobody uses any more must go."""
    for prefix, target in ALLOWED_PRIVATE:
        saved = dict(ALLOWED_PRIVATE)
        try:
            del ALLOWED_PRIVATE[(prefix, target)]
            assert problems(SRC), f"{(prefix, target)} is allowed but no longer imported"
        finally:
            ALLOWED_PRIVATE.clear()
            ALLOWED_PRIVATE.update(saved)


def test_internal_modules_only_re_export_their_own_package() -> None:
    """A package's ``_internal`` lists names its own modules define; no logic lives there."""
    found = sorted((SRC / PACKAGE).rglob("_internal.py"))
    assert len(found) >= 4
    for path in found:
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
                continue  # the docstring
            if isinstance(node, ast.ImportFrom) and (
                node.module == "__future__" or (node.level == 1 and node.module)
            ):
                continue
            if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == [
                "__all__"
            ]:
                continue
            raise AssertionError(f"{path}: line {node.lineno} is more than a re-export")


def test_the_errors_module_imports_nothing_of_the_package() -> None:
    path = SRC / PACKAGE / "_errors.py"
    assert list(imported_modules(path.read_text(), "trio_rlmesh._errors", False, SRC)) == []


# The checker itself, on a small tree written for it.
CASES = {
    "upward": ("trio_rlmesh/spaces/_x.py", "from ..runtime import RuntimeDriver\n"),
    "upward, type-only": (
        "trio_rlmesh/_errors.py",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .runtime import R\n",
    ),
    "upward, function-local": (
        "trio_rlmesh/protocol/_x.py",
        "def f():\n    from trio_rlmesh.model import Model\n",
    ),
    "upward to the root package": (
        "trio_rlmesh/transports/grpc/_x.py",
        "from ... import __version__\n",
    ),
    "private module of another package": (
        "trio_rlmesh/model/_x.py",
        "from ..runtime._worker import new_worker\n",
    ),
    "private module imported by name": ("trio_rlmesh/model/_x.py", "from ..spaces import _codec\n"),
    "private module of a private package's sibling": (
        "trio_rlmesh/transports/grpc/_x.py",
        "from .._envhost._session import EnvHost\n",
    ),
    "unplaced module": ("trio_rlmesh/newthing/__init__.py", ""),
}
CLEAN = {
    "downward": ("trio_rlmesh/runtime/_x.py", "from ..spaces import Box\n"),
    "its own package's private module": ("trio_rlmesh/runtime/_x.py", "from ._worker import W\n"),
    "a parent package's private module": (
        "trio_rlmesh/transports/grpc/_x.py",
        "from .._envhost import EnvHost\nfrom ..._errors import Error\n",
    ),
    "another package's _internal": (
        "trio_rlmesh/model/_x.py",
        "from ..runtime._internal import new_worker\n",
    ),
    "the root from the CLI": ("trio_rlmesh/_cli/_x.py", "from .. import run\n"),
}
TREE = [
    "trio_rlmesh/__init__.py",
    "trio_rlmesh/_errors.py",
    "trio_rlmesh/_version.py",
    "trio_rlmesh/spaces/__init__.py",
    "trio_rlmesh/spaces/_codec.py",
    "trio_rlmesh/protocol/__init__.py",
    "trio_rlmesh/runtime/__init__.py",
    "trio_rlmesh/runtime/_worker.py",
    "trio_rlmesh/runtime/_internal.py",
    "trio_rlmesh/model/__init__.py",
    "trio_rlmesh/transports/__init__.py",
    "trio_rlmesh/transports/_envhost/__init__.py",
    "trio_rlmesh/transports/_envhost/_session.py",
    "trio_rlmesh/transports/grpc/__init__.py",
    "trio_rlmesh/_cli/__init__.py",
]


def _tree(tmp_path: Path, path: str, source: str) -> Path:
    for name in [*TREE, path]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).touch()
    (tmp_path / path).write_text(source)
    return tmp_path


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_checker_reports(tmp_path: Path, case: str) -> None:
    path, source = CASES[case]
    found = problems(_tree(tmp_path, path, source))
    assert len(found) == 1, found


@pytest.mark.parametrize("case", sorted(CLEAN))
def test_the_checker_accepts(tmp_path: Path, case: str) -> None:
    path, source = CLEAN[case]
    assert problems(_tree(tmp_path, path, source)) == []
