"""Recording runs: every counted episode into a Minari dataset, and videos of episodes.

A run records through :class:`RecordOptions`, given as ``RunLocalOptions(record=...)``
(or ``trio_rlmesh.run(..., record="runs/cartpole-eval-v0")``), or through the hooks
:func:`open_recording` yields. The dataset is Minari's own layout, written by Minari's
writer (HDF5 by default), with the env's Gymnasium spaces, and holds exactly the
episodes of the run's report, in the report's order, even when the run is cancelled or
fails. :func:`summarize` and :func:`plot_returns` read it back.

Minari needs Python >= 3.11, and the packages come with ``pip install
'trio-rlmesh[record]'``; videos alone work on any Python.

Example::

    report = trio_rlmesh.run(model, gymnasium.make("CartPole-v1"), max_episodes=20,
                             base_seed=0, record="runs/cartpole-eval-v0")
    dataset = minari.MinariDataset("runs/cartpole-eval-v0/data")
    assert dataset.total_episodes == len(report.episodes)
"""

from __future__ import annotations

from ._options import RecordOptions as RecordOptions
from ._recording import RecordingHooks as RecordingHooks
from ._recording import open_recording as open_recording
from ._show import DatasetSummary as DatasetSummary
from ._show import plot_returns as plot_returns
from ._show import summarize as summarize

__all__ = [
    "DatasetSummary",
    "RecordOptions",
    "RecordingHooks",
    "open_recording",
    "plot_returns",
    "summarize",
]
