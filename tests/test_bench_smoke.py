"""The benchmark's scenarios still run: tiny sizes, no network unless rlmesh is installed."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytest.importorskip("gymnasium")

BENCH = Path(__file__).resolve().parent.parent / "bench"


def _load_bench() -> ModuleType:
    """Import ``bench/run.py`` the way ``python bench/run.py`` sees its siblings."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("bench_run", BENCH / "run.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while building
    spec.loader.exec_module(module)
    return module


def _check_side(side: object) -> None:
    for name in ("label", "steps", "p50_ms", "p95_ms", "steps_per_s", "latency_source"):
        assert hasattr(side, name), name
    assert side.steps > 0  # type: ignore[attr-defined]
    assert side.steps_per_s > 0  # type: ignore[attr-defined]
    assert 0 < side.p50_ms <= side.p95_ms  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("user_code", "scenario"), [("thread", "4-inproc"), ("inline", "4i-inproc")]
)
def test_inprocess_scenario_runs_and_fills_the_table(user_code: str, scenario: str) -> None:
    bench = _load_bench()
    result = bench.scenario_inprocess(
        rounds=1, episodes=1, log=lambda _: None, warmup=False, user_code=user_code
    )
    _check_side(result.ours)
    _check_side(result.theirs)
    assert result.ours.latency_source == "telemetry runner.round"
    # The same env, policy and seed on both sides: the same episode.
    assert result.ours.steps == result.theirs.steps
    assert result.ours.mean_reward == result.theirs.mean_reward
    assert math.isfinite(result.ratio)
    assert result.ratio > 0
    table = bench.format_table([result])
    assert scenario in table
    assert "ours/theirs" in table


@pytest.mark.skipif(sys.version_info < (3, 11), reason="recording datasets needs Minari (3.11+)")
def test_recording_scenario_compares_a_recorded_run_with_the_same_run() -> None:
    bench = _load_bench()
    result = bench.scenario_recording(rounds=1, episodes=1, log=lambda _: None, warmup=False)
    assert result.scenario == "7r-record"
    _check_side(result.ours)
    _check_side(result.theirs)
    assert result.ours.steps == result.theirs.steps
    assert result.ours.mean_reward == result.theirs.mean_reward
    assert "7r-record" in bench.format_targets([result])


def test_worker_handoff_scenario_times_every_path() -> None:
    _load_bench()
    from bench_worker import PATHS, format_worker, measure

    results = measure(reps=90, batches=3)
    assert list(results) == list(PATHS)
    assert all(us > 0 for us in results.values())
    assert "trio.to_thread.run_sync" in format_worker(results)


@pytest.mark.network
def test_single_lane_client_scenario_against_rlmesh() -> None:
    pytest.importorskip("rlmesh")
    bench = _load_bench()
    from bench_servers import servers

    with servers("cartpole", ours=False) as address:
        result = bench.scenario_single_lane_client(
            address["theirs"], rounds=1, episodes=1, log=lambda _: None, warmup=False
        )
    _check_side(result.ours)
    _check_side(result.theirs)
    assert result.ours.steps == result.theirs.steps


@pytest.mark.interop
@pytest.mark.network
def test_remote_env_step_loop_scenarios_against_rlmesh() -> None:
    pytest.importorskip("rlmesh")
    bench = _load_bench()
    from bench_servers import servers
    from bench_targets import format_targets

    results = []
    with servers("cartpole", ours=False) as address:
        for which in ("sync", "async"):
            results.append(
                bench.scenario_gym_single(
                    which, address["theirs"], rounds=1, episodes=1, log=lambda _: None, warmup=False
                )
            )
    with servers("vector16", ours=False) as address:
        results.append(
            bench.scenario_gym_vector(
                address["theirs"], rounds=1, steps=5, log=lambda _: None, warmup=False
            )
        )
    assert [r.scenario for r in results] == ["5s", "5a", "5v"]
    for result in results:
        _check_side(result.ours)
        _check_side(result.theirs)
        # the same policy, env and seeds on both sides: the same trajectory
        assert result.ours.steps == result.theirs.steps
        assert result.ours.mean_reward == result.theirs.mean_reward
        assert any("issue 12 target" in note for note in result.notes)
    assert results[2].ours.steps == 5 * 16
    table = bench.format_table(results)
    assert "5s" in table
    assert "5v" in table
    targets = format_targets(results)
    assert "5a" in targets
    assert "target >= 2" in targets


@pytest.mark.interop
def test_inprocess_run_scenario_against_rlmesh_run() -> None:
    pytest.importorskip("rlmesh")
    bench = _load_bench()
    result = bench.scenario_inprocess_vs_rlmesh(
        rounds=1, episodes=1, log=lambda _: None, warmup=False, user_code="inline"
    )
    _check_side(result.ours)
    _check_side(result.theirs)
    # The same env, policy and seed on both sides: the same episode.
    assert result.ours.steps == result.theirs.steps
    assert result.ours.mean_reward == result.theirs.mean_reward
    table = bench.format_table([result])
    assert "6i-run-inline" in table
    from bench_targets import format_targets

    assert "6i-run-inline" in format_targets([result])


