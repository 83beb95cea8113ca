"""Issue 23: the serve commands' connection limits.

Descriptor exhaustion: ``serve-env`` under a 128-descriptor limit, held by 200 idle HTTP/2
connections, still lets a real client in, and says so in a few log lines. The server runs
in a subprocess whose ``RLIMIT_NOFILE`` is lowered before it starts; the idle connections
each send the preface and SETTINGS (so only their idleness, not the handshake timeout, can
free them), then nothing. Also: the limit options reach the server, and are checked.
"""

from __future__ import annotations

import resource
import signal
import socket
from collections.abc import Iterator

import pytest
import trio

from trio_rlmesh._cli import main
from trio_rlmesh._cli._exit import EXIT_USAGE
from trio_rlmesh.protocol import env_v1
from trio_rlmesh.transports.grpc import BACKENDS, BackendName, open_env_client
from trio_rlmesh.transports.grpc._guard import PREFACE

from ..transports.grpc.servers import discrete_action
from .support import read_line, serving, start, stop

DESCRIPTORS = 128
IDLE_CONNECTIONS = 200
EMPTY_SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def _low_descriptor_limit() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (DESCRIPTORS, hard))


@pytest.fixture
def idle_sockets() -> Iterator[list[socket.socket]]:
    opened: list[socket.socket] = []
    yield opened
    for sock in opened:
        sock.close()


async def _episode(address: str) -> int:
    async with open_env_client(address, connect_timeout=60.0) as env:
        await env.reset(env_v1.ResetRequest(seeds=[1]))
        for steps in range(1, 10):
            stepped = await env.step(env_v1.StepRequest(action=discrete_action(1)))
            if any(stepped.response.terminated_mask):
                return steps
        raise AssertionError("the episode did not end")


@pytest.mark.network
@pytest.mark.parametrize("backend", BACKENDS)
def test_idle_connections_at_the_descriptor_limit_do_not_lock_a_client_out(
    backend: BackendName, idle_sockets: list[socket.socket]
) -> None:
    server = start(
        ["serve-env", "tests.cli.envs:Counter", "--grpc-backend", backend],
        preexec_fn=_low_descriptor_limit,
    )
    try:
        assert server.stdout is not None
        address = read_line(server.stdout, 60, what="address").strip()
        host, port = address.rsplit(":", 1)
        for _ in range(IDLE_CONNECTIONS):
            sock = socket.create_connection((host, int(port)), timeout=10)
            sock.sendall(PREFACE + EMPTY_SETTINGS)
            idle_sockets.append(sock)

        async def main() -> int:
            with trio.fail_after(60):
                return await _episode(address)

        assert trio.run(main) == 3  # Counter's episodes are 3 steps long
        server.send_signal(signal.SIGTERM)
        _, errors = server.communicate(timeout=30)
    finally:
        stop(server)
    assert "Traceback" not in errors, errors
    lines = [line for line in errors.splitlines() if "accept failed" in line]
    assert 1 <= len(lines) <= 7, errors  # one line per 10 s at most
    assert "longest-idle connection" in lines[0]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--max-connections", "0"], "--max-connections must be > 0"),
        (["--idle-connection-timeout", "-1"], "--idle-connection-timeout must be > 0"),
    ],
)
@pytest.mark.parametrize("command", ["serve-env", "serve-model"])
def test_limit_options_out_of_range_are_usage_errors(
    command: str, argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    target = "gymnasium:CartPole-v1" if command == "serve-env" else "tests.cli.models:AlwaysLeft"
    assert main([command, target, *argv]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert says in err, err
    assert len(err.strip().splitlines()) == 1, err


@pytest.mark.network
@pytest.mark.parametrize("command", ["serve-env", "serve-model"])
def test_idle_connection_timeout_reaches_the_server(command: str) -> None:
    target = "gymnasium:CartPole-v1" if command == "serve-env" else "tests.cli.models:AlwaysLeft"
    with serving([command, target, "--idle-connection-timeout", "0.5"]) as address:
        host, port = address.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=20) as sock:
            sock.sendall(PREFACE + EMPTY_SETTINGS)
            received = b""
            while chunk := sock.recv(65536):
                received += chunk
    # The server's SETTINGS (and its ACK of ours), then GOAWAY NO_ERROR saying why.
    assert b"no call for 0.5 s" in received
