"""``report.summary``: interval estimates from rliable and scipy, as they compute them, their
coverage, their JSON block, and what is left without the ``analysis`` extra (issue 26)."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest

import trio_rlmesh
from trio_rlmesh.runtime import EndpointReport, EpisodeRecord, RunSetup, RuntimeReport
from trio_rlmesh.runtime._internal import summarize
from trio_rlmesh.runtime._summary import bootstrap, normal_interval

rliable_library = pytest.importorskip("rliable.library", reason="needs the analysis extra")
rliable_metrics = pytest.importorskip("rliable.metrics")
scipy_stats = pytest.importorskip("scipy.stats")

SUMMARY_FIELDS = [
    "episodes",
    "mean",
    "mean_ci",
    "std",
    "stderr",
    "iqm",
    "iqm_ci",
    "median",
    "min",
    "max",
    "success_rate",
    "success_rate_ci",
    "steps_mean",
    "started_at",
    "duration_s",
    "steps_per_s",
    "ci_method",
    "confidence_level",
    "bootstrap_resamples",
    "bootstrap_seed",
    "note",
]
"""The ``summary`` block's keys, in order (docs/cli.md documents each)."""


def _returns(count: int = 40, seed: int = 26) -> list[float]:
    return np.random.default_rng(seed).gamma(2.0, 50.0, count).tolist()


def _direct(rewards: list[float], metric: str, *, reps: int, seed: int) -> tuple[float, ...]:
    """rliable's own interval of one aggregate, seeded as rliable's resampling needs."""
    aggregate = getattr(rliable_metrics, metric)
    np.random.seed(seed)
    _, intervals = rliable_library.get_interval_estimates(
        {"run": np.asarray(rewards).reshape(-1, 1)},
        lambda scores: np.array([aggregate(scores)]),
        reps=reps,
    )
    return tuple(intervals["run"][:, 0])


def test_intervals_are_rliables_and_scipys_own() -> None:
    rewards = _returns()
    successes = [r > 80.0 for r in rewards]
    summary = summarize(rewards, successes=successes, resamples=300, seed=7)
    assert summary.mean_ci == _direct(rewards, "aggregate_mean", reps=300, seed=7)
    assert summary.iqm_ci == _direct(rewards, "aggregate_iqm", reps=300, seed=7)
    column = np.asarray(rewards).reshape(-1, 1)
    assert summary.iqm == pytest.approx(rliable_metrics.aggregate_iqm(column), abs=0)
    assert summary.mean == pytest.approx(rliable_metrics.aggregate_mean(column), abs=0)
    wilson = scipy_stats.binomtest(sum(successes), len(rewards)).proportion_ci(method="wilson")
    assert summary.success_rate_ci == (wilson.low, wilson.high)
    assert summary.success_rate == sum(successes) / len(rewards)
    assert summary.std == pytest.approx(np.std(rewards, ddof=1))
    assert summary.stderr == pytest.approx(np.std(rewards, ddof=1) / np.sqrt(len(rewards)))
    assert (summary.median, summary.min, summary.max) == (
        np.median(rewards),
        min(rewards),
        max(rewards),
    )
    assert summary.iqm_ci is not None
    assert summary.iqm_ci[0] < summary.iqm < summary.iqm_ci[1]
    assert (summary.ci_method, summary.bootstrap_resamples, summary.bootstrap_seed) == (
        "bootstrap-percentile",
        300,
        7,
    )


def test_same_episodes_same_numbers_and_the_random_state_left_alone() -> None:
    rewards = _returns(30)
    np.random.seed(123)
    before = np.random.get_state()[1].copy()
    first = summarize(rewards, resamples=200, seed=3)
    assert (np.random.get_state()[1] == before).all()
    assert summarize(rewards, resamples=200, seed=3) == first
    assert summarize(rewards, resamples=200, seed=4).mean_ci != first.mean_ci


def test_a_95_percent_interval_covers_the_true_mean() -> None:
    """1,000 seeded samples of 200 returns with mean 10: each column is one repetition,
    resampled on its own by the same stratified bootstrap a summary uses."""
    samples = np.random.default_rng(2026).normal(10.0, 3.0, size=(200, 1000))
    _, intervals = bootstrap([samples], lambda s: s.mean(axis=0), resamples=500, seed=1)
    covered = np.mean((intervals[0] <= 10.0) & (intervals[1] >= 10.0))
    assert 0.93 <= covered <= 0.97, covered
    # The normal approximation (without the extra) covers as promised too.
    stderr = samples.std(axis=0, ddof=1) / np.sqrt(samples.shape[0])
    low, high = normal_interval(samples.mean(axis=0), stderr)
    covered = np.mean((low <= 10.0) & (high >= 10.0))
    assert 0.93 <= covered <= 0.97, covered


def test_without_the_analysis_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("rliable", "rliable.library", "rliable.metrics", "scipy", "scipy.stats"):
        monkeypatch.setitem(sys.modules, name, None)  # importing them now fails
    rewards = [1.0, 2.0, 3.0, 6.0]
    summary = summarize(rewards, successes=[True, False, True, True])
    assert (summary.mean, summary.iqm, summary.iqm_ci, summary.success_rate_ci) == (
        3.0,
        None,
        None,
        None,
    )
    assert summary.success_rate == 0.75
    stderr = np.std(rewards, ddof=1) / 2
    assert summary.stderr == pytest.approx(stderr)
    assert summary.mean_ci == pytest.approx((3.0 - 1.959964 * stderr, 3.0 + 1.959964 * stderr))
    assert (summary.ci_method, summary.bootstrap_resamples, summary.bootstrap_seed) == (
        "normal",
        None,
        None,
    )
    assert summary.note is not None
    assert "pip install 'trio-rlmesh[analysis]'" in summary.note
    assert "success rate's interval" in summary.note
    line = summary.format_line()
    assert line.startswith("mean 3.000 [")
    assert "(normal approximation) · success 75% (n=4); for the IQM" in line


