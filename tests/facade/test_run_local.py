"""``run_local`` end to end: our ``serve_env`` on a loopback socket, an in-process model."""

from __future__ import annotations

import math
import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import attrs
import gymnasium as gym
import numpy as np
import pytest
import trio
from trio.testing import MockClock

import trio_rlmesh
from trio_rlmesh import RunLocalOptions, SpecError, run_local
from trio_rlmesh.model import RouteContract
from trio_rlmesh.runtime import RuntimeDriver, RuntimeLimits, StepCompleted
from trio_rlmesh.spaces import Box, Discrete
from trio_rlmesh.transports.grpc import serve_env

from .helpers import (
    CARTPOLE,
    Balancer,
    BatchedBalancer,
    HistoryHandler,
    OpenLoopChunker,
    Recorder,
    TimeAware,
    check_totals,
    lean,
    outcomes,
    serving,
    simulate,
    still_serves,
)

pytestmark = pytest.mark.network

CAP = 40


async def test_plain_model_on_cartpole() -> None:
    seeds = (11, 12, 13)
    model = Balancer()
    with trio.fail_after(60):
        async with serving(gym.make(CARTPOLE)) as address:
            report = await run_local(
                model,
                RunLocalOptions(
                    address, episode_seeds=seeds, max_episodes=3, max_episode_steps=CAP
                ),
            )
    assert report.status == "completed"
    assert report.reason is None
    assert report.total_episodes == 3
    assert [e.seed for e in report.episodes] == list(seeds)
    assert [e.env_index for e in report.episodes] == [0, 0, 0]
    check_totals(report)
    assert report.total_steps == sum(e.steps for e in report.episodes)
    # One predict per step: nothing is chunked.
    assert model.calls == report.total_steps
    # The served episodes are exactly what the same policy does on a local CartPole.
    for episode in report.episodes:
        assert episode.seed is not None
        steps, terminated, truncated = simulate(episode.seed, lean, CAP)
        assert (episode.steps, episode.terminated, episode.truncated) == (
            steps,
            terminated,
            truncated,
        )
    ops = {(row.op, row.metric) for row in report.telemetry}
    assert {("env.step", "rpc.total"), ("model.predict", "rpc.total")} <= ops


async def test_max_episodes_is_exact_with_base_seed() -> None:
    with trio.fail_after(60):
        async with serving(gym.make(CARTPOLE)) as address:
            options = RunLocalOptions(address, base_seed=5, max_episodes=4, max_episode_steps=8)
            first = await run_local(Balancer(), options)
            again = await run_local(Balancer(), options)
    assert first.total_episodes == 4
    assert first.total_steps == 32  # the policy keeps CartPole up for 8 steps every time
    assert all(e.steps == 8 and e.truncated and not e.terminated for e in first.episodes)
    assert len({e.seed for e in first.episodes}) == 4
    check_totals(first)
    # Derived seeds are a pure function of the base seed and the episode.
    assert outcomes(again) == outcomes(first)


async def _chunked(
    address: str, horizon: int, seeds: tuple[int, ...], *, prefetch: int = 0
) -> tuple[Any, OpenLoopChunker, Recorder]:
    model, hooks = OpenLoopChunker(), Recorder()
    report = await run_local(
        model,
        RunLocalOptions(
            address,
            episode_seeds=seeds,
            max_episodes=len(seeds),
            max_episode_steps=CAP,
            execution_horizon=horizon,
            prefetch_lead=prefetch,
        ),
        hooks=hooks,
    )
    return report, model, hooks


async def test_chunked_model_replays_the_step_by_step_trajectory() -> None:
    seeds = (3, 4, 5)
    with trio.fail_after(60):
        async with serving(TimeAware()) as address:
            one, model_1, hooks_1 = await _chunked(address, 1, seeds)
            four, model_4, hooks_4 = await _chunked(address, 4, seeds)
    assert one.status == four.status == "completed"
    check_totals(one)
    check_totals(four)
    assert outcomes(four) == outcomes(one)
    # Same observations and actions, step for step.
    assert hooks_4.observations == hooks_1.observations
    assert hooks_4.actions == hooks_1.actions
    # h=1: a predict per step. h=4: a predict per 4 steps of each episode, the rest replayed.
    assert model_1.calls == one.total_steps
    assert set(model_1.horizons) == {1}
    assert set(model_4.horizons) == {4}
    assert model_4.calls == sum(math.ceil(e.steps / 4) for e in four.episodes)
    assert model_4.calls < four.total_steps / 3
    assert hooks_4.replayed == four.total_steps - model_4.calls
    assert hooks_1.replayed == 0


