"""How transport failures read: could not connect, which token problem, which service.

These are the rules ``map_transport_error`` applies at the transport boundary; the real-socket
tests check that the clients give it what it needs (the address, whether a token was sent),
on both backends.
"""

from __future__ import annotations

import errno
import functools
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import trio

from trio_rlmesh import OperationTimeout, TransportError
from trio_rlmesh.transports.grpc import open_env_client, open_model_client, serve_env, serve_model
from trio_rlmesh.transports.grpc._errors import could_not_listen, map_transport_error
from trio_rlmesh.transports.grpc._status import ConnectionLost, GrpcError, Status


def _map(exc: BaseException, **kwargs: Any) -> Any:
    options: dict[str, Any] = {"operation": "env.handshake", "address": "tcp://127.0.0.1:9"}
    return map_transport_error(exc, **{**options, **kwargs})


def test_a_refused_connection_could_not_connect() -> None:
    error = _map(ConnectionRefusedError(111, "Connect call failed"))
    assert isinstance(error, TransportError)
    assert error.message == (
        "could not connect to tcp://127.0.0.1:9: connection refused; is the server running? "
        "(env.handshake)"
    )
    assert "connection lost" not in error.message


def test_a_missing_unix_socket_could_not_connect() -> None:
    error = _map(FileNotFoundError(2, "No such file"), address="unix:///tmp/none.sock")
    assert error.message.startswith("could not connect to unix:///tmp/none.sock: no such socket")


def test_an_unresolvable_host_could_not_connect() -> None:
    error = _map(socket.gaierror(-2, "Name or service not known"), address="tcp://nowhere:1")
    assert error.message.startswith(
        "could not connect to tcp://nowhere:1: cannot resolve the host (Name or service not known)"
    )


@pytest.mark.parametrize(
    "exc", [ConnectionResetError(104, "reset"), ConnectionLost("the peer reset it"), EOFError()]
)
def test_a_dropped_connection_is_lost(exc: BaseException) -> None:
    assert _map(exc).message.startswith("connection lost during env.handshake")


@pytest.mark.parametrize(
    ("token_sent", "says"),
    [
        (True, "the server rejected the token"),
        (False, "the server requires a token and none was sent"),
        (None, "the token is missing or wrong"),
    ],
)
def test_unauthenticated_says_which_token_problem(token_sent: bool | None, says: str) -> None:
    error = _map(GrpcError(Status.UNAUTHENTICATED, "invalid env token"), token_sent=token_sent)
    assert isinstance(error, TransportError)
    assert error.code == "UNAUTHENTICATED"
    assert says in error.message
    if token_sent is False:
        assert "rejected" not in error.message


@pytest.mark.parametrize(
    ("operation", "service"),
    [
        ("env.handshake", "rlmesh.env.v1.EnvService"),
        ("model.handshake", "rlmesh.model.v1.ModelService"),
    ],
)
def test_unimplemented_names_the_service_asked_for(operation: str, service: str) -> None:
    error = _map(GrpcError(Status.UNIMPLEMENTED, "Method not found"), operation=operation)
    assert error.code == "UNIMPLEMENTED"
    assert f"the server does not serve {service}" in error.message


def test_deadline_exceeded_is_a_timeout() -> None:
    assert isinstance(_map(GrpcError(Status.DEADLINE_EXCEEDED)), OperationTimeout)


# ----------------------------------------------------------------------------- real sockets


