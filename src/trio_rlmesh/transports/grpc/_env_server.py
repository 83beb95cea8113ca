"""``serve_env``: serve a Gymnasium env (or several) as an rlmesh-wire-v1 EnvService.

Theory of operation:

* The grpclib server lives on the portal's asyncio loop; trio only starts it, waits, and
  stops it. User env code never runs on either event loop: each lane has its own
  single-thread executor, so a slow env stalls neither health checks nor other lanes, and a
  lane's calls run in arrival order.
* One Join at a time. A lockstep (vector) env handles the stream's requests one after the
  other. A lane endpoint (one scalar env per lane, ``subset_step``) runs every reset/step/
  render as its own task and answers in completion order (requests carry ``request_id``).
* A request with ``timeout_ms`` is answered TIMEOUT when the deadline passes; the late call
  keeps its lane's thread, so the next call on that lane waits for it, and its result is
  dropped without touching the episode tracker (spec §6.7).
* Every response gets the 0.1.0 timing fields. The body is serialized once; the timing
  fields are serialized separately and appended, which protobuf reads as one message.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, Literal

import attrs
import betterproto2
import numpy as np
import trio
from grpclib.const import Cardinality, Handler, Status
from grpclib.encoding.proto import ProtoCodec
from grpclib.exceptions import GRPCError

from ...protocol import (
    CAP_SUBSET_STEP,
    CAPABILITY_TRUE,
    COMPONENT_ENV,
    MAX_MESSAGE_SIZE,
    SUPPORTED_WORKFLOW_EDITIONS,
    core_v1,
    env_v1,
    meta_to_python,
    spaces_v1,
)
from ...protocol._fastwire import decode_env_join_request, encode_env_join_response
from ._common import (
    ENV_HANDSHAKE,
    ENV_JOIN,
    ENV_SHUTDOWN,
    Address,
    answer_shutdown,
    check_token,
    handshake_response,
    parse_bind_address,
    receive_base,
)
from ._env_adapter import (
    EnvBackend,
    EpisodeTracker,
    LaneBackend,
    LaneResult,
    StepOutcome,
    ValidationPolicy,
    ValueGate,
    VectorBackend,
    WireError,
    encode_png,
    infos_to_meta,
    make_backend,
    merge_lane_infos,
    validation_policy_from_env,
    vector_final_info,
)
from ._health import HealthService
from ._lifecycle import CLOSE_GRACE, TrackedServer
from ._portal import open_portal

__all__ = ["serve_env"]

Code = env_v1.EnvErrorCode

JOIN_BUSY_MESSAGE: Final = (
    "environment already has an active Join session; only one client may be connected at a time"
)
SHUTDOWN_DISABLED_MESSAGE: Final = "remote shutdown is disabled for this environment endpoint"
CLOSE_TIMEOUT: Final = 5.0
"""Seconds the env's own ``close()`` may take when the server stops."""

_DECODE_NS: contextvars.ContextVar[int] = contextvars.ContextVar("decode_ns", default=0)
_DEADLINE: contextvars.ContextVar[tuple[float, str] | None] = contextvars.ContextVar(
    "deadline", default=None
)
"""(loop time, TIMEOUT message) of the request being handled, when it set ``timeout_ms``."""


def _varint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    for stop in range(pos, min(pos + 10, end)):
        value |= (data[stop] & 0x7F) << shift
        if not data[stop] & 0x80:
            return value, stop + 1
        shift += 7
    raise ValueError("truncated or overlong varint")


