"""The runs each scenario times, one function per side, plus the scenarios themselves.

Every ``run_*`` function performs one complete run and returns a :class:`Sample`.
rlmesh is imported only inside the functions that drive it, so the in-process
scenario (and the smoke test) work without it.
"""

from __future__ import annotations

import itertools
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import bench_envs
import bench_policies
import trio
from bench_measure import Comparison, Sample, interleave, nearest_rank, round_latency

import trio_rlmesh
from trio_rlmesh import RunLocalOptions, run_local

TELEMETRY = "telemetry runner.round"
WALL_OVER_STEPS = "wall/steps (no telemetry)"
STEP_TIMER = "per-step timer"


def tcp(address: str) -> str:
    """rlmesh wants a scheme; our server prints a bare ``host:port``."""
    return address if "://" in address else f"tcp://{address}"


def _env_step_split(rows: Any) -> dict[str, float]:
    """env.step p50: the round trip seen by the runtime and the server's own handling time."""
    found: dict[str, float] = {}
    for row in rows:
        if row.op == "env.step" and row.metric in ("rpc.total", "endpoint.total"):
            found[f"env_step_{row.metric.replace('.', '_')}_p50_ms"] = float(row.p50)
    return found


def _latency(rows: Any, steps: int, wall_s: float) -> tuple[float, float, str]:
    found = round_latency(rows)
    if found is not None:
        return found[0], found[1], TELEMETRY
    per_step = wall_s * 1e3 / max(steps, 1)
    return per_step, per_step, WALL_OVER_STEPS


def _our_sample(report: Any, wall: float, extra: dict[str, Any] | None = None) -> Sample:
    """One of our runs as a sample: steps are the lane steps of the counted episodes, as
    rlmesh's ``RunResult.total_steps``."""
    if report.status != "completed":
        raise RuntimeError(f"our run ended {report.status}: {report.reason}")
    steps = report.total_steps
    p50, p95, source = _latency(report.telemetry, steps, wall)
    return Sample(
        steps=steps,
        wall_s=wall,
        p50_ms=p50,
        p95_ms=p95,
        latency_source=source,
        episodes=len(report.episodes),
        mean_reward=report.mean_reward,
        extra=extra or {},
    )


# ----------------------------------------------------------------------------- ours, gRPC


def run_ours_remote(
    address: str,
    model: Any,
    *,
    episodes: int,
    seeds: Sequence[int] | None,
    grpc_backend: str = "trio",
) -> Sample:
    """``run_local`` (our runtime, in-process model) against an env server."""
    options = RunLocalOptions(
        address,
        episode_seeds=tuple(seeds or ()),
        max_episodes=episodes,
        workflow_edition="2026.06",
        grpc_backend=grpc_backend,  # type: ignore[arg-type]
    )

    async def main() -> tuple[Any, float]:
        started = time.perf_counter()
        report = await run_local(model, options)
        return report, time.perf_counter() - started

    report, wall = trio.run(main)
    extra = {"env_step_calls": report.env_step_calls, **_env_step_split(report.telemetry)}
    return _our_sample(report, wall, extra)


# ----------------------------------------------------------------------------- rlmesh


def run_theirs(address: str, model: Any, *, episodes: int, seeds: Sequence[int] | None) -> Sample:
    """``rlmesh.run`` (RLMesh's native runtime loop, in-process model) against an env server."""
    import rlmesh

    started = time.perf_counter()
    result = rlmesh.run(
        model,
        tcp(address),
        seeds=list(seeds) if seeds else None,
        episodes=episodes,
        workflow_edition="2026.06",
    )
    wall = time.perf_counter() - started
    steps = int(result.total_steps)
    p50, p95, source = _latency(result.telemetry, steps, wall)
    return Sample(
        steps=steps,
        wall_s=wall,
        p50_ms=p50,
        p95_ms=p95,
        latency_source=source,
        episodes=result.num_episodes,
        mean_reward=result.mean_reward,
        extra=_env_step_split(result.telemetry),
    )


# ----------------------------------------------------------------------------- in-process


def run_ours_inprocess(
    *, episodes: int, seeds: Sequence[int], user_code: str = "thread", record: Path | None = None
) -> Sample:
    """``trio_rlmesh.run(model, env)``: a local CartPole hosted in this process, no network.

    ``user_code`` is where the env's and the model's code run (both the same way). With
    ``record``, the run writes its episodes into a new Minari dataset in that directory
    (the wall time includes writing the last episodes).
    """
    env = bench_envs.make_cartpole()
    started = time.perf_counter()
    report = trio_rlmesh.run(
        bench_policies.OursCartPole(),
        env,
        episode_seeds=tuple(seeds),
        max_episodes=episodes,
        user_code=user_code,
        record=record,
    )
    wall = time.perf_counter() - started
    env.close()
    return _our_sample(report, wall)


