"""open_remote_env / open_remote_vector_env against our serve_env over memory:// addresses."""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import trio
from gymnasium.vector import AutoresetMode

import trio_rlmesh
from trio_rlmesh import CodecError
from trio_rlmesh.gym import (
    AsyncRemoteEnv,
    AsyncRemoteVectorEnv,
    open_remote_env,
    open_remote_vector_env,
)
from trio_rlmesh.transports.grpc import GrpcSettings, RemoteEnvError, RemoteEnvTimeout, serve_env

from .envs import BlockingEnv, EchoEnv, FramesEnv, NestedEnv, assert_same

_names = itertools.count()


@asynccontextmanager
async def served(env: Any, address: str | None = None, **kwargs: Any) -> AsyncIterator[str]:
    """Serve ``env`` at a fresh memory:// address for the block (inline: no threads)."""
    kwargs.setdefault("user_code", "inline")
    address = address or f"memory://gym-{next(_names)}"
    async with trio.open_nursery() as nursery:
        address = await nursery.start(functools.partial(serve_env, env, address, **kwargs))
        yield address
        nursery.cancel_scope.cancel()


async def rollout(
    env: AsyncRemoteEnv, direct: gym.Env[Any, Any], seed: int, act: Callable[[int], Any]
) -> int:
    """One episode through ``env`` and ``direct`` side by side; returns its length."""
    obs, info = await env.reset(seed=seed)
    expected, expected_info = direct.reset(seed=seed)
    assert_same(obs, expected)
    assert info == expected_info
    for t in itertools.count():
        action = act(t)
        obs, reward, terminated, truncated, info = await env.step(action)
        expected, expected_reward, expected_terminated, expected_truncated, _ = direct.step(action)
        assert_same(obs, expected)
        assert type(reward) is float
        assert reward == expected_reward
        assert (terminated, truncated) == (expected_terminated, expected_truncated)
        assert type(terminated) is bool
        assert type(truncated) is bool
        if terminated or truncated:
            return t + 1
    raise AssertionError("unreachable")


async def test_cartpole_rollouts_equal_direct_gymnasium() -> None:
    async with served(gym.make("CartPole-v1")) as address, open_remote_env(address) as env:
        direct = gym.make("CartPole-v1")
        assert env.observation_space == direct.observation_space
        assert env.action_space == direct.action_space
        assert env.spec_id == "CartPole-v1"
        assert env.render_mode is None
        assert env.metadata == {"render_modes": [], "render_fps": 50}
        for seed in (0, 1, 2):
            rng = np.random.default_rng(seed)
            await rollout(env, direct, seed, lambda _t, rng=rng: int(rng.integers(2)))


async def test_observations_are_fresh_writable_arrays_in_gymnasium_dtypes() -> None:
    async with served(NestedEnv()) as address, open_remote_env(address) as env:
        direct = NestedEnv()
        first, _ = await env.reset(seed=5)
        expected, _ = direct.reset(seed=5)
        assert_same(first, expected)
        assert first in env.observation_space
        assert first["pos"].dtype == np.float32
        assert first["half"].dtype == np.float16
        assert first["flags"].dtype == np.int8  # Gymnasium's MultiBinary dtype (uint8 on the wire)
        assert type(first["mode"]) is np.int64
        assert type(first["label"]) is str
        assert isinstance(first["pair"], tuple)
        assert first["pos"].flags.writeable
        first["pos"][:] = 0  # ours to keep and change
        action = np.array([0.5, -0.25], np.float32)
        second, reward, *_ = await env.step(action)
        expected, expected_reward, *_ = direct.step(action)
        assert_same(second, expected)
        assert reward == expected_reward
        assert not np.shares_memory(first["pixels"], second["pixels"])


async def test_infos_and_options_reach_the_caller_as_the_env_wrote_them() -> None:
    async with served(EchoEnv()) as address, open_remote_env(address) as env:
        _, info = await env.reset(seed=3, options={"level": 2, "tags": ["a", "b"]})
        assert info == {"options": {"level": 2, "tags": ["a", "b"]}, "seed": 3}
        _, info = await env.reset()
        assert info == {"options": None, "seed": None}
        _, _, _, _, info = await env.step(1)
        # numpy values cross the wire as RLMesh sends them; no key is added
        assert info == {"t": 1, "pair": [1, -1], "flag": True}


async def test_an_action_outside_the_space_raises_before_sending() -> None:
    async with served(EchoEnv()) as address, open_remote_env(address) as env:
        await env.reset(seed=0)
        with pytest.raises(CodecError) as caught:
            await env.step(7)
        assert isinstance(caught.value, trio_rlmesh.Error)
        assert caught.value.operation == "env.step"
        obs, *_ = await env.step(1)  # nothing reached the env
        assert obs.tolist() == [1.0, 1.0]


