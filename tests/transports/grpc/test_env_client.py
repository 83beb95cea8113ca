"""The env client against the in-process fake env server (real sockets on loopback)."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from grpclib.const import Status
from grpclib.exceptions import GRPCError, StreamTerminatedError

from trio_rlmesh import (
    EnvError,
    Error,
    OperationTimeout,
    ProtocolError,
    SpecError,
    TransportError,
)
from trio_rlmesh.protocol import WORKFLOW_EDITION, env_v1, spaces_v1
from trio_rlmesh.runtime._interfaces import EnvStepResult, RuntimeEnv
from trio_rlmesh.transports.grpc._common import (
    map_grpc_error,
    parse_address,
    parse_bind_address,
)
from trio_rlmesh.transports.grpc._env_client import (
    EnvClient,
    EnvClientRuntimeEnv,
    RemoteEnvError,
    open_env_client,
)

from .conftest import FakeEnvServer, FakeEnvService, serve_fake_env

pytestmark = pytest.mark.network


def action(i: int) -> env_v1.StepRequest:
    return env_v1.StepRequest(action=spaces_v1.SpaceValue(leaves=[bytes([i % 256, i // 256])]))


def kinds(service: FakeEnvService) -> list[str]:
    import betterproto2

    return [betterproto2.which_one_of(r, "kind")[0] for r in service.requests]


async def test_handshake_then_lazy_join_with_configure_first(fake_env: FakeEnvServer) -> None:
    fake_env.service.capabilities = {"subset_step": "true"}
    fake_env.service.num_envs = 0
    with trio.fail_after(10):
        async with open_env_client(fake_env.address) as env:
            assert env.address == f"tcp://{fake_env.address}"
            assert env.num_envs == 1
            assert env.subset_step
            assert env.workflow_edition == WORKFLOW_EDITION
            assert env.server_info.component == "rlmesh-env"
            assert env.contract.spec is not None
            assert env.contract.spec.id == "Fake-v0"
            assert fake_env.service.joins == 0  # no Join until the first request
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
    service = fake_env.service
    assert kinds(service) == ["configure", "reset", "step", "render", "close"]
    assert [r.request_id for r in service.requests] == [f"grpc-req-{n}" for n in range(1, 6)]
    assert service.requests[0].configure is not None
    assert service.requests[0].configure.selected_workflow_edition == WORKFLOW_EDITION
    assert service.requests[3].render is not None
    assert service.requests[3].render.env_indices == [0]
    assert service.join_ended == ["close"]
    assert service.eof_with_close == [True]


async def test_close_survives_a_stream_reset_right_after_the_answer(
    fake_env: FakeEnvServer,
) -> None:
    # rlmesh 0.1.0 resets the stream right after answering Close (trap 4); the
    # answer must still reach us, and Close must carry END_STREAM itself.
    for reset in (True, False):
        fake_env.service.reset_after_close = reset
        with trio.fail_after(10):
            async with open_env_client(fake_env.address) as env:
                await env.reset()
                final = await env.close()
        assert [e.episode_id for e in final] == ["last"]
    assert fake_env.service.eof_with_close == [True, True]


async def test_handshake_request_looks_like_a_010_client(fake_env: FakeEnvServer) -> None:
    with trio.fail_after(10):
        async with open_env_client(fake_env.address):
            pass
    base = fake_env.service.handshakes[0].base
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


async def test_close_without_join_sends_nothing(fake_env: FakeEnvServer) -> None:
    with trio.fail_after(10):
        async with open_env_client(fake_env.address) as env:
            assert await env.close() == []
            with pytest.raises(TransportError, match="closed"):
                await env.reset()
    assert fake_env.service.joins == 0


@pytest.mark.parametrize("token", [None, "s3cret"])
async def test_token_header_present_only_with_a_token(
    fake_env: FakeEnvServer, token: str | None
) -> None:
    fake_env.service.token = token
    with trio.fail_after(10):
        async with open_env_client(fake_env.address, token=token) as env:
            await env.reset()
            await env.shutdown("test")
    assert len(fake_env.service.metadata) == 3  # handshake, join, shutdown
    for seen in fake_env.service.metadata:
        if token is None:
            assert "authorization" not in seen
        else:
            assert seen["authorization"] == token  # raw, no "Bearer "


async def test_wrong_token_is_named_as_the_problem(fake_env: FakeEnvServer) -> None:
    fake_env.service.token = "right"
    with trio.fail_after(10):
        with pytest.raises(TransportError, match="rejected the token") as info:
            async with open_env_client(fake_env.address, token="wrong"):
                pass
    assert info.value.code == "UNAUTHENTICATED"
    assert info.value.operation == "env.handshake"
    assert info.value.address == f"tcp://{fake_env.address}"


async def test_incompatible_generation(fake_env: FakeEnvServer) -> None:
    fake_env.service.generation = "rlmesh-wire-v2"
    with trio.fail_after(10), pytest.raises(ProtocolError, match="generation"):
        async with open_env_client(fake_env.address):
            pass


async def test_no_mutual_edition(fake_env: FakeEnvServer) -> None:
    fake_env.service.editions = ["2027.01"]
    with trio.fail_after(10):
        with pytest.raises(SpecError, match="no mutual workflow edition") as info:
            async with open_env_client(fake_env.address):
                pass
    assert "2027.01" in str(info.value)


async def test_picks_the_highest_mutual_edition(fake_env: FakeEnvServer) -> None:
    fake_env.service.editions = ["2026.06", "2026.06-0.1.0-rc.5", "2027.01"]
    with trio.fail_after(10):
        async with open_env_client(
            fake_env.address, editions=["2026.06", "2026.06-0.1.0-rc.5"]
        ) as env:
            assert env.workflow_edition == "2026.06-0.1.0-rc.5"
            await env.reset()
    configure = fake_env.service.requests[0].configure
    assert configure is not None
    assert configure.selected_workflow_edition == "2026.06-0.1.0-rc.5"


async def test_missing_contract_is_a_protocol_error(fake_env: FakeEnvServer) -> None:
    fake_env.service.contract = False
    with trio.fail_after(10), pytest.raises(ProtocolError, match="no env contract"):
        async with open_env_client(fake_env.address):
            pass


async def test_configure_error_is_a_spec_error(fake_env: FakeEnvServer) -> None:
    fake_env.service.configure_error = True
    with trio.fail_after(10):
        async with open_env_client(fake_env.address) as env:
            with pytest.raises(SpecError, match="rejected workflow edition"):
                await env.reset()
            # The failure sticks: the stream is unusable.
            with pytest.raises(SpecError):
                await env.step(action(1))


async def test_busy_join_is_retried(fake_env: FakeEnvServer) -> None:
    fake_env.service.busy_joins = 3
    with trio.fail_after(10):
        async with open_env_client(fake_env.address) as env:
            await env.reset()
    assert fake_env.service.joins_refused == 3
    assert fake_env.service.joins == 1


async def test_busy_join_gives_up_with_a_clear_error(fake_env: FakeEnvServer) -> None:
    fake_env.service.busy_joins = 10_000
    with trio.fail_after(10):
        async with open_env_client(fake_env.address) as env:
            start = trio.current_time()
            with pytest.raises(TransportError, match="already has a client") as info:
                await env.reset()
            elapsed = trio.current_time() - start
    assert info.value.code == "FAILED_PRECONDITION"
    # Retried for the whole window (BUSY_RETRY_SECONDS = 2); the fail_after guard bounds the
    # other side, so no upper bound on a duration is asserted.
    assert elapsed >= 1.5
    assert fake_env.service.joins_refused > 3


async def test_unreachable_server() -> None:
    with trio.socket.socket() as sock:
        await sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with trio.fail_after(10):
        with pytest.raises(TransportError, match=f"127.0.0.1:{port}") as info:
            async with open_env_client(f"127.0.0.1:{port}"):
                pass
    assert info.value.operation == "env.handshake"


async def test_connect_timeout() -> None:
    # A listening socket that never answers: the handshake cannot complete.
    with trio.socket.socket() as sock:
        await sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        port = sock.getsockname()[1]
        with trio.fail_after(10):
            with pytest.raises(OperationTimeout, match="timed out") as info:
                async with open_env_client(f"127.0.0.1:{port}", connect_timeout=0.3):
                    pass
    assert isinstance(info.value, TimeoutError)


async def test_dropped_connection_names_address_operation_and_step(
    fake_env: FakeEnvServer,
) -> None:
    fake_env.service.drop_on_step = 3
    with trio.fail_after(10):
        async with open_env_client(fake_env.address) as env:
            await env.reset()
            await env.step(action(1))
            await env.step(action(2))
            with pytest.raises(TransportError) as info:
                await env.step(action(3))
            # Later requests fail fast with the same cause.
            with pytest.raises(TransportError):
                await env.step(action(4))
    error = info.value
    text = str(error)
    assert f"tcp://{fake_env.address}" in text
    assert "env.step" in text
    assert "step 2" in text
    assert (error.operation, error.step, error.address) == (
        "env.step",
        2,
        f"tcp://{fake_env.address}",
    )


async def test_in_band_error_becomes_env_error(fake_env: FakeEnvServer) -> None:
    fake_env.service.error_on_step = 2
    with trio.fail_after(10):
        async with open_env_client(fake_env.address) as env:
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


async def test_wrong_reply_kind_is_a_protocol_error(fake_env: FakeEnvServer) -> None:
    fake_env.service.wrong_kind_on_step = 1
    with trio.fail_after(10):
        async with open_env_client(fake_env.address) as env:
            with pytest.raises(ProtocolError, match="expected a 'step' reply"):
                await env.step(action(1))


async def test_timeout_ms_propagation(fake_env: FakeEnvServer) -> None:
    with trio.fail_after(10):
        async with open_env_client(fake_env.address, request_timeout=2.5) as env:
            await env.reset()
            await env.step(action(1))
            await env.step(action(1), timeout=0.25)
            await env.step(env_v1.StepRequest(action=action(1).action, timeout_ms=777))
        async with open_env_client(fake_env.address) as env:
            await env.reset()
            original = env_v1.ResetRequest(seeds=[1])
            await env.reset(original)
            assert original.timeout_ms == 0  # the caller's message is not modified
    sent = [
        r.reset.timeout_ms if r.reset is not None else r.step.timeout_ms
        for r in fake_env.service.requests
        if r.reset is not None or r.step is not None
    ]
    assert sent == [2500, 2500, 250, 777, 0, 0]


async def test_local_timer_when_the_server_sits_on_a_request(fake_env: FakeEnvServer) -> None:
    fake_env.service.hold = lambda r: r.step is not None
    with trio.fail_after(10):
        async with open_env_client(fake_env.address, request_timeout=0.1) as env:
            with pytest.raises(OperationTimeout, match=r"env\.step") as info:
                await env.step(action(1))
            # The fake still sits on the step: the client's own timer ended the wait.
            assert [r.request_id for r, _ in fake_env.service.held] == ["grpc-req-2"]
            # Answered late, the step frees the fake for the Close that ends the session.
            await fake_env.release()
    assert info.value.recoverable
    assert info.value.timeout == 0.1
    assert fake_env.service.join_ended == ["close"]


def _abandoned(request: env_v1.JoinRequest) -> bool:
    """The steps the test gives up on carry an action of 1000 or more."""
    if request.step is None or request.step.action is None:
        return False
    low, high = request.step.action.leaves[0]
    return low + 256 * high >= 1000


async def _give_up_while_held(
    env: EnvClient, fake: FakeEnvServer, request: env_v1.StepRequest
) -> None:
    """Send ``request``, and cancel the call once the fake sits on it."""
    scope = trio.CancelScope()

    async def attempt() -> None:
        with scope:
            await env.step(request)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(attempt)
        await fake.wait_for(lambda s: len(s.held) == 1)
        scope.cancel()
    assert scope.cancelled_caught


async def test_stale_replies_are_skipped_after_cancellations(fake_env: FakeEnvServer) -> None:
    """Requests given up on at each point a caller can cancel; every late reply is skipped.

    The fake sits on each abandoned step until the test releases it, so where the cancel
    lands is chosen, not drawn: (0) before the request is sent; (1) while the fake sits on
    it, released before the next request; (2) the same, released while the next one waits.
    """
    fake_env.service.hold = _abandoned
    given_up = 0
    with trio.fail_after(30):
        async with open_env_client(fake_env.address) as env:
            await env.reset()
            for i in range(30):
                point = i % 3
                if point == 0:
                    with trio.CancelScope() as scope:
                        scope.cancel()
                        await env.step(action(1000 + i))
                    assert scope.cancelled_caught
                else:
                    await _give_up_while_held(env, fake_env, action(1000 + i))
                    given_up += 1
                mine = i % 251
                results: list[EnvStepResult] = []
                async with trio.open_nursery() as nursery:
                    if point == 2:

                        async def own(n: int = mine, out: list[EnvStepResult] = results) -> None:
                            out.append(await env.step(action(n)))

                        nursery.start_soon(own)
                        await trio.testing.wait_all_tasks_blocked()
                    # Release the late answer (which the fake sends before anything else).
                    await fake_env.release()
                if not results:
                    results.append(await env.step(action(mine)))
                # Whatever was left in flight, the next answer is our own.
                (result,) = results
                assert result.response.rewards == [float(mine)]
                assert result.response.observation is not None
                assert result.response.observation.leaves == [bytes([mine, 0])]
            stats = env.statistics()
    assert given_up == 20
    assert stats.stale_replies == given_up
    assert stats.in_flight == 0
    # Nothing was sent for the requests cancelled before they started.
    assert len([r for r in fake_env.service.requests if _abandoned(r)]) == given_up


async def test_unknown_reply_ids_are_skipped(fake_env: FakeEnvServer) -> None:
    fake_env.service.extra_stale = True
    with trio.fail_after(10):
        async with open_env_client(fake_env.address) as env:
            for i in range(5):
                assert (await env.step(action(i))).response.rewards == [float(i)]
            assert env.statistics().stale_replies == 5


async def test_concurrent_requests_are_demultiplexed() -> None:
    # The fake sits on every step; the test releases lane 3's, then 2's, 1's and 0's, each
    # once the previous answer reached its caller, so replies arrive in reverse order.
    service = FakeEnvService(
        num_envs=4,
        capabilities={"subset_step": "true"},
        concurrent=True,
        hold=lambda r: r.step is not None,
    )
    async with serve_fake_env(service) as fake:
        with trio.fail_after(10):
            async with open_env_client(fake.address) as env:
                await env.reset()
                results: dict[int, list[float]] = {}
                order: list[int] = []
                answered: dict[int, trio.Event] = {}

                async def lane(k: int) -> None:
                    request = action(10 + k)
                    request.env_indices = [k]
                    result = await env.step(request)
                    order.append(k)
                    answered[k].set()
                    assert result.response.env_indices == [k]
                    results[k] = result.response.rewards

                for _ in range(3):
                    order.clear()
                    answered.update({k: trio.Event() for k in range(4)})
                    async with trio.open_nursery() as nursery:
                        for k in range(4):
                            nursery.start_soon(lane, k)
                        await fake.wait_for(lambda s: len(s.held) == 4)
                        for k in (3, 2, 1, 0):
                            (request,) = [
                                r
                                for r, _ in fake.service.held
                                if r.step is not None and r.step.env_indices == [k]
                            ]
                            await fake.release(request)
                            await answered[k].wait()
                    assert order == [3, 2, 1, 0]
                    assert results == {k: [float(10 + k)] for k in range(4)}


async def test_runtime_env_adapter(fake_env: FakeEnvServer) -> None:
    with trio.fail_after(10):
        async with open_env_client(fake_env.address) as client:
            env = EnvClientRuntimeEnv(client)
            assert isinstance(env, RuntimeEnv)
            await env.reset(env_v1.ResetRequest())
            assert (await env.step(action(9))).response.rewards == [9.0]
            await env.close(timeout=5)
            await env.close(timeout=5)  # idempotent
    assert fake_env.service.join_ended == ["close"]


async def test_error_context_from_the_adapter(fake_env: FakeEnvServer) -> None:
    fake_env.service.error_on_step = 1
    with trio.fail_after(10):
        async with open_env_client(fake_env.address) as client:
            env = EnvClientRuntimeEnv(client)
            with pytest.raises(EnvError) as info:
                await env.step(action(1))
    assert info.value.operation == "env.step"
    assert info.value.address == f"tcp://{fake_env.address}"


async def test_cancelled_block_still_closes_the_join(fake_env: FakeEnvServer) -> None:
    with trio.fail_after(10):
        with trio.CancelScope() as scope:
            async with open_env_client(fake_env.address) as env:
                await env.reset()
                scope.cancel()
                await trio.sleep_forever()
        assert scope.cancelled_caught
        # The server saw a proper Close even though the block was cancelled.
        await fake_env.wait_for(lambda s: bool(s.join_ended))
    assert fake_env.service.join_ended == ["close"]


async def test_a_second_client_after_close_gets_the_slot(fake_env: FakeEnvServer) -> None:
    with trio.fail_after(10):
        for _ in range(3):
            async with open_env_client(fake_env.address) as env:
                await env.reset()
    assert fake_env.service.joins == 3


@pytest.mark.parametrize(
    ("text", "display"),
    [
        ("localhost:50051", "tcp://localhost:50051"),
        ("tcp://10.0.0.1:1", "tcp://10.0.0.1:1"),
        ("http://host:8080", "tcp://host:8080"),
        ("[::1]:9000", "tcp://[::1]:9000"),
        ("unix:///tmp/env.sock", "unix:///tmp/env.sock"),
    ],
)
def test_parse_address(text: str, display: str) -> None:
    assert str(parse_address(text)) == display


@pytest.mark.parametrize(
    "text", ["https://host:1", "ftp://host:1", ":50051", "host", "host:port", "host:70000"]
)
def test_parse_address_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="invalid address"):
        parse_address(text)


@pytest.mark.parametrize(
    ("text", "display"),
    [
        ("0", "tcp://127.0.0.1:0"),
        ("localhost:7", "tcp://127.0.0.1:7"),
        (":7", "tcp://127.0.0.1:7"),
        ("tcp://0.0.0.0:7", "tcp://0.0.0.0:7"),
        ("unix:///tmp/s", "unix:///tmp/s"),
    ],
)
def test_parse_bind_address(text: str, display: str) -> None:
    assert str(parse_bind_address(text)) == display


@pytest.mark.parametrize(
    ("status", "kind", "recoverable"),
    [
        (Status.UNAVAILABLE, TransportError, True),
        (Status.RESOURCE_EXHAUSTED, TransportError, True),
        (Status.ABORTED, TransportError, True),
        (Status.UNAUTHENTICATED, TransportError, False),
        (Status.INTERNAL, TransportError, False),
        (Status.DEADLINE_EXCEEDED, OperationTimeout, True),
    ],
)
def test_map_grpc_error_statuses(status: Status, kind: type[Error], recoverable: bool) -> None:
    error = map_grpc_error(
        GRPCError(status, "detail"), operation="env.step", address="tcp://h:1", step=4, lane=2
    )
    assert type(error) is kind
    assert error.recoverable is recoverable
    assert error.code == status.name
    assert (error.operation, error.address, error.step, error.lane) == (
        "env.step",
        "tcp://h:1",
        4,
        2,
    )


@pytest.mark.parametrize(
    "exc", [ConnectionResetError("reset by peer"), StreamTerminatedError("Connection lost")]
)
def test_map_grpc_error_connection_lost(exc: Exception) -> None:
    error = map_grpc_error(exc, operation="env.reset", address="tcp://h:1", step=9)
    assert type(error) is TransportError
    assert "env.reset" in str(error)
    assert "tcp://h:1" in str(error)
    assert "step 9" in str(error)
