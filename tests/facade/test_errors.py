"""How a failed ``run_local`` / ``run_remote`` reaches the caller (the seed's ``run_error``).

The reference flattened every driver failure into one opaque error. Here a model decline,
an env fault, a dropped connection and a timeout stay distinguishable by class, keep their
recoverability and context, and carry the partial report; the env server keeps serving.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import trio

from trio_rlmesh import (
    EnvError,
    Error,
    ModelError,
    OperationTimeout,
    RunLocalOptions,
    SpecError,
    TransportError,
    run_local,
    run_remote,
)
from trio_rlmesh.model import ModelEngine, ModelObservation, PredictFrames
from trio_rlmesh.runtime import RuntimeHooks, RuntimeLimits, StepCompleted
from trio_rlmesh.transports.grpc import serve_model

from .helpers import (
    CARTPOLE,
    Balancer,
    Declines,
    FailingStep,
    OutlivesDeadline,
    check_totals,
    env_process,
    serving,
    still_serves,
)

pytestmark = pytest.mark.network

# Each episode is cut at 5 steps; the policy never drops the pole that early.
STEPS = 5


def _options(address: str, **extra: Any) -> RunLocalOptions:
    return RunLocalOptions(address, base_seed=1, max_episodes=10, max_episode_steps=STEPS, **extra)


def _check_partial(error: Error, episodes: int) -> None:
    report = error.report
    assert report is not None
    assert report.status == "failed"
    assert report.reason is not None
    assert report.total_episodes == episodes
    assert all(e.steps == STEPS for e in report.episodes)
    check_totals(report)


async def test_a_recoverable_model_decline_stays_recoverable() -> None:
    # Predict 13 is step 13's: two episodes (10 steps) have finished by then.
    with trio.fail_after(60):
        async with serving(gym.make(CARTPOLE)) as address:
            with pytest.raises(ModelError) as caught:
                await run_local(Declines(at=13), _options(address))
            await still_serves(address)
    error = caught.value
    assert type(error) is ModelError
    assert error.recoverable is True
    assert "warming up" in error.message
    assert error.operation == "model.predict"
    assert error.step == 12
    assert error.lane == 0
    assert not isinstance(error, (EnvError, TransportError, OperationTimeout))
    _check_partial(error, 2)


async def test_a_model_error_that_is_not_marked_recoverable_is_permanent() -> None:
    class Broken:
        def predict(self, observation: Any) -> Any:
            raise KeyError("no such head")

    with trio.fail_after(60):
        async with serving(gym.make(CARTPOLE)) as address:
            with pytest.raises(ModelError) as caught:
                await run_local(Broken(), _options(address))
    assert caught.value.recoverable is False
    assert "KeyError" in caught.value.message
    assert isinstance(caught.value.__cause__, KeyError)
    _check_partial(caught.value, 0)


async def test_an_env_fault_in_step() -> None:
    env = FailingStep(at=13)
    with trio.fail_after(60):
        async with serving(env) as address:
            with pytest.raises(EnvError) as caught:
                await run_local(Balancer(), _options(address))
            await still_serves(address)
    error = caught.value
    assert not isinstance(error, (ModelError, TransportError, OperationTimeout))
    assert error.operation == "env.step"
    assert error.code == "INTERNAL"
    assert error.recoverable is False
    assert error.step == 13
    assert error.lane == 0
    assert error.address == f"tcp://{address}"
    assert "actuator jammed" in error.message
    _check_partial(error, 2)
    assert error.report is not None
    assert error.report.env_step_calls == 12
    assert error.report.total_steps == sum(e.steps for e in error.report.episodes)


class _KillServer(RuntimeHooks):
    """Kills the env server's process after ``at`` steps and waits until it is gone."""

    def __init__(self, process: trio.Process, at: int) -> None:
        self.process, self.at = process, at

    async def step_completed(self, event: StepCompleted) -> None:
        if event.total_steps == self.at:
            self.process.kill()
            await self.process.wait()


