"""serve_env against a raw grpclib client on loopback: handshake, episodes, lanes, vector envs,
timeouts, render, close, shutdown, idle, auth, conformance and health."""

from __future__ import annotations

import functools
import struct
import zlib
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import trio
from grpclib.const import Cardinality, Status
from grpclib.exceptions import GRPCError

from tests.gates import ThreadGate
from trio_rlmesh.protocol import (
    META_CONFORMANCE_WARNING,
    core_v1,
    env_v1,
    make_env_contract,
    meta_to_python,
    spaces_v1,
)
from trio_rlmesh.spaces import Discrete, from_gymnasium
from trio_rlmesh.transports.grpc._common import HEALTH_CHECK
from trio_rlmesh.transports.grpc._env_adapter import (
    EpisodeTracker,
    StepOutcome,
    encode_png,
)
from trio_rlmesh.transports.grpc._env_server import serve_env
from trio_rlmesh.transports.grpc._health import HealthCheckRequest, HealthCheckResponse

from .env_server_support import SlowEnv, handshake_request, raw_client, running_server

pytestmark = pytest.mark.network

Code = env_v1.EnvErrorCode


def discrete_action(*values: int) -> spaces_v1.SpaceValue:
    return spaces_v1.SpaceValue(leaves=[np.asarray(values, dtype="<i8").tobytes()])


def step(request_id: str, *values: int, **kwargs: Any) -> env_v1.JoinRequest:
    return env_v1.JoinRequest(
        request_id=request_id,
        step=env_v1.StepRequest(action=discrete_action(*values), **kwargs),
    )


def reset(request_id: str, **kwargs: Any) -> env_v1.JoinRequest:
    return env_v1.JoinRequest(request_id=request_id, reset=env_v1.ResetRequest(**kwargs))


def obs_f32(response: env_v1.JoinResponse) -> np.ndarray:
    body = response.reset or response.step
    assert body is not None, response
    assert body.observation is not None
    return np.frombuffer(body.observation.leaves[0], dtype="<f4")


def assert_timed(response: env_v1.JoinResponse) -> None:
    assert response.endpoint_total_ns is not None
    assert response.endpoint_total_ns > 0
    for name in ("decode_ns", "user_ns", "encode_ns", "queue_ns"):
        value = getattr(response, name)
        assert value is not None
        assert 0 <= value < 60 * 10**9


# --------------------------------------------------------------------------------- handshake


async def test_handshake_cartpole_contract() -> None:
    env = gym.make("CartPole-v1")
    expected = make_env_contract(
        "CartPole-v1",
        from_gymnasium(env.observation_space),
        from_gymnasium(env.action_space),
        env.metadata,
    )
    with trio.fail_after(20):
        async with running_server(env) as address, raw_client(address) as client:
            response = await client.handshake()
            assert response.base is not None
            assert response.base.compatible
            assert response.base.capabilities == {"subset_step": "true"}
            assert response.base.supported_workflow_editions == ["2026.06"]
            assert response.base.preferred_workflow_edition == "2026.06"
            assert response.base.peer_info is not None
            assert response.base.peer_info.component == "rlmesh-env"
            assert response.env_contract == expected

            wrong = await client.handshake(handshake_request("rlmesh-wire-v0"))
            assert wrong.base is not None
            assert not wrong.base.compatible
            assert wrong.base.error_message == (
                "protocol generation rlmesh-wire-v0 not compatible with server rlmesh-wire-v1"
            )
            assert wrong.env_contract is None

            with pytest.raises(GRPCError) as info:
                await client.handshake(env_v1.HandshakeRequest())
            assert info.value.status is Status.INVALID_ARGUMENT
            assert info.value.message == "handshake request missing base"


# --------------------------------------------------------------------------------- episodes


