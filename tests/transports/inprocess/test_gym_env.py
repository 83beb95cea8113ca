"""GymEnvRuntimeEnv: a Gymnasium env as a runtime env, messages as a served env sends them."""

from __future__ import annotations

import threading
from typing import Any

import gymnasium
import numpy as np
import pytest

from trio_rlmesh import EnvError
from trio_rlmesh.protocol import core_v1, env_v1, meta_to_python, spaces_v1
from trio_rlmesh.runtime._interfaces import RuntimeEnv
from trio_rlmesh.runtime._worker import UserCode
from trio_rlmesh.spaces import decode_batch, encode_batch
from trio_rlmesh.transports.inprocess import GymEnvRuntimeEnv


class Countdown(gymnasium.Env[np.ndarray, np.int64]):
    """Ends after ``length`` steps; reward 1 per step; info reports success."""

    def __init__(self, length: int = 3) -> None:
        self.observation_space = gymnasium.spaces.Box(-10, 10, (1,), np.float32)
        self.action_space = gymnasium.spaces.Discrete(2)
        self.length = length
        self.t = 0

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {"seeded": seed is not None}

    def step(self, action: Any) -> Any:
        self.t += 1
        done = self.t >= self.length
        return np.full(1, self.t, np.float32), 1.0, done, False, {"is_success": done}


def _step_request(env: GymEnvRuntimeEnv, actions: list[int], ids: list[str]) -> env_v1.StepRequest:
    leaves = encode_batch(env.info.action_space, np.array(actions), len(actions))
    return env_v1.StepRequest(action=spaces_v1.SpaceValue(leaves=leaves), episode_ids=ids)


async def test_scalar_env_episode_is_tracked_with_seed_and_final_info() -> None:
    env = GymEnvRuntimeEnv(Countdown())
    assert isinstance(env, RuntimeEnv)
    assert env.contract.num_envs == 1
    assert env.contract.autoreset_mode == core_v1.AutoresetMode.DISABLED
    reset = await env.reset(env_v1.ResetRequest(seeds=[5], episode_ids=["ep-1"]))
    assert meta_to_python(reset.response.infos) == {"seeded": True}
    assert reset.timings.user_ns is not None
    completed = []
    for _ in range(3):
        step = await env.step(_step_request(env, [1], ["ep-1"]))
        completed += step.response.completed_episodes
    assert step.response.observation is not None
    obs = decode_batch(env.info.observation_space, step.response.observation.leaves, 1)
    assert obs.tolist() == [[3.0]]
    assert step.response.terminated_mask == b"\x01"
    (episode,) = completed
    assert episode.episode_id == "ep-1"
    assert episode.seed == 5
    assert episode.step_count == 3
    assert episode.cumulative_reward == 3.0
    assert episode.terminated
    assert meta_to_python(episode.final_info) == {"is_success": True}


async def test_vector_env_uses_next_step_and_adopts_the_pushed_id() -> None:
    vec = gymnasium.vector.SyncVectorEnv([lambda: Countdown(2), lambda: Countdown(3)])
    env = GymEnvRuntimeEnv(vec)
    assert env.contract.num_envs == 2
    assert env.contract.autoreset_mode == core_v1.AutoresetMode.NEXT_STEP
    await env.reset(env_v1.ResetRequest(seeds=[1, 2], episode_ids=["a0", "b0"]))
    done: list[env_v1.EpisodeMetadata] = []
    ids = ["a0", "b0"]
    for t in range(6):
        step = await env.step(_step_request(env, [0, 0], ids))
        for episode in step.response.completed_episodes:
            done.append(episode)
            ids[episode.env_index] = f"{'ab'[episode.env_index]}{t + 1}"
    assert [(e.episode_id, e.step_count, e.seed) for e in done][:3] == [
        ("a0", 2, 1),
        ("b0", 3, 2),
        ("a2", 2, None),
    ]


@pytest.mark.parametrize("user_code", ["thread", "inline"])
async def test_every_env_call_runs_where_user_code_says_and_close_runs_once(
    user_code: UserCode,
) -> None:
    threads: list[int] = []

    class Where(Countdown):
        def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
            threads.append(threading.get_ident())
            return super().reset(seed=seed, options=options)

        def step(self, action: Any) -> Any:
            threads.append(threading.get_ident())
            return super().step(action)

        def close(self) -> None:
            threads.append(threading.get_ident())

    env = GymEnvRuntimeEnv(Where(), user_code=user_code)
    await env.reset(env_v1.ResetRequest())
    await env.step(_step_request(env, [0], [""]))
    await env.close(1.0)
    await env.close(1.0)
    assert len(threads) == 3
    if user_code == "thread":
        # One dedicated thread for every call of this env, not the trio thread.
        assert len(set(threads)) == 1
        assert threads[0] != threading.get_ident()
    else:
        assert set(threads) == {threading.get_ident()}
    with pytest.raises(EnvError, match=r"env\.step cannot run: the object was closed"):
        await env.step(_step_request(env, [0], [""]))


def test_user_code_defaults_to_thread_and_rejects_unknown_modes() -> None:
    assert GymEnvRuntimeEnv(Countdown()).user_code == "thread"
    with pytest.raises(ValueError, match="user_code must be 'thread' or 'inline'"):
        GymEnvRuntimeEnv(Countdown(), user_code="fast")  # type: ignore[arg-type]
