"""Reading a recorded dataset back: its summary, and a plot of the return per episode."""

from __future__ import annotations

import functools
import math
import os
import statistics
from pathlib import Path
from typing import Any

import attrs

from .._errors import SpecError
from ..runtime import RunSummary
from ..runtime._internal import summarize as summarize_returns
from ._bands import draw_intervals
from ._options import EXTRA, require_minari

__all__ = ["DatasetSummary", "check_plot_path", "plot_returns", "summarize"]


def _data_path(path: Path) -> Path:
    """The Minari data directory for a dataset directory (or the data directory itself)."""
    for candidate in (path / "data", path):
        if (candidate / "metadata.json").is_file():
            return candidate
    raise SpecError(f"{path} holds no Minari dataset (no data/metadata.json)")


@attrs.frozen
class DatasetSummary:
    """What a recorded dataset holds."""

    path: Path
    dataset_id: str
    env_id: str | None
    """The env's own id, as the recording named it."""
    model: str | None
    version: str | None
    """The trio-rlmesh version that recorded it."""
    returns: tuple[float, ...]
    """The return (sum of rewards) of each episode, in dataset order."""
    lengths: tuple[int, ...]
    terminated: int
    """Episodes that ended by termination (the rest were truncated)."""

    @property
    def episodes(self) -> int:
        return len(self.returns)

    @property
    def steps(self) -> int:
        return sum(self.lengths)

    @functools.cached_property
    def intervals(self) -> RunSummary:
        """The returns' interval estimates, as a run's report has them (no timing)."""
        return summarize_returns(self.returns, steps=self.lengths)

    def format(self) -> str:
        """The summary as a few lines of text.

        >>> print(DatasetSummary(Path("d-v0"), "d-v0", "E-v1", "m", "0.1", (1.0, 3.0), (1, 3), 1)
        ...       .format())                                     # doctest: +NORMALIZE_WHITESPACE
        dataset   d-v0 (d-v0)
        env       E-v1
        model     m
        episodes  2 (1 terminated, 1 truncated)
        steps     4 (mean length 2.0)
        return    mean 2.000  std 1.414  min 1.000  max 3.000
        intervals mean 2.000 [1.000, 3.000] · IQM 2.000 [1.000, 3.000] (n=2)
        """
        lines = [
            f"dataset   {self.dataset_id} ({self.path})",
            f"env       {self.env_id or 'unknown'}",
            f"model     {self.model or 'unknown'}",
            f"episodes  {self.episodes} ({self.terminated} terminated, "
            f"{self.episodes - self.terminated} truncated)",
        ]
        if not self.episodes:
            return "\n".join(lines)
        mean_length = self.steps / self.episodes
        spread = statistics.stdev(self.returns) if self.episodes > 1 else 0.0
        lines += [
            f"steps     {self.steps} (mean length {mean_length:.1f})",
            f"return    mean {statistics.fmean(self.returns):.3f}  std {spread:.3f}  "
            f"min {min(self.returns):.3f}  max {max(self.returns):.3f}",
            f"intervals {self.intervals.format_line()}",
        ]
        return "\n".join(lines)


def summarize(path: str | os.PathLike[str]) -> DatasetSummary:
    """Read a dataset's episodes and sum them up (needs Minari: Python >= 3.11).

    ``path`` is the dataset's directory (or its ``data`` directory).

    Example::

        summary = summarize("runs/cartpole-eval-v0")
        print(summary.format())
    """
    minari = require_minari("reading a Minari dataset")
    where = Path(os.fspath(path))
    dataset = minari.MinariDataset(_data_path(where))
    metadata: dict[str, Any] = dataset.storage.metadata
    returns: list[float] = []
    lengths: list[int] = []
    terminated = 0
    for episode in dataset.iterate_episodes():
        rewards = episode.rewards
        returns.append(math.fsum(float(r) for r in rewards))
        lengths.append(len(rewards))
        terminated += bool(len(episode.terminations) and episode.terminations[-1])
    return DatasetSummary(
        path=where,
        dataset_id=str(metadata.get("dataset_id", where.name)),
        env_id=metadata.get("trio_rlmesh.env_id"),
        model=metadata.get("trio_rlmesh.model") or metadata.get("algorithm_name") or None,
        version=metadata.get("trio_rlmesh.version"),
        returns=tuple(returns),
        lengths=tuple(lengths),
        terminated=terminated,
    )


