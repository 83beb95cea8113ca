from __future__ import annotations

import math

import pytest

from trio_rlmesh.runtime import TelemetryRow
from trio_rlmesh.runtime._telemetry import (
    Reservoir,
    TelemetryRecorder,
    XorShift64Star,
    format_telemetry,
    summarize,
)


def test_xorshift64star_sequence_is_pinned() -> None:
    # Computed by hand from the spec's definition (seed 0x9E3779B97F4A7C15).
    rng = XorShift64Star()
    x = 0x9E3779B97F4A7C15
    mask = (1 << 64) - 1
    for _ in range(5):
        x ^= x >> 12
        x ^= (x << 25) & mask
        x ^= x >> 27
        assert rng.next() == (x * 0x2545F4914F6CDD1D) & mask
    assert rng.state == x


def test_summary_example_from_the_spec() -> None:
    assert summarize([10.0, 20.0, 30.0, 40.0]) == (25.0, 30.0, 40.0, 40.0)
    assert summarize([]) is None
    assert summarize([7.0]) == (7.0, 7.0, 7.0, 7.0)


def test_percentiles_use_nearest_rank_at_ceil_index() -> None:
    samples = [float(v) for v in range(1, 102)]  # 101 values: index = ceil(100 * p)
    avg, p50, p95, p99 = summarize(samples) or (0, 0, 0, 0)
    assert avg == 51.0
    assert (p50, p95, p99) == (51.0, samples[math.ceil(100 * 0.95)], samples[99])


def test_reservoir_keeps_everything_below_capacity() -> None:
    reservoir = Reservoir(capacity=4)
    reservoir.push(1.0)
    reservoir.push(2.0)
    assert reservoir.samples == [1.0, 2.0]
    assert reservoir.seen == 2


def test_reservoir_is_bounded_above_capacity() -> None:
    reservoir = Reservoir(capacity=4)
    for value in range(10_000):
        reservoir.push(float(value))
    assert len(reservoir.samples) == 4
    assert reservoir.seen == 10_000
    # Algorithm R keeps a uniform sample: the retained values are not just the first four.
    assert max(reservoir.samples) > 4


def test_default_capacity_is_8192() -> None:
    reservoir = Reservoir()
    for value in range(9000):
        reservoir.push(float(value))
    assert len(reservoir.samples) == 8192
    assert reservoir.seen == 9000


def test_recorder_aggregates_and_flushes_window() -> None:
    recorder = TelemetryRecorder()
    for ms in (10.0, 20.0, 30.0, 40.0):
        recorder.record("model.predict", "rpc.total", ms)
    recorder.record("env.step", "request.bytes", 12)
    (window_step, window_predict) = recorder.snapshot("window")
    assert (window_predict.op, window_predict.count, window_predict.avg) == (
        "model.predict",
        4,
        25.0,
    )
    assert window_predict.p50 <= window_predict.p95 <= window_predict.p99 == 40.0
    assert window_step.unit == "bytes"
    recorder.flush_window()
    assert recorder.snapshot("window") == []
    assert [r.count for r in recorder.snapshot("session")] == [1, 4]


def test_recorder_rejects_unknown_metrics() -> None:
    recorder = TelemetryRecorder()
    with pytest.raises(ValueError, match="bogus"):
        recorder.record("env.step", "bogus", 1.0)
    assert recorder.snapshot("session") == []


def test_format_telemetry_table() -> None:
    rows = [
        TelemetryRow("env.step", "rpc.total", "ms", 3, 1.5, 1.0, 2.0, 2.0),
        TelemetryRow("model.predict", "group.size", "count", 10, 2.0, 2.0, 3.0, 3.0),
    ]
    text = format_telemetry(rows)
    lines = text.splitlines()
    assert lines[0].split() == ["op", "metric", "unit", "count", "avg", "p50", "p95", "p99"]
    assert lines[1].split() == [
        "env.step",
        "rpc.total",
        "ms",
        "3",
        "1.500",
        "1.000",
        "2.000",
        "2.000",
    ]
    assert lines[2].startswith("model.predict  group.size")
    assert len({len(line) for line in lines}) == 1
    assert format_telemetry([]).split() == lines[0].split()


def _pushed(values: list[float], capacity: int, clear_at: int | None = None) -> Reservoir:
    reservoir = Reservoir(capacity=capacity)
    for index, value in enumerate(values):
        if index == clear_at:
            reservoir.clear()
        reservoir.push(value)
    return reservoir