async def test_prefetch_with_chunks_gives_the_same_episodes() -> None:
    seeds = (3, 4, 5)
    with trio.fail_after(60):
        async with serving(TimeAware()) as address:
            plain, _, _ = await _chunked(address, 1, seeds)
            ahead, model, hooks = await _chunked(address, 4, seeds, prefetch=1)
    assert ahead.status == "completed"
    assert ahead.total_episodes == 3
    check_totals(ahead)
    assert ahead.total_steps == sum(e.steps for e in ahead.episodes)
    # The prefetched chunk is planned on the observation one step early and its first
    # frame skipped; for a model that plans ahead correctly nothing changes.
    assert outcomes(ahead) == outcomes(plain)
    assert model.calls < ahead.total_steps
    assert hooks.replayed == ahead.total_steps - model.calls


async def test_history_rows_cover_every_replayed_step() -> None:
    handler = HistoryHandler(OpenLoopChunker())
    seeds = (7, 8)
    with trio.fail_after(60):
        async with serving(TimeAware()) as address:
            report = await run_local(
                handler,
                RunLocalOptions(
                    address,
                    episode_seeds=seeds,
                    max_episodes=2,
                    max_episode_steps=CAP,
                    execution_horizon=4,
                ),
            )
    assert report.status == "completed"
    # The route was resolved with the env's contract and the offer of history.
    (contract,) = handler.contracts
    assert isinstance(contract, RouteContract)
    assert contract.env_name == CARTPOLE
    assert isinstance(contract.action_space, Discrete)
    assert isinstance(contract.observation_space, Box)
    assert handler.offers[0].execution_horizon == 4
    assert handler.offers[0].delivers_history
    seen = handler.seen
    assert len(seen) == sum(math.ceil(e.steps / 4) for e in report.episodes)
    episodes: dict[str, list[Any]] = {}
    for predict in seen:
        episodes.setdefault(predict.episode_id, []).append(predict)
    assert len(episodes) == 2
    rows = 0
    for predicts in episodes.values():
        first, *rest = predicts
        assert first.history_steps == ()
        for previous, predict in zip(predicts, rest, strict=False):
            assert predict.step is not None
            assert previous.step is not None
            # One row per replayed step since the last predict, in order, ending right
            # before this predict's own step.
            assert predict.history_steps == tuple(range(previous.step + 1, predict.step))
            assert len(predict.history_steps) == 3
            # Each row holds that step's observation (TimeAware's last element is its step).
            base = predict.step - predict.history_t[-1] - 1
            assert predict.history_t == tuple(s - base for s in predict.history_steps)
            rows += len(predict.history_steps)
    assert rows == 3 * (len(seen) - 2)


async def test_lane_endpoint_fuses_predicts_and_reports_per_lane() -> None:
    model = BatchedBalancer()
    seeds = tuple(range(20, 29))
    envs = [gym.make(CARTPOLE) for _ in range(3)]
    with trio.fail_after(60):
        async with serving(envs) as address:
            report = await run_local(
                model,
                RunLocalOptions(
                    address, episode_seeds=seeds, max_episodes=len(seeds), max_episode_steps=12
                ),
            )
    assert report.status == "completed"
    assert report.total_episodes == len(seeds)
    check_totals(report)
    assert report.total_steps == sum(e.steps for e in report.episodes)
    # Every lane ran episodes; the first three episodes went to lanes 0, 1, 2 in order.
    assert {e.env_index for e in report.episodes} == {0, 1, 2}
    first = sorted(report.episodes, key=lambda e: e.index)[:3]
    assert [(e.env_index, e.seed) for e in first] == [(0, 20), (1, 21), (2, 22)]
    assert sorted(e.seed for e in report.episodes) == list(seeds)  # type: ignore[type-var]
    for episode in report.episodes:
        assert episode.seed is not None
        assert (episode.steps, episode.terminated) == simulate(episode.seed, lean, 12)[:2]
    # Lanes waiting together were answered by one forward.
    assert max(model.batch_sizes) > 1
    assert sum(model.batch_sizes) == report.total_steps
    group = [
        row for row in report.telemetry if (row.op, row.metric) == ("model.predict", "group.size")
    ]
    assert group
    assert group[0].count == len(model.batch_sizes)


