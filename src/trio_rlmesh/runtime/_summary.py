"""Interval estimates of a run's episode returns: what ``report.summary`` holds.

The numbers follow Agarwal et al., *Deep Reinforcement Learning at the Edge of the
Statistical Precipice* (NeurIPS 2021), and come from their library, rliable: the mean and
the interquartile mean (IQM), each with a percentile confidence interval from rliable's
stratified bootstrap over the episodes, and, where the env reports success, a Wilson
interval for the success rate from ``scipy.stats``. Both libraries are in the ``analysis``
extra and are imported only when a summary is computed (importing them takes seconds);
without them a summary still has the mean, the standard deviation, the standard error and
a normal-approximation interval, and its ``note`` names the extra that gives the rest.

rliable draws its resamples from numpy's global random state, whatever ``random_state``
it is given, so :func:`bootstrap` seeds that state for the duration of the resampling and
puts the previous state back afterwards: the same episodes, resample count and seed give
the same intervals, every time.
"""

from __future__ import annotations

import contextlib
import math
import statistics
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Any, Literal

import attrs
import numpy as np

from .._errors import SpecError

__all__ = [
    "ANALYSIS_EXTRA",
    "CONFIDENCE_LEVEL",
    "RESAMPLES",
    "SEED",
    "CIMethod",
    "Interval",
    "RunSummary",
    "analysis_libraries",
    "bootstrap",
    "decimals_for",
    "format_estimate",
    "format_value",
    "normal_interval",
    "seeded",
    "summarize",
    "wilson_interval",
]

ANALYSIS_EXTRA = "pip install 'trio-rlmesh[analysis]'"
"""What installs rliable, scipy and matplotlib."""
CONFIDENCE_LEVEL = 0.95
RESAMPLES = 2000
"""Bootstrap resamples per interval: the endpoints of a 95% percentile interval then vary
from one seed to another by about 6% of the statistic's standard error."""
SEED = 0
"""The bootstrap's default seed."""

Interval = tuple[float, float]
"""``(low, high)``."""
CIMethod = Literal["bootstrap-percentile", "normal"]


@attrs.frozen
class _Libraries:
    library: Any
    """``rliable.library``."""
    metrics: Any
    """``rliable.metrics``."""
    stats: Any
    """``scipy.stats``."""


def analysis_libraries() -> _Libraries | None:
    """rliable and ``scipy.stats``, imported now (``None`` without the ``analysis`` extra)."""
    try:
        from rliable import library, metrics
        from scipy import stats
    except ImportError:
        return None
    return _Libraries(library, metrics, stats)


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """numpy's global random state seeded with ``seed`` for the block, then put back."""
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(state)


def bootstrap(
    samples: Sequence[np.ndarray],
    statistic: Callable[..., np.ndarray],
    *,
    paired: bool = False,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE_LEVEL,
    seed: int = SEED,
) -> tuple[np.ndarray, np.ndarray]:
    """Point estimates and percentile intervals of ``statistic(*samples)`` by rliable's
    stratified bootstrap.

    Each sample is a ``(runs, tasks)`` matrix; every task (column) is resampled over its
    runs. Several samples are resampled independently of each other, or, ``paired``, with
    the same rows drawn for all (they must have the same shape: row ``i`` of each is the
    same seed). ``statistic`` returns a 1-D array; the result is that array and a
    ``(2, len)`` array of lower and upper bounds.

    Raises:
        SpecError: rliable is not installed (the ``analysis`` extra).
    """
    libraries = analysis_libraries()
    if libraries is None:
        raise SpecError(f"bootstrap intervals need rliable: {ANALYSIS_EXTRA}")
    library = libraries.library
    with seeded(seed):
        if paired:
            resampler = library.StratifiedBootstrap(*samples)
            interval = resampler.conf_int(
                statistic, reps=resamples, size=confidence, method="percentile"
            )
            return np.asarray(statistic(*samples)), np.asarray(interval)
        # One matrix is resampled by StratifiedBootstrap, a list of them independently.
        data = samples[0] if len(samples) == 1 else list(samples)
        points, intervals = library.get_interval_estimates(
            {"samples": data}, statistic, reps=resamples, confidence_interval_size=confidence
        )
    return np.asarray(points["samples"]), np.asarray(intervals["samples"])


def normal_interval(mean: Any, stderr: Any, confidence: float = CONFIDENCE_LEVEL) -> Any:
    """``mean ± z·stderr``, ``z`` the standard normal quantile for ``confidence`` (numpy
    arrays work too: element by element).

    >>> [round(v, 3) for v in normal_interval(10.0, 1.0)]
    [8.04, 11.96]
    """
    z = statistics.NormalDist().inv_cdf(0.5 + confidence / 2)
    return mean - z * stderr, mean + z * stderr


