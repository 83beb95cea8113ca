from __future__ import annotations

import itertools
from typing import Any

import pytest

from trio_rlmesh.protocol import env_v1, python_to_meta
from trio_rlmesh.runtime._episodes import (
    EpisodeBook,
    EpisodeEnd,
    LaneState,
    LaneStateError,
)
from trio_rlmesh.runtime._pool import EpisodePool

POOL_OPTIONS = ("episode_seeds", "base_seed", "max_episodes")


def book(num_envs: int = 1, **kwargs: Any) -> EpisodeBook:
    """A book with a pool of its own, as one endpoint's run has (seeds by lane)."""
    counter = itertools.count(1)
    kwargs.setdefault("owns_resets", True)
    options = {name: kwargs.pop(name) for name in POOL_OPTIONS if name in kwargs}
    pool = EpisodePool(session_id="s", seeds_by_lane=True, **options)
    return EpisodeBook(num_envs=num_envs, pool=pool, mint=lambda: f"id-{next(counter)}", **kwargs)


def meta(
    lane: int, episode_id: str = "", *, truncated: bool = False, **info: Any
) -> env_v1.EpisodeMetadata:
    return env_v1.EpisodeMetadata(
        env_index=lane,
        episode_id=episode_id,
        terminated=not truncated,
        truncated=truncated,
        final_info=python_to_meta(info) if info else None,
    )


# What each EpisodeBook method does to a lane, per state, as docs/driver.md describes the
# machine: IDLE -> RESETTING -> ACTIVE -> IDLE (runtime-owned resets) or ROLLING -> ACTIVE
# (env-owned resets), and RETIRED from IDLE or ROLLING. Anything else must raise.
S = LaneState
DOCUMENTED = {
    True: {
        (S.IDLE, "begin_reset"): S.RESETTING,
        (S.IDLE, "retire"): S.RETIRED,
        (S.RESETTING, "reset_done"): S.ACTIVE,
        (S.ACTIVE, "record_step"): S.ACTIVE,
        (S.ACTIVE, "end_episode"): S.IDLE,
    },
    False: {
        (S.IDLE, "begin_reset"): S.RESETTING,
        (S.IDLE, "retire"): S.RETIRED,
        (S.RESETTING, "reset_done"): S.ACTIVE,
        (S.ACTIVE, "record_step"): S.ACTIVE,
        (S.ACTIVE, "end_episode"): S.ROLLING,
        (S.ROLLING, "record_step"): S.ACTIVE,
        (S.ROLLING, "retire"): S.RETIRED,
    },
}
OPERATIONS: dict[str, Any] = {
    "begin_reset": lambda b: b.begin_reset([0]),
    "reset_done": lambda b: b.reset_done([0], now=1.0),
    "record_step": lambda b: b.record_step([0], [1.0], now=1.0),
    "end_episode": lambda b: b.end_episode(
        0, terminated=True, truncated=False, final_info=None, now=1.0
    ),
    "retire": lambda b: b.retire(0),
}


def _book_in(state: LaneState, owns_resets: bool) -> EpisodeBook | None:
    """A one-lane book brought to ``state`` through its methods (None if it cannot get there)."""
    b = book(owns_resets=owns_resets)
    path = {
        S.IDLE: [],
        S.RETIRED: ["retire"],
        S.RESETTING: ["begin_reset"],
        S.ACTIVE: ["begin_reset", "reset_done"],
        S.ROLLING: ["begin_reset", "reset_done", "end_episode"],
    }[state]
    for name in path:
        OPERATIONS[name](b)
    return b if b.state(0) is state else None


