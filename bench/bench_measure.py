"""Samples, summaries, interleaved rounds and the printed table."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

# The per-round op both runtimes record: one env step plus the predict feeding it.
ROUND_OP = "runner.round"
ROUND_METRIC = "rpc.total"


@dataclass
class Sample:
    """One timed run of one side."""

    steps: int
    """Env steps counted from the run's report (lane steps for a vector env)."""
    wall_s: float
    """The whole run (connect, handshake, every episode, close), perf_counter."""
    p50_ms: float
    p95_ms: float
    latency_source: str
    """Where p50/p95 come from: ``telemetry runner.round`` or ``per-step timer``."""
    episodes: int = 0
    mean_reward: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.wall_s if self.wall_s > 0 else 0.0


@dataclass
class SideSummary:
    label: str
    rounds: int
    steps: int
    """Steps of one round (identical every round for a deterministic workload)."""
    p50_ms: float
    p95_ms: float
    steps_per_s: float
    latency_source: str
    mean_reward: float
    samples: list[Sample]

    def to_json_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["samples"] = [{**asdict(s), "steps_per_s": s.steps_per_s} for s in self.samples]
        return data


@dataclass
class Comparison:
    """One scenario: side A (ours) against side B (the reference) over interleaved rounds."""

    scenario: str
    title: str
    ours: SideSummary
    theirs: SideSummary
    ratio: float
    """Median over rounds of ours/theirs steps/s, each round's pair run back to back."""
    notes: list[str] = field(default_factory=list)
    figures: dict[str, float] = field(default_factory=dict)
    """Other figures the scenario measured that have a target of their own (by target id,
    see ``bench_targets.TARGETS``), e.g. a mean batch size."""

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "title": self.title,
            "ours": self.ours.to_json_dict(),
            "theirs": self.theirs.to_json_dict(),
            "ratio_steps_per_s": self.ratio,
            "figures": self.figures,
            "notes": self.notes,
        }


def nearest_rank(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..1) of ``values``; NaN when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1 if q > 0 else 0)]


def round_latency(rows: Iterable[Any]) -> tuple[float, float] | None:
    """p50/p95 (ms) of the ``runner.round`` telemetry row, for either runtime's rows."""
    for row in rows:
        if row.op == ROUND_OP and row.metric == ROUND_METRIC:
            return float(row.p50), float(row.p95)
    return None


def summarize(label: str, samples: list[Sample]) -> SideSummary:
    return SideSummary(
        label=label,
        rounds=len(samples),
        steps=int(statistics.median(s.steps for s in samples)),
        p50_ms=statistics.median(s.p50_ms for s in samples),
        p95_ms=statistics.median(s.p95_ms for s in samples),
        steps_per_s=statistics.median(s.steps_per_s for s in samples),
        latency_source=samples[0].latency_source,
        mean_reward=statistics.median(s.mean_reward for s in samples),
        samples=samples,
    )


def interleave(
    scenario: str,
    title: str,
    ours: tuple[str, Callable[[], Sample]],
    theirs: tuple[str, Callable[[], Sample]],
    rounds: int,
    *,
    warmup: bool = True,
    log: Callable[[str], None] = print,
) -> Comparison:
    """Run A, B, A, B… ``rounds`` times (after one discarded warm-up pair) and summarize.

    The order inside a pair alternates (AB, BA, AB…) so neither side always runs
    right after the other's allocations or page-cache misses.
    """
    (ours_label, run_ours), (theirs_label, run_theirs) = ours, theirs
    if warmup:
        run_ours()
        run_theirs()
    mine: list[Sample] = []
    other: list[Sample] = []
    for index in range(rounds):
        if index % 2 == 0:
            mine.append(run_ours())
            other.append(run_theirs())
        else:
            other.append(run_theirs())
            mine.append(run_ours())
        log(
            f"  [{scenario}] round {index + 1}/{rounds}: "
            f"{ours_label} {mine[-1].steps_per_s:8.0f} steps/s, "
            f"{theirs_label} {other[-1].steps_per_s:8.0f} steps/s"
        )
    ratios = [
        a.steps_per_s / b.steps_per_s for a, b in zip(mine, other, strict=True) if b.steps_per_s > 0
    ]
    return Comparison(
        scenario=scenario,
        title=title,
        ours=summarize(ours_label, mine),
        theirs=summarize(theirs_label, other),
        ratio=statistics.median(ratios) if ratios else math.nan,
    )


def format_table(results: Sequence[Comparison]) -> str:
    """The side-by-side table: one row per side, the ratio on the first row of a pair."""
    header = (
        f"{'scenario':<10} {'side':<34} {'steps':>7} {'p50 ms':>8} {'p95 ms':>8} "
        f"{'steps/s':>9} {'ours/theirs':>11}  latency from"
    )
    lines = [header, "-" * len(header)]
    for result in results:
        for index, side in enumerate((result.ours, result.theirs)):
            ratio = f"{result.ratio:11.2f}" if index == 0 else " " * 11
            lines.append(
                f"{result.scenario if index == 0 else '':<10} {side.label:<34} {side.steps:>7} "
                f"{side.p50_ms:>8.3f} {side.p95_ms:>8.3f} {side.steps_per_s:>9.0f} {ratio}  "
                f"{side.latency_source}"
            )
    return "\n".join(lines)
