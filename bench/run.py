"""Side-by-side benchmark of trio-rlmesh and RLMesh 0.1.0 (``nox -s bench``).

Usage: ``python bench/run.py [--quick] [--json PATH] [--only 1a,1b,...] [--no-profile]``
(``--help`` lists the scenarios).
``BENCH_QUICK=1`` is the same as ``--quick`` (the whole run in well under a minute).

Every scenario interleaves rounds of the two sides (A B, B A, A B, ...) after one
discarded warm-up pair, and reports medians over rounds. The machine is shared and
noisy: read the ratio column, not the absolute numbers. Scenarios 1-3 and 5-8 need rlmesh
(``rlmesh[gymnasium,numpy]==0.1.0``) and are skipped without it; scenario 4 and the
profile of scenario 4 need only trio-rlmesh and Gymnasium. See ``bench/README.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import os

# One BLAS thread, asked for before numpy loads: a model's matrix products then cost a fixed
# amount of one CPU per call (scenario 7c), and eight models on threads do not each spin up
# a BLAS thread pool on a shared machine. Set OPENBLAS_NUM_THREADS to measure otherwise.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import platform
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import bench_envs  # noqa: E402
import bench_policies  # noqa: E402
from bench_adapters import ours_runner, scenario_adapted_run, scenario_adapter  # noqa: E402
from bench_fleet import FLEET_SIZE, scenario_fleet, scenario_fleet_cpu  # noqa: E402
from bench_gym import (  # noqa: E402
    run_ours_async,
    run_ours_sync,
    scenario_gym_single,
    scenario_gym_vector,
)
from bench_measure import Comparison, format_table  # noqa: E402
from bench_profile import Breakdown, profile_run  # noqa: E402
from bench_scenarios import (  # noqa: E402
    run_ours_inprocess,
    run_ours_remote,
    scenario_full_stack,
    scenario_inprocess,
    scenario_inprocess_vs_rlmesh,
    scenario_recording,
    scenario_single_lane_client,
    scenario_single_lane_server,
)
from bench_targets import format_targets  # noqa: E402

ALL_SCENARIOS = (
    "1a",
    "1b",
    "1a-grpclib",
    "1b-grpclib",
    "2",
    "3",
    "4",
    "4i",
    "5s",
    "5a",
    "5v",
    "6",
    "6i",
    "7",
    "7c",
    "7r",
    "8a",
    "8b",
    "8c",
    "w",
)
REMOTE_SCENARIOS = (
    *("1a", "1b", "1a-grpclib", "1b-grpclib", "2", "3", "5s", "5a", "5v", "6", "6i", "7", "7c"),
    *("8a", "8b", "8c"),
)
"""The scenarios that need rlmesh (its env server, its runtime or its clients, its adapters)."""


@dataclass(frozen=True)
class Sizes:
    rounds: int
    cartpole_episodes: int
    """Episodes per round, single-lane CartPole (the heuristic policy lasts 500 steps)."""
    vector_episodes: int
    """Episodes per round on the 16-lane vector env (a multiple of 16)."""
    image_episodes: int
    """Episodes per round on the image env (100 steps each)."""
    image_rounds: int
    inprocess_episodes: int
    gym_episodes: int
    """Episodes per round of the single-lane step loops (5s, 5a; 500 steps each)."""
    gym_vector_steps: int
    """Vector steps per round of the 16-lane step loop (5v)."""
    fleet_episodes: int
    """Episodes per endpoint and round of scenario 7 (5 ms steps, at most 50 each)."""
    profile_episodes: int
    adapter_camera_calls: int
    """transform_obs + transform_action pairs per round of scenario 8a (the camera)."""
    adapter_state_calls: int
    """Pairs per round of scenario 8b (state and text only)."""
    adapted_run_episodes: int
    """Episodes per round of scenario 8c (an adapted in-process run, 50 steps each)."""
    warmup: bool
    """Run and discard one pair before the measured rounds."""


FULL = Sizes(
    rounds=5,
    cartpole_episodes=6,
    vector_episodes=48,
    image_episodes=4,
    image_rounds=3,
    inprocess_episodes=20,
    gym_episodes=6,
    gym_vector_steps=300,
    fleet_episodes=4,
    profile_episodes=4,
    adapter_camera_calls=150,
    adapter_state_calls=3000,
    adapted_run_episodes=10,
    warmup=True,
)
QUICK = Sizes(
    rounds=2,
    cartpole_episodes=1,
    vector_episodes=16,
    image_episodes=1,
    image_rounds=2,
    inprocess_episodes=2,
    gym_episodes=1,
    gym_vector_steps=40,
    fleet_episodes=1,
    profile_episodes=1,
    adapter_camera_calls=10,
    adapter_state_calls=200,
    adapted_run_episodes=2,
    warmup=False,
)


def rlmesh_version() -> str | None:
    if importlib.util.find_spec("rlmesh") is None:
        return None
    from importlib.metadata import version

    return version("rlmesh")


def _has_minari() -> bool:
    return importlib.util.find_spec("minari") is not None and sys.version_info >= (3, 11)


def _log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _us_per_step(result: Comparison, side: str = "ours") -> float:
    summary = result.ours if side == "ours" else result.theirs
    return statistics.median(s.wall_s * 1e6 / max(s.steps, 1) for s in summary.samples)


@contextlib.contextmanager
def _surviving(what: str, skipped: list[str]) -> Iterator[None]:
    """Run a scenario's block; if it fails, say so and let the other scenarios run."""
    try:
        yield
    except Exception as exc:
        _log(f"{what} failed: {type(exc).__name__}: {exc}")
        skipped.append(f"{what}: FAILED ({type(exc).__name__}: {exc})")