async def test_lockstep_vector_env_with_a_batched_model() -> None:
    model = BatchedBalancer()
    vector = gym.vector.SyncVectorEnv(
        [lambda: gym.make(CARTPOLE, max_episode_steps=15) for _ in range(4)]
    )
    with trio.fail_after(60):
        async with serving(vector) as address:
            report = await run_local(model, RunLocalOptions(address, max_episodes=6))
    assert report.status == "completed"
    assert report.total_episodes == 6
    check_totals(report)
    # One env step per vector step; every predict saw all four lanes at once.
    assert set(model.batch_sizes) == {4}
    assert len(model.batch_sizes) == report.env_step_calls
    # RLMesh's total_steps: every lane's steps of the counted episodes.
    assert report.total_steps == sum(e.steps for e in report.episodes)
    assert {e.env_index for e in report.episodes} <= {0, 1, 2, 3}
    assert all(e.steps <= 15 for e in report.episodes)


async def test_chunks_on_a_lockstep_vector_env_are_refused() -> None:
    vector = gym.vector.SyncVectorEnv(
        [lambda: gym.make(CARTPOLE, max_episode_steps=15) for _ in range(4)]
    )
    with trio.fail_after(60):
        async with serving(vector) as address:
            with pytest.raises(SpecError) as caught:
                await run_local(
                    OpenLoopChunker(),
                    RunLocalOptions(address, max_episodes=1, execution_horizon=4),
                )
            # The refusal happens before any Join: the server still takes a client.
            report = await run_local(BatchedBalancer(), RunLocalOptions(address, max_episodes=1))
    message = str(caught.value)
    assert "execution_horizon=4" in message
    assert "num_envs=4" in message
    assert "execution_horizon=1" in message
    assert "lane endpoint" in message
    assert report.total_episodes == 1


# -- the sync entry point --------------------------------------------------------------------


@contextmanager
def env_in_a_thread(env: Any) -> Iterator[str]:
    """Serve ``env`` from its own trio loop in another thread; yield the address."""
    ready: queue.Queue[str | BaseException] = queue.Queue()
    handles: dict[str, Any] = {}

    async def main() -> None:
        with trio.CancelScope() as scope:
            handles["scope"], handles["token"] = scope, trio.lowlevel.current_trio_token()
            async with trio.open_nursery() as nursery:
                ready.put(await nursery.start(serve_env, env))

    def thread_main() -> None:
        try:
            trio.run(main)
        except BaseException as exc:  # surfaced to the test through the queue
            ready.put(exc)

    thread = threading.Thread(target=thread_main, name="env-server")
    thread.start()
    try:
        address = ready.get(timeout=30)
        if isinstance(address, BaseException):
            raise address
        yield address
    finally:
        if "token" in handles:
            handles["token"].run_sync_soon(handles["scope"].cancel)
        thread.join(30)
        assert not thread.is_alive()


def test_sync_run_from_a_plain_thread() -> None:
    results: dict[str, Any] = {}

    def script(address: str) -> None:
        try:
            results["report"] = trio_rlmesh.run(
                Balancer(), address, max_episodes=2, max_episode_steps=CAP, base_seed=9
            )
        except BaseException as exc:
            results["error"] = exc

    with env_in_a_thread(gym.make(CARTPOLE)) as address:
        # Called from a thread that is neither the main thread nor inside a trio loop.
        worker = threading.Thread(target=script, args=(address,), name="script")
        worker.start()
        worker.join(60)
        assert not worker.is_alive()
        # And once more from this (plain, synchronous) test thread.
        again = trio_rlmesh.run(
            Balancer(), address, max_episodes=2, max_episode_steps=CAP, base_seed=9
        )
    assert "error" not in results, results.get("error")
    report = results["report"]
    assert report.status == "completed"
    assert report.total_episodes == 2
    check_totals(report)
    assert outcomes(again) == outcomes(report)


# -- cancellation -------------------------------------------------------------------------------


def _tasks() -> list[trio.lowlevel.Task]:
    """Every task of this trio run but the server's (it runs in the same run and lets go
    of a connection when it reads the client's close, on its own time)."""
    found, stack = [], [trio.lowlevel.current_root_task()]
    while stack:
        task = stack.pop()
        if task is None or task.name.startswith("tests.facade.helpers.serving"):
            continue
        found.append(task)
        for nursery in task.child_nurseries:
            stack.extend(nursery.child_tasks)
    return found


