"""Shared helpers for the runtime tests."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import attrs

from trio_rlmesh import Error
from trio_rlmesh.protocol import model_v1
from trio_rlmesh.runtime import (
    ModelPrediction,
    RuntimeDriver,
    RuntimeHooks,
    RuntimeLimits,
    RuntimeReport,
)
from trio_rlmesh.runtime._fleet import Fleet
from trio_rlmesh.testing import FakeEnv, FakeModel

UUID7 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def driver(
    env: FakeEnv,
    model: FakeModel,
    hooks: RuntimeHooks | None = None,
    *,
    prefetch_lead: int = 0,
    limits: dict[str, Any] | None = None,
    **spec: Any,
) -> RuntimeDriver:
    spec.setdefault("max_episodes", 1)
    if limits:
        spec["limits"] = attrs.evolve(RuntimeLimits(), **limits)
    return RuntimeDriver(env.session_spec(**spec), env, model, hooks, prefetch_lead=prefetch_lead)


def fake_endpoints(
    envs: Mapping[str, FakeEnv], model: FakeModel, max_episodes: int = 4
) -> tuple[
    Callable[[str], AbstractAsyncContextManager[FakeEnv]],
    Callable[[str, FakeEnv, Fleet], Awaitable[RuntimeDriver]],
]:
    """``FleetRun.run``'s two steps for fake endpoints: ``envs`` by address, one model."""

    @asynccontextmanager
    async def open_endpoint(address: str) -> AsyncIterator[FakeEnv]:
        yield envs[address]

    async def prepare(address: str, env: FakeEnv, fleet: Fleet) -> RuntimeDriver:
        return RuntimeDriver(env.session_spec(max_episodes=max_episodes), env, model, fleet=fleet)

    return open_endpoint, prepare


async def run(
    env: FakeEnv, model: FakeModel, hooks: RuntimeHooks | None = None, **kw: Any
) -> RuntimeReport:
    return await driver(env, model, hooks, **kw).run()


def row(report: RuntimeReport, op: str, metric: str = "rpc.total") -> Any:
    found = [r for r in report.telemetry if r.op == op and r.metric == metric]
    assert len(found) == 1, (op, metric, report.telemetry)
    return found[0]


class Recorder(RuntimeHooks):
    """Records every hook call as ``(name, event)``."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def of(self, name: str) -> list[Any]:
        return [event for n, event in self.calls if n == name]

    async def session_started(self, event: Any) -> None:
        self.calls.append(("session_started", event))

    async def episode_started(self, event: Any) -> None:
        self.calls.append(("episode_started", event))

    async def transform_observation(self, event: Any) -> None:
        self.calls.append(("transform_observation", event))

    async def observation_emitted(self, event: Any) -> None:
        self.calls.append(("observation_emitted", event))

    async def transform_action(self, event: Any) -> None:
        self.calls.append(("transform_action", event))

    async def action_received(self, event: Any) -> None:
        self.calls.append(("action_received", event))

    async def step_completed(self, event: Any) -> None:
        self.calls.append(("step_completed", event))

    async def episode_completed(self, event: Any) -> None:
        self.calls.append(("episode_completed", event))

    async def session_ended(self, event: Any) -> None:
        self.calls.append(("session_ended", event))

    async def session_failed(self, event: Any) -> None:
        self.calls.append(("session_failed", event))

    async def on_telemetry(self, event: Any) -> None:
        self.calls.append(("on_telemetry", event))


class ShortModel(FakeModel):
    """Fuses predicts, and answers a group of several with one result too few."""

    async def predict_group(
        self, requests: Sequence[model_v1.PredictRequest]
    ) -> list[ModelPrediction | Error]:
        answers = await super().predict_group(requests)
        return answers[:-1] if len(answers) > 1 else answers