async def test_a_dropped_connection() -> None:
    with trio.fail_after(60):
        async with env_process(f"gymnasium:{CARTPOLE}") as (address, process):
            hooks = _KillServer(process, at=12)
            with pytest.raises(TransportError) as caught:
                await run_local(Balancer(), _options(address), hooks=hooks)
    error = caught.value
    assert not isinstance(error, (EnvError, ModelError, OperationTimeout))
    assert error.operation == "env.step"
    assert error.address == f"tcp://{address}"
    assert error.step == 13
    assert address in error.message
    assert "env.step" in error.message
    assert error.recoverable is False
    _check_partial(error, 2)


async def test_a_model_that_blocks_past_its_deadline_times_out() -> None:
    limits = RuntimeLimits(model_predict_timeout=0.2)
    with trio.fail_after(60):
        async with serving(gym.make(CARTPOLE)) as address:
            model = OutlivesDeadline(at=13, deadline=0.2)
            with pytest.raises(OperationTimeout) as caught:
                await run_local(model, _options(address, limits=limits))
            await still_serves(address)
    error = caught.value
    assert isinstance(error, TimeoutError)
    assert not isinstance(error, (EnvError, ModelError, TransportError))
    assert error.recoverable is True
    assert error.operation == "model.predict"
    assert error.timeout == 0.2
    assert error.step == 12
    assert "model_predict_timeout" in error.message
    _check_partial(error, 2)


class _SlowHandler:
    """A handler whose forward awaits (a remote GPU pool, say) forever on predict ``at``."""

    def __init__(self, at: int) -> None:
        self.engine = ModelEngine(Balancer())
        self.at, self.calls = at, 0

    def route_setup(self) -> Any:
        return self.engine.route_setup()

    async def predict_grouped(
        self, observations: list[ModelObservation]
    ) -> list[PredictFrames | Error]:
        self.calls += 1
        if self.calls == self.at:
            await trio.sleep_forever()
        return await self.engine.predict_grouped(observations)

    async def reset_adapter(self, env_id: str, episode_ids: Sequence[str]) -> None:
        await self.engine.reset_adapter(env_id, episode_ids)

    def take_adapter_ns(self) -> int:
        return self.engine.take_adapter_ns()

    def held_state(self) -> Any:
        return self.engine.held_state()

    async def close(self) -> None:
        await self.engine.close()


async def test_an_awaiting_handler_past_its_deadline_times_out() -> None:
    limits = RuntimeLimits(model_predict_timeout=0.2)
    handler = _SlowHandler(at=13)
    with trio.fail_after(60):
        async with serving(gym.make(CARTPOLE)) as address:
            with pytest.raises(OperationTimeout) as caught:
                await run_local(handler, _options(address, limits=limits))
            await still_serves(address)
    assert caught.value.operation == "model.predict"
    assert caught.value.step == 12
    _check_partial(caught.value, 2)


async def test_errors_through_a_served_model_keep_class_and_recoverability() -> None:
    limits = RuntimeLimits(model_predict_timeout=0.2)
    with trio.fail_after(60):
        async with serving(gym.make(CARTPOLE)) as env_address, trio.open_nursery() as nursery:
            declines = await nursery.start(serve_model, Declines(at=13))
            late = OutlivesDeadline(at=13, deadline=0.2)
            sleeps = await nursery.start(serve_model, late)
            with pytest.raises(ModelError) as declined:
                await run_remote(declines, _options(env_address))
            await still_serves(env_address)
            with pytest.raises(OperationTimeout) as timed_out:
                await run_remote(sleeps, _options(env_address, limits=limits))
            await still_serves(env_address)
            nursery.cancel_scope.cancel()
    assert declined.value.recoverable is True
    assert "warming up" in declined.value.message
    assert declined.value.operation == "model.predict"
    _check_partial(declined.value, 2)
    assert isinstance(timed_out.value, TimeoutError)
    assert timed_out.value.operation == "model.predict"
    assert timed_out.value.recoverable is True
    _check_partial(timed_out.value, 2)


