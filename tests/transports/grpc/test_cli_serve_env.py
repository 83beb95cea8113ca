"""``trio-rlmesh serve-env`` as a subprocess: address on stdout and in --ready-file, signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from trio_rlmesh._cli import load_env_target, main

from .servers import env_handshake
from .wire import open_raw_client

pytestmark = pytest.mark.network

ROOT = Path(__file__).resolve().parents[3]


def _env() -> dict[str, str]:
    paths = [str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}


async def _serve(*args: str) -> tuple[trio.Process, str]:
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "trio_rlmesh._cli", "serve-env", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
    )
    assert process.stdout is not None
    line = b""
    while not line.endswith(b"\n"):
        chunk = await process.stdout.receive_some(1)
        if not chunk:
            break
        line += chunk
    return process, line.decode().strip()


@pytest.mark.parametrize(
    ("sig", "code"), [(signal.SIGTERM, 0), (signal.SIGINT, 130)], ids=["SIGTERM", "SIGINT"]
)
async def test_serve_env_cli(tmp_path: Path, sig: signal.Signals, code: int) -> None:
    ready = tmp_path / "ready"
    with trio.fail_after(60):
        process, address = await _serve(
            "gymnasium:CartPole-v1", "--bind", "127.0.0.1:0", "--ready-file", str(ready)
        )
        try:
            host, _, port = address.rpartition(":")
            assert host == "127.0.0.1"
            assert int(port) > 0
            assert ready.read_text().strip() == address
            async with open_raw_client(address) as raw:
                response = await env_handshake(raw)
                assert response.env_contract is not None
                assert response.env_contract.spec is not None
                assert response.env_contract.spec.id == "CartPole-v1"
            process.send_signal(sig)
            assert await process.wait() == code
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()


async def test_serve_env_cli_module_target_with_lanes_and_token() -> None:
    with trio.fail_after(60):
        process, address = await _serve(
            "tests.transports.grpc.cli_envs:make", "--num-envs", "2", "--token", "t"
        )
        try:
            async with open_raw_client(address, token="t") as raw:
                response = await env_handshake(raw)
                assert response.env_contract is not None
                assert response.env_contract.num_envs == 2
            process.send_signal(signal.SIGTERM)
            assert await process.wait() == 0
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()


def test_load_env_target() -> None:
    from .cli_envs import ENV, make

    assert load_env_target("tests.transports.grpc.cli_envs:ENV") is ENV
    assert load_env_target("tests.transports.grpc.cli_envs:make") is make
    assert callable(load_env_target("gymnasium:CartPole-v1"))
    for bad in ("CartPole-v1", "no_such_module_xyz:env", "tests.transports.grpc.cli_envs:nope"):
        with pytest.raises(ValueError, match=r"ENV must be|cannot import|has no attribute"):
            load_env_target(bad)


def test_cli_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve-model", "x:y"]) == 2
    assert "cannot import module 'x' for MODEL" in capsys.readouterr().err
    assert main(["serve-env", "not-a-target"]) == 2
    assert "ENV must be" in capsys.readouterr().err
    assert main(["serve-env", "tests.transports.grpc.cli_envs:NOT_AN_ENV"]) == 1
    assert "cannot serve a int" in capsys.readouterr().err