async def test_cartpole_episode_matches_local_env() -> None:
    local = gym.make("CartPole-v1")
    expected_obs, _ = local.reset(seed=3)
    with trio.fail_after(20):
        async with (
            running_server(gym.make("CartPole-v1")) as address,
            raw_client(address) as client,
            client.join() as join,
        ):
            configured = await join.call(
                env_v1.JoinRequest(
                    request_id="grpc-req-1",
                    configure=env_v1.ConfigureEnvRequest(selected_workflow_edition="2026.06"),
                )
            )
            assert configured.configure == env_v1.ConfigureEnvResponse()
            assert configured.endpoint_total_ns is not None
            first = await join.call(reset("grpc-req-2", seeds=[3], episode_ids=["ep-a"]))
            assert first.request_id == "grpc-req-2"
            assert_timed(first)
            np.testing.assert_array_equal(obs_f32(first), expected_obs)
            total = 0.0
            for n in range(1, 600):
                action = n % 2
                expected_obs, reward, terminated, truncated, _ = local.step(action)
                total += float(reward)
                response = await join.call(step(f"s{n}", action))
                assert_timed(response)
                assert response.step is not None
                np.testing.assert_array_equal(obs_f32(response), expected_obs)
                assert response.step.rewards == [reward]
                assert response.step.terminated_mask == bytes([terminated])
                assert response.step.truncated_mask == bytes([truncated])
                if terminated or truncated:
                    break
            assert response.step is not None
            [done] = response.step.completed_episodes
            assert done.episode_id == "ep-a"
            assert done.seed == 3
            assert done.env_index == 0
            assert done.step_count == n
            assert done.cumulative_reward == total
            assert done.terminated == terminated
            assert done.start_timestamp_ns <= done.end_timestamp_ns
            assert done.final_info == spaces_v1.MetaMap()
            closed = await join.call(
                env_v1.JoinRequest(request_id="end", close=env_v1.CloseEnvsRequest())
            )
            assert closed.close == env_v1.CloseEnvsResponse()
            assert await join.recv() is None


async def test_interrupted_episode_and_close_final_episodes() -> None:
    with trio.fail_after(20):
        async with (
            running_server(SlowEnv(episode_length=100)) as address,
            raw_client(address) as client,
            client.join() as join,
        ):
            await join.call(reset("r1", seeds=[0], episode_ids=["first"]))
            await join.call(step("s1", 1))
            await join.call(reset("r2", episode_ids=["second"]))
            stepped = await join.call(step("s2", 0))
            assert stepped.step is not None
            [interrupted] = stepped.step.completed_episodes
            assert interrupted.episode_id == "first"
            assert interrupted.seed == 0
            assert interrupted.step_count == 1
            assert interrupted.cumulative_reward == 1.5
            assert not interrupted.terminated
            assert interrupted.truncated
            assert interrupted.final_info is None
            closed = await join.call(
                env_v1.JoinRequest(request_id="c", close=env_v1.CloseEnvsRequest())
            )
            assert closed.close is not None
            [last] = closed.close.final_episodes
            assert last.episode_id == "second"
            assert last.seed is None
            assert last.step_count == 1
            assert last.truncated


async def test_reset_options_and_info() -> None:
    with trio.fail_after(20):
        async with (
            running_server(SlowEnv()) as address,
            raw_client(address) as client,
            client.join() as join,
        ):
            options = spaces_v1.MetaMap(entries={"trial_index": spaces_v1.MetaValue(integer=0)})
            response = await join.call(reset("r", seeds=[5], options=options))
            assert response.reset is not None
            assert meta_to_python(response.reset.infos) == {
                "seed": 5,
                "options": {"trial_index": 0},
            }


async def test_step_final_info_is_lane_info() -> None:
    with trio.fail_after(20):
        async with (
            running_server(SlowEnv(episode_length=1)) as address,
            raw_client(address) as client,
            client.join() as join,
        ):
            await join.call(reset("r", episode_ids=["e"]))
            response = await join.call(step("s", 1))
            assert response.step is not None
            [done] = response.step.completed_episodes
            assert meta_to_python(done.final_info) == {"t": 1}


# --------------------------------------------------------------------------------- lanes


