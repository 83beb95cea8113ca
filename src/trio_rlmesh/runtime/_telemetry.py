"""Bounded per-operation telemetry: reservoirs, summary rows and a table formatter.

Every sample is a value for one ``(op, metric)`` series and goes into two reservoirs:
the *window* one (emptied by each ticker flush) and the *session* one (kept for the
whole run). A reservoir holds at most 8192 samples (Algorithm R with the reference's
xorshift64* generator), so memory stays flat however long a run goes; ``count`` still
counts every sample pushed. Statistics are the arithmetic mean and nearest-rank
percentiles at index ``ceil((n - 1) * p)`` of the sorted retained samples.

Recording sits on the driver's per-step path, so a sample is only appended to its
series' pending list; pending samples are pushed into both reservoirs, in arrival order,
in batches (every 1024 samples through :meth:`TelemetryRecorder.record`, at each
:meth:`TelemetryRecorder.fold`, and before any snapshot or flush). The reservoirs see
exactly the sequence of pushes they would have seen one sample at a time, so every
count, retained sample and percentile is the same.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Final, Literal

import attrs

if TYPE_CHECKING:
    from ._interfaces import EndpointTimings

__all__ = [
    "METRIC_UNITS",
    "OpSinks",
    "Reservoir",
    "TelemetryRecorder",
    "TelemetryRow",
    "XorShift64Star",
    "format_telemetry",
    "merge_sessions",
    "summarize",
]

RESERVOIR_CAPACITY: Final = 8192
_RNG_SEED: Final = 0x9E3779B97F4A7C15
_RNG_MULTIPLIER: Final = 0x2545F4914F6CDD1D
_U64: Final = (1 << 64) - 1
_FOLD_EVERY: Final = 1024
"""Pending samples a series buffers before pushing them into its reservoirs."""

METRIC_UNITS: Final[dict[str, str]] = {
    "rpc.total": "ms",
    "endpoint.total": "ms",
    "endpoint.decode": "ms",
    "endpoint.user": "ms",
    "endpoint.encode": "ms",
    "endpoint.queue": "ms",
    "predict.adapter": "ms",
    "held.episodes": "count",
    "held.bytes": "bytes",
    "request.bytes": "bytes",
    "response.bytes": "bytes",
    "group.size": "count",
}
"""The metric catalogue (also the allow-list) with each metric's unit."""

Horizon = Literal["window", "session"]


class XorShift64Star:
    """The reservoir's generator: xorshift64* (shifts 12/25/27, multiplier 0x2545F4914F6CDD1D)."""

    __slots__ = ("state",)

    def __init__(self, seed: int = _RNG_SEED) -> None:
        self.state = seed & _U64

    def next(self) -> int:
        x = self.state
        x ^= x >> 12
        x ^= (x << 25) & _U64
        x ^= x >> 27
        self.state = x
        return (x * _RNG_MULTIPLIER) & _U64


class Reservoir:
    """A uniform sample of at most ``capacity`` values out of everything pushed."""

    __slots__ = ("_rng", "capacity", "samples", "seen")

    def __init__(self, capacity: int = RESERVOIR_CAPACITY) -> None:
        self.capacity = capacity
        self.samples: list[float] = []
        self.seen = 0
        self._rng = XorShift64Star()

    def push(self, value: float) -> None:
        self.seen += 1
        if len(self.samples) < self.capacity:
            self.samples.append(value)
            return
        slot = self._rng.next() % self.seen
        if slot < self.capacity:
            self.samples[slot] = value

    def extend(self, values: Sequence[float]) -> None:
        """``push`` every value in order, with the generator inlined (same result, faster)."""
        samples, capacity = self.samples, self.capacity
        room = capacity - len(samples)
        if room > 0:
            # Below capacity a push only appends and never draws from the generator.
            head = values[:room]
            samples.extend(head)
            self.seen += len(head)
            values = values[room:]
        if not values:
            return
        rng = self._rng
        x, seen = rng.state, self.seen
        for value in values:
            seen += 1
            x ^= x >> 12
            x ^= (x << 25) & _U64
            x ^= x >> 27
            slot = ((x * _RNG_MULTIPLIER) & _U64) % seen
            if slot < capacity:
                samples[slot] = value
        rng.state, self.seen = x, seen

    def clear(self) -> None:
        """Drop the samples and the count; the generator keeps its state."""
        self.samples.clear()
        self.seen = 0


def summarize(samples: Sequence[float]) -> tuple[float, float, float, float] | None:
    """``(avg, p50, p95, p99)`` of ``samples``, or ``None`` when there are none.

    >>> summarize([10.0, 20.0, 30.0, 40.0])
    (25.0, 30.0, 40.0, 40.0)
    """
    if not samples:
        return None
    ordered = sorted(samples)
    last = len(ordered) - 1

    def rank(p: float) -> float:
        return ordered[min(last, math.ceil(last * p))]

    return (math.fsum(ordered) / len(ordered), rank(0.50), rank(0.95), rank(0.99))


