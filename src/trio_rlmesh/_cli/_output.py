"""What ``run`` prints and writes: the episode table, the summary, the JSON report.

Results come first: the episode table (a rich table, printed through the console of
:mod:`._terminal`) and a summary (reward mean ± standard deviation, min and max, mean length,
success rate when the env reports success). The telemetry table is printed only on request.
``--json -`` puts the report on stdout, and then every other line goes to stderr.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from ..runtime import EpisodeRecord, RuntimeReport
from ._exit import UsageError

if TYPE_CHECKING:
    from rich.table import Table

__all__ = [
    "STDOUT",
    "UnwritableReport",
    "check_writable",
    "empty_report_dict",
    "episodes_table",
    "file_reason",
    "format_endpoints",
    "format_summary",
    "plural",
    "read_text_file",
    "write_json",
]

STDOUT = Path("-")
"""``--json -``: the report goes to stdout."""


class UnwritableReport(UsageError):
    """The report's path cannot be written (so no report goes there, not even a failed one)."""


def plural(count: int, noun: str) -> str:
    """``1 episode``, ``2 episodes``.

    >>> plural(1, "episode"), plural(0, "episode")
    ('1 episode', '0 episodes')
    """
    return f"{count} {noun}{'' if count == 1 else 's'}"


def episodes_table(report: RuntimeReport) -> Table:
    """The table of the episodes a run finished, one row each.

    Columns that would say nothing are left out: ``seed`` when no episode was reset with an
    explicit seed, ``success`` when the env reports none; a fleet's rows name their endpoint.
    """
    from rich import box
    from rich.table import Table

    episodes = report.episodes
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    columns: list[tuple[str, Callable[[EpisodeRecord], str]]] = [("#", lambda e: str(e.index))]
    if any(e.seed is not None for e in episodes):
        columns.append(("seed", lambda e: "-" if e.seed is None else str(e.seed)))
    columns += [
        ("steps", lambda e: str(e.steps)),
        ("reward", lambda e: f"{e.reward:.2f}"),
        ("ended", _ending),
    ]
    if any(e.success is not None for e in episodes):
        columns.append(("success", lambda e: {None: "-", True: "yes", False: "no"}[e.success]))
    if report.endpoints:
        columns.append(("endpoint", lambda e: e.endpoint or "-"))
    for name, _ in columns:
        # Folded, never cropped: a terminal too narrow for a cell wraps it, loses nothing.
        table.add_column(name, justify="right", overflow="fold")
    for episode in episodes:
        table.add_row(*(cell(episode) for _, cell in columns))
    return table


def _ending(episode: EpisodeRecord) -> str:
    if episode.terminated:
        return "terminated"
    return "truncated" if episode.truncated else "-"


def format_summary(report: RuntimeReport) -> str:
    """How the run ended, and what its episodes add up to.

    >>> from trio_rlmesh.runtime import EpisodeRecord
    >>> def ep(i, steps, reward, ok):
    ...     return EpisodeRecord(i, 0, "e", i, i, steps, reward, True, False, ok, 0.0, 0.0, 0.0)
    >>> report = RuntimeReport(
    ...     "completed", None, "s", "e", (ep(0, 10, 10.0, True), ep(1, 30, 20.0, False)), 40
    ... )
    >>> print(format_summary(report))
    completed: 2 episodes, 40 steps
    reward 15.00 ± 5.00 (min 10.00, max 20.00), mean length 20.0 steps
    success rate 50.0% (1 of 2)
    """
    episodes = report.episodes
    head = f"{report.status}: {plural(len(episodes), 'episode')}, {report.total_steps} steps"
    if report.reason:
        head += f" ({report.reason})"
    lines = [head]
    if episodes:
        rewards = [e.reward for e in episodes]
        mean_length = report.total_steps / len(episodes)
        lines.append(
            f"reward {statistics.fmean(rewards):.2f} ± {statistics.pstdev(rewards):.2f} "
            f"(min {min(rewards):.2f}, max {max(rewards):.2f}), "
            f"mean length {mean_length:.1f} steps"
        )
    rate = report.success_rate
    if rate is not None:
        successes = sum(1 for e in episodes if e.success)
        lines.append(f"success rate {rate:.1%} ({successes} of {len(episodes)})")
    if episodes:
        lines.append(report.summary.format_line())
    return "\n".join(lines)