async def test_an_env_failure_is_a_remote_env_error() -> None:
    async with served(EchoEnv()) as address, open_remote_env(address) as env:
        await env.reset(seed=0)
        with pytest.raises(RemoteEnvError) as caught:
            await env.step(2)
        assert isinstance(caught.value, trio_rlmesh.EnvError)
        assert caught.value.operation == "env.step"
        assert "action 2 breaks the echo env" in str(caught.value)


async def test_render_decodes_the_png_frame() -> None:
    async with served(FramesEnv()) as address, open_remote_env(address) as env:
        direct = FramesEnv()
        assert env.render_mode == "rgb_array"
        assert env.metadata["render_modes"] == ["rgb_array"]
        await env.reset(seed=0)
        direct.reset(seed=0)
        for action in (1, 0):
            await env.step(action)
            direct.step(action)
            frame = await env.render()
            assert frame.dtype == np.uint8
            np.testing.assert_array_equal(frame, direct.render())


async def test_render_without_a_render_mode_is_none() -> None:
    async with served(FramesEnv(render_mode=None)) as address, open_remote_env(address) as env:
        assert env.render_mode is None
        assert env.metadata["render_modes"] == []
        await env.reset()
        assert await env.render() is None


async def test_a_vector_endpoint_is_refused_by_open_remote_env() -> None:
    vector = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")
    async with served(vector) as address:
        with pytest.raises(trio_rlmesh.SpecError, match="serves 2 lanes"):
            async with open_remote_env(address):
                pass  # pragma: no cover
        async with open_remote_vector_env(address) as envs:
            assert envs.num_envs == 2


async def test_a_second_concurrent_call_is_refused() -> None:
    env_code = BlockingEnv()
    async with served(env_code, user_code="thread") as address, open_remote_env(address) as env:
        await env.reset(seed=0)
        env_code.hold()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(env.step, 0)
            await trio.to_thread.run_sync(env_code.entered.wait)
            with pytest.raises(trio.BusyResourceError):
                await env.step(1)
            env_code.release()
        obs, *_ = await env.step(1)
        assert obs.tolist() == [2.0]


async def test_cancelling_a_step_leaves_the_env_usable() -> None:
    env_code = BlockingEnv()
    with trio.fail_after(30):
        async with (
            served(env_code, user_code="thread") as address,
            open_remote_env(address) as env,
        ):
            await env.reset(seed=0)
            env_code.hold()
            with trio.CancelScope() as scope:

                async def cancel_once_entered() -> None:
                    await trio.to_thread.run_sync(env_code.entered.wait)
                    scope.cancel()

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(cancel_once_entered)
                    await env.step(0)
            assert scope.cancelled_caught
            env_code.release()
            # The server still ran the cancelled step; its late reply is skipped.
            obs, _ = await env.reset(seed=1)
            assert obs.tolist() == [0.0]
            obs, *_ = await env.step(1)
            assert obs.tolist() == [1.0]
            assert env._client.statistics().stale_replies == 1


@pytest.mark.parametrize("per_call", [False, True])
async def test_a_call_past_its_deadline_times_out(
    mock_clock: trio.testing.MockClock, per_call: bool
) -> None:
    env_code = BlockingEnv()
    request_timeout = 300.0 if per_call else 2.5
    async with (
        served(env_code, user_code="thread") as address,
        open_remote_env(address, request_timeout=request_timeout) as env,
    ):
        await env.reset(seed=0)
        env_code.hold()
        # Jump the clock only from here: the env's code runs on a thread, in real time, and
        # the held step is then the only thing anyone waits for.
        mock_clock.autojump_threshold = 0
        started = trio.current_time()
        try:
            with pytest.raises(RemoteEnvTimeout) as caught:
                await (env.step(0, timeout=2.5) if per_call else env.step(0))
        finally:
            env_code.release()
        assert trio.current_time() - started == pytest.approx(2.5)
        assert isinstance(caught.value, trio_rlmesh.OperationTimeout)
        assert caught.value.operation == "env.step"


async def test_the_token_passes_through() -> None:
    async with served(EchoEnv(), token="s3cret") as address:
        with pytest.raises(trio_rlmesh.TransportError, match="token"):
            async with open_remote_env(address) as env:
                await env.reset()
        async with open_remote_env(address, token="s3cret") as env:
            obs, _ = await env.reset(seed=4)
            assert obs.tolist() == [4.0, 0.0]


