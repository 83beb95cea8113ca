"""Envs, models and hooks shared by the facade tests.

Everything here is deterministic: CartPole is deterministic given its reset seed, and
every model is a pure function of what it is shown, so two runs with the same seeds
must produce the same episodes whatever path (in-process, served, chunked) they take.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import gymnasium as gym
import numpy as np
import trio

from trio_rlmesh import Error
from trio_rlmesh.model import (
    ModelEngine,
    ModelObservation,
    PredictFrames,
    ResolveOptions,
    RouteContract,
    RouteNeeds,
)
from trio_rlmesh.runtime import (
    ActionReceived,
    EpisodeCompleted,
    ObservationEmitted,
    RuntimeHooks,
    RuntimeReport,
    StepCompleted,
)
from trio_rlmesh.transports.grpc import serve_env

from .._process import first_line

CARTPOLE = "CartPole-v1"
SRC = str(Path(__file__).resolve().parents[2] / "src")


def lean(observation: Any) -> int:
    """A CartPole policy: push the cart toward the side the pole is falling to."""
    return int(observation[2] + 0.5 * observation[3] > 0)


def open_loop_action(seed: int | None, step: int) -> int:
    """An open-loop policy: the action at ``step`` depends only on the episode's seed."""
    bits = np.random.default_rng(0 if seed is None else seed).integers(0, 2, size=600)
    return int(bits[step])


# -- envs ----------------------------------------------------------------------------------


class TimeAware(gym.Wrapper[Any, Any, Any, Any]):
    """CartPole whose observation ends with the episode step (so a model can plan a chunk)."""

    def __init__(self, env: gym.Env[Any, Any] | None = None) -> None:
        super().__init__(env if env is not None else gym.make(CARTPOLE))
        inner = self.env.observation_space
        assert isinstance(inner, gym.spaces.Box)
        self.observation_space = gym.spaces.Box(
            np.append(inner.low, 0.0).astype(np.float32),
            np.append(inner.high, 1e6).astype(np.float32),
            dtype=np.float32,
        )
        self._t = 0

    def _obs(self, observation: Any) -> Any:
        return np.append(observation, np.float32(self._t)).astype(np.float32)

    def reset(self, **kwargs: Any) -> Any:
        observation, info = self.env.reset(**kwargs)
        self._t = 0
        return self._obs(observation), info

    def step(self, action: Any) -> Any:
        observation, reward, terminated, truncated, info = self.env.step(action)
        self._t += 1
        return self._obs(observation), reward, terminated, truncated, info


class FailingStep(gym.Wrapper[Any, Any, Any, Any]):
    """CartPole that raises on its ``at``-th step call (counted over the env's lifetime)."""

    def __init__(self, at: int) -> None:
        super().__init__(gym.make(CARTPOLE))
        self.at = at
        self.calls = 0

    def step(self, action: Any) -> Any:
        self.calls += 1
        if self.calls == self.at:
            raise ValueError(f"actuator jammed on step call {self.calls}")
        return self.env.step(action)


# -- models ----------------------------------------------------------------------------------


class Balancer:
    """A plain numpy model (only ``predict``); counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def predict(self, observation: Any) -> Any:
        self.calls += 1
        return np.int64(lean(observation))


class BatchedBalancer:
    """Only ``predict_batch``: one forward for every lane; records each batch's size."""

    def __init__(self) -> None:
        self.batch_sizes: list[int] = []

    def predict_batch(self, observations: Any) -> Any:
        self.batch_sizes.append(int(observations.shape[0]))
        return np.array([lean(row) for row in observations], dtype=np.int64)


class OpenLoopChunker:
    """Only ``predict_chunk``, on a :class:`TimeAware` env.

    The chunk planned at episode step ``t`` is ``[a(t), a(t+1), ...]`` for an open-loop
    action sequence ``a`` fixed by the episode seed, which is exactly what predicting
    step by step would give; so any execution horizon must replay the same trajectory.
    """

    def __init__(self) -> None:
        self.calls = 0
        self.horizons: list[int] = []

    def predict_chunk(self, observation: Any, execution_horizon: int, context: Any) -> Any:
        self.calls += 1
        self.horizons.append(execution_horizon)
        t = round(float(observation[-1]))
        seed = context["episode_seed"]
        return np.array(
            [open_loop_action(seed, t + j) for j in range(execution_horizon)], dtype=np.int64
        )