def format_endpoints(report: RuntimeReport) -> str:
    """A fleet run's endpoints, one line each (and, for a lost one, why and what ran again),
    with the interval estimates of the episodes each one ran.

    >>> from trio_rlmesh.runtime import EndpointReport
    >>> report = RuntimeReport("completed", None, "s", "fleet", (), 90, endpoints=(
    ...     EndpointReport("10.0.0.1:7000", "completed", None, 3, 60),
    ...     EndpointReport("10.0.0.2:7000", "failed", "TransportError: reset", 1, 30, ((4, 9),)),
    ... ))
    >>> print(format_endpoints(report))
    endpoint 10.0.0.1:7000: completed, 3 episodes, 60 env steps
    endpoint 10.0.0.2:7000: failed, 1 episode, 30 env steps
      lost: TransportError: reset; started again elsewhere: episode 4 (seed 9)
    """
    lines = []
    for part in report.endpoints:
        lines.append(
            f"endpoint {part.endpoint}: {part.status}, {plural(part.episodes, 'episode')}, "
            f"{part.env_step_calls} env steps"
        )
        summary = report.summary_of(part.endpoint)
        if summary.episodes:
            lines.append(f"  {summary.format_line()}")
        if part.error is not None:
            retried = ", ".join(f"episode {i} (seed {seed})" for i, seed in part.retried)
            lines.append(f"  lost: {part.error}; started again elsewhere: {retried or 'none'}")
    return "\n".join(lines)


def empty_report_dict(reason: str) -> dict[str, Any]:
    """The JSON report of a run that failed before it started."""
    report = RuntimeReport("failed", reason, "", "", (), env_step_calls=0)
    return report.to_json_dict()


def write_json(path: Path | None, data: dict[str, Any], stdout: TextIO | None = None) -> None:
    """Write ``data`` as strict JSON to ``path`` (stdout for ``-``; nothing for ``None``)."""
    if path is None:
        return
    # Reports can carry NaN (an empty mean); keep the output strict JSON.
    text = json.dumps(data, indent=2, allow_nan=False, default=_json_default) + "\n"
    if path == STDOUT:
        stream = stdout or sys.stdout
        stream.write(text)
        stream.flush()
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def check_writable(path: Path | None, option: str) -> None:
    """Fail now, not after the run, when ``path`` could not be written (``-`` and ``None``
    always can). The probe makes the parent folders :func:`write_json` would make and
    leaves no file behind.

    Raises:
        UnwritableReport: naming the option, the path and why.
    """
    if path is None or path == STDOUT:
        return
    existed = path.exists()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a"):
            pass
    except OSError as exc:
        why = file_reason(exc)
        if isinstance(exc, (FileExistsError, NotADirectoryError)):  # a folder on the way is a file
            blocking = next((p for p in path.parents if p.exists() and not p.is_dir()), None)
            why = f"{blocking or path.parent} is not a directory"
        raise UnwritableReport(f"{option} {path} cannot be written: {why}") from None
    if not existed:
        path.unlink(missing_ok=True)


def read_text_file(path: Path, option: str) -> str:
    """The text of the file an option names.

    Raises:
        UsageError: the file cannot be read, or is not UTF-8 text (naming the option, the
            path and where the text goes wrong).
    """
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {option} {path}: {file_reason(exc)}") from None
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"{option} {path} is not UTF-8 text (byte {exc.start} is {exc.object[exc.start]:#04x})"
        ) from None


def file_reason(exc: OSError) -> str:
    """Why a file operation failed, as the end of a sentence (``no such file or directory``)."""
    return (exc.strerror or str(exc) or type(exc).__name__).lower()


def _json_default(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    raise TypeError(f"not JSON serializable: {type(value).__name__}")