@pytest.mark.parametrize("owns_resets", [True, False])
def test_each_method_moves_a_lane_as_documented_and_nothing_else_is_legal(
    owns_resets: bool,
) -> None:
    observed = {}
    for state in LaneState:
        for name, operation in OPERATIONS.items():
            b = _book_in(state, owns_resets)
            if b is None:
                continue
            before = (b.pool.next_index, b.slots[0].episode_id, b.slots[0].steps)
            try:
                operation(b)
            except LaneStateError:
                assert b.state(0) is state, (state, name)
                assert (b.pool.next_index, b.slots[0].episode_id, b.slots[0].steps) == before
            else:
                observed[(state, name)] = b.state(0)
    assert observed == DOCUMENTED[owns_resets]
    # Every state is reached (ROLLING only when the env owns its resets).
    assert {s for s, _ in observed} | set(observed.values()) == (
        set(LaneState) if not owns_resets else set(LaneState) - {S.ROLLING}
    )


def test_illegal_transitions_raise_and_change_nothing() -> None:
    b = book(2)
    with pytest.raises(LaneStateError, match="stepped is illegal while the lane is idle"):
        b.record_step([0, 1], [1.0, 1.0], now=0.0)
    assert b.state(0) is b.state(1) is LaneState.IDLE
    b.begin_reset([0])
    # Lane 0 is RESETTING: a reset over both lanes must not touch lane 1 either.
    before = (b.pool.next_index, b.slots[1].episode_id)
    with pytest.raises(LaneStateError):
        b.begin_reset([1, 0])
    assert (b.pool.next_index, b.slots[1].episode_id) == before
    assert b.state(1) is LaneState.IDLE
    with pytest.raises(LaneStateError, match="does not exist"):
        b.retire(5)


def test_episode_lifecycle_under_driver_owned_resets() -> None:
    b = book(max_episodes=2)
    (planned,) = b.begin_reset([0])
    assert (planned.episode_id, planned.index, planned.seed, planned.trial) == ("id-1", 0, None, 0)
    assert b.state(0) is LaneState.RESETTING
    b.reset_done([0], now=10.0)
    assert b.record_step([0], [1.5], now=11.0) == []
    b.record_step([0], [], now=12.0)  # a missing reward counts as 0
    ended, completion = b.end_episode(
        0, terminated=True, truncated=False, final_info=None, now=13.0
    )
    assert ended == "id-1"
    assert completion is not None
    record = completion.record
    assert (record.steps, record.reward, record.duration_s, record.terminated) == (
        2,
        1.5,
        3.0,
        True,
    )
    assert b.state(0) is LaneState.IDLE
    assert not b.quota_reached
    assert b.can_start()


def test_success_is_read_from_final_info() -> None:
    b = book()
    for info, expected in [
        ({"is_success": False, "success": True}, False),
        ({"success": 1}, True),
        ({"success": 0.0}, False),
        ({"is_success": "yes"}, None),
        (None, None),
    ]:
        b.begin_reset([0])
        b.reset_done([0], 0.0)
        _, completion = b.end_episode(0, terminated=True, truncated=False, final_info=info, now=1)
        assert completion is not None
        assert completion.record.success is expected


def test_explicit_seeds_in_start_order_and_tail_discard() -> None:
    b = book(2, owns_resets=False, episode_seeds=[7, 8, 9])
    assert [p.seed for p in b.begin_reset([0, 1])] == [7, 8]
    b.reset_done([0, 1], 0.0)
    for lane in (0, 1):
        b.end_episode(lane, terminated=True, truncated=False, final_info=None, now=1)
    # Rolled episodes (env-owned resets) are never seeded by the runtime.
    rolled = b.record_step([0, 1], [0.0, 0.0], now=2.0)
    assert [new.seed for new, _ in rolled] == [None, None]
    assert [old for _, old in rolled] == ["id-1", "id-2"]
    b2 = book(2, lockstep=False, episode_seeds=[7, 8, 9])
    assert [p.seed for p in b2.begin_reset([0, 1])] == [7, 8]
    b2.reset_done([0, 1], 0.0)
    b2.end_episode(0, terminated=True, truncated=False, final_info=None, now=1)
    b2.end_episode(1, terminated=True, truncated=False, final_info=None, now=1)
    # One seed left cannot cover a two-lane batch: it is dropped.
    assert [p.seed for p in b2.begin_reset([0, 1])] == [None, None]
    assert b2.pool.discarded_seeds == 1


