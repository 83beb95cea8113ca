"""The benchmark's scenarios still run: tiny sizes, no network unless rlmesh is installed."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType

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


def test_inprocess_scenario_runs_and_fills_the_table() -> None:
    bench = _load_bench()
    result = bench.scenario_inprocess(rounds=1, episodes=1, log=lambda _: None, warmup=False)
    _check_side(result.ours)
    _check_side(result.theirs)
    assert result.ours.latency_source == "telemetry runner.round"
    # The same env, policy and seed on both sides: the same episode.
    assert result.ours.steps == result.theirs.steps
    assert result.ours.mean_reward == result.theirs.mean_reward
    assert math.isfinite(result.ratio)
    assert result.ratio > 0
    table = bench.format_table([result])
    assert "4-inproc" in table
    assert "ours/theirs" in table


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
