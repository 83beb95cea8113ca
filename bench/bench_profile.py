"""Profile one run of our hot path and say where the time per step goes.

cProfile only sees the thread that enabled it, and user code runs on worker threads (the
default ``user_code="thread"``; the grpclib backend also runs its asyncio loop on a helper
thread). So a profiler is started in *every*
thread the run creates (``threading.setprofile`` hands each new thread a bootstrap
hook that swaps itself for a fresh ``cProfile.Profile``), and the threads' stats are
merged.

Self time is then grouped into components by the file a function lives in. Time spent
in builtins, numpy, attrs and the standard library is handed up to the component that
called it (weighted by each caller's share), so ``codec`` includes the numpy calls the
codec makes. Blocking waits (epoll, lock acquires, sleeps) are their own row: that is
the thread idle while the peer or the other thread works. So is the send that wakes
the other thread of a thread hand-off (asyncio's self-pipe, trio's wakeup socket): the
woken thread takes the GIL at once, and the sender's time in that send is mostly spent
waiting for it back while the other thread works.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

FuncKey = tuple[str, int, str]

WAIT = "idle: blocked in epoll / lock / sleep"
SOCKET = "socket send/recv: network I/O"
WAKEUP = "cross-thread wake-ups: self-pipe send (+ GIL wait)"
# The cross-thread wake-ups a thread hand-off makes (the grpclib backend's asyncio thread,
# user code on worker threads): asyncio's call_soon_threadsafe writes its self-pipe,
# trio's run_sync_soon writes its wakeup socketpair.
_WAKEUP_CALLERS = ("_write_to_self", "wakeup_thread_and_signal_safe")
NOT_BUSY = (WAIT, WAKEUP)
"""Rows that are a thread waiting (for the peer, or for the GIL while the other thread
works), so they overlap other rows and are left out of the busy totals."""
OTHER = "other"

# (component, substrings of the function's file): first match wins, so the more
# specific paths come first. Files under none of these are "neutral" (see below).
_FILE_RULES: list[tuple[str, tuple[str, ...]]] = [
    ("adapters: image kernels", ("trio_rlmesh/adapters/_image", "trio_rlmesh/_png")),
    ("adapters: rotation kernels", ("trio_rlmesh/adapters/_rotation",)),
    ("adapters: apply (assembly, actions)", ("trio_rlmesh/adapters/",)),
    ("remote env layer (trio_rlmesh.gym)", ("trio_rlmesh/gym/",)),
    ("codec (trio_rlmesh.spaces)", ("trio_rlmesh/spaces/",)),
    ("betterproto2 encode/decode", ("betterproto2/", "trio_rlmesh/protocol/_generated/")),
    ("protocol glue (meta, contract)", ("trio_rlmesh/protocol/",)),
    ("grpclib bridge (trio<->asyncio)", ("trio_rlmesh/transports/grpc/_grpclib_backend",)),
    ("grpclib", ("grpclib/", "multidict/")),
    ("h2 state machine + hpack", ("/h2/", "/hpack/")),
    (
        "our HTTP/2 I/O + gRPC framing",
        ("trio_rlmesh/transports/grpc/_h2", "trio_rlmesh/transports/grpc/_trio_backend"),
    ),
    ("our grpc client/server glue", ("trio_rlmesh/transports/grpc/",)),
    ("asyncio loop (grpclib thread)", ("/asyncio/",)),
    ("trio scheduler", ("/trio/", "/outcome/", "/sniffio/")),
    ("user-code worker threads", ("trio_rlmesh/runtime/_worker",)),
    ("driver bookkeeping (runtime)", ("trio_rlmesh/runtime/", "trio_rlmesh/_facade")),
    (
        "env host + adapter",
        ("trio_rlmesh/transports/_envhost/", "trio_rlmesh/transports/inprocess/_env"),
    ),
    ("env (gymnasium)", ("gymnasium/", "bench_envs")),
    (
        "model adapter (trio_rlmesh.model)",
        ("trio_rlmesh/model/", "trio_rlmesh/transports/inprocess/_model"),
    ),
    ("model (user policy)", ("bench_policies",)),
]
_WAIT_NAMES = (
    "epoll",
    "select.select",
    "'acquire' of '_thread",
    "'get' of '_queue.SimpleQueue'",
    "time.sleep",
)
_NEUTRAL_FILES = (
    "numpy/",
    "/attr/",
    "/attrs/",
    "<attrs generated",
    "<string>",
    "typing_extensions",
)


def _stdlib(filename: str) -> bool:
    return "/lib/python3" in filename and "site-packages" not in filename


def classify(key: FuncKey) -> str | None:
    """The component of a function, or None for neutral code (charged to its callers)."""
    filename, _, name = key
    if filename == "~":
        if any(w in name for w in _WAIT_NAMES):
            return WAIT
        return None
    for component, parts in _FILE_RULES:
        if any(part in filename for part in parts):
            return component
    if any(part in filename for part in _NEUTRAL_FILES) or _stdlib(filename):
        return None
    return OTHER


def _attribute(stats: dict[FuncKey, Any], key: FuncKey, depth: int = 0) -> dict[str, float]:
    """Fractions of ``key``'s self time per component, following callers when neutral."""
    component = classify(key)
    if component is not None:
        return {component: 1.0}
    callers = stats[key][4] if key in stats else {}
    if key[0] == "~" and "_socket.socket" in key[2]:
        # A send that wakes the other thread also hands it the GIL, and the sender
        # waits to get it back: that wait is part of the crossing, not of the network.
        total = sum(float(edge[2]) for edge in callers.values()) or 1.0
        wake = sum(
            float(edge[2])
            for caller, edge in callers.items()
            if any(name in caller[2] for name in _WAKEUP_CALLERS)
        )
        return {WAKEUP: wake / total, SOCKET: 1.0 - wake / total}
    if depth >= 8 or not callers:
        return {"builtins/stdlib (unattributed)": 1.0}
    weights = {caller: float(edge[2]) for caller, edge in callers.items()}
    total = sum(weights.values())
    if total <= 0:
        weights = dict.fromkeys(callers, 1.0)
        total = float(len(callers))
    shares: dict[str, float] = defaultdict(float)
    for caller, weight in weights.items():
        for part, fraction in _attribute(stats, caller, depth + 1).items():
            shares[part] += fraction * weight / total
    return shares