def _figure_class() -> Any:
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise SpecError(f"plotting returns needs matplotlib: {EXTRA}") from None
    return Figure


def check_plot_path(out: str | os.PathLike[str]) -> Path:
    """``out`` as a path, once matplotlib is known to write its kind of file (by the
    extension; none means PNG).

    Raises:
        SpecError: matplotlib is missing, or does not write files with that extension.
    """
    target = Path(os.fspath(out))
    kinds = _figure_class()().canvas.get_supported_filetypes()
    kind = target.suffix.lower().removeprefix(".")
    if kind and kind not in kinds:
        raise SpecError(
            f"cannot plot to {target}: matplotlib writes {', '.join(sorted(kinds))} files, "
            f"not {kind!r}; name the file by its kind, e.g. returns.png"
        )
    return target


RETURNS_WINDOW = 10
"""Episodes the spread band of :func:`plot_returns` is taken over (fewer at the start)."""


def plot_returns(summary: DatasetSummary, out: str | os.PathLike[str]) -> Path:
    """Save a plot of the return per episode to ``out`` (PNG, SVG, PDF... by the extension).

    The plot shows each episode's return; the intervals :meth:`DatasetSummary.format`
    prints: the mean with a band for its confidence interval, the IQM with a band for its;
    and the spread as a band: the mean ± standard deviation of the returns over the last
    :data:`RETURNS_WINDOW` episodes. The legend sits beside the axes, never over the data.
    Needs matplotlib (in the ``record`` extra); the intervals, the ``analysis`` extra.
    Returns the path written.

    Raises:
        SpecError: matplotlib is missing, or does not write ``out``'s kind of file.
    """
    target = check_plot_path(out)
    figure = _returns_figure(summary)
    target.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(target)
    return target


def _returns_figure(summary: DatasetSummary) -> Any:
    """The figure :func:`plot_returns` saves: every series it shows is drawn here."""
    from matplotlib.ticker import MaxNLocator

    figure = _figure_class()(figsize=(8.0, 3.6), layout="constrained")
    axes = figure.add_subplot()
    returns = list(summary.returns)
    episodes = range(len(returns))
    if len(returns) > 1:
        low, high = _rolling_spread(returns, RETURNS_WINDOW)
        axes.fill_between(
            episodes, low, high, color="tab:blue", alpha=0.15, linewidth=0,
            label=f"mean ± std, last {min(RETURNS_WINDOW, len(returns))}",
        )  # fmt: skip
    axes.plot(episodes, returns, marker="o", markersize=3, linewidth=1, label="return")
    draw_intervals(axes, summary.intervals)
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel("episode")
    axes.set_ylabel("return")
    axes.set_title(f"{summary.dataset_id}: {summary.env_id or 'env'}, {summary.model or 'model'}")
    axes.grid(True, alpha=0.3)
    # Beside the axes, not over them: the constrained layout makes the room.
    axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    return figure


def _rolling_spread(values: list[float], window: int) -> tuple[list[float], list[float]]:
    """Mean - std and mean + std of the last ``window`` values at each position.

    >>> _rolling_spread([1.0, 3.0, 5.0], 2)
    ([1.0, 1.0, 3.0], [1.0, 3.0, 5.0])
    """
    low, high = [], []
    for end in range(1, len(values) + 1):
        recent = values[max(0, end - window) : end]
        mean, spread = statistics.fmean(recent), statistics.pstdev(recent)
        low.append(mean - spread)
        high.append(mean + spread)
    return low, high