def test_base_seed_generations_lockstep_vs_per_lane() -> None:
    from trio_rlmesh.runtime._ids import deterministic_reset_seed as law

    lockstep = book(base_seed=1234)
    assert lockstep.begin_reset([0])[0].seed == law(1234, "s", 0, 0)
    lockstep.reset_done([0], 0)
    lockstep.end_episode(0, terminated=True, truncated=False, final_info=None, now=1)
    assert lockstep.begin_reset([0])[0].seed == law(1234, "s", 1, 0)

    lanes = book(2, lockstep=False, base_seed=5)
    assert lanes.begin_reset([1])[0].seed == law(5, "s", 0, 1)
    assert lanes.begin_reset([0])[0].seed == law(5, "s", 0, 0)


def test_next_step_roll_keeps_old_id_until_the_roll() -> None:
    b = book(2, owns_resets=False)
    b.begin_reset([0, 1])
    b.reset_done([0, 1], 0.0)
    b.record_step([0, 1], [1.0, 1.0], 1.0)
    _, completion = b.end_episode(0, terminated=True, truncated=False, final_info=None, now=1)
    assert completion is not None
    assert b.state(0) is LaneState.ROLLING
    next_id = b.slots[0].next_id
    assert b.episode_info([0, 1]) == [("id-1", None), ("id-2", None)]
    assert b.step_ids([0, 1]) == [next_id, "id-2"]
    rolled = b.record_step([0, 1], [0.0, 2.0], 2.0)
    assert [(new.episode_id, new.index, old) for new, old in rolled] == [(next_id, 2, "id-1")]
    assert b.slots[0].reward == 0.0
    assert b.slots[1].reward == 3.0
    assert b.state(0) is LaneState.ACTIVE


def test_stale_completions_are_detected() -> None:
    b = book(2, owns_resets=False)
    b.begin_reset([0, 1])
    b.reset_done([0, 1], 0.0)
    assert b.is_current(0, "id-1", [0, 1])
    assert b.is_current(1, "", [0, 1])
    assert not b.is_current(0, "id-2", [0, 1])
    assert not b.is_current(7, "id-1", [0, 1])
    assert not b.is_current(1, "id-2", [0])
    # A query: asking changes nothing; the book counts what it drops in apply_completions.
    assert b.stale_completions == 0
    stale = [meta(0, "id-2"), meta(7, "id-1"), meta(1, "id-2")]
    assert b.apply_completions([0], stale, now=1.0) == []
    assert b.stale_completions == 3
    assert b.state(0) is b.state(1) is LaneState.ACTIVE


def test_quota_is_exact() -> None:
    b = book(3, owns_resets=False, max_episodes=2)
    b.begin_reset([0, 1, 2])
    b.reset_done([0, 1, 2], 0.0)
    results = [
        b.end_episode(lane, terminated=True, truncated=False, final_info=None, now=1)[1]
        for lane in (0, 1, 2)
    ]
    assert [r is not None for r in results] == [True, True, False]
    assert len(b.completed) == 2
    assert b.over_quota == 1
    assert b.quota_reached


def test_caps_by_steps_and_time() -> None:
    b = book(2, owns_resets=True, step_cap=2, seconds_cap=5.0, lockstep=False)
    b.begin_reset([0])
    b.begin_reset([1])
    b.reset_done([0], 0.0)
    b.reset_done([1], 0.0)
    b.record_step([0], [1.0], 1.0)
    assert b.capped_lanes([0, 1], 1.0, set()) == []
    b.record_step([0], [1.0], 2.0)
    assert b.capped_lanes([0, 1], 2.0, set()) == [0]
    assert b.capped_lanes([0, 1], 2.0, {0}) == []
    assert b.capped_lanes([0, 1], 5.0, {0}) == [1]