async def test_lane_endpoint_answers_out_of_order() -> None:
    slow = ThreadGate()
    gates = iter([slow, None, None])
    with trio.fail_after(20), slow:

        def factory() -> SlowEnv:
            return SlowEnv(gate=next(gates))

        async with (
            running_server(factory, num_envs=3) as address,
            raw_client(address) as client,
        ):
            handshake = await client.handshake()
            assert handshake.env_contract is not None
            assert handshake.env_contract.num_envs == 3
            assert handshake.env_contract.autoreset_mode == core_v1.AutoresetMode.DISABLED
            assert handshake.base is not None
            assert handshake.base.capabilities == {"subset_step": "true"}
            async with client.join() as join:
                full = await join.call(reset("r", seeds=[1, 2, 3], episode_ids=["a", "b", "c"]))
                assert full.reset is not None
                assert full.reset.observation is not None
                assert len(full.reset.observation.leaves[0]) == 3 * 4
                for lane in range(3):
                    await join.send(step(f"lane{lane}", 1, env_indices=[lane]))
                # Lane 0 is held in its step: the other two answer past it.
                replies = [await join.recv() for _ in range(2)]
                await slow.entered()
                slow.open()
                replies.append(await join.recv())
                order = [r.request_id for r in replies if r is not None]
                assert order[-1] == "lane0"  # the held lane answers last
                assert sorted(order) == ["lane0", "lane1", "lane2"]
                for reply in replies:
                    assert reply is not None
                    assert reply.step is not None
                    lane = int(reply.request_id[-1])
                    assert reply.step.env_indices == [lane]
                    assert reply.step.rewards == [1.5]
                    assert len(reply.step.terminated_mask) == 1


async def test_lane_partial_reset_validation() -> None:
    with trio.fail_after(20):
        async with (
            running_server([SlowEnv(), SlowEnv()]) as address,
            raw_client(address) as client,
            client.join() as join,
        ):
            for bad in (
                {"env_indices": [2]},
                {"env_indices": [0, 0]},
                {"env_indices": [0], "seeds": [1, 2]},
            ):
                response = await join.call(reset("r", **bad))
                assert response.error is not None, bad
                assert response.error.code == Code.INVALID_ACTION
                assert response.error.is_recoverable
            ok = await join.call(reset("r", env_indices=[1], seeds=[4], episode_ids=["x"]))
            assert ok.reset is not None
            assert ok.reset.observation is not None
            assert len(ok.reset.observation.leaves[0]) == 4


# --------------------------------------------------------------------------------- vector


async def test_vector_env_next_step_autoreset() -> None:
    envs = gym.vector.SyncVectorEnv(
        [functools.partial(SlowEnv, episode_length=length) for length in (2, 3)]
    )
    with trio.fail_after(20):
        async with running_server(envs) as address, raw_client(address) as client:
            handshake = await client.handshake()
            assert handshake.base is not None
            assert handshake.base.capabilities == {}
            contract = handshake.env_contract
            assert contract is not None
            assert contract.num_envs == 2
            assert contract.autoreset_mode == core_v1.AutoresetMode.NEXT_STEP
            assert contract.spec is not None
            assert contract.spec.observation_space is not None
            assert contract.spec.observation_space.shape == [1]
            async with client.join() as join:
                await join.call(reset("r", seeds=[1, 2], episode_ids=["a0", "b0"]))
                subset = await join.call(step("s", 1, env_indices=[0]))
                assert subset.error is not None
                assert subset.error.code == Code.UNSUPPORTED
                one = await join.call(step("s1", 1, 1, episode_ids=["a0", "b0"]))
                assert one.step is not None
                assert one.step.completed_episodes == []
                two = await join.call(step("s2", 1, 1, episode_ids=["a0", "b0"]))
                assert two.step is not None
                assert two.step.terminated_mask == b"\x01\x00"
                [done] = two.step.completed_episodes
                assert (done.episode_id, done.env_index, done.step_count) == ("a0", 0, 2)
                assert done.final_info is None  # gymnasium NEXT_STEP emits no final_info
                # Lane 0 autoresets now: reward 0, masks clear, new id adopted.
                three = await join.call(step("s3", 1, 1, episode_ids=["a1", "b0"]))
                assert three.step is not None
                assert three.step.rewards == [0.0, 1.5]
                assert three.step.terminated_mask == b"\x00\x01"
                [done_b] = three.step.completed_episodes
                assert done_b.episode_id == "b0"
                closed = await join.call(
                    env_v1.JoinRequest(request_id="c", close=env_v1.CloseEnvsRequest())
                )
                assert closed.close is not None
                assert [e.episode_id for e in closed.close.final_episodes] == ["a1"]


async def test_vector_step_before_reset_is_a_next_step_violation() -> None:
    envs = gym.vector.SyncVectorEnv([SlowEnv, SlowEnv])
    with trio.fail_after(20):
        async with (
            running_server(envs) as address,
            raw_client(address) as client,
            client.join() as join,
        ):
            response = await join.call(step("s", 0, 0))
            assert response.error is not None
            assert response.error.code == Code.INTERNAL
            assert not response.error.is_recoverable


# --------------------------------------------------------------------------------- timeouts


