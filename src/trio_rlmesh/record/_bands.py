"""What ``show --plot`` draws over the returns: the interval estimates of ``show``'s text."""

from __future__ import annotations

from typing import Any

from ..runtime import RunSummary

__all__ = ["draw_intervals"]


def draw_intervals(axes: Any, summary: RunSummary) -> None:
    """Draw, across ``axes``, the mean with a band for its confidence interval, the IQM
    (with its interval's band when there is one), and the spread (mean ± one standard
    deviation), each labelled for a legend."""
    if summary.mean is None:
        return
    level = f"{summary.confidence_level:.0%}"
    if summary.std is not None:
        axes.axhspan(
            summary.mean - summary.std,
            summary.mean + summary.std,
            color="tab:gray",
            alpha=0.12,
            label=f"spread: mean ± std ({summary.std:.2f})",
        )
    axes.axhline(
        summary.mean, color="tab:red", linestyle="--", linewidth=1, label=f"mean {summary.mean:.2f}"
    )
    if summary.mean_ci is not None:
        low, high = summary.mean_ci
        axes.axhspan(low, high, color="tab:red", alpha=0.2, label=f"mean's {level} CI")
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
        axes.axhspan(low, high, color="tab:green", alpha=0.15, label=f"IQM's {level} CI")
