"""``trio-rlmesh compare``: runs' interval estimates side by side, and a verdict per pair.

Each run is a JSON report written by ``run --json``. Its summary is computed again from its
episodes with this command's resamples and seed (the defaults give the numbers its own
report has), every pair is compared by :mod:`trio_rlmesh.runtime`'s comparison (paired
over seeds when the two ran the same seeds), and what could make a comparison unfair
(another env, other spaces, other episode caps, a run that did not complete) is said first.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

import attrs

from ..record._internal import check_plot_path
from ..runtime import RunSummary
from ..runtime._internal import (
    RESAMPLES,
    SEED,
    Interval,
    PairComparison,
    RunSample,
    compare_pair,
    decimals_for,
    format_estimate,
    paired_order,
    summarize,
)
from ._exit import EXIT_OK, UsageError, describe
from ._output import STDOUT, check_writable, file_reason, write_json

__all__ = ["ComparedRun", "add_compare_parser", "compare_command", "read_run"]

_SETUP_NAMES = {
    "env": "env",
    "observation_space": "observation space",
    "action_space": "action space",
    "max_episode_steps": "--max-episode-steps",
    "max_episode_seconds": "--max-episode-seconds",
}
"""The fields of a report's ``setup`` that runs compared must share, as a warning names them."""


def add_compare_parser(commands: Any) -> None:
    """Add ``compare`` to the script's subcommands."""
    p: argparse.ArgumentParser = commands.add_parser(
        "compare",
        help="compare runs' JSON reports with interval estimates",
        description=(
            "Compare the JSON reports of two or more runs ('trio-rlmesh run --json'): each "
            "run's mean and IQM with 95% bootstrap intervals, then for each pair the "
            "difference of means and the probability of improvement with their intervals "
            "(paired over seeds when both runs ran the same seeds) and a verdict. Needs "
            "trio-rlmesh[analysis]."
        ),
    )
    p.add_argument("reports", metavar="REPORT", type=Path, nargs="+", help="a run's JSON report")
    p.add_argument(
        "--json",
        type=Path,
        metavar="PATH",
        help="write the comparison as JSON to PATH ('-': stdout)",
    )
    p.add_argument(
        "--plot",
        type=Path,
        metavar="PATH",
        help="save interval estimates and performance profiles of every run to PATH (.png)",
    )
    p.add_argument(
        "--resamples",
        type=int,
        default=RESAMPLES,
        metavar="N",
        help=f"bootstrap resamples per interval (default {RESAMPLES})",
    )
    p.add_argument(
        "--seed", type=int, default=SEED, metavar="S", help=f"the bootstrap's seed (default {SEED})"
    )
    p.set_defaults(handler=compare_command)


@attrs.frozen
class ComparedRun:
    """One report, read."""

    name: str
    path: Path
    sample: RunSample
    summary: RunSummary
    status: str
    reason: str | None
    setup: dict[str, Any] | None

    def to_json_dict(self) -> dict[str, Any]:
        return {"name": self.name, "path": str(self.path), **self.summary.to_json_dict()}


def read_run(path: Path, name: str, *, resamples: int, seed: int) -> ComparedRun:
    """A report from ``path``, summarized again.

    Raises:
        UsageError: the file cannot be read or is not a ``run --json`` report.
    """
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise UsageError(f"report {path} cannot be read: {file_reason(exc)}") from None
    except ValueError as exc:
        raise UsageError(f"report {path} is not JSON: {exc}") from None
    episodes = data.get("episodes") if isinstance(data, dict) else None
    if not isinstance(episodes, list):
        raise UsageError(f"{path} is not a report of 'trio-rlmesh run --json' (no episodes)")
    try:
        episodes = sorted(episodes, key=lambda e: int(e["index"]))
        rewards = tuple(float(e["reward"]) for e in episodes)
        seeds = tuple(None if e.get("seed") is None else int(e["seed"]) for e in episodes)
        steps = [int(e["steps"]) for e in episodes]
        successes = [e.get("success") for e in episodes]
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"{path}: an episode lacks a field or has a bad one ({exc!r})") from None
    own = data.get("summary")
    started_at, duration_s = None, None
    if isinstance(own, dict):  # the run's own timing: nothing in the episodes has it
        duration_s = own.get("duration_s")
        if isinstance(own.get("started_at"), str):
            started_at = datetime.fromisoformat(own["started_at"])
    summary = summarize(
        rewards,
        steps=steps,
        successes=successes,
        started_at=started_at,
        duration_s=duration_s,
        resamples=resamples,
        seed=seed,
    )
    setup = data.get("setup")
    return ComparedRun(
        name=name,
        path=path,
        sample=RunSample(name, rewards, seeds),
        summary=summary,
        status=str(data.get("status")),
        reason=data.get("reason"),
        setup=setup if isinstance(setup, dict) else None,
    )