@attrs.frozen
class TelemetryRow:
    """Summary of one ``(op, metric)`` series over one horizon."""

    op: str
    metric: str
    unit: str
    count: int
    """Every sample pushed, including those the reservoir no longer holds."""
    avg: float
    p50: float
    p95: float
    p99: float

    def to_json_dict(self) -> dict[str, object]:
        return {
            "op": self.op,
            "metric": self.metric,
            "unit": self.unit,
            "count": self.count,
            "avg": self.avg,
            "p50": self.p50,
            "p95": self.p95,
            "p99": self.p99,
        }


class _Series:
    """One ``(op, metric)`` series: its two reservoirs and the samples not yet pushed."""

    __slots__ = ("pending", "session", "window")

    def __init__(self, windowed: bool = True) -> None:
        self.window: Reservoir | None = Reservoir() if windowed else None
        self.session = Reservoir()
        self.pending: list[float] = []

    def add(self, value: float) -> None:
        pending = self.pending
        pending.append(value)
        if len(pending) >= _FOLD_EVERY:
            self.fold()

    def fold(self) -> None:
        """Push the pending samples into both reservoirs (keeps memory bounded)."""
        pending = self.pending
        if pending:
            if self.window is not None:
                self.window.extend(pending)
            self.session.extend(pending)
            # Emptied in place: sinks hold this list's bound ``append``.
            pending.clear()


class TelemetryRecorder:
    """Collects samples per ``(op, metric)``; cheap to push, summarized on demand.

    >>> recorder = TelemetryRecorder()
    >>> for ms in (10, 20, 30, 40):
    ...     recorder.record("model.predict", "rpc.total", ms)
    >>> [(r.op, r.count, r.p50) for r in recorder.snapshot("session")]
    [('model.predict', 4, 30)]
    """

    def __init__(self) -> None:
        self._series: dict[tuple[str, str], _Series] = {}
        self._windowed = True

    def _get(self, op: str, metric: str) -> _Series:
        series = self._series.get((op, metric))
        if series is None:
            if metric not in METRIC_UNITS:
                raise ValueError(
                    f"unknown telemetry metric {metric!r}; known: {sorted(METRIC_UNITS)}"
                )
            series = self._series[(op, metric)] = _Series(self._windowed)
        return series

    def record(self, op: str, metric: str, value: float) -> None:
        self._get(op, metric).add(value)

    def sink(self, op: str, metric: str) -> Callable[[float], None]:
        """A callable that records one value of ``(op, metric)``, resolved once.

        For hot paths: it is the series' bare ``list.append``, with none of the checks of
        :meth:`record`. Whoever records through sinks calls :meth:`fold` every few
        thousand samples, which keeps memory bounded. A series with no samples yet does
        not appear in snapshots.
        """
        return self._get(op, metric).pending.append

    def drop_window(self) -> None:
        """Keep no window samples from now on (nobody will read or flush them): a sample
        then costs one reservoir instead of two. Window snapshots are empty after this."""
        self._windowed = False
        for series in self._series.values():
            series.window = None

    def fold(self) -> None:
        """Push every pending sample into its reservoirs (snapshots do this themselves)."""
        for series in self._series.values():
            series.fold()

    def snapshot(self, horizon: Horizon) -> list[TelemetryRow]:
        """One row per series with samples in ``horizon``, sorted by ``(op, metric)``."""
        rows = []
        for (op, metric), series in sorted(self._series.items()):
            series.fold()
            reservoir = series.window if horizon == "window" else series.session
            if reservoir is None:
                continue
            stats = summarize(reservoir.samples)
            if stats is None:
                continue
            avg, p50, p95, p99 = stats
            rows.append(
                TelemetryRow(op, metric, METRIC_UNITS[metric], reservoir.seen, avg, p50, p95, p99)
            )
        return rows

    def session_samples(self) -> dict[tuple[str, str], tuple[int, list[float]]]:
        """Every series with samples: ``(op, metric) -> (count, retained session samples)``."""
        out = {}
        for key, series in self._series.items():
            series.fold()
            if series.session.samples:
                out[key] = (series.session.seen, list(series.session.samples))
        return out

    def flush_window(self) -> None:
        for series in self._series.values():
            # Pending samples belong to this window (and to the session): push them first.
            series.fold()
            if series.window is not None:
                series.window.clear()


