"""Comparing runs: the difference of their mean returns and the probability of improvement,
each with a bootstrap interval from rliable, and the verdict the intervals support.

Runs that ran exactly the same seeds are compared *paired*: a resample draws seeds, and
takes both runs' episodes of each drawn seed, so what the seeds have in common (the same
start states) cancels out of the intervals. Other runs are resampled independently.

The verdict rule, one place: B beats A when the interval of P(B > A) lies above 0.5 *and*
the interval of mean(B) - mean(A) lies above 0 (A beats B: both below); anything else is
"no difference shown", including evidence that points both ways.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import attrs
import numpy as np

from .._errors import SpecError
from ._summary import (
    ANALYSIS_EXTRA,
    CONFIDENCE_LEVEL,
    RESAMPLES,
    SEED,
    Interval,
    analysis_libraries,
    bootstrap,
    decimals_for,
    seeded,
)

__all__ = [
    "PairComparison",
    "RunSample",
    "compare_pair",
    "paired_order",
    "performance_profiles",
]


@attrs.frozen
class RunSample:
    """One run's episodes, as a comparison sees them."""

    name: str
    rewards: tuple[float, ...]
    """Episode returns, in episode index order."""
    seeds: tuple[int | None, ...]
    """Each episode's reset seed (``None``: the env chose)."""


def paired_order(a: RunSample, b: RunSample) -> tuple[list[int], list[int]] | None:
    """The positions of ``a``'s and ``b``'s episodes in one seed order, when both ran
    exactly the same seeds, each once (``None``: they cannot be paired).

    >>> paired_order(RunSample("a", (1.0, 2.0), (5, 7)), RunSample("b", (3.0, 4.0), (7, 5)))
    ([0, 1], [1, 0])
    """
    a_seeds = [seed for seed in a.seeds if seed is not None]
    b_seeds = [seed for seed in b.seeds if seed is not None]
    if len(a_seeds) != len(a.seeds) or len(b_seeds) != len(b.seeds) or len(a_seeds) < 2:
        return None
    if len(set(a_seeds)) != len(a_seeds) or sorted(a_seeds) != sorted(b_seeds):
        return None
    where = {seed: i for i, seed in enumerate(b_seeds)}
    order = sorted(range(len(a_seeds)), key=a_seeds.__getitem__)
    return order, [where[a_seeds[i]] for i in order]


def _signed(value: float, decimals: int) -> str:
    return f"{value:+.{decimals}f}"


@attrs.frozen
class PairComparison:
    """Run B against run A: ``mean(B) - mean(A)`` and ``P(B > A)``, with their intervals.

    ``P(B > A)`` is rliable's probability of improvement: the chance that an episode of B
    returns more than an episode of A (ties count half).
    """

    a: str
    b: str
    paired: bool
    """Resampled by seed (both ran the same seeds), else each run on its own."""
    a_episodes: int
    b_episodes: int
    mean_diff: float
    """``mean(B) - mean(A)``."""
    mean_diff_ci: Interval
    probability_of_improvement: float
    """``P(B > A)``."""
    probability_of_improvement_ci: Interval
    confidence_level: float
    bootstrap_resamples: int
    bootstrap_seed: int

    @property
    def winner(self) -> Literal["a", "b"] | None:
        """``"b"`` when B beats A by the module's rule, ``"a"`` when A beats B, else ``None``."""
        (p_low, p_high), (d_low, d_high) = self.probability_of_improvement_ci, self.mean_diff_ci
        if p_low > 0.5 and d_low > 0:
            return "b"
        if p_high < 0.5 and d_high < 0:
            return "a"
        return None

    def verdict(self) -> str:
        """One line: what the intervals support, and the numbers that say so.

        >>> print(PairComparison("A", "B", True, 9, 9, 12.4, (3.1, 21.0), 0.83, (0.71, 0.92),
        ...                      0.95, 2000, 0).verdict())
        B beats A: P(B > A) = 0.83 [0.71, 0.92], Δmean = +12.40 [+3.10, +21.00], paired over 9 seeds
        """
        winner = self.winner
        first, second = (self.a, self.b) if winner == "a" else (self.b, self.a)
        p, (p_low, p_high) = self.probability_of_improvement, self.probability_of_improvement_ci
        d, (d_low, d_high) = self.mean_diff, self.mean_diff_ci
        if winner == "a":  # said from the winner's side
            p, p_low, p_high = 1 - p, 1 - p_high, 1 - p_low
            d, d_low, d_high = -d, -d_high, -d_low
        decimals = decimals_for(d, d_low, d_high)
        numbers = (
            f"P({first} > {second}) = {p:.2f} [{p_low:.2f}, {p_high:.2f}], "
            f"Δmean = {_signed(d, decimals)} "
            f"[{_signed(d_low, decimals)}, {_signed(d_high, decimals)}], "
        )
        if self.paired:
            numbers += f"paired over {self.a_episodes} seeds"
        else:
            numbers += f"unpaired ({self.a_episodes} and {self.b_episodes} episodes)"
        if winner is None:
            return f"no difference shown between {self.a} and {self.b}: {numbers}"
        return f"{first} beats {second}: {numbers}"

    def to_json_dict(self) -> dict[str, Any]:
        """One entry of ``trio-rlmesh compare --json``'s ``pairs``."""
        data = attrs.asdict(self)
        for key, value in data.items():
            if isinstance(value, tuple):
                data[key] = list(value)
        winner = self.winner
        data["winner"] = None if winner is None else getattr(self, winner)
        data["verdict"] = self.verdict()
        return data


