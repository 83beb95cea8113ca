"""The robustness points of issue 10, each pinned on both backends.

Server points run ``serve_env`` / ``serve_model`` on the backend under test and misbehave
with the raw client; client points run our clients on the backend under test against the
fake server. After each misbehaving client, a well-behaved one is served.

On trio (memory transport, autojump clock) "at once" is asserted exactly: no virtual time
passes between the bad input and its status. On grpclib it is bounded by the real-time guard
(a server that waited for more input would never answer).
"""

from __future__ import annotations

import logging
import random
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from trio_rlmesh import TransportError
from trio_rlmesh.model import Model
from trio_rlmesh.protocol import WORKFLOW_EDITION, env_v1, model_v1, spaces_v1
from trio_rlmesh.transports.grpc import (
    BACKENDS,
    BackendName,
    GrpcSettings,
    _env_client,
    open_env_client,
    serve_env,
    serve_model,
)
from trio_rlmesh.transports.grpc._backend import ClientCall
from trio_rlmesh.transports.grpc._codec import encode
from trio_rlmesh.transports.grpc._handshake import ENV_JOIN, MODEL_JOIN
from trio_rlmesh.transports.grpc._registry import get_backend
from trio_rlmesh.transports.grpc._status import GrpcError, Status

from .fake_env import FakeEnvService, serve_fake_env
from .servers import (
    Code,
    Gate,
    ToyEnv,
    discrete_action,
    env_handshake,
    env_join,
    field_number,
    model_join,
    pb_field,
    predict,
    reset,
    resolve,
    serving,
    step,
    within,
)
from .wire import RawClient, RawStream, expect_status, lying_prefix, open_raw_client

Where = Callable[[str], str]

AUTOJUMP_THRESHOLD = 0.2
LIMIT = 64 * 1024
SETTINGS = GrpcSettings(max_message_size=LIMIT)
BUSY_TEXT = "already has an active Join session"


class Echo(Model):
    def predict(self, observation: Any) -> Any:
        return observation


def at_once(clock: object, start: float) -> bool:
    """No virtual time passed (trio); the real-time guard bounds grpclib."""
    return clock is None or trio.current_time() == start


async def assert_env_served(address: str) -> None:
    """A fresh, well-behaved client gets a whole session."""
    async with open_raw_client(address) as raw:
        assert (await env_handshake(raw)).env_contract is not None
        async with env_join(raw) as join:
            assert (await join.call(reset("r", seeds=[1]))).reset is not None
            stepped = await join.call(step("s", 1))
            assert stepped.step is not None, stepped


async def assert_model_served(address: str) -> None:
    async with open_raw_client(address) as raw, model_join(raw) as join:
        resolved = await join.call(resolve("healthy"))
        assert resolved.resolve_adapter is not None, resolved
        answered = await join.call(predict("healthy", [1.0]))
        assert answered.predict is not None, answered


@asynccontextmanager
async def env_server(backend: BackendName, address: Where) -> AsyncIterator[str]:
    async with serving(
        serve_env, ToyEnv(episode_length=1000), address("env"), backend=backend, settings=SETTINGS
    ) as served:
        yield served.address


@asynccontextmanager
async def model_server(backend: BackendName, address: Where) -> AsyncIterator[str]:
    async with serving(
        serve_model, Echo(), address("model"), backend=backend, settings=SETTINGS
    ) as served:
        yield served.address


# ------------------------------------------------------------- every request gets an answer


async def test_env_step_action_sent_as_a_varint_gets_internal_at_once(
    backend: BackendName, clock: object, address: Where
) -> None:
    step_field = field_number(env_v1.JoinRequest, "step")
    action_field = field_number(env_v1.StepRequest, "action")
    bad = pb_field(step_field, 2, pb_field(action_field, 0, 1)) + pb_field(5, 2, b"s1")
    with within(20):
        async with env_server(backend, address) as where:
            async with open_raw_client(where) as raw, env_join(raw) as join:
                await join.call(reset("r"))
                start = trio.current_time()
                await join.send(bad)  # not half-closed: only the answer can end the call
                status, message = await expect_status(join.raw)
                assert at_once(clock, start)
            assert status is Status.INTERNAL
            assert "StepRequest.action arrived with wire type 0" in message
            await assert_env_served(where)