def _check_wire(data: bytes, message_type: Any, pos: int = 0, end: int | None = None) -> None:
    """Reject bytes that are not well-formed protobuf for ``message_type``.

    betterproto2 0.10 parses truncated input without complaint, so the server checks the
    framing itself (varints end, lengths fit) and recurses into known message fields.
    """
    end = len(data) if end is None else end
    meta = message_type._betterproto
    while pos < end:
        key, pos = _varint(data, pos, end)
        number, wire_type = key >> 3, key & 7
        if number == 0:
            raise ValueError("field number 0")
        if wire_type == 0:
            _, pos = _varint(data, pos, end)
        elif wire_type in (1, 5):
            pos += 8 if wire_type == 1 else 4
        elif wire_type == 2:
            length, start = _varint(data, pos, end)
            pos = start + length
            if pos > end:
                raise ValueError(f"field {number} runs past the end of the message")
            name = meta.field_name_by_number.get(number)
            field = meta.meta_by_field_name.get(name) if name else None
            if field is not None and field.proto_type == "message":
                _check_wire(data, meta.cls_by_field[name], start, pos)
        else:
            raise ValueError(f"unsupported wire type {wire_type}")
    if pos != end:
        raise ValueError("truncated fixed-width field")


class _Codec(ProtoCodec):
    """grpclib's proto codec plus a size limit, decode timing, and pre-encoded replies."""

    def __init__(self, max_message_size: int) -> None:
        self.max_message_size = max_message_size

    def encode(self, message: Any, message_type: Any) -> bytes:
        if isinstance(message, bytes):
            return message
        return super().encode(message, message_type)

    def decode(self, data: bytes, message_type: Any) -> Any:
        if len(data) > self.max_message_size:
            raise GRPCError(
                Status.RESOURCE_EXHAUSTED,
                f"message of {len(data)} bytes exceeds the limit of {self.max_message_size}",
            )
        started = time.perf_counter_ns()
        try:
            if message_type is env_v1.JoinRequest:
                # The fast path checks framing as it parses; what it does not cover goes
                # to the checked betterproto2 parse below.
                message = decode_env_join_request(data, self._checked_join_request)
            else:
                if hasattr(message_type, "_betterproto"):
                    _check_wire(data, message_type)
                message = message_type.FromString(data)
        except Exception as exc:
            raise GRPCError(
                Status.INTERNAL, f"failed to decode {message_type.__name__}: {exc}"
            ) from None
        # The handler reads this in the same task, right after recv_message returns.
        _DECODE_NS.set(time.perf_counter_ns() - started)
        return message

    @staticmethod
    def _checked_join_request(data: bytes) -> env_v1.JoinRequest:
        _check_wire(data, env_v1.JoinRequest)
        return env_v1.JoinRequest.FromString(data)


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_U64_MAX: Final = 2**64 - 1


def timing_fields(
    *, total_ns: int, decode_ns: int, user_ns: int, encode_ns: int, queue_ns: int
) -> bytes:
    """The JoinResponse timing fields 6, 11, 12, 13 and 15 (explicit presence, so zeros are
    written), encoded by hand: they go on every response, and building a second message
    for them costs more than the rest of a small step's encoding. Appending them to a
    serialized JoinResponse yields the same message with the fields set."""
    fields = ((0x30, total_ns), (0x58, decode_ns), (0x60, user_ns), (0x68, encode_ns))
    parts = [bytes((tag,)) + _uvarint(min(value, _U64_MAX)) for tag, value in fields]
    parts.append(b"\x78" + _uvarint(min(queue_ns, _U64_MAX)))
    return b"".join(parts)


@attrs.define(eq=False)
class _Request:
    """One Join request in progress."""

    request_id: str
    started_ns: int
    decode_ns: int
    user_ns: int = 0
    queue_ns: int = 0

    def note(self, submitted_ns: int, results: Sequence[LaneResult]) -> None:
        self.user_ns += max((r.user_ns for r in results), default=0)
        self.queue_ns += max((max(0, r.started_ns - submitted_ns) for r in results), default=0)


def _which(message: betterproto2.Message, group: str) -> tuple[str, Any]:
    return betterproto2.which_one_of(message, group)


