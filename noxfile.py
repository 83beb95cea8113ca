"""The one entry point for tests, lint, typecheck, protos, interop, docs and benchmarks.

Run ``nox -l`` to list the sessions. Python versions come from the classifiers in
``pyproject.toml``; every interpreter must be on PATH (under pyenv, set ``PYENV_VERSION``).
"""

from __future__ import annotations

import filecmp
import os
import shutil
import sys
import tempfile
from pathlib import Path

import nox

nox.needs_version = ">=2025.2.9"
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.error_on_missing_interpreters = True
nox.options.sessions = [
    "lint",
    "typecheck",
    "protos_check",
    "changelog_check",
    "docs",
    "tests",
    "interop",
]

ROOT = Path(__file__).parent
PYPROJECT = nox.project.load_toml("pyproject.toml")
PYTHONS = nox.project.python_versions(PYPROJECT)
DEFAULT_PYTHON = "3.11"
PROTOS = ROOT / "protos"
GENERATED = ROOT / "src" / "trio_rlmesh" / "protocol" / "_generated"
# Where `nox -s docs` puts the HTML (gitignored): open docs/_build/html/index.html.
DOCS_HTML = ROOT / "docs" / "_build" / "html"
# The rlmesh release every wire behaviour is pinned against.
RLMESH_PEER = "rlmesh[gymnasium,numpy]==0.1.0"


def _group(name: str) -> list[str]:
    return list(nox.project.dependency_groups(PYPROJECT, name))


@nox.session(python=PYTHONS)
def tests(session: nox.Session) -> None:
    """Unit and in-memory transport tests against the installed package."""
    session.install(".[gymnasium]", *_group("test"))
    # The interop suite needs the rlmesh peer and runs in its own session.
    session.run("pytest", "-m", "not interop", "--ignore=tests/interop", *session.posargs)


@nox.session(python=DEFAULT_PYTHON)
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check (generated code excluded)."""
    session.install(*_group("lint"))
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session(python=DEFAULT_PYTHON)
def typecheck(session: nox.Session) -> None:
    """mypy --strict on src/."""
    session.install(".[gymnasium]", *_group("typecheck"))
    session.run("mypy", *session.posargs)


def _generate(session: nox.Session, out: Path) -> None:
    files = sorted(str(p.relative_to(PROTOS)) for p in PROTOS.rglob("*.proto"))
    out.mkdir(parents=True, exist_ok=True)
    # Messages only: grpclib stubs are written by hand in transports.grpc, so that
    # importing the protocol layer never imports grpclib or asyncio.
    session.run(
        "python",
        "-m",
        "grpc_tools.protoc",
        f"-I{PROTOS}",
        f"--python_betterproto2_out={out}",
        "--python_betterproto2_opt=client_generation=none",
        "--python_betterproto2_opt=server_generation=none",
        *files,
        silent=True,
    )


@nox.session(python=DEFAULT_PYTHON)
def protos(session: nox.Session) -> None:
    """Regenerate src/trio_rlmesh/protocol/_generated from protos/."""
    session.install(*_group("protos"))
    shutil.rmtree(GENERATED, ignore_errors=True)
    _generate(session, GENERATED)


@nox.session(python=DEFAULT_PYTHON)
def protos_check(session: nox.Session) -> None:
    """Fail when the committed generated code differs from a fresh generation."""
    session.install(*_group("protos"))
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp) / "_generated"
        _generate(session, fresh)
        diff = filecmp.dircmp(fresh, GENERATED)
        stale: list[str] = []

        def walk(d: filecmp.dircmp[str], prefix: str) -> None:
            stale.extend(prefix + n for n in d.left_only + d.right_only + d.diff_files)
            for name, sub in d.subdirs.items():
                if name != "__pycache__":
                    walk(sub, f"{prefix}{name}/")

        walk(diff, "")
        stale = [s for s in stale if "__pycache__" not in s]
        if stale:
            session.error(f"generated code is stale ({', '.join(stale)}); run `nox -s protos`")


@nox.session(python=DEFAULT_PYTHON)
def interop(session: nox.Session) -> None:
    """Wire tests against the real rlmesh 0.1.0 peer, in both directions."""
    session.install(".[gymnasium]", *_group("test"), RLMESH_PEER)
    # The interop tests skip without the peer; here its absence must fail, not skip.
    session.run(
        "python", "-c", "import rlmesh; assert rlmesh.__version__ == '0.1.0', rlmesh.__version__"
    )
    session.run("pytest", "-m", "interop", *session.posargs)


@nox.session(python=DEFAULT_PYTHON)
def docs(session: nox.Session) -> None:
    """Build the HTML docs into docs/_build/html (warnings are errors), then check every page."""
    session.install(".[gymnasium]", *_group("docs"))
    shutil.rmtree(DOCS_HTML, ignore_errors=True)  # no page left over from an earlier build
    session.run("sphinx-build", "-W", "--keep-going", "-b", "html", "docs", str(DOCS_HTML))
    # Mistakes Sphinx builds silently: unrendered directives, lost table cells, empty API pages.
    session.run("python", "docs/check_html.py", str(DOCS_HTML))
    session.log(f"HTML docs: {DOCS_HTML / 'index.html'}")


@nox.session(venv_backend="none")
def changelog(session: nox.Session) -> None:
    """Regenerate CHANGELOG.md from the fragments in changelog.d/ (commit the result)."""
    session.run(sys.executable, "tools/changelog.py")


@nox.session(venv_backend="none")
def changelog_check(session: nox.Session) -> None:
    """Fail when CHANGELOG.md differs from what the changelog.d/ fragments give."""
    session.run(sys.executable, "tools/changelog.py", "--check")


@nox.session(python=DEFAULT_PYTHON)
def bench(session: nox.Session) -> None:
    """Side-by-side benchmarks of trio-rlmesh and rlmesh 0.1.0 (prints ratios)."""
    session.install(".[gymnasium]", RLMESH_PEER)
    env = {"PYTHONHASHSEED": "0", **{k: v for k, v in os.environ.items() if k == "BENCH_QUICK"}}
    session.run("python", "bench/run.py", *session.posargs, env=env)