async def test_the_classes_stay_distinct() -> None:
    # One family, four branches a caller can tell apart with ``except``.
    for cls in (ModelError, EnvError, TransportError, OperationTimeout):
        others = {ModelError, EnvError, TransportError, OperationTimeout} - {cls}
        assert issubclass(cls, Error)
        assert not any(issubclass(cls, other) for other in others)
    assert issubclass(OperationTimeout, TimeoutError)
    assert issubclass(TransportError, ConnectionError)
    assert ModelError("x", recoverable=True).recoverable
    assert not ModelError("x").recoverable
    assert OperationTimeout("x").recoverable


async def test_a_model_error_on_a_lane_endpoint_names_the_env_lane() -> None:
    class DeclinesOnSeed:
        def predict(self, observation: Any, context: Any) -> Any:
            if context["episode_seed"] == 22:
                raise ModelError("this start state is out of distribution", recoverable=True)
            return np.int64(0)

    # The first three episodes are planned in lane order, so seed 22 starts on lane 2.
    envs = [gym.make(CARTPOLE) for _ in range(3)]
    with trio.fail_after(60):
        async with serving(envs) as address:
            with pytest.raises(ModelError) as caught:
                await run_local(
                    DeclinesOnSeed(),
                    RunLocalOptions(
                        address, episode_seeds=(20, 21, 22), max_episodes=3, max_episode_steps=5
                    ),
                )
            await still_serves(address)
    assert caught.value.lane == 2
    assert caught.value.recoverable is True
    assert caught.value.operation == "model.predict"
    assert caught.value.report is not None
    assert caught.value.report.status == "failed"


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ("CartPole-v1", "invalid address 'CartPole-v1': expected host:port"),
        ("gymnasium:CartPole-v1", "port 'CartPole-v1' is not a number"),
        (["127.0.0.1:1", "CartPole-v1"], "invalid address 'CartPole-v1'"),
    ],
)
def test_a_string_that_is_no_address_points_at_the_env_object(env: Any, says: str) -> None:
    """What someone used to ``gymnasium.make`` ids most likely meant, said before anything
    connects (a fleet's addresses are checked one by one)."""
    from trio_rlmesh import SpecError, run

    with pytest.raises(SpecError) as caught:
        run(object(), env, max_episodes=1)
    assert says in caught.value.message
    assert caught.value.message.endswith(
        "a string env is a server address: to run a Gymnasium env in this process, pass "
        "the env itself, e.g. gymnasium.make('CartPole-v1')"
    )


@pytest.mark.parametrize("env", ["inprocess://local", "localhost", "my-env"])
def test_a_string_that_reads_as_no_gymnasium_id_gets_no_gymnasium_advice(env: str) -> None:
    from trio_rlmesh import RunLocalOptions, SpecError

    with pytest.raises(SpecError) as caught:
        RunLocalOptions(env)
    assert caught.value.message.startswith(f"invalid address {env!r}")
    assert "gymnasium.make" not in caught.value.message
    assert caught.value.message.endswith(
        "a string env is a server address (ours or RLMesh's); to run an env in this process, "
        "pass the env object itself, or a callable returning one"
    )


def test_a_model_error_names_the_env_by_its_name_and_route() -> None:
    """Not by the route id alone (a run mints one per session): the env's own name first."""
    from trio_rlmesh import run

    class Seven:
        def predict(self, observation: Any) -> Any:
            return np.int64(7)

    with pytest.raises(ModelError) as caught:
        run(Seven(), gym.make("CartPole-v1"), max_episodes=1)
    assert re.search(
        r"model 'Seven' returned a bad action for env 'CartPole-v1' \(route [0-9a-f-]{36}\) "
        r"lane 0: ",
        caught.value.message,
    ), caught.value.message


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"connect_timeout": -1.0}, "connect_timeout must be >= 0 seconds"),
        ({"connect_timeout": float("nan")}, "connect_timeout must be >= 0 seconds"),
        ({"episode_seeds": (1, 2.5)}, "episode_seeds must be integers"),
        ({"max_episodes": 2.5}, "max_episodes must be greater than zero when set, got 2.5"),
    ],
)
def test_options_without_a_command_line_twin_are_checked_too(
    options: dict[str, Any], says: str
) -> None:
    with pytest.raises(SpecError, match=re.escape(says)):
        RunLocalOptions("127.0.0.1:1", **options)
