"""Comparing two runs: rliable's own intervals, pairing by seed, and the verdict rule."""

from __future__ import annotations

import numpy as np
import pytest

from trio_rlmesh.runtime._internal import PairComparison, RunSample, compare_pair, paired_order

rliable_library = pytest.importorskip("rliable.library", reason="needs the analysis extra")
rliable_metrics = pytest.importorskip("rliable.metrics")


def _statistics(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    difference = rliable_metrics.aggregate_mean(b) - rliable_metrics.aggregate_mean(a)
    return np.array([difference, rliable_metrics.probability_of_improvement(b, a)])


def _runs() -> tuple[RunSample, RunSample]:
    rng = np.random.default_rng(5)
    base = rng.normal(50.0, 15.0, 12)  # what each seed's start state is worth
    a = RunSample("a", tuple(base + rng.normal(0.0, 3.0, 12)), tuple(range(12)))
    shuffled = rng.permutation(12)  # b ran the same seeds, finishing in another order
    b_rewards = (base + 4.0 + rng.normal(0.0, 3.0, 12))[shuffled]
    return a, RunSample("b", tuple(b_rewards), tuple(int(s) for s in shuffled))


def test_paired_intervals_are_rliables_own_over_seed_matched_rows() -> None:
    a, b = _runs()
    found = compare_pair(a, b, resamples=300, seed=11)
    assert found.paired
    order = paired_order(a, b)
    assert order is not None
    a_rows = np.asarray(a.rewards).reshape(-1, 1)[order[0]]
    b_rows = np.asarray(b.rewards).reshape(-1, 1)[order[1]]
    assert [a.seeds[i] for i in order[0]] == [b.seeds[i] for i in order[1]]
    np.random.seed(11)
    direct = rliable_library.StratifiedBootstrap(a_rows, b_rows).conf_int(
        _statistics, reps=300, method="percentile"
    )
    assert found.mean_diff_ci == tuple(direct[:, 0])
    assert found.probability_of_improvement_ci == tuple(direct[:, 1])
    assert found.probability_of_improvement == rliable_metrics.probability_of_improvement(
        b_rows, a_rows
    )
    assert found.mean_diff == pytest.approx(np.mean(b.rewards) - np.mean(a.rewards))
    # Pairing removes what the seeds have in common: the paired interval is the narrower.
    unpaired = compare_pair(a, RunSample("b", b.rewards, (None,) * 12), resamples=300, seed=11)
    assert not unpaired.paired
    width = found.mean_diff_ci[1] - found.mean_diff_ci[0]
    assert width < (unpaired.mean_diff_ci[1] - unpaired.mean_diff_ci[0]) / 2


def test_unpaired_intervals_are_rliables_own() -> None:
    a, b = _runs()
    b = RunSample("b", b.rewards[:9], (None,) * 9)
    found = compare_pair(a, b, resamples=300, seed=2)
    np.random.seed(2)
    scores = [np.asarray(r.rewards).reshape(-1, 1) for r in (a, b)]
    _points, intervals = rliable_library.get_interval_estimates(
        {"pair": scores}, _statistics, reps=300
    )
    assert found.mean_diff_ci == tuple(intervals["pair"][:, 0])
    assert found.probability_of_improvement_ci == tuple(intervals["pair"][:, 1])
    assert (found.a_episodes, found.b_episodes, found.paired) == (12, 9, False)


def test_pairing_needs_the_very_same_seeds_once_each() -> None:
    def run(*seeds: int | None) -> RunSample:
        return RunSample("r", tuple(float(i) for i in range(len(seeds))), seeds)

    assert paired_order(run(3, 1, 2), run(2, 3, 1)) == ([1, 2, 0], [2, 0, 1])
    assert paired_order(run(1, 2), run(1, 3)) is None  # other seeds
    assert paired_order(run(1, 2), run(1, 2, 3)) is None  # more episodes
    assert paired_order(run(1, 1), run(1, 1)) is None  # a seed twice
    assert paired_order(run(1, None), run(1, None)) is None  # the env chose
    assert paired_order(run(1), run(1)) is None  # one pair resamples to itself


def _pair(p: tuple[float, float], d: tuple[float, float]) -> PairComparison:
    return PairComparison("A", "B", True, 20, 20, sum(d) / 2, d, sum(p) / 2, p, 0.95, 100, 0)


@pytest.mark.parametrize(
    ("p", "d", "winner"),
    [
        ((0.71, 0.92), (3.1, 21.0), "b"),
        ((0.08, 0.29), (-21.0, -3.1), "a"),
        ((0.45, 0.70), (3.1, 21.0), None),  # P(B > A) may still be 0.5
        ((0.71, 0.92), (-1.0, 21.0), None),  # the means may still be equal
        ((0.71, 0.92), (-21.0, -3.1), None),  # the two point different ways
        ((0.50, 0.50), (0.0, 0.0), None),  # a policy against itself
    ],
)
def test_the_verdict_rule(p: tuple[float, float], d: tuple[float, float], winner: str) -> None:
    pair = _pair(p, d)
    assert pair.winner == winner
    verdict = pair.verdict()
    if winner is None:
        assert verdict.startswith("no difference shown between A and B: P(B > A) = ")
    assert pair.to_json_dict()["winner"] == {"a": "A", "b": "B", None: None}[winner]


def test_a_winning_a_is_said_from_its_side() -> None:
    assert _pair((0.08, 0.30), (-21.0, -3.1)).verdict() == (
        "A beats B: P(A > B) = 0.81 [0.70, 0.92], Δmean = +12.05 [+3.10, +21.00], "
        "paired over 20 seeds"
    )


def test_a_run_without_episodes_cannot_be_compared() -> None:
    a, _ = _runs()
    with pytest.raises(ValueError, match="run empty has no episodes"):
        compare_pair(a, RunSample("empty", (), ()))
