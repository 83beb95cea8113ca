"""RLMesh 0.1.0's own clients and runtime against our ``serve_env`` (on each backend),
compared with the same env served by ``rlmesh.EnvServer``.

Our server runs in a subprocess (``serve_ours.py``); rlmesh's blocking clients run in worker
threads of the test process (or, to read what they log, in a subprocess). Each comparison
drives both servers with the same seeds and actions and expects identical trajectories.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trio

from tests._process import first_line
from tests.transports.grpc.servers import env_handshake
from tests.transports.grpc.wire import open_raw_client
from trio_rlmesh.transports.grpc import BackendName

from .conftest import rlmesh_env_server, script_server

pytestmark = [pytest.mark.interop, pytest.mark.network]

pytest.importorskip("rlmesh")

HERE = Path(__file__).parent
SERVE_OURS = HERE / "serve_ours.py"
SRC = HERE.parents[1] / "src"


@contextlib.asynccontextmanager
async def our_env_server(kind: str, backend: BackendName = "trio") -> AsyncIterator[str]:
    """Serve env ``kind`` (see ``envs.build``) with ``serve_env`` in a subprocess."""
    paths = [str(SRC), os.environ.get("PYTHONPATH", "")]
    pythonpath = os.pathsep.join(p for p in paths if p)
    async with script_server(
        SERVE_OURS, kind, {"PYTHONPATH": pythonpath}, args=[backend]
    ) as address:
        yield address


def servers(backend: BackendName) -> dict[str, Callable[[str], Any]]:
    """Ours on ``backend``, and rlmesh's."""
    return {"ours": lambda kind: our_env_server(kind, backend), "rlmesh": rlmesh_env_server}


def _plain(value: Any) -> Any:
    """rlmesh Tensors (and nested containers of them) as numpy / Python values."""
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (tuple, list)):
        return type(value)(_plain(item) for item in value)
    if isinstance(value, (str, bytes, int, float, bool)) or value is None:
        return value
    return np.asarray(value)


def _assert_same(a: Any, b: Any) -> None:
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            _assert_same(a[key], b[key])
    elif isinstance(a, (tuple, list)):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _assert_same(x, y)
    elif isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b)
    else:
        assert a == b


def _rollout_single(address: str, seed: int, steps: int) -> list[Any]:
    import rlmesh

    trajectory: list[Any] = []
    env = rlmesh.RemoteEnv(address)
    try:
        rng = np.random.default_rng(seed)
        obs, _ = env.reset(seed=seed)
        trajectory.append(_plain(obs))
        space = env.action_space
        for _ in range(steps):
            if hasattr(space, "n"):
                action: Any = np.int64(rng.integers(0, int(space.n)))
            else:
                shape = tuple(space.shape)
                action = rng.uniform(-1.0, 1.0, size=shape).astype(np.float32)
            obs, reward, terminated, truncated, _ = env.step(action)
            trajectory.append((_plain(obs), float(reward), bool(terminated), bool(truncated)))
            if terminated or truncated:
                obs, _ = env.reset(seed=seed + 1)
                trajectory.append(_plain(obs))
    finally:
        env.close()
    return trajectory


def _rollout_vector(address: str, seed: int, steps: int) -> list[Any]:
    import rlmesh

    trajectory: list[Any] = []
    env = rlmesh.RemoteVectorEnv(address)
    try:
        rng = np.random.default_rng(seed)
        obs, _ = env.reset(seed=seed)
        trajectory.append(_plain(obs))
        for _ in range(steps):
            actions = rng.integers(0, 2, size=env.num_envs).astype(np.int64)
            obs, rewards, terminated, truncated, _ = env.step(actions)
            trajectory.append((_plain(obs), _plain(rewards), _plain(terminated), _plain(truncated)))
    finally:
        env.close()
    return trajectory


@pytest.mark.parametrize("kind", ["cartpole", "pendulum", "nested", "oldgym"])
async def test_remote_env_same_trajectory(kind: str, backend: BackendName) -> None:
    results = {}
    for name, server in servers(backend).items():
        with trio.fail_after(120):
            async with server(kind) as address:
                results[name] = await trio.to_thread.run_sync(_rollout_single, address, 7, 60)
    _assert_same(results["ours"], results["rlmesh"])


