"""The ``trio-rlmesh`` console script: ``serve-env``, ``serve-model`` and ``run``.

One module per concern, imported in one direction only: :mod:`._targets` (what the
command line names), :mod:`._exit` (exit statuses, errors, signals), :mod:`._serve` and
:mod:`._run` (the commands), :mod:`._output` and :mod:`._policies` (``run``'s helpers).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from ._run import add_run_parser
from ._serve import add_serve_parsers

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trio-rlmesh", description="Serve and evaluate envs and models over rlmesh-wire-v1."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_serve_parsers(commands)
    add_run_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``trio-rlmesh`` script; returns the exit status."""
    args = _parser().parse_args(argv)
    return int(args.handler(args))
