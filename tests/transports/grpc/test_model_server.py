"""serve_model on each backend, driven by the raw client (and, end to end, by our client):
handshake, resolve/predict/grouped/reset/release/close, ordering, tokens, health, stopping.

Under the default ``user_code="auto"`` a model's first 8 predicts run on its worker thread
(the tests that hold a predict at a gate hold one of those), so tests are guarded in real
time; on trio the stop tests assert exact virtual times."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import trio
import trio.testing

from tests.model.helpers import OBS
from trio_rlmesh import TransportError
from trio_rlmesh.model import Model
from trio_rlmesh.protocol import WORKFLOW_EDITION, core_v1, model_v1
from trio_rlmesh.protocol._constants import CAP_CONCURRENT_PREDICT, CAP_OBSERVATION_HISTORY
from trio_rlmesh.protocol._spacespec import space_to_spec
from trio_rlmesh.runtime._internal import route_request
from trio_rlmesh.spaces import Box, decode_batch
from trio_rlmesh.transports.grpc import (
    BackendName,
    ModelClientRuntimeModel,
    open_model_client,
    serve_model,
)
from trio_rlmesh.transports.grpc._handshake import HEALTH_CHECK, MODEL_HANDSHAKE, MODEL_SHUTDOWN
from trio_rlmesh.transports.grpc._health import HealthCheckRequest, HealthCheckResponse
from trio_rlmesh.transports.grpc._status import GrpcError, Status

from .servers import (
    MODEL_SPEC,
    Gate,
    model_handshake_request,
    model_join,
    predict,
    resolve,
    serving,
    within,
)
from .wire import RawClient, expect_status, open_raw_client

Where = Callable[[str], str]

AUTOJUMP_THRESHOLD = 0.2
ACT = Box.from_bounds(-100.0, 100.0, shape=(2,))
SHUTTING_DOWN = (Status.UNAVAILABLE, "the server is shutting down")


class Echo(Model):
    """Echoes the observation; an observation of 99 waits at the gate (in its worker)."""

    def __init__(self, gate: Gate | None = None) -> None:
        self.gate = gate
        self.entered: list[float] = []
        self.closed = 0
        self.ended: list[str] = []
        self.threads: list[str] = []

    def predict(self, observation: Any) -> Any:
        self.entered.append(float(observation[0]))
        self.threads.append(threading.current_thread().name)
        if observation[0] == 99 and self.gate is not None:
            self.gate.hold()
        return observation

    def on_episode_end(self, episode_id: str = "") -> None:
        self.ended.append(episode_id)

    def close(self) -> None:
        self.closed += 1


class Chunky(Model):
    def predict_chunk(self, observation: Any) -> Any:
        return np.stack([observation + j for j in range(4)])


class Raises(Model):
    def predict(self, observation: Any) -> Any:
        raise ValueError("deliberate failure")


def actions(response: model_v1.JoinResponse, n: int = 1) -> list[list[float]]:
    assert response.predict is not None, response
    value: list[list[float]] = decode_batch(ACT, response.predict.actions[0].leaves, n).tolist()
    return value


def resolve_request(**kwargs: Any) -> model_v1.JoinRequest:
    return model_v1.JoinRequest(
        request_id="r", resolve_adapter=model_v1.ResolveAdapterRequest(**kwargs)
    )


async def handshake(raw: RawClient) -> model_v1.HandshakeResponse:
    return await raw.unary(MODEL_HANDSHAKE, model_handshake_request(), model_v1.HandshakeResponse)


# ----------------------------------------------------------------------------- calls


async def test_handshake_capabilities_and_predict_round_trip(
    backend: BackendName, address: Where
) -> None:
    model = Echo()
    with within(20):
        async with serving(serve_model, model, address("model"), backend=backend) as served:
            async with open_raw_client(served.address) as raw:
                shaken = await handshake(raw)
                assert shaken.base is not None
                assert shaken.base.compatible
                assert shaken.base.capabilities[CAP_CONCURRENT_PREDICT] == "true"
                assert shaken.base.capabilities[CAP_OBSERVATION_HISTORY] == "true"
                assert shaken.base.supported_workflow_editions == [WORKFLOW_EDITION]
                assert shaken.base.peer_info is not None
                assert shaken.base.peer_info.component == "rlmesh-model"
                async with model_join(raw) as join:
                    resolved = await join.call(resolve("env-a"))
                    assert resolved.request_id == "env-a:resolve_adapter"
                    assert resolved.resolve_adapter == model_v1.ResolveAdapterResponse()
                    answer = await join.call(predict("env-a", [1.0, 2.0], request_id="env-a:p:1"))
                    assert answer.request_id == "env-a:p:1"
                    assert answer.predict is not None
                    assert answer.predict.context is not None
                    assert answer.predict.context.request_id == "env-a:p:1"
                    assert actions(answer, 2) == [[1.0, 1.0], [2.0, 2.0]]
                    assert answer.endpoint_total_ns
                    assert answer.user_ns
                    assert answer.decode_ns is not None
                    assert answer.encode_ns is not None
                    assert answer.held_episodes == 0
                    assert answer.in_flight == 1
            served.stop()
            await served.returned.wait()
    assert model.closed == 1


async def test_resolve_errors_are_in_band(backend: BackendName, address: Where) -> None:
    no_action = core_v1.EnvSpec(id="x", observation_space=space_to_spec(OBS))
    context = model_v1.AdapterContext(env_id="e", request_id="e:resolve_adapter")
    with within(20):
        async with (
            serving(serve_model, Echo(), address("model"), backend=backend) as served,
            open_raw_client(served.address) as raw,
            model_join(raw) as join,
        ):
            for request, text in (
                (resolve_request(context=context), "env_spec"),
                (
                    resolve_request(
                        context=context, env_spec=MODEL_SPEC, selected_workflow_edition="2099.01"
                    ),
                    "2099.01 is not supported: this model endpoint does not implement it",
                ),
                (
                    resolve_request(
                        context=context,
                        env_spec=no_action,
                        selected_workflow_edition=WORKFLOW_EDITION,
                    ),
                    "action_space",
                ),
            ):
                reply = await join.call(request)
                assert reply.error is not None, request
                assert text in reply.error.message
            first = (await join.call(resolve_request(context=context))).error
            assert first is not None
            assert first.code == model_v1.ModelErrorCode.INVALID_REQUEST


async def test_an_error_response_carries_the_phase_fields(
    backend: BackendName, address: Where
) -> None:
    # What the model answers and refuses is the model host's, tested in every seat in
    # tests/transports/test_model_host.py; here, only how an error goes on the wire.
    with within(20):
        async with (
            serving(serve_model, Raises(), address("model"), backend=backend) as served,
            open_raw_client(served.address) as raw,
            model_join(raw) as join,
        ):
            await join.call(resolve("e"))
            failed = await join.call(predict("e", [1.0], request_id="e:p:1"))
            assert failed.request_id == "e:p:1"
            assert failed.error is not None
            assert failed.error.message.startswith("model error: model 'Raises' failed on ")
            assert "ValueError: deliberate failure" in failed.error.message
            assert failed.error.code == model_v1.ModelErrorCode.INTERNAL
            assert not failed.error.is_recoverable
            assert failed.decode_ns is not None
            assert failed.user_ns
            assert failed.encode_ns is not None
            assert failed.endpoint_total_ns
            assert failed.in_flight == 1
            early = await join.call(predict("nowhere", [1.0]))
            assert early.error is not None
            assert "model env adapter was not resolved" in early.error.message
            assert early.decode_ns is not None
            assert not early.user_ns  # the model was not called


async def test_pipelined_predicts_keep_per_env_order_and_other_envs_overtake(
    backend: BackendName, address: Where
) -> None:
    gate = Gate()
    model = Echo(gate)
    with within(20):
        async with (
            serving(serve_model, model, address("model"), backend=backend) as served,
            open_raw_client(served.address) as raw,
            model_join(raw) as join,
        ):
            await join.call(resolve("a"))
            await join.send(predict("a", [99.0], request_id="slow-a"))
            await gate.entered.wait()
            await join.send(predict("a", [1.0], request_id="fast-a"))
            # A resolve of another env is not ordered behind env a's held predict.
            overtaking = await join.call(resolve("b"))
            assert overtaking.request_id == "b:resolve_adapter"
            gate.release()
            first, second = await join.receive(), await join.receive()
            assert first is not None
            assert second is not None
            assert [first.request_id, second.request_id] == ["slow-a", "fast-a"]
    assert model.entered == [99.0, 1.0]


async def test_reset_release_and_close_on_the_wire(backend: BackendName, address: Where) -> None:
    model = Echo()
    with within(20):
        async with serving(serve_model, model, address("model"), backend=backend) as served:
            async with open_raw_client(served.address) as raw:
                async with model_join(raw) as join:
                    await join.call(resolve("e"))
                    await join.call(predict("e", [1.0]))
                    reset = await join.call(
                        model_v1.JoinRequest(
                            request_id="x",
                            reset_adapter=model_v1.ResetAdapterRequest(
                                context=model_v1.AdapterContext(env_id="e", request_id="e:r"),
                                episode_ids=["e-ep0"],
                            ),
                        )
                    )
                    assert reset.reset_adapter == model_v1.ResetAdapterResponse()
                    assert model.ended == ["e-ep0"]
                    missing = await join.call(
                        model_v1.JoinRequest(
                            request_id="y",
                            reset_adapter=model_v1.ResetAdapterRequest(episode_ids=["x"]),
                        )
                    )
                    assert missing.error is not None
                    assert "reset_adapter missing env_id" in missing.error.message
                    released = await join.call(
                        model_v1.JoinRequest(
                            request_id="z",
                            release_adapter=model_v1.ReleaseAdapterRequest(
                                context=model_v1.AdapterContext(env_id="e", request_id="e:rel")
                            ),
                        )
                    )
                    assert released.release_adapter == model_v1.ReleaseAdapterResponse()
                    gone = await join.call(predict("e", [1.0], request_id="e:p:3"))
                    assert gone.error is not None
                    assert "was not resolved" in gone.error.message
                    closed = await join.call(
                        model_v1.JoinRequest(
                            request_id="c", close=model_v1.CloseParticipantRequest(reason="done")
                        )
                    )
                    assert closed.close == model_v1.CloseParticipantResponse()
                    # The server stops reading after Close and ends the stream with OK.
                    assert await expect_status(join.raw) == (Status.OK, "")
                # The server stays up after a client's Close.
                async with model_join(raw) as join:
                    assert (await join.call(resolve("e2"))).resolve_adapter is not None
            served.stop()
            await served.returned.wait()
    assert model.closed == 1


async def test_token_is_required_when_configured(backend: BackendName, address: Where) -> None:
    with within(20):
        async with serving(
            serve_model, Echo(), address("model"), token="s3cret", backend=backend
        ) as served:
            for token in (None, "wrong"):
                async with open_raw_client(served.address, token=token) as raw:
                    with pytest.raises(GrpcError) as info:
                        await handshake(raw)
                    assert (info.value.status, info.value.message) == (
                        Status.UNAUTHENTICATED,
                        "invalid route token",
                    )
                    async with model_join(raw) as join:
                        await join.send(resolve("e"))
                        status = await expect_status(join.raw)
                        assert status == (Status.UNAUTHENTICATED, "invalid route token")
            async with open_raw_client(served.address, token="s3cret") as raw:
                async with model_join(raw) as join:
                    assert (await join.call(resolve("e"))).resolve_adapter is not None
                # Health needs no token.
                health = await raw.unary_bytes(HEALTH_CHECK, b"")
                assert HealthCheckResponse.FromString(health).status == 1


async def test_our_client_end_to_end(backend: BackendName, address: Where) -> None:
    with within(20):
        async with (
            serving(serve_model, Chunky(), address("model"), backend=backend) as served,
            open_model_client(served.address, backend=backend) as client,
        ):
            remote = ModelClientRuntimeModel(client)
            needs = await remote.resolve(route_request("e", MODEL_SPEC, execution_horizon=2))
            assert needs.history is None
            assert not remote.wants_history
            (prediction,) = await remote.predict_group([predict("e", [5.0]).predict])  # type: ignore[list-item]
            assert not isinstance(prediction, Exception)
            assert len(prediction.response.actions) == 2
            await remote.release_adapter(
                model_v1.ReleaseAdapterRequest(
                    context=model_v1.AdapterContext(env_id="e", request_id="e:release_adapter")
                ),
                5.0,
            )


@pytest.mark.parametrize("user_code", [None, "auto", "thread", "inline"])
async def test_where_model_code_runs(
    backend: BackendName, address: Where, user_code: str | None
) -> None:
    """The default ("auto"): the first 8 predicts on the model's worker thread; they were
    quick, so the next ones run inline on the trio thread (never on grpclib's asyncio
    thread). "thread" and "inline" keep every predict in one place."""
    model = Echo()
    loop = threading.current_thread().name
    chosen = {} if user_code is None else {"user_code": user_code}
    with within(20):
        async with (
            serving(serve_model, model, address("model"), backend=backend, **chosen) as served,
            open_raw_client(served.address) as raw,
            model_join(raw) as join,
        ):
            await join.call(resolve("e"))
            for k in range(12):
                assert actions(await join.call(predict("e", [float(k)]))) == [[float(k)] * 2]
    on_loop = [thread == loop for thread in model.threads]
    expected = {"thread": [False] * 12, "inline": [True] * 12}.get(
        user_code or "auto", [False] * 8 + [True] * 4
    )
    assert on_loop == expected
    assert not any("asyncio" in thread for thread in model.threads)


async def test_health_reports_serving_and_is_not_stalled_by_a_held_model(
    backend: BackendName, address: Where
) -> None:
    gate = Gate()
    with within(20):
        async with (
            serving(serve_model, Echo(gate), address("model"), backend=backend) as served,
            open_raw_client(served.address) as raw,
            open_raw_client(served.address) as prober,
            model_join(raw) as join,
        ):
            await join.call(resolve("e"))
            await join.send(predict("e", [99.0]))
            await gate.entered.wait()
            reply = await prober.unary_bytes(
                HEALTH_CHECK, HealthCheckRequest("").SerializeToString()
            )
            assert HealthCheckResponse.FromString(reply).status == 1
            gate.release()
            assert (await join.receive()) is not None


async def test_remote_shutdown_is_refused_unless_allowed(
    backend: BackendName, address: Where
) -> None:
    request = model_v1.ShutdownRequest(base=core_v1.ShutdownRequest(reason="bye"))
    with within(20):
        async with (
            serving(serve_model, Echo(), address("a"), backend=backend) as served,
            open_raw_client(served.address) as raw,
        ):
            refused = await raw.unary(MODEL_SHUTDOWN, request, model_v1.ShutdownResponse)
            assert refused.base == core_v1.ShutdownResponse(
                message="remote shutdown is disabled for this model endpoint"
            )
        async with serving(
            serve_model, Echo(), address("b"), allow_remote_shutdown=True, backend=backend
        ) as served:
            async with open_raw_client(served.address) as raw:
                accepted = await raw.unary(MODEL_SHUTDOWN, request, model_v1.ShutdownResponse)
                assert accepted.base == core_v1.ShutdownResponse(
                    accepted=True, message="shutdown accepted: bye"
                )
            await served.returned.wait()
            assert not served.scope.cancel_called


async def test_serve_model_rejects_bad_arguments() -> None:
    for blank in ("", "  "):
        with pytest.raises(ValueError, match="token must not be blank"):
            await serve_model(Echo(), token=blank)
    with pytest.raises(ValueError, match="drain_timeout must be >= 0 seconds"):
        await serve_model(Echo(), drain_timeout=float("nan"))
    with pytest.raises(ValueError, match="unknown gRPC backend"):
        await serve_model(Echo(), backend="asyncio")  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- stopping


def took(clock: object, start: float | None, expected: float, slack: float = 1.0) -> bool:
    assert start is not None
    elapsed = trio.current_time() - start
    if clock is not None:
        return elapsed == pytest.approx(expected, abs=1e-6)
    return elapsed < expected + slack


async def test_stop_with_an_idle_client_is_prompt_on_both_sides(
    backend: BackendName, clock: object, address: Where
) -> None:
    with within(20):
        async with (
            serving(serve_model, Echo(), address("model"), drain_timeout=2, backend=backend) as s,
            open_raw_client(s.address) as raw,
            model_join(raw) as join,
        ):
            await join.call(resolve("e"))
            s.stop()
            assert await expect_status(join.raw) == SHUTTING_DOWN
            assert took(clock, s.stopped_at, 0.0)
            await s.returned.wait()
            assert took(clock, s.stopped_at, 0.0)


async def test_stop_drains_a_predict_in_progress_then_refuses(
    backend: BackendName, clock: object, address: Where
) -> None:
    gate = Gate()
    with within(20):
        async with (
            serving(
                serve_model, Echo(gate), address("model"), drain_timeout=5, backend=backend
            ) as s,
            open_raw_client(s.address) as raw,
            model_join(raw) as join,
        ):
            await join.call(resolve("e"))
            await join.send(predict("e", [99.0], request_id="held"))
            await gate.entered.wait()
            s.stop()
            await trio.testing.wait_all_tasks_blocked()  # draining now
            await join.send(predict("e", [1.0], request_id="late"))
            gate.release()
            answered = await join.receive()  # answered inside the drain
            assert answered is not None
            assert answered.request_id == "held"
            assert answered.predict is not None
            # The request sent while draining is refused: the stream ends with UNAVAILABLE
            # (said by the session or, if the drain ended first, by the backend).
            status, message = await expect_status(join.raw)
            assert status is Status.UNAVAILABLE
            assert message in ("the model server is shutting down", SHUTTING_DOWN[1])
            await s.returned.wait()


async def test_stop_past_the_drain_ends_a_predict_in_progress(
    backend: BackendName, clock: object, address: Where
) -> None:
    """The client hears at once when the drain ends; the server returns only once the
    model call it cannot interrupt has finished (close must never overlap it)."""
    drain = 0.3
    gate = Gate()
    with within(20):
        async with serving(
            serve_model, Echo(gate), address("model"), drain_timeout=drain, backend=backend
        ) as s:
            try:
                async with open_raw_client(s.address) as raw, model_join(raw) as join:
                    await join.call(resolve("e"))
                    await join.send(predict("e", [99.0]))
                    await gate.entered.wait()
                    s.stop()
                    assert await expect_status(join.raw) == SHUTTING_DOWN
                    assert took(clock, s.stopped_at, drain)
                    assert not s.returned.is_set()
            finally:
                gate.release()  # the model call ends; only then does serve_model return
            await s.returned.wait()


async def test_our_model_client_hears_the_stop_at_once(
    backend: BackendName, clock: object, address: Where
) -> None:
    with within(20):
        async with (
            serving(serve_model, Echo(), address("model"), drain_timeout=2, backend=backend) as s,
            open_model_client(s.address, backend=backend) as client,
        ):
            await client.resolve_adapter(resolve("e").resolve_adapter)  # type: ignore[arg-type]
            s.stop()
            await s.returned.wait()
            with pytest.raises(TransportError, match="shutting down") as info:
                await client.predict(predict("e", [1.0]).predict)  # type: ignore[arg-type]
            assert took(clock, s.stopped_at, 0.0)
    assert info.value.code == "UNAVAILABLE"
    assert info.value.recoverable
