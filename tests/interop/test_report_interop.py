"""RuntimeReport's totals are defined as rlmesh 0.1.0's RunResult defines them."""

from __future__ import annotations

from typing import Any

import pytest

from tests.runtime.test_report import CASES, _report
from trio_rlmesh.runtime import EpisodeRecord

pytestmark = pytest.mark.interop


def _theirs(episodes: tuple[EpisodeRecord, ...]) -> Any:
    rlmesh = pytest.importorskip("rlmesh")
    return rlmesh.RunResult(
        episodes=tuple(
            rlmesh.EpisodeResult(
                index=e.index + 1,
                seed=e.seed,
                steps=e.steps,
                reward=e.reward,
                terminated=e.terminated,
                truncated=e.truncated,
                success=e.success,
            )
            for e in episodes
        )
    )


@pytest.mark.parametrize(("episodes", "total_steps", "success_rate"), CASES)
def test_totals_agree_with_rlmesh_run_result(
    episodes: tuple[EpisodeRecord, ...], total_steps: int, success_rate: float | None
) -> None:
    ours, theirs = _report(*episodes, calls=len(episodes)), _theirs(episodes)
    assert (ours.total_steps, ours.success_rate, ours.mean_reward) == (
        theirs.total_steps,
        theirs.success_rate,
        theirs.mean_reward,
    )
    assert (theirs.total_steps, theirs.success_rate) == (total_steps, success_rate)
