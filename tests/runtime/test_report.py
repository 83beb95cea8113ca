"""RuntimeReport: totals that mean what RLMesh's RunResult's mean, and its one-line str."""

from __future__ import annotations

import pytest

from trio_rlmesh.runtime import EpisodeRecord, RuntimeReport


def _episode(index: int, steps: int, success: bool | None, reward: float = 1.0) -> EpisodeRecord:
    return EpisodeRecord(
        index=index,
        env_index=index % 4,
        episode_id=f"e{index}",
        seed=None,
        trial=index,
        steps=steps,
        reward=reward,
        terminated=True,
        truncated=False,
        success=success,
        duration_s=0.0,
        predict_ms=0.0,
        step_ms=0.0,
    )


def _report(*episodes: EpisodeRecord, calls: int = 0, status: str = "completed") -> RuntimeReport:
    return RuntimeReport(status, None, "s", "env", episodes, env_step_calls=calls)  # type: ignore[arg-type]


CASES = [
    # (episodes, total_steps, success_rate), the values RLMesh's RunResult gives
    # (tests/interop/test_report_interop.py checks them against rlmesh itself).
    pytest.param((), 0, None, id="empty"),
    pytest.param((_episode(0, 5, None), _episode(1, 7, None)), 12, None, id="success unknown"),
    pytest.param(
        (_episode(0, 5, True), _episode(1, 7, False), _episode(2, 2, True)), 14, 2 / 3, id="known"
    ),
    pytest.param((_episode(0, 5, True), _episode(1, 7, None)), 12, None, id="one unknown"),
    pytest.param((_episode(0, 3, False),), 3, 0.0, id="all failed"),
]


@pytest.mark.parametrize(("episodes", "total_steps", "success_rate"), CASES)
def test_totals_are_rlmesh_run_results(
    episodes: tuple[EpisodeRecord, ...], total_steps: int, success_rate: float | None
) -> None:
    report = _report(*episodes, calls=99)
    assert (report.total_steps, report.success_rate) == (total_steps, success_rate)
    assert report.env_step_calls == 99  # the call count stays under its own name
    data = report.to_json_dict()
    assert (data["total_steps"], data["env_step_calls"], data["success_rate"]) == (
        total_steps,
        99,
        success_rate,
    )


def test_a_vector_run_counts_lane_steps_not_calls() -> None:
    # Four lanes stepping together: 4 calls made 16 lane steps of counted episodes.
    report = _report(*(_episode(i, 4, None) for i in range(4)), calls=4)
    assert (report.total_steps, report.env_step_calls) == (16, 4)


def test_str_is_one_line() -> None:
    one = _report(_episode(0, 20, True, reward=20.0), calls=20)
    assert str(one) == "completed: 1 episode, 20 steps, mean reward 20.000, success rate 100.0%"
    many = RuntimeReport(
        "cancelled",
        "interrupted by SIGINT",
        "s",
        "env",
        (_episode(0, 3, None), _episode(1, 5, None)),
        env_step_calls=9,
    )
    assert str(many) == "cancelled: 2 episodes, 8 steps, mean reward 1.000 (interrupted by SIGINT)"
    assert "\n" not in str(many)
    assert str(_report()) == "completed: 0 episodes, 0 steps, mean reward 0.000"
