"""The ``trio-rlmesh`` console script: ``serve-env``, ``serve-model``, ``run``, ``show``,
``compare`` and ``explain``.

One module per concern, imported in one direction only: :mod:`._exit` (exit statuses,
errors, signals), :mod:`._targets` (what the command line names), :mod:`._serve` and
:mod:`._run` and :mod:`._show` and :mod:`._compare` and :mod:`._explain` (the commands),
:mod:`._output` and :mod:`._policies` (``run``'s helpers; ``run`` also prints
:mod:`._explain`'s pairing), :mod:`._compare_plot` (``compare --plot``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from ._compare import add_compare_parser
from ._exit import EXIT_USAGE, UsageError
from ._explain import add_explain_parser
from ._output import empty_report_dict, write_json
from ._run import add_run_parser
from ._serve import add_serve_parsers
from ._show import add_show_parser

__all__ = ["main"]


class _BadArguments(Exception):
    def __init__(self, parser: argparse.ArgumentParser, message: str) -> None:
        super().__init__(message)
        self.parser = parser
        self.message = message


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors come back to :func:`main` instead of exiting."""

    def error(self, message: str) -> NoReturn:
        raise _BadArguments(self, message)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="trio-rlmesh", description="Serve and evaluate envs and models over rlmesh-wire-v1."
    )
    parser.add_argument("--version", action="version", version=_version())
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_serve_parsers(commands)
    add_run_parser(commands)
    add_show_parser(commands)
    add_compare_parser(commands)
    add_explain_parser(commands)
    return parser


def _version() -> str:
    from .._version import __version__
    from ..protocol import PROTOCOL_GENERATION, WORKFLOW_EDITION

    return f"trio-rlmesh {__version__} ({PROTOCOL_GENERATION}, workflow edition {WORKFLOW_EDITION})"


def _json_path(argv: Sequence[str]) -> Path | None:
    """``run``'s ``--json`` path, read leniently from arguments that did not parse."""
    if "run" not in argv:
        return None
    lenient = _Parser(add_help=False)
    lenient.add_argument("--json", type=Path)
    try:
        known, _ = lenient.parse_known_args(argv)
    except _BadArguments:
        return None
    path: Path | None = known.json
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``trio-rlmesh`` script; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = _parser().parse_args(argv)
    except _BadArguments as bad:
        print(f"{bad.parser.prog}: {bad.message} (see {bad.parser.prog} --help)", file=sys.stderr)
        reason = f"{UsageError.__name__}: {bad.message}"
        write_json(_json_path(argv), empty_report_dict(reason))
        return EXIT_USAGE
    return int(args.handler(args))
