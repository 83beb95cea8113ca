"""Our clients on the wrong kind of RLMesh server hear UNIMPLEMENTED and say so."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

import pytest
import trio

from trio_rlmesh import TransportError
from trio_rlmesh.transports.grpc import open_env_client, open_model_client

from .test_model_interop import rlmesh_model_server

pytestmark = [pytest.mark.interop, pytest.mark.network]


async def test_model_client_on_an_rlmesh_env_server(
    env_server: Callable[[str], AbstractAsyncContextManager[str]],
) -> None:
    with trio.fail_after(120):
        async with env_server("cartpole") as address:
            with pytest.raises(TransportError) as caught:
                async with open_model_client(address):
                    pass
    assert caught.value.code == "UNIMPLEMENTED"
    assert "does not serve rlmesh.model.v1.ModelService" in caught.value.message


async def test_env_client_on_an_rlmesh_model_server() -> None:
    with trio.fail_after(120):
        async with rlmesh_model_server("tests.interop.models:RlmeshPlain") as address:
            with pytest.raises(TransportError) as caught:
                async with open_env_client(address):
                    pass
    assert caught.value.code == "UNIMPLEMENTED"
    assert "does not serve rlmesh.env.v1.EnvService" in caught.value.message