@pytest.mark.network
async def test_the_grpclib_backend_passes_through() -> None:
    with trio.fail_after(30):
        async with (
            served(gym.make("CartPole-v1"), "127.0.0.1:0") as address,
            open_remote_env(address, backend="grpclib") as env,
        ):
            direct = gym.make("CartPole-v1")
            await rollout(env, direct, 9, lambda t: t % 2)


async def test_close_is_idempotent_and_calls_after_it_fail() -> None:
    async with served(EchoEnv()) as address, open_remote_env(address) as env:
        await env.reset()
        await env.aclose()
        await env.aclose()
        with pytest.raises(trio_rlmesh.TransportError, match="closed"):
            await env.step(0)


# ------------------------------------------------------------------------------ vector


def make_vector(n: int, mode: AutoresetMode = AutoresetMode.NEXT_STEP) -> Any:
    return gym.vector.SyncVectorEnv(
        [lambda: gym.make("CartPole-v1") for _ in range(n)], autoreset_mode=mode
    )


async def test_vector_rollout_equals_a_direct_next_step_vector_env() -> None:
    n = 3
    async with served(make_vector(n)) as address, open_remote_vector_env(address) as envs:
        direct = make_vector(n)
        assert envs.num_envs == n
        assert envs.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP
        assert envs.autoreset_mode is AutoresetMode.NEXT_STEP
        assert envs.single_observation_space == direct.single_observation_space
        assert envs.observation_space == direct.observation_space
        assert envs.action_space == direct.action_space
        obs, infos = await envs.reset(seed=7)  # lane i gets 7 + i, as in Gymnasium
        expected, _ = direct.reset(seed=7)
        assert_same(obs, expected)
        assert infos == {}
        rng = np.random.default_rng(0)
        ended = 0
        for _ in range(60):
            actions = rng.integers(0, 2, size=n)
            got = await envs.step(actions)
            want = direct.step(actions)
            assert_same(got[0], want[0])
            assert got[1].dtype == np.float64
            assert got[2].dtype == got[3].dtype == np.bool_
            for a, b in zip(got[1:4], want[1:4], strict=True):
                np.testing.assert_array_equal(a, b)
            ended += int(np.sum(got[2] | got[3]))
        assert ended >= 3  # NEXT_STEP autoresets happened on the server


async def test_vector_infos_come_back_as_per_lane_arrays() -> None:
    n = 2
    vector = gym.wrappers.vector.RecordEpisodeStatistics(make_vector(n))
    async with served(vector) as address, open_remote_vector_env(address) as envs:
        await envs.reset(seed=0)
        for _ in range(200):
            _, _, terminated, truncated, infos = await envs.step(np.ones(n, np.int64))
            if (terminated | truncated).any():
                break
        assert infos["_episode"].dtype == np.bool_
        assert infos["_episode"].tolist() == (terminated | truncated).tolist()
        assert infos["episode"]["l"].shape == (n,)
        assert infos["episode"]["l"][infos["_episode"]].min() > 0


async def test_vector_seeds_are_gymnasiums() -> None:
    n = 2
    async with served(make_vector(n)) as address, open_remote_vector_env(address) as envs:
        direct = make_vector(n)
        obs, _ = await envs.reset(seed=[11, 4])
        assert_same(obs, direct.reset(seed=[11, 4])[0])
        obs, _ = await envs.reset(seed=[None, None])
        with pytest.raises(trio_rlmesh.SpecError, match="every lane or none"):
            await envs.reset(seed=[1, None])
        with pytest.raises(trio_rlmesh.SpecError, match="3 seeds for 2 lanes"):
            await envs.reset(seed=[1, 2, 3])


async def test_reset_mask_resets_single_lanes_of_a_lane_endpoint() -> None:
    n = 3
    lanes = [gym.make("CartPole-v1") for _ in range(n)]
    async with served(lanes) as address, open_remote_vector_env(address) as envs:
        direct = gym.vector.SyncVectorEnv(
            [lambda: gym.make("CartPole-v1") for _ in range(n)],
            autoreset_mode=AutoresetMode.DISABLED,
        )
        assert envs.subset_step
        assert envs.autoreset_mode is AutoresetMode.DISABLED
        obs, _ = await envs.reset(seed=0)
        assert_same(obs, direct.reset(seed=0)[0])
        for _ in range(3):
            actions = np.array([1, 0, 1])
            got = await envs.step(actions)
            assert_same(got[0], direct.step(actions)[0])
        mask = np.array([False, True, False])
        obs, infos = await envs.reset(seed=[0, 21, 0], options={"reset_mask": mask})
        expected, _ = direct.reset(seed=[0, 21, 0], options={"reset_mask": mask})
        assert_same(obs, expected)
        assert infos == {}
        actions = np.array([0, 1, 1])
        assert_same((await envs.step(actions))[0], direct.step(actions)[0])