@pytest.fixture
def refusing_address() -> Iterator[str]:
    """A loopback port that is bound but not listening: connecting to it is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"127.0.0.1:{sock.getsockname()[1]}"


@pytest.mark.network
@pytest.mark.parametrize("backend", ["trio", "grpclib"])
@pytest.mark.parametrize("opener", [open_env_client, open_model_client])
async def test_clients_say_they_could_not_connect(
    refusing_address: str, opener: Any, backend: str
) -> None:
    with trio.fail_after(10), pytest.raises(TransportError) as caught:
        async with opener(refusing_address, backend=backend):
            pass
    assert caught.value.message.startswith(f"could not connect to tcp://{refusing_address}")
    assert "is the server running?" in caught.value.message


@pytest.mark.parametrize(
    ("exc", "says"),
    [
        (
            OSError(errno.EADDRINUSE, "Address already in use"),
            "the address is already in use; is another server listening there?",
        ),
        (OSError(errno.EADDRNOTAVAIL, "Cannot assign"), "the address is not one of this machine's"),
        (
            socket.gaierror(-2, "Name or service not known"),
            "cannot resolve the host (Name or service not known)",
        ),
        (FileNotFoundError(2, "No such file"), "the socket file's directory does not exist"),
        (PermissionError(13, "Permission denied"), "permission denied"),
    ],
)
def test_why_a_server_could_not_listen(exc: OSError, says: str) -> None:
    error = could_not_listen(exc, "model", "tcp://h:1")
    assert error.message == f"the model server could not listen on tcp://h:1: {says}"
    assert (error.operation, error.address) == ("model.serve", "tcp://h:1")


@pytest.mark.network
@pytest.mark.parametrize("backend", ["trio", "grpclib"])
async def test_servers_say_they_could_not_listen(backend: str, tmp_path: Path) -> None:
    """Both servers, on both backends: a port in use and a socket in a missing directory."""
    missing = f"unix://{tmp_path}/no-such-dir/s.sock"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = f"127.0.0.1:{taken.getsockname()[1]}"
        for component, serve, served in (
            ("env", serve_env, _Env()),
            ("model", serve_model, _Zero()),
        ):
            for address, says in (
                (busy, "the address is already in use; is another server listening there?"),
                (missing, "the socket file's directory does not exist"),
            ):
                with trio.fail_after(10):
                    async with trio.open_nursery() as nursery:
                        with pytest.raises(TransportError) as caught:
                            await nursery.start(
                                functools.partial(serve, served, address, backend=backend)
                            )
                assert caught.value.message == (
                    f"the {component} server could not listen on {address}: {says}"
                )
                assert isinstance(caught.value.__cause__, OSError)


class _Env:
    """The smallest env serve_env takes."""

    def __init__(self) -> None:
        import gymnasium

        self.observation_space = gymnasium.spaces.Discrete(2)
        self.action_space = gymnasium.spaces.Discrete(2)

    def reset(self, *, seed: Any = None, options: Any = None) -> Any:
        return 0, {}

    def step(self, action: Any) -> Any:
        return 0, 0.0, False, False, {}


@pytest.mark.parametrize("backend", ["trio", "grpclib"])
async def test_env_client_token_problems(backend: str) -> None:
    address = "memory://token-env" if backend == "trio" else "127.0.0.1:0"
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            bound = await nursery.start(
                lambda task_status: serve_env(
                    _Env(), address, token="right", backend=backend, task_status=task_status
                )
            )
            with pytest.raises(TransportError, match="requires a token and none was sent"):
                async with open_env_client(bound, backend=backend):
                    pass
            with pytest.raises(TransportError, match="rejected the token"):
                async with open_env_client(bound, token="wrong", backend=backend):
                    pass
            nursery.cancel_scope.cancel()


class _Zero:
    def predict(self, observation: Any) -> Any:
        return np.int64(0)


@pytest.mark.parametrize("backend", ["trio", "grpclib"])
async def test_model_client_token_problems(backend: str) -> None:
    address = "memory://token-model" if backend == "trio" else "127.0.0.1:0"
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            bound = await nursery.start(
                lambda task_status: serve_model(
                    _Zero(), address, token="s3cret", backend=backend, task_status=task_status
                )
            )
            with pytest.raises(TransportError, match="requires a token and none was sent"):
                async with open_model_client(bound, backend=backend):
                    pass
            with pytest.raises(TransportError, match="rejected the token"):
                async with open_model_client(bound, token="wrong", backend=backend):
                    pass
            nursery.cancel_scope.cancel()
