"""Our env client, on each backend, against the real ``rlmesh.EnvServer`` 0.1.0, checked
against Gymnasium.

Each test serves an env with rlmesh in a subprocess, drives it with
:func:`~trio_rlmesh.transports.grpc.open_env_client`, and replays the same seeds
and actions on a local Gymnasium env: observations, rewards, flags and
completed episodes must be equal.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import trio

from trio_rlmesh import TransportError, spaces
from trio_rlmesh.protocol import core_v1, env_v1, spaces_v1, spec_to_space
from trio_rlmesh.transports.grpc import BackendName, EnvClient, RemoteEnvError, open_env_client

from . import envs

pytestmark = pytest.mark.interop

ServerFactory = Callable[[str], AbstractAsyncContextManager[str]]


def assert_same(actual: Any, expected: Any, path: str = "obs") -> None:
    """Structural equality of decoded and Gymnasium values (exact, dtype-agnostic)."""
    if isinstance(expected, dict):
        assert set(actual) == set(expected), path
        for key in expected:
            assert_same(actual[key], expected[key], f"{path}.{key}")
    elif isinstance(expected, tuple):
        assert len(actual) == len(expected), path
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            assert_same(a, e, f"{path}[{i}]")
    elif isinstance(expected, str):
        assert str(actual) == expected, path
    else:
        np.testing.assert_array_equal(np.asarray(actual), np.asarray(expected), err_msg=path)


def contract_spaces(client: EnvClient) -> tuple[spaces.Space, spaces.Space]:
    spec = client.contract.spec
    assert spec is not None
    assert spec.observation_space is not None
    assert spec.action_space is not None
    return spec_to_space(spec.observation_space), spec_to_space(spec.action_space)


def value(leaves: list[bytes]) -> spaces_v1.SpaceValue:
    return spaces_v1.SpaceValue(leaves=leaves)


def flags(mask: bytes, n: int) -> list[bool]:
    assert len(mask) == n
    return [b != 0 for b in mask]


async def rollout_single(
    client: EnvClient, direct: gym.Env[Any, Any], seed: int, actions: Callable[[int], Any]
) -> int:
    """One episode on both sides; returns its length."""
    obs_space, act_space = contract_spaces(client)
    expected_obs, _ = direct.reset(seed=seed)
    reset = await client.reset(env_v1.ResetRequest(seeds=[seed], episode_ids=[f"ep-{seed}"]))
    assert reset.response.observation is not None
    assert_same(
        spaces.decode_lanes(obs_space, reset.response.observation.leaves, 1)[0], expected_obs
    )
    total = 0.0
    for t in range(10_000):
        act = actions(t)
        expected_obs, reward, terminated, truncated, _ = direct.step(act)
        total += float(reward)
        leaves = spaces.encode_lanes(act_space, [act])
        result = await client.step(env_v1.StepRequest(action=value(leaves)))
        got = result.response
        assert got.observation is not None
        assert_same(spaces.decode_lanes(obs_space, got.observation.leaves, 1)[0], expected_obs)
        assert got.rewards == [float(reward)]
        assert flags(got.terminated_mask, 1) == [terminated]
        assert flags(got.truncated_mask, 1) == [truncated]
        assert result.timings.total_ns is not None
        if terminated or truncated:
            assert len(got.completed_episodes) == 1
            episode = got.completed_episodes[0]
            assert episode.episode_id == f"ep-{seed}"
            assert episode.seed == seed
            assert episode.step_count == t + 1
            assert episode.cumulative_reward == pytest.approx(total)
            assert (episode.terminated, episode.truncated) == (terminated, truncated)
            return t + 1
        assert got.completed_episodes == []
    raise AssertionError("the episode never ended")


async def test_cartpole(env_server: ServerFactory, backend: BackendName) -> None:
    with trio.fail_after(120):
        async with (
            env_server("cartpole") as address,
            open_env_client(address, backend=backend) as client,
        ):
            assert client.num_envs == 1
            assert client.contract.autoreset_mode == core_v1.AutoresetMode.DISABLED
            assert client.server_info.package_version == "0.1.0"
            assert client.subset_step
            direct = envs.build("cartpole")
            for seed in (0, 1, 2):
                rng = np.random.default_rng(seed)
                await rollout_single(
                    client, direct, seed, lambda _t, rng=rng: int(rng.integers(0, 2))
                )
            final = await client.close()
            assert final == []  # every episode already completed


async def test_pendulum(env_server: ServerFactory, backend: BackendName) -> None:
    with trio.fail_after(120):
        async with (
            env_server("pendulum") as address,
            open_env_client(address, backend=backend) as client,
        ):
            direct = envs.build("pendulum")
            rng = np.random.default_rng(7)
            length = await rollout_single(
                client,
                direct,
                7,
                lambda _t: rng.uniform(-2, 2, size=(1,)).astype(np.float32),
            )
            assert length == 200  # truncated by the TimeLimit


async def test_nested_spaces(env_server: ServerFactory, backend: BackendName) -> None:
    with trio.fail_after(120):
        async with (
            env_server("nested") as address,
            open_env_client(address, backend=backend) as client,
        ):
            obs_space, _ = contract_spaces(client)
            assert isinstance(obs_space, spaces.Dict)
            direct = envs.build("nested")
            for seed in (3, 4):
                rng = np.random.default_rng(seed)
                await rollout_single(
                    client,
                    direct,
                    seed,
                    lambda _t, rng=rng: rng.uniform(-1, 1, size=(2,)).astype(np.float32),
                )


async def test_vector_env_next_step_autoreset(
    env_server: ServerFactory, backend: BackendName
) -> None:
    n = 4
    seeds = [10, 11, 12, 13]
    with trio.fail_after(180):
        async with (
            env_server("vector4") as address,
            open_env_client(address, backend=backend) as client,
        ):
            assert client.num_envs == n
            assert client.contract.autoreset_mode == core_v1.AutoresetMode.NEXT_STEP
            assert not client.subset_step
            obs_space, act_space = contract_spaces(client)
            direct = envs.build("vector4")
            expected_obs, _ = direct.reset(seed=seeds)
            reset = await client.reset(
                env_v1.ResetRequest(seeds=seeds, episode_ids=[f"a{k}" for k in range(n)])
            )
            assert reset.response.observation is not None
            assert_same(
                spaces.decode_batch(obs_space, reset.response.observation.leaves, n),
                expected_obs,
            )
            rng = np.random.default_rng(0)
            completed_direct: list[int] = []
            completed_remote: list[int] = []
            ids = [f"a{k}" for k in range(n)]
            for t in range(300):
                actions = rng.integers(0, 2, size=n)
                expected_obs, rewards, terminated, truncated, _ = direct.step(actions)
                step = await client.step(
                    env_v1.StepRequest(
                        action=value(spaces.encode_batch(act_space, actions, n)),
                        episode_ids=list(ids),
                    )
                )
                got = step.response
                assert got.observation is not None
                assert_same(spaces.decode_batch(obs_space, got.observation.leaves, n), expected_obs)
                assert got.rewards == [float(r) for r in rewards]
                assert flags(got.terminated_mask, n) == terminated.tolist()
                assert flags(got.truncated_mask, n) == truncated.tolist()
                completed_direct += [k for k in range(n) if terminated[k] or truncated[k]]
                completed_remote += [e.env_index for e in got.completed_episodes]
                for episode in got.completed_episodes:
                    assert episode.episode_id == ids[episode.env_index]
                    ids[episode.env_index] = f"t{t}-{episode.env_index}"
            assert completed_remote == completed_direct
            assert len(completed_direct) >= 4


async def test_lane_list_server_steps_lanes_concurrently(
    env_server: ServerFactory, backend: BackendName
) -> None:
    n = 4
    with trio.fail_after(180):
        async with (
            env_server("lanes4") as address,
            open_env_client(address, backend=backend) as client,
        ):
            assert client.num_envs == n
            assert client.subset_step
            assert client.capabilities.get("subset_step") == "true"  # the wire's own spelling
            obs_space, act_space = contract_spaces(client)
            lanes = envs.build("lanes4")
            episodes = [0] * n

            async def drive(k: int) -> None:
                direct = lanes[k]
                rng = np.random.default_rng(100 + k)
                for episode in range(2):
                    seed = 100 * k + episode
                    expected, _ = direct.reset(seed=seed)
                    reset = await client.reset(
                        env_v1.ResetRequest(seeds=[seed], env_indices=[k], episode_ids=[f"{k}"])
                    )
                    assert reset.response.observation is not None
                    got = spaces.decode_lanes(obs_space, reset.response.observation.leaves, 1)
                    assert_same(got[0], expected)
                    done = False
                    while not done:
                        act = int(rng.integers(0, 2))
                        expected, reward, terminated, truncated, _ = direct.step(act)
                        step = await client.step(
                            env_v1.StepRequest(
                                action=value(spaces.encode_lanes(act_space, [act])),
                                env_indices=[k],
                            )
                        )
                        response = step.response
                        assert response.env_indices == [k]
                        assert response.observation is not None
                        got = spaces.decode_lanes(obs_space, response.observation.leaves, 1)
                        assert_same(got[0], expected)
                        assert response.rewards == [float(reward)]
                        assert flags(response.terminated_mask, 1) == [terminated]
                        assert flags(response.truncated_mask, 1) == [truncated]
                        done = terminated or truncated
                        if done:
                            assert [e.env_index for e in response.completed_episodes] == [k]
                            assert response.completed_episodes[0].seed == seed
                    episodes[k] += 1

            async with trio.open_nursery() as nursery:
                for k in range(n):
                    nursery.start_soon(drive, k)
            assert episodes == [2] * n
            assert client.statistics().stale_replies == 0


async def test_our_client_and_rlmesh_remote_env_see_the_same_cartpole_run(
    env_server: ServerFactory, backend: BackendName
) -> None:
    """The same seeds and actions through our client and through ``rlmesh.RemoteEnv``
    (each against its own rlmesh server) give the same observations, rewards and flags,
    step for step, across several episodes. (Their speeds are bench figures 5s and 5a.)"""
    steps = 300
    Trace = list[tuple[Any, float, bool, bool]]
    with trio.fail_after(300):
        ours: Trace = []
        async with (
            env_server("cartpole") as address,
            open_env_client(address, backend=backend) as client,
        ):
            obs_space, act_space = contract_spaces(client)
            leaves = [spaces.encode_lanes(act_space, [a]) for a in (0, 1)]
            await client.reset(env_v1.ResetRequest(seeds=[0]))
            for t in range(steps):
                step = await client.step(env_v1.StepRequest(action=value(leaves[t % 2])))
                got = step.response
                assert got.observation is not None
                done = flags(got.terminated_mask, 1)[0], flags(got.truncated_mask, 1)[0]
                obs = spaces.decode_lanes(obs_space, got.observation.leaves, 1)[0]
                ours.append((obs, float(got.rewards[0]), *done))
                if any(done):
                    await client.reset(env_v1.ResetRequest(seeds=[t]))

        async with env_server("cartpole") as address:
            import rlmesh

            def reference() -> Trace:
                remote = rlmesh.RemoteEnv(address)
                trace: Trace = []
                try:
                    remote.reset(seed=0)
                    for t in range(steps):
                        obs, reward, terminated, truncated, _ = remote.step(t % 2)
                        trace.append((obs, float(reward), bool(terminated), bool(truncated)))
                        if terminated or truncated:
                            remote.reset(seed=t)
                    return trace
                finally:
                    remote.close()

            theirs = await trio.to_thread.run_sync(reference)
    # Alternating actions end a CartPole episode within a few dozen steps: several resets.
    assert sum(terminated for _, _, terminated, _ in theirs) >= 3
    assert len(ours) == len(theirs) == steps
    for t, ((obs, *rest), (expected_obs, *expected_rest)) in enumerate(
        zip(ours, theirs, strict=True)
    ):
        assert_same(obs, expected_obs, f"step {t} obs")
        assert rest == expected_rest, f"step {t}"


async def test_an_env_that_raises_is_the_remote_env_error(
    env_server: ServerFactory, backend: BackendName
) -> None:
    """Issue 9 §4: rlmesh answers an in-band EnvError and ends the Join stream; the caller
    gets the EnvError with rlmesh's code and message, every time."""
    with trio.fail_after(120):
        async with env_server("raises") as address:
            for _ in range(5):
                async with open_env_client(address, backend=backend) as client:
                    _, act_space = contract_spaces(client)
                    action = env_v1.StepRequest(action=value(spaces.encode_lanes(act_space, [1])))
                    await client.reset()
                    await client.step(action)
                    with pytest.raises(RemoteEnvError) as info:
                        await client.step(action)
                    assert info.value.code == "INTERNAL"
                    assert not info.value.recoverable
                    assert "INTERNAL: step failed: ValueError: the env broke" in str(info.value)
                    # rlmesh closed the Join stream after the non-recoverable error.
                    with pytest.raises(TransportError, match="the server ended the Join stream"):
                        await client.step(action)
