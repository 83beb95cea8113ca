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
            got.append(pool.claim(args[0]))
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
    single = EpisodeBook(num_envs=1, session_id="s", owns_resets=True, base_seed=5)
    for k in range(4):
        (planned,) = single.begin_reset([0])
        single.reset_done([0], now=0.0)
        single.end_episode(0, terminated=True, truncated=False, final_info=None, now=0.0)
        assert pool.claim("x") == (k, planned.seed)
        assert planned.seed == deterministic_reset_seed(5, "s", k, 0)


def test_books_sharing_a_pool_number_their_episodes_across_the_fleet() -> None:
    pool = EpisodePool(max_episodes=3, episode_seeds=(40, 41, 42))
    a = EpisodeBook(num_envs=1, session_id="s", owns_resets=True, pool=pool, endpoint="a:1")
    b = EpisodeBook(num_envs=2, session_id="s", owns_resets=True, lockstep=False, pool=pool,
                    endpoint="b:1")  # fmt: skip
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


def test_a_book_outside_a_fleet_gives_nothing_back() -> None:
    book = EpisodeBook(num_envs=1, session_id="s", owns_resets=True)
    book.begin_reset([0])
    assert book.give_back() == []
    assert book.endpoint is None