@dataclass
class Breakdown:
    label: str
    steps: int
    wall_s: float
    unprofiled_us_per_step: float | None
    components_us: dict[str, float]
    per_thread_busy_us: dict[str, float]
    top_cumulative: str
    top_self: str
    notes: list[str] = field(default_factory=list)

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "steps": self.steps,
            "wall_s": self.wall_s,
            "profiled_us_per_step": self.wall_s * 1e6 / max(self.steps, 1),
            "unprofiled_us_per_step": self.unprofiled_us_per_step,
            "components_us_per_step": self.components_us,
            "per_thread_busy_us_per_step": self.per_thread_busy_us,
        }

    def format(self) -> str:
        per_step = self.wall_s * 1e6 / max(self.steps, 1)
        lines = [f"== profile: {self.label} ({self.steps} steps) =="]
        lines.append(
            f"wall per step under cProfile: {per_step:.1f} µs"
            + (
                f"; without profiler: {self.unprofiled_us_per_step:.1f} µs"
                if self.unprofiled_us_per_step
                else ""
            )
        )
        lines.append(self.top_cumulative)
        lines.append(self.top_self)
        busy = sum(v for k, v in self.components_us.items() if k not in NOT_BUSY)
        scale = (
            self.unprofiled_us_per_step / per_step
            if self.unprofiled_us_per_step and per_step > 0
            else None
        )
        header = f"{'component':<46} {'µs/step':>9} {'share':>7}" + (
            f" {'≈ unprofiled':>13}" if scale else ""
        )
        lines += [
            "where the time per step goes (self time, all threads):",
            header,
            "-" * len(header),
        ]
        for name, value in sorted(self.components_us.items(), key=lambda kv: -kv[1]):
            share = (
                f"{100 * value / busy:6.1f}%" if name not in NOT_BUSY and busy > 0 else "      -"
            )
            lines.append(
                f"{name:<46} {value:>9.1f} {share:>7}"
                + (f" {value * scale:>13.1f}" if scale else "")
            )
        lines.append(f"{'busy total (excl. rows marked -)':<46} {busy:>9.1f}")
        for thread, value in self.per_thread_busy_us.items():
            lines.append(f"  thread {thread}: busy {value:.1f} µs/step")
        lines += self.notes
        return "\n".join(lines)


