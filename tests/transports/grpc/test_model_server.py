"""serve_model + open_model_client over loopback (each test under fail_after)."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest
import trio
import trio.testing

from tests.gates import ThreadGate
from tests.model.helpers import OBS, predict_request
from trio_rlmesh import ModelError, TransportError
from trio_rlmesh.model import Model
from trio_rlmesh.protocol import (
    CAP_CONCURRENT_PREDICT,
    CAP_OBSERVATION_HISTORY,
    core_v1,
    model_v1,
)
from trio_rlmesh.protocol._spacespec import space_to_spec
from trio_rlmesh.spaces import Box, Discrete, decode_batch
from trio_rlmesh.transports.grpc._model_client import (
    ModelClient,
    ModelClientRuntimeModel,
    open_model_client,
)
from trio_rlmesh.transports.grpc._model_server import serve_model

pytestmark = pytest.mark.network

ACT = Box.from_bounds(-100.0, 100.0, shape=(2,))
SPEC = core_v1.EnvSpec(
    id="Toy-v0", observation_space=space_to_spec(OBS), action_space=space_to_spec(ACT)
)
DISC_SPEC = core_v1.EnvSpec(
    id="Disc-v0", observation_space=space_to_spec(OBS), action_space=space_to_spec(Discrete(3))
)


class Slowable(Model):
    """Echoes the observation; one whose first value has a gate waits at it first (in its
    worker thread) until the test opens it."""

    def __init__(self, gates: dict[float, ThreadGate] | None = None) -> None:
        self.gates = gates or {}
        self.entered: list[float] = []
        self.closed = 0
        self.ended: list[str] = []

    def predict(self, observation: Any) -> Any:
        value = float(observation[0])
        self.entered.append(value)
        gate = self.gates.get(value)
        if gate is not None:
            gate.wait()
        return observation

    def on_episode_end(self, episode_id: str = "") -> None:
        self.ended.append(episode_id)

    def close(self) -> None:
        self.closed += 1


class Chunky(Model):
    def predict_chunk(self, observation: Any) -> Any:
        return np.stack([observation + j for j in range(4)])


async def _serve(nursery: trio.Nursery, model: object, **kwargs: Any) -> str:
    address: str = await nursery.start(
        lambda task_status: serve_model(model, task_status=task_status, **kwargs)
    )
    return address


async def _resolve(
    client: ModelClient, env_id: str, spec: core_v1.EnvSpec = SPEC, h: int = 1
) -> model_v1.ResolveAdapterResponse:
    return await client.resolve_adapter(
        model_v1.ResolveAdapterRequest(
            context=model_v1.AdapterContext(
                session_id="s", env_id=env_id, request_id=f"{env_id}:resolve_adapter"
            ),
            env_spec=spec,
            selected_workflow_edition="2026.06",
            execution_horizon=h,
            delivers_history=True,
        )
    )


async def test_handshake_capabilities_and_predict_round_trip() -> None:
    model = Slowable()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            address = await _serve(nursery, model)
            async with open_model_client(address) as client:
                assert client.capabilities[CAP_CONCURRENT_PREDICT] == "true"
                assert client.capabilities[CAP_OBSERVATION_HISTORY] == "true"
                assert client.supported_workflow_editions == ["2026.06"]
                resolved = await _resolve(client, "env-a")
                assert resolved.native_chunk is None
                assert resolved.history is None
                request = predict_request("env-a", [1, 2], request_id="env-a:predict:1")
                prediction = await client.predict(request)
                assert prediction.response.context == request.context
                actions = decode_batch(ACT, prediction.response.actions[0].leaves, 2)
                assert actions.tolist() == [[1.0, 1.0], [2.0, 2.0]]
                timings = prediction.timings
                assert timings.total_ns
                assert timings.user_ns
                assert timings.decode_ns is not None
                assert timings.encode_ns is not None
                assert timings.held_episodes == 0
            nursery.cancel_scope.cancel()
    assert model.closed == 1


async def test_resolve_errors_are_in_band() -> None:
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            address = await _serve(nursery, Slowable())
            async with open_model_client(address) as client:
                no_spec = model_v1.ResolveAdapterRequest(
                    context=model_v1.AdapterContext(env_id="e", request_id="e:resolve_adapter")
                )
                with pytest.raises(ModelError) as caught:
                    await client.resolve_adapter(no_spec)
                assert caught.value.code == "INVALID_REQUEST"
                assert "env_spec" in caught.value.message
                bad_pin = model_v1.ResolveAdapterRequest(
                    context=model_v1.AdapterContext(env_id="e", request_id="e:resolve_adapter"),
                    env_spec=SPEC,
                    selected_workflow_edition="2099.01",
                )
                with pytest.raises(ModelError, match=r"2099\.01.*does not implement"):
                    await client.resolve_adapter(bad_pin)
                no_action = core_v1.EnvSpec(id="x", observation_space=space_to_spec(OBS))
                with pytest.raises(ModelError, match="action_space"):
                    await _resolve(client, "e", no_action)
            nursery.cancel_scope.cancel()


async def test_predict_before_resolve_and_model_errors() -> None:
    class Raises(Model):
        def predict(self, observation: Any) -> Any:
            raise ValueError("deliberate failure")

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            address = await _serve(nursery, Raises())
            async with open_model_client(address) as client:
                with pytest.raises(ModelError, match="was not resolved") as caught:
                    await client.predict(predict_request("nowhere", [1]))
                assert caught.value.code == "INTERNAL"
                assert not caught.value.recoverable
                await _resolve(client, "e")
                with pytest.raises(ModelError, match="ValueError: deliberate failure") as caught:
                    await client.predict(predict_request("e", [1]))
                assert "'e'" in caught.value.message
                assert "lane 0" in caught.value.message
            nursery.cancel_scope.cancel()


async def test_grouped_predict_isolates_failures_and_keeps_each_route() -> None:
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            address = await _serve(nursery, Slowable())
            async with open_model_client(address) as client:
                await _resolve(client, "box")
                results = await client.grouped_predict(
                    [predict_request("box", [3]), predict_request("unresolved", [4])]
                )
                good, bad = results
                assert not isinstance(good, Exception)
                assert good.response.context is not None
                assert good.response.context.env_id == "box"
                assert isinstance(bad, ModelError)
                assert "was not resolved" in bad.message
            nursery.cancel_scope.cancel()


async def test_grouped_predict_carries_chunk_replay_frames() -> None:
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            address = await _serve(nursery, Chunky())
            async with open_model_client(address) as client:
                await _resolve(client, "chunked", h=3)
                await _resolve(client, "plain", h=1)
                chunked, plain = await client.grouped_predict(
                    [predict_request("chunked", [1]), predict_request("plain", [1])]
                )
                assert not isinstance(chunked, Exception)
                assert not isinstance(plain, Exception)
                assert len(chunked.response.actions) == 3
                assert len(plain.response.actions) == 1
            nursery.cancel_scope.cancel()


async def test_pipelined_predicts_keep_per_env_order_and_other_envs_overtake() -> None:
    slow, fast = ThreadGate(), ThreadGate()
    model = Slowable({99.0: slow, 1.0: fast})
    with trio.fail_after(10), slow, fast:
        async with trio.open_nursery() as nursery:
            address = await _serve(nursery, model)
            async with open_model_client(address) as client:
                await _resolve(client, "a")
                finished: list[str] = []
                done = {"slow-a": trio.Event(), "fast-a": trio.Event()}

                async def call(name: str, request: model_v1.PredictRequest) -> None:
                    await client.predict(request)
                    finished.append(name)
                    done[name].set()

                async with trio.open_nursery() as inner:
                    inner.start_soon(
                        call, "slow-a", predict_request("a", [99], request_id="a:predict:1")
                    )
                    await slow.entered()  # the server is inside env a's first predict
                    inner.start_soon(
                        call, "fast-a", predict_request("a", [1], request_id="a:predict:2")
                    )
                    # A resolve of another env is not ordered behind env a's predicts (and,
                    # sent after fast-a on the same stream, shows the server has read it).
                    await _resolve(client, "b")
                    finished.append("resolve-b")
                    assert model.entered == [99.0]  # fast-a waits behind slow-a
                    slow.open()
                    await done["slow-a"].wait()
                    await fast.entered()
                    fast.open()
                assert finished == ["resolve-b", "slow-a", "fast-a"]
                assert model.entered == [99.0, 1.0]
            nursery.cancel_scope.cancel()


async def test_reset_release_and_close_on_the_wire() -> None:
    model = Slowable()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            address = await _serve(nursery, model)
            async with open_model_client(address, close_reason="done") as client:
                await _resolve(client, "e")
                await client.predict(predict_request("e", [1], ids=["ep-1"]))
                await client.reset_adapter(
                    model_v1.ResetAdapterRequest(
                        context=model_v1.AdapterContext(env_id="e", request_id="e:reset_adapter:2"),
                        episode_ids=["ep-1"],
                    )
                )
                assert model.ended == ["ep-1"]
                with pytest.raises(ModelError, match="reset_adapter missing env_id"):
                    await client.reset_adapter(model_v1.ResetAdapterRequest(episode_ids=["x"]))
                await client.release_adapter(
                    model_v1.ReleaseAdapterRequest(
                        context=model_v1.AdapterContext(env_id="e", request_id="e:release_adapter")
                    )
                )
                with pytest.raises(ModelError, match="was not resolved"):
                    await client.predict(predict_request("e", [1], request_id="e:predict:3"))
            # The server stays up after a client's Close.
            async with open_model_client(address) as again:
                await _resolve(again, "e2")
            nursery.cancel_scope.cancel()
    assert model.closed == 1


async def test_token_is_required_when_configured() -> None:
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            address = await _serve(nursery, Slowable(), token="s3cret")
            with pytest.raises(TransportError, match="UNAUTHENTICATED"):
                async with open_model_client(address, token="wrong"):
                    pass
            async with open_model_client(address, token="s3cret") as client:
                await _resolve(client, "e")
            nursery.cancel_scope.cancel()


async def test_runtime_model_adapter_over_the_wire() -> None:
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            address = await _serve(nursery, Chunky())
            async with open_model_client(address) as client:
                remote = ModelClientRuntimeModel(client)
                needs = await remote.resolve("e", SPEC, execution_horizon=2)
                assert needs.history is None
                assert not remote.wants_history
                (prediction,) = await remote.predict_group([predict_request("e", [5])])
                assert not isinstance(prediction, Exception)
                assert len(prediction.response.actions) == 2
                await remote.release_adapter(
                    model_v1.ReleaseAdapterRequest(
                        context=model_v1.AdapterContext(env_id="e", request_id="e:release_adapter")
                    ),
                    5.0,
                )
            nursery.cancel_scope.cancel()


async def test_slow_model_runs_off_the_event_loops() -> None:
    threads: list[str] = []

    class Where(Model):
        def predict(self, observation: Any) -> Any:
            threads.append(threading.current_thread().name)
            return observation

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            address = await _serve(nursery, Where())
            async with open_model_client(address) as client:
                await _resolve(client, "e")
                await client.predict(predict_request("e", [1]))
            nursery.cancel_scope.cancel()
    assert threads
    assert threads[0] != threading.main_thread().name
    assert "asyncio" not in threads[0]


async def test_health_reports_serving() -> None:
    from grpclib.client import Channel
    from grpclib.const import Cardinality

    from trio_rlmesh.transports.grpc._common import HEALTH_CHECK, parse_address
    from trio_rlmesh.transports.grpc._health import (
        HealthCheckRequest,
        HealthCheckResponse,
        ServingStatus,
    )
    from trio_rlmesh.transports.grpc._portal import open_portal

    async def check(host: str, port: int) -> int:
        channel = Channel(host, port)
        try:
            async with channel.request(
                HEALTH_CHECK, Cardinality.UNARY_UNARY, HealthCheckRequest, HealthCheckResponse
            ) as stream:
                await stream.send_message(HealthCheckRequest(""), end=True)
                reply = await stream.recv_message()
            assert reply is not None
            return int(reply.status)
        finally:
            channel.close()

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            address = await _serve(nursery, Slowable())
            target = parse_address(address)
            async with open_portal() as portal:
                status = await portal.run(check, target.host, target.port)
            assert status == ServingStatus.SERVING
            nursery.cancel_scope.cancel()


# ------------------------------------------------------------------ stopping with clients


# Nothing below measures time. "At once" means before anything that would otherwise end the
# wait: drain timeouts are far beyond each test's fail_after guard, so a stop that waited
# for its drain fails the guard; a model that must still be predicting waits at a gate.
FOREVER = 3600.0


async def _serve_scoped(
    nursery: trio.Nursery, model: object, **kwargs: Any
) -> tuple[str, trio.CancelScope, trio.Event]:
    """serve_model in its own cancel scope; the event is set when it returned."""
    scope = trio.CancelScope()
    returned = trio.Event()

    async def run(task_status: trio.TaskStatus[str]) -> None:
        with scope:
            await serve_model(model, task_status=task_status, **kwargs)
        returned.set()

    address: str = await nursery.start(run)
    return address, scope, returned


async def test_stop_with_idle_client_is_prompt_on_both_sides() -> None:
    with trio.fail_after(15):
        async with trio.open_nursery() as nursery:
            address, scope, returned = await _serve_scoped(
                nursery, Slowable(), drain_timeout=FOREVER
            )
            async with open_model_client(address) as client:
                await _resolve(client, "e")
                await client.predict(predict_request("e", [1]))
                scope.cancel()
                await returned.wait()  # nothing in flight: no wait for the drain
                with pytest.raises(TransportError):
                    await client.predict(predict_request("e", [2], request_id="e:predict:2"))


async def test_stop_drains_a_predict_in_progress_then_refuses() -> None:
    gate = ThreadGate()
    with trio.fail_after(15), gate:
        async with trio.open_nursery() as nursery:
            address, scope, returned = await _serve_scoped(
                nursery, Slowable({99.0: gate}), drain_timeout=FOREVER
            )
            async with open_model_client(address) as client:
                await _resolve(client, "e")
                answers: list[Any] = []

                async def slow() -> None:
                    answers.append(await client.predict(predict_request("e", [99])))

                async with trio.open_nursery() as inner:
                    inner.start_soon(slow)
                    await gate.entered()
                    scope.cancel()
                    await trio.testing.wait_all_tasks_blocked()
                    assert not returned.is_set()  # the drain waits for the predict
                    gate.open()
                assert len(answers) == 1  # answered inside the drain
                await returned.wait()  # and the drain ended with it, not at its timeout
                with pytest.raises(TransportError):
                    await client.predict(predict_request("e", [2], request_id="e:predict:2"))


async def test_stop_past_the_drain_ends_a_predict_in_progress() -> None:
    """The client hears at once; the server waits for the model call it cannot interrupt."""
    gate = ThreadGate()
    with trio.fail_after(15), gate:
        async with trio.open_nursery() as nursery:
            address, scope, returned = await _serve_scoped(
                nursery, Slowable({1.0: gate}), drain_timeout=0.3
            )
            async with open_model_client(address) as client:
                await _resolve(client, "e")

                async def slow() -> None:
                    with pytest.raises(TransportError):
                        await client.predict(predict_request("e", [1]))

                async with trio.open_nursery() as inner:
                    inner.start_soon(slow)
                    await gate.entered()
                    scope.cancel()
                # The client failed at the end of the drain while the model is still inside
                # predict. The forward itself is not abandoned (close must never overlap
                # it), so serve_model returns once it ends, not before.
                assert not returned.is_set()
                gate.open()
                await returned.wait()


async def test_remote_shutdown_is_refused_unless_allowed() -> None:
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            address = await _serve(nursery, Slowable())
            async with open_model_client(address) as client:
                refused = await client.shutdown("test")
            assert refused == core_v1.ShutdownResponse(
                message="remote shutdown is disabled for this model endpoint"
            )
            nursery.cancel_scope.cancel()
        async with trio.open_nursery() as nursery:
            address = await _serve(nursery, Slowable(), allow_remote_shutdown=True)
            async with open_model_client(address) as client:
                accepted = await client.shutdown("bye")
            assert accepted == core_v1.ShutdownResponse(
                accepted=True, message="shutdown accepted: bye"
            )
        # serve_model returned by itself: the nursery closed without a cancel.