def test_retire_only_from_idle_or_rolling() -> None:
    b = book(1, max_episodes=1)
    b.begin_reset([0])
    assert not b.can_start()
    with pytest.raises(LaneStateError):
        b.retire(0)
    b.reset_done([0], 0)
    b.end_episode(0, terminated=True, truncated=False, final_info=None, now=1)
    b.retire(0)
    assert b.state(0) is LaneState.RETIRED


def ends(result: list[EpisodeEnd]) -> list[tuple[int, str, bool | None]]:
    """(lane, ended id, terminated; None when not counted) per ended episode."""
    return [
        (e.lane, e.episode_id, e.completion.record.terminated if e.completion else None)
        for e in result
    ]


# Two live lanes (ids id-1, id-2) of one lockstep group; a step answer reports `completed`.
COMPLETIONS: list[tuple[str, list[env_v1.EpisodeMetadata], list[Any], int]] = [
    ("none", [], [], 0),
    ("by id", [meta(1, "id-2")], [(1, "id-2", True)], 0),
    ("empty id means the live one", [meta(0)], [(0, "id-1", True)], 0),
    ("in answer order", [meta(1), meta(0)], [(1, "id-2", True), (0, "id-1", True)], 0),
    ("an id the lane does not hold", [meta(0, "id-9")], [], 1),
    ("a lane outside the group", [meta(5, "id-1")], [], 1),
    ("a second report for one lane", [meta(0), meta(0, "id-1")], [(0, "id-1", True)], 1),
    ("truncated", [meta(0, truncated=True)], [(0, "id-1", False)], 0),
]


@pytest.mark.parametrize(
    ("completed", "expected", "stale"),
    [c[1:] for c in COMPLETIONS],
    ids=[c[0] for c in COMPLETIONS],
)
def test_apply_completions_accepts_only_live_episodes(
    completed: list[env_v1.EpisodeMetadata], expected: list[Any], stale: int
) -> None:
    b = book(2, owns_resets=False)
    b.begin_reset([0, 1])
    b.reset_done([0, 1], 0.0)
    assert ends(b.apply_completions([0, 1], completed, now=1.0)) == expected
    assert b.stale_completions == stale
    ended = {lane for lane, _, _ in expected}
    for lane in (0, 1):
        assert b.state(lane) is (LaneState.ROLLING if lane in ended else LaneState.ACTIVE)


def test_apply_completions_reads_final_info_then_caps_in_group_order() -> None:
    b = book(3, owns_resets=True, lockstep=False, step_cap=1)
    for lane in (0, 1, 2):
        b.begin_reset([lane])
        b.reset_done([lane], 0.0)
        b.record_step([lane], [1.0], 1.0)
    result = b.apply_completions([2, 1, 0], [meta(1, is_success=True)], now=1.0)
    assert ends(result) == [(1, "id-2", True), (2, "id-3", False), (0, "id-1", False)]
    first = result[0].completion
    assert first is not None
    assert (first.final_info, first.record.success) == ({"is_success": True}, True)
    assert [e.completion.final_info for e in result[1:] if e.completion] == [None, None]
    assert all(b.state(lane) is LaneState.IDLE for lane in (0, 1, 2))


def test_apply_completions_over_quota_ends_without_counting() -> None:
    b = book(2, owns_resets=False, max_episodes=1)
    b.begin_reset([0, 1])
    b.reset_done([0, 1], 0.0)
    assert ends(b.apply_completions([0, 1], [meta(0), meta(1)], now=1.0)) == [
        (0, "id-1", True),
        (1, "id-2", None),
    ]
    assert (len(b.completed), b.over_quota, b.stale_completions) == (1, 1, 0)


