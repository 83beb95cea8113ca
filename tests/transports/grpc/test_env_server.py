"""serve_env on each backend, driven by the raw client: handshake, episodes, lanes, vector
envs, timeouts, render, close, shutdown, idle, auth, conformance and health.

The server runs on the backend under test over ``memory://`` (trio, autojump clock) or a
Unix socket (grpclib); env code runs in worker threads unless a test says otherwise, so the
tests are guarded in real time (:func:`.servers.within`).
"""

from __future__ import annotations

import functools
import struct
import threading
import zlib
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import trio
from trio.testing import MockClock

from trio_rlmesh.protocol import core_v1, env_v1, make_env_contract, meta_to_python, spaces_v1
from trio_rlmesh.protocol._constants import META_CONFORMANCE_WARNING
from trio_rlmesh.protocol._fastwire import encode_env_timing_tail
from trio_rlmesh.spaces import from_gymnasium
from trio_rlmesh.transports._envhost import WireError
from trio_rlmesh.transports._envhost._tracker import EpisodeTracker, StepOutcome
from trio_rlmesh.transports._envhost._values import encode_png
from trio_rlmesh.transports.grpc import BackendName, serve_env
from trio_rlmesh.transports.grpc._handshake import ENV_SHUTDOWN, HEALTH_CHECK
from trio_rlmesh.transports.grpc._health import HealthCheckRequest, HealthCheckResponse
from trio_rlmesh.transports.grpc._status import GrpcError, Status

from .servers import (
    Code,
    DriftingEnv,
    Gate,
    ToyEnv,
    close,
    env_handshake,
    env_join,
    handshake_request,
    obs_f32,
    reset,
    serving,
    step,
    within,
)
from .wire import open_raw_client

Where = Callable[[str], str]

AUTOJUMP_THRESHOLD = 0.2
"""Env calls run in worker threads: virtual time waits this long (real) before jumping."""


def assert_timed(response: env_v1.JoinResponse) -> None:
    assert response.endpoint_total_ns is not None
    assert response.endpoint_total_ns > 0
    for name in ("decode_ns", "user_ns", "encode_ns", "queue_ns"):
        value = getattr(response, name)
        assert value is not None
        assert 0 <= value < 60 * 10**9


# --------------------------------------------------------------------------------- handshake


async def test_handshake_cartpole_contract(backend: BackendName, address: Where) -> None:
    env = gym.make("CartPole-v1")
    expected = make_env_contract(
        "CartPole-v1",
        from_gymnasium(env.observation_space),
        from_gymnasium(env.action_space),
        env.metadata,
    )
    with within(20):
        async with (
            serving(serve_env, env, address("env"), backend=backend) as served,
            open_raw_client(served.address) as raw,
        ):
            response = await env_handshake(raw)
            assert response.base is not None
            assert response.base.compatible
            assert response.base.capabilities == {"subset_step": "true"}
            assert response.base.supported_workflow_editions == ["2026.06"]
            assert response.base.preferred_workflow_edition == "2026.06"
            assert response.base.peer_info is not None
            assert response.base.peer_info.component == "rlmesh-env"
            assert response.env_contract == expected

            wrong = await env_handshake(raw, handshake_request("rlmesh-wire-v0"))
            assert wrong.base is not None
            assert not wrong.base.compatible
            assert wrong.base.error_message == (
                "protocol generation rlmesh-wire-v0 not compatible with server rlmesh-wire-v1"
            )
            assert wrong.env_contract is None
            assert wrong.base.capabilities == {"subset_step": "true"}  # as RLMesh answers

            with pytest.raises(GrpcError) as info:
                await env_handshake(raw, env_v1.HandshakeRequest())
            assert info.value.status is Status.INVALID_ARGUMENT
            assert info.value.message == "handshake request missing base"


# --------------------------------------------------------------------------------- episodes


