"""Scenarios 7 and 7c: one fleet run over 8 env servers (issues 13 and 25).

Every server is an ``rlmesh.EnvServer`` subprocess serving ``bench_envs.make_slow``:
CartPole whose step waits a fixed 5 ms (a stand-in for a heavy simulator), episodes of
at most 50 steps. Both sides of each pair use the same servers, the same policy rule and
the same seeds, so they run the same episodes. Scenario 7's model costs almost nothing;
three figures:

* ``7-fleet8-vs-1``: our ``run_local`` over the 8 servers (8× the episodes) against our
  ``run_local`` over one of them, env-steps/s;
* ``7-fleet8-vs-rlmesh8``: the same fleet run against 8 concurrent ``rlmesh.run`` calls
  (one per server, each in a thread of its own with its own model instance), env-steps/s;
* ``7-batch``: the mean predict batch (rows per model call) of our fleet runs, from the
  report's ``model.predict`` ``group.size`` row.

Scenario 7c is the case fleets exist for: the same rule behind a forward that costs real
CPU per call whatever the batch (``bench_policies.MatmulChain``, a fixed chain of 384×384
float32 matrix products). Three figures:

* ``7c-fleet8-vs-rlmesh8``: our fleet run (one model, fused predicts) against 8 concurrent
  ``rlmesh.run`` (threads, a model each, so a forward per env step), env-steps/s;
* ``7c-batch``: the mean predict batch of our fleet runs;
* ``7c-overlap``: the model overlapped with the envs (on its worker thread, serving
  whichever endpoints are ready while the others step: ``user_code="thread"``,
  ``fuse_wait=0``) against the default (the endpoints fused into one group), env-steps/s.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import bench_policies
import trio
from bench_measure import Comparison, Sample, interleave, nearest_rank, round_latency
from bench_scenarios import WALL_OVER_STEPS, _our_sample, run_ours_remote, tcp

from trio_rlmesh import RunLocalOptions, run_local

FLEET_SIZE = 8


def _row(report: Any, metric: str) -> Any:
    for row in report.telemetry:
        if (row.op, row.metric) == ("model.predict", metric):
            return row
    raise RuntimeError(f"the fleet run recorded no model.predict {metric} row")


def mean_batch(report: Any) -> float:
    """Rows per model call: the fleet telemetry's ``model.predict`` ``group.size`` average."""
    return float(_row(report, "group.size").avg)


def run_ours_fleet(
    addresses: Sequence[str],
    *,
    episodes: int,
    seeds: Sequence[int],
    model: Callable[[], Any] = bench_policies.OursCartPoleBatch,
    **options: Any,
) -> Sample:
    """One ``run_local`` over every address, one batched model (``predict_batch``) made by
    ``model``; ``options`` are more :class:`RunLocalOptions` fields."""
    run_options = RunLocalOptions(
        list(addresses),
        episode_seeds=tuple(seeds),
        max_episodes=episodes,
        workflow_edition="2026.06",
        **options,
    )
    handler = model()

    async def main() -> tuple[Any, float]:
        started = time.perf_counter()
        report = await run_local(handler, run_options)
        return report, time.perf_counter() - started

    report, wall = trio.run(main)
    extra = {
        "mean_predict_batch": mean_batch(report),
        "predict_p50_ms": float(_row(report, "rpc.total").p50),
        "endpoints": len(report.endpoints),
    }
    return _our_sample(report, wall, extra)


def run_theirs_concurrent(
    addresses: Sequence[str], *, episodes: int, seeds: Sequence[int], kind: str = "cartpole"
) -> Sample:
    """``rlmesh.run`` once per address, all at once in threads, each with its own model
    (``bench_policies.theirs_models()[kind]``).

    Endpoint ``k`` runs seeds ``k*episodes .. (k+1)*episodes - 1``: together, the seeds
    the fleet run runs.
    """
    import rlmesh

    def one(k: int) -> Any:
        return rlmesh.run(
            bench_policies.theirs_models()[kind],
            tcp(addresses[k]),
            seeds=list(seeds[k * episodes : (k + 1) * episodes]),
            episodes=episodes,
            workflow_edition="2026.06",
        )

    with ThreadPoolExecutor(len(addresses)) as pool:
        started = time.perf_counter()
        results = list(pool.map(one, range(len(addresses))))
        wall = time.perf_counter() - started
    steps = sum(int(result.total_steps) for result in results)
    latencies = [round_latency(result.telemetry) for result in results]
    if None in latencies:
        p50 = p95 = wall * 1e3 / max(steps, 1)
        source = WALL_OVER_STEPS
    else:
        p50 = statistics.median(found[0] for found in latencies if found is not None)
        p95 = nearest_rank([found[1] for found in latencies if found is not None], 0.95)
        source = "telemetry runner.round (median of runs)"
    return Sample(
        steps=steps,
        wall_s=wall,
        p50_ms=p50,
        p95_ms=p95,
        latency_source=source,
        episodes=sum(int(result.num_episodes) for result in results),
        mean_reward=statistics.fmean(float(result.mean_reward) for result in results),
    )


