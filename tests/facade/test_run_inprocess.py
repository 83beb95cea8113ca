"""``run(model, env)`` in this process, with no network, and the same env served the same.

The env host serves both paths, so an env must give the very same episodes and the very same
observations whether it runs in this process or behind ``serve_env`` (issue 11 §1). The
fixture envs cover a scalar env, a vector env, a list of lane envs, old-Gym envs and every
space of the shared catalogue.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import zlib
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import trio

import trio_rlmesh
from tests.facade.helpers import exact
from tests.interop import envs as fixture_envs
from tests.spaces.catalogue import catalogue_spaces
from trio_rlmesh import RunLocalOptions, SpaceError, run_local
from trio_rlmesh.runtime import ObservationEmitted, RuntimeHooks, RuntimeReport
from trio_rlmesh.spaces import Space, Text, to_gymnasium
from trio_rlmesh.transports.grpc import serve_env


class Policy:
    """Samples the action space seeded by the observation: a function of what it sees, so
    lanes answered in any order get the same actions."""

    def __init__(self, action_space: Any) -> None:
        self.space = action_space

    def predict(self, observation: Any) -> Any:
        self.space.seed(zlib.crc32(repr(observation).encode()))
        return self.space.sample()


class BatchPolicy(Policy):
    def predict_batch(self, observations: Any) -> Any:
        return np.stack([self.predict(lane) for lane in observations])


class Observations(RuntimeHooks):
    """Every observation the driver emitted, exactly (dtype, shape, bytes), per group of lanes
    (lanes of a lane endpoint interleave in any order; each lane's own sequence is what must
    match)."""

    def __init__(self) -> None:
        self.seen: dict[tuple[int, ...], list[Any]] = {}

    async def observation_emitted(self, event: ObservationEmitted) -> None:
        self.seen.setdefault(tuple(event.env_indices), []).append(exact(event.observation))


class CatalogueEnv(gym.Env[Any, Any]):
    """Observations drawn from a catalogue space with the reset seed; episodes of 4 steps."""

    def __init__(self, space: Space) -> None:
        self.observation_space = to_gymnasium(space)
        self.action_space = gym.spaces.Discrete(3)
        self.t = 0

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.observation_space.seed(int(self.np_random.integers(1 << 30)))
        self.t = 0
        return self.observation_space.sample(), {"t": 0}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.t += 1
        return (
            self.observation_space.sample(),
            float(action) + self.t,
            self.t >= 4,
            False,
            {"t": self.t, "is_success": bool(action == 1)},
        )


def _episodes(report: RuntimeReport, *, by_lane: bool = True) -> list[tuple[Any, ...]]:
    # Sorted: the lanes of a lane endpoint may finish in either order. Without by_lane, the
    # lane is left out: on a lane endpoint, which lane takes the next seed depends on which
    # finishes first (explicit seeds go out in episode start order).
    return sorted(
        ((e.env_index,) if by_lane else ())
        + (e.seed, e.steps, e.reward, e.terminated, e.truncated, e.success)
        for e in report.episodes
    )


async def _both(make_env: Any, policy: Any, **options: Any) -> tuple[Any, Any]:
    """The same run in this process and against ``serve_env`` (memory transport)."""
    local_hooks, served_hooks = Observations(), Observations()
    local = await run_local(
        policy(), RunLocalOptions(make_env(), user_code="inline", **options), hooks=local_hooks
    )
    async with trio.open_nursery() as nursery:
        address = await nursery.start(
            lambda task_status: serve_env(make_env(), "memory://same-env", task_status=task_status)
        )
        served = await run_local(
            policy(), RunLocalOptions(address, user_code="inline", **options), hooks=served_hooks
        )
        nursery.cancel_scope.cancel()
    return (local, local_hooks.seen), (served, served_hooks.seen)


FIXTURES = {
    "cartpole": ({"episode_seeds": (1, 2, 3), "max_episodes": 3}, False),
    "pendulum": ({"episode_seeds": (4, 5), "max_episodes": 2, "max_episode_steps": 30}, False),
    "nested": ({"episode_seeds": (1, 2), "max_episodes": 2}, False),
    "vector4": ({"max_episodes": 6}, True),
    "lanes4": ({"episode_seeds": tuple(range(8)), "max_episodes": 8}, False),
    "oldgym": ({"episode_seeds": (2, 3, 4, 5), "max_episodes": 4}, False),
    "oldgym_vector3": ({"max_episodes": 5}, True),
}


@pytest.mark.parametrize("kind", list(FIXTURES))
async def test_a_fixture_env_runs_the_same_in_process_and_served(kind: str) -> None:
    options, batched = FIXTURES[kind]

    def make_env() -> Any:
        env = fixture_envs.build(kind)
        if kind == "vector4":
            env.reset = lambda seed=None, options=None, inner=env.reset: inner(  # type: ignore[method-assign]
                seed=123 if seed is None else seed, options=options
            )
        return env

    probe = make_env()
    first = probe[0] if isinstance(probe, list) else probe
    space = getattr(first, "single_action_space", None) or first.action_space

    def policy() -> Any:
        return BatchPolicy(space) if batched else Policy(space)

    with trio.fail_after(60):
        (local, local_seen), (served, served_seen) = await _both(make_env, policy, **options)
    assert local.status == served.status == "completed"
    lanes_race = kind == "lanes4"
    assert _episodes(local, by_lane=not lanes_race) == _episodes(served, by_lane=not lanes_race)
    if not lanes_race:
        assert local_seen == served_seen
    assert local.total_steps == served.total_steps > 0


@pytest.mark.parametrize("space", catalogue_spaces(), ids=lambda s: type(s).__name__)
async def test_every_catalogue_space_runs_the_same_in_process_and_served(space: Space) -> None:
    if isinstance(space, Text) or any(isinstance(s, Text) for s in _children(space)):
        pytest.skip("Gymnasium's Text sampling is not reproducible across processes")
    try:
        to_gymnasium(space)
    except SpaceError:
        pytest.skip("Gymnasium has no equivalent of this space")

    def make_env() -> Any:
        return CatalogueEnv(space)

    def policy() -> Any:
        return Policy(gym.spaces.Discrete(3))

    with trio.fail_after(60):
        (local, local_seen), (served, served_seen) = await _both(
            make_env, policy, episode_seeds=(3, 4), max_episodes=2
        )
    assert _episodes(local) == _episodes(served)
    assert [e.success for e in local.episodes] == [e.success for e in served.episodes]
    assert local_seen == served_seen


def _children(space: Space) -> list[Space]:
    inner = getattr(space, "spaces", None)
    if inner is None:
        entries = getattr(space, "entries", None)
        inner = [child for _, child in entries] if entries is not None else []
    found: list[Space] = []
    for child in inner:
        found.append(child)
        found.extend(_children(child))
    return found


def test_run_takes_an_env_and_needs_no_network() -> None:
    """``trio_rlmesh.run(model, env)`` as ``rlmesh.run(model, env)``: no gRPC is imported."""
    code = (
        "import sys, gymnasium, numpy as np, trio_rlmesh\n"
        "class P:\n"
        "    def predict(self, obs):\n"
        "        return np.int64(obs[2] + 0.3 * obs[3] > 0)\n"
        "report = trio_rlmesh.run(P(), gymnasium.make('CartPole-v1'), episode_seeds=[0, 1],"
        " max_episodes=2)\n"
        "assert report.status == 'completed', report\n"
        "assert [e.seed for e in report.episodes] == [0, 1], report.episodes\n"
        "loaded = [m for m in ('trio_rlmesh.transports.grpc', 'h2', 'grpclib', 'asyncio')"
        " if m in sys.modules]\n"
        "print(report.total_steps, loaded)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    steps, loaded = out.stdout.strip().split(" ", 1)
    assert int(steps) > 100
    assert loaded == "[]"


def test_run_matches_a_direct_gymnasium_rollout() -> None:
    class Balancer:
        def predict(self, obs: Any) -> Any:
            return np.int64(obs[2] + 0.3 * obs[3] > 0)

    report = trio_rlmesh.run(
        Balancer(), gym.make("CartPole-v1"), episode_seeds=[3, 4], max_episodes=2
    )
    expected = []
    for seed in (3, 4):
        env = gym.make("CartPole-v1")
        obs, _ = env.reset(seed=seed)
        steps, total, done = 0, 0.0, False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(Balancer().predict(obs))
            steps, total, done = steps + 1, total + float(reward), terminated or truncated
        expected.append((seed, steps, total))
    assert [(e.seed, e.steps, e.reward) for e in report.episodes] == expected


async def test_run_local_takes_a_factory_and_a_vector_env() -> None:
    def vector() -> Any:
        return gym.vector.SyncVectorEnv(
            [lambda: gym.make("CartPole-v1") for _ in range(3)],
            autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP,
        )

    space = gym.spaces.Discrete(2)
    with trio.fail_after(60):
        report = await run_local(BatchPolicy(space), RunLocalOptions(vector, max_episodes=4))
    assert report.status == "completed"
    assert len(report.episodes) == 4
    assert {e.env_index for e in report.episodes} <= {0, 1, 2}


class _Where:
    """Notes the thread every env step and every predict ran on."""

    def __init__(self) -> None:
        self.env: set[int] = set()
        self.model: set[int] = set()

    def predict(self, obs: Any) -> Any:
        self.model.add(threading.get_ident())
        return np.int64(obs[2] + 0.3 * obs[3] > 0)

    def wrap(self, env: gym.Env[Any, Any]) -> gym.Env[Any, Any]:
        where = self

        class Noting(gym.Wrapper[Any, Any, Any, Any]):
            def step(self, action: Any) -> Any:
                where.env.add(threading.get_ident())
                return super().step(action)

        return Noting(env)


@pytest.mark.parametrize(
    ("options", "inline"),
    [({}, True), ({"user_code": None}, True), ({"user_code": "inline"}, True),
     ({"user_code": "thread"}, False)],
)  # fmt: skip
def test_an_env_hosted_here_runs_its_code_and_the_models_inline_by_default(
    options: dict[str, Any], inline: bool
) -> None:
    # As rlmesh.run(model, env) does; user_code="thread" puts both on worker threads.
    where = _Where()
    env = where.wrap(gym.make("CartPole-v1"))
    report = trio_rlmesh.run(where, env, max_episodes=1, max_episode_steps=5, **options)
    assert report.status == "completed"
    here = threading.get_ident()
    if inline:
        assert where.env == where.model == {here}
    else:
        assert len(where.env) == len(where.model) == 1
        assert here not in where.env | where.model
        assert where.env != where.model
