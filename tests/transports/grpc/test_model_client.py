"""The model client, on each backend, against the scriptable fake model server
(:mod:`.fake_model`): handshake, request ids, pipelining, errors in band and on the wire."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import trio

from tests.model.helpers import predict_request
from trio_rlmesh import ModelError, ProtocolError, TransportError
from trio_rlmesh.protocol import WORKFLOW_EDITION, core_v1, model_v1
from trio_rlmesh.runtime._internal import route_request
from trio_rlmesh.transports.grpc import (
    BackendName,
    GrpcSettings,
    ModelClientRuntimeModel,
    open_model_client,
)

from .fake_env import FakeEnvService, serve_fake_env
from .fake_model import FakeModelService, serve_fake_model
from .servers import MODEL_SPEC

Where = Callable[[str], str]


def kinds(service: FakeModelService) -> list[str]:
    import betterproto2

    return [betterproto2.which_one_of(r, "kind")[0] for r in service.requests]


async def test_handshake_then_join_and_request_ids(
    backend: BackendName, clock: object, address: Where
) -> None:
    service = FakeModelService()
    with trio.fail_after(10):
        async with (
            serve_fake_model(service, address("model")) as fake,
            open_model_client(fake.address, close_reason="done", backend=backend) as client,
        ):
            assert client.address == fake.address
            assert client.capabilities == {"concurrent_predict": "true"}
            assert client.supported_workflow_editions == [WORKFLOW_EDITION]
            assert client.handshake.peer_info is not None
            remote = ModelClientRuntimeModel(client)
            answer = await remote.resolve(route_request("env-a", MODEL_SPEC, session_id="s"))
            assert answer.history is None
            prediction = await client.predict(predict_request("env-a", [1.0], request_id="a:1"))
            assert prediction.response.context is not None
            assert prediction.response.context.request_id == "a:1"
            assert prediction.timings.total_ns == 77
            [one, two] = await client.grouped_predict(
                [predict_request("env-a", [2.0]), predict_request("env-b", [3.0])]
            )
            assert not isinstance(one, Exception)
            assert not isinstance(two, Exception)
            no_context = model_v1.PredictRequest()
            await client.predict(no_context)
    assert kinds(service) == ["resolve_adapter", "predict", "grouped_predict", "predict", "close"]
    ids = [r.request_id for r in service.requests]
    # The context's request id; a fresh model-grpc-req-<n> otherwise (always for groups).
    assert ids == [
        "env-a:resolve_adapter",
        "a:1",
        "model-grpc-req-1",
        "model-grpc-req-2",
        "model-grpc-req-3",
    ]
    resolve = service.requests[0].resolve_adapter
    assert resolve is not None
    assert resolve.selected_workflow_edition == WORKFLOW_EDITION
    assert resolve.execution_horizon == 1
    assert service.join_ended == ["close"]
    assert service.close_half_closed == [True]  # CloseParticipant ends our side itself


async def test_without_close_reason_the_stream_is_just_dropped(
    backend: BackendName, clock: object, address: Where
) -> None:
    service = FakeModelService()
    with trio.fail_after(10):
        async with serve_fake_model(service, address("model")) as fake:
            async with open_model_client(fake.address, backend=backend) as client:
                await client.predict(predict_request("e", [1.0]))
            await service.join_done.wait()
    assert "close" not in kinds(service)
    assert service.join_ended in (["cancelled"], ["eof"])


async def test_pipelined_requests_are_matched_by_id(
    backend: BackendName, clock: object, address: Where
) -> None:
    """Five predicts in flight, answered in reverse order: each caller gets its own."""
    service = FakeModelService(hold=lambda r: r.predict is not None)
    with trio.fail_after(10):
        async with (
            serve_fake_model(service, address("model")) as fake,
            open_model_client(fake.address, backend=backend) as client,
        ):
            got: dict[int, bytes] = {}
            done = {i: trio.Event() for i in range(5)}

            async def one(i: int) -> None:
                prediction = await client.predict(
                    predict_request("e", [float(i)], request_id=f"e:{i}")
                )
                assert prediction.response.context is not None
                assert prediction.response.context.request_id == f"e:{i}"
                got[i] = prediction.response.actions[0].leaves[0]
                done[i].set()

            async with trio.open_nursery() as nursery:
                for i in range(5):
                    nursery.start_soon(one, i)
                for _ in range(5):
                    await service.inbox.receive()
                by_id = {h.request.request_id: h for h in service.held}
                for i in reversed(range(5)):
                    by_id[f"e:{i}"].release.set()
                    await done[i].wait()
            expected = {i: predict_request("e", [float(i)]).observation.leaves[0] for i in range(5)}  # type: ignore[union-attr]
            assert got == expected


async def test_a_duplicate_request_id_in_flight_is_refused_locally(
    backend: BackendName, clock: object, address: Where
) -> None:
    service = FakeModelService(hold=lambda r: r.predict is not None)
    with trio.fail_after(10):
        async with (
            serve_fake_model(service, address("model")) as fake,
            open_model_client(fake.address, backend=backend) as client,
            trio.open_nursery() as nursery,
        ):
            nursery.start_soon(client.predict, predict_request("e", [1.0], request_id="same"))
            await service.inbox.receive()
            with pytest.raises(ProtocolError, match="already in flight"):
                await client.predict(predict_request("e", [2.0], request_id="same"))
            service.held[0].release.set()
    assert len(service.requests) == 1


async def test_in_band_model_error(backend: BackendName, clock: object, address: Where) -> None:
    service = FakeModelService(faults={1: "error"})
    with trio.fail_after(10):
        async with (
            serve_fake_model(service, address("model")) as fake,
            open_model_client(fake.address, backend=backend) as client,
        ):
            with pytest.raises(ModelError, match="the model broke") as info:
                await client.predict(predict_request("e", [1.0]))
            assert info.value.code == "INTERNAL"
            assert not info.value.recoverable
            assert info.value.address == fake.address
            # In band: the stream goes on.
            await client.predict(predict_request("e", [2.0], request_id="e:2"))


async def test_wrong_reply_kind_is_a_protocol_error(
    backend: BackendName, clock: object, address: Where
) -> None:
    service = FakeModelService(faults={1: "wrong_kind"})
    with trio.fail_after(10):
        async with (
            serve_fake_model(service, address("model")) as fake,
            open_model_client(fake.address, backend=backend) as client,
        ):
            with pytest.raises(ProtocolError, match="answered with 'reset_adapter'"):
                await client.predict(predict_request("e", [1.0]))
            await client.predict(predict_request("e", [2.0], request_id="e:2"))


async def test_grouped_result_count_must_match(
    backend: BackendName, clock: object, address: Where
) -> None:
    service = FakeModelService(faults={1: "short_group"})
    with trio.fail_after(10):
        async with (
            serve_fake_model(service, address("model")) as fake,
            open_model_client(fake.address, backend=backend) as client,
        ):
            with pytest.raises(ProtocolError, match="answered 1 results for 2 groups"):
                await client.grouped_predict(
                    [predict_request("e", [1.0]), predict_request("f", [2.0])]
                )


async def test_the_raw_token_goes_on_every_call(
    backend: BackendName, clock: object, address: Where
) -> None:
    service = FakeModelService(token="s3cret")
    with trio.fail_after(10):
        async with (
            serve_fake_model(service, address("model")) as fake,
            open_model_client(fake.address, token="s3cret", backend=backend) as client,
        ):
            await client.predict(predict_request("e", [1.0]))
            reply = await client.shutdown("bye")
            assert reply == core_v1.ShutdownResponse(accepted=True, message="shutdown accepted")
    assert [m["authorization"] for m in service.metadata] == ["s3cret"] * 3


async def test_an_env_server_at_the_model_address_is_named(
    backend: BackendName, clock: object, address: Where
) -> None:
    with trio.fail_after(10):
        async with serve_fake_env(FakeEnvService(), address("env")) as fake:
            with pytest.raises(
                TransportError, match=r"does not serve rlmesh\.model\.v1\.ModelService"
            ) as info:
                async with open_model_client(fake.address, backend=backend):
                    pass
    assert info.value.code == "UNIMPLEMENTED"


async def test_a_dropped_connection_fails_every_request_in_flight(
    backend: BackendName, clock: object, address: Where
) -> None:
    service = FakeModelService(faults={3: "drop"}, hold=lambda r: r.predict is not None)
    with trio.fail_after(10):
        async with (
            serve_fake_model(service, address("model")) as fake,
            open_model_client(fake.address, backend=backend) as client,
        ):
            failures: list[BaseException] = []

            async def one(i: int) -> None:
                try:
                    await client.predict(predict_request("e", [float(i)], request_id=f"e:{i}"))
                except TransportError as exc:
                    failures.append(exc)

            async with trio.open_nursery() as nursery:
                for i in range(3):
                    nursery.start_soon(one, i)
            assert len(failures) == 3
            assert all("connection lost during model.predict" in str(f) for f in failures)
            with pytest.raises(TransportError, match="connection lost"):
                await client.predict(predict_request("e", [9.0], request_id="e:9"))


async def test_a_frozen_model_server_is_noticed_by_keepalive(
    backend: BackendName, clock: object, address: Where
) -> None:
    service = FakeModelService(faults={1: "freeze"})
    settings = (
        GrpcSettings()
        if backend == "trio"
        else GrpcSettings(keepalive_interval=0.5, keepalive_timeout=0.5)
    )
    with trio.fail_after(60):
        async with (
            serve_fake_model(service, address("model")) as fake,
            open_model_client(fake.address, backend=backend, settings=settings) as client,
        ):
            start = trio.current_time()
            with pytest.raises(TransportError, match="keepalive PING") as info:
                await client.predict(predict_request("e", [1.0]))
            if clock is not None:
                assert trio.current_time() - start == pytest.approx(30.0)
    assert "frozen or unreachable" in str(info.value)