async def test_driver_cancel_returns_a_cancelled_report() -> None:
    hooks = Recorder(stop_after_episodes=2)
    results: dict[str, Any] = {}

    async def evaluate(address: str, task_status: trio.TaskStatus[RuntimeDriver]) -> None:
        options = RunLocalOptions(address, base_seed=0, max_episode_steps=6)  # no episode quota
        results["report"] = await run_local(
            Balancer(), options, hooks=hooks, task_status=task_status
        )

    with trio.fail_after(60):
        async with serving(gym.make(CARTPOLE)) as address:
            async with trio.open_nursery() as nursery:
                driver = await nursery.start(evaluate, address)
                assert isinstance(driver, RuntimeDriver)
                await hooks.enough.wait()
                driver.cancel("the operator has seen enough")
            report = results["report"]
            await still_serves(address)
    assert report.status == "cancelled"
    assert report.reason == "the operator has seen enough"
    assert report.total_episodes >= 2
    # Every episode the hooks saw complete is in the report, and nothing else.
    assert list(report.episodes) == [event.record for event in hooks.completed]
    assert all(e.steps == 6 for e in report.episodes)
    assert report.total_steps >= sum(e.steps for e in report.episodes)
    # The driver's own report; run_local adds the run's timing, which only it knows.
    assert report.duration_s is not None
    assert driver.report == attrs.evolve(report, started_at=None, duration_s=None)


class _CancelsAfter(Recorder):
    """Cancels ``scope`` (the caller's) once the run has completed ``steps`` steps."""

    def __init__(self, scope: trio.CancelScope, steps: int) -> None:
        super().__init__()
        self.scope, self.cancel_at = scope, steps

    async def step_completed(self, event: StepCompleted) -> None:
        await super().step_completed(event)
        if self.steps == self.cancel_at:
            self.scope.cancel()


async def test_a_callers_cancel_scope_leaves_nothing_running() -> None:
    with trio.fail_after(60):
        async with serving(gym.make(CARTPOLE)) as address:
            before = len(_tasks())
            with trio.CancelScope() as scope:
                hooks = _CancelsAfter(scope, steps=10)
                await run_local(
                    Balancer(), RunLocalOptions(address, max_episode_steps=6), hooks=hooks
                )
            assert scope.cancelled_caught
            assert hooks.steps >= 10
            # Structured concurrency: nothing the run started is still running.
            assert len(_tasks()) == before
            # The server let go of the cancelled client's session and takes the next one.
            await still_serves(address)


async def test_base_seed_derives_the_same_seeds_in_every_run() -> None:
    """The default session id is constant, so a base seed is reproducible across processes."""
    from trio_rlmesh.runtime._ids import deterministic_reset_seed

    with trio.fail_after(60):
        async with serving(gym.make(CARTPOLE)) as address:
            options = RunLocalOptions(address, max_episodes=2, base_seed=11, max_episode_steps=5)
            first = await run_local(Balancer(), options)
            second = await run_local(Balancer(), options)
    seeds = [episode.seed for episode in first.episodes]
    assert seeds == [episode.seed for episode in second.episodes]
    assert seeds[0] == deterministic_reset_seed(11, "local", 0, 0)


class _Where:
    """A CartPole policy that notes the thread each predict runs on."""

    def __init__(self) -> None:
        self.threads: set[int] = set()

    def predict(self, observation: Any) -> Any:
        self.threads.add(threading.get_ident())
        return np.int64(lean(observation))


@pytest.mark.parametrize("user_code", [None, "auto", "thread", "inline"])
async def test_user_code_decides_where_the_models_predicts_run(user_code: str | None) -> None:
    model = _Where()
    with trio.fail_after(60):
        async with serving(gym.make(CARTPOLE)) as address:
            options = RunLocalOptions(
                address, max_episodes=1, max_episode_steps=5, user_code=user_code
            )
            assert (await run_local(model, options)).status == "completed"
    if user_code != "inline":
        # None (the default) with a served env is "auto": the first predicts run on the
        # model's worker thread, where a deadline can fire (see the next test for more).
        assert len(model.threads) == 1
        assert model.threads != {threading.get_ident()}
    else:
        assert model.threads == {threading.get_ident()}


