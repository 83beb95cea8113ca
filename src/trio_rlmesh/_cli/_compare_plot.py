"""``trio-rlmesh compare --plot``: every run's interval estimates and performance profile in
one figure (matplotlib, without pyplot's global state; the profiles drawn by rliable)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .._errors import SpecError
from ..runtime import RunSummary
from ..runtime._internal import ANALYSIS_EXTRA, RunSample, performance_profiles

__all__ = ["comparison_figure", "plot_comparison"]


Run = tuple[RunSample, RunSummary]
"""A run's episodes, and their summary."""


def _intervals(axes: Any, runs: Sequence[Run], which: str, colors: list[Any]) -> None:
    """One row per run: its point estimate as a dot, its interval as a bar with caps (a
    dot alone when it has none; an interval of width 0 is then still seen)."""
    for row, (_, summary) in enumerate(runs):
        point = getattr(summary, which)
        interval = getattr(summary, f"{which}_ci")
        if point is None:
            continue
        low, high = interval if interval is not None else (point, point)
        axes.errorbar(
            point,
            row,
            xerr=[[point - low], [high - point]],
            fmt="o",
            color=colors[row],
            elinewidth=4,
            capsize=6,
            capthick=2,
        )
    axes.set_yticks(range(len(runs)))
    axes.set_ylim(-0.6, len(runs) - 0.4)
    axes.invert_yaxis()  # the first run on top, as in the table
    axes.margins(x=0.08)
    axes.grid(True, axis="x", alpha=0.3)
    axes.set_xlabel("return")


def plot_comparison(
    runs: Sequence[Run], out: str | os.PathLike[str], *, resamples: int, seed: int
) -> Path:
    """Save the mean and the IQM of every run with their intervals, and every run's
    performance profile (the fraction of its episodes above each return) with its
    bootstrap band, side by side in one figure; the legend sits below the plots.

    Returns the path written.

    Raises:
        SpecError: matplotlib or rliable is missing (the ``analysis`` extra).
    """
    target = Path(os.fspath(out))
    figure = comparison_figure(runs, resamples=resamples, seed=seed)
    target.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(target)
    return target


def comparison_figure(runs: Sequence[Run], *, resamples: int, seed: int) -> Any:
    """The matplotlib ``Figure`` :func:`plot_comparison` saves."""
    try:
        from matplotlib import colormaps
        from matplotlib.figure import Figure
        from matplotlib.patches import Patch
        from rliable import plot_utils
    except ImportError:
        raise SpecError(
            f"plotting a comparison needs matplotlib and rliable: {ANALYSIS_EXTRA}"
        ) from None
    palette = colormaps["tab10"]
    colors = [palette(i % palette.N) for i in range(len(runs))]
    names = [sample.name for sample, _ in runs]
    level = f"{runs[0][1].confidence_level:.0%}"
    figure = Figure(figsize=(12.0, 2.2 + 0.35 * len(runs)), layout="constrained")
    mean_axes, iqm_axes, profile_axes = figure.subplots(1, 3, width_ratios=(1.0, 1.0, 1.4))
    _intervals(mean_axes, runs, "mean", colors)
    mean_axes.set_yticklabels(names)
    mean_axes.set_title(f"mean, {level} CI")
    _intervals(iqm_axes, runs, "iqm", colors)
    iqm_axes.set_yticklabels([])
    iqm_axes.set_title(f"IQM, {level} CI")
    taus, profiles, bands = performance_profiles(
        [sample for sample, _ in runs], resamples=resamples, seed=seed
    )
    plot_utils.plot_performance_profiles(
        profiles,
        taus,
        performance_profile_cis=bands,
        ax=profile_axes,
        colors=dict(zip(names, colors, strict=True)),
        xlabel=r"return $\tau$",
        ylabel=r"fraction of episodes $> \tau$",
        labelsize="medium",
        ticklabelsize="medium",
    )
    profile_axes.set_title("performance profiles")
    handles = [Patch(color=color, label=name) for name, color in zip(names, colors, strict=True)]
    figure.legend(handles=handles, loc="outside lower center", ncols=min(len(runs), 6))
    return figure
