"""The handshake rules against the real rlmesh 0.1.0, on both services.

* Our servers refuse a client of another protocol generation with the very answer
  RLMesh's servers give (``compatible`` false, the same ``error_message``, no capabilities).
* RLMesh's servers judge only the generation (an edition they do not offer is still
  ``compatible``), so our env client and model client, finding no edition in common with
  them, fail alike: one :class:`~trio_rlmesh.ProtocolError` naming the server's editions.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import Any, Literal

import pytest
import trio

from tests.transports.grpc.wire import open_raw_client
from trio_rlmesh import ProtocolError
from trio_rlmesh.protocol import WORKFLOW_EDITION, env_v1, model_v1
from trio_rlmesh.transports.grpc import (
    BackendName,
    open_env_client,
    open_model_client,
    serve_model,
)
from trio_rlmesh.transports.grpc._handshake import (
    ENV_HANDSHAKE,
    MODEL_HANDSHAKE,
    handshake_request,
)

from . import models
from .conftest import rlmesh_env_server
from .test_env_server_interop import our_env_server
from .test_model_interop import rlmesh_model_server

pytestmark = [pytest.mark.interop, pytest.mark.network]

Side = Literal["env", "model"]
SIDES = pytest.mark.parametrize("side", ["env", "model"])


def rlmesh_server(side: Side) -> AbstractAsyncContextManager[str]:
    if side == "env":
        return rlmesh_env_server("cartpole")
    return rlmesh_model_server("tests.interop.models:RlmeshPlain")


@contextlib.asynccontextmanager
async def our_server(side: Side, backend: BackendName) -> AsyncIterator[str]:
    if side == "env":
        async with our_env_server("cartpole", backend) as address:
            yield address
        return
    async with trio.open_nursery() as nursery:
        yield await nursery.start(
            lambda task_status: serve_model(
                models.OursPlain(), backend=backend, task_status=task_status
            )
        )
        nursery.cancel_scope.cancel()


async def old_generation_answer(side: Side, address: str) -> tuple[Any, ...]:
    """What a server answers a client of generation ``rlmesh-wire-v0``: the base's verdict,
    message and capabilities, and (env) whether a contract came along."""
    base = handshake_request(f"rlmesh-{side}")
    base.protocol_generation = "rlmesh-wire-v0"
    async with open_raw_client(address) as raw:
        if side == "env":
            env = await raw.unary(
                ENV_HANDSHAKE, env_v1.HandshakeRequest(base=base), env_v1.HandshakeResponse
            )
            answer, contract = env.base, env.env_contract is not None
        else:
            model = await raw.unary(
                MODEL_HANDSHAKE, model_v1.HandshakeRequest(base=base), model_v1.HandshakeResponse
            )
            answer, contract = model.base, False
    assert answer is not None
    return answer.compatible, answer.error_message, dict(answer.capabilities), contract


@SIDES
async def test_our_servers_refuse_another_generation_as_rlmesh_does(
    side: Side, backend: BackendName
) -> None:
    with trio.fail_after(120):
        async with rlmesh_server(side) as address:
            theirs = await old_generation_answer(side, address)
        async with our_server(side, backend) as address:
            ours = await old_generation_answer(side, address)
    assert theirs[0] is False
    assert (
        theirs[1] == "protocol generation rlmesh-wire-v0 not compatible with server rlmesh-wire-v1"
    )
    assert ours == theirs


@SIDES
async def test_no_edition_in_common_with_rlmesh_is_one_protocol_error(
    side: Side, backend: BackendName
) -> None:
    opener = open_env_client if side == "env" else open_model_client
    with trio.fail_after(120):
        async with rlmesh_server(side) as address:
            with pytest.raises(ProtocolError) as info:
                async with opener(address, editions=["2099.01"], backend=backend):
                    pass  # pragma: no cover
    error = info.value
    assert error.operation == f"{side}.handshake"
    assert error.recoverable is False
    assert "no workflow edition in common" in str(error)
    assert repr(WORKFLOW_EDITION) in str(error)  # the edition RLMesh offers
    assert "['2099.01']" in str(error)