class Declines:
    """Raises a recoverable :class:`~trio_rlmesh.ModelError` on its ``at``-th predict."""

    def __init__(self, at: int) -> None:
        self.at = at
        self.calls = 0

    def predict(self, observation: Any) -> Any:
        from trio_rlmesh import ModelError

        self.calls += 1
        if self.calls == self.at:
            raise ModelError("the policy server is warming up; retry", recoverable=True)
        return np.int64(lean(observation))


class OutlivesDeadline:
    """Blocks its ``at``-th predict until ``deadline`` seconds have passed since the call began.

    Whether it runs inline on the event loop (where nothing can interrupt it) or served in a
    worker thread, it answers strictly after any deadline of that length started before it
    was called (one monotonic clock for the whole host), and the runtime treats a late answer
    as a timeout: the run times out however loaded the machine is.
    """

    def __init__(self, at: int, deadline: float) -> None:
        self.at = at
        self.deadline = deadline
        self.calls = 0

    def predict(self, observation: Any) -> Any:
        self.calls += 1
        if self.calls == self.at:
            until = time.perf_counter() + self.deadline + 0.001
            pause = threading.Event()
            while (left := until - time.perf_counter()) > 0:
                pause.wait(left)
        return np.int64(lean(observation))


# -- a handler whose route asks for observation history -------------------------------------


@attrs.frozen
class SeenPredict:
    step: int | None
    """The lane's env-step counter the predict carried."""
    history_steps: tuple[int, ...]
    """The producer step of every history row it carried."""
    history_t: tuple[int, ...]
    """The episode step each row's observation holds (its last element, on TimeAware)."""
    episode_id: str


class _HistoryRoutes:
    def __init__(self, owner: HistoryHandler) -> None:
        self._owner = owner

    async def resolve_adapter(
        self, env_id: str, contract: RouteContract, options: ResolveOptions
    ) -> RouteNeeds:
        self._owner.contracts.append(contract)
        self._owner.offers.append(options)
        setup = self._owner.engine.route_setup()
        needs = await setup.resolve_adapter(env_id, contract, options)
        return attrs.evolve(needs, history=("observation",))

    async def reset_adapter(self, env_id: str, episode_ids: Sequence[str]) -> None:
        await self._owner.engine.route_setup().reset_adapter(env_id, episode_ids)

    async def release_adapter(self, env_id: str) -> None:
        await self._owner.engine.route_setup().release_adapter(env_id)


class HistoryHandler:
    """A :class:`~trio_rlmesh.model.ModelHandler` around the engine that asks for history."""

    def __init__(self, model: object) -> None:
        self.engine = ModelEngine(model)
        self.contracts: list[Any] = []
        self.offers: list[ResolveOptions] = []
        self.seen: list[SeenPredict] = []
        self._routes = _HistoryRoutes(self)

    def route_setup(self) -> _HistoryRoutes:
        return self._routes

    async def predict_grouped(
        self, observations: list[ModelObservation]
    ) -> list[PredictFrames | Error]:
        for group in observations:
            self.seen.append(
                SeenPredict(
                    step=group.step,
                    history_steps=tuple(row.step for row in group.history),
                    history_t=tuple(int(row.observation[-1]) for row in group.history),
                    episode_id=group.episodes[0].episode_id,
                )
            )
        return await self.engine.predict_grouped(observations)

    async def reset_adapter(self, env_id: str, episode_ids: Sequence[str]) -> None:
        await self.engine.reset_adapter(env_id, episode_ids)

    def take_adapter_ns(self) -> int:
        return self.engine.take_adapter_ns()

    def held_state(self) -> Any:
        return self.engine.held_state()

    async def close(self) -> None:
        await self.engine.close()


# -- hooks --------------------------------------------------------------------------------------