# (lockstep, num_envs, group lanes, rewards, answer's env_indices) -> the group's rewards
REWARDS: list[tuple[bool, int, list[int], list[float], list[int], list[float]]] = [
    (True, 3, [0, 1, 2], [1.0, 2.0, 3.0], [], [1.0, 2.0, 3.0]),  # a lockstep answer as is
    (False, 3, [1], [1.0, 2.0, 3.0], [0, 1, 2], [2.0]),  # aligned with the lanes it names
    (False, 3, [1], [5.0], [1], [5.0]),
    (False, 3, [2], [5.0], [1], []),  # an answer for another lane: nothing for this one
    (False, 3, [2], [1.0, 2.0, 3.0], [], [3.0]),  # full width, no indices: by lane
    (False, 3, [2], [4.0], [], [4.0]),  # anything else is the lane's own
    (False, 1, [0], [4.0, 9.0], [], [4.0]),
]


@pytest.mark.parametrize(("lockstep", "num_envs", "lanes", "rewards", "indices", "out"), REWARDS)
def test_step_rewards_slices_the_answer_for_the_group(
    lockstep: bool,
    num_envs: int,
    lanes: list[int],
    rewards: list[float],
    indices: list[int],
    out: list[float],
) -> None:
    b = book(num_envs, lockstep=lockstep)
    assert list(b.step_rewards(lanes, rewards, indices)) == out


def test_a_lane_that_ends_mid_batch_leaves_the_all_active_step() -> None:
    # Ids, rows and "every lane is active" are kept between lane transitions; one lane
    # of a batch ending must show in each at once, and its next step take the checked path.
    b = book(3)  # runtime-owned resets: the ended lane goes IDLE
    b.begin_reset([0, 1, 2])
    b.reset_done([0, 1, 2], 0.0)
    b.record_step((0, 1, 2), [1.0] * 3, 1.0)
    ids = b.step_ids((0, 1, 2))
    assert ids == ["id-1", "id-2", "id-3"]
    ids.append("mine")  # the caller's copy
    assert b.step_ids((0, 1, 2)) == ["id-1", "id-2", "id-3"]
    b.end_episode(1, terminated=True, truncated=False, final_info=None, now=1)
    before = [(s.steps, s.env_steps, s.reward) for s in b.slots]
    with pytest.raises(LaneStateError, match="lane 1: stepped is illegal while the lane is idle"):
        b.record_step((0, 1, 2), [1.0] * 3, 2.0)
    assert [(s.steps, s.env_steps, s.reward) for s in b.slots] == before
    b.begin_reset([1])
    b.reset_done([1], 2.0)
    assert b.step_ids((0, 1, 2)) == ["id-1", "id-4", "id-3"]
    assert b.episode_info((0, 1, 2)) == [("id-1", None), ("id-4", None), ("id-3", None)]
    b.record_step((0, 1, 2), [1.0] * 3, 3.0)
    assert [(s.steps, s.env_steps) for s in b.slots] == [(2, 2), (1, 2), (2, 2)]


def test_a_lane_that_ends_mid_batch_rolls_on_the_next_step() -> None:
    b = book(3, owns_resets=False)
    b.begin_reset([0, 1, 2])
    b.reset_done([0, 1, 2], 0.0)
    b.record_step((0, 1, 2), [1.0] * 3, 1.0)
    assert b.step_ids((0, 1, 2)) == ["id-1", "id-2", "id-3"]
    b.end_episode(2, terminated=True, truncated=False, final_info=None, now=1)
    next_id = b.slots[2].next_id
    assert b.step_ids((0, 1, 2)) == ["id-1", "id-2", next_id]
    rolled = b.record_step((0, 1, 2), [1.0] * 3, 2.0)
    assert [(new.env_index, new.episode_id, old) for new, old in rolled] == [(2, next_id, "id-3")]
    assert b.step_ids((0, 1, 2)) == ["id-1", "id-2", next_id]
    assert [(s.steps, s.reward) for s in b.slots] == [(2, 2.0), (2, 2.0), (0, 0.0)]
