"""The env client, on each backend, against the scriptable fake env server (:mod:`.fake_env`).

On the trio backend everything runs over ``memory://`` under the autojump clock, so the
times asserted are exact virtual times; on grpclib the fake listens on a Unix socket and the
clock is real (see the conftest).
"""

from __future__ import annotations

from collections.abc import Callable

import betterproto2
import pytest
import trio
import trio.testing

from trio_rlmesh import EnvError, OperationTimeout, ProtocolError, SpecError, TransportError
from trio_rlmesh.protocol import WORKFLOW_EDITION, env_v1, spaces_v1
from trio_rlmesh.runtime._interfaces import EnvStepResult, RuntimeEnv
from trio_rlmesh.transports.grpc import (
    BackendName,
    EnvClient,
    EnvClientRuntimeEnv,
    RemoteEnvError,
    RemoteEnvTimeout,
    open_env_client,
)

from .fake_env import FakeEnvService, serve_fake_env

Where = Callable[[str], str]


def action(i: int) -> env_v1.StepRequest:
    return env_v1.StepRequest(action=spaces_v1.SpaceValue(leaves=[bytes([i % 256, i // 256])]))


def kinds(service: FakeEnvService) -> list[str]:
    return [betterproto2.which_one_of(r, "kind")[0] for r in service.requests]


def elapsed_is(clock: object, start: float, expected: float) -> bool:
    """Exactly ``expected`` seconds of virtual time, or (real clock) at least that and not
    much more."""
    elapsed = trio.current_time() - start
    if clock is not None:
        return elapsed == pytest.approx(expected, abs=1e-6)
    return expected <= elapsed < expected + 2.0


async def test_handshake_then_lazy_join_with_configure_first(
    backend: BackendName, clock: object, address: Where
) -> None:
    service = FakeEnvService(capabilities={"subset_step": "true"}, num_envs=0)
    with trio.fail_after(10):
        async with (
            serve_fake_env(service, address("env")) as fake,
            open_env_client(fake.address, backend=backend) as env,
        ):
            assert env.address == fake.address
            assert env.num_envs == 1
            assert env.subset_step
            assert env.workflow_edition == WORKFLOW_EDITION
            assert env.server_info.component == "rlmesh-env"
            assert env.contract.spec is not None
            assert env.contract.spec.id == "Fake-v0"
            assert service.joins == 0  # no Join until the first request
            result = await env.reset(env_v1.ResetRequest(seeds=[7]))
            assert result.response.observation == spaces_v1.SpaceValue(
                leaves=[(7).to_bytes(8, "little")]
            )
            assert result.timings.total_ns == 1234
            assert result.timings.user_ns == 99
            assert result.request_bytes is not None
            assert result.request_bytes > 0
            assert result.response_bytes is not None
            assert result.response_bytes > 0
            step = await env.step(action(3))
            assert step.response.rewards == [3.0]
            render = await env.render()
            assert render.frame == b"png"
            final = await env.close()
            assert [e.episode_id for e in final] == ["last"]
    assert kinds(service) == ["configure", "reset", "step", "render", "close"]
    assert [r.request_id for r in service.requests] == [f"grpc-req-{n}" for n in range(1, 6)]
    assert service.requests[0].configure is not None
    assert service.requests[0].configure.selected_workflow_edition == WORKFLOW_EDITION
    assert service.requests[3].render is not None
    assert service.requests[3].render.env_indices == [0]
    assert service.join_ended == ["close"]
    assert service.eof_with_close == [True]


async def test_close_survives_a_stream_reset_right_after_the_answer(
    backend: BackendName, clock: object, address: Where
) -> None:
    # rlmesh 0.1.0 resets the stream right after answering Close; the answer must still
    # reach us, and Close must carry END_STREAM itself.
    service = FakeEnvService()
    with trio.fail_after(10):
        async with serve_fake_env(service, address("env")) as fake:
            for reset in (True, False):
                service.reset_after_close = reset
                async with open_env_client(fake.address, backend=backend) as env:
                    await env.reset()
                    final = await env.close()
                assert [e.episode_id for e in final] == ["last"]
    assert service.eof_with_close == [True, True]


async def test_handshake_request_looks_like_a_010_client(
    backend: BackendName, clock: object, address: Where
) -> None:
    service = FakeEnvService()
    with trio.fail_after(10):
        async with (
            serve_fake_env(service, address("env")) as fake,
            open_env_client(fake.address, backend=backend),
        ):
            pass
    base = service.handshakes[0].base
    assert base is not None
    assert base.protocol_generation == "rlmesh-wire-v1"
    assert base.capabilities == {}
    assert base.supported_workflow_editions == [WORKFLOW_EDITION]
    assert base.preferred_workflow_edition == WORKFLOW_EDITION
    assert base.peer_info is not None
    assert base.peer_info.component == "rlmesh-env"
    assert base.peer_info.language == "python"
    assert base.peer_info.extra["rlmesh.workflow.edition"] == WORKFLOW_EDITION
    assert base.peer_info.extra["rlmesh.build.cohort"] == "stable"
    assert "trio" in base.peer_info.framework_versions


async def test_close_without_join_sends_nothing(
    backend: BackendName, clock: object, address: Where
) -> None:
    service = FakeEnvService()
    with trio.fail_after(10):
        async with (
            serve_fake_env(service, address("env")) as fake,
            open_env_client(fake.address, backend=backend) as env,
        ):
            assert await env.close() == []
            with pytest.raises(TransportError, match="closed"):
                await env.reset()
    assert service.joins == 0


@pytest.mark.parametrize("token", [None, "s3cret"])
async def test_token_header_present_only_with_a_token(
    backend: BackendName, clock: object, address: Where, token: str | None
) -> None:
    service = FakeEnvService(token=token)
    with trio.fail_after(10):
        async with (
            serve_fake_env(service, address("env")) as fake,
            open_env_client(fake.address, token=token, backend=backend) as env,
        ):
            await env.reset()
            await env.shutdown("test")
    assert len(service.metadata) == 3  # handshake, join, shutdown
    for seen in service.metadata:
        if token is None:
            assert "authorization" not in seen
        else:
            assert seen["authorization"] == token  # raw, no "Bearer "


async def test_picks_the_highest_mutual_edition(
    backend: BackendName, clock: object, address: Where
) -> None:
    service = FakeEnvService(editions=["2026.06", "2026.06-0.1.0-rc.5", "2027.01"])
    with trio.fail_after(10):
        async with (
            serve_fake_env(service, address("env")) as fake,
            open_env_client(
                fake.address, editions=["2026.06", "2026.06-0.1.0-rc.5"], backend=backend
            ) as env,
        ):
            assert env.workflow_edition == "2026.06-0.1.0-rc.5"
            await env.reset()
    configure = service.requests[0].configure
    assert configure is not None
    assert configure.selected_workflow_edition == "2026.06-0.1.0-rc.5"


async def test_missing_contract_is_a_protocol_error(
    backend: BackendName, clock: object, address: Where
) -> None:
    service = FakeEnvService(contract=False)
    with trio.fail_after(10):
        async with serve_fake_env(service, address("env")) as fake:
            with pytest.raises(ProtocolError, match="no env contract"):
                async with open_env_client(fake.address, backend=backend):
                    pass


async def test_configure_error_is_a_spec_error(
    backend: BackendName, clock: object, address: Where
) -> None:
    service = FakeEnvService(configure_error=True)
    with trio.fail_after(10):
        async with (
            serve_fake_env(service, address("env")) as fake,
            open_env_client(fake.address, backend=backend) as env,
        ):
            with pytest.raises(SpecError, match="rejected workflow edition"):
                await env.reset()
            # The client tries a fresh Join for the next request: refused the same way.
            with pytest.raises(SpecError):
                await env.step(action(1))


async def test_busy_join_is_retried(backend: BackendName, clock: object, address: Where) -> None:
    service = FakeEnvService(busy_joins=3)
    with trio.fail_after(10):
        async with (
            serve_fake_env(service, address("env")) as fake,
            open_env_client(fake.address, backend=backend) as env,
        ):
            start = trio.current_time()
            await env.reset()
            # Backoff 20, 40, 80 ms between the attempts.
            assert elapsed_is(clock, start, 0.14)
    assert service.joins_refused == 3
    assert service.joins == 1


async def test_busy_join_gives_up_with_a_clear_error(
    backend: BackendName, clock: object, address: Where
) -> None:
    service = FakeEnvService(busy_joins=10_000)
    with trio.fail_after(20):
        async with (
            serve_fake_env(service, address("env")) as fake,
            open_env_client(fake.address, backend=backend) as env,
        ):
            start = trio.current_time()
            with pytest.raises(TransportError, match="already has a client") as info:
                await env.reset()
            assert elapsed_is(clock, start, 2.0)
    assert info.value.code == "FAILED_PRECONDITION"
    assert "already has an active Join session" in str(info.value)
    assert service.joins_refused > 3


async def test_dropped_connection_names_address_operation_and_step(
    backend: BackendName, clock: object, address: Where
) -> None:
    service = FakeEnvService(faults={3: "drop"})
    with trio.fail_after(10):
        async with (
            serve_fake_env(service, address("env")) as fake,
            open_env_client(fake.address, backend=backend) as env,
        ):
            await env.reset()
            await env.step(action(1))
            await env.step(action(2))
            with pytest.raises(TransportError, match="connection lost") as info:
                await env.step(action(3), step=30)
            # Later requests fail fast with the same cause; the client counts no steps of
            # its own (a run's driver names its step), so one not given is not named.
            with pytest.raises(TransportError, match="connection lost") as later:
                await env.step(action(4))
    error = info.value
    text = str(error)
    assert fake.address in text
    assert "env.step" in text
    assert "step 30" in text
    assert (error.operation, error.step, error.address) == ("env.step", 30, fake.address)
    assert later.value.step is None
    assert "step" not in str(later.value).replace("env.step", "")


async def test_stream_reset_is_a_transport_error(
    backend: BackendName, clock: object, address: Where
) -> None:
    service = FakeEnvService(faults={1: "reset"})
    with trio.fail_after(10):
        async with (
            serve_fake_env(service, address("env")) as fake,
            open_env_client(fake.address, backend=backend) as env,
        ):
            await env.reset()
            with pytest.raises(TransportError, match=r"connection lost during env\.step") as info:
                await env.step(action(1))
    assert info.value.code is None
    assert "reset" in str(info.value).lower()


async def test_in_band_error_becomes_env_error(
    backend: BackendName, clock: object, address: Where
) -> None:
    service = FakeEnvService(faults={2: "error"})
    with trio.fail_after(10):
        async with (
            serve_fake_env(service, address("env")) as fake,
            open_env_client(fake.address, backend=backend) as env,
        ):
            await env.step(action(1))
            with pytest.raises(EnvError, match="INVALID_ACTION: action out of range") as info:
                await env.step(action(2))
            # Recoverable: the stream goes on.
            assert (await env.step(action(3))).response.rewards == [3.0]
    error = info.value
    assert isinstance(error, RemoteEnvError)
    assert error.code == "INVALID_ACTION"
    assert error.recoverable
    assert [e.episode_id for e in error.interrupted_episodes] == ["ep-1"]


async def test_wrong_reply_kind_is_a_protocol_error(
    backend: BackendName, clock: object, address: Where
) -> None:
    service = FakeEnvService(faults={1: "wrong_kind"})
    with trio.fail_after(10):
        async with (
            serve_fake_env(service, address("env")) as fake,
            open_env_client(fake.address, backend=backend) as env,
        ):
            with pytest.raises(ProtocolError, match="expected a 'step' reply"):
                await env.step(action(1))


async def test_timeout_ms_propagation(backend: BackendName, clock: object, address: Where) -> None:
    service = FakeEnvService()
    with trio.fail_after(10):
        async with serve_fake_env(service, address("env")) as fake:
            async with open_env_client(fake.address, request_timeout=2.5, backend=backend) as env:
                await env.reset()
                await env.step(action(1))
                await env.step(action(1), timeout=0.25)
                await env.step(env_v1.StepRequest(action=action(1).action, timeout_ms=777))
            async with open_env_client(fake.address, backend=backend) as env:
                await env.reset()
                original = env_v1.ResetRequest(seeds=[1])
                await env.reset(original)
                assert original.timeout_ms == 0  # the caller's message is not modified
    bodies = [r.reset if r.reset is not None else r.step for r in service.requests]
    sent = [body.timeout_ms for body in bodies if body is not None]
    assert sent == [2500, 2500, 250, 777, 0, 0]


async def test_local_timer_when_the_server_sits_on_a_request(
    backend: BackendName, clock: object, address: Where
) -> None:
    service = FakeEnvService(faults={1: "silent"})
    with trio.fail_after(10):
        async with (
            serve_fake_env(service, address("env")) as fake,
            open_env_client(fake.address, request_timeout=0.1, backend=backend) as env,
        ):
            await env.reset()
            start = trio.current_time()
            with pytest.raises(RemoteEnvTimeout, match=r"env\.step on .* after 100ms") as info:
                await env.step(action(1))
            # The request's own deadline, no grace: the watchdog is the one enforcer.
            assert elapsed_is(clock, start, 0.1)
    assert info.value.recoverable
    assert info.value.timeout == 0.1
    # The same error as the server's TIMEOUT answer would be.
    assert info.value.code == "TIMEOUT"


async def test_the_servers_timeout_answer_is_the_same_error_as_the_watchdogs(
    backend: BackendName, clock: object, address: Where
) -> None:
    errors: list[RemoteEnvTimeout] = []
    for fault in ("timeout", "silent"):
        service = FakeEnvService(faults={1: fault})
        with trio.fail_after(10):
            async with (
                serve_fake_env(service, address("env")) as fake,
                open_env_client(fake.address, request_timeout=0.1, backend=backend) as env,
            ):
                await env.reset()
                with pytest.raises(RemoteEnvTimeout) as info:
                    await env.step(action(1))
                errors.append(info.value)
                address_of = fake.address
        assert str(info.value).startswith(f"env.step on {address_of} timed out after 100ms;")
    answered, expired = errors
    assert [type(e) for e in errors] == [RemoteEnvTimeout, RemoteEnvTimeout]
    assert str(answered).replace(answered.address or "", "") == str(expired).replace(
        expired.address or "", ""
    )
    for attr in ("operation", "code", "timeout", "recoverable"):
        assert getattr(answered, attr) == getattr(expired, attr), attr


async def test_a_sooner_deadline_is_enforced_while_a_later_one_is_pending(
    backend: BackendName, clock: object, address: Where
) -> None:
    """The local timer of every request in flight fires on time, not only the first's."""
    service = FakeEnvService(concurrent=True, hold=lambda r: r.step is not None)
    with trio.fail_after(30):
        async with (
            serve_fake_env(service, address("env")) as fake,
            open_env_client(fake.address, backend=backend) as env,
        ):
            await env.reset()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(lambda: env.step(action(1), timeout=10))
                await trio.sleep(0.01)
                start = trio.current_time()
                with pytest.raises(OperationTimeout, match=r"timed out after 100ms") as info:
                    await env.step(action(2), timeout=0.1)
                assert elapsed_is(clock, start, 0.1)
                nursery.cancel_scope.cancel()
    assert info.value.timeout == 0.1


async def test_stale_replies_are_skipped_after_cancellations(
    backend: BackendName, clock: object, address: Where
) -> None:
    """A step cancelled after it was sent leaves a reply nobody waits for; the next step
    still gets its own reply, whatever the point the cancel hit."""
    service = FakeEnvService(concurrent=True, hold=lambda r: r.step is not None)
    with trio.fail_after(20):
        async with (
            serve_fake_env(service, address("env")) as fake,
            open_env_client(fake.address, backend=backend) as env,
        ):
            await env.reset()
            await service.inbox.receive()  # configure
            await service.inbox.receive()  # reset
            for i in range(20):
                # Cancelled while waiting: the request was sent whole (the fake has it).
                with trio.CancelScope() as scope:
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(env.step, action(1000 + i))
                        await service.inbox.receive()
                        scope.cancel()
                # Cancelled before sending: nothing goes out.
                with trio.CancelScope() as before:
                    before.cancel()
                    await env.step(action(2000 + i))
                service.held[-1].release.set()  # the cancelled step's reply: stale
                mine = i % 251
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(env.step, action(mine))
                    request = await service.inbox.receive()
                    assert request.step is not None
                    assert request.step.action is not None
                    assert request.step.action.leaves == [bytes([mine, 0])]
                    service.held[-1].release.set()
            stats = env.statistics()
            assert stats.stale_replies == 20
            assert stats.in_flight == 0
            # And the answers were the right ones.
            result = await _released_step(env, service, 77)
            assert result.response.rewards == [77.0]
    assert len(service.held) == 41


async def _released_step(env: EnvClient, service: FakeEnvService, i: int) -> EnvStepResult:
    results: list[EnvStepResult] = []

    async def run() -> None:
        results.append(await env.step(action(i)))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        await service.inbox.receive()
        service.held[-1].release.set()
    return results[0]


async def test_unknown_reply_ids_are_skipped(
    backend: BackendName, clock: object, address: Where
) -> None:
    service = FakeEnvService(extra_stale=True)
    with trio.fail_after(10):
        async with (
            serve_fake_env(service, address("env")) as fake,
            open_env_client(fake.address, backend=backend) as env,
        ):
            for i in range(5):
                assert (await env.step(action(i))).response.rewards == [float(i)]
            assert env.statistics().stale_replies == 5


async def test_concurrent_requests_are_demultiplexed(
    backend: BackendName, clock: object, address: Where
) -> None:
    """Four lanes in flight at once, answered in reverse order: each caller gets its own."""
    service = FakeEnvService(
        num_envs=4,
        capabilities={"subset_step": "true"},
        concurrent=True,
        hold=lambda r: r.step is not None,
    )
    with trio.fail_after(10):
        async with (
            serve_fake_env(service, address("env")) as fake,
            open_env_client(fake.address, backend=backend) as env,
        ):
            await env.reset()
            await service.inbox.receive()  # configure
            await service.inbox.receive()  # reset
            for _ in range(3):
                results: dict[int, list[float]] = {}
                order: list[int] = []
                done = {k: trio.Event() for k in range(4)}

                async def lane(k: int) -> None:
                    request = action(10 + k)
                    request.env_indices = [k]
                    result = await env.step(request)
                    order.append(k)  # noqa: B023
                    assert result.response.env_indices == [k]
                    results[k] = result.response.rewards  # noqa: B023
                    done[k].set()  # noqa: B023

                async with trio.open_nursery() as nursery:
                    for k in range(4):
                        nursery.start_soon(lane, k)
                    for _ in range(4):
                        await service.inbox.receive()
                    pending = {h.request.step.env_indices[0]: h for h in service.held[-4:]}
                    for k in (3, 2, 1, 0):
                        pending[k].release.set()
                        await done[k].wait()
                assert order == [3, 2, 1, 0]
                assert results == {k: [float(10 + k)] for k in range(4)}


async def test_runtime_env_adapter(backend: BackendName, clock: object, address: Where) -> None:
    service = FakeEnvService()
    with trio.fail_after(10):
        async with (
            serve_fake_env(service, address("env")) as fake,
            open_env_client(fake.address, backend=backend) as client,
        ):
            env = EnvClientRuntimeEnv(client)
            assert isinstance(env, RuntimeEnv)
            await env.reset(env_v1.ResetRequest())
            assert (await env.step(action(9))).response.rewards == [9.0]
            await env.close(timeout=5)
            await env.close(timeout=5)  # idempotent
    assert service.join_ended == ["close"]


async def test_error_context_from_the_adapter(
    backend: BackendName, clock: object, address: Where
) -> None:
    service = FakeEnvService(faults={1: "error"})
    with trio.fail_after(10):
        async with (
            serve_fake_env(service, address("env")) as fake,
            open_env_client(fake.address, backend=backend) as client,
        ):
            env = EnvClientRuntimeEnv(client)
            with pytest.raises(EnvError) as info:
                await env.step(action(1))
    assert info.value.operation == "env.step"
    assert info.value.address == fake.address


async def test_cancelled_block_still_closes_the_join(
    backend: BackendName, clock: object, address: Where
) -> None:
    service = FakeEnvService()
    with trio.fail_after(10):
        async with serve_fake_env(service, address("env")) as fake:
            with trio.CancelScope() as scope:
                async with open_env_client(fake.address, backend=backend) as env:
                    await env.reset()
                    scope.cancel()
                    await trio.sleep_forever()
            assert scope.cancelled_caught
            # The fake saw a proper Close even though the block was cancelled.
            await service.join_done.wait()
    assert service.join_ended == ["close"]


async def test_a_second_client_after_close_gets_the_slot(
    backend: BackendName, clock: object, address: Where
) -> None:
    service = FakeEnvService()
    with trio.fail_after(10):
        async with serve_fake_env(service, address("env")) as fake:
            for _ in range(3):
                async with open_env_client(fake.address, backend=backend) as env:
                    await env.reset()
    assert service.joins == 3


async def test_server_shutting_down_mid_request_is_reported_as_unavailable(
    backend: BackendName, clock: object, address: Where
) -> None:
    """The fake (the trio backend's server) stops while a step is pending: every open call
    ends with UNAVAILABLE, which the client reports as a recoverable TransportError."""
    service = FakeEnvService(faults={1: "silent"})
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            stop = trio.Event()
            ready: list[str] = []

            async def run_fake(task_status: trio.TaskStatus[None]) -> None:
                async with serve_fake_env(service, address("env")) as fake:
                    ready.append(fake.address)
                    task_status.started()
                    await stop.wait()

            await nursery.start(run_fake)
            async with open_env_client(ready[0], backend=backend) as env:
                await env.reset()
                async with trio.open_nursery() as inner:

                    async def step() -> None:
                        with pytest.raises(TransportError, match="UNAVAILABLE") as info:
                            await env.step(action(1))
                        assert info.value.recoverable
                        assert "shutting down" in str(info.value)

                    inner.start_soon(step)
                    request = await service.inbox.receive()
                    while request.step is None:
                        request = await service.inbox.receive()
                    stop.set()
