"""The conformance checks of :mod:`trio_rlmesh.testing` against every adapter trio-rlmesh ships.

``check_runtime_env`` runs against :class:`GymEnvRuntimeEnv` (the env in this process) and
:class:`EnvClientRuntimeEnv` (the same env served by ``serve_env``, read by each client backend);
``check_runtime_model`` against :class:`ModelHandlerRuntimeModel` and
:class:`ModelClientRuntimeModel` (the same model served by ``serve_model``). The fixture
envs cover a single env, Box and nested Dict/Tuple/Text spaces, a lockstep vector env and a
lane endpoint (a list of envs, whose lanes also reset and step on their own).
"""

from __future__ import annotations

import functools
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
import trio

from tests.interop import envs as fixture_envs
from trio_rlmesh.model import Model
from trio_rlmesh.protocol import core_v1
from trio_rlmesh.runtime import RuntimeEnv, RuntimeModel
from trio_rlmesh.testing import check_runtime_env, check_runtime_model
from trio_rlmesh.transports.grpc import (
    BACKENDS,
    BackendName,
    EnvClientRuntimeEnv,
    ModelClientRuntimeModel,
    open_env_client,
    open_model_client,
    serve_env,
    serve_model,
)
from trio_rlmesh.transports.inprocess import GymEnvRuntimeEnv, ModelHandlerRuntimeModel

KINDS = ["cartpole", "pendulum", "nested", "vector4", "lanes4"]
GUARD = 60  # seconds; only a guard against a hang, every check call has its own bound


class Sampler(Model):
    """Answers each lane with a sample of the env's action space (a valid action)."""

    def __init__(self, action_space: gym.Space[Any]) -> None:
        self.action_space = action_space
        self.action_space.seed(0)

    def predict(self, observation: Any) -> Any:
        return self.action_space.sample()


def _action_space(env: Any) -> gym.Space[Any]:
    if isinstance(env, list):
        env = env[0]
    return getattr(env, "single_action_space", None) or env.action_space


@asynccontextmanager
async def inprocess_env(env: Any) -> AsyncIterator[tuple[RuntimeEnv, core_v1.EnvContract, bool]]:
    adapter = GymEnvRuntimeEnv(env)
    yield adapter, adapter.contract, adapter.subset_step


@contextmanager
def _where(backend: BackendName, name: str) -> Iterator[str]:
    """``memory://`` for the trio backend; a Unix socket in a short temporary folder for
    grpclib (no in-memory transport; pytest's tmp_path can be too long for a socket)."""
    if backend == "trio":
        yield f"memory://{name}"
        return
    folder = Path(tempfile.mkdtemp(prefix="trm-", dir="/tmp"))
    try:
        yield f"unix://{folder / name}.sock"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@asynccontextmanager
async def served_env(
    env: Any, backend: BackendName
) -> AsyncIterator[tuple[RuntimeEnv, core_v1.EnvContract, bool]]:
    with _where(backend, "conformance-env") as where:
        async with trio.open_nursery() as nursery:
            address = await nursery.start(serve_env, env, where)
            async with open_env_client(address, backend=backend) as client:
                yield EnvClientRuntimeEnv(client), client.contract, client.subset_step
            nursery.cancel_scope.cancel()


@asynccontextmanager
async def inprocess_model(model: Model) -> AsyncIterator[RuntimeModel]:
    yield ModelHandlerRuntimeModel(model)


@asynccontextmanager
async def served_model(model: Model, backend: BackendName) -> AsyncIterator[RuntimeModel]:
    with _where(backend, "conformance-model") as where:
        async with trio.open_nursery() as nursery:
            address = await nursery.start(serve_model, model, where)
            async with open_model_client(address, backend=backend) as client:
                yield ModelClientRuntimeModel(client)
            nursery.cancel_scope.cancel()


ENV_ADAPTERS: dict[str, Callable[[Any], Any]] = {
    "GymEnvRuntimeEnv": inprocess_env,
    **{f"EnvClientRuntimeEnv-{b}": functools.partial(served_env, backend=b) for b in BACKENDS},
}
MODEL_ADAPTERS: dict[str, Callable[[Model], Any]] = {
    "ModelHandlerRuntimeModel": inprocess_model,
    **{
        f"ModelClientRuntimeModel-{b}": functools.partial(served_model, backend=b) for b in BACKENDS
    },
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("adapter", sorted(ENV_ADAPTERS))
async def test_env_adapter_passes_check_runtime_env(adapter: str, kind: str) -> None:
    env = fixture_envs.build(kind)
    with trio.fail_after(GUARD):
        async with ENV_ADAPTERS[adapter](env) as (runtime_env, contract, subset_step):
            if kind in ("lanes4", "vector4"):  # the one-lane calls run on the lane endpoint
                assert subset_step is (kind == "lanes4")
            await check_runtime_env(runtime_env, contract, subset_step=subset_step)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("adapter", sorted(MODEL_ADAPTERS))
async def test_model_adapter_passes_check_runtime_model(adapter: str, kind: str) -> None:
    env = fixture_envs.build(kind)
    contract = GymEnvRuntimeEnv(env).contract
    lanes = max(1, contract.num_envs)
    with trio.fail_after(GUARD):
        async with MODEL_ADAPTERS[adapter](Sampler(_action_space(env))) as model:
            await check_runtime_model(model, contract, lanes=lanes)
