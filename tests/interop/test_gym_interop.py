"""trio_rlmesh.gym's remote envs against the real ``rlmesh.EnvServer`` 0.1.0.

Each test serves an env with rlmesh in a subprocess and drives it through our remote envs,
async (in the test's trio run) and sync (``RemoteEnv`` / ``RemoteVectorEnv`` from a worker
thread, as a training script would): ``check_env`` passes as it does on the env itself, and
trajectories equal a direct Gymnasium rollout with the same seeds and actions.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

import gymnasium as gym
import numpy as np
import pytest
import trio
from gymnasium.utils.env_checker import check_env
from gymnasium.vector import AutoresetMode

from tests.gym.envs import assert_same
from tests.gym.support import NO_SPEC_WARNING, gymnasium_warnings
from trio_rlmesh.gym import ENV_ID, RemoteEnv, RemoteVectorEnv, open_remote_env

from . import envs

pytestmark = pytest.mark.interop

ServerFactory = Callable[[str], AbstractAsyncContextManager[str]]
T = TypeVar("T")

CHECKED = ["cartpole", "pendulum", "frozenlake", "blackjack", "nested"]
"""CartPole-v1, Pendulum-v1, FrozenLake-v1, Blackjack-v1 (Tuple) and a Dict observation."""


async def in_thread(fn: Callable[[], T]) -> T:
    """Run synchronous client code in a worker thread, as a training script would run."""
    return await trio.to_thread.run_sync(fn, abandon_on_cancel=True)


@pytest.mark.parametrize("kind", CHECKED)
async def test_check_env_passes_as_on_the_env_itself(env_server: ServerFactory, kind: str) -> None:
    baseline = gymnasium_warnings(
        lambda: check_env(envs.build(kind).unwrapped, skip_render_check=True)
    )

    def check(address: str) -> tuple[list[str], list[str]]:
        with RemoteEnv(address) as env:
            direct = gymnasium_warnings(lambda: check_env(env))
        made = gym.make(ENV_ID, address=address)
        try:
            via_make = gymnasium_warnings(lambda: check_env(made.unwrapped))
        finally:
            made.close()
        return direct, via_make

    with trio.fail_after(120):
        async with env_server(kind) as address:
            direct, via_make = await in_thread(lambda: check(address))
    assert direct[:-1] == baseline
    assert NO_SPEC_WARNING in direct[-1]
    assert via_make == baseline


@pytest.mark.parametrize("kind", CHECKED)
async def test_trajectories_equal_direct_gymnasium(env_server: ServerFactory, kind: str) -> None:
    def rollout_sync(address: str) -> None:
        direct = envs.build(kind)
        with RemoteEnv(address) as env:
            for seed in (0, 1):
                env.action_space.seed(seed)
                obs, info = env.reset(seed=seed)
                expected, expected_info = direct.reset(seed=seed)
                assert_same(obs, expected)
                assert info == expected_info  # no client-side keys
                for _ in range(300):
                    action = env.action_space.sample()
                    obs, reward, terminated, truncated, _ = env.step(action)
                    want = direct.step(action)
                    assert_same(obs, want[0])
                    assert (reward, terminated, truncated) == (float(want[1]), want[2], want[3])
                    if terminated or truncated:
                        break

    with trio.fail_after(180):
        async with env_server(kind) as address:
            async with open_remote_env(address) as env:
                direct = envs.build(kind)
                env.action_space.seed(7)
                obs, info = await env.reset(seed=7)
                expected, expected_info = direct.reset(seed=7)
                assert_same(obs, expected)
                assert info == expected_info
                for _ in range(300):
                    action = env.action_space.sample()
                    obs, reward, terminated, truncated, _ = await env.step(action)
                    want = direct.step(action)
                    assert_same(obs, want[0])
                    assert (reward, terminated, truncated) == (float(want[1]), want[2], want[3])
                    if terminated or truncated:
                        break
            await in_thread(lambda: rollout_sync(address))


async def test_vector_env_with_next_step_autoreset(env_server: ServerFactory) -> None:
    n = 4

    def drive(address: str) -> int:
        direct = envs.build("vector4")
        ended = 0
        with RemoteVectorEnv(address, num_envs=n) as remote:
            assert remote.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP
            assert remote.observation_space == direct.observation_space
            obs, infos = remote.reset(seed=10)
            assert_same(obs, direct.reset(seed=10)[0])
            assert infos == {}
            rng = np.random.default_rng(0)
            for _ in range(150):
                actions = rng.integers(0, 2, size=n)
                got = remote.step(actions)
                want = direct.step(actions)
                assert_same(got[0], want[0])
                for a, b in zip(got[1:4], want[1:4], strict=True):
                    np.testing.assert_array_equal(a, b)
                ended += int(np.sum(got[2] | got[3]))
        return ended

    with trio.fail_after(180):
        async with env_server("vector4") as address:
            assert await in_thread(lambda: drive(address)) >= 4


async def test_reset_mask_on_a_lane_list_server(env_server: ServerFactory) -> None:
    n = 4

    def drive(address: str) -> None:
        direct = gym.vector.SyncVectorEnv(
            [lambda: gym.make("CartPole-v1") for _ in range(n)],
            autoreset_mode=AutoresetMode.DISABLED,
        )
        with RemoteVectorEnv(address) as remote:
            assert remote.metadata["autoreset_mode"] is AutoresetMode.DISABLED
            obs, _ = remote.reset(seed=[1, 2, 3, 4])
            assert_same(obs, direct.reset(seed=[1, 2, 3, 4])[0])
            for t in range(5):
                actions = np.array([(t + k) % 2 for k in range(n)])
                assert_same(remote.step(actions)[0], direct.step(actions)[0])
            mask = np.array([True, False, False, True])
            obs, infos = remote.reset(seed=[50, 0, 0, 53], options={"reset_mask": mask})
            expected, _ = direct.reset(seed=[50, 0, 0, 53], options={"reset_mask": mask})
            assert_same(obs, expected)
            assert infos == {}
            actions = np.array([1, 1, 0, 0])
            assert_same(remote.step(actions)[0], direct.step(actions)[0])

    with trio.fail_after(180):
        async with env_server("lanes4") as address:
            await in_thread(lambda: drive(address))


async def test_render_decodes_rlmesh_png_frames(env_server: ServerFactory) -> None:
    with trio.fail_after(120):
        async with env_server("frames") as address, open_remote_env(address) as env:
            direct = envs.build("frames")
            assert env.render_mode == "rgb_array"
            await env.reset(seed=0)
            direct.reset(seed=0)
            for action in (1, 0, 1):
                await env.step(action)
                direct.step(action)
                # rlmesh filters PNG rows adaptively: every filter type gets exercised
                np.testing.assert_array_equal(await env.render(), direct.render())


async def test_rlmesh_remote_env_adds_episode_ids_to_infos_and_we_do_not(
    env_server: ServerFactory,
) -> None:
    """A documented difference: rlmesh's client adds ``episode_ids`` (fresh each episode),
    which makes check_env's info comparison fail; ours returns the env's info as it is."""

    def both(address: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # rlmesh warns about unpinned workflow editions
            import rlmesh.numpy

            theirs = rlmesh.numpy.RemoteEnv(address)
        try:
            _, their_info = theirs.reset(seed=0)
        finally:
            theirs.close()
        with RemoteEnv(address) as ours:
            _, our_info = ours.reset(seed=0)
        _, direct_info = envs.build("cartpole").reset(seed=0)
        return their_info, our_info, direct_info

    with trio.fail_after(120):
        async with env_server("cartpole") as address:
            theirs, ours, direct = await in_thread(lambda: both(address))
    assert set(theirs) == {"episode_ids"}
    assert ours == direct == {}