class _SlowOnce(_Where):
    """Notes each predict's thread in order; predict ``slow_at`` (1-based) takes 50 ms of
    the run's clock (a MockClock jump: the worker times calls with the run's clock, so
    the slow call is slow however loaded the machine is)."""

    def __init__(self, clock: MockClock, slow_at: int) -> None:
        super().__init__()
        self.clock = clock
        self.order: list[int] = []
        self.slow_at = slow_at

    def predict(self, observation: Any) -> Any:
        self.order.append(threading.get_ident())
        if len(self.order) == self.slow_at:
            self.clock.jump(0.05)
        return super().predict(observation)


@pytest.mark.parametrize("slow_at", [3, 40])
async def test_by_default_a_slow_predict_against_a_served_env_sends_the_next_to_the_thread(
    slow_at: int, mock_clock: MockClock
) -> None:
    # A predict of 50 ms is slow whether it ran on the thread (3) or, after a run of quick
    # ones, most likely inline (40): either way the predict after it leaves the loop free.
    # The clock runs at real speed (real sockets), the slow predict adds 50 ms to it.
    mock_clock.rate = 1.0
    model = _SlowOnce(mock_clock, slow_at)
    with trio.fail_after(60):
        async with serving(gym.make(CARTPOLE)) as address:
            options = RunLocalOptions(address, max_episodes=1, max_episode_steps=slow_at + 2)
            assert (await run_local(model, options)).status == "completed"
    assert len(model.order) >= slow_at + 1
    assert model.order[0] != threading.get_ident()
    assert model.order[slow_at] != threading.get_ident()


async def test_the_predict_deadline_fires_for_a_local_model_that_hangs() -> None:
    class Hangs:
        def __init__(self) -> None:
            self.release = threading.Event()

        def predict(self, observation: Any) -> Any:
            self.release.wait()
            return np.int64(0)

    model = Hangs()
    limits = RuntimeLimits(model_predict_timeout=0.2)
    try:
        with trio.fail_after(30):
            async with serving(gym.make(CARTPOLE)) as address:
                with pytest.raises(trio_rlmesh.OperationTimeout) as info:
                    await run_local(model, RunLocalOptions(address, max_episodes=1, limits=limits))
    finally:
        model.release.set()
    assert info.value.operation == "model.predict"
    assert info.value.report is not None


def test_run_local_options_refuse_an_unknown_user_code() -> None:
    with pytest.raises(SpecError, match="user_code must be 'auto', 'thread' or 'inline'"):
        RunLocalOptions("127.0.0.1:1", user_code="fast")  # type: ignore[arg-type]


async def test_auto_is_refused_for_an_env_hosted_in_this_process() -> None:
    options = RunLocalOptions(gym.make(CARTPOLE), max_episodes=1, user_code="auto")
    with pytest.raises(SpecError, match="an env hosted in this process takes 'thread' or"):
        await run_local(_Where(), options)


async def test_a_served_env_that_hangs_answers_its_own_timeout() -> None:
    """The server enforces ``timeout_ms`` and answers TIMEOUT; the driver waits for that
    answer (the client enforces deadlines) instead of cutting the call off first."""

    class HangsOnStep(gym.Wrapper):  # type: ignore[type-arg]
        def __init__(self) -> None:
            super().__init__(gym.make(CARTPOLE))
            self.release = threading.Event()

        def step(self, action: Any) -> Any:
            self.release.wait()
            return super().step(action)

    env = HangsOnStep()
    limits = RuntimeLimits(env_step_timeout=0.2)
    try:
        with trio.fail_after(30):
            async with serving(env) as address:
                with pytest.raises(trio_rlmesh.OperationTimeout) as info:
                    await run_local(
                        Balancer(), RunLocalOptions(address, max_episodes=1, limits=limits)
                    )
    finally:
        env.release.set()
    assert info.value.operation == "env.step"
    assert info.value.code == "TIMEOUT"  # the server's answer, not the driver's own scope
    assert "timed out after 200ms" in str(info.value)
    assert info.value.report is not None


async def test_by_default_quick_predicts_against_a_served_env_run_inline(
    mock_clock: MockClock,
) -> None:
    # The run's clock stands still, so every predict is quick: after 8 on the model's
    # thread, the rest run on the trio thread.
    model = _SlowOnce(mock_clock, slow_at=0)
    async with serving(gym.make(CARTPOLE)) as address:
        options = RunLocalOptions(address, max_episodes=1, max_episode_steps=12)
        assert (await run_local(model, options)).status == "completed"
    here = threading.get_ident()
    assert [thread == here for thread in model.order] == [False] * 8 + [True] * 4