async def test_model_request_id_sent_as_a_varint_gets_internal_at_once(
    backend: BackendName, clock: object, address: Where
) -> None:
    request_id_field = field_number(model_v1.JoinRequest, "request_id")
    bad = encode(resolve("e")) + pb_field(request_id_field, 0, 7)
    with within(20):
        async with model_server(backend, address) as where:
            async with open_raw_client(where) as raw, model_join(raw) as join:
                start = trio.current_time()
                await join.send(bad)
                status, message = await expect_status(join.raw)
                assert at_once(clock, start)
            assert status is Status.INTERNAL
            assert "JoinRequest.request_id arrived with wire type 0" in message
            await assert_model_served(where)


# ------------------------------------------------------------- no tracebacks, no UNKNOWN


def _env_seeds() -> list[bytes]:
    action = spaces_v1.SpaceValue(leaves=[(1).to_bytes(8, "little")])
    return [
        encode(
            env_v1.JoinRequest(
                request_id="c",
                configure=env_v1.ConfigureEnvRequest(selected_workflow_edition=WORKFLOW_EDITION),
            )
        ),
        encode(reset("r", seeds=[1, 2], episode_ids=["a"], env_indices=[0])),
        encode(env_v1.JoinRequest(request_id="s", step=env_v1.StepRequest(action=action))),
        encode(step("s", 1, env_indices=[0], timeout_ms=10)),
        encode(env_v1.JoinRequest(request_id="p", render=env_v1.RenderRequest(env_indices=[0]))),
        encode(env_v1.JoinRequest(request_id="x", close=env_v1.CloseEnvsRequest(reason="r"))),
    ]


def _model_seeds() -> list[bytes]:
    return [
        encode(resolve("e")),
        encode(predict("e", [1.0, 2.0])),
        encode(
            model_v1.JoinRequest(
                grouped_predict=model_v1.GroupedPredictRequest(
                    groups=[predict("e", [1.0]).predict, predict("f", [2.0]).predict]  # type: ignore[list-item]
                )
            )
        ),
        encode(
            model_v1.JoinRequest(
                request_id="ra",
                reset_adapter=model_v1.ResetAdapterRequest(
                    context=model_v1.AdapterContext(env_id="e", request_id="e:reset"),
                    episode_ids=["a"],
                ),
            )
        ),
        encode(
            model_v1.JoinRequest(
                request_id="rel",
                release_adapter=model_v1.ReleaseAdapterRequest(
                    context=model_v1.AdapterContext(env_id="e", request_id="e:release")
                ),
            )
        ),
    ]