def run_all(
    sizes: Sizes, scenarios: Sequence[str], *, profile: bool
) -> tuple[list[Comparison], list[Breakdown], list[str]]:
    results: list[Comparison] = []
    profiles: list[Breakdown] = []
    skipped: list[str] = []
    remote = [s for s in scenarios if s in REMOTE_SCENARIOS]
    have_rlmesh = rlmesh_version() is not None
    if remote and not have_rlmesh:
        skipped.append(f"scenarios {', '.join(remote)}: rlmesh is not installed")
        remote = []

    from bench_servers import rlmesh_fleet, servers

    single = {"1a", "1b", "1a-grpclib", "1b-grpclib", "5s", "5a"} & set(remote)
    if single:
        with servers("cartpole", ours="1b" in remote, ours_grpclib="1b-grpclib" in remote) as addr:
            if "1a" in remote:
                _log("scenario 1a: single-lane CartPole, both clients vs rlmesh.EnvServer")
                result = scenario_single_lane_client(
                    addr["theirs"],
                    rounds=sizes.rounds,
                    episodes=sizes.cartpole_episodes,
                    log=_log,
                    warmup=sizes.warmup,
                )
                results.append(result)
                if profile:
                    _log("profiling 1a (our client against rlmesh.EnvServer)")
                    episodes = sizes.profile_episodes
                    model = bench_policies.ours_models()["cartpole"]
                    profiles.append(
                        profile_run(
                            "1a: run_local -> rlmesh.EnvServer (CartPole)",
                            lambda: run_ours_remote(
                                addr["theirs"],
                                model,
                                episodes=episodes,
                                seeds=list(range(episodes)),
                            ),
                            lambda sample: sample.steps,
                            unprofiled_us_per_step=_us_per_step(result),
                        )
                    )
            if "1b" in remote:
                _log("scenario 1b: rlmesh.run vs our serve-env and vs rlmesh.EnvServer")
                results.append(
                    scenario_single_lane_server(
                        addr["ours"],
                        addr["theirs"],
                        rounds=sizes.rounds,
                        episodes=sizes.cartpole_episodes,
                        log=_log,
                        warmup=sizes.warmup,
                    )
                )
            if "1a-grpclib" in remote:
                _log("scenario 1a-grpclib: as 1a, our client on the grpclib backend")
                results.append(
                    scenario_single_lane_client(
                        addr["theirs"],
                        rounds=sizes.rounds,
                        episodes=sizes.cartpole_episodes,
                        log=_log,
                        warmup=sizes.warmup,
                        grpc_backend="grpclib",
                    )
                )
            if "1b-grpclib" in remote:
                _log("scenario 1b-grpclib: as 1b, our serve-env on the grpclib backend")
                results.append(
                    scenario_single_lane_server(
                        addr["ours_grpclib"],
                        addr["theirs"],
                        rounds=sizes.rounds,
                        episodes=sizes.cartpole_episodes,
                        log=_log,
                        warmup=sizes.warmup,
                        grpc_backend="grpclib",
                    )
                )
            for which, scenario in (("sync", "5s"), ("async", "5a")):
                if scenario not in remote:
                    continue
                _log(f"scenario {scenario}: {which} remote env step loop vs rlmesh.RemoteEnv")
                with _surviving(f"scenario {scenario}", skipped):
                    result = scenario_gym_single(
                        which,
                        addr["theirs"],
                        rounds=sizes.rounds,
                        episodes=sizes.gym_episodes,
                        log=_log,
                        warmup=sizes.warmup,
                    )
                    results.append(result)
                    if profile:
                        _log(f"profiling {scenario} (our remote env against rlmesh.EnvServer)")
                        episodes = sizes.profile_episodes
                        loop = run_ours_sync if which == "sync" else run_ours_async
                        profiles.append(
                            profile_run(
                                f"{scenario}: {result.ours.label} -> rlmesh.EnvServer (CartPole)",
                                lambda loop=loop, episodes=episodes: loop(  # type: ignore[misc]
                                    addr["theirs"], episodes=episodes, seeds=list(range(episodes))
                                ),
                                lambda sample: sample.steps,
                                unprofiled_us_per_step=_us_per_step(result),
                            )
                        )
    if "5v" in remote:
        _log("scenario 5v: RemoteVectorEnv vs rlmesh.RemoteVectorEnv, 16 lanes")
        with _surviving("scenario 5v", skipped), servers("vector16", ours=False) as addr:
            results.append(
                scenario_gym_vector(
                    addr["theirs"],
                    rounds=sizes.rounds,
                    steps=sizes.gym_vector_steps,
                    log=_log,
                    warmup=sizes.warmup,
                )
            )
    if "2" in remote:
        _log("scenario 2: 16-lane vector CartPole (NEXT_STEP), predict_batch, each side's server")
        with servers("vector16") as addr:
            result = scenario_full_stack(
                "2-vec16",
                "16-lane SyncVectorEnv CartPole, batched model, each side's client + server",
                "vector16",
                addr["ours"],
                addr["theirs"],
                rounds=sizes.rounds,
                episodes=sizes.vector_episodes,
                seeded=False,  # rlmesh refuses explicit seeds on an autoresetting vector env
                log=_log,
                warmup=sizes.warmup,
            )
            result.notes.append(
                "steps = lane steps of completed episodes (both reports); p50/p95 are per "
                "vector round (16 lanes)"
            )
            results.append(result)
    if "3" in remote:
        _log("scenario 3: 84x84x3 uint8 image env, each side's server")
        with servers("image") as addr:
            results.append(
                scenario_full_stack(
                    "3-image",
                    "84x84x3 uint8 observation env, each side's client + server",
                    "image",
                    addr["ours"],
                    addr["theirs"],
                    rounds=sizes.image_rounds,
                    episodes=sizes.image_episodes,
                    seeded=True,
                    log=_log,
                    warmup=sizes.warmup,
                )
            )
    if "4" in scenarios:
        _log("scenario 4: in-process driver vs bare Gymnasium loop")
        result = scenario_inprocess(
            rounds=sizes.rounds, episodes=sizes.inprocess_episodes, log=_log, warmup=sizes.warmup
        )
        results.append(result)
        if profile:
            _log("profiling 4 (in-process driver)")
            episodes = sizes.profile_episodes
            profiles.append(
                profile_run(
                    "4: trio_rlmesh.run(model, env) in process (CartPole)",
                    lambda: run_ours_inprocess(episodes=episodes, seeds=list(range(episodes))),
                    lambda sample: sample.steps,
                    unprofiled_us_per_step=_us_per_step(result),
                )
            )
    if "4i" in scenarios:
        _log("scenario 4i: in-process driver, user code inline, vs bare Gymnasium loop")
        results.append(
            scenario_inprocess(
                rounds=sizes.rounds,
                episodes=sizes.inprocess_episodes,
                log=_log,
                warmup=sizes.warmup,
                user_code="inline",
            )
        )
    for scenario, user_code in (("6", "thread"), ("6i", "inline")):
        if scenario in remote:
            _log(f"scenario {scenario}: run(model, env) vs rlmesh.run(model, env), in process")
            results.append(
                scenario_inprocess_vs_rlmesh(
                    rounds=sizes.rounds,
                    episodes=sizes.inprocess_episodes,
                    log=_log,
                    warmup=sizes.warmup,
                    user_code=user_code,
                )
            )
    fleets = [s for s in ("7", "7c") if s in remote]
    if fleets:
        with (
            _surviving(f"scenario {', '.join(fleets)}", skipped),
            rlmesh_fleet("slow", FLEET_SIZE) as addresses,
        ):
            for scenario, model, run_fleet in (
                ("7", "a model that costs almost nothing", scenario_fleet),
                ("7c", "a CPU-bound model", scenario_fleet_cpu),
            ):
                if scenario in fleets:
                    _log(f"scenario {scenario}: a fleet of {FLEET_SIZE} 5 ms endpoints, {model}")
                    results += run_fleet(
                        addresses,
                        rounds=sizes.rounds,
                        episodes=sizes.fleet_episodes,
                        log=_log,
                        warmup=sizes.warmup,
                    )
    if "7r" in scenarios:
        if _has_minari():
            _log("scenario 7r: in-process CartPole recorded into a Minari dataset vs unrecorded")
            results.append(
                scenario_recording(
                    rounds=sizes.rounds,
                    episodes=sizes.inprocess_episodes,
                    log=_log,
                    warmup=sizes.warmup,
                )
            )
        else:
            skipped.append("scenario 7r: Minari is not installed (pip install '.[record]')")
    for scenario in ("8a", "8b"):
        if scenario not in remote:
            continue
        calls = sizes.adapter_camera_calls if scenario == "8a" else sizes.adapter_state_calls
        _log(f"scenario {scenario}: adapter transform_obs + transform_action vs rlmesh.adapters")
        with _surviving(f"scenario {scenario}", skipped):
            result = scenario_adapter(
                scenario, rounds=sizes.rounds, calls=calls, log=_log, warmup=sizes.warmup
            )
            results.append(result)
            if profile:
                _log(f"profiling {scenario} (our adapter)")
                runner = ours_runner(scenario)  # resolved before the profile starts
                profiles.append(
                    profile_run(
                        f"{scenario}: {result.title}",
                        lambda runner=runner, calls=calls: runner(calls),  # type: ignore[misc]
                        lambda sample: sample.steps,
                        unprofiled_us_per_step=_us_per_step(result),
                    )
                )
    if "8c" in remote:
        _log("scenario 8c: adapted in-process run vs rlmesh.run(Model(fn, spec=...), env)")
        with _surviving("scenario 8c", skipped):
            results.append(
                scenario_adapted_run(
                    rounds=sizes.rounds,
                    episodes=sizes.adapted_run_episodes,
                    log=_log,
                    warmup=sizes.warmup,
                )
            )
    for result in results:
        note = _transport_note(result)
        if note:
            result.notes.append(note)
    return results, profiles, skipped