def run_theirs_inprocess(*, episodes: int, seeds: Sequence[int]) -> Sample:
    """``rlmesh.run(model, env)``: RLMesh's own in-process run of the same env and policy."""
    import rlmesh

    env = bench_envs.make_cartpole()
    started = time.perf_counter()
    result = rlmesh.run(
        bench_policies.theirs_models()["cartpole"], env, seeds=list(seeds), episodes=episodes
    )
    wall = time.perf_counter() - started
    env.close()
    return their_sample(result, wall)


def their_sample(result: Any, wall: float) -> Sample:
    """One of rlmesh's runs (its ``RunResult``) as a sample."""
    steps = int(result.total_steps)
    p50, p95, source = _latency(result.telemetry, steps, wall)
    return Sample(
        steps=steps,
        wall_s=wall,
        p50_ms=p50,
        p95_ms=p95,
        latency_source=source,
        episodes=result.num_episodes,
        mean_reward=result.mean_reward,
    )


def run_bare_gymnasium(*, episodes: int, seeds: Sequence[int]) -> Sample:
    """The floor: ``env.step(policy(obs))`` in a plain loop, same env, policy and seeds."""
    env = bench_envs.make_cartpole()
    policy = bench_policies.cartpole_action
    clock = time.perf_counter_ns
    durations: list[int] = []
    rewards: list[float] = []
    started = time.perf_counter()
    for index in range(episodes):
        obs, _ = env.reset(seed=seeds[index] if index < len(seeds) else None)
        total = 0.0
        while True:
            t0 = clock()
            obs, reward, terminated, truncated, _ = env.step(policy(obs))
            durations.append(clock() - t0)
            total += float(reward)
            if terminated or truncated:
                break
        rewards.append(total)
    wall = time.perf_counter() - started
    env.close()
    ms = [d / 1e6 for d in durations]
    return Sample(
        steps=len(durations),
        wall_s=wall,
        p50_ms=nearest_rank(ms, 0.5),
        p95_ms=nearest_rank(ms, 0.95),
        latency_source=STEP_TIMER,
        episodes=episodes,
        mean_reward=sum(rewards) / len(rewards) if rewards else 0.0,
    )


# ----------------------------------------------------------------------------- scenarios


def scenario_inprocess(
    *,
    rounds: int,
    episodes: int,
    log: Callable[[str], None] = print,
    warmup: bool = True,
    user_code: str = "thread",
) -> Comparison:
    """4 / 4i: ``trio_rlmesh.run(model, env)`` in process vs a bare Gymnasium loop.

    Scenario 4 runs the env's and the model's code on their worker threads
    (``user_code="thread"``); 4i runs them inline on the trio thread (the default for an
    env object).
    """
    seeds = list(range(episodes))
    inline = user_code == "inline"
    result = interleave(
        "4i-inproc-inline" if inline else "4-inproc",
        f"in-process: trio_rlmesh.run(model, env, user_code={user_code!r}) vs bare loop",
        (
            f"ours: run(model, env), user_code={user_code}",
            lambda: run_ours_inprocess(episodes=episodes, seeds=seeds, user_code=user_code),
        ),
        ("bare gymnasium loop", lambda: run_bare_gymnasium(episodes=episodes, seeds=seeds)),
        rounds,
        warmup=warmup,
        log=log,
    )
    result.notes.append(
        "ratio < 1 is the runtime's overhead over calling env.step directly; bare-loop "
        "latency is policy+env.step timed per step"
    )
    return result


def scenario_inprocess_vs_rlmesh(
    *,
    rounds: int,
    episodes: int,
    log: Callable[[str], None] = print,
    warmup: bool = True,
    user_code: str = "thread",
) -> Comparison:
    """6 / 6i: ``trio_rlmesh.run(model, env)`` vs ``rlmesh.run(model, env)``, both in process."""
    seeds = list(range(episodes))
    inline = user_code == "inline"
    return interleave(
        "6i-run-inline" if inline else "6-run",
        f"in-process CartPole: trio_rlmesh.run(model, env, user_code={user_code!r}) "
        "vs rlmesh.run(model, env)",
        (
            f"ours: run(model, env), user_code={user_code}",
            lambda: run_ours_inprocess(episodes=episodes, seeds=seeds, user_code=user_code),
        ),
        (
            "rlmesh.run(model, env)",
            lambda: run_theirs_inprocess(episodes=episodes, seeds=seeds),
        ),
        rounds,
        warmup=warmup,
        log=log,
    )


