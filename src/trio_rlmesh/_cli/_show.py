"""``trio-rlmesh show``: a recorded dataset's summary, and a plot of its returns."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ._exit import EXIT_OK, describe
from ._output import check_writable

__all__ = ["add_show_parser"]


def add_show_parser(commands: Any) -> None:
    """Add ``show`` to the script's subcommands."""
    p: argparse.ArgumentParser = commands.add_parser(
        "show",
        help="summarize a recorded dataset",
        description=(
            "Summarize a Minari dataset written by 'trio-rlmesh run --record': its episodes, "
            "steps and return statistics; with --plot, also draw the return per episode."
        ),
    )
    p.add_argument("dataset", metavar="DATASET_DIR", type=Path, help="the dataset's directory")
    p.add_argument(
        "--plot",
        type=Path,
        metavar="PATH",
        help="save a return-per-episode plot to PATH (.png, .svg, .pdf...)",
    )
    p.set_defaults(handler=show_command)


def show_command(args: argparse.Namespace) -> int:
    """Entry point of ``trio-rlmesh show``; returns the process exit status."""
    from ..record import plot_returns, summarize
    from ..record._internal import check_plot_path

    try:
        if args.plot is not None:  # checked before anything is printed
            check_plot_path(args.plot)
            check_writable(args.plot, "--plot")
        summary = summarize(args.dataset)
        print(summary.format())
        if args.plot is not None:
            written = plot_returns(summary, args.plot)
            print(f"plot      {written}")
    except Exception as exc:  # the one place a failure becomes an exit status
        failure = describe(exc)
        sys.stderr.write(f"trio-rlmesh show: {failure.message}\n")
        return failure.exit_code
    return EXIT_OK