def _top(stats: pstats.Stats, sort: str, limit: int, title: str) -> str:
    buffer = io.StringIO()
    stats.stream = buffer
    stats.sort_stats(sort).print_stats(limit)
    body = buffer.getvalue()
    # Keep the column header and rows, drop pstats' preamble.
    start = body.find("   ncalls")
    return f"-- top {limit} by {title} --\n" + (body[start:] if start >= 0 else body).rstrip()


def profile_run(
    label: str,
    run: Callable[[], Any],
    steps_of: Callable[[Any], int],
    *,
    unprofiled_us_per_step: float | None = None,
    limit: int = 15,
) -> Breakdown:
    """Run ``run()`` once with cProfile in every thread; return the breakdown."""
    profilers: dict[str, cProfile.Profile] = {}
    lock = threading.Lock()

    def bootstrap(frame: Any, event: str, arg: Any) -> None:
        del frame, event, arg
        sys.setprofile(None)
        profiler = cProfile.Profile()
        try:
            profiler.enable()  # this thread's own profiler from here on (Python <= 3.11)
        except ValueError:
            return  # 3.12+: one process-wide profiler (the main one) already sees every thread
        with lock:
            profilers[f"{threading.current_thread().name}#{len(profilers)}"] = profiler

    main = cProfile.Profile()
    profilers["main (trio)"] = main
    threading.setprofile(bootstrap)
    started = time.perf_counter()
    main.enable()
    try:
        outcome = run()
    finally:
        main.disable()
        threading.setprofile(None)  # type: ignore[arg-type]
    wall = time.perf_counter() - started
    steps = max(1, steps_of(outcome))
    # Helper threads have ended by now (workers and the grpclib thread stop with the run);
    # a thread still alive keeps its profiler enabled, and its stats so far are still valid.
    merged: pstats.Stats | None = None
    per_thread: dict[str, float] = {}
    components: dict[str, float] = defaultdict(float)
    for name, profiler in profilers.items():
        try:
            stats = pstats.Stats(profiler)
        except TypeError:  # a profiler that never recorded anything
            continue
        raw: dict[FuncKey, Any] = stats.stats  # type: ignore[attr-defined]
        busy = 0.0
        for key, entry in raw.items():
            self_time = float(entry[2])
            for component, fraction in _attribute(raw, key).items():
                components[component] += self_time * fraction * 1e6 / steps
                if component not in NOT_BUSY:
                    busy += self_time * fraction * 1e6 / steps
        if busy > 0.5:
            per_thread[name] = busy
        merged = stats if merged is None else merged.add(stats)
    assert merged is not None
    return Breakdown(
        label=label,
        steps=steps,
        wall_s=wall,
        unprofiled_us_per_step=unprofiled_us_per_step,
        components_us=dict(components),
        per_thread_busy_us=per_thread,
        top_cumulative=_top(merged, "cumulative", limit, "cumulative time"),
        top_self=_top(merged, "tottime", limit, "self time"),
        notes=[
            "cProfile adds a fixed cost per Python call, so call-heavy components are "
            "inflated; the last column rescales every row by unprofiled/profiled wall "
            "time (a rough correction, not a measurement).",
        ],
    )


if __name__ == "__main__":  # pragma: no cover - manual use
    sys.exit("import this module from bench/run.py")