def scenario_recording(
    *, rounds: int, episodes: int, log: Callable[[str], None] = print, warmup: bool = True
) -> Comparison:
    """7r: the in-process CartPole run of 4 recording a Minari dataset vs the same run
    unrecorded. Each recorded round writes a new dataset in a temporary directory."""
    seeds = list(range(episodes))
    numbers = itertools.count()
    with tempfile.TemporaryDirectory(prefix="bench-record-") as tmp:

        def recorded() -> Sample:
            path = Path(tmp) / f"cartpole-{next(numbers)}-v0"
            return run_ours_inprocess(episodes=episodes, seeds=seeds, record=path)

        result = interleave(
            "7r-record",
            "in-process CartPole: run(model, env, record=DATASET_DIR) vs the same run unrecorded",
            ("ours: recorded (Minari, HDF5)", recorded),
            (
                "ours: unrecorded",
                lambda: run_ours_inprocess(episodes=episodes, seeds=seeds),
            ),
            rounds,
            warmup=warmup,
            log=log,
        )
    result.notes.append(
        "both sides are trio-rlmesh; the recorded side's wall time includes writing every "
        "episode (the writer runs on a worker thread beside the run)"
    )
    return result


def scenario_single_lane_client(
    address: str,
    *,
    rounds: int,
    episodes: int,
    log: Callable[[str], None] = print,
    warmup: bool = True,
    grpc_backend: str = "trio",
) -> Comparison:
    """1a: our runtime vs rlmesh.run, both against rlmesh.EnvServer (CartPole).

    ``grpc_backend="grpclib"`` is scenario 1a-grpclib: our client on the grpclib backend.
    """
    seeds = list(range(episodes))
    ours = bench_policies.ours_models()["cartpole"]
    theirs = bench_policies.theirs_models()["cartpole"]
    trio_backend = grpc_backend == "trio"
    return interleave(
        "1a" if trio_backend else f"1a-{grpc_backend}",
        "single-lane CartPole, clients against rlmesh.EnvServer"
        + ("" if trio_backend else f" (ours on the {grpc_backend} backend)"),
        (
            "ours: run_local -> rlmesh server" + ("" if trio_backend else f" ({grpc_backend})"),
            lambda: run_ours_remote(
                address, ours, episodes=episodes, seeds=seeds, grpc_backend=grpc_backend
            ),
        ),
        (
            "rlmesh.run -> rlmesh server",
            lambda: run_theirs(address, theirs, episodes=episodes, seeds=seeds),
        ),
        rounds,
        warmup=warmup,
        log=log,
    )


def scenario_single_lane_server(
    our_address: str,
    their_address: str,
    *,
    rounds: int,
    episodes: int,
    log: Callable[[str], None] = print,
    warmup: bool = True,
    grpc_backend: str = "trio",
) -> Comparison:
    """1b: rlmesh.run against our serve-env vs against rlmesh.EnvServer (CartPole).

    ``grpc_backend`` names the backend ``our_address``'s server runs (1b-grpclib).
    """
    seeds = list(range(episodes))
    theirs = bench_policies.theirs_models()["cartpole"]
    trio_backend = grpc_backend == "trio"
    return interleave(
        "1b" if trio_backend else f"1b-{grpc_backend}",
        "single-lane CartPole, rlmesh.run against each side's env server"
        + ("" if trio_backend else f" (ours on the {grpc_backend} backend)"),
        (
            "rlmesh.run -> our serve-env" + ("" if trio_backend else f" ({grpc_backend})"),
            lambda: run_theirs(our_address, theirs, episodes=episodes, seeds=seeds),
        ),
        (
            "rlmesh.run -> rlmesh server",
            lambda: run_theirs(their_address, theirs, episodes=episodes, seeds=seeds),
        ),
        rounds,
        warmup=warmup,
        log=log,
    )


def scenario_full_stack(
    scenario: str,
    title: str,
    kind: str,
    our_address: str,
    their_address: str,
    *,
    rounds: int,
    episodes: int,
    seeded: bool,
    log: Callable[[str], None] = print,
    warmup: bool = True,
) -> Comparison:
    """2 and 3: our client + our server vs rlmesh.run + rlmesh.EnvServer."""
    seeds = list(range(episodes)) if seeded else None
    ours = bench_policies.ours_models()[kind]
    theirs = bench_policies.theirs_models()[kind]
    return interleave(
        scenario,
        title,
        (
            "ours: run_local -> our serve-env",
            lambda: run_ours_remote(our_address, ours, episodes=episodes, seeds=seeds),
        ),
        (
            "rlmesh.run -> rlmesh server",
            lambda: run_theirs(their_address, theirs, episodes=episodes, seeds=seeds),
        ),
        rounds,
        warmup=warmup,
        log=log,
    )
