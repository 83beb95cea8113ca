"""The driver's call machinery on its own: bounded calls, the fused-predict batcher, advisories."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
import trio
from trio.testing import MockClock

from trio_rlmesh import EnvError, ModelError, OperationTimeout
from trio_rlmesh.protocol import model_v1
from trio_rlmesh.runtime import ModelPrediction
from trio_rlmesh.runtime._advisories import FailureLog, advisories
from trio_rlmesh.runtime._calls import Call, Outcome, PredictBatcher
from trio_rlmesh.runtime._episodes import EpisodeBook
from trio_rlmesh.runtime._plans import ActionSource
from trio_rlmesh.runtime._pool import EpisodePool


def call(method: Any, inline: Any = None, *, enforced: bool = False) -> Any:
    return Call(
        "env.step",
        "env_step_timeout",
        1.0,
        method,
        inline,
        error_class=EnvError,
        route="route-1",
        enforced=enforced,
    )


async def test_a_call_is_cut_off_exactly_at_its_limit(autojump_clock: MockClock) -> None:
    async def hang(request: str) -> str:
        await trio.sleep_forever()
        raise AssertionError  # pragma: no cover

    start = trio.current_time()
    with pytest.raises(OperationTimeout) as info:
        await call(hang)("req", 3, 7, start)
    assert trio.current_time() - start == 1.0
    assert (info.value.operation, info.value.lane, info.value.step) == ("env.step", 3, 7)
    assert "env.step timed out after 1s on route route-1 on lane 3 at runtime step 7" in str(
        info.value
    )


async def test_an_endpoint_that_enforces_its_deadline_is_left_to_it(
    autojump_clock: MockClock,
) -> None:
    async def slow(request: str) -> str:
        await trio.sleep(3.0)
        return request.upper()

    # No second timer over the endpoint's own: not a scope, nor a late-answer check.
    start = trio.current_time()
    assert await call(slow, enforced=True)("ok", None, 1, start) == "OK"
    assert trio.current_time() - start == 3.0


async def test_a_call_records_when_it_finished(autojump_clock: MockClock) -> None:
    async def slow(request: str) -> str:
        await trio.sleep(0.5)
        return request.upper()

    bound = call(slow)
    assert await bound("ok", None, 1, trio.current_time()) == "OK"
    assert bound.finished == trio.current_time() == 0.5


async def test_a_call_announced_inline_has_no_scope_but_a_late_answer_is_a_timeout(
    autojump_clock: MockClock,
) -> None:
    inline = [True]

    async def blocks(request: str) -> str:
        autojump_clock.jump(float(request))  # blocks the loop this long, never yielding
        return "answer"

    bound = call(blocks, lambda: inline[0])
    assert await bound("1.0", None, 1, trio.current_time()) == "answer"  # exactly at the bound
    with pytest.raises(OperationTimeout, match=r"env\.step timed out after 1s"):
        await bound("1.5", None, 1, trio.current_time())

    async def sleeps(request: str) -> str:
        await trio.sleep(1.5)
        return "answer"

    # No scope for a call announced inline: one that yields after all runs to its end...
    start = trio.current_time()
    with pytest.raises(OperationTimeout):
        await call(sleeps, lambda: inline[0])("r", None, 1, start)
    assert trio.current_time() - start == 1.5
    # ...while any other call is cut off at its limit.
    inline[0] = False
    start = trio.current_time()
    with pytest.raises(OperationTimeout):
        await call(sleeps, lambda: inline[0])("r", None, 1, start)
    assert trio.current_time() - start == 1.0


async def test_errors_keep_their_class_and_foreign_ones_are_wrapped(
    autojump_clock: MockClock,
) -> None:
    async def own(request: str) -> str:
        raise EnvError("refused", code="INVALID_ACTION", lane=9)

    async def foreign(request: str) -> str:
        raise KeyError(request)

    with pytest.raises(EnvError) as info:
        await call(own)("r", 1, 5, trio.current_time())
    assert (info.value.code, info.value.lane, info.value.step) == ("INVALID_ACTION", 9, 5)
    with pytest.raises(EnvError, match=r"env\.step failed at runtime step 5: KeyError") as wrapped:
        await call(foreign)("r", 1, 5, trio.current_time())
    assert isinstance(wrapped.value.__cause__, KeyError)


def request(n: int) -> model_v1.PredictRequest:
    return model_v1.PredictRequest(context=model_v1.AdapterContext(request_id=f"r{n}"))


async def test_the_batcher_fuses_waiting_predicts_into_one_call(autojump_clock: MockClock) -> None:
    calls: list[list[str]] = []

    async def fused(
        requests: Sequence[model_v1.PredictRequest], keys: Sequence[str]
    ) -> list[Outcome]:
        calls.append(list(keys))
        await trio.sleep(1)
        return [
            ModelError(f"no answer for {key}")
            if key == "lane-1"
            else ModelPrediction(model_v1.PredictResponse(context=r.context))
            for r, key in zip(requests, keys, strict=True)
        ]

    batcher: PredictBatcher[str] = PredictBatcher(fused)
    results: dict[str, Any] = {}

    async def lane(k: int) -> None:
        try:
            prediction = await batcher.submit(request(k), f"lane-{k}")
            assert prediction.response.context is not None
            results[f"lane-{k}"] = prediction.response.context.request_id
        except ModelError as exc:
            results[f"lane-{k}"] = str(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(batcher.serve)
        for k in range(3):
            nursery.start_soon(lane, k)
        await trio.sleep(2)
        nursery.start_soon(lane, 3)
        await trio.sleep(2)
        nursery.cancel_scope.cancel()
    # Lanes start in any order; the three that waited together went in one call.
    assert [sorted(keys) for keys in calls] == [["lane-0", "lane-1", "lane-2"], ["lane-3"]]
    assert results == {
        "lane-0": "r0",
        "lane-1": "no answer for lane-1",
        "lane-2": "r2",
        "lane-3": "r3",
    }


def test_advisories_come_from_the_counters_of_the_book_plans_and_failures() -> None:
    book = EpisodeBook(num_envs=2, owns_resets=False, pool=EpisodePool(max_episodes=3))
    plan: ActionSource[str] = ActionSource(book, (0, 1), wants_history=True)
    failures = FailureLog()
    assert advisories(book, [plan], failures) == (
        "the model asked for observation history, which is delivered only for one-lane "
        "groups; a lockstep vector env gets none",
    )
    book.stale_completions, book.over_quota = 2, 1
    plan.discard_events, plan.discarded_frames, plan.short_prefetches = 1, 4, 2
    failures.note("env_close", "TimeoutError: slow")
    failures.note("env_close", "later")
    assert advisories(book, [plan], failures) == (
        "an episode ended mid-chunk on a lockstep vector env 1 time(s), discarding 4 planned "
        "action frame(s) for every lane; use a lane endpoint or execution_horizon=1 to avoid "
        "re-planning",
        "dropped 2 stale episode completion(s) naming an episode that had already ended or was "
        "never current (such as the env echoing a runtime truncation)",
        "dropped 1 completion(s) beyond max_episodes=3",
        "the model asked for observation history, which is delivered only for one-lane "
        "groups; a lockstep vector env gets none",
        "2 prefetched chunk(s) had no frame left past the prefetch lead and were predicted "
        "again; lower prefetch_lead",
        "env.close failed 2 time(s) (first: TimeoutError: slow); the run went on",
    )
