"""The fleet's episode pool: numbering, seeds, quota and retries, tested synchronously."""

from __future__ import annotations

from typing import Any

import pytest

from trio_rlmesh.runtime._episodes import EpisodeBook
from trio_rlmesh.runtime._ids import deterministic_reset_seed
from trio_rlmesh.runtime._pool import EpisodePool

# (pool options, script of actions, expected results) — each action is
# ("claim", holder) -> (index, seed); ("complete", index) -> counted;
# ("release", holder) -> indices back; ("can_start",) -> bool; ("quota",) -> bool.
TABLE: list[tuple[str, dict[str, Any], list[tuple[Any, ...]], list[Any]]] = [
    (
        "explicit seeds go by index, whoever claims",
        {"max_episodes": 3, "episode_seeds": (7, 8, 9, 10)},
        [("claim", "a"), ("claim", "b"), ("claim", "a"), ("can_start",)],
        [(0, 7), (1, 8), (2, 9), False],
    ),
    (
        "past the seeds the env picks",
        {"max_episodes": 3, "episode_seeds": (7,)},
        [("claim", "a"), ("claim", "b"), ("claim", "a")],
        [(0, 7), (1, None), (2, None)],
    ),
    (
        "no seeds and no base seed: the env picks",
        {"max_episodes": 1},
        [("claim", "a")],
        [(0, None)],
    ),
    (
        "a lost holder's episodes come back first, lowest index first, same seeds",
        {"max_episodes": 4, "episode_seeds": (10, 11, 12, 13)},
        [
            ("claim", "a"),
            ("claim", "b"),
            ("claim", "b"),
            ("complete", 1),
            ("release", "b"),
            ("claim", "a"),
            ("claim", "c"),
            ("claim", "c"),
        ],
        [(0, 10), (1, 11), (2, 12), True, [2], (2, 12), (3, 13), (4, None)],
    ),
    (
        "a completed episode is never handed out again",
        {"max_episodes": 2},
        [("claim", "a"), ("complete", 0), ("release", "a"), ("can_start",), ("claim", "b")],
        [(0, None), True, [], True, (1, None)],
    ),
    (
        "exactly max_episodes are counted",
        {"max_episodes": 2},
        [
            ("claim", "a"),
            ("claim", "b"),
            ("claim", "c"),
            ("complete", 2),
            ("complete", 0),
            ("quota",),
            ("complete", 1),
        ],
        [(0, None), (1, None), (2, None), True, True, True, False],
    ),
    (
        "an episode past the quota is not given back",
        {"max_episodes": 1},
        [("claim", "a"), ("claim", "a"), ("release", "a")],
        [(0, None), (1, None), [0]],
    ),
    (
        "with no quota everything a lost holder ran is started again",
        {},
        [("claim", "a"), ("claim", "b"), ("release", "a"), ("can_start",), ("claim", "b")],
        [(0, None), (1, None), [0], True, (0, None)],
    ),
]


@pytest.mark.parametrize(
    ("options", "script", "expected"), [row[1:] for row in TABLE], ids=[row[0] for row in TABLE]
)
def test_pool_table(
    options: dict[str, Any], script: list[tuple[Any, ...]], expected: list[Any]
) -> None:
    pool = EpisodePool(**options)
    got: list[Any] = []
    for action, *args in script:
        if action == "claim":
            (claimed,) = pool.claim(args[0], [0])
            got.append(claimed)
        elif action == "complete":
            got.append(pool.complete(args[0]))
        elif action == "release":
            got.append(pool.release(args[0]))
        elif action == "can_start":
            got.append(pool.can_start())
        else:
            got.append(pool.quota_reached)
    assert got == expected


def test_a_base_seed_gives_episode_k_the_seed_of_a_one_lane_run() -> None:
    pool = EpisodePool(base_seed=5, session_id="s")
    alone = EpisodePool(base_seed=5, session_id="s", seeds_by_lane=True)
    single = EpisodeBook(num_envs=1, owns_resets=True, pool=alone)
    for k in range(4):
        (planned,) = single.begin_reset([0])
        single.reset_done([0], now=0.0)
        single.end_episode(0, terminated=True, truncated=False, final_info=None, now=0.0)
        assert pool.claim("x", [0]) == [(k, planned.seed)]
        assert planned.seed == deterministic_reset_seed(5, "s", k, 0)