@pytest.mark.interop
@pytest.mark.network
def test_grpclib_server_scenario_against_rlmesh() -> None:
    pytest.importorskip("rlmesh")
    bench = _load_bench()
    from bench_servers import servers

    with servers("cartpole", ours=False, ours_grpclib=True) as address:
        result = bench.scenario_single_lane_server(
            address["ours_grpclib"],
            address["theirs"],
            rounds=1,
            episodes=1,
            log=lambda _: None,
            warmup=False,
            grpc_backend="grpclib",
        )
    assert result.scenario == "1b-grpclib"
    _check_side(result.ours)
    assert result.ours.steps == result.theirs.steps


def _two_endpoint_fleet(scenario: str) -> tuple[list[Any], str]:
    """``bench.<scenario>`` over 2 slow ``rlmesh.EnvServer``s, one round of one episode
    each; its results and its targets table."""
    pytest.importorskip("rlmesh")
    bench = _load_bench()
    from bench_servers import rlmesh_fleet
    from bench_targets import format_targets

    with rlmesh_fleet("slow", 2) as addresses:
        results = getattr(bench, scenario)(
            addresses, rounds=1, episodes=1, log=lambda _: None, warmup=False
        )
    return results, format_targets(results)


@pytest.mark.interop
@pytest.mark.network
def test_fleet_scenario_prints_its_three_figures() -> None:
    results, targets = _two_endpoint_fleet("scenario_fleet")
    assert [r.scenario for r in results] == ["7-fleet2-vs-1", "7-fleet2-vs-rlmesh2"]
    for result in results:
        _check_side(result.ours)
        _check_side(result.theirs)
    # Two endpoints, one episode each, against one endpoint's one episode: the same seeds.
    assert results[0].ours.steps > results[0].theirs.steps
    assert results[1].ours.steps == results[1].theirs.steps
    assert results[1].ours.mean_reward == results[1].theirs.mean_reward
    batch = results[0].figures["7-batch"]
    assert 1.0 <= batch <= 2.0
    assert "7-batch" in targets


@pytest.mark.interop
@pytest.mark.network
def test_cpu_bound_fleet_scenario_prints_its_figures() -> None:
    results, targets = _two_endpoint_fleet("scenario_fleet_cpu")
    assert [r.scenario for r in results] == ["7c-fleet2-vs-rlmesh2", "7c-overlap"]
    for result in results:
        _check_side(result.ours)
        _check_side(result.theirs)
        # The forward is beside the policy, not in it: every side runs the same episodes.
        assert result.ours.steps == result.theirs.steps
        assert result.ours.mean_reward == result.theirs.mean_reward
    batch = results[0].figures["7c-batch"]
    assert 1.0 <= batch <= 2.0
    assert "ms of CPU per call" in results[0].notes[0]
    assert "7c-fleet8-vs-rlmesh8" not in targets  # two endpoints: no target of its own
    assert "7c-batch" in targets


@pytest.mark.interop
@pytest.mark.parametrize(
    ("which", "scenario"), [("8a", "8a-adapter-camera"), ("8b", "8b-adapter-state")]
)
def test_adapter_scenarios_against_rlmesh_adapters(which: str, scenario: str) -> None:
    pytest.importorskip("rlmesh")
    bench = _load_bench()
    from bench_targets import format_targets

    result = bench.scenario_adapter(which, rounds=1, calls=3, log=lambda _: None, warmup=False)
    assert result.scenario == scenario
    _check_side(result.ours)
    _check_side(result.theirs)
    assert result.ours.steps == result.theirs.steps == 3
    assert scenario in format_targets([result])


@pytest.mark.network
def test_abuse_probe_runs_one_attack_and_reports_it() -> None:
    """The probe's pieces end to end, briefly: a PING flood on our server, which cuts the
    attacker off (it reconnects), while the client keeps stepping."""
    _load_bench()
    import bench_abuse

    row = bench_abuse.probe_attack("ping-flood", "trio", 0.5, bench_abuse.ROOT / "src")
    assert row["client_failure"] is None
    assert row["unloaded_failure"] is None
    assert row["attacker_connections"] >= 2
    assert row["steps_during"] > 0
    assert row["rss_peak_mib"] >= row["rss_before_mib"] > 0
    text = bench_abuse.report([row], [])
    assert "ping-flood" in text
    assert "trio" in text


def test_the_adapted_run_scenario_runs_and_fills_the_table() -> None:
    pytest.importorskip("rlmesh")
    bench = _load_bench()
    result = bench.scenario_adapted_run(rounds=1, episodes=1, log=lambda _: None, warmup=False)
    assert result.scenario == "8c-adapted-run"
    _check_side(result.ours)
    _check_side(result.theirs)
    assert result.ours.mean_reward == result.theirs.mean_reward  # the same episodes