@pytest.mark.parametrize("kind", ["vector4", "oldgym_vector3"])
async def test_remote_vector_env_next_step_same_trajectory(kind: str, backend: BackendName) -> None:
    results = {}
    for name, server in servers(backend).items():
        with trio.fail_after(120):
            async with server(kind) as address:
                results[name] = await trio.to_thread.run_sync(_rollout_vector, address, 3, 80)
    _assert_same(results["ours"], results["rlmesh"])
    # Some lane finished within 80 steps, so the NEXT_STEP roll was exercised.
    assert any(bool(np.any(step[2])) for step in results["ours"][1:])


@pytest.mark.parametrize("kind", ["cartpole", "pendulum", "nested", "vector4", "lanes4"])
async def test_env_contract_matches_rlmesh(kind: str, backend: BackendName) -> None:
    contracts = {}
    capabilities = {}
    for name, server in servers(backend).items():
        with trio.fail_after(120):
            async with server(kind) as address, open_raw_client(address) as raw:
                response = await env_handshake(raw)
                assert response.base is not None
                contracts[name] = response.env_contract
                capabilities[name] = response.base.capabilities
    assert contracts["ours"] == contracts["rlmesh"]
    assert capabilities["ours"] == capabilities["rlmesh"]


def _cartpole_policy(observation: Any) -> int:
    obs = np.asarray(observation)
    return int(obs[2] + 0.5 * obs[3] > 0)


def _run(address: str, seeds: list[int]) -> tuple[list[tuple[Any, ...]], float]:
    from rlmesh.numpy import Model

    started = time.perf_counter()
    result = Model(_cartpole_policy).run(address, seeds=seeds)
    elapsed = time.perf_counter() - started
    episodes = [(e.seed, e.steps, e.reward, e.terminated, e.truncated) for e in result.episodes]
    return episodes, result.total_steps / elapsed


async def test_rlmesh_run_same_trajectories_and_speed(backend: BackendName) -> None:
    seeds = list(range(8))
    episodes = {}
    speed = {}
    for name, server in servers(backend).items():
        with trio.fail_after(300):
            async with server("cartpole") as address:
                await trio.to_thread.run_sync(_run, address, [100])  # warm-up
                episodes[name], speed[name] = await trio.to_thread.run_sync(_run, address, seeds)
    assert episodes["ours"] == episodes["rlmesh"]
    print(
        f"\nrlmesh.run CartPole steps/s: trio-rlmesh serve_env ({backend}) {speed['ours']:.0f}, "
        f"rlmesh.EnvServer {speed['rlmesh']:.0f}"
    )


_RLMESH_CLIENT = """
import sys, warnings
warnings.simplefilter("ignore")
import numpy as np
import rlmesh

env = rlmesh.RemoteEnv(sys.argv[1])
env.reset(seed=0)
print("READY", flush=True)
try:
    for i in range(10**6):
        _, _, terminated, truncated, _ = env.step(np.int64(i % 2))
        if terminated or truncated:
            env.reset(seed=i)
except Exception as exc:
    print("CLIENT", type(exc).__name__, exc, flush=True)
try:
    env.close()
except Exception as exc:
    print("CLOSE", type(exc).__name__, exc, flush=True)
"""


@pytest.mark.parametrize("attempt", range(3))
async def test_rlmesh_client_sees_a_status_when_our_server_stops_mid_run(
    backend: BackendName, attempt: int
) -> None:
    """Issue 9 §4: our server ends every open Join with UNAVAILABLE before closing the
    connection; an RLMesh client stepping at that moment must not log an h2 protocol
    error (RLMesh's client logs to its process's stderr, so it runs in a subprocess)."""
    with trio.fail_after(120):
        async with our_env_server("cartpole", backend) as address:
            client = await trio.lowlevel.open_process(
                [sys.executable, "-c", _RLMESH_CLIENT, address],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            # From READY on it steps without pause.
            assert await first_line(client, "the rlmesh client") == "READY"
        # The server has stopped (the block above terminated it) while the client stepped.
        assert client.stderr is not None
        async with trio.open_nursery() as nursery:

            async def drain(stream: Any, into: list[bytes]) -> None:
                while chunk := await stream.receive_some():
                    into.append(chunk)

            out: list[bytes] = []
            err: list[bytes] = []
            nursery.start_soon(drain, client.stdout, out)
            nursery.start_soon(drain, client.stderr, err)
            await client.wait()
        stdout, stderr = b"".join(out), b"".join(err)
    text = stderr.decode(errors="replace")
    assert "h2 protocol error" not in text, text
    assert "Unavailable" in text, text
    assert "shutting down" in text, text
    assert stdout.startswith(b"CLIENT ConnectionError"), stdout
