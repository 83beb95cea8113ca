"""Old Gym API envs: one normalisation, the same results in-process and served.

The rules are RLMesh 0.1.0's (``tests/interop/test_env_server_interop.py`` compares our
server with ``rlmesh.EnvServer`` on the same old-API envs).
"""

from __future__ import annotations

import functools
from typing import Any

import attrs
import gymnasium
import numpy as np
import pytest
import trio

from tests.interop.envs import OldGymEnv, OldGymVectorEnv
from trio_rlmesh import RunLocalOptions, run_local
from trio_rlmesh.protocol import env_v1, spaces_v1
from trio_rlmesh.runtime import RuntimeReport
from trio_rlmesh.spaces import Box, Discrete, Tuple, encode_batch
from trio_rlmesh.transports._gym_compat import normalize_reset, normalize_step
from trio_rlmesh.transports.inprocess import GymEnvRuntimeEnv

from ..facade.helpers import serving

# ---------------------------------------------------------------- the rules


def test_a_bare_reset_observation_gets_an_empty_info() -> None:
    obs = np.zeros(3)
    assert normalize_reset(obs) == (obs, {})
    assert normalize_reset(7) == (7, {})
    assert normalize_reset((obs, {"k": 1})) == (obs, {"k": 1})
    # A bare 2-tuple whose second item is no mapping is an observation.
    assert normalize_reset((1, 2)) == ((1, 2), {})


@pytest.mark.parametrize(
    "space",
    [
        Tuple([Box.from_bounds(0.0, 1.0, shape=(1,)), Discrete(2)]),
        gymnasium.spaces.Tuple((gymnasium.spaces.Discrete(2), gymnasium.spaces.Dict({}))),
    ],
    ids=["ours", "gymnasium"],
)
def test_a_pair_observation_space_tells_a_bare_pair_from_obs_and_info(space: Any) -> None:
    bare = (np.zeros(1), {"nested": 1})  # Tuple(x, Dict) observation, returned bare
    assert normalize_reset(bare, space) == (bare, {})
    modern = ((np.zeros(1), {"nested": 1}), {"info": 2})  # (obs pair, info)
    assert normalize_reset(modern, space) == ((np.zeros(1), {"nested": 1}), {"info": 2})


def test_a_five_tuple_step_passes_through_unchanged() -> None:
    result: tuple[Any, ...] = (1, 2.0, False, True, {})
    assert normalize_step(result, vector=False) is result


@pytest.mark.parametrize(
    ("done", "info", "terminated", "truncated"),
    [
        (False, {}, False, False),
        (True, {}, True, False),
        (True, {"TimeLimit.truncated": True}, False, True),
        (True, {"TimeLimit.truncated": False}, True, False),
        # A time-limit flag without done is no episode end (RLMesh's rule).
        (False, {"TimeLimit.truncated": True}, False, False),
        (1, None, True, False),
    ],
)
def test_an_old_four_tuple_step(done: Any, info: Any, terminated: bool, truncated: bool) -> None:
    obs, reward, term, trunc, out_info = normalize_step((7, 1.5, done, info), vector=False)
    assert (obs, reward, term, trunc) == (7, 1.5, terminated, truncated)
    assert out_info is info  # the key stays in the info, as RLMesh keeps it


def test_an_old_vector_step() -> None:
    dones = np.array([True, True, False, False])
    info = {
        "TimeLimit.truncated": np.array([False, True, True, False]),
        "_TimeLimit.truncated": np.array([False, False, False, False]),  # not read
    }
    _, _, terminated, truncated, out = normalize_step((0, np.zeros(4), dones, info), vector=True)
    assert terminated.tolist() == [True, False, False, False]
    # A lane flagged by the time limit is truncated even without done (RLMesh's rule).
    assert truncated.tolist() == [False, True, True, False]
    assert out is info
    _, _, terminated, truncated, _ = normalize_step((0, 0, dones, {}), vector=True)
    assert (terminated.tolist(), truncated.tolist()) == (dones.tolist(), [False] * 4)
    _, _, terminated, truncated, _ = normalize_step(
        (0, 0, dones, {"TimeLimit.truncated": True}), vector=True
    )
    assert (terminated.tolist(), truncated.tolist()) == ([False] * 4, [True] * 4)


def test_what_cannot_be_normalised_is_refused() -> None:
    with pytest.raises(ValueError, match="must return a 4- or 5-tuple, got a 3-element result"):
        normalize_step((1, 2, 3), vector=False)
    with pytest.raises(ValueError, match="must return a 4- or 5-tuple, got int"):
        normalize_step(3, vector=False)
    with pytest.raises(TypeError, match="dict of per-lane arrays, got list"):
        normalize_step((0, 0, [True, False], [{}, {}]), vector=True)