def mutate(rng: random.Random, seeds: list[bytes]) -> bytes:
    """A random or mutated Join request (truncated, flipped, spliced, doubled, ...)."""
    data = bytearray(rng.choice(seeds))
    op = rng.randrange(7)
    if op == 0:
        return rng.randbytes(rng.randrange(0, 48))
    if op == 1:
        for _ in range(rng.randrange(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
    elif op == 2:
        del data[rng.randrange(len(data)) :]
    elif op == 3:
        at = rng.randrange(len(data) + 1)
        data[at:at] = rng.randbytes(rng.randrange(1, 8))
    elif op == 4:
        start = rng.randrange(len(data))
        data += data[start : start + rng.randrange(1, 16)]
    elif op == 5:
        data += rng.choice(seeds)  # two arms of the oneof: the last wins
    else:
        at = rng.randrange(len(data))
        data[at] ^= 1 << rng.randrange(8)
    return bytes(data)


async def _read_all(call: RawStream) -> tuple[list[bytes], GrpcError | None]:
    """Every reply of a call, and the non-OK status it ended with (if any)."""
    replies = []
    try:
        while (reply := await call.receive_bytes()) is not None:
            replies.append(reply)
    except GrpcError as exc:
        return replies, exc
    return replies, None


async def _fuzz(
    raw: RawClient, path: str, seeds: list[bytes], reply_type: type[Any], rng: random.Random
) -> dict[str, int]:
    outcomes = {"answered": 0, "in_band_error": 0, "refused": 0}
    for _ in range(FUZZ_INPUTS):
        data = mutate(rng, seeds)
        call = await raw.open(path)
        await call.send(data, end=True)
        replies, refusal = await _read_all(call)
        if refusal is not None:
            assert refusal.status is Status.INTERNAL, (data, refusal)
            assert refusal.message.startswith("failed to decode JoinRequest"), (data, refusal)
            assert replies == [], data
            outcomes["refused"] += 1
            continue
        assert len(replies) == 1, (data, replies)
        answer = reply_type.FromString(replies[0])
        outcomes["in_band_error" if answer.error is not None else "answered"] += 1
    return outcomes


FUZZ_INPUTS = 300


def _no_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    noisy = [r for r in caplog.records if r.exc_info or r.levelno >= logging.WARNING]
    assert noisy == [], [r.getMessage() for r in noisy]


async def test_fuzzed_env_join_requests_each_get_one_clear_answer(
    backend: BackendName, address: Where, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with within(120):
        async with env_server(backend, address) as where:
            async with open_raw_client(where) as raw:
                outcomes = await _fuzz(
                    raw, ENV_JOIN, _env_seeds(), env_v1.JoinResponse, random.Random(10)
                )
            await assert_env_served(where)
    # The corpus reaches every outcome.
    assert min(outcomes.values()) > 10, outcomes
    _no_tracebacks(caplog)


async def test_fuzzed_model_join_requests_each_get_one_clear_answer(
    backend: BackendName, address: Where, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with within(120):
        async with model_server(backend, address) as where:
            async with open_raw_client(where) as raw:
                outcomes = await _fuzz(
                    raw, MODEL_JOIN, _model_seeds(), model_v1.JoinResponse, random.Random(20)
                )
            await assert_model_served(where)
    assert min(outcomes.values()) > 10, outcomes
    _no_tracebacks(caplog)


async def test_two_arms_of_one_oneof_last_wins_on_the_env_server(
    backend: BackendName, address: Where
) -> None:
    # A step arm then a reset arm, in one message: valid protobuf, and it is a reset.
    both = encode(step("both", 1)) + encode(reset("both", seeds=[4]))
    with within(20):
        async with (
            env_server(backend, address) as where,
            open_raw_client(where) as raw,
            env_join(raw) as join,
        ):
            await join.send(both)
            reply = await join.receive()
            assert reply is not None
            assert reply.request_id == "both"
            assert reply.reset is not None, reply
            assert reply.error is None
            # And the other order is a step (the env was reset just now).
            await join.send(encode(reset("again")) + encode(step("again", 1)))
            reply = await join.receive()
            assert reply is not None
            assert reply.step is not None, reply


async def test_two_arms_of_one_oneof_last_wins_on_the_model_server(
    backend: BackendName, address: Where
) -> None:
    both = encode(predict("e", [1.0], request_id="both")) + encode(resolve("e"))
    with within(20):
        async with (
            model_server(backend, address) as where,
            open_raw_client(where) as raw,
            model_join(raw) as join,
        ):
            await join.send(both)
            reply = await join.receive()
            assert reply is not None
            assert reply.resolve_adapter is not None, reply
            assert reply.error is None


# ------------------------------------------------------------- memory stays bounded


async def test_a_4gb_length_prefix_is_refused_at_once(
    backend: BackendName, clock: object, address: Where
) -> None:
    with within(20):
        async with env_server(backend, address) as where:
            async with open_raw_client(where) as raw, env_join(raw) as join:
                start = trio.current_time()
                await join.raw.send_data(lying_prefix(2**32 - 1) + b"\x00" * 16)
                status, message = await expect_status(join.raw)
                assert at_once(clock, start)
            assert status is Status.RESOURCE_EXHAUSTED
            assert message == f"message of {2**32 - 1} bytes exceeds the limit of {LIMIT} bytes"
            await assert_env_served(where)


@pytest.mark.parametrize("service", ["env", "model"])
async def test_a_message_above_the_limit_is_refused_before_its_body_arrives(
    backend: BackendName, clock: object, address: Where, service: str
) -> None:
    """Only the header and an eighth of the body are ever sent, and the stream stays open:
    a server that buffered the message before checking its size would wait forever. The
    status names the size the header announced."""
    announced = 8 * LIMIT
    serve, path, served = (
        (env_server, ENV_JOIN, assert_env_served)
        if service == "env"
        else (model_server, MODEL_JOIN, assert_model_served)
    )
    with within(20):
        async with serve(backend, address) as where:
            async with open_raw_client(where) as raw:
                call = await raw.open(path)
                start = trio.current_time()
                await call.send_data(lying_prefix(announced) + b"\x00" * (LIMIT // 8))
                status, message = await expect_status(call)
                assert at_once(clock, start)
            assert status is Status.RESOURCE_EXHAUSTED
            assert message == f"message of {announced} bytes exceeds the limit of {LIMIT} bytes"
            await served(where)


def big_step() -> env_v1.JoinRequest:
    """6 MiB: more than the server's stream window lets a client send unacknowledged."""
    return env_v1.JoinRequest(
        request_id="big",
        step=env_v1.StepRequest(action=spaces_v1.SpaceValue(leaves=[b"\x00" * 6 * 1024 * 1024])),
    )


async def test_a_whole_oversized_message_is_refused_and_the_next_client_served(
    backend: BackendName, clock: object, address: Where
) -> None:
    """The sender, stopped by flow control mid-message, learns the status at once (the
    server refused at the header and reset the stream); its connection stays usable."""
    with within(20):
        async with env_server(backend, address) as where:
            async with open_raw_client(where) as raw:
                async with env_join(raw) as join:
                    start = trio.current_time()
                    with pytest.raises(GrpcError) as info:
                        await join.send(big_step())
                    assert at_once(clock, start)
                    assert info.value.status is Status.RESOURCE_EXHAUSTED
                    assert await expect_status(join.raw) == (info.value.status, info.value.message)
                assert (await env_handshake(raw)).env_contract is not None
            await assert_env_served(where)


async def test_our_client_sending_above_the_server_limit_hears_resource_exhausted(
    backend: BackendName, clock: object, address: Where
) -> None:
    with within(20):
        async with (
            serving(serve_env, ToyEnv(), address("env"), settings=SETTINGS) as served,
            open_env_client(served.address, backend=backend) as env,
        ):
            await env.reset()
            start = trio.current_time()
            big = big_step().step
            assert big is not None
            with pytest.raises(TransportError, match="RESOURCE_EXHAUSTED") as info:
                await env.step(big)
            assert at_once(clock, start)
    assert info.value.code == "RESOURCE_EXHAUSTED"
    assert info.value.recoverable


# ------------------------------------------------------------- "busy" is said clearly


@pytest.fixture(params=BACKENDS)
def server_backend(request: pytest.FixtureRequest) -> BackendName:
    name: BackendName = request.param
    return name


@pytest.mark.parametrize("refusals", [30])
async def test_a_second_join_is_refused_as_busy_in_words_on_every_client_backend(
    backend: BackendName,
    server_backend: BackendName,
    sockdir: Path,
    monkeypatch: pytest.MonkeyPatch,
    refusals: int,
) -> None:
    """The refusal is a trailers-only FAILED_PRECONDITION followed by RST_STREAM(NO_ERROR)
    (the client has not half-closed): the client must read the status, not the reset.
    Repeated, since the two frames race in the client."""
    both_trio = backend == server_backend == "trio"
    where = "memory://env" if both_trio else f"unix://{sockdir}/env.sock"
    monkeypatch.setattr(_env_client, "BUSY_RETRY_SECONDS", 0.1)
    with within(60):
        async with (
            serving(serve_env, ToyEnv(), where, backend=server_backend) as served,
            open_raw_client(served.address) as holder,
            env_join(holder) as held,
        ):
            await held.call(reset("r"))  # the one Join slot is taken
            async with get_backend(backend).open_channel(served.address, SETTINGS) as channel:
                for _ in range(refusals):
                    call = await channel.open_call(ENV_JOIN)

                    async def second_join(call: ClientCall = call) -> None:
                        # The status may already be in when the request goes out.
                        await call.send_message(encode(reset("second")))
                        await call.receive_message()

                    try:
                        with pytest.raises(GrpcError) as info:
                            await second_join()
                    finally:
                        await call.aclose()
                    assert info.value.status is Status.FAILED_PRECONDITION
                    assert BUSY_TEXT in info.value.message
            async with open_env_client(served.address, backend=backend) as env:
                with pytest.raises(TransportError, match="already has a client") as busy:
                    await env.reset()
            assert busy.value.code == "FAILED_PRECONDITION"
            assert BUSY_TEXT in str(busy.value)
            # The first client never noticed.
            assert (await held.call(step("s", 1))).step is not None


# ------------------------------------------------------------- a frozen peer is noticed


async def test_a_frozen_server_is_noticed_by_keepalive_with_the_cause_named(
    backend: BackendName, clock: object, address: Where
) -> None:
    """Default settings on trio: noticed exactly 30 s (virtual) after the server went
    silent. grpclib's keepalive runs on asyncio's real clock, so it is shown with
    0.5 s + 0.5 s settings there."""
    service = FakeEnvService(faults={1: "freeze"})
    settings = (
        GrpcSettings()
        if backend == "trio"
        else GrpcSettings(keepalive_interval=0.5, keepalive_timeout=0.5)
    )
    due = 30.0 if backend == "trio" else 1.0
    with within(20):
        async with (
            serve_fake_env(service, address("env")) as fake,
            open_env_client(fake.address, backend=backend, settings=settings) as env,
        ):
            await env.reset()
            start = trio.current_time()
            with pytest.raises(TransportError, match="keepalive") as info:
                await env.step(env_v1.StepRequest(action=spaces_v1.SpaceValue(leaves=[b"\x01"])))
            elapsed = trio.current_time() - start
            if clock is not None:
                assert elapsed == pytest.approx(due)
            else:
                assert due - 0.5 <= elapsed < due + 2.0
    assert "connection lost during env.step" in str(info.value)
    assert "frozen or unreachable" in str(info.value)


# ------------------------------------------------------------- the old robustness tests


async def test_garbage_frame_gets_internal(backend: BackendName, address: Where) -> None:
    with within(20):
        async with env_server(backend, address) as where:
            async with open_raw_client(where) as raw, env_join(raw) as join:
                await join.send(b"\x0a\xff\xff\xff\xff\x0f garbage")
                status, _ = await expect_status(join.raw)
            assert status is Status.INTERNAL
            await assert_env_served(where)


async def test_unknown_oneof_arm_is_unsupported_and_recoverable(
    backend: BackendName, address: Where
) -> None:
    with within(20):
        async with env_server(backend, address) as where:
            async with open_raw_client(where) as raw, env_join(raw) as join:
                # Field 9 (a message) is no arm this build knows; request_id 5 = "x".
                await join.send(b"\x4a\x00\x2a\x01x")
                response = await join.receive()
                assert response is not None
                assert response.request_id == "x"
                assert response.error is not None
                assert response.error.code == Code.UNSUPPORTED
                assert response.error.is_recoverable
                assert (await join.call(reset("r"))).reset is not None  # the stream goes on
            await assert_env_served(where)


async def test_step_before_reset_is_not_ready(backend: BackendName, address: Where) -> None:
    with within(20):
        async with env_server(backend, address) as where:
            async with open_raw_client(where) as raw, env_join(raw) as join:
                response = await join.call(step("s", 1))
                assert response.error is not None
                assert response.error.code == Code.NOT_READY
                assert response.error.is_recoverable
            await assert_env_served(where)


async def test_wrong_leaf_count_is_invalid_action(backend: BackendName, address: Where) -> None:
    with within(20):
        async with env_server(backend, address) as where:
            async with open_raw_client(where) as raw, env_join(raw) as join:
                await join.call(reset("r"))
                for action in (
                    spaces_v1.SpaceValue(leaves=[b"\x01" + b"\x00" * 7, b"\x00" * 8]),
                    spaces_v1.SpaceValue(leaves=[b"\x01"]),
                    None,
                ):
                    response = await join.call(
                        env_v1.JoinRequest(request_id="s", step=env_v1.StepRequest(action=action))
                    )
                    assert response.error is not None, action
                    assert response.error.code == Code.INVALID_ACTION
                    assert response.error.is_recoverable
                assert (await join.call(step("ok", 0))).step is not None
            await assert_env_served(where)


async def test_client_vanishing_mid_step_frees_the_join(
    backend: BackendName, address: Where
) -> None:
    with within(20):
        async with env_server(backend, address) as where:
            async with open_raw_client(where) as raw, env_join(raw) as join:
                await join.call(reset("r"))
                await join.send(step("s", 1))
                raw.vanish()  # no RST_STREAM, no GOAWAY: the socket just closes
            # The slot frees once the server notices; until then, a clear refusal. (Each
            # attempt is a whole round trip: no sleeping between them.)
            for _ in range(1000):
                refusal = await _served_or_refused(where)
                if refusal is None:
                    break
                assert refusal.status is Status.FAILED_PRECONDITION
            else:
                raise AssertionError("the vanished client's Join slot was never freed")


async def test_a_new_join_waits_for_a_vanished_clients_step_to_return(
    backend: BackendName, address: Where
) -> None:
    """A client vanishes while its step runs (held in the env's worker thread). A new Join is
    refused, FAILED_PRECONDITION naming the lane and the step, not accepted only to answer
    its reset BUSY; our client retries such a refusal, so a session opened meanwhile starts
    as soon as the step returns."""
    gate = Gate()
    with within(20):
        async with serving(
            serve_env, ToyEnv(gate=gate), address("env"), backend=backend, user_code="thread"
        ) as served:
            async with open_raw_client(served.address) as raw, env_join(raw) as join:
                await join.call(reset("r"))
                await join.send(step("s", 1))
                await gate.entered.wait()
                raw.vanish()
            refusal: GrpcError | None = None
            while refusal is None or BUSY_TEXT in refusal.message:
                refusal = await _served_or_refused(served.address)
                assert refusal is not None, "a new session started while the step still ran"
            assert refusal.status is Status.FAILED_PRECONDITION
            assert refusal.message == (
                "environment lane 0 is still running env.step for an earlier Join session "
                "whose client went away; a new session can start once it returns"
            )
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_release_soon, gate)
                async with open_env_client(served.address, backend=backend) as env:
                    await env.reset(env_v1.ResetRequest(seeds=[1]))
                    stepped = await env.step(env_v1.StepRequest(action=discrete_action(1)))
                    assert list(stepped.response.rewards) == [1.5]


async def _release_soon(gate: Gate) -> None:
    await trio.sleep(0.05)
    gate.release()


async def _served_or_refused(address: str) -> GrpcError | None:
    try:
        await assert_env_served(address)
    except GrpcError as exc:
        return exc
    return None


async def test_wrong_token_is_refused_on_every_call(backend: BackendName, address: Where) -> None:
    with within(20):
        async with serving(
            serve_env, ToyEnv(), address("env"), token="good", backend=backend
        ) as served:
            async with open_raw_client(served.address, token="bad") as raw:
                join = await raw.open(ENV_JOIN)
                await join.send(encode(reset("r")))
                assert await expect_status(join) == (Status.UNAUTHENTICATED, "invalid env token")
                with pytest.raises(GrpcError) as info:
                    await env_handshake(raw)
                assert info.value.status is Status.UNAUTHENTICATED
            async with open_raw_client(served.address, token="good") as raw, env_join(raw) as j:
                assert (await j.call(reset("r"))).reset is not None