@attrs.define(eq=False)
class _EnvService:
    """The EnvService handlers; all methods run on the portal's asyncio loop."""

    backend: EnvBackend
    contract: core_v1.EnvContract
    gate: ValueGate
    token: str | None
    allow_remote_shutdown: bool
    request_stop: Callable[[str], None]
    executors: list[concurrent.futures.ThreadPoolExecutor]
    join_active: bool = False
    draining: bool = False
    in_flight: int = 0
    idle_since: float = attrs.field(factory=time.monotonic)
    ever_reset: set[int] = attrs.field(factory=set)
    server: TrackedServer | None = None
    idle: asyncio.Event = attrs.field(factory=asyncio.Event)
    """Set while no Join request is in progress (created on the loop thread)."""

    @property
    def capabilities(self) -> dict[str, str]:
        return {CAP_SUBSET_STEP: CAPABILITY_TRUE} if self.backend.lanes_individually else {}

    def __mapping__(self) -> dict[str, Handler]:
        return {
            ENV_HANDSHAKE: Handler(
                self.handshake,
                Cardinality.UNARY_UNARY,
                env_v1.HandshakeRequest,
                env_v1.HandshakeResponse,
            ),
            ENV_JOIN: Handler(
                self.join, Cardinality.STREAM_STREAM, env_v1.JoinRequest, env_v1.JoinResponse
            ),
            ENV_SHUTDOWN: Handler(
                self.shutdown,
                Cardinality.UNARY_UNARY,
                env_v1.ShutdownRequest,
                env_v1.ShutdownResponse,
            ),
        }

    # ---------------------------------------------------------------- unary calls

    async def handshake(self, stream: Any) -> None:
        request = await receive_base(stream, self.token, what="env", call="handshake")
        base = handshake_response(COMPONENT_ENV, request, capabilities=self.capabilities)
        response = env_v1.HandshakeResponse(base=base)
        if base.compatible:
            response.env_contract = self.contract
        await stream.send_message(response)

    async def shutdown(self, stream: Any) -> None:
        reason = await answer_shutdown(
            stream,
            self.token,
            what="env",
            response_type=env_v1.ShutdownResponse,
            allowed=self.allow_remote_shutdown,
            disabled_message=SHUTDOWN_DISABLED_MESSAGE,
        )
        if reason is not None:
            self.request_stop(f"remote shutdown: {reason}" if reason else "remote shutdown")

    # ---------------------------------------------------------------- Join

    async def join(self, stream: Any) -> None:
        await check_token(stream, self.token)
        if self.draining:
            raise GRPCError(Status.UNAVAILABLE, "the env server is shutting down")
        if self.join_active:
            raise GRPCError(Status.FAILED_PRECONDITION, JOIN_BUSY_MESSAGE)
        self.join_active = True
        session = _JoinSession(self, stream)
        try:
            # Real clients wait for the response headers before sending anything.
            await stream.send_initial_metadata()
            await session.run()
        finally:
            session.abandon()
            self.join_active = False

    def begin(self) -> None:
        self.in_flight += 1
        self.idle.clear()

    def end(self) -> None:
        self.in_flight -= 1
        if not self.in_flight:
            self.idle_since = time.monotonic()
            self.idle.set()

    def run_on_lane(self, lane: int, fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        """Run ``fn(*args)`` on the lane's thread; the returned future resolves on the loop,
        or fails with TIMEOUT at the deadline of the request being handled, if it has one."""
        loop = asyncio.get_running_loop()
        waiter = loop.run_in_executor(self.executors[lane], fn, *args)
        deadline = _DEADLINE.get()
        if deadline is None:
            return waiter
        return _with_deadline(waiter, *deadline)

    # ---------------------------------------------------------------- lifecycle

    async def start(self, bind: Address, max_message_size: int) -> str:
        self.server = TrackedServer([self, HealthService()], codec=_Codec(max_message_size))
        if bind.kind == "unix":
            assert bind.path is not None
            with contextlib.suppress(FileNotFoundError):
                os.unlink(bind.path)
            await self.server.start(path=bind.path)
            return str(bind)
        await self.server.start(bind.host, bind.port)
        return Address.tcp(str(bind.host), self.server.bound_port()).authority

    async def watch_idle(self, idle_timeout: float) -> None:
        while True:
            await asyncio.sleep(min(idle_timeout, 0.5))
            if not self.in_flight and time.monotonic() - self.idle_since >= idle_timeout:
                self.request_stop(f"idle for {idle_timeout:g}s")
                return

    async def stop(self, drain_timeout: float | None) -> None:
        """Stop accepting, let requests in progress finish (at most ``drain_timeout``),
        then end every handler and connection, so clients see their streams end at once."""
        self.draining = True
        server = self.server
        if server is None:
            return
        server.stop_accepting()
        try:
            if self.in_flight:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self.idle.wait(), drain_timeout)
        finally:
            await server.close_connections(CLOSE_GRACE)