def _require() -> Any:
    libraries = analysis_libraries()
    if libraries is None:
        raise SpecError(f"comparing runs needs rliable and scipy: {ANALYSIS_EXTRA}")
    return libraries


def compare_pair(
    a: RunSample,
    b: RunSample,
    *,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    confidence: float = CONFIDENCE_LEVEL,
) -> PairComparison:
    """Compare run ``b`` with run ``a`` (paired when :func:`paired_order` pairs them).

    Raises:
        SpecError: a run has no episodes, or rliable is not installed (the ``analysis``
            extra).
    """
    metrics = _require().metrics
    for run in (a, b):
        if not run.rewards:
            raise SpecError(f"run {run.name} has no episodes to compare")
    order = paired_order(a, b)
    a_scores = np.asarray(a.rewards, dtype=np.float64).reshape(-1, 1)
    b_scores = np.asarray(b.rewards, dtype=np.float64).reshape(-1, 1)
    if order is not None:
        a_scores, b_scores = a_scores[order[0]], b_scores[order[1]]

    def statistics(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        difference = metrics.aggregate_mean(b) - metrics.aggregate_mean(a)
        return np.array([difference, metrics.probability_of_improvement(b, a)])

    points, intervals = bootstrap(
        [a_scores, b_scores],
        statistics,
        paired=order is not None,
        resamples=resamples,
        confidence=confidence,
        seed=seed,
    )
    return PairComparison(
        a=a.name,
        b=b.name,
        paired=order is not None,
        a_episodes=len(a.rewards),
        b_episodes=len(b.rewards),
        mean_diff=float(points[0]),
        mean_diff_ci=(float(intervals[0, 0]), float(intervals[1, 0])),
        probability_of_improvement=float(points[1]),
        probability_of_improvement_ci=(float(intervals[0, 1]), float(intervals[1, 1])),
        confidence_level=confidence,
        bootstrap_resamples=resamples,
        bootstrap_seed=seed,
    )


def performance_profiles(
    runs: Sequence[RunSample],
    *,
    thresholds: int = 101,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    confidence: float = CONFIDENCE_LEVEL,
) -> tuple[np.ndarray, dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Every run's score distribution: the fraction of its episodes that returned more
    than each threshold, with bootstrap bands (rliable's ``create_performance_profile``).

    The thresholds span the returns of all the runs. Returns the thresholds, each run's
    profile and each run's ``(2, thresholds)`` band.
    """
    library = _require().library
    scores = {run.name: np.asarray(run.rewards, dtype=np.float64).reshape(-1, 1) for run in runs}
    every = np.concatenate([s.ravel() for s in scores.values()])
    taus = np.linspace(every.min(), every.max(), thresholds)
    with seeded(seed):
        profiles, bands = library.create_performance_profile(
            scores, taus, reps=resamples, confidence_interval_size=confidence
        )
    return taus, profiles, bands
