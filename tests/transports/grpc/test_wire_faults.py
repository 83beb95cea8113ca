"""Issue 9 §4, the wire faults between RLMesh and us, on both backends.

* When an env raises, RLMesh's env server answers the request with an in-band EnvError
  (INTERNAL, "step failed: ValueError: ...") and then ends or resets the Join stream: our
  client must raise that error, not a lost connection (against a fake doing exactly that
  here; against ``rlmesh.EnvServer`` itself in ``tests/interop``).
* After a non-recoverable env error our server ends the Join stream as RLMesh does: the
  EnvError, then OK trailers.
* When our server stops, every open Join ends with a status (see
  ``test_env_server_shutdown.py``; ``tests/interop`` checks what an RLMesh client sees).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import trio

from trio_rlmesh import TransportError
from trio_rlmesh.protocol import env_v1, spaces_v1
from trio_rlmesh.transports.grpc import BackendName, RemoteEnvError, open_env_client, serve_env
from trio_rlmesh.transports.grpc._status import Status

from .fake_env import FATAL_MESSAGE, FakeEnvService, Fault, serve_fake_env
from .servers import Code, ToyEnv, env_join, reset, serving, step, within
from .wire import expect_status, open_raw_client

Where = Callable[[str], str]

AUTOJUMP_THRESHOLD = 0.2


def action() -> env_v1.StepRequest:
    return env_v1.StepRequest(action=spaces_v1.SpaceValue(leaves=[b"\x01"]))


@pytest.mark.parametrize("then", ["fatal_reset", "fatal_end", "fatal_cancel"])
async def test_an_in_band_env_error_followed_by_the_stream_end_is_the_env_error(
    backend: BackendName, clock: object, address: Where, then: Fault
) -> None:
    """RLMesh's order: the EnvError reply, then RST_STREAM (NO_ERROR or CANCEL) or OK
    trailers. The caller gets the EnvError with RLMesh's code and message, every time."""
    service = FakeEnvService(faults=dict.fromkeys(range(1, 100), then))
    with trio.fail_after(30):
        async with serve_fake_env(service, address("env")) as fake:
            for _ in range(10):
                async with open_env_client(fake.address, backend=backend) as env:
                    await env.reset()
                    with pytest.raises(RemoteEnvError) as info:
                        await env.step(action())
                    error = info.value
                    assert error.code == "INTERNAL"
                    assert not error.recoverable
                    assert f"INTERNAL: {FATAL_MESSAGE}" in str(error)
                    assert (error.operation, error.step) == ("env.step", None)
                    # The session is over, and the next request says how it ended: OK
                    # trailers (then RST_STREAM NO_ERROR) are a clean end, a bare reset a loss.
                    ended = (
                        "the server ended the Join stream"
                        if then == "fatal_end"
                        else r"the peer reset the stream|Stream reset by remote party"
                    )
                    with pytest.raises(TransportError, match=ended):
                        await env.step(action())


async def test_our_server_ends_the_join_after_a_non_recoverable_env_error(
    backend: BackendName, address: Where
) -> None:
    with within(20):
        async with (
            serving(serve_env, ToyEnv(fail_at=2), address("env"), backend=backend) as served,
            open_raw_client(served.address) as raw,
        ):
            async with env_join(raw) as join:
                await join.call(reset("r"))
                assert (await join.call(step("s1", 1))).step is not None
                failed = await join.call(step("s2", 1))
                assert failed.error is not None
                assert failed.error.code == Code.INTERNAL
                assert failed.error.message == "env.step failed: ValueError: the env broke"
                assert not failed.error.is_recoverable
                assert failed.request_id == "s2"
                # Then OK trailers: no reset, no other status.
                assert await expect_status(join.raw) == (Status.OK, "")
            # The slot is free for the next client (whose env still raises: in band).
            async with env_join(raw) as join:
                assert (await join.call(reset("r2"))).reset is not None


async def test_our_client_against_our_server_after_an_env_error(
    backend: BackendName, address: Where
) -> None:
    with within(20):
        async with (
            serving(serve_env, ToyEnv(fail_at=1), address("env"), backend=backend) as served,
            open_env_client(served.address, backend=backend) as env,
        ):
            await env.reset()
            with pytest.raises(RemoteEnvError, match="step failed: ValueError: the env broke"):
                await env.step(
                    env_v1.StepRequest(
                        action=spaces_v1.SpaceValue(leaves=[(1).to_bytes(8, "little")])
                    )
                )