class OpSinks:
    """The telemetry series of one operation, resolved once so a step records cheaply.

    Resolving a sink creates its series, but a series without samples appears in no
    snapshot, so the report is the same as recording through ``TelemetryRecorder.record``.
    """

    __slots__ = (
        "adapter",
        "decode",
        "encode",
        "group_size",
        "held_bytes",
        "held_episodes",
        "queue",
        "request_bytes",
        "response_bytes",
        "rpc",
        "total",
        "user",
    )

    def __init__(self, telemetry: TelemetryRecorder, op: str) -> None:
        sink = telemetry.sink
        self.rpc = sink(op, "rpc.total")
        self.total = sink(op, "endpoint.total")
        self.decode = sink(op, "endpoint.decode")
        self.user = sink(op, "endpoint.user")
        self.encode = sink(op, "endpoint.encode")
        self.queue = sink(op, "endpoint.queue")
        self.request_bytes = sink(op, "request.bytes")
        self.response_bytes = sink(op, "response.bytes")
        self.adapter = sink(op, "predict.adapter")
        self.held_episodes = sink(op, "held.episodes")
        self.held_bytes = sink(op, "held.bytes")
        self.group_size = sink(op, "group.size")

    def call(
        self,
        ms: float,
        timings: EndpointTimings,
        request_bytes: int | None,
        response_bytes: int | None,
    ) -> None:
        """One answered call: its round trip, the endpoint's phases and the message sizes."""
        self.rpc(ms)
        self.phases(timings)
        self.sizes(request_bytes, response_bytes)

    def phases(self, timings: EndpointTimings) -> None:
        """The endpoint's own phase durations (nanoseconds, recorded as milliseconds)."""
        if timings.total_ns is not None:
            self.total(timings.total_ns / 1e6)
        if timings.decode_ns is not None:
            self.decode(timings.decode_ns / 1e6)
        if timings.user_ns is not None:
            self.user(timings.user_ns / 1e6)
        if timings.encode_ns is not None:
            self.encode(timings.encode_ns / 1e6)
        if timings.queue_ns is not None:
            self.queue(timings.queue_ns / 1e6)

    def model_phases(self, timings: EndpointTimings) -> None:
        """A model's adapter time and held state (``predict.adapter``, ``held.*``)."""
        if timings.adapter_ns is not None:
            self.adapter(timings.adapter_ns / 1e6)
        if timings.held_episodes is not None:
            self.held_episodes(timings.held_episodes)
        if timings.held_state_bytes is not None:
            self.held_bytes(timings.held_state_bytes)

    def sizes(self, request_bytes: int | None, response_bytes: int | None) -> None:
        if request_bytes is not None:
            self.request_bytes(request_bytes)
        if response_bytes is not None:
            self.response_bytes(response_bytes)


def merge_sessions(
    recorders: Iterable[TelemetryRecorder], override: TelemetryRecorder | None = None
) -> list[TelemetryRow]:
    """Session rows over several recorders (a fleet's endpoints), sorted by ``(op, metric)``.

    A series' count is the sum of its counts; its statistics are those of every recorder's
    retained samples pooled (exact while each recorder retained all of its samples). A
    series ``override`` has replaces the recorders' own: a fleet records each fused
    predict's round trip and size once there, where each endpoint also records it as its
    own.

    >>> a, b = TelemetryRecorder(), TelemetryRecorder()
    >>> a.record("env.step", "rpc.total", 1.0); b.record("env.step", "rpc.total", 3.0)
    >>> [(r.count, r.avg) for r in merge_sessions([a, b])]
    [(2, 2.0)]
    """
    pooled: dict[tuple[str, str], tuple[int, list[float]]] = {}
    replaced = override.session_samples() if override is not None else {}
    for recorder in recorders:
        for key, (count, samples) in recorder.session_samples().items():
            if key in replaced:
                continue
            total, kept = pooled.get(key, (0, []))
            pooled[key] = (total + count, kept + samples)
    pooled.update(replaced)
    rows = []
    for (op, metric), (count, samples) in sorted(pooled.items()):
        stats = summarize(samples)
        assert stats is not None
        rows.append(TelemetryRow(op, metric, METRIC_UNITS[metric], count, *stats))
    return rows


def format_telemetry(rows: Iterable[TelemetryRow]) -> str:
    """Render rows as a fixed-width text table (one line per row, a header first).

    >>> print(format_telemetry([TelemetryRow("env.step", "rpc.total", "ms", 3, 1.5, 1, 2, 2)]))
    op        metric     unit  count    avg    p50    p95    p99
    env.step  rpc.total  ms        3  1.500  1.000  2.000  2.000
    """
    header = ("op", "metric", "unit", "count", "avg", "p50", "p95", "p99")
    body = [
        (
            r.op,
            r.metric,
            r.unit,
            str(r.count),
            f"{r.avg:.3f}",
            f"{r.p50:.3f}",
            f"{r.p95:.3f}",
            f"{r.p99:.3f}",
        )
        for r in rows
    ]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    lines = []
    for line in [header, *body]:
        left = [cell.ljust(widths[i]) for i, cell in enumerate(line[:3])]
        right = [cell.rjust(widths[i + 3]) for i, cell in enumerate(line[3:])]
        lines.append("  ".join(left + right).rstrip())
    return "\n".join(lines)