def exact(value: Any) -> Any:
    """A hook payload (numpy values) in a form ``==`` compares exactly: each array becomes its
    dtype, shape and bytes; dicts and tuples keep their structure."""
    if isinstance(value, np.ndarray):
        return (value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, dict):
        return {key: exact(item) for key, item in value.items()}
    if isinstance(value, tuple | list):
        return tuple(exact(item) for item in value)
    return value


class Recorder(RuntimeHooks):
    """Records the trajectory (observations and actions, see :func:`exact`) and completions."""

    def __init__(self, *, stop_after_episodes: int | None = None) -> None:
        self.observations: list[Any] = []
        self.actions: list[Any] = []
        self.replayed = 0
        self.completed: list[EpisodeCompleted] = []
        self.steps = 0
        self.enough = trio.Event()
        self._stop_after = stop_after_episodes

    async def observation_emitted(self, event: ObservationEmitted) -> None:
        self.observations.append(exact(event.observation))

    async def action_received(self, event: ActionReceived) -> None:
        self.actions.append(exact(event.action))
        self.replayed += event.replayed

    async def step_completed(self, event: StepCompleted) -> None:
        self.steps += 1

    async def episode_completed(self, event: EpisodeCompleted) -> None:
        self.completed.append(event)
        if self._stop_after is not None and len(self.completed) >= self._stop_after:
            self.enough.set()


# -- serving and checking ------------------------------------------------------------------


@asynccontextmanager
async def serving(env: Any, **options: Any) -> AsyncIterator[str]:
    """Serve ``env`` with :func:`serve_env` (``nursery.start``) for the block; yield its address."""
    async with trio.open_nursery() as nursery:
        address: str = await nursery.start(
            lambda task_status: serve_env(env, task_status=task_status, **options)
        )
        yield address
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def env_process(target: str) -> AsyncIterator[tuple[str, trio.Process]]:
    """``python -m trio_rlmesh serve-env TARGET`` in a child process; yield (address, process).

    Ready when it prints its address (its first stdout line), read as it comes: no polling.
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (SRC, env.get("PYTHONPATH")) if p)
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "trio_rlmesh", "serve-env", target],
        env=env,
        stdout=subprocess.PIPE,
    )
    try:
        with trio.fail_after(30):
            address = await first_line(process, f"serve-env {target}")
        yield address, process
    finally:
        with trio.CancelScope(shield=True):
            if process.poll() is None:
                process.kill()
            await process.wait()


async def still_serves(address: str) -> None:
    """The env server at ``address`` takes a new client and completes a short run."""
    from trio_rlmesh import RunLocalOptions, run_local

    report = await run_local(
        Balancer(), RunLocalOptions(address, max_episodes=1, max_episode_steps=3)
    )
    assert report.status == "completed"
    assert report.total_episodes == 1


def outcomes(report: RuntimeReport) -> list[tuple[Any, ...]]:
    """What must agree between two runs with the same seeds, per episode in index order."""
    return [
        (e.index, e.env_index, e.seed, e.steps, e.reward, e.terminated, e.truncated)
        for e in sorted(report.episodes, key=lambda e: e.index)
    ]


def check_totals(report: RuntimeReport) -> None:
    """The report's totals agree with its episodes (CartPole pays 1 per step)."""
    episodes = report.episodes
    assert sorted(e.index for e in episodes) == list(range(len(episodes)))
    for e in episodes:
        assert e.reward == float(e.steps)
        assert e.steps >= 1
        assert e.terminated or e.truncated
        assert e.duration_s >= 0.0
    if episodes:
        assert report.mean_reward == sum(e.reward for e in episodes) / len(episodes)
    assert report.total_episodes == len(episodes)


def simulate(seed: int, policy: Any, cap: int) -> tuple[int, bool, bool]:
    """Run one CartPole episode locally: (steps, terminated, truncated by our cap)."""
    env = gym.make(CARTPOLE)
    try:
        observation, _ = env.reset(seed=seed)
        for step in range(1, cap + 1):
            observation, _, terminated, truncated, _ = env.step(policy(observation))
            if terminated or truncated:
                return step, bool(terminated), bool(truncated)
        return cap, False, True
    finally:
        env.close()
