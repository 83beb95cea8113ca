"""``serve_env``: serve a Gymnasium env (or several) as an rlmesh-wire-v1 EnvService.

Theory of operation:

* Written once over the backend interface, in trio, for both backends; the lifecycle,
  token, health, draining and the Join receive loop come from :mod:`._server`.
* User env code runs in a worker per lane by default, so a slow or hung env stalls
  neither health checks, nor other lanes, nor stopping; a lane's calls run in arrival
  order. ``user_code="inline"`` runs them on the event loop instead (faster for envs
  that are known to be quick; a hung env then hangs the server).
* One Join at a time. A lockstep (vector) env handles the stream's requests one after the
  other. A lane endpoint (one scalar env per lane, ``subset_step``) runs every
  reset/step/render as its own task and answers in completion order (replies carry the
  ``request_id``).
* A request with ``timeout_ms`` is answered TIMEOUT when the deadline passes; the late
  call keeps its lane's worker (the lane's next call waits for it) and its result is
  dropped without touching the episode tracker.
* After answering a non-recoverable in-band error, the server ends the Join stream (with
  OK, as RLMesh 0.1.0 does): the session cannot go on.
* Every response gets the 0.1.0 timing fields. The body is serialized once; the timing
  fields are serialized separately and appended, which protobuf reads as one message.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, Literal

import attrs
import betterproto2
import numpy as np
import trio

from ...protocol import (
    CAP_SUBSET_STEP,
    CAPABILITY_TRUE,
    COMPONENT_ENV,
    SUPPORTED_WORKFLOW_EDITIONS,
    core_v1,
    env_v1,
    meta_to_python,
    spaces_v1,
)
from ...protocol._fastwire import encode_env_join_response, encode_env_timing_tail
from ...runtime._worker import UserCode, WorkerUnavailable, check_user_code, new_worker
from ._backend import BackendName, ServerCall, check_backend
from ._codec import encode
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
from ._handshake import ENV_HANDSHAKE, ENV_JOIN, ENV_SHUTDOWN, handshake_response
from ._server import JoinSession, ServerCore, run_server
from ._settings import DEFAULT_SETTINGS, GrpcSettings
from ._status import GrpcError, Status

__all__ = ["serve_env"]

logger = logging.getLogger("trio_rlmesh.transports.grpc")

Code = env_v1.EnvErrorCode

JOIN_BUSY_MESSAGE: Final = (
    "environment already has an active Join session; only one client may be connected at a time"
)
SHUTDOWN_DISABLED_MESSAGE: Final = "remote shutdown is disabled for this environment endpoint"
CLOSE_TIMEOUT: Final = 5.0
"""Seconds the env's own ``close()`` may take when the server stops."""

AutoresetName = Literal["next-step", "disabled"]