@pytest.mark.parametrize("capacity", [1, 4, 64])
@pytest.mark.parametrize("chunk", [1, 3, 50, 1000])
def test_reservoir_extend_matches_one_push_at_a_time(capacity: int, chunk: int) -> None:
    values = [float(v * 7 % 101) for v in range(700)]
    expected = _pushed(values, capacity, clear_at=300)
    reservoir = Reservoir(capacity=capacity)
    for start in range(0, len(values), chunk):
        part = values[start : start + chunk]
        if start <= 300 < start + chunk:
            reservoir.extend(part[: 300 - start])
            reservoir.clear()
            part = part[300 - start :]
        reservoir.extend(part)
    assert reservoir.samples == expected.samples
    assert reservoir.seen == expected.seen
    assert reservoir._rng.state == expected._rng.state


def test_sinks_and_record_give_identical_snapshots() -> None:
    values = [float((v * 37) % 1009) for v in range(20_000)]
    by_record, by_sink = TelemetryRecorder(), TelemetryRecorder()
    sink = by_sink.sink("env.step", "rpc.total")
    windows: list[tuple[list[TelemetryRow], list[TelemetryRow]]] = []
    for index, value in enumerate(values):
        by_record.record("env.step", "rpc.total", value)
        sink(value)
        if index % 3000 == 2999:
            by_sink.fold()
        if index % 7000 == 6999:
            windows.append((by_record.snapshot("window"), by_sink.snapshot("window")))
            by_record.flush_window()
            by_sink.flush_window()
    for expected, got in windows:
        assert got == expected
    assert by_sink.snapshot("window") == by_record.snapshot("window")
    assert by_sink.snapshot("session") == by_record.snapshot("session")
    (row,) = by_sink.snapshot("session")
    assert row.count == 20_000


def test_pending_samples_count_in_the_window_they_arrived_in() -> None:
    recorder = TelemetryRecorder()
    sink = recorder.sink("model.predict", "rpc.total")
    sink(1.0)
    sink(3.0)
    recorder.flush_window()  # the pending samples belonged to the flushed window
    assert recorder.snapshot("window") == []
    sink(5.0)
    (window,) = recorder.snapshot("window")
    (session,) = recorder.snapshot("session")
    assert (window.count, window.avg) == (1, 5.0)
    assert (session.count, session.avg) == (3, 3.0)


def test_a_resolved_sink_without_samples_shows_no_row() -> None:
    recorder = TelemetryRecorder()
    recorder.sink("env.step", "endpoint.queue")
    assert recorder.snapshot("session") == []
    with pytest.raises(ValueError, match="bogus"):
        recorder.sink("env.step", "bogus")


def test_merged_sessions_pool_samples_and_sum_counts_and_take_overrides() -> None:
    from trio_rlmesh.runtime._telemetry import merge_sessions

    a, b, fleet = TelemetryRecorder(), TelemetryRecorder(), TelemetryRecorder()
    for value in (1.0, 2.0):
        a.record("env.step", "rpc.total", value)
        a.record("model.predict", "group.size", 2)
    b.record("env.step", "rpc.total", 6.0)
    b.record("model.predict", "group.size", 2)
    fleet.record("model.predict", "group.size", 2)
    fleet.record("model.predict", "group.size", 1)
    rows = {(r.op, r.metric): r for r in merge_sessions([a, b], fleet)}
    step = rows["env.step", "rpc.total"]
    assert (step.count, step.avg, step.p50, step.p99) == (3, 3.0, 2.0, 6.0)
    size = rows["model.predict", "group.size"]
    assert (size.count, size.avg) == (2, 1.5)


def test_a_dropped_window_keeps_no_samples_and_leaves_the_session_as_it_was() -> None:
    values = [float((v * 37) % 1009) for v in range(20_000)]
    both, session_only = TelemetryRecorder(), TelemetryRecorder()
    early = session_only.sink("env.step", "rpc.total")  # resolved before the drop
    session_only.drop_window()
    for value in values:
        both.record("env.step", "rpc.total", value)
        early(value)
        both.record("model.predict", "rpc.total", value)
        session_only.record("model.predict", "rpc.total", value)  # a series made after
    session_only.flush_window()
    assert session_only.snapshot("session") == both.snapshot("session")
    assert [row.count for row in session_only.snapshot("session")] == [20_000, 20_000]
    assert session_only.snapshot("window") == []
    assert all(series.window is None for series in session_only._series.values())
