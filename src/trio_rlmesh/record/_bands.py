"""What ``show --plot`` draws over the returns: the interval estimates of ``show``'s text."""

from __future__ import annotations

from typing import Any

from ..runtime import RunSummary

__all__ = ["draw_intervals"]


def draw_intervals(axes: Any, summary: RunSummary) -> None:
    """Draw, across ``axes``, the mean with a band for its confidence interval and the IQM
    with a band for its, each labelled for a legend (the spread is the caller's band)."""
    if summary.mean is None:
        return
    level = f"{summary.confidence_level:.0%}"
    axes.axhline(
        summary.mean, color="tab:red", linestyle="--", linewidth=1, label=f"mean {summary.mean:.2f}"
    )
    if summary.mean_ci is not None:
        low, high = summary.mean_ci
        axes.axhspan(low, high, color="tab:red", alpha=0.2, linewidth=0, label=f"mean's {level} CI")
    if summary.iqm is not None:
        axes.axhline(
            summary.iqm,
            color="tab:green",
            linestyle=":",
            linewidth=1.5,
            label=f"IQM {summary.iqm:.2f}",
        )
    if summary.iqm_ci is not None:
        low, high = summary.iqm_ci
        axes.axhspan(
            low, high, color="tab:green", alpha=0.15, linewidth=0, label=f"IQM's {level} CI"
        )