def _transport_note(result: Comparison) -> str | None:
    """env.step p50 as the runtime saw it vs the server's own handling, per side."""
    parts = []
    for summary in (result.ours, result.theirs):
        rpc = [s.extra.get("env_step_rpc_total_p50_ms") for s in summary.samples]
        served = [s.extra.get("env_step_endpoint_total_p50_ms") for s in summary.samples]
        if None in rpc or None in served or not rpc:
            continue
        parts.append(
            f"{summary.label}: {statistics.median(rpc):.3f} / {statistics.median(served):.3f}"  # type: ignore[type-var]
        )
    if not parts:
        return None
    return "env.step p50 round trip / server handling (ms): " + "; ".join(parts)


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (also BENCH_QUICK=1)")
    parser.add_argument("--json", type=Path, help="write every number to this file")
    parser.add_argument(
        "--only",
        default=",".join(ALL_SCENARIOS),
        help=f"comma-separated scenarios ({','.join(ALL_SCENARIOS)})",
    )
    parser.add_argument("--no-profile", action="store_true", help="skip the cProfile runs")
    args = parser.parse_args(argv)
    quick = args.quick or os.environ.get("BENCH_QUICK", "") not in ("", "0")
    sizes = QUICK if quick else FULL
    scenarios = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = sorted(set(scenarios) - set(ALL_SCENARIOS))
    if unknown:
        parser.error(f"unknown scenarios {unknown}; choose from {', '.join(ALL_SCENARIOS)}")

    import trio_rlmesh

    theirs = rlmesh_version()
    header = (
        f"trio-rlmesh {getattr(trio_rlmesh, '__version__', '?')} vs rlmesh {theirs or '(absent)'}"
        f" | python {platform.python_version()} | {os.cpu_count()} cpus | "
        f"{'quick' if quick else 'full'} mode | {sizes}"
    )
    _log(header)
    started = time.perf_counter()
    results, profiles, skipped = run_all(sizes, scenarios, profile=not args.no_profile)
    worker: dict[str, float] = {}
    if "w" in scenarios:
        _log("scenario w: user-code worker hand-off vs trio.to_thread")
        from bench_worker import measure as measure_worker

        worker = measure_worker(3000 if quick else 30000)
    components: dict[str, float] = {}
    if not args.no_profile:
        _log("component micro-timings")
        from bench_components import measure

        components = measure(300 if quick else 3000)
    elapsed = time.perf_counter() - started

    print()
    print(header)
    print(
        "Medians over interleaved rounds. steps/s = steps from the run's report / whole-run "
        "wall time (connect to close); ratio = median of per-round ours/theirs steps/s."
    )
    print(format_table(results))
    for result in results:
        for note in result.notes:
            print(f"  note [{result.scenario}]: {note}")
    for reason in skipped:
        print(f"  skipped {reason}")
    targets = format_targets(results)
    if targets:
        print()
        print(targets)
    for breakdown in profiles:
        print()
        print(breakdown.format())
    if worker:
        from bench_worker import format_worker

        print()
        print(format_worker(worker))
    if components:
        from bench_components import format_components

        print()
        print(format_components(components))
    print(f"\nbench finished in {elapsed:.1f} s")

    if args.json is not None:
        data = {
            "header": header,
            "quick": quick,
            "sizes": sizes.__dict__,
            "env": {"image_shape": bench_envs.IMAGE_SHAPE, "vector_lanes": bench_envs.VECTOR_LANES},
            "results": [r.to_json_dict() for r in results],
            "profiles": [p.to_json_dict() for p in profiles],
            "components_us_per_call": components,
            "worker_us_per_call": worker,
            "skipped": skipped,
            "elapsed_s": elapsed,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(_json_safe(data), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
