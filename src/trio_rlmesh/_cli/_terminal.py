"""Where ``run``'s output goes: a live progress bar on a terminal, plain text anywhere else.

rich draws it. :func:`open_console` gives the console results are printed through: on a
terminal it may style them; on anything else (a pipe, a file) it writes plain text, with no
escape codes and no wrapping, whatever the environment asks for. :class:`LiveProgress` draws
the progress bar below everything else while a run goes on: whatever the process writes
meanwhile to ``sys.stdout`` or ``sys.stderr`` on that same terminal (a warning, the user's own
``print``, the line that says Ctrl-C was received) goes through the console and lands on its
own lines above the bar, which rich redraws at the terminal's width, never wider.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

import trio

from ..runtime import (
    EpisodeCompleted,
    EpisodeRecord,
    RuntimeHooks,
    RuntimeReport,
    StepCompleted,
)
from ._output import plural

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

__all__ = ["REFRESH_INTERVAL", "LiveProgress", "RunProgress", "open_console"]

REFRESH_INTERVAL = 0.2
"""Seconds between two redraws of the progress bar."""
PLAIN_WIDTH = 100_000
"""The width text is laid out in when the stream is no terminal: lines are never wrapped."""
BAR_WIDTH = 24


class RunProgress(RuntimeHooks):
    """Counts what the run has done; the progress bar shows it, never the hot path."""

    def __init__(self, episodes: int, endpoints: int = 1) -> None:
        self.target = episodes
        self.endpoints = endpoints
        """The fleet's size (1: not a fleet)."""
        self.lost: Callable[[], int] = lambda: 0
        """How many of the fleet's endpoints are lost so far (set once the run starts)."""
        self.done = 0
        self.steps = 0
        self.reward_sum = 0.0
        self.started = time.perf_counter()
        self.records: list[EpisodeRecord] = []
        """Every episode counted so far: what a run that must end at once still reports."""

    async def step_completed(self, event: StepCompleted) -> None:
        self.steps = event.total_steps

    async def episode_completed(self, event: EpisodeCompleted) -> None:
        self.done += 1
        self.reward_sum += event.record.reward
        self.records.append(event.record)

    def report(self, reason: str) -> RuntimeReport:
        """A cancelled report of the episodes counted so far (no telemetry; a quick summary:
        the process is ending)."""
        return RuntimeReport(
            "cancelled",
            reason,
            "",
            "",
            tuple(self.records),
            env_step_calls=self.steps,
            summary_resamples=0,
        )

    def text(self) -> str:
        """What the bar says beside it, most useful first (a narrow terminal cuts the end).

        >>> progress = RunProgress(10)
        >>> progress.text().split("  ")[0]
        '0/10 episodes'
        """
        elapsed = max(time.perf_counter() - self.started, 1e-9)
        parts = [f"{self.done}/{self.target} episodes", f"{self.steps / elapsed:,.0f} steps/s"]
        if self.done:
            parts.append(f"mean reward {self.reward_sum / self.done:.2f}")
        if self.endpoints > 1:
            up = self.endpoints - self.lost()
            parts.append(f"{up}/{plural(self.endpoints, 'endpoint')} up")
        return "  ".join(parts)


def open_console(stream: TextIO) -> Console:
    """A rich console writing to ``stream``: styled for a terminal, else plain text.

    Text is printed as given (no markup, no highlighting); a terminal's lines are wrapped
    at its width, between words, and tables laid out to fit it.
    """
    from rich.console import Console

    terminal = _is_terminal(stream)
    return Console(
        file=stream,
        force_terminal=terminal,
        color_system="auto" if terminal else None,
        width=None if terminal else PLAIN_WIDTH,
        markup=False,
        emoji=False,
        highlight=False,
    )


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


class LiveProgress:
    """The progress bar of a run, redrawn every :data:`REFRESH_INTERVAL` seconds by
    :meth:`run` (a trio task) until :meth:`stop`.

    Drawn only when the console is a terminal; otherwise every method does nothing.
    """

    def __init__(self, console: Console, progress: RunProgress) -> None:
        self._progress = progress
        self._bar: Progress | None = None
        self._task: Any = None
        self._started = False
        self._lock = threading.Lock()
        if console.is_terminal:
            from rich.progress import BarColumn, Progress, TextColumn
            from rich.table import Column

            self._bar = Progress(
                BarColumn(bar_width=BAR_WIDTH),
                TextColumn("{task.description}", table_column=Column(no_wrap=True)),
                console=console,
                auto_refresh=False,
                # Only a stream on this terminal goes through the console: one redirected
                # to a file keeps its lines to itself.
                redirect_stdout=_is_terminal(sys.stdout),
                redirect_stderr=_is_terminal(sys.stderr),
            )
            self._task = self._bar.add_task(progress.text(), total=progress.target)

    def start(self) -> None:
        """Draw the bar (below whatever was printed before)."""
        with self._lock:
            if self._bar is not None:
                self._bar.start()
                self._started = True
        self.refresh()

    def refresh(self) -> None:
        """Redraw the bar with the run's counts now."""
        with self._lock:
            if self._bar is not None and self._started:
                self._update(self._bar)
                self._bar.refresh()

    def _update(self, bar: Progress) -> None:
        bar.update(self._task, completed=self._progress.done, description=self._progress.text())

    async def run(self) -> NoReturn:
        """Start the bar and redraw it until cancelled."""
        self.start()
        while True:
            await trio.sleep(REFRESH_INTERVAL)
            self.refresh()

    def stop(self) -> None:
        """Draw the bar a last time and leave it there, the cursor on the next line;
        idempotent, and safe from another thread (a process that must end at once)."""
        with self._lock:
            bar, self._bar = self._bar, None
            if bar is not None and self._started:
                self._update(bar)
                bar.stop()