def _names(paths: Sequence[Path]) -> list[str]:
    """Each report's name: its file name without ``.json``, or its path where two share one."""
    stems = [path.stem for path in paths]
    return [
        stem if stems.count(stem) == 1 else str(path)
        for stem, path in zip(stems, paths, strict=True)
    ]


def cautions(runs: Sequence[ComparedRun]) -> list[str]:
    """What could make the comparison unfair, one sentence each."""
    found = []
    for run in runs:
        if run.status != "completed":
            found.append(
                f"{run.name} did not complete ({run.status}: {run.reason}); "
                f"its {run.summary.episodes} episodes are compared as they are"
            )
        if run.setup is None:
            found.append(
                f"{run.name} has no setup block (an older report, or a run that never "
                "started): its env, spaces and episode caps cannot be checked"
            )
    for field, shown_as in _SETUP_NAMES.items():
        values = {run.name: run.setup.get(field) for run in runs if run.setup is not None}
        if len(set(map(json.dumps, values.values()))) > 1:
            shown = "; ".join(f"{name}: {value}" for name, value in values.items())
            found.append(f"the runs differ in {shown_as} ({shown})")
    for a, b in itertools.combinations(runs, 2):
        shared = set(a.sample.seeds) & set(b.sample.seeds) - {None}
        if shared and paired_order(a.sample, b.sample) is None:
            found.append(
                f"{a.name} and {b.name} are compared unpaired: they share {len(shared)} "
                "seeds, but did not run the same seeds once each (give both runs the same "
                "--seeds to pair them)"
            )
    return found


def _estimate(value: float | None, ci: Interval | None = None, *, decimals: int) -> str:
    return "-" if value is None else format_estimate(value, ci, decimals)


def format_table(runs: Sequence[ComparedRun]) -> str:
    """Every run's aggregates with their intervals, one line each."""
    level = runs[0].summary.confidence_level if runs else 0.95
    header = ["run", "n", f"mean [{level:.0%} CI]", f"IQM [{level:.0%} CI]", "median", "std"]
    header.append("success")
    rows = [header]
    for run in runs:
        s = run.summary
        values = [v for v in (s.mean, s.iqm, s.median, s.std) if v is not None]
        values += [v for ci in (s.mean_ci, s.iqm_ci) if ci is not None for v in ci]
        show = functools.partial(_estimate, decimals=decimals_for(*values))
        rows.append(
            [
                run.name,
                str(s.episodes),
                show(s.mean, s.mean_ci),
                show(s.iqm, s.iqm_ci),
                show(s.median),
                show(s.std),
                s.format_success() or "-",
            ]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = []
    for row in rows:
        cells = [row[0].ljust(widths[0])]
        cells += [cell.rjust(width) for cell, width in zip(row[1:], widths[1:], strict=True)]
        lines.append("  ".join(cells).rstrip())
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def compare_command(args: argparse.Namespace) -> int:
    """Entry point of ``trio-rlmesh compare``; returns the process exit status."""
    out: TextIO = sys.stderr if args.json == STDOUT else sys.stdout
    try:
        if len(args.reports) < 2:
            raise UsageError("compare needs at least two reports")
        if args.resamples < 1:
            raise UsageError(f"--resamples must be at least 1, got {args.resamples}")
        check_writable(args.json, "--json")
        check_writable(args.plot, "--plot")
        if args.plot is not None:
            check_plot_path(args.plot)  # a kind of file matplotlib writes
        paths: list[Path] = args.reports
        runs = [
            read_run(path, name, resamples=args.resamples, seed=args.seed)
            for path, name in zip(paths, _names(paths), strict=True)
        ]
        pairs: list[PairComparison] = [
            compare_pair(a.sample, b.sample, resamples=args.resamples, seed=args.seed)
            for a, b in itertools.combinations(runs, 2)
        ]
        said = cautions(runs)
        for warning in said:
            sys.stderr.write(f"trio-rlmesh compare: warning: {warning}\n")
        out.write(format_table(runs) + "\n\n")
        out.write("".join(pair.verdict() + "\n" for pair in pairs))
        out.flush()
        if args.plot is not None:
            from ._compare_plot import plot_comparison

            shown = [(run.sample, run.summary) for run in runs]
            written = plot_comparison(shown, args.plot, resamples=args.resamples, seed=args.seed)
            out.write(f"plot written to {written}\n")
        data = {
            "runs": [run.to_json_dict() for run in runs],
            "pairs": [pair.to_json_dict() for pair in pairs],
            "warnings": said,
        }
        write_json(args.json, data)
        if args.json is not None and args.json != STDOUT:
            out.write(f"comparison written to {args.json}\n")
    except Exception as exc:  # the one place a failure becomes an exit status
        failure = describe(exc)
        sys.stderr.write(f"trio-rlmesh compare: {failure.message}\n")
        return failure.exit_code
    return EXIT_OK
