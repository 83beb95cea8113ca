"""``show`` and ``show --plot`` give the intervals a run's report gives (issue 26), drawn as
bands beside a legend that covers no data."""

from __future__ import annotations

from pathlib import Path

import pytest

from trio_rlmesh.record import DatasetSummary
from trio_rlmesh.record._show import _returns_figure
from trio_rlmesh.runtime._internal import summarize

pytest.importorskip("rliable.library", reason="needs the analysis extra")
pytest.importorskip("matplotlib")

RETURNS = (1.0, 3.0, 8.0, 2.0, 5.0, 4.0, 9.0, 2.5)


def _summary() -> DatasetSummary:
    lengths = tuple(int(r) for r in RETURNS)
    return DatasetSummary(Path("d-v0"), "d-v0", "E-v1", "m", "0.1", RETURNS, lengths, 3)


def legend_overlaps(figure: object) -> list[str]:
    """The titles of the axes a legend of ``figure`` overlaps once laid out."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(figure)  # type: ignore[arg-type]
    figure.draw_without_rendering()  # type: ignore[attr-defined]
    renderer = figure.canvas.get_renderer()  # type: ignore[attr-defined]
    legends = list(figure.legends)  # type: ignore[attr-defined]
    legends += [axes.get_legend() for axes in figure.axes if axes.get_legend()]  # type: ignore[attr-defined]
    assert legends
    return [
        axes.get_title()
        for legend in legends
        for axes in figure.axes  # type: ignore[attr-defined]
        if legend.get_window_extent(renderer).overlaps(axes.get_window_extent(renderer))
    ]


def test_show_prints_the_intervals_of_a_report() -> None:
    summary = _summary()
    assert summary.intervals == summarize(RETURNS, steps=summary.lengths)
    assert summary.format().splitlines()[-1] == f"intervals {summary.intervals.format_line()}"
    assert summary.format().splitlines()[-1].startswith("intervals mean 4.312 [")


def test_the_plot_draws_those_intervals_and_its_legend_covers_no_data() -> None:
    summary = _summary()
    figure = _returns_figure(summary)
    (axes,) = figure.axes
    bands = {p.get_label(): (p.get_y(), p.get_y() + p.get_height()) for p in axes.patches}
    intervals = summary.intervals
    assert bands == {"mean's 95% CI": intervals.mean_ci, "IQM's 95% CI": intervals.iqm_ci}
    lines = {line.get_label(): line.get_ydata() for line in axes.lines}
    assert list(lines[f"IQM {intervals.iqm:.2f}"]) == [intervals.iqm] * 2
    assert legend_overlaps(figure) == []