def test_books_sharing_a_pool_number_their_episodes_across_the_fleet() -> None:
    pool = EpisodePool(max_episodes=3, episode_seeds=(40, 41, 42))
    a = EpisodeBook(num_envs=1, owns_resets=True, pool=pool, endpoint="a:1")
    b = EpisodeBook(num_envs=2, owns_resets=True, lockstep=False, pool=pool, endpoint="b:1")
    (first,) = a.begin_reset([0])
    (second,) = b.begin_reset([1])
    (third,) = b.begin_reset([0])
    assert [(p.index, p.seed, p.trial) for p in (first, second, third)] == [
        (0, 40, 0),
        (1, 41, 1),
        (2, 42, 2),
    ]
    assert not a.can_start()
    assert not b.can_start()
    for book, lanes in ((a, [0]), (b, [1, 0])):
        book.reset_done(lanes, now=0.0)
    _, done = b.end_episode(1, terminated=True, truncated=False, final_info=None, now=1.0)
    assert done is not None
    assert (done.record.index, done.record.seed, done.record.endpoint) == (1, 41, "b:1")
    # b is lost: its live episode (index 2) goes back; a takes it, same seed.
    assert b.give_back() == [2]
    a.end_episode(0, terminated=True, truncated=False, final_info=None, now=1.0)
    assert a.can_start()
    (again,) = a.begin_reset([0])
    assert (again.index, again.seed) == (2, 42)
    a.reset_done([0], now=1.0)
    _, last = a.end_episode(0, terminated=True, truncated=False, final_info=None, now=2.0)
    assert last is not None
    assert a.quota_reached
    assert b.quota_reached
    assert [r.index for r in a.completed] == [0, 2]


def test_a_lane_waits_only_for_episodes_another_endpoint_runs() -> None:
    """A run of one endpoint is a fleet of one: what its lanes hold never comes back to it."""
    pool = EpisodePool(max_episodes=3)
    a = EpisodeBook(num_envs=2, owns_resets=True, lockstep=False, pool=pool)
    b = EpisodeBook(num_envs=1, owns_resets=True, pool=pool)
    a.begin_reset([0])
    a.begin_reset([1])
    b.begin_reset([0])
    b.reset_done([0], now=0.0)
    b.end_episode(0, terminated=True, truncated=False, final_info=None, now=1.0)
    assert not pool.can_start()
    assert not pool.may_come_back(a)  # if a were lost, its waiting lane would be too
    assert pool.may_come_back(b)
    assert a.give_back() == [0, 1]
    assert not pool.may_come_back(b)
    assert a.endpoint is None


def test_a_reset_seeds_all_its_lanes_or_none() -> None:
    """A ResetRequest carries a seed per lane or none at all, so a reset whose episodes run
    past the explicit seeds is unseeded, and the seeds it leaves are counted as dropped."""
    pool = EpisodePool(episode_seeds=(7, 8, 9))
    assert pool.claim("vector", [0, 1]) == [(0, 7), (1, 8)]
    assert pool.claim("vector", [0, 1]) == [(2, None), (3, None)]
    assert pool.discarded_seeds == 1
    assert pool.claim("single", [0]) == [(4, None)]
    assert pool.discarded_seeds == 1


def test_an_episode_given_back_keeps_the_seed_it_first_had() -> None:
    pool = EpisodePool(max_episodes=3, base_seed=5, session_id="s")
    assert pool.claim("a", [0]) == [(0, deterministic_reset_seed(5, "s", 0, 0))]
    assert pool.roll("a") == 1  # the env started it: never seeded
    assert pool.release("a") == [0, 1]
    assert (pool.seed(0), pool.seed(1)) == (deterministic_reset_seed(5, "s", 0, 0), None)
    assert pool.claim("b", [0]) == [(0, deterministic_reset_seed(5, "s", 0, 0))]
    assert pool.claim("b", [0]) == [(1, None)]
    assert pool.claim("b", [0]) == [(2, deterministic_reset_seed(5, "s", 2, 0))]