def scenario_fleet(
    addresses: Sequence[str],
    *,
    rounds: int,
    episodes: int,
    log: Callable[[str], None] = print,
    warmup: bool = True,
) -> list[Comparison]:
    """7: the fleet against one endpoint, and against ``len(addresses)`` rlmesh.run calls.

    ``episodes`` is per endpoint: the fleet runs ``episodes * len(addresses)`` of them.
    """
    count = len(addresses)
    seeds = list(range(episodes * count))
    fleet = (
        f"ours: run_local over {count} endpoints",
        lambda: run_ours_fleet(addresses, episodes=episodes * count, seeds=seeds),
    )
    single = run_ours_remote
    versus_one = interleave(
        f"7-fleet{count}-vs-1",
        f"5 ms env step, {count} rlmesh.EnvServers: one fleet run vs one endpoint",
        fleet,
        (
            "ours: run_local over 1 endpoint",
            lambda: single(
                addresses[0],
                bench_policies.OursCartPoleBatch(),
                episodes=episodes,
                seeds=seeds[:episodes],
            ),
        ),
        rounds,
        warmup=warmup,
        log=log,
    )
    versus_theirs = interleave(
        f"7-fleet{count}-vs-rlmesh{count}",
        f"5 ms env step: one fleet run vs {count} concurrent rlmesh.run (threads)",
        fleet,
        (
            f"rlmesh.run x{count}, threads",
            lambda: run_theirs_concurrent(addresses, episodes=episodes, seeds=seeds),
        ),
        rounds,
        warmup=False,  # the fleet and the servers are warm from the first comparison
        log=log,
    )
    batches = [
        float(s.extra["mean_predict_batch"])
        for s in versus_one.ours.samples + versus_theirs.ours.samples
    ]
    batch = statistics.median(batches)
    versus_one.figures["7-batch"] = batch
    versus_one.notes.append(
        f"mean predict batch over {count} endpoints (rows per model call, median of the "
        f"fleet runs): {batch:.2f}"
    )
    versus_theirs.notes.append(
        "steps = lane steps of completed episodes, summed over the rlmesh runs; their p50/p95 "
        "are the median/p95 of the runs' runner.round rows"
    )
    return [versus_one, versus_theirs]


def forward_cpu_ms(calls: int = 20) -> float:
    """CPU time of one :class:`~bench_policies.MatmulChain` forward (median of ``calls``)."""
    forward = bench_policies.MatmulChain()
    times = []
    for _ in range(calls):
        started = time.process_time()
        forward()
        times.append((time.process_time() - started) * 1e3)
    return statistics.median(times)


def scenario_fleet_cpu(
    addresses: Sequence[str],
    *,
    rounds: int,
    episodes: int,
    log: Callable[[str], None] = print,
    warmup: bool = True,
) -> list[Comparison]:
    """7c: a fleet run whose model costs real CPU per call, against ``len(addresses)``
    ``rlmesh.run`` calls, and overlapped against fused. ``episodes`` is per endpoint."""
    count = len(addresses)
    seeds = list(range(episodes * count))
    model = bench_policies.OursCartPoleChain
    fused = (
        f"ours: run_local over {count}, fused",
        lambda: run_ours_fleet(addresses, episodes=episodes * count, seeds=seeds, model=model),
    )
    versus_theirs = interleave(
        f"7c-fleet{count}-vs-rlmesh{count}",
        f"CPU-bound model, 5 ms env step: one fleet run vs {count} concurrent rlmesh.run",
        fused,
        (
            f"rlmesh.run x{count}, threads",
            lambda: run_theirs_concurrent(
                addresses, episodes=episodes, seeds=seeds, kind="cartpole_chain"
            ),
        ),
        rounds,
        warmup=warmup,
        log=log,
    )
    overlapped = interleave(
        "7c-overlap",
        "CPU-bound model: the model overlapped with the envs vs one fused group",
        (
            "ours: overlapped (thread, wait 0)",
            lambda: run_ours_fleet(
                addresses,
                episodes=episodes * count,
                seeds=seeds,
                model=model,
                user_code="thread",
                fuse_wait=0.0,
            ),
        ),
        fused,
        rounds,
        warmup=False,  # warm from the first comparison
        log=log,
    )
    fused_runs = versus_theirs.ours.samples + overlapped.theirs.samples
    batch = statistics.median(float(s.extra["mean_predict_batch"]) for s in fused_runs)
    versus_theirs.figures["7c-batch"] = batch
    predict = statistics.median(float(s.extra["predict_p50_ms"]) for s in fused_runs)
    versus_theirs.notes.append(
        f"the model's forward: {forward_cpu_ms():.2f} ms of CPU per call; fused calls of "
        f"{batch:.2f} rows (median of the fused runs), {predict:.2f} ms p50 each"
    )
    overlap_batch = statistics.median(
        float(s.extra["mean_predict_batch"]) for s in overlapped.ours.samples
    )
    overlapped.notes.append(
        f"mean predict batch overlapped: {overlap_batch:.2f} rows (fused: {batch:.2f})"
    )
    return [versus_theirs, overlapped]
