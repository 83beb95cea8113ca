"""``plot_returns`` and ``show --plot``: the plot's series and legend, and its file kind."""

from __future__ import annotations

from pathlib import Path

import pytest

from trio_rlmesh import SpecError
from trio_rlmesh._cli import main
from trio_rlmesh.record import DatasetSummary, plot_returns
from trio_rlmesh.record._show import RETURNS_WINDOW, _returns_figure

pytest.importorskip("matplotlib", reason="plots need the record extra")

RETURNS = (10.0, 12.0, 30.0, 8.0, 15.0, 40.0, 41.0, 39.0, 12.0, 20.0, 22.0, 25.0, 5.0, 50.0)
SUMMARY = DatasetSummary(Path("d-v0"), "d-v0", "E-v1", "m", "0.1", RETURNS, (1,) * len(RETURNS), 0)


def test_the_legend_stands_beside_the_data() -> None:
    figure = _returns_figure(SUMMARY)
    figure.canvas.draw()
    [axes] = figure.axes
    legend = axes.get_legend()
    assert legend is not None
    assert not legend.get_window_extent().overlaps(axes.get_window_extent())
    assert legend.get_window_extent().x0 >= axes.get_window_extent().x1
    labels = [text.get_text() for text in legend.get_texts()]
    assert labels[0] == f"mean ± std, last {RETURNS_WINDOW}"
    intervals = SUMMARY.intervals
    assert labels[1:] == [
        "return",
        f"mean {sum(RETURNS) / len(RETURNS):.2f}",
        "mean's 95% CI",
        f"IQM {intervals.iqm:.2f}",
        "IQM's 95% CI",
    ]


def test_the_band_is_the_spread_of_the_last_episodes() -> None:
    [axes] = _returns_figure(SUMMARY).axes
    [band] = axes.collections
    vertices = band.get_paths()[0].vertices
    # The top edge at the last episode: mean + std of the last RETURNS_WINDOW returns.
    recent = RETURNS[-RETURNS_WINDOW:]
    mean = sum(recent) / len(recent)
    std = (sum((r - mean) ** 2 for r in recent) / len(recent)) ** 0.5
    last = len(RETURNS) - 1
    tops = [y for x, y in vertices if x == last]
    assert max(tops) == pytest.approx(mean + std)
    assert min(tops) == pytest.approx(mean - std)


def test_one_episode_gets_no_band() -> None:
    one = DatasetSummary(Path("d-v0"), "d-v0", None, None, None, (3.0,), (1,), 1)
    [axes] = _returns_figure(one).axes
    assert len(axes.collections) == 0


def test_a_file_kind_matplotlib_cannot_write_is_refused_before_anything(
    tmp_path: Path,
) -> None:
    with pytest.raises(SpecError, match=r"matplotlib writes .*png.*, not 'txt'"):
        plot_returns(SUMMARY, tmp_path / "returns.txt")
    assert list(tmp_path.iterdir()) == []
    assert plot_returns(SUMMARY, tmp_path / "returns.svg").read_text().startswith("<?xml")


def test_show_refuses_a_plot_kind_in_one_line_before_printing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["show", str(tmp_path / "no-dataset-v0"), "--plot", "out.txt"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("trio-rlmesh show: cannot plot to out.txt: matplotlib writes ")
    assert len(captured.err.splitlines()) == 1
