"""``trio-rlmesh serve-env`` as a subprocess: address on stdout and in --ready-file, signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from tests._process import first_line
from tests.transports.grpc.servers import env_handshake
from tests.transports.grpc.wire import open_raw_client
from trio_rlmesh._cli._exit import UsageError
from trio_rlmesh._cli._targets import load_env_target

pytestmark = pytest.mark.network

ROOT = Path(__file__).resolve().parents[2]


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
    return process, await first_line(process, "serve-env")


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
        process, address = await _serve("tests.cli.envs:make", "--num-envs", "2", "--token", "t")
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


async def test_serve_env_instantiates_a_class_with_arguments(tmp_path: Path) -> None:
    with trio.fail_after(60):
        process, address = await _serve(
            "tests.cli.envs:Counter", "--env-kwargs", '{"length": 2}', "--env-arg", "scale=0.5"
        )
        try:
            out = tmp_path / "report.json"
            await trio.run_process(
                [
                    *(sys.executable, "-m", "trio_rlmesh", "run", "--env", address),
                    *("--model", "tests.cli.models:AlwaysLeft", "--episodes", "3"),
                    *("--no-progress", "--json", str(out)),
                ],
                env=_env(),
                capture_stdout=True,
                capture_stderr=True,
            )
            process.send_signal(signal.SIGTERM)
            assert await process.wait() == 0
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
    report = json.loads(out.read_text())
    assert [(e["steps"], e["reward"]) for e in report["episodes"]] == [(2, 1.0)] * 3


def test_load_env_target() -> None:
    from .envs import ENV, Counter

    assert load_env_target("tests.cli.envs:ENV") is ENV
    made = load_env_target("tests.cli.envs:make")()
    assert isinstance(made, Counter)
    # A class is a factory: each call makes an instance, with the env arguments.
    factory = load_env_target("tests.cli.envs:Counter", {"length": 7})
    first, second = factory(), factory()
    assert isinstance(first, Counter)
    assert first is not second
    assert first.length == 7
    cartpole = load_env_target("gymnasium:CartPole-v1", {"render_mode": "rgb_array"})()
    assert cartpole.render_mode == "rgb_array"
    cartpole.close()
    for bad in ("CartPole-v1", "no_such_module_xyz:env", "tests.cli.envs:nope"):
        with pytest.raises(UsageError, match=r"ENV must be|no module named|has no 'nope'"):
            load_env_target(bad)
