"""Hand-off cost of the user-code worker against ``trio.to_thread.run_sync``.

Every in-process env or model call in the default ``user_code="thread"`` mode crosses to
the object's worker thread and back once: inside the worker's short synchronous wait
when the call is quick, else by parking the task until trio is woken (``sync_wait=0``
forces that path). This times that crossing alone: a no-op
function called through each path, many times in a row inside one trio run, median µs
per call over batches. ``python bench/bench_worker.py [REPS]`` prints the table;
``run.py`` prints it as scenario ``w``.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Awaitable, Callable

import trio

from trio_rlmesh.runtime._worker import InlineWorker, ThreadWorker

PATHS = (
    "direct call (no await)",
    "InlineWorker.run (user_code='inline')",
    "ThreadWorker.run (user_code='thread')",
    "ThreadWorker.run, sync_wait=0 (always parks)",
    "trio.to_thread.run_sync",
)


def _noop() -> None:
    return None


async def _median_us(call: Callable[[], Awaitable[object]], reps: int, batches: int) -> float:
    per_batch = max(1, reps // batches)
    for _ in range(min(200, per_batch)):
        await call()
    results = []
    for _ in range(batches):
        started = time.perf_counter_ns()
        for _ in range(per_batch):
            await call()
        results.append((time.perf_counter_ns() - started) / per_batch / 1e3)
    return statistics.median(results)


def measure(reps: int = 20000, batches: int = 9) -> dict[str, float]:
    """Median µs per call through each path (see :data:`PATHS`)."""

    async def main() -> dict[str, float]:
        inline = InlineWorker("bench")
        thread = ThreadWorker("bench")
        parking = ThreadWorker("bench", sync_wait=0)

        async def direct() -> None:
            _noop()

        async def via_inline() -> None:
            await inline.run("op", _noop)

        async def via_thread() -> None:
            await thread.run("op", _noop)

        async def via_parking() -> None:
            await parking.run("op", _noop)

        async def via_to_thread() -> None:
            await trio.to_thread.run_sync(_noop)

        calls = (direct, via_inline, via_thread, via_parking, via_to_thread)
        out: dict[str, float] = {}
        # Interleave the paths batch-wise too, so drifting machine load hits all of them.
        samples: dict[str, list[float]] = {name: [] for name in PATHS}
        for _ in range(3):
            for name, call in zip(PATHS, calls, strict=True):
                samples[name].append(await _median_us(call, reps // 3, batches))
        for name in PATHS:
            out[name] = statistics.median(samples[name])
        await thread.aclose()
        await parking.aclose()
        return out

    return trio.run(main)


def format_worker(results: dict[str, float]) -> str:
    lines = ["user-code hand-off, median µs per call of a no-op (one trio run)"]
    base = results.get("trio.to_thread.run_sync")
    for name, us in results.items():
        ratio = f"  ({us / base:.2f}x to_thread)" if base and "Thread" in name else ""
        lines.append(f"  {name:<46} {us:8.2f} µs{ratio}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(format_worker(measure(int(sys.argv[1]) if len(sys.argv) > 1 else 20000)))