class _Lanes:
    """Runs each lane's env calls in order, on that lane's worker (see ``runtime._worker``)."""

    def __init__(self, count: int, user_code: UserCode, env_id: str) -> None:
        self.inline = user_code == "inline"
        self._workers = [
            new_worker(user_code, f"env {env_id} lane {lane}") for lane in range(count)
        ]

    async def run(self, lane: int, op: str, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return await self._workers[lane].run(op, fn, *args)
        except WorkerUnavailable as exc:
            # The lane is still inside a call its caller gave up on (or is closed): the
            # request is refused at once, naming the stuck operation.
            raise WireError(Code.BUSY, str(exc)) from None

    @property
    def stuck(self) -> list[int]:
        """Lanes whose worker is still inside an abandoned call."""
        return [lane for lane, w in enumerate(self._workers) if w.stuck_operation is not None]

    async def aclose(self, close: Callable[[], None]) -> None:
        """Close the env on lane 0's worker (bounded), unless a lane is stuck."""
        stuck = self.stuck
        if stuck:
            # Closing an env from another thread while its own call is still running is
            # unsafe for most simulators; the abandoned call's worker dies with the process.
            logger.warning(
                "not closing the env: lane(s) %s are still inside an abandoned call", stuck
            )
            return
        with trio.move_on_after(CLOSE_TIMEOUT) as scope:
            try:
                await self._workers[0].aclose("env.close", close)
            except WorkerUnavailable as exc:
                logger.warning("not closing the env: %s", exc)
            except Exception as exc:
                logger.warning("the env's close() failed: %s: %s", type(exc).__name__, exc)
        if scope.cancelled_caught:
            logger.warning("the env's close() took longer than %g s; abandoned", CLOSE_TIMEOUT)
        for worker in self._workers[1:]:
            with contextlib.suppress(Exception):
                await worker.aclose("env.close", lambda: None)


@attrs.define(eq=False)
class _Request:
    """One Join request in progress, and the timings its response reports."""

    request_id: str
    started_ns: int
    decode_ns: int
    user_ns: int = 0
    queue_ns: int = 0

    def note(self, submitted_ns: int, results: Sequence[LaneResult]) -> None:
        self.user_ns += max((r.user_ns for r in results), default=0)
        self.queue_ns += max((max(0, r.started_ns - submitted_ns) for r in results), default=0)


@attrs.define(eq=False)
class _EnvService:
    """The EnvService: Handshake, Join (one at a time) and Shutdown."""

    core: ServerCore
    backend: EnvBackend
    contract: core_v1.EnvContract
    gate: ValueGate
    lanes: _Lanes
    join_active: bool = False
    ever_reset: set[int] = attrs.field(factory=set)

    @property
    def capabilities(self) -> dict[str, str]:
        return {CAP_SUBSET_STEP: CAPABILITY_TRUE} if self.backend.lanes_individually else {}

    def handlers(self) -> dict[str, Callable[[ServerCall], Awaitable[None]]]:
        return {ENV_HANDSHAKE: self.handshake, ENV_JOIN: self.join, ENV_SHUTDOWN: self.shutdown}

    async def handshake(self, call: ServerCall) -> None:
        request = await self.core.receive_base(call, env_v1.HandshakeRequest, "handshake")
        base = handshake_response(COMPONENT_ENV, request, capabilities=self.capabilities)
        response = env_v1.HandshakeResponse(base=base)
        if base.compatible:
            response.env_contract = self.contract
        await call.send_message(encode(response))

    async def shutdown(self, call: ServerCall) -> None:
        await self.core.answer_shutdown(call, env_v1.ShutdownRequest, env_v1.ShutdownResponse)

    async def join(self, call: ServerCall) -> None:
        self.core.authenticate(call)
        self.core.refuse_if_draining()
        if self.join_active:
            raise GrpcError(Status.FAILED_PRECONDITION, JOIN_BUSY_MESSAGE)
        self.join_active = True
        session = _EnvJoin(self, call)
        try:
            await session.run()
        finally:
            # Episodes still open when the stream ends are dropped (spec §5.1).
            session.tracker.on_close()
            self.join_active = False


class _EnvJoin(JoinSession[env_v1.JoinRequest]):
    """One Join stream: every request answered exactly once."""

    request_type = env_v1.JoinRequest

    def __init__(self, service: _EnvService, call: ServerCall) -> None:
        super().__init__(service.core, call)
        self.service = service
        backend = service.backend
        self.backend = backend
        self.gate = service.gate
        self.tracker = EpisodeTracker(
            backend.num_lanes, backend.autoreset is core_v1.AutoresetMode.NEXT_STEP
        )
        self.concurrent = backend.lanes_individually and backend.num_lanes > 1
        """Requests for different lanes run concurrently (one lane's run in order anyway)."""

    async def handle(self, request: env_v1.JoinRequest, received_ns: int, decode_ns: int) -> None:
        context = _Request(request.request_id, received_ns, decode_ns)
        kind, _ = betterproto2.which_one_of(request, "kind")
        if kind == "close":
            await self.wait_tasks()
            await self._answer(context, self._close())
            self.end_session()
        elif self.concurrent and kind in ("reset", "step", "render"):
            self.spawn(self._serve, request, context)
        else:
            await self.inline(self._serve, request, context)

    async def _serve(self, request: env_v1.JoinRequest, context: _Request) -> None:
        response = await self._respond(request, context)
        await self._answer(context, response)
        if response.error is not None and not response.error.is_recoverable:
            # As RLMesh does: the session cannot go on after a non-recoverable error.
            self.end_session()

    async def _respond(self, request: env_v1.JoinRequest, context: _Request) -> env_v1.JoinResponse:
        kind, arm = betterproto2.which_one_of(request, "kind")
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
        if (
            kind == "reset"
            and arm is not None
            and arm.env_indices
            and not self.backend.lanes_individually
        ):
            op = "env.reset_subset"
        try:
            if not timeout_ms or self.service.lanes.inline:
                # Inline env code cannot be interrupted, so no deadline scope for it.
                return await handler(arm, context)
            # The deadline covers the wait for the env: when it passes, the late call keeps
            # its lane's worker and nothing after the wait (tracker included) runs for it.
            with trio.move_on_after(timeout_ms / 1000):
                return await handler(arm, context)
            raise WireError(Code.TIMEOUT, f"{op} timed out after {timeout_ms}ms")
        except WireError as exc:
            return _error(exc)

    async def _answer(self, context: _Request, response: env_v1.JoinResponse) -> None:
        response.request_id = context.request_id
        encode_started = time.perf_counter_ns()
        body = encode_env_join_response(response)
        done = time.perf_counter_ns()
        tail = encode_env_timing_tail(
            total_ns=done - context.started_ns - context.queue_ns,
            decode_ns=context.decode_ns,
            user_ns=context.user_ns,
            encode_ns=done - encode_started,
            queue_ns=context.queue_ns,
        )
        await self.call.send_message(body + tail)

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

    async def _on_lanes(
        self,
        context: _Request,
        op: str,
        fn: Callable[..., LaneResult],
        calls: Sequence[tuple[Any, ...]],
    ) -> list[LaneResult]:
        """``fn(*args)`` on each lane named first in ``args``, concurrently; the results in
        order. The first failure (in lane order) is raised once every call has ended."""
        submitted = time.perf_counter_ns()
        lanes = self.service.lanes
        outcomes: list[Any] = [None] * len(calls)

        async def one(index: int, args: tuple[Any, ...]) -> None:
            try:
                outcomes[index] = await lanes.run(args[0], op, fn, *args)
            except WireError as exc:
                outcomes[index] = exc

        if len(calls) == 1:
            await one(0, calls[0])
        else:
            async with trio.open_nursery() as nursery:
                for index, args in enumerate(calls):
                    nursery.start_soon(one, index, args)
        for item in outcomes:
            if isinstance(item, WireError):
                raise item
        results: list[LaneResult] = outcomes
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
        self.service.ever_reset.update(lanes)
        if isinstance(backend, VectorBackend):
            if request.env_indices:
                raise WireError(
                    Code.INTERNAL, "partial reset (env_indices) is not supported by this env"
                )
            batch, info, user_ns = await self.service.lanes.run(
                0, "env.reset", backend.reset_call, list(request.seeds), options
            )
            context.user_ns += user_ns
        else:
            assert isinstance(backend, LaneBackend)
            seeds: list[int | None] = [
                request.seeds[i] if i < len(request.seeds) else None for i in range(len(lanes))
            ]
            results = await self._on_lanes(
                context,
                "env.reset",
                backend.reset_call,
                [(lane, seed, options) for lane, seed in zip(lanes, seeds, strict=True)],
            )
            batch = self.gate.stack_observations([r.observation for r in results])
            info = merge_lane_infos([r.info for r in results])
        leaves, warnings = self.gate.encode_observations(batch, len(lanes))
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
        gate = self.gate
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
            ) = await self.service.lanes.run(
                0, "env.step", backend.step_call, gate.writable(actions)
            )
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
            results = await self._on_lanes(
                context,
                "env.step",
                backend.step_call,
                [(lane, action) for lane, action in zip(lanes, per_lane, strict=True)],
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
            frame = await self.service.lanes.run(0, "env.render", backend.render_call)
        else:
            assert isinstance(backend, LaneBackend)
            lane = request.env_indices[0] if request.env_indices else 0
            if lane >= backend.num_lanes:
                raise WireError(
                    Code.INVALID_ACTION,
                    f"render env index {lane} out of range for {backend.num_lanes} envs",
                )
            frame = await self.service.lanes.run(lane, "env.render", backend.render_call, lane)
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
    user_code: UserCode = "thread",
    backend: BackendName = "trio",
    settings: GrpcSettings = DEFAULT_SETTINGS,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve an env over rlmesh-wire-v1 until cancelled (or shut down remotely / when idle).

    Follows trio's ``nursery.start`` protocol: once the listener is bound, the bound
    address (``127.0.0.1:PORT`` for TCP, ``unix:///path`` for a Unix socket,
    ``memory://name`` in memory) is reported through ``task_status``.

    Stopping (cancellation, remote Shutdown or the idle timeout) drains: requests in
    progress get their answers for at most ``drain_timeout`` seconds, then every open
    call ends with UNAVAILABLE and every connection closes, even if env code is stuck
    (its worker is abandoned). The env's ``close()`` then gets at most 5 s.

    Args:
        env_or_factory: a Gymnasium env (one lane), a Gymnasium vector env (lockstep), a list
            of envs (one lane each), or a callable returning an env (``num_envs`` lanes).
            Lane endpoints advertise ``subset_step``: each lane resets and steps on its own and
            requests for different lanes run concurrently.
        address: bind address (``host:port``, ``tcp://host:port``, a bare port,
            ``unix:///path`` or ``memory://name``); port 0 picks a free port.
        num_envs: lane count for a factory (must agree with the env otherwise).
        autoreset: declare ``"next-step"`` or ``"disabled"`` for a vector env (default: read
            from its ``metadata["autoreset_mode"]``).
        token: require this exact ``authorization`` header on every call (not empty).
        allow_remote_shutdown: accept the Shutdown RPC (also enabled by
            ``RLMESH_ALLOW_REMOTE_SHUTDOWN=1``).
        idle_timeout: stop after this many seconds without a Join request in progress.
        drain_timeout: on stop, wait at most this long for requests in progress.
        validation: conformance policy for actions and observations: ``"warn"`` (range
            deviations reported once in infos), ``"strict"`` (rejected) or ``"off"``.
            ``None`` reads ``RLMESH_VALIDATION_POLICY`` as RLMesh's servers do (default warn).
        user_code: ``"thread"`` (default): env code runs on one worker thread per lane, so
            a slow lane stalls nothing else and a stuck one can be abandoned at stop;
            ``"inline"``: on the event loop, faster for quick envs, but a hung step hangs
            the server.
        backend: ``"trio"`` (default) or ``"grpclib"``.
        settings: message size limit, keepalive and flow-control windows.

    Example::

        async with trio.open_nursery() as nursery:
            address = await nursery.start(serve_env, gymnasium.make("CartPole-v1"))
    """
    check_backend(backend)
    if token is not None and not token:
        raise ValueError("token must not be empty (pass None to serve without one)")
    user_code = check_user_code(user_code)
    mode = _autoreset_mode(autoreset)
    if validation is None:
        validation = validation_policy_from_env()
    if validation not in ("warn", "strict", "off"):
        raise ValueError(f"validation must be 'warn', 'strict' or 'off', got {validation!r}")
    env_backend = await trio.to_thread.run_sync(
        lambda: make_backend(env_or_factory, num_envs=num_envs, autoreset=mode)
    )
    lanes = _Lanes(
        env_backend.num_lanes if env_backend.lanes_individually else 1,
        user_code,
        env_backend.env_id,
    )
    core = ServerCore(
        component="env",
        what="env",
        token=token,
        allow_remote_shutdown=allow_remote_shutdown or _remote_shutdown_env(),
        shutdown_disabled_message=SHUTDOWN_DISABLED_MESSAGE,
    )
    service = _EnvService(
        core=core,
        backend=env_backend,
        contract=env_backend.contract(),
        gate=ValueGate(env_backend.observation_space, env_backend.action_space, validation),
        lanes=lanes,
    )
    try:
        await run_server(
            core,
            service.handlers(),
            address=address,
            backend=backend,
            settings=settings,
            drain_timeout=drain_timeout,
            idle_timeout=idle_timeout,
            task_status=task_status,
        )
    finally:
        with trio.CancelScope(shield=True):
            await lanes.aclose(env_backend.close_call)