async def test_cartpole_episode_matches_local_env(backend: BackendName, address: Where) -> None:
    local = gym.make("CartPole-v1")
    expected_obs, _ = local.reset(seed=3)
    with within(30):
        async with (
            serving(serve_env, gym.make("CartPole-v1"), address("env"), backend=backend) as served,
            open_raw_client(served.address) as raw,
            env_join(raw) as join,
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
            closed = await join.call(close("end"))
            assert closed.close == env_v1.CloseEnvsResponse()
            assert await join.receive() is None  # the server ends the stream with OK


async def test_interrupted_episode_and_close_final_episodes(
    backend: BackendName, address: Where
) -> None:
    with within(20):
        async with (
            serving(serve_env, ToyEnv(episode_length=100), address("env"), backend=backend) as s,
            open_raw_client(s.address) as raw,
            env_join(raw) as join,
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
            closed = await join.call(close("c"))
            assert closed.close is not None
            [last] = closed.close.final_episodes
            assert last.episode_id == "second"
            assert last.seed is None
            assert last.step_count == 1
            assert last.truncated


async def test_reset_options_and_info(backend: BackendName, address: Where) -> None:
    with within(20):
        async with (
            serving(serve_env, ToyEnv(), address("env"), backend=backend) as served,
            open_raw_client(served.address) as raw,
            env_join(raw) as join,
        ):
            options = spaces_v1.MetaMap(entries={"trial_index": spaces_v1.MetaValue(integer=0)})
            response = await join.call(reset("r", seeds=[5], options=options))
            assert response.reset is not None
            assert meta_to_python(response.reset.infos) == {
                "seed": 5,
                "options": {"trial_index": 0},
            }


async def test_step_final_info_is_lane_info(backend: BackendName, address: Where) -> None:
    with within(20):
        async with (
            serving(serve_env, ToyEnv(episode_length=1), address("env"), backend=backend) as s,
            open_raw_client(s.address) as raw,
            env_join(raw) as join,
        ):
            await join.call(reset("r", episode_ids=["e"]))
            response = await join.call(step("s", 1))
            assert response.step is not None
            [done] = response.step.completed_episodes
            assert meta_to_python(done.final_info) == {"t": 1}


# --------------------------------------------------------------------------------- lanes


async def test_lane_endpoint_answers_out_of_order(backend: BackendName, address: Where) -> None:
    gate = Gate()
    gates = iter([gate, None, None])
    with within(20):

        def factory() -> ToyEnv:
            return ToyEnv(gate=next(gates))

        async with (
            serving(serve_env, factory, address("env"), num_envs=3, backend=backend) as served,
            open_raw_client(served.address) as raw,
        ):
            handshake = await env_handshake(raw)
            assert handshake.env_contract is not None
            assert handshake.env_contract.num_envs == 3
            assert handshake.env_contract.autoreset_mode == core_v1.AutoresetMode.DISABLED
            assert handshake.base is not None
            assert handshake.base.capabilities == {"subset_step": "true"}
            async with env_join(raw) as join:
                full = await join.call(reset("r", seeds=[1, 2, 3], episode_ids=["a", "b", "c"]))
                assert full.reset is not None
                assert full.reset.observation is not None
                assert len(full.reset.observation.leaves[0]) == 3 * 4
                for lane in range(3):
                    await join.send(step(f"lane{lane}", 1, env_indices=[lane]))
                # Lane 0 is held in its env: the other lanes answer meanwhile.
                replies = [await join.receive() for _ in range(2)]
                await gate.entered.wait()
                gate.release()
                replies.append(await join.receive())
                order = [r.request_id for r in replies if r is not None]
                assert order[-1] == "lane0"
                assert sorted(order) == ["lane0", "lane1", "lane2"]
                for reply in replies:
                    assert reply is not None
                    assert reply.step is not None
                    lane = int(reply.request_id[-1])
                    assert reply.step.env_indices == [lane]
                    assert reply.step.rewards == [1.5]
                    assert len(reply.step.terminated_mask) == 1


async def test_lane_partial_reset_validation(backend: BackendName, address: Where) -> None:
    with within(20):
        async with (
            serving(serve_env, [ToyEnv(), ToyEnv()], address("env"), backend=backend) as served,
            open_raw_client(served.address) as raw,
            env_join(raw) as join,
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


async def test_vector_env_next_step_autoreset(backend: BackendName, address: Where) -> None:
    envs = gym.vector.SyncVectorEnv(
        [functools.partial(ToyEnv, episode_length=length) for length in (2, 3)]
    )
    with within(20):
        async with (
            serving(serve_env, envs, address("env"), backend=backend) as served,
            open_raw_client(served.address) as raw,
        ):
            handshake = await env_handshake(raw)
            assert handshake.base is not None
            assert handshake.base.capabilities == {}
            contract = handshake.env_contract
            assert contract is not None
            assert contract.num_envs == 2
            assert contract.autoreset_mode == core_v1.AutoresetMode.NEXT_STEP
            assert contract.spec is not None
            assert contract.spec.observation_space is not None
            assert contract.spec.observation_space.shape == [1]
            async with env_join(raw) as join:
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
                closed = await join.call(close("c"))
                assert closed.close is not None
                assert [e.episode_id for e in closed.close.final_episodes] == ["a1"]


async def test_vector_step_before_reset_is_a_next_step_violation_and_ends_the_join(
    backend: BackendName, address: Where
) -> None:
    envs = gym.vector.SyncVectorEnv([ToyEnv, ToyEnv])
    with within(20):
        async with (
            serving(serve_env, envs, address("env"), backend=backend) as served,
            open_raw_client(served.address) as raw,
            env_join(raw) as join,
        ):
            response = await join.call(step("s", 0, 0))
            assert response.error is not None
            assert response.error.code == Code.INTERNAL
            assert not response.error.is_recoverable
            # Non-recoverable: the server ends the Join with OK, as RLMesh does.
            assert await join.raw.status() == (Status.OK, "")


# --------------------------------------------------------------------------------- timeouts


async def test_timeout_answers_then_the_lane_is_busy_until_the_late_op_returns(
    backend: BackendName, clock: object, address: Where
) -> None:
    gate = Gate()
    with within(20):
        async with (
            serving(serve_env, ToyEnv(gate=gate), address("env"), backend=backend) as served,
            open_raw_client(served.address) as raw,
            env_join(raw) as join,
        ):
            await join.call(reset("r", episode_ids=["e"]))
            started = trio.current_time()
            late = await join.call(step("late", 1, timeout_ms=50))
            if clock is not None:  # virtual time: the answer came exactly at the deadline
                assert trio.current_time() - started == pytest.approx(0.05)
            assert late.error is not None
            assert late.error.code == Code.TIMEOUT
            assert late.error.is_recoverable
            assert late.error.message == "env.step timed out after 50ms"
            assert late.endpoint_total_ns is not None
            # While the abandoned step still runs, the lane refuses at once (recoverable
            # BUSY naming the stuck call); once it returns, its result is dropped (the
            # tracker never counted it) and the lane serves again.
            busy = await join.call(step("busy", 1))
            assert busy.error is not None
            assert busy.error.code == Code.BUSY
            assert busy.error.is_recoverable
            assert "env.step" in busy.error.message
            gate.release()
            while True:
                nxt = await join.call(step("next", 1))
                if nxt.error is None or nxt.error.code != Code.BUSY:
                    break
                await trio.sleep(0.01)
            assert nxt.step is not None
            assert obs_f32(nxt).tolist() == [2.0]
            closed = await join.call(close("c"))
            assert closed.close is not None
            assert closed.close.final_episodes[0].step_count == 1


# ---------------------------------------------------------------- where env code runs


class TimedEnv(ToyEnv):
    """Each step takes ``durations[i]`` seconds of the run's MockClock (0 once they run
    out) and records the thread it ran on."""

    def __init__(self, clock: MockClock, durations: list[float]) -> None:
        super().__init__(episode_length=100)
        self.clock = clock
        self.durations = durations
        self.threads: list[int] = []

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        index = len(self.threads)
        self.threads.append(threading.get_ident())
        self.clock.jump(self.durations[index] if index < len(self.durations) else 0.0)
        return super().step(action)


@pytest.mark.parametrize("took", [2.0, 1.0])
async def test_auto_runs_quick_steps_inline_and_an_inline_step_is_late_only_past_its_deadline(
    backend: BackendName, address: Where, mock_clock: MockClock, took: float
) -> None:
    # The default user_code="auto": the first 8 steps run on the lane's worker thread;
    # they were quick (no time passed), so the 9th runs inline on the event loop. Taking
    # 2 s against a 1 s timeout, it is answered TIMEOUT, its result dropped (the tracker
    # never counts it); taking exactly 1 s, it is in time (the driver's rule,
    # trio_rlmesh._timeouts.in_time). Either way, slow, the lane goes back to its thread.
    env = TimedEnv(mock_clock, [0.0] * 8 + [took])
    loop = threading.get_ident()
    with within(20):
        async with (
            serving(serve_env, env, address("env"), backend=backend) as served,
            open_raw_client(served.address) as raw,
            env_join(raw) as join,
        ):
            await join.call(reset("r", episode_ids=["e"]))
            for k in range(8):
                quick = await join.call(step(f"s{k}", 1, timeout_ms=1000))
                assert quick.error is None
            late = await join.call(step("late", 1, timeout_ms=1000))
            if took == 1.0:
                assert late.error is None
                assert late.step is not None
            else:
                assert late.error is not None
                assert late.error.code == Code.TIMEOUT
                assert late.error.is_recoverable
                assert late.error.message == "env.step timed out after 1000ms"
            after = await join.call(step("after", 1, timeout_ms=1000))
            assert after.step is not None
            assert obs_f32(after).tolist() == [10.0]
            closed = await join.call(close("c"))
            assert closed.close is not None
            assert closed.close.final_episodes[0].step_count == (10 if took == 1.0 else 9)
    assert [thread == loop for thread in env.threads] == [False] * 8 + [True, False]


@pytest.mark.parametrize("user_code", ["thread", "inline"])
async def test_explicit_user_code_keeps_every_step_in_one_place(
    backend: BackendName, address: Where, mock_clock: MockClock, user_code: str
) -> None:
    env = TimedEnv(mock_clock, [])
    loop = threading.get_ident()
    with within(20):
        async with (
            serving(serve_env, env, address("env"), backend=backend, user_code=user_code) as served,
            open_raw_client(served.address) as raw,
            env_join(raw) as join,
        ):
            await join.call(reset("r"))
            for k in range(12):
                assert (await join.call(step(f"s{k}", 1))).error is None
    assert {thread == loop for thread in env.threads} == {user_code == "inline"}


# --------------------------------------------------------------------------------- render


async def test_render_png(backend: BackendName, address: Where) -> None:
    with within(20):
        async with (
            serving(
                serve_env, ToyEnv(render_mode="rgb_array"), address("env"), backend=backend
            ) as served,
            open_raw_client(served.address) as raw,
            env_join(raw) as join,
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


async def test_render_without_frame(backend: BackendName, address: Where) -> None:
    with within(20):
        async with (
            serving(serve_env, ToyEnv(), address("env"), backend=backend) as served,
            open_raw_client(served.address) as raw,
            env_join(raw) as join,
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


async def test_remote_shutdown_disabled_then_enabled(backend: BackendName, address: Where) -> None:
    request = env_v1.ShutdownRequest(base=core_v1.ShutdownRequest(reason="bye"))
    with within(20):
        async with (
            serving(serve_env, ToyEnv(), address("a"), backend=backend) as served,
            open_raw_client(served.address) as raw,
        ):
            refused = await raw.unary(ENV_SHUTDOWN, request, env_v1.ShutdownResponse)
            assert refused.base == core_v1.ShutdownResponse(
                message="remote shutdown is disabled for this environment endpoint"
            )
        async with serving(
            serve_env, ToyEnv(), address("b"), allow_remote_shutdown=True, backend=backend
        ) as served:
            async with open_raw_client(served.address) as raw:
                accepted = await raw.unary(ENV_SHUTDOWN, request, env_v1.ShutdownResponse)
                assert accepted.base == core_v1.ShutdownResponse(
                    accepted=True, message="shutdown accepted: bye"
                )
            # serve_env returns by itself.
            await served.returned.wait()
            assert not served.scope.cancel_called


async def test_idle_timeout_stops_server(
    backend: BackendName, clock: object, address: Where
) -> None:
    with within(20):
        async with serving(
            serve_env, ToyEnv(), address("env"), idle_timeout=0.2, backend=backend
        ) as served:
            started = trio.current_time()
            await served.returned.wait()
            assert not served.scope.cancel_called
            if clock is not None:
                assert trio.current_time() - started == pytest.approx(0.2)


async def test_token_required(backend: BackendName, address: Where) -> None:
    with within(20):
        async with serving(
            serve_env, ToyEnv(), address("env"), token="s3cret", backend=backend
        ) as served:
            for token in (None, "wrong", "Bearer s3cret"):
                async with open_raw_client(served.address, token=token) as raw:
                    with pytest.raises(GrpcError) as info:
                        await env_handshake(raw)
                    assert info.value.status is Status.UNAUTHENTICATED
                    assert info.value.message == "invalid env token"
            async with open_raw_client(served.address, token="s3cret") as raw:
                assert (await env_handshake(raw)).env_contract is not None
                async with env_join(raw) as join:
                    assert (await join.call(reset("r"))).reset is not None


async def test_configure_edition_check(backend: BackendName, address: Where) -> None:
    with within(20):
        async with (
            serving(serve_env, ToyEnv(), address("env"), backend=backend) as served,
            open_raw_client(served.address) as raw,
            env_join(raw) as join,
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
            # Non-recoverable: the stream ends (OK) after the error.
            assert await join.raw.status() == (Status.OK, "")


# --------------------------------------------------------------------------------- conformance


async def test_conformance_warn_once_and_nan_rejected(backend: BackendName, address: Where) -> None:
    with within(20):
        async with (
            serving(
                serve_env, DriftingEnv(episode_length=100), address("env"), backend=backend
            ) as served,
            open_raw_client(served.address) as raw,
            env_join(raw) as join,
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


async def test_action_out_of_domain_is_invalid_action(backend: BackendName, address: Where) -> None:
    with within(20):
        async with (
            serving(serve_env, ToyEnv(), address("env"), backend=backend) as served,
            open_raw_client(served.address) as raw,
            env_join(raw) as join,
        ):
            await join.call(reset("r"))
            response = await join.call(step("s", 7))
            assert response.error is not None
            assert response.error.code == Code.INVALID_ACTION
            assert response.error.is_recoverable


async def test_strict_policy_rejects_range_deviation(backend: BackendName, address: Where) -> None:
    with within(20):
        async with (
            serving(
                serve_env, DriftingEnv(), address("env"), validation="strict", backend=backend
            ) as served,
            open_raw_client(served.address) as raw,
            env_join(raw) as join,
        ):
            await join.call(reset("r"))
            response = await join.call(step("s", 1))
            assert response.error is not None
            assert response.error.code == Code.INTERNAL


async def test_policy_comes_from_the_environment_when_not_given(
    backend: BackendName, address: Where, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Like RLMesh's servers, RLMESH_VALIDATION_POLICY picks the policy by default.
    monkeypatch.setenv("RLMESH_VALIDATION_POLICY", " Strict ")
    with within(20):
        async with (
            serving(serve_env, DriftingEnv(), address("env"), backend=backend) as served,
            open_raw_client(served.address) as raw,
            env_join(raw) as join,
        ):
            await join.call(reset("r"))
            response = await join.call(step("s", 1))
            assert response.error is not None
            assert response.error.code == Code.INTERNAL


# --------------------------------------------------------------------------------- health


async def test_health_check_not_stalled_by_a_stuck_env(
    backend: BackendName, address: Where
) -> None:
    gate = Gate()
    with within(20):
        async with (
            serving(serve_env, ToyEnv(gate=gate), address("env"), backend=backend) as served,
            open_raw_client(served.address) as raw,
            open_raw_client(served.address) as prober,
        ):
            health = await prober.unary_bytes(
                HEALTH_CHECK, HealthCheckRequest("").SerializeToString()
            )
            assert HealthCheckResponse.FromString(health).status == 1
            with pytest.raises(GrpcError) as info:
                await prober.unary_bytes(
                    HEALTH_CHECK, HealthCheckRequest("rlmesh.env.v1.EnvService").SerializeToString()
                )
            assert info.value.status is Status.NOT_FOUND
            async with env_join(raw) as join:
                await join.call(reset("r"))
                await join.send(step("stuck", 1))
                await gate.entered.wait()
                # The env is stuck in its worker: health still answers, at once.
                health = await prober.unary_bytes(
                    HEALTH_CHECK, HealthCheckRequest("").SerializeToString()
                )
                assert HealthCheckResponse.FromString(health).status == 1
                gate.release()
                response = await join.receive()
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
    for bad in (StepOutcome(0, 0.0, True, False, None), StepOutcome(0, 0.5, False, False, None)):
        with pytest.raises(WireError):
            tracker.on_step([bad, StepOutcome(1, 1.0, False, False, None)])
    rolled = tracker.on_step(
        [StepOutcome(0, 0.0, False, False, None, "a2"), StepOutcome(1, 1.0, False, True, None)]
    )
    assert [(e.episode_id, e.step_count) for e in rolled] == [("b", 2)]
    final = tracker.on_close()
    assert [(e.episode_id, e.step_count) for e in final] == [("a2", 0)]


def test_tracker_columns_ask_only_for_finishing_and_rolling_lanes() -> None:
    tracker = EpisodeTracker(3, next_step=True)
    tracker.on_reset([0, 1, 2], ["a", "b", "c"], [7, 8, 9])
    asked: list[tuple[str, int]] = []

    def final_info(position: int) -> spaces_v1.MetaMap | None:
        asked.append(("final", position))
        return None

    def next_id(position: int, lane: int) -> str:
        asked.append(("next", position))
        return f"n{lane}"

    lanes = [0, 1, 2]
    for _ in range(3):  # every lane active, none done: nothing asked, rewards summed
        assert (
            tracker.on_step_lanes(
                lanes, [1.0, 0.5, 0.25], [False] * 3, [False] * 3, final_info, next_id
            )
            == []
        )
    assert asked == []
    done = tracker.on_step_lanes(
        lanes, [1.0, 0.5, 0.25], [False, True, False], [False, False, True], final_info, next_id
    )
    assert asked == [("final", 1), ("final", 2)]
    assert [(e.episode_id, e.seed, e.step_count, e.cumulative_reward) for e in done] == [
        ("b", 8, 4, 2.0),
        ("c", 9, 4, 1.0),
    ]
    assert [(e.terminated, e.truncated) for e in done] == [(True, False), (False, True)]
    asked.clear()
    # Lanes 1 and 2 roll (NEXT_STEP); lane 0 keeps counting; a bad roll changes nothing.
    with pytest.raises(WireError, match="lane 2 returned reward"):
        tracker.on_step_lanes(lanes, [1.0, 0.0, 3.0], [False] * 3, [False] * 3, final_info, next_id)
    assert asked == []
    assert (
        tracker.on_step_lanes(lanes, [1.0, 0.0, 0.0], [False] * 3, [False] * 3, final_info, next_id)
        == []
    )
    assert asked == [("next", 1), ("next", 2)]
    final = tracker.on_close()
    assert [(e.episode_id, e.step_count, e.cumulative_reward) for e in final] == [
        ("a", 5, 5.0),
        ("n1", 0, 0.0),
        ("n2", 0, 0.0),
    ]


def test_tracker_interrupted_buffer_is_bounded() -> None:
    tracker = EpisodeTracker(1, next_step=False)
    for i in range(105):
        tracker.on_reset([0], [f"e{i}"], [i])
    buffered = tracker.on_step([StepOutcome(0, 1.0, False, False, None)])
    assert len(buffered) == 100
    assert buffered[0].episode_id == "e4"
    assert buffered[-1].episode_id == "e103"


async def test_serve_env_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="num_envs=2 needs a factory"):
        await serve_env(ToyEnv(), num_envs=2)
    with pytest.raises(ValueError, match="autoreset"):
        await serve_env(ToyEnv(), autoreset="same-step")  # type: ignore[arg-type]
    for blank in ("", "  "):
        with pytest.raises(ValueError, match="token must not be blank"):
            await serve_env(ToyEnv(), token=blank)
    with pytest.raises(ValueError, match="drain_timeout must be >= 0 seconds"):
        await serve_env(ToyEnv(), drain_timeout=-1.0)
    with pytest.raises(ValueError, match="unknown gRPC backend"):
        await serve_env(ToyEnv(), backend="asyncio")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="user_code"):
        await serve_env(ToyEnv(), user_code="process")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "values", [(0, 0, 0, 0, 0), (1, 127, 128, 2**40, 2**64 - 1), (5, 6, 7, 8, 9)]
)
def test_timing_tail_matches_betterproto(values: tuple[int, ...]) -> None:
    total, decode, user, encode, queue = values
    expected = env_v1.JoinResponse(
        endpoint_total_ns=total, decode_ns=decode, user_ns=user, encode_ns=encode, queue_ns=queue
    )
    assert encode_env_timing_tail(
        total_ns=total, decode_ns=decode, user_ns=user, encode_ns=encode, queue_ns=queue
    ) == bytes(expected)
