"""What the server tests share: small envs, a gate to hold env code, a real-time guard,
``serving`` (a server in its own cancel scope) and request builders for the raw client."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import attrs
import gymnasium as gym
import numpy as np
import trio

from tests.model.helpers import OBS, predict_request
from trio_rlmesh.protocol import (
    PROTOCOL_GENERATION,
    WORKFLOW_EDITION,
    core_v1,
    env_v1,
    model_v1,
    spaces_v1,
)
from trio_rlmesh.protocol._spacespec import space_to_spec
from trio_rlmesh.spaces import Box
from trio_rlmesh.transports.grpc._handshake import ENV_HANDSHAKE, ENV_JOIN, MODEL_JOIN, peer_info

from .wire import RawClient, RawStream

# ----------------------------------------------------------------------------- timing


@contextlib.contextmanager
def within(seconds: float) -> Iterator[None]:
    """``trio.fail_after`` in real time: the guard of tests that may run under the autojump
    clock while env code runs in worker threads (virtual time jumps to the nearest deadline
    whenever every task waits on a thread, so a virtual-time guard would fire at once)."""
    token = trio.lowlevel.current_trio_token()
    with trio.CancelScope() as scope:

        def expire() -> None:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(scope.cancel)

        timer = threading.Timer(seconds, expire)
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            timer.cancel()
    if scope.cancelled_caught:
        raise trio.TooSlowError(f"the test took more than {seconds:g} s of real time")


# ----------------------------------------------------------------------------- envs


class Gate:
    """Holds env code (in its worker thread) until released; says when it is held."""

    def __init__(self) -> None:
        self.entered = trio.Event()
        self._released = threading.Event()
        self._token = trio.lowlevel.current_trio_token()

    def hold(self) -> None:
        """Called from env code in its worker thread (any thread: no trio context needed)."""
        self._token.run_sync_soon(self.entered.set)
        self._released.wait(timeout=60)

    def release(self) -> None:
        self._released.set()


class ToyEnv(gym.Env[np.ndarray, np.int64]):
    """A one-number env: the observation counts steps, reward = action + 0.5.

    ``gate`` holds every step (in its worker thread) until released. ``render()`` returns
    a 4x6 RGB frame when built with ``render_mode="rgb_array"``.
    """

    metadata = {"render_modes": ["rgb_array"]}  # noqa: RUF012

    def __init__(
        self,
        episode_length: int = 3,
        render_mode: str | None = None,
        gate: Gate | None = None,
        fail_at: int | None = None,
    ) -> None:
        self.render_mode = render_mode
        self.observation_space = gym.spaces.Box(-10.0, 10.0, shape=(1,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.gate = gate
        self.fail_at = fail_at
        self.episode_length = episode_length
        self.t = 0
        self.steps = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0], dtype=np.float32), {"seed": seed, "options": options}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.steps += 1
        if self.gate is not None:
            self.gate.hold()
        if self.fail_at is not None and self.steps >= self.fail_at:
            raise ValueError("the env broke")
        self.t += 1
        obs = np.array([float(self.t)], dtype=np.float32)
        return obs, float(action) + 0.5, self.t >= self.episode_length, False, {"t": self.t}

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        return np.full((4, 6, 3), self.t, dtype=np.uint8)


class DriftingEnv(ToyEnv):
    """Observations leave the Box bounds after one step; NaN after three."""

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        _, reward, _, truncated, info = super().step(action)
        value = [np.nan] if self.t >= 3 else [50.0]
        return np.array(value, np.float32), reward, False, truncated, info


# ----------------------------------------------------------------------------- serving


@attrs.define(eq=False)
class Served:
    """A server running in its own cancel scope, so a test can stop just the server."""

    address: str
    scope: trio.CancelScope
    returned: trio.Event = attrs.field(factory=trio.Event)
    stopped_at: float | None = None
    returned_at: float | None = None
    error: BaseException | None = None

    def stop(self) -> None:
        self.stopped_at = trio.current_time()
        self.scope.cancel()

    async def wait_returned(self) -> float:
        """Seconds from :meth:`stop` (or from now) until the server returned."""
        await self.returned.wait()
        assert self.returned_at is not None
        return self.returned_at - (self.stopped_at or self.returned_at)


@contextlib.asynccontextmanager
async def serving(
    serve: Callable[..., Awaitable[None]], *args: Any, **kwargs: Any
) -> AsyncIterator[Served]:
    """Run ``serve(*args, **kwargs)`` (``serve_env`` or ``serve_model``) for the block."""
    async with trio.open_nursery() as nursery:
        scope = trio.CancelScope()
        holder: list[Served] = []

        async def run(task_status: trio.TaskStatus[str]) -> None:
            try:
                with scope:
                    await serve(*args, task_status=task_status, **kwargs)
            finally:
                if holder:
                    holder[0].returned_at = trio.current_time()
                    holder[0].returned.set()

        address: str = await nursery.start(run)
        holder.append(Served(address, scope))
        try:
            yield holder[0]
        finally:
            scope.cancel()


# ----------------------------------------------------------------------------- env requests

Code = env_v1.EnvErrorCode


def handshake_request(generation: str = PROTOCOL_GENERATION) -> env_v1.HandshakeRequest:
    return env_v1.HandshakeRequest(
        base=core_v1.HandshakeRequest(
            protocol_generation=generation,
            peer_info=peer_info("rlmesh-env"),
            supported_workflow_editions=[WORKFLOW_EDITION],
            preferred_workflow_edition=WORKFLOW_EDITION,
        )
    )


def discrete_action(*values: int) -> spaces_v1.SpaceValue:
    return spaces_v1.SpaceValue(leaves=[np.asarray(values, dtype="<i8").tobytes()])


def step(request_id: str, *values: int, **kwargs: Any) -> env_v1.JoinRequest:
    return env_v1.JoinRequest(
        request_id=request_id,
        step=env_v1.StepRequest(action=discrete_action(*values), **kwargs),
    )


def reset(request_id: str, **kwargs: Any) -> env_v1.JoinRequest:
    return env_v1.JoinRequest(request_id=request_id, reset=env_v1.ResetRequest(**kwargs))


def close(request_id: str = "close") -> env_v1.JoinRequest:
    return env_v1.JoinRequest(request_id=request_id, close=env_v1.CloseEnvsRequest())


def obs_f32(response: env_v1.JoinResponse) -> np.ndarray:
    body = response.reset or response.step
    assert body is not None, response
    assert body.observation is not None
    return np.frombuffer(body.observation.leaves[0], dtype="<f4")


async def env_handshake(
    raw: RawClient, request: env_v1.HandshakeRequest | None = None
) -> env_v1.HandshakeResponse:
    return await raw.unary(
        ENV_HANDSHAKE, handshake_request() if request is None else request, env_v1.HandshakeResponse
    )


class EnvJoin:
    """A Join stream of the raw client, speaking env messages."""

    def __init__(self, call: RawStream) -> None:
        self.raw = call

    async def send(self, request: env_v1.JoinRequest | bytes, *, end: bool = False) -> None:
        await self.raw.send(request, end=end)

    async def receive(self) -> env_v1.JoinResponse | None:
        return await self.raw.receive(env_v1.JoinResponse)

    async def call(self, request: env_v1.JoinRequest) -> env_v1.JoinResponse:
        return await self.raw.call(request, env_v1.JoinResponse)


@contextlib.asynccontextmanager
async def env_join(raw: RawClient) -> AsyncIterator[EnvJoin]:
    call = await raw.open(ENV_JOIN)
    try:
        yield EnvJoin(call)
    finally:
        call.reset()


# ----------------------------------------------------------------------------- model requests


def model_handshake_request() -> model_v1.HandshakeRequest:
    return model_v1.HandshakeRequest(
        base=core_v1.HandshakeRequest(
            protocol_generation=PROTOCOL_GENERATION,
            peer_info=peer_info("rlmesh-model"),
            supported_workflow_editions=[WORKFLOW_EDITION],
            preferred_workflow_edition=WORKFLOW_EDITION,
        )
    )


MODEL_SPEC = core_v1.EnvSpec(
    id="Toy-v0",
    observation_space=space_to_spec(OBS),
    action_space=space_to_spec(Box.from_bounds(-100.0, 100.0, shape=(2,))),
)


def resolve(env_id: str, spec: core_v1.EnvSpec = MODEL_SPEC, h: int = 1) -> model_v1.JoinRequest:
    return model_v1.JoinRequest(
        request_id=f"{env_id}:resolve_adapter",
        resolve_adapter=model_v1.ResolveAdapterRequest(
            context=model_v1.AdapterContext(
                session_id="s", env_id=env_id, request_id=f"{env_id}:resolve_adapter"
            ),
            env_spec=spec,
            selected_workflow_edition=WORKFLOW_EDITION,
            execution_horizon=h,
            delivers_history=True,
        ),
    )


def predict(
    env_id: str, values: list[float], request_id: str | None = None
) -> model_v1.JoinRequest:
    request = predict_request(env_id, values, request_id=request_id)
    assert request.context is not None
    return model_v1.JoinRequest(request_id=request.context.request_id, predict=request)


class ModelJoin:
    """A Join stream of the raw client, speaking model messages."""

    def __init__(self, call: RawStream) -> None:
        self.raw = call

    async def send(self, request: model_v1.JoinRequest | bytes, *, end: bool = False) -> None:
        await self.raw.send(request, end=end)

    async def receive(self) -> model_v1.JoinResponse | None:
        return await self.raw.receive(model_v1.JoinResponse)

    async def call(self, request: model_v1.JoinRequest) -> model_v1.JoinResponse:
        return await self.raw.call(request, model_v1.JoinResponse)


@contextlib.asynccontextmanager
async def model_join(raw: RawClient) -> AsyncIterator[ModelJoin]:
    call = await raw.open(MODEL_JOIN)
    try:
        yield ModelJoin(call)
    finally:
        call.reset()


# ----------------------------------------------------------------------------- protobuf bytes


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def pb_field(number: int, wire_type: int, payload: bytes | int) -> bytes:
    """One protobuf field: varint payloads for wire type 0, length-delimited for 2."""
    key = varint(number << 3 | wire_type)
    if wire_type == 0:
        assert isinstance(payload, int)
        return key + varint(payload)
    assert isinstance(payload, bytes)
    return key + varint(len(payload)) + payload


def field_number(message_type: type[Any], name: str) -> int:
    number: int = message_type._betterproto.meta_by_field_name[name].number
    return number