# ---------------------------------------------------------------- both env paths


def _leaves(env: GymEnvRuntimeEnv, actions: list[int]) -> spaces_v1.SpaceValue:
    return spaces_v1.SpaceValue(
        leaves=encode_batch(env.info.action_space, np.array(actions), len(actions))
    )


async def test_in_process_old_scalar_env_reports_terminated_and_truncated() -> None:
    env = GymEnvRuntimeEnv(OldGymEnv())
    reset = await env.reset(env_v1.ResetRequest(seeds=[2], episode_ids=["ep"]))
    assert reset.response.infos is not None
    assert not reset.response.infos.entries  # the bare observation came with no info
    masks = []
    completed = []
    for _ in range(5):  # seed 2: 5 steps, ended by the time limit
        step = await env.step(env_v1.StepRequest(action=_leaves(env, [1]), episode_ids=["ep"]))
        masks.append((step.response.terminated_mask, step.response.truncated_mask))
        completed += step.response.completed_episodes
    assert masks == [(b"\x00", b"\x00")] * 4 + [(b"\x00", b"\x01")]
    (episode,) = completed
    assert (episode.step_count, episode.terminated, episode.truncated) == (5, False, True)


async def test_in_process_old_vector_env_reports_per_lane_ends() -> None:
    env = GymEnvRuntimeEnv(OldGymVectorEnv(3))
    await env.reset(env_v1.ResetRequest(seeds=[0, 1, 2], episode_ids=["a", "b", "c"]))
    ends = []
    for _ in range(5):
        step = await env.step(
            env_v1.StepRequest(action=_leaves(env, [0, 0, 0]), episode_ids=["a", "b", "c"])
        )
        ends += [
            (e.env_index, e.step_count, e.terminated, e.truncated)
            for e in step.response.completed_episodes
        ]
    # Seeds 0, 1, 2 last 3, 4, 5 steps; even seeds end by the time limit.
    assert ends == [(0, 3, False, True), (1, 4, True, False), (2, 5, False, True)]


class Policy:
    def predict(self, observation: Any) -> Any:
        return np.int64(observation[1] < 3)


def _summary(report: RuntimeReport) -> list[tuple[Any, ...]]:
    return [
        (e.seed, e.steps, e.reward, e.terminated, e.truncated, e.env_index) for e in report.episodes
    ]


@pytest.mark.network
@pytest.mark.parametrize(
    ("make", "episode_seeds", "expected"),
    [
        (
            OldGymEnv,
            (1, 2, 3, 4),
            [(4, True, False), (5, False, True), (6, True, False), (7, False, True)],
        ),
        (
            functools.partial(OldGymVectorEnv, 3),
            (),
            [(3, False, True)] * 3 + [(6, True, False)] * 3,
        ),
    ],
    ids=["scalar", "vector"],
)
async def test_an_old_gym_env_runs_the_same_in_process_and_served(
    make: Any, episode_seeds: tuple[int, ...], expected: list[tuple[int, bool, bool]]
) -> None:
    options = RunLocalOptions(make(), episode_seeds=episode_seeds, max_episodes=len(expected))
    local = await run_local(Policy(), options)
    with trio.fail_after(60):
        async with serving(make()) as address:
            served = await run_local(Policy(), attrs.evolve(options, env_address=address))
    assert [(e.steps, e.terminated, e.truncated) for e in local.episodes] == expected
    assert _summary(served) == _summary(local)


class Zero:
    def predict(self, observation: Any) -> Any:
        return np.int64(0)


class OldCounter:
    """An old Gym env with an integer observation: the ``cannot unpack int`` case."""

    def __init__(self) -> None:
        self.observation_space = gymnasium.spaces.Discrete(5)
        self.action_space = gymnasium.spaces.Discrete(2)
        self.t = 0

    def reset(self, seed: int | None = None, options: Any = None) -> int:
        self.t = 0
        return 0

    def step(self, action: Any) -> tuple[int, float, bool, dict[str, Any]]:
        self.t += 1
        return self.t, 1.0, self.t == 2, {}


async def test_an_old_env_with_an_integer_observation_runs() -> None:
    report = await run_local(Zero(), RunLocalOptions(OldCounter(), max_episodes=2))
    assert [(e.steps, e.terminated, e.truncated) for e in report.episodes] == [(2, True, False)] * 2
