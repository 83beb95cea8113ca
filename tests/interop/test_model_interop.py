"""trio-rlmesh's model server and client, on each backend, against the real rlmesh 0.1.0.

* ``rlmesh.run(rlmesh.RemoteModel(<our served model>), env)`` gives the same episodes as
  ``rlmesh.run`` with the same policy in-process (plain and chunked, horizons 1 and 4);
* our :class:`ModelClientRuntimeModel` calling a model served by ``python -m rlmesh.serve``
  gets the same action frames as calling the policy directly.
"""

from __future__ import annotations

import functools
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import trio

from trio_rlmesh import ModelError, RunLocalOptions, TransportError, run_remote
from trio_rlmesh.protocol import core_v1, meta_to_python, model_v1, space_to_spec, spaces_v1
from trio_rlmesh.runtime._internal import route_request
from trio_rlmesh.spaces import decode_batch, encode_lanes, from_gymnasium
from trio_rlmesh.transports.grpc import (
    BackendName,
    ModelClientRuntimeModel,
    open_env_client,
    open_model_client,
    serve_model,
)

from . import models

pytestmark = pytest.mark.interop

ServerFactory = Callable[[str], AbstractAsyncContextManager[str]]
SEEDS = [0, 1, 2, 3, 4]
ROOT = Path(__file__).parents[2]


def _episodes(result: Any) -> list[tuple[int | None, int, float, bool, bool]]:
    return [(e.seed, e.steps, e.reward, e.terminated, e.truncated) for e in result.episodes]


@pytest.mark.parametrize("kind", ["plain", "chunk"])
@pytest.mark.parametrize("horizon", [1, 4])
@pytest.mark.filterwarnings("ignore:execution_horizon=4 was requested:UserWarning")
async def test_rlmesh_remote_model_on_our_server_matches_in_process(
    env_server: ServerFactory, kind: str, horizon: int, backend: BackendName
) -> None:
    rlmesh = pytest.importorskip("rlmesh")
    ours = models.OursPlain() if kind == "plain" else models.OursChunk()
    theirs = models.RlmeshPlain if kind == "plain" else models.RlmeshChunk
    with trio.fail_after(120):
        async with env_server("cartpole") as env_address, trio.open_nursery() as nursery:
            address = await nursery.start(
                lambda task_status: serve_model(ours, backend=backend, task_status=task_status)
            )

            def remote_run() -> Any:
                return rlmesh.run(
                    rlmesh.RemoteModel(f"tcp://{address}"),
                    env_address,
                    seeds=SEEDS,
                    execution_horizon=horizon,
                    workflow_edition="2026.06",
                )

            def local_run() -> Any:
                return rlmesh.run(
                    theirs(),
                    env_address,
                    seeds=SEEDS,
                    execution_horizon=horizon,
                    workflow_edition="2026.06",
                )

            remote = await trio.to_thread.run_sync(remote_run)
            local = await trio.to_thread.run_sync(local_run)
            nursery.cancel_scope.cancel()
    assert _episodes(remote) == _episodes(local)
    assert len({steps for _, steps, *_ in _episodes(local)}) > 1  # the policy is not trivial


async def test_a_contract_with_null_metadata_is_forwarded_to_our_served_model(
    env_server: ServerFactory,
) -> None:
    # rlmesh's env server writes a null metadata value as the key alone; run_remote forwards
    # the contract to the model in its ResolveAdapterRequest, so the null must re-encode.
    with trio.fail_after(120):
        async with env_server("null-metadata") as env_address:
            async with open_env_client(env_address) as client:
                assert client.contract.spec is not None
                metadata = meta_to_python(client.contract.spec.metadata)
            assert metadata["range"] is None
            assert metadata["tags"] == {"clip": None, "role": "pole"}
            async with trio.open_nursery() as nursery:
                address = await nursery.start(
                    lambda task_status: serve_model(models.OursPlain(), task_status=task_status)
                )
                options = RunLocalOptions(env_address, max_episodes=2, base_seed=0)
                report = await run_remote(address, options)
                nursery.cancel_scope.cancel()
    assert report.status == "completed"
    assert len(report.episodes) == 2


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@asynccontextmanager
async def rlmesh_model_server(target: str) -> AsyncIterator[str]:
    """``python -m rlmesh.serve target`` on a free port; yields the address once it answers."""
    pytest.importorskip("rlmesh")
    port = _free_port()
    address = f"127.0.0.1:{port}"
    env = {
        **os.environ,
        "PYTHONWARNINGS": "ignore",
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
    }
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "rlmesh.serve", target, "--address", address],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        with trio.fail_after(60):
            while True:
                if process.poll() is not None:
                    raise RuntimeError(f"rlmesh.serve {target} exited early")
                try:
                    async with open_model_client(address):
                        break
                except TransportError:
                    await trio.sleep(0.1)
        yield address
    finally:
        process.terminate()
        with trio.CancelScope(shield=True), trio.move_on_after(10):
            await process.wait()
        if process.poll() is None:
            process.kill()