async def test_timeout_answers_then_drains_late_op() -> None:
    gate = ThreadGate()
    with trio.fail_after(20), gate:
        async with (
            running_server(SlowEnv(gate=gate)) as address,
            raw_client(address) as client,
            client.join() as join,
        ):
            await join.call(reset("r", episode_ids=["e"]))
            # The env sits in its step until the gate opens, so this answer can only come
            # from the server's own 50 ms timer.
            late = await join.call(step("late", 1, timeout_ms=50))
            assert gate.arrived == 1
            assert late.error is not None
            assert late.error.code == Code.TIMEOUT
            assert late.error.is_recoverable
            assert late.error.message == "env.step timed out after 50ms"
            assert late.endpoint_total_ns is not None
            # The next step on the lane waits for the late one, whose result is dropped
            # (the tracker never counted it): it observes the late step's effect (t == 2).
            await join.send(step("next", 1))
            gate.open()
            nxt = await join.recv()
            assert nxt is not None
            assert nxt.step is not None
            assert obs_f32(nxt).tolist() == [2.0]
            closed = await join.call(
                env_v1.JoinRequest(request_id="c", close=env_v1.CloseEnvsRequest())
            )
            assert closed.close is not None
            assert closed.close.final_episodes[0].step_count == 1


# --------------------------------------------------------------------------------- render


async def test_render_png() -> None:
    with trio.fail_after(20):
        async with (
            running_server(SlowEnv(render_mode="rgb_array")) as address,
            raw_client(address) as client,
            client.join() as join,
        ):
            await join.call(reset("r", seeds=[0]))
            response = await join.call(
                env_v1.JoinRequest(request_id="p", render=env_v1.RenderRequest(env_indices=[0]))
            )
            assert response.render is not None
            assert response.render.format == env_v1.RenderFormat.PNG
            frame = response.render.frame
            assert frame is not None
            assert frame.startswith(b"\x89PNG\r\n\x1a\n")
            width, height = struct.unpack(">II", frame[16:24])
            assert (width, height) == (6, 4)
            many = await join.call(
                env_v1.JoinRequest(request_id="q", render=env_v1.RenderRequest(env_indices=[0, 1]))
            )
            assert many.error is not None
            assert many.error.code == Code.UNSUPPORTED


async def test_render_without_frame() -> None:
    with trio.fail_after(20):
        async with (
            running_server(SlowEnv()) as address,
            raw_client(address) as client,
            client.join() as join,
        ):
            await join.call(reset("r", seeds=[0]))
            response = await join.call(
                env_v1.JoinRequest(request_id="p", render=env_v1.RenderRequest())
            )
            assert response.render == env_v1.RenderResponse()


