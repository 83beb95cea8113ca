"""ActionSource: replay, prefetch offsets, history rows, the seen flag and invalidation.

Synchronous and table-driven, like the EpisodeBook tests: the plan does no I/O, so
every rule is checked by feeding it events and reading what it decides.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from trio_rlmesh.protocol import model_v1, spaces_v1
from trio_rlmesh.runtime._episodes import EpisodeBook
from trio_rlmesh.runtime._plans import ActionSource
from trio_rlmesh.runtime._pool import EpisodePool


def value(name: str) -> spaces_v1.SpaceValue:
    return spaces_v1.SpaceValue(leaves=[name.encode()])


def frames(*names: str) -> list[spaces_v1.SpaceValue]:
    return [value(n) for n in names]


def name(frame: spaces_v1.SpaceValue | None) -> str | None:
    return None if frame is None else frame.leaves[0].decode()


def ctx(n: int = 1) -> model_v1.AdapterContext:
    return model_v1.AdapterContext(session_id="s", env_id="e", request_id=f"r{n}")


def started(num_envs: int = 1, **plan_kw: Any) -> tuple[EpisodeBook, ActionSource[str]]:
    counter = itertools.count(1)
    book = EpisodeBook(
        num_envs=num_envs,
        owns_resets=num_envs == 1,
        pool=EpisodePool(episode_seeds=[7] * num_envs, seeds_by_lane=True),
        mint=lambda: f"id-{next(counter)}",
    )
    book.begin_reset(list(range(num_envs)))
    book.reset_done(list(range(num_envs)), now=0.0)
    plan: ActionSource[str] = ActionSource(book, tuple(range(num_envs)), **plan_kw)
    assert plan.reset(value("o0")) is None
    return book, plan


def step(book: EpisodeBook, plan: ActionSource[str], observation: str) -> None:
    """What the driver does after every env step that ended no episode."""
    book.record_step(plan.lanes, [1.0] * len(plan.lanes), now=0.0)
    plan.observe(value(observation))


def test_a_chunk_is_applied_then_replayed_in_order() -> None:
    book, plan = started()
    assert plan.replay() is None
    request = plan.request(ctx())
    assert name(request.observation) == "o0"
    assert name(plan.take_predicted(frames("a", "b", "c"))) == "a"
    replayed = []
    for obs in ("o1", "o2"):
        step(book, plan, obs)
        replayed.append(name(plan.replay()))
    step(book, plan, "o3")
    assert (replayed, plan.replay()) == (["b", "c"], None)
    assert plan.phase == "step_observation"


def test_a_predict_carries_the_current_observation_and_every_lane() -> None:
    _, plan = started(2)
    request = plan.request(ctx())
    assert request.observation is plan.observation  # passed through, not copied
    assert [(i.episode_id, i.seed) for i in request.episode_info] == [("id-1", 7), ("id-2", 7)]
    assert (request.step, list(request.history)) == (None, [])
    assert plan.seen
    assert plan.phase == "reset_observation"


@pytest.mark.parametrize(
    ("lanes", "discard_events", "discarded_frames"),
    [
        (1, 0, 0),  # a lane replays on its own: an end drops only its own frames, silently
        (2, 1, 2),  # frames are whole-batch: every lane loses them, and that is counted
    ],
)
def test_an_episode_end_drops_the_queue(
    lanes: int, discard_events: int, discarded_frames: int
) -> None:
    _, plan = started(lanes)
    plan.request(ctx())
    plan.take_predicted(frames("a", "b", "c"))
    assert plan.end_episode() is None
    assert (len(plan.queue), plan.seen, plan.replay()) == (0, False, None)
    assert (plan.discard_events, plan.discarded_frames) == (discard_events, discarded_frames)
    # Nothing left to drop: nothing more is counted.
    plan.end_episode()
    assert (plan.discard_events, plan.discarded_frames) == (discard_events, discarded_frames)


# (lead, queued frames, already seen, prefetch pending) -> due
PREFETCH_DUE = [
    (0, 1, False, False, False),  # prefetch off
    (1, 0, False, False, False),  # nothing queued: a plain predict, not a prefetch
    (1, 1, False, False, True),
    (1, 2, False, False, False),  # more frames queued than the lead
    (2, 2, False, False, True),
    (2, 1, True, False, False),  # a predict already carried this observation
    (2, 1, False, True, False),  # one prefetch at a time
]


@pytest.mark.parametrize(("lead", "queued", "seen", "pending", "due"), PREFETCH_DUE)
def test_when_a_prefetch_is_due(
    lead: int, queued: int, seen: bool, pending: bool, due: bool
) -> None:
    _, plan = started(lead=lead)
    plan.queue.extend(frames(*"xyz"[:queued]))
    plan.seen = seen
    if pending:
        plan._prefetch = ("handle", 1)
    assert plan.prefetch_due() is due


def test_prefetch_offset_skips_the_frames_already_queued() -> None:
    # Chunk of 3, lead 2: at o1 two frames are queued, so the prefetch (planned from o1)
    # has its first two frames for steps those cover and its third for the step after.
    book, plan = started(lead=2)
    plan.request(ctx(1))
    assert name(plan.take_predicted(frames("a0", "a1", "a2"))) == "a0"
    step(book, plan, "o1")
    assert plan.prefetch_due()
    request = plan.launch_prefetch(ctx(2), "handle")
    assert name(request.observation) == "o1"
    assert plan.prefetching
    assert not plan.prefetch_due()
    assert name(plan.replay()) == "a1"
    step(book, plan, "o2")
    assert not plan.prefetch_due()  # pending already
    assert name(plan.replay()) == "a2"
    step(book, plan, "o3")
    assert plan.replay() is None
    assert plan.take_prefetch() == ("handle", 2)
    assert not plan.prefetching
    frame = plan.take_prefetched(frames("b0", "b1", "b2", "b3"), 2)
    assert (name(frame), [name(f) for f in plan.queue]) == ("b2", ["b3"])


def test_a_short_prefetch_is_counted_and_predicted_again() -> None:
    book, plan = started(lead=2)
    plan.request(ctx(1))
    plan.take_predicted(frames("a0", "a1", "a2"))
    step(book, plan, "o1")
    plan.launch_prefetch(ctx(2), "handle")
    plan.replay()
    step(book, plan, "o2")
    plan.replay()
    step(book, plan, "o3")
    _, offset = plan.take_prefetch() or ("", 0)
    assert plan.take_prefetched(frames("b0", "b1"), offset) is None
    assert plan.short_prefetches == 1
    assert not plan.seen  # o3 still needs a predict
    assert name(plan.request(ctx(3)).observation) == "o3"


def test_an_episode_end_hands_back_the_prefetch_to_cancel() -> None:
    book, plan = started(lead=1)
    plan.request(ctx(1))
    plan.take_predicted(frames("a0", "a1"))
    step(book, plan, "o1")
    plan.launch_prefetch(ctx(2), "handle")
    assert plan.end_episode() == "handle"
    assert not plan.prefetching
    assert plan.reset(value("o0")) is None


def test_history_rows_for_replayed_steps_then_the_predict_step() -> None:
    # Horizon 3: predicts at env steps 0, 3 and 6, rows 1, 2 then 4, 5.
    book, plan = started(wants_history=True)
    carried = []
    for env_step in range(7):
        if env_step:
            step(book, plan, f"o{env_step}")
        if plan.replay() is None:
            request = plan.request(ctx(env_step))
            carried.append((request.step, [(name(h.observation), h.step) for h in request.history]))
            plan.take_predicted(frames("a", "b", "c"))
    assert carried == [
        (0, []),
        (3, [("o1", 1), ("o2", 2)]),
        (6, [("o4", 4), ("o5", 5)]),
    ]
    row_episode = book.episode_info([0])[0]
    assert row_episode == ("id-1", 7)


def test_history_rows_of_an_ended_episode_are_dropped() -> None:
    book, plan = started(wants_history=True)
    plan.request(ctx())
    plan.take_predicted(frames("a", "b", "c"))
    step(book, plan, "o1")
    plan.replay()
    assert len(plan.history) == 1
    plan.end_episode()
    assert plan.history == []


def test_a_prefetched_chunk_makes_the_current_observation_a_row() -> None:
    book, plan = started(wants_history=True, lead=1)
    plan.request(ctx(1))
    plan.take_predicted(frames("a0", "a1"))
    step(book, plan, "o1")
    plan.launch_prefetch(ctx(2), "h")  # carries o1: no row for it
    assert name(plan.replay()) == "a1"
    assert plan.history == []
    step(book, plan, "o2")
    plan.take_prefetch()
    plan.take_prefetched(frames("b0", "b1", "b2"), 1)  # o2 was carried by no predict
    assert [(name(h.observation), h.step) for h in plan.history] == [("o2", 2)]


def test_a_multi_lane_group_gets_steps_but_no_rows() -> None:
    book, plan = started(2, wants_history=True)
    assert (plan.history_enabled, plan.history_refused) == (False, True)
    plan.request(ctx())
    plan.take_predicted(frames("a", "b"))
    step(book, plan, "o1")
    plan.replay()
    step(book, plan, "o2")
    request = plan.request(ctx(2))
    assert (request.step, list(request.history)) == (2, [])
    _, single = started(1)
    assert (single.history_enabled, single.history_refused) == (False, False)


def test_a_transform_replaces_only_an_unseen_observation() -> None:
    _, plan = started()
    plan.replace_observation(value("t0"))
    assert name(plan.request(ctx()).observation) == "t0"
    with pytest.raises(RuntimeError, match="already carried"):
        plan.replace_observation(value("late"))
    assert name(plan.observation) == "t0"


def test_illegal_calls_raise_and_change_nothing() -> None:
    _, plan = started(lead=1)
    with pytest.raises(RuntimeError, match="no prefetch is due"):
        plan.launch_prefetch(ctx(), "h")
    assert not plan.prefetching
    with pytest.raises(ValueError, match="at least one frame"):
        plan.take_predicted([])
    assert not plan.queue
    plan.request(ctx())
    plan.take_predicted(frames("a", "b"))
    with pytest.raises(RuntimeError, match="replay them first"):
        plan.take_prefetch()
    assert [name(f) for f in plan.queue] == ["b"]


def test_predict_rows_are_reused_until_a_lane_moves() -> None:
    book, plan = started(2)  # env-owned resets: an ended lane rolls on the next step
    first = plan.request(ctx(1))
    step(book, plan, "o1")
    second = plan.request(ctx(2))
    assert [i.episode_id for i in second.episode_info] == ["id-1", "id-2"]
    assert second.episode_info is not first.episode_info  # each request owns its list
    assert all(a is b for a, b in zip(first.episode_info, second.episode_info, strict=True))
    book.end_episode(1, terminated=True, truncated=False, final_info=None, now=1.0)
    # The terminal observation's predict still names the ended episode ...
    assert [i.episode_id for i in plan.request(ctx(3)).episode_info] == ["id-1", "id-2"]
    step(book, plan, "o2")  # ... and the roll starts the next one.
    rows = plan.request(ctx(4)).episode_info
    assert [(i.episode_id, i.seed) for i in rows] == [("id-1", 7), ("id-3", None)]