@pytest.mark.parametrize(("target", "horizon"), [("RlmeshPlain", 1), ("RlmeshChunk", 4)])
async def test_our_client_on_rlmesh_served_model_matches_direct_calls(
    target: str, horizon: int, backend: BackendName
) -> None:
    env = gym.make("CartPole-v1")
    obs_space = from_gymnasium(env.observation_space)
    act_space = from_gymnasium(env.action_space)
    spec = core_v1.EnvSpec(
        id="CartPole-v1",
        observation_space=space_to_spec(obs_space),
        action_space=space_to_spec(act_space),
    )
    policy = models.PlainPolicy() if target == "RlmeshPlain" else models.ChunkPolicy()
    rng = np.random.default_rng(0)
    observations = [obs_space_sample(rng) for _ in range(20)]
    with trio.fail_after(120):
        async with (
            rlmesh_model_server(f"tests.interop.models:{target}") as address,
            open_model_client(address, backend=backend) as client,
        ):
            remote = ModelClientRuntimeModel(client)
            env_id = "01a22c08-0000-7000-8000-000000000001"
            answer = await remote.resolve(
                route_request(env_id, spec, session_id="interop", execution_horizon=horizon)
            )
            assert answer.history is None
            for index, observation in enumerate(observations):
                request = model_v1.PredictRequest(
                    context=model_v1.AdapterContext(
                        session_id="interop",
                        env_id=env_id,
                        request_id=f"{env_id}:predict:{index + 1}",
                    ),
                    observation=spaces_v1.SpaceValue(leaves=encode_lanes(obs_space, [observation])),
                    episode_info=[model_v1.EpisodeInfo(episode_id=f"ep-{index}")],
                )
                prediction = await remote.predict(request)
                got = [
                    int(decode_batch(act_space, frame.leaves, 1)[0])
                    for frame in prediction.response.actions
                ]
                if target == "RlmeshPlain":
                    expected = [int(policy.predict(observation))]  # type: ignore[attr-defined]
                else:
                    expected = [int(a) for a in policy.predict_chunk(observation)[:horizon]]  # type: ignore[attr-defined]
                assert got == expected, index
                assert prediction.response.context == request.context


def obs_space_sample(rng: np.random.Generator) -> np.ndarray[Any, Any]:
    return rng.uniform(-0.3, 0.3, size=4).astype(np.float32)


@asynccontextmanager
async def our_model_server(model: object) -> AsyncIterator[str]:
    async with trio.open_nursery() as nursery:
        yield await nursery.start(functools.partial(serve_model, model, "127.0.0.1:0"))
        nursery.cancel_scope.cancel()


MODEL_SERVERS: dict[str, Callable[[], AbstractAsyncContextManager[str]]] = {
    "rlmesh": lambda: rlmesh_model_server("tests.interop.models:RlmeshPlain"),
    "ours": lambda: our_model_server(models.OursPlain()),
}


@pytest.mark.parametrize("server", sorted(MODEL_SERVERS))
async def test_a_model_server_refuses_what_rlmeshs_refuses(server: str) -> None:
    """The model host's rules, against RLMesh's served path: a predict on a route that was
    never resolved, or was released, and an episode end or release that names no env, are
    refused alike. History rows on a route that did not negotiate them are refused by ours
    only: RLMesh's server answers them for a model without an adapter (its spec'd path
    refuses them in the words ours uses; see docs/differences.md)."""
    env = gym.make("CartPole-v1")
    obs_space = from_gymnasium(env.observation_space)
    spec = core_v1.EnvSpec(
        id="CartPole-v1",
        observation_space=space_to_spec(obs_space),
        action_space=space_to_spec(from_gymnasium(env.action_space)),
    )
    env_id = "01a22c08-0000-7000-8000-000000000002"
    leaves = encode_lanes(obs_space, [np.zeros(4, np.float32)])

    def request(number: int, history: bool = False) -> model_v1.PredictRequest:
        sent = model_v1.PredictRequest(
            context=model_v1.AdapterContext(
                session_id="interop", env_id=env_id, request_id=f"{env_id}:predict:{number}"
            ),
            observation=spaces_v1.SpaceValue(leaves=leaves),
            episode_info=[model_v1.EpisodeInfo(episode_id="ep-1")],
        )
        if history:
            sent.step = 2
            sent.history = [
                model_v1.ObservationHistoryFrame(
                    observation=spaces_v1.SpaceValue(leaves=leaves),
                    episode=model_v1.EpisodeInfo(episode_id="ep-1"),
                    step=1,
                )
            ]
        return sent

    async def refused(call: Any) -> ModelError:
        with pytest.raises(ModelError) as caught:
            await call
        return caught.value

    with trio.fail_after(120):
        async with (
            MODEL_SERVERS[server]() as address,
            open_model_client(address) as client,
        ):
            remote = ModelClientRuntimeModel(client)
            unresolved = await refused(remote.predict(request(1)))
            await remote.resolve(route_request(env_id, spec, session_id="interop"))
            assert not remote.wants_history
            await remote.predict(request(2))
            if server == "ours":
                unasked = await refused(remote.predict(request(3, history=True)))
                assert (
                    "this route did not negotiate history (ResolveAdapterResponse.history was "
                    "unset)" in unasked.message
                )
                assert (unasked.code, unasked.recoverable) == ("INTERNAL", False)
            else:
                await remote.predict(request(3, history=True))
            no_env = [
                await refused(remote.reset_adapter(model_v1.ResetAdapterRequest())),
                await refused(remote.release_adapter(model_v1.ReleaseAdapterRequest(), 10)),
            ]
            release = model_v1.ReleaseAdapterRequest(
                context=model_v1.AdapterContext(
                    session_id="interop", env_id=env_id, request_id=f"{env_id}:release_adapter"
                )
            )
            await remote.release_adapter(release, 10)
            released = await refused(remote.predict(request(4)))
    for error in (unresolved, released):
        assert "model env adapter was not resolved" in error.message
        assert (error.code, error.recoverable) == ("INTERNAL", False)
    reset_error, release_error = no_env
    assert "reset_adapter missing env_id" in reset_error.message
    assert "release_adapter missing env_id" in release_error.message
    for error in no_env:
        assert (error.code, error.recoverable) == ("INVALID_REQUEST", False)
