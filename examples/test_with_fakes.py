"""Test your model against scripted fakes, in virtual time: copy this file into your tests.

    pip install pytest pytest-trio
    pytest examples/test_with_fakes.py

``FakeEnv`` is a ``RuntimeEnv`` with no network and no Gymnasium: its observation rows are
``[step within the episode, lane, episodes started on the lane, 0]``, its actions are
``Discrete(2)``, and its delays and faults run on the trio clock. With pytest-trio's
``autojump_clock`` the clock jumps ahead whenever every task is waiting, so a 0.1 s delay
costs no real time and time assertions are exact.

The model runs inline (``user_code="inline"``). By default it would run on a worker
thread, and a task waiting for a thread counts as waiting: the virtual clock could jump
to the next deadline while the model is computing.
"""

from __future__ import annotations

import numpy as np
import pytest
import trio

from trio_rlmesh import EnvError, OperationTimeout
from trio_rlmesh.model import Model
from trio_rlmesh.runtime import RuntimeDriver, RuntimeLimits
from trio_rlmesh.testing import FakeEnv, Fault, check_runtime_model
from trio_rlmesh.transports.inprocess import ModelHandlerRuntimeModel


class Alternate(Model):
    """The model under test: action 0 on even steps of an episode, 1 on odd ones."""

    def predict(self, observation):
        return np.int64(int(observation[0]) % 2)


async def driver_for(env: FakeEnv, **spec_fields) -> RuntimeDriver:
    """Wire the model to the fake env exactly as run_local would, minus the network: the
    model's route is resolved before driving (a model predicts only on a resolved route)."""
    spec = env.session_spec(**spec_fields)
    model = ModelHandlerRuntimeModel(Alternate(), user_code="inline")
    await model.resolve(spec.resolve_request())
    return RuntimeDriver(spec, env, model)


@pytest.mark.trio
async def test_completes_the_requested_episodes(autojump_clock):
    env = FakeEnv(episode_length=5, delays={"env.step": 0.1})
    start = trio.current_time()

    driver = await driver_for(env, max_episodes=3, episode_seeds=(7, 8, 9))
    report = await driver.run()

    assert report.status == "completed"
    assert [(e.seed, e.steps, e.reward) for e in report.episodes] == [
        (7, 5, 5.0),
        (8, 5, 5.0),
        (9, 5, 5.0),
    ]
    assert report.total_steps == 15
    # 15 steps of 0.1 s each, in virtual time: exact, and instant in real time.
    assert trio.current_time() - start == pytest.approx(1.5)


@pytest.mark.trio
async def test_the_env_receives_the_models_actions(autojump_clock):
    env = FakeEnv(episode_length=4)

    await (await driver_for(env, max_episodes=1)).run()

    # (lanes, actions) per step, decoded by the fake.
    assert env.actions == [((0,), (0,)), ((0,), (1,)), ((0,), (0,)), ((0,), (1,))]


@pytest.mark.trio
async def test_a_failed_run_keeps_the_finished_episodes(autojump_clock):
    env = FakeEnv(episode_length=5, faults=[Fault("env.step", at=7)])

    with pytest.raises(EnvError) as caught:
        await (await driver_for(env, max_episodes=3)).run()

    assert caught.value.operation == "env.step"
    assert caught.value.report.status == "failed"
    assert [e.steps for e in caught.value.report.episodes] == [5]  # the first one finished


@pytest.mark.trio
async def test_a_hung_env_times_out_on_schedule(autojump_clock):
    env = FakeEnv(faults=[Fault("env.step", at=2, kind="hang")])
    limits = RuntimeLimits(env_step_timeout=30.0)
    start = trio.current_time()

    with pytest.raises(OperationTimeout):
        await (await driver_for(env, max_episodes=1, limits=limits)).run()

    assert trio.current_time() - start == pytest.approx(30.0)


@pytest.mark.trio
async def test_cancel_returns_a_cancelled_report(autojump_clock):
    env = FakeEnv(episode_length=5, delays={"env.step": 1.0})
    driver = await driver_for(env, max_episodes=100)

    async with trio.open_nursery() as nursery:

        async def stop_later():
            await trio.sleep(12.5)  # two episodes of 5 s have finished by then
            driver.cancel("enough for this test")

        nursery.start_soon(stop_later)
        report = await driver.run()

    assert report.status == "cancelled"
    assert report.reason == "enough for this test"
    assert len(report.episodes) == 2


@pytest.mark.trio
async def test_the_model_passes_the_runtime_conformance_check():
    # The check resolves the model's route first, as a run does.
    await check_runtime_model(ModelHandlerRuntimeModel(Alternate()), FakeEnv().contract)