def wilson_interval(successes: int, trials: int, confidence: float = CONFIDENCE_LEVEL) -> Interval:
    """The Wilson score interval of a success rate, from ``scipy.stats``.

    Raises:
        SpecError: scipy is not installed (the ``analysis`` extra).
    """
    libraries = analysis_libraries()
    if libraries is None:
        raise SpecError(f"the Wilson interval needs scipy: {ANALYSIS_EXTRA}")
    found = libraries.stats.binomtest(successes, trials).proportion_ci(
        confidence_level=confidence, method="wilson"
    )
    return float(found.low), float(found.high)


def format_value(value: float, decimals: int) -> str:
    """``value`` with ``decimals`` decimals."""
    return f"{value:.{decimals}f}"


def format_estimate(value: float, interval: Interval | None, decimals: int) -> str:
    """A point estimate and its interval, if any.

    >>> format_estimate(487.31, (471.0, 499.12), 1)
    '487.3 [471.0, 499.1]'
    """
    text = format_value(value, decimals)
    if interval is not None:
        text += f" [{format_value(interval[0], decimals)}, {format_value(interval[1], decimals)}]"
    return text


def decimals_for(*values: float) -> int:
    """Decimals that show four significant digits of the largest value (0 to 4).

    >>> decimals_for(487.3, 499.1), decimals_for(0.5), decimals_for(12345.0)
    (1, 4, 0)
    """
    largest = max((abs(v) for v in values if math.isfinite(v)), default=0.0)
    if largest == 0.0:
        return 1
    return min(4, max(0, 3 - math.floor(math.log10(largest))))


def _pair(low: Any, high: Any) -> Interval:
    return float(low), float(high)


@attrs.frozen
class RunSummary:
    """Interval estimates of a run's episode returns: ``report.summary``.

    Every interval is ``(low, high)`` at :attr:`confidence_level`; a value that cannot be
    had is ``None`` (no episodes; a spread or an interval from one episode; the IQM and
    the success rate's interval without the ``analysis`` extra, which :attr:`note` then
    names). :meth:`to_json_dict` is the report's ``summary`` block, :meth:`format_line`
    the line ``trio-rlmesh run`` prints. See ``docs/analysis.md`` for what each number
    means.

    >>> summary = summarize([10.0, 12.0, 11.0, 13.0], resamples=0)
    >>> summary.mean, summary.median, summary.ci_method, summary.iqm
    (11.5, 11.5, 'normal', None)
    """

    episodes: int
    mean: float | None
    """Mean episode return."""
    mean_ci: Interval | None
    """The mean's confidence interval: a percentile interval of rliable's stratified
    bootstrap, or, without the extra (or with no resamples), ``mean ± z·stderr``."""
    std: float | None
    """Sample standard deviation of the returns (``n - 1`` in the denominator)."""
    stderr: float | None
    """Standard error of the mean, ``std / sqrt(n)``."""
    iqm: float | None
    """Interquartile mean: the mean of the middle 50% of the returns (rliable)."""
    iqm_ci: Interval | None
    median: float | None
    min: float | None
    max: float | None
    success_rate: float | None
    """The fraction of successful episodes, when the env reported success for every one."""
    success_rate_ci: Interval | None
    """Its Wilson score interval (``scipy.stats.binomtest``)."""
    steps_mean: float | None
    """Mean episode length in steps."""
    started_at: datetime | None
    """When the run started connecting (UTC); ``None`` when the run's timing is not known."""
    duration_s: float | None
    """Wall-clock seconds from connecting to closing."""
    steps_per_s: float | None
    """The episodes' steps per wall-clock second of :attr:`duration_s`."""
    ci_method: CIMethod
    """How :attr:`mean_ci` and :attr:`iqm_ci` were computed."""
    confidence_level: float
    bootstrap_resamples: int | None
    """Resamples per bootstrap interval (``None``: no bootstrap)."""
    bootstrap_seed: int | None
    """The seed of the bootstrap's resampling (``None``: no bootstrap)."""
    note: str | None
    """What is missing and how to get it (``None`` when nothing is)."""

    def to_json_dict(self) -> dict[str, Any]:
        """The ``summary`` block of the JSON report (intervals as ``[low, high]``)."""
        data = attrs.asdict(self, recurse=False)
        for key, value in data.items():
            if isinstance(value, tuple):
                data[key] = list(value)
        data["started_at"] = None if self.started_at is None else self.started_at.isoformat()
        return data

    def format_success(self) -> str | None:
        """The success rate and its interval in percent (``None`` when there is no rate).

        >>> print(summarize([1.0, 0.0], successes=[True, False], resamples=0).format_success())
        50%
        """
        if self.success_rate is None:
            return None
        text = f"{self.success_rate:.0%}"
        if self.success_rate_ci is not None:
            low, high = self.success_rate_ci
            text += f" [{low:.0%}, {high:.0%}]"
        return text

    def format_line(self) -> str:
        """One line: ``mean 487.3 [471.0, 499.1] · IQM 500.0 [500.0, 500.0] · success 96%
        [87%, 99%] (n=50)``.

        >>> print(summarize([10.0, 12.0, 11.0, 13.0], resamples=0).format_line())
        mean 11.50 [10.23, 12.77] (normal approximation) (n=4); quick summary: no bootstrap, no IQM
        """
        if self.mean is None:
            return "no episodes"
        shown = [self.mean, *(self.mean_ci or ())]
        if self.iqm is not None:
            shown += [self.iqm, *(self.iqm_ci or ())]
        decimals = decimals_for(*shown)
        parts = [f"mean {format_estimate(self.mean, self.mean_ci, decimals)}"]
        if self.mean_ci is not None and self.ci_method == "normal":
            parts[0] += " (normal approximation)"
        if self.iqm is not None:
            parts.append(f"IQM {format_estimate(self.iqm, self.iqm_ci, decimals)}")
        success = self.format_success()
        if success is not None:
            parts.append(f"success {success}")
        line = " · ".join(parts) + f" (n={self.episodes})"
        if self.note is not None:
            line += f"; {self.note}"
        return line