@attrs.define(eq=False)
class _JoinSession:
    """One Join stream: reads requests, answers each exactly once."""

    service: _EnvService
    stream: Any
    tracker: EpisodeTracker = attrs.field(init=False)
    send_lock: asyncio.Lock = attrs.field(init=False, factory=asyncio.Lock)
    tasks: set[asyncio.Task[None]] = attrs.field(init=False, factory=set)

    def __attrs_post_init__(self) -> None:
        backend = self.service.backend
        self.tracker = EpisodeTracker(
            backend.num_lanes, backend.autoreset is core_v1.AutoresetMode.NEXT_STEP
        )

    @property
    def backend(self) -> EnvBackend:
        return self.service.backend

    async def run(self) -> None:
        while True:
            request: env_v1.JoinRequest | None = await self.stream.recv_message()
            if request is None:
                # The client half-closed; answer what it already asked for.
                if self.tasks:
                    await asyncio.wait(list(self.tasks))
                return
            if self.service.draining:
                # Stopping: no new work; what is in progress still gets its answer.
                if self.tasks:
                    await asyncio.wait(list(self.tasks))
                raise GRPCError(Status.UNAVAILABLE, "the env server is shutting down")
            context = _Request(request.request_id, time.perf_counter_ns(), _DECODE_NS.get())
            kind, _ = _which(request, "kind")
            if kind == "close":
                if self.tasks:
                    await asyncio.wait(list(self.tasks))
                await self._answer(context, self._close())
                return
            if self.backend.lanes_individually and kind in ("reset", "step", "render"):
                task = asyncio.get_running_loop().create_task(self._serve(request, context))
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)
            else:
                await self._serve(request, context)

    def abandon(self) -> None:
        for task in self.tasks:
            task.cancel()
        # Episodes still open when the stream ends are dropped (spec §5.1).
        self.tracker.on_close()

    async def _serve(self, request: env_v1.JoinRequest, context: _Request) -> None:
        self.service.begin()
        try:
            await self._answer(context, await self._respond(request, context))
        finally:
            self.service.end()

    async def _respond(self, request: env_v1.JoinRequest, context: _Request) -> env_v1.JoinResponse:
        kind, arm = _which(request, "kind")
        handlers: dict[str, Callable[[Any, _Request], Awaitable[env_v1.JoinResponse]]] = {
            "reset": self._reset,
            "step": self._step,
            "render": self._render,
            "configure": self._configure,
        }
        handler = handlers.get(kind)
        if handler is None:
            return _error(
                WireError(Code.UNSUPPORTED, "join request kind is unset or not supported")
            )
        timeout_ms = getattr(arm, "timeout_ms", 0)
        op = f"env.{kind}"
        if kind == "reset" and arm.env_indices and not self.backend.lanes_individually:
            op = "env.reset_subset"
        try:
            if not timeout_ms:
                return await handler(arm, context)
            # The deadline applies where the handler waits for the env (run_on_lane): the
            # wait ends with TIMEOUT while the late call keeps its lane thread, and nothing
            # after the wait (tracker included) runs for it. No extra task per request.
            when = asyncio.get_running_loop().time() + timeout_ms / 1000
            token = _DEADLINE.set((when, f"{op} timed out after {timeout_ms}ms"))
            try:
                return await handler(arm, context)
            finally:
                _DEADLINE.reset(token)
        except WireError as exc:
            return _error(exc)

    async def _answer(self, context: _Request, response: env_v1.JoinResponse) -> None:
        response.request_id = context.request_id
        encode_started = time.perf_counter_ns()
        body = encode_env_join_response(response)
        done = time.perf_counter_ns()
        tail = timing_fields(
            total_ns=max(0, done - context.started_ns - context.queue_ns),
            decode_ns=context.decode_ns,
            user_ns=context.user_ns,
            encode_ns=done - encode_started,
            queue_ns=context.queue_ns,
        )
        async with self.send_lock:
            await self.stream.send_message(body + tail)

    # ---------------------------------------------------------------- ops

    def _lanes(self, indices: Sequence[int]) -> list[int]:
        num = self.backend.num_lanes
        if not indices:
            return list(range(num))
        if any(index >= num for index in indices):
            raise WireError(
                Code.INVALID_ACTION, f"env_indices {list(indices)} out of range for {num} envs"
            )
        if len(set(indices)) != len(indices):
            raise WireError(Code.INVALID_ACTION, f"env_indices {list(indices)} has duplicates")
        return list(indices)

    async def _gather(
        self, context: _Request, submitted: int, calls: Sequence[Awaitable[LaneResult]]
    ) -> list[LaneResult]:
        outcomes: list[Any]
        if len(calls) == 1:
            # One lane: await it directly (gather costs a loop turn even when it is done).
            try:
                outcomes = [await calls[0]]
            except Exception as exc:
                outcomes = [exc]
        else:
            outcomes = await asyncio.gather(*calls, return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        results: list[LaneResult] = list(outcomes)
        context.note(submitted, results)
        return results

    async def _reset(self, request: env_v1.ResetRequest, context: _Request) -> env_v1.JoinResponse:
        lanes = self._lanes(request.env_indices)
        for name, values in (("seeds", request.seeds), ("episode_ids", request.episode_ids)):
            if request.env_indices and values and len(values) != len(lanes):
                raise WireError(
                    Code.INVALID_ACTION,
                    f"{name} has {len(values)} entries for {len(lanes)} env_indices",
                )
        options = meta_to_python(request.options) if request.options is not None else None
        backend = self.backend
        if isinstance(backend, VectorBackend):
            if request.env_indices:
                raise WireError(
                    Code.INTERNAL, "partial reset (env_indices) is not supported by this env"
                )
            self.service.ever_reset.update(lanes)
            batch, info, user_ns = await self.service.run_on_lane(
                0, backend.reset_call, list(request.seeds), options
            )
            context.user_ns += user_ns
        else:
            assert isinstance(backend, LaneBackend)
            self.service.ever_reset.update(lanes)
            seeds: list[int | None] = [
                request.seeds[i] if i < len(request.seeds) else None for i in range(len(lanes))
            ]
            results = await self._gather(
                context,
                time.perf_counter_ns(),
                [
                    self.service.run_on_lane(lane, backend.reset_call, lane, seed, options)
                    for lane, seed in zip(lanes, seeds, strict=True)
                ],
            )
            batch = self.service.gate.stack_observations([r.observation for r in results])
            info = merge_lane_infos([r.info for r in results])
        leaves, warnings = self.service.gate.encode_observations(batch, len(lanes))
        infos = infos_to_meta(info, warnings)
        self.tracker.on_reset(lanes, request.episode_ids, request.seeds)
        return env_v1.JoinResponse(
            reset=env_v1.ResetResponse(observation=spaces_v1.SpaceValue(leaves=leaves), infos=infos)
        )

    async def _step(self, request: env_v1.StepRequest, context: _Request) -> env_v1.JoinResponse:
        backend = self.backend
        if request.env_indices and not backend.lanes_individually:
            raise WireError(
                Code.UNSUPPORTED, "subset stepping (env_indices) is not supported by this env"
            )
        lanes = self._lanes(request.env_indices)
        gate = self.service.gate
        actions, action_warnings = gate.decode_actions(request.action, len(lanes))
        never = [lane for lane in lanes if lane not in self.service.ever_reset]
        if never and backend.lanes_individually:
            raise WireError(Code.NOT_READY, f"lane(s) {never} stepped before the first reset")
        episode_ids = list(request.episode_ids)
        if isinstance(backend, VectorBackend):
            (
                observation,
                rewards,
                terminated,
                truncated,
                info,
                user_ns,
            ) = await self.service.run_on_lane(0, backend.step_call, gate.writable(actions))
            context.user_ns += user_ns
            rewards_list = [float(r) for r in _lane_values(rewards, len(lanes), "rewards")]
            term = [bool(t) for t in _lane_values(terminated, len(lanes), "terminated")]
            trunc = [bool(t) for t in _lane_values(truncated, len(lanes), "truncated")]
            finals = [
                vector_final_info(info, lane, len(lanes)) if term[i] or trunc[i] else None
                for i, lane in enumerate(lanes)
            ]
            batch = observation
        else:
            assert isinstance(backend, LaneBackend)
            per_lane = gate.split_actions(actions, len(lanes))
            results = await self._gather(
                context,
                time.perf_counter_ns(),
                [
                    self.service.run_on_lane(lane, backend.step_call, lane, action)
                    for lane, action in zip(lanes, per_lane, strict=True)
                ],
            )
            rewards_list = [r.reward for r in results]
            term = [r.terminated for r in results]
            trunc = [r.truncated for r in results]
            finals = [r.info if (r.terminated or r.truncated) else None for r in results]
            batch = gate.stack_observations([r.observation for r in results])
            info = merge_lane_infos([r.info for r in results])
        leaves, warnings = gate.encode_observations(batch, len(lanes))
        infos = infos_to_meta(info, action_warnings + warnings)
        outcomes = [
            StepOutcome(
                lane,
                rewards_list[i],
                term[i],
                trunc[i],
                infos_to_meta(finals[i], []) if finals[i] is not None else None,
                _episode_id(episode_ids, i, lane, len(lanes), backend.num_lanes),
            )
            for i, lane in enumerate(lanes)
        ]
        completed = self.tracker.on_step(outcomes)
        return env_v1.JoinResponse(
            step=env_v1.StepResponse(
                observation=spaces_v1.SpaceValue(leaves=leaves),
                rewards=rewards_list,
                terminated_mask=bytes(term),
                truncated_mask=bytes(trunc),
                infos=infos,
                completed_episodes=completed,
                env_indices=list(request.env_indices),
            )
        )

    async def _render(
        self, request: env_v1.RenderRequest, context: _Request
    ) -> env_v1.JoinResponse:
        if len(request.env_indices) > 1:
            raise WireError(Code.UNSUPPORTED, "render of more than one env index is not supported")
        backend = self.backend
        started = time.perf_counter_ns()
        if isinstance(backend, VectorBackend):
            frame = await self.service.run_on_lane(0, backend.render_call)
        else:
            assert isinstance(backend, LaneBackend)
            lane = request.env_indices[0] if request.env_indices else 0
            if lane >= backend.num_lanes:
                raise WireError(
                    Code.INVALID_ACTION,
                    f"render env index {lane} out of range for {backend.num_lanes} envs",
                )
            frame = await self.service.run_on_lane(lane, backend.render_call, lane)
        context.user_ns += time.perf_counter_ns() - started
        png = encode_png(frame)
        if png is None:
            return env_v1.JoinResponse(render=env_v1.RenderResponse())
        return env_v1.JoinResponse(
            render=env_v1.RenderResponse(frame=png, format=env_v1.RenderFormat.PNG)
        )

    async def _configure(
        self, request: env_v1.ConfigureEnvRequest, context: _Request
    ) -> env_v1.JoinResponse:
        edition = request.selected_workflow_edition.strip()
        if edition and edition not in SUPPORTED_WORKFLOW_EDITIONS:
            raise WireError(
                Code.INVALID_ACTION,
                f"workflow edition {edition!r} is not supported by this env "
                f"(supported: {', '.join(SUPPORTED_WORKFLOW_EDITIONS)})",
                recoverable=False,
            )
        return env_v1.JoinResponse(configure=env_v1.ConfigureEnvResponse())

    def _close(self) -> env_v1.JoinResponse:
        return env_v1.JoinResponse(
            close=env_v1.CloseEnvsResponse(final_episodes=self.tracker.on_close())
        )


def _error(exc: WireError) -> env_v1.JoinResponse:
    return env_v1.JoinResponse(error=exc.to_proto())


def _swallow(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


def _with_deadline(waiter: asyncio.Future[Any], when: float, message: str) -> asyncio.Future[Any]:
    """``waiter``'s outcome, or WireError TIMEOUT at loop time ``when`` (the late result is
    then dropped; ``waiter`` itself is never cancelled, it keeps its lane thread)."""
    loop = waiter.get_loop()
    outer: asyncio.Future[Any] = loop.create_future()

    def expire() -> None:
        if not outer.done():
            outer.set_exception(WireError(Code.TIMEOUT, message))

    timer = loop.call_at(when, expire)

    def settle(inner: asyncio.Future[Any]) -> None:
        timer.cancel()
        if outer.done():
            _swallow(inner)
        elif inner.cancelled():
            outer.cancel()
        elif (error := inner.exception()) is not None:
            outer.set_exception(error)
        else:
            outer.set_result(inner.result())

    waiter.add_done_callback(settle)
    return outer


def _episode_id(ids: Sequence[str], position: int, lane: int, count: int, width: int) -> str:
    # Real runtimes send full-width ids; accept ids aligned with env_indices as well.
    if len(ids) == width:
        return ids[lane]
    if len(ids) == count:
        return ids[position]
    return ""


def _lane_values(values: Any, n: int, what: str) -> list[Any]:
    listed: list[Any] = np.asarray(values).reshape(-1).tolist()
    if len(listed) != n:
        raise WireError(Code.INTERNAL, f"env returned {len(listed)} {what} for {n} envs")
    return listed


# -------------------------------------------------------------------------------- trio side

AutoresetName = Literal["next-step", "disabled"]


def _autoreset_mode(value: AutoresetName | None) -> core_v1.AutoresetMode | None:
    if value is None:
        return None
    modes = {
        "next-step": core_v1.AutoresetMode.NEXT_STEP,
        "disabled": core_v1.AutoresetMode.DISABLED,
    }
    try:
        return modes[value]
    except KeyError:
        raise ValueError(f"autoreset must be 'next-step' or 'disabled', got {value!r}") from None


def _remote_shutdown_env() -> bool:
    value = os.environ.get("RLMESH_ALLOW_REMOTE_SHUTDOWN", "").strip().lower()
    return value in ("1", "true")


async def serve_env(
    env_or_factory: Any,
    address: str = "127.0.0.1:0",
    *,
    num_envs: int | None = None,
    autoreset: AutoresetName | None = None,
    token: str | None = None,
    allow_remote_shutdown: bool = False,
    idle_timeout: float | None = None,
    drain_timeout: float | None = 5.0,
    validation: ValidationPolicy | None = None,
    max_message_size: int = MAX_MESSAGE_SIZE,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve an env over rlmesh-wire-v1 until cancelled (or shut down remotely / when idle).

    Follows trio's ``nursery.start`` protocol: once the listener is bound, the bound
    address (``127.0.0.1:PORT`` for TCP, ``unix:///path`` for a Unix socket) is reported
    through ``task_status``.

    Args:
        env_or_factory: a Gymnasium env (one lane), a Gymnasium vector env (lockstep), a list
            of envs (one lane each), or a callable returning an env (``num_envs`` lanes).
            Lane endpoints advertise ``subset_step``: each lane resets and steps on its own and
            requests for different lanes run concurrently.
        address: bind address (``host:port``, ``tcp://host:port``, a bare port, or
            ``unix:///path``); port 0 picks a free port.
        num_envs: lane count for a factory (must agree with the env otherwise).
        autoreset: declare ``"next-step"`` or ``"disabled"`` for a vector env (default: read
            from its ``metadata["autoreset_mode"]``).
        token: require this exact ``authorization`` header on every call.
        allow_remote_shutdown: accept the Shutdown RPC (also enabled by
            ``RLMESH_ALLOW_REMOTE_SHUTDOWN=1``).
        idle_timeout: stop after this many seconds without a Join request in progress.
        drain_timeout: on stop, wait at most this long for requests in progress.
        validation: conformance policy for actions and observations: ``"warn"`` (range
            deviations reported once in infos), ``"strict"`` (rejected) or ``"off"``.
            ``None`` reads ``RLMESH_VALIDATION_POLICY`` as RLMesh's servers do (default warn).
        max_message_size: largest request accepted, in bytes.

    Example::

        async with trio.open_nursery() as nursery:
            address = await nursery.start(serve_env, gymnasium.make("CartPole-v1"))
    """
    mode = _autoreset_mode(autoreset)
    if validation is None:
        validation = validation_policy_from_env()
    if validation not in ("warn", "strict", "off"):
        raise ValueError(f"validation must be 'warn', 'strict' or 'off', got {validation!r}")
    bind = parse_bind_address(address)
    backend = await trio.to_thread.run_sync(
        lambda: make_backend(env_or_factory, num_envs=num_envs, autoreset=mode)
    )
    contract = backend.contract()
    stop = trio.Event()
    trio_token = trio.lowlevel.current_trio_token()

    def request_stop(reason: str) -> None:
        del reason
        with contextlib.suppress(trio.RunFinishedError):
            trio_token.run_sync_soon(stop.set)

    executors = [
        concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"trio-rlmesh-env-lane{i}")
        for i in range(backend.num_lanes if backend.lanes_individually else 1)
    ]
    service = _EnvService(
        backend=backend,
        contract=contract,
        gate=ValueGate(backend.observation_space, backend.action_space, validation),
        token=token,
        allow_remote_shutdown=allow_remote_shutdown or _remote_shutdown_env(),
        request_stop=request_stop,
        executors=executors,
    )
    try:
        async with open_portal() as portal:
            bound = await portal.run(service.start, bind, max_message_size)
            try:
                async with trio.open_nursery() as nursery:
                    if idle_timeout is not None:
                        nursery.start_soon(portal.run, service.watch_idle, idle_timeout)
                    task_status.started(bound)
                    await stop.wait()
                    nursery.cancel_scope.cancel()
            finally:
                # service.stop bounds itself; the deadline is a backstop against a wedged loop.
                with trio.CancelScope(shield=True) as cleanup:
                    if drain_timeout is not None:
                        cleanup.deadline = trio.current_time() + drain_timeout + 2 * CLOSE_GRACE
                    await portal.run(service.stop, drain_timeout)
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(CLOSE_TIMEOUT):
            await trio.to_thread.run_sync(backend.close_call, abandon_on_cancel=True)
        for executor in executors:
            executor.shutdown(wait=False, cancel_futures=True)