def _png_pixels(png: bytes) -> tuple[int, int, int, bytes]:
    width, height, _, color = struct.unpack(">IIBB", png[16:26])
    idat = b""
    pos = 8
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos : pos + 4])
        kind = png[pos + 4 : pos + 8]
        data = png[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", png[pos + 8 + length : pos + 12 + length])
        assert crc == zlib.crc32(kind + data)
        if kind == b"IDAT":
            idat += data
        pos += 12 + length
    return width, height, color, zlib.decompress(idat)


@pytest.mark.parametrize(
    ("frame", "color", "row"),
    [
        (np.full((2, 3, 3), 7, np.uint8), 2, b"\x00" + b"\x07" * 9),
        (np.full((2, 3, 4), 9, np.uint8), 6, b"\x00" + b"\x09" * 12),
        (np.full((3, 2, 3), 5, np.uint8).transpose(2, 0, 1)[:, :, :], 2, None),
        (np.ones((2, 3), np.float32), 0, b"\x00" + b"\xff" * 3),
    ],
)
def test_png_encoder(frame: np.ndarray, color: int, row: bytes | None) -> None:
    png = encode_png(frame)
    assert png is not None
    width, height, got_color, raw = _png_pixels(png)
    assert got_color == color
    assert height * (1 + width * {0: 1, 2: 3, 6: 4}[color]) == len(raw)
    if row is not None:
        assert raw[: len(row)] == row


def test_png_encoder_rejects_other_shapes() -> None:
    assert encode_png(None) is None
    assert encode_png(np.zeros((2, 2, 5))) is None
    assert encode_png(np.zeros(4)) is None


# --------------------------------------------------------------------------------- lifecycle


async def test_remote_shutdown_disabled_then_enabled() -> None:
    with trio.fail_after(20):
        async with running_server(SlowEnv()) as address, raw_client(address) as client:
            refused = await client.shutdown("test")
            assert refused.base == core_v1.ShutdownResponse(
                message="remote shutdown is disabled for this environment endpoint"
            )
        async with trio.open_nursery() as nursery:
            address = await nursery.start(
                lambda task_status: serve_env(
                    SlowEnv(), allow_remote_shutdown=True, task_status=task_status
                )
            )
            async with raw_client(address) as client:
                accepted = await client.shutdown("bye")
                assert accepted.base == core_v1.ShutdownResponse(
                    accepted=True, message="shutdown accepted: bye"
                )
        # serve_env returned by itself: the nursery closed without a cancel.


async def test_idle_timeout_stops_server() -> None:
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            await nursery.start(
                lambda task_status: serve_env(SlowEnv(), idle_timeout=0.2, task_status=task_status)
            )


async def test_token_required() -> None:
    with trio.fail_after(20):
        async with running_server(SlowEnv(), token="s3cret") as address:
            for token in (None, "wrong", "Bearer s3cret"):
                async with raw_client(address, token) as client:
                    with pytest.raises(GRPCError) as info:
                        await client.handshake()
                    assert info.value.status is Status.UNAUTHENTICATED
                    assert info.value.message == "invalid env token"
            async with raw_client(address, "s3cret") as client:
                assert (await client.handshake()).env_contract is not None
                async with client.join() as join:
                    assert (await join.call(reset("r"))).reset is not None


async def test_configure_edition_check() -> None:
    with trio.fail_after(20):
        async with (
            running_server(SlowEnv()) as address,
            raw_client(address) as client,
            client.join() as join,
        ):
            empty = await join.call(
                env_v1.JoinRequest(request_id="a", configure=env_v1.ConfigureEnvRequest())
            )
            assert empty.configure is not None
            bad = await join.call(
                env_v1.JoinRequest(
                    request_id="b",
                    configure=env_v1.ConfigureEnvRequest(selected_workflow_edition="2099.01"),
                )
            )
            assert bad.error is not None
            assert bad.error.code == Code.INVALID_ACTION
            assert not bad.error.is_recoverable


# --------------------------------------------------------------------------------- conformance


class DriftingEnv(SlowEnv):
    """Observations leave the Box bounds after one step; NaN after three."""

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        _, reward, _, truncated, info = super().step(action)
        value = [np.nan] if self.t >= 3 else [50.0]
        return np.array(value, np.float32), reward, False, truncated, info


async def test_conformance_warn_once_and_nan_rejected() -> None:
    with trio.fail_after(20):
        async with (
            running_server(DriftingEnv(episode_length=100)) as address,
            raw_client(address) as client,
            client.join() as join,
        ):
            await join.call(reset("r"))
            first = await join.call(step("s1", 1))
            assert first.step is not None
            warnings = meta_to_python(first.step.infos)[META_CONFORMANCE_WARNING]
            assert warnings == [
                {"kind": "observation", "path": "$", "detail": warnings[0]["detail"]}
            ]
            second = await join.call(step("s2", 1))
            assert second.step is not None
            assert META_CONFORMANCE_WARNING not in meta_to_python(second.step.infos)
            nan = await join.call(step("s3", 1))
            assert nan.error is not None
            assert nan.error.code == Code.INTERNAL
            assert "NaN" in nan.error.message


async def test_action_out_of_domain_is_invalid_action() -> None:
    with trio.fail_after(20):
        async with (
            running_server(SlowEnv()) as address,
            raw_client(address) as client,
            client.join() as join,
        ):
            await join.call(reset("r"))
            response = await join.call(step("s", 7))
            assert response.error is not None
            assert response.error.code == Code.INVALID_ACTION
            assert response.error.is_recoverable


async def test_strict_policy_rejects_range_deviation() -> None:
    with trio.fail_after(20):
        async with (
            running_server(DriftingEnv(), validation="strict") as address,
            raw_client(address) as client,
            client.join() as join,
        ):
            await join.call(reset("r"))
            response = await join.call(step("s", 1))
            assert response.error is not None
            assert response.error.code == Code.INTERNAL


async def test_policy_comes_from_the_environment_when_not_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Like RLMesh's servers, RLMESH_VALIDATION_POLICY picks the policy by default.
    monkeypatch.setenv("RLMESH_VALIDATION_POLICY", " Strict ")
    with trio.fail_after(20):
        async with (
            running_server(DriftingEnv()) as address,
            raw_client(address) as client,
            client.join() as join,
        ):
            await join.call(reset("r"))
            response = await join.call(step("s", 1))
            assert response.error is not None
            assert response.error.code == Code.INTERNAL


# --------------------------------------------------------------------------------- health


async def _health(client: Any, service: str) -> HealthCheckResponse:
    async def call() -> HealthCheckResponse:
        async with client.channel.request(
            HEALTH_CHECK, Cardinality.UNARY_UNARY, HealthCheckRequest, HealthCheckResponse
        ) as stream:
            await stream.send_message(HealthCheckRequest(service), end=True)
            reply: HealthCheckResponse = await stream.recv_message()
            return reply

    result: HealthCheckResponse = await client.portal.run(call)
    return result


async def test_health_check_not_stalled_by_slow_env() -> None:
    gate = ThreadGate()
    with trio.fail_after(20), gate:
        async with (
            running_server(SlowEnv(gate=gate)) as address,
            raw_client(address) as client,
            raw_client(address) as prober,
        ):
            assert (await _health(prober, "")).status == 1
            with pytest.raises(GRPCError) as info:
                await _health(prober, "rlmesh.env.v1.EnvService")
            assert info.value.status is Status.NOT_FOUND
            async with client.join() as join:
                await join.call(reset("r"))
                await join.send(step("slow", 1))
                await gate.entered()
                # Answered while the env is still inside its step.
                assert (await _health(prober, "")).status == 1
                assert not gate.is_open
                gate.open()
                response = await join.recv()
                assert response is not None
                assert response.step is not None


# --------------------------------------------------------------------------------- tracker


def test_tracker_rejects_next_step_violations_without_mutation() -> None:
    tracker = EpisodeTracker(2, next_step=True)
    tracker.on_reset([0, 1], ["a", "b"], [])
    done = tracker.on_step(
        [StepOutcome(0, 1.0, True, False, None), StepOutcome(1, 1.0, False, False, None)]
    )
    assert [e.episode_id for e in done] == ["a"]
    from trio_rlmesh.transports.grpc._env_adapter import WireError

    for bad in (StepOutcome(0, 0.0, True, False, None), StepOutcome(0, 0.5, False, False, None)):
        with pytest.raises(WireError):
            tracker.on_step([bad, StepOutcome(1, 1.0, False, False, None)])
    rolled = tracker.on_step(
        [StepOutcome(0, 0.0, False, False, None, "a2"), StepOutcome(1, 1.0, False, True, None)]
    )
    assert [(e.episode_id, e.step_count) for e in rolled] == [("b", 2)]
    final = tracker.on_close()
    assert [(e.episode_id, e.step_count) for e in final] == [("a2", 0)]


def test_tracker_interrupted_buffer_is_bounded() -> None:
    tracker = EpisodeTracker(1, next_step=False)
    for i in range(105):
        tracker.on_reset([0], [f"e{i}"], [i])
    buffered = tracker.on_step([StepOutcome(0, 1.0, False, False, None)])
    assert len(buffered) == 100
    assert buffered[0].episode_id == "e4"
    assert buffered[-1].episode_id == "e103"


async def test_serve_env_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="num_envs > 1 needs a factory"):
        await serve_env(SlowEnv(), num_envs=2)
    with pytest.raises(ValueError, match="autoreset"):
        await serve_env(SlowEnv(), autoreset="same-step")  # type: ignore[arg-type]
    assert Discrete(2)  # keep the import used for readers of this module


@pytest.mark.parametrize(
    "values", [(0, 0, 0, 0, 0), (1, 127, 128, 2**40, 2**64 - 1), (5, 6, 7, 8, 9)]
)
def test_timing_fields_match_betterproto(values: tuple[int, ...]) -> None:
    from trio_rlmesh.transports.grpc._env_server import timing_fields

    total, decode, user, encode, queue = values
    expected = env_v1.JoinResponse(
        endpoint_total_ns=total, decode_ns=decode, user_ns=user, encode_ns=encode, queue_ns=queue
    )
    assert timing_fields(
        total_ns=total, decode_ns=decode, user_ns=user, encode_ns=encode, queue_ns=queue
    ) == bytes(expected)