async def test_reset_mask_infos_merge_as_in_gymnasium() -> None:
    n = 3
    async with (
        served([EchoEnv() for _ in range(n)]) as address,
        open_remote_vector_env(address) as envs,
    ):
        direct = gym.vector.SyncVectorEnv(
            [EchoEnv for _ in range(n)], autoreset_mode=AutoresetMode.DISABLED
        )
        await envs.reset(seed=0)
        direct.reset(seed=0)
        mask = np.array([True, False, True])
        obs, infos = await envs.reset(seed=5, options={"reset_mask": mask})
        expected, expected_infos = direct.reset(seed=5, options={"reset_mask": mask.copy()})
        assert_same(obs, expected)
        np.testing.assert_equal(infos, expected_infos)
        assert infos["seed"].tolist() == [5, 0, 7]
        assert infos["_seed"].tolist() == [True, False, True]
        with pytest.raises(trio_rlmesh.SpecError, match="selects no lane"):
            await envs.reset(options={"reset_mask": np.zeros(n, bool)})


async def test_vector_render_picks_a_lane() -> None:
    async with (
        served([FramesEnv(), FramesEnv()]) as address,
        open_remote_vector_env(address) as envs,
    ):
        direct = [FramesEnv(), FramesEnv()]
        await envs.reset(seed=0)
        for lane in direct:
            lane.reset(seed=0)
        await envs.step(np.array([1, 1]))
        direct[1].step(1)
        await envs.reset(seed=0, options={"reset_mask": np.array([True, False])})
        np.testing.assert_array_equal(await envs.render(env_index=1), direct[1].render())
        np.testing.assert_array_equal(await envs.render(), direct[0].render())


async def test_the_workflow_edition_and_settings_pass_through() -> None:
    big = gym.wrappers.TransformObservation(
        EchoEnv(),
        lambda obs: np.full((32, 32, 3), int(obs[0]) % 256, np.uint8),
        gym.spaces.Box(0, 255, (32, 32, 3), np.uint8),
    )
    async with served(big) as address:
        with pytest.raises(trio_rlmesh.ProtocolError, match="no workflow edition in common"):
            async with open_remote_env(address, workflow_edition="1999.01"):
                pass  # pragma: no cover
        settings = GrpcSettings(max_message_size=2048)  # the handshake fits, a reset does not
        async with open_remote_env(address, settings=settings) as env:
            with pytest.raises(trio_rlmesh.TransportError):
                await env.reset(seed=0)
        async with open_remote_env(address, workflow_edition="2026.06") as env:
            await env.reset(seed=0)


async def test_reset_mask_needs_a_lane_endpoint() -> None:
    vector = make_vector(2, AutoresetMode.DISABLED)
    async with served(vector) as address, open_remote_vector_env(address) as envs:
        assert envs.autoreset_mode is AutoresetMode.DISABLED
        assert not envs.subset_step
        await envs.reset(seed=0)
        with pytest.raises(trio_rlmesh.SpecError, match="no subset_step"):
            await envs.reset(options={"reset_mask": np.array([True, False])})
        # a full mask is an ordinary reset
        await envs.reset(seed=0, options={"reset_mask": np.array([True, True])})


async def test_a_single_env_is_a_vector_of_one() -> None:
    async with served(EchoEnv()) as address, open_remote_vector_env(address) as envs:
        assert isinstance(envs, AsyncRemoteVectorEnv)
        assert envs.num_envs == 1
        obs, _ = await envs.reset(seed=2)
        assert obs.tolist() == [[2.0, 0.0]]
        obs, rewards, terminated, truncated, _ = await envs.step(np.array([1]))
        assert obs.tolist() == [[1.0, 1.0]]
        assert rewards.tolist() == [0.5]
        assert terminated.tolist() == truncated.tolist() == [False]


async def test_no_deadline_at_all() -> None:
    async with (
        served(EchoEnv()) as address,
        open_remote_env(address, request_timeout=math.inf) as env,
    ):
        assert env._client.request_timeout is None
        await env.reset(seed=0)
        await env.step(0, timeout=math.inf)


async def test_an_observation_over_16_kib() -> None:
    """A reply larger than one HTTP/2 frame (an 84x84x3 image)."""
    image = gym.wrappers.TransformObservation(
        EchoEnv(),
        lambda obs: np.full((84, 84, 3), int(obs[0]) % 256, np.uint8),
        gym.spaces.Box(0, 255, (84, 84, 3), np.uint8),
    )
    async with served(image) as address, open_remote_env(address) as env:
        obs, _ = await env.reset(seed=3)
        assert obs.shape == (84, 84, 3)
        assert int(obs[0, 0, 0]) == 3