def summarize(
    rewards: Sequence[float],
    *,
    steps: Sequence[int] | None = None,
    successes: Sequence[bool | None] | None = None,
    started_at: datetime | None = None,
    duration_s: float | None = None,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    confidence: float = CONFIDENCE_LEVEL,
) -> RunSummary:
    """The :class:`RunSummary` of episodes' returns (in a fixed order: the intervals
    depend on it through the resampling).

    ``successes`` are the episodes' outcomes (``None``: unknown; a rate needs every one);
    ``steps`` their lengths. ``resamples=0`` makes a quick summary, as without the
    ``analysis`` extra: normal-approximation intervals, no IQM, no success-rate interval,
    and no import of rliable or scipy (which takes seconds).
    """
    count = len(rewards)
    values = np.asarray(rewards, dtype=np.float64)
    # No resamples: a quick summary, which does not import the libraries either (nor do
    # no episodes: importing them takes seconds of CPU).
    libraries = analysis_libraries() if resamples > 0 and count else None
    mean = iqm = median = low = high = std = stderr = None
    mean_ci = iqm_ci = None
    if count:
        # statistics, not numpy: np.median imports numpy.ma on first use (0.15 s), which a
        # run ending within its grace after a signal cannot spare.
        mean, median = statistics.fmean(rewards), float(statistics.median(rewards))
        low, high = float(values.min()), float(values.max())
    if count > 1:
        std = float(values.std(ddof=1))  # statistics.stdev is exact, and slow on many
        stderr = std / math.sqrt(count)
    bootstrapped = libraries is not None and resamples > 0 and count > 1
    if bootstrapped:
        metrics = libraries.metrics  # type: ignore[union-attr]

        def aggregates(scores: np.ndarray) -> np.ndarray:
            return np.array([metrics.aggregate_mean(scores), metrics.aggregate_iqm(scores)])

        points, intervals = bootstrap(
            [values.reshape(-1, 1)],
            aggregates,
            resamples=resamples,
            confidence=confidence,
            seed=seed,
        )
        mean, iqm = float(points[0]), float(points[1])
        mean_ci, iqm_ci = _pair(*intervals[:, 0]), _pair(*intervals[:, 1])
    else:
        if libraries is not None and count:
            iqm = float(libraries.metrics.aggregate_iqm(values.reshape(-1, 1)))
        if mean is not None and stderr is not None:
            mean_ci = _pair(*normal_interval(mean, stderr, confidence))
    rate = rate_ci = None
    known = [s for s in successes or () if s is not None]
    if count and successes is not None and len(known) == count:
        wins = sum(1 for s in known if s)
        rate = wins / count
        if libraries is not None:
            rate_ci = wilson_interval(wins, count, confidence)
    note = None
    if libraries is None and count and resamples > 0:
        missing = "the IQM, bootstrap intervals"
        missing += " and the success rate's interval" if rate is not None else ""
        note = f"for {missing}: {ANALYSIS_EXTRA}"
    elif libraries is None and count:
        note = "quick summary: no bootstrap, no IQM"
    steps_mean = steps_per_s = None
    if steps is not None and len(steps):
        steps_mean = statistics.fmean(steps)
        if duration_s is not None and duration_s > 0:
            steps_per_s = sum(steps) / duration_s
    return RunSummary(
        episodes=count,
        mean=mean,
        mean_ci=mean_ci,
        std=std,
        stderr=stderr,
        iqm=iqm,
        iqm_ci=iqm_ci,
        median=median,
        min=low,
        max=high,
        success_rate=rate,
        success_rate_ci=rate_ci,
        steps_mean=steps_mean,
        started_at=started_at,
        duration_s=duration_s,
        steps_per_s=steps_per_s,
        ci_method="bootstrap-percentile" if bootstrapped else "normal",
        confidence_level=confidence,
        bootstrap_resamples=resamples if bootstrapped else None,
        bootstrap_seed=seed if bootstrapped else None,
        note=note,
    )
