"""One handshake rule set for both clients (``_handshake``'s docstring lists the rules).

Every test runs once per side (the env client, the model client) and per backend, against
the fake servers: the same refusal gives the same error class, recoverability, operation,
address and wording on both sides.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, Literal

import pytest
import trio

from trio_rlmesh import OperationTimeout, ProtocolError, SpecError, TransportError
from trio_rlmesh.protocol import PROTOCOL_GENERATION, WORKFLOW_EDITION
from trio_rlmesh.transports.grpc import BackendName, open_env_client, open_model_client

from .fake_env import FakeEnvService, serve_fake_env
from .fake_model import FakeModelService, serve_fake_model
from .wire import FakeServer

Where = Callable[[str], str]
Side = Literal["env", "model"]
SIDES = pytest.mark.parametrize("side", ["env", "model"])


@contextlib.asynccontextmanager
async def fake(
    side: Side, where: Where, **knobs: Any
) -> AsyncIterator[tuple[FakeEnvService | FakeModelService, FakeServer]]:
    """The side's fake server, with ``knobs`` (the knobs both fakes have)."""
    if side == "env":
        env = FakeEnvService(**knobs)
        async with serve_fake_env(env, where("env")) as server:
            yield env, server
    else:
        model = FakeModelService(**knobs)
        async with serve_fake_model(model, where("model")) as server:
            yield model, server


def connect(side: Side, address: str, **options: Any) -> AbstractAsyncContextManager[Any]:
    opener: Callable[..., AbstractAsyncContextManager[Any]]
    opener = open_env_client if side == "env" else open_model_client
    return opener(address, **options)


@SIDES
@pytest.mark.parametrize(
    ("knobs", "says"),
    [
        pytest.param({"base": False}, ["no base handshake"], id="no-base"),
        pytest.param(
            {"generation": "rlmesh-wire-v2"},
            [f"refused protocol generation {PROTOCOL_GENERATION}", "want rlmesh-wire-v2"],
            id="other-generation",
        ),
        pytest.param(
            {"editions": ["2099.01"]},
            ["no workflow edition in common", "['2099.01']", repr(WORKFLOW_EDITION)],
            id="no-mutual-edition",
        ),
    ],
)
async def test_a_refused_handshake_is_one_protocol_error_on_both_sides(
    side: Side,
    knobs: dict[str, Any],
    says: list[str],
    backend: BackendName,
    clock: object,
    address: Where,
) -> None:
    with trio.fail_after(10):
        async with fake(side, address, **knobs) as (_, server):
            with pytest.raises(ProtocolError) as info:
                async with connect(side, server.address, backend=backend):
                    pass
    error = info.value
    assert type(error) is ProtocolError
    assert error.recoverable is False
    assert error.operation == f"{side}.handshake"
    assert error.address == server.address
    message = str(error)
    assert message.startswith(f"{side}.handshake to {server.address} failed: ")
    for text in says:
        assert text in message
    assert f"{side} server" in message  # what to change names the side


@SIDES
async def test_a_connect_timeout_is_one_recoverable_timeout_on_both_sides(
    side: Side, backend: BackendName, clock: object, address: Where
) -> None:
    with trio.fail_after(10):
        async with fake(side, address) as (_, server):
            server.valve.freeze()  # accepts the connection, then never says a word
            start = trio.current_time()
            with pytest.raises(OperationTimeout) as info:
                async with connect(side, server.address, backend=backend, connect_timeout=0.3):
                    pass
            if clock is not None:
                assert trio.current_time() - start == pytest.approx(0.3)
    error = info.value
    assert isinstance(error, TimeoutError)
    assert error.recoverable is True
    assert error.timeout == 0.3
    assert error.operation == f"{side}.handshake"
    assert error.address == server.address
    assert str(error).startswith(f"{side}.handshake to {server.address} timed out after 0.3 s")
    assert f"a {side} server" in str(error)


@SIDES
async def test_the_handshake_carries_no_grpc_deadline_on_either_side(
    side: Side, backend: BackendName, clock: object, address: Where
) -> None:
    """As RLMesh's clients: the connect deadline is this process's, not sent as
    ``grpc-timeout``."""
    with trio.fail_after(10):
        async with (
            fake(side, address) as (service, server),
            connect(side, server.address, backend=backend, connect_timeout=7.0),
        ):
            pass
    assert service.deadlines[0] is None


@SIDES
@pytest.mark.parametrize(("sent", "says"), [("wrong", "rejected the token"), (None, "requires")])
async def test_a_refused_token_is_named_the_same_on_both_sides(
    side: Side,
    sent: str | None,
    says: str,
    backend: BackendName,
    clock: object,
    address: Where,
) -> None:
    with trio.fail_after(10):
        async with fake(side, address, token="right") as (_, server):
            with pytest.raises(TransportError, match=says) as info:
                async with connect(side, server.address, backend=backend, token=sent):
                    pass
    assert info.value.code == "UNAUTHENTICATED"
    assert info.value.recoverable is False
    assert info.value.operation == f"{side}.handshake"
    assert info.value.address == server.address


@SIDES
async def test_nothing_listening_is_could_not_connect_on_both_sides(
    side: Side, backend: BackendName, clock: object, address: Where
) -> None:
    target = address("nobody")
    with trio.fail_after(10):
        with pytest.raises(TransportError, match="could not connect") as info:
            async with connect(side, target, backend=backend):
                pass
    assert info.value.operation == f"{side}.handshake"
    assert info.value.recoverable is False


@SIDES
@pytest.mark.parametrize("token", ["", "  "])
async def test_a_blank_token_is_refused_before_connecting_on_both_sides(
    side: Side, token: str, backend: BackendName, clock: object, address: Where
) -> None:
    """Taken for "no token" it would fail later, at a server that wants one (the rule is
    ``check_token``'s, the servers' too)."""
    with trio.fail_after(10):
        async with fake(side, address) as (service, server):
            with pytest.raises(SpecError, match="token must not be blank"):
                async with connect(side, server.address, backend=backend, token=token):
                    pass
    assert service.metadata == []