def test_a_quick_summary_imports_nothing() -> None:
    """Not rliable nor scipy, nor anything numpy loads lazily (numpy.ma for np.median): a
    run interrupted by a signal has its grace period to write it."""
    code = (
        "import sys, trio_rlmesh, trio_rlmesh.runtime;"
        "from trio_rlmesh.runtime._internal import summarize;"
        "before = set(sys.modules);"
        "s = summarize([1.0, 2.0, 4.0], successes=[True, False, True], resamples=0);"
        "assert s.ci_method == 'normal' and s.mean_ci is not None, s;"
        "bad = sorted(set(sys.modules) - before);"
        "bad += [m for m in ('rliable', 'scipy', 'arch', 'pandas') if m in sys.modules];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_one_episode_and_none() -> None:
    one = summarize([5.0], steps=[3])
    assert (one.mean, one.iqm, one.median, one.std, one.mean_ci, one.iqm_ci) == (
        5.0,
        5.0,
        5.0,
        None,
        None,
        None,
    )
    none = summarize([])
    assert none.episodes == 0
    assert none.mean is None
    assert none.note is None
    assert none.format_line() == "no episodes"


def _episode(index: int, reward: float, endpoint: str | None = None) -> EpisodeRecord:
    return EpisodeRecord(
        index, 0, f"e{index}", index, index, 10, reward, True, False, None, 0.0, 0.0, 0.0,
        endpoint=endpoint,
    )  # fmt: skip


def test_the_json_summary_is_report_summary_with_every_documented_field() -> None:
    episodes = tuple(_episode(i, r) for i, r in enumerate(_returns(12)))
    started = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    setup = RunSetup("CartPole-v1", "Box(...)", "Discrete(...)", 100, None)
    report = RuntimeReport(
        "completed", None, "s", "e", episodes[::-1], 120,  # completion order is not index order
        setup=setup, started_at=started, duration_s=4.0, summary_resamples=100,
    )  # fmt: skip
    data = report.to_json_dict()
    assert list(data["summary"]) == SUMMARY_FIELDS
    assert data["summary"] == report.summary.to_json_dict()
    assert data["summary"]["started_at"] == "2026-01-02T03:04:05+00:00"
    assert (data["summary"]["duration_s"], data["summary"]["steps_per_s"]) == (4.0, 30.0)
    assert data["summary"]["bootstrap_resamples"] == 100
    # The order episodes completed in does not change the numbers.
    in_order = RuntimeReport("completed", None, "s", "e", episodes, 120, summary_resamples=100)
    assert in_order.summary.mean_ci == report.summary.mean_ci
    assert data["setup"] == {
        "env": "CartPole-v1",
        "observation_space": "Box(...)",
        "action_space": "Discrete(...)",
        "max_episode_steps": 100,
        "max_episode_seconds": None,
    }
    assert report.summary is report.summary  # computed once


def test_a_fleet_has_a_summary_per_endpoint_and_in_total() -> None:
    episodes = tuple(_episode(i, float(i), "a:1" if i % 3 else "b:2") for i in range(9))
    endpoints = (
        EndpointReport("a:1", "completed", None, 6, 60),
        EndpointReport("b:2", "completed", None, 3, 30),
    )
    report = RuntimeReport(
        "completed", None, "s", "fleet", episodes, 90, endpoints=endpoints, summary_resamples=50
    )
    data = report.to_json_dict()
    assert data["summary"]["episodes"] == 9
    parts = {part["endpoint"]: part["summary"] for part in data["endpoints"]}
    assert parts["a:1"] == report.summary_of("a:1").to_json_dict()
    assert (parts["a:1"]["episodes"], parts["a:1"]["mean"]) == (6, 4.5)
    assert (parts["b:2"]["episodes"], parts["b:2"]["mean"]) == (3, 3.0)


def test_a_run_times_itself_and_names_its_setup() -> None:
    gymnasium = pytest.importorskip("gymnasium")
    before = datetime.now(timezone.utc)
    report = trio_rlmesh.run(
        _Left(),
        gymnasium.make("CartPole-v1"),
        episode_seeds=(0, 1, 2),
        max_episodes=3,
        max_episode_steps=20,
    )
    summary = report.summary
    assert summary.started_at is not None
    assert before <= summary.started_at
    assert summary.started_at <= datetime.now(timezone.utc)
    assert report.duration_s is not None
    assert report.duration_s > 0
    assert summary.duration_s == report.duration_s
    assert summary.steps_per_s == pytest.approx(report.total_steps / report.duration_s)
    assert summary.steps_mean == report.total_steps / 3
    assert report.setup is not None
    assert (report.setup.env, report.setup.max_episode_steps) == ("CartPole-v1", 20)
    assert report.setup.action_space is not None
    assert report.setup.action_space.startswith("Discrete(n=2")


class _Left:
    def predict(self, observation: object) -> int:
        return 0


def test_docs_cli_documents_every_field() -> None:
    """docs/cli.md's report table names each field of ``summary`` and ``setup``."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    rows = {
        line.split("|")[1].strip(): line for line in text.splitlines() if line.startswith("| `")
    }
    for field in SUMMARY_FIELDS:
        assert f"`{field}`" in rows["`summary`"], field
    for field in RunSetup.__attrs_attrs__:
        assert f"`{field.name}`" in rows["`setup`"], field.name
