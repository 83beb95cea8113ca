"""A trio client for a remote env endpoint (``rlmesh.env.v1.EnvService``).

It behaves like the 0.1.0 runtime's env client on the wire: a unary Handshake
(component ``rlmesh-env``, empty capabilities, our editions and the preferred one), then
one Join stream opened lazily on the first request, whose first message is ConfigureEnv
with the negotiated edition. Requests carry ids ``grpc-req-<n>`` (one counter per stream;
ConfigureEnv is ``grpc-req-1``) and are multiplexed by :class:`~._join.JoinMux`, so any
number may be in flight (a lane endpoint answers out of order).

Deadlines are enforced here, once, on the client's own I/O: a request's ``timeout_ms`` goes
on the wire and the multiplexer's watchdog ends the call at the same instant (the call's
start plus ``timeout_ms``, no grace). The server's own TIMEOUT answer (its clock started
when the request arrived, so it is due no sooner) and the watchdog's expiry are the same
error, :class:`RemoteEnvTimeout`, built by :meth:`EnvClient._timed_out`; whichever comes
first is raised. Errors become :mod:`trio_rlmesh` errors in :meth:`EnvClient._call` and
nowhere else.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import math
from collections.abc import AsyncIterator, Iterable
from typing import Any, Final, TypeVar

import betterproto2
import trio

from ..._errors import EnvError, Error, OperationTimeout, ProtocolError, SpecError, TransportError
from ..._nursery import background_nursery
from ..._timeouts import CLOSE_TIMEOUT, fmt_seconds
from ...protocol import SUPPORTED_WORKFLOW_EDITIONS, core_v1, env_v1
from ...protocol._internal import (
    CAP_SUBSET_STEP,
    has_capability,
)
from ...runtime import EndpointTimings, EnvResetResult, EnvStepResult, RuntimeEnv
from ._backend import BackendName, Channel
from ._codec import decode, encode
from ._errors import map_transport_error
from ._handshake import (
    ENV_JOIN,
    ENV_SHUTDOWN,
    auth_metadata,
    connecting,
    handshake,
    refused,
)
from ._join import JoinMux, JoinStatistics
from ._registry import get_backend
from ._settings import DEFAULT_SETTINGS, GrpcSettings
from ._status import GrpcError, Status

__all__ = [
    "EnvClient",
    "EnvClientRuntimeEnv",
    "EnvClientStatistics",
    "RemoteEnvError",
    "RemoteEnvTimeout",
    "open_env_client",
]

BUSY_RETRY_SECONDS: Final = 2.0
"""How long a Join refused as busy is retried: rlmesh frees its single slot asynchronously."""

_BUSY_FIRST_BACKOFF: Final = 0.02
_BUSY_MAX_BACKOFF: Final = 0.25


_CLOSE_REASON: Final = "client close"

_Timed = TypeVar("_Timed", env_v1.ResetRequest, env_v1.StepRequest)

EnvClientStatistics = JoinStatistics
"""A snapshot of one client's Join traffic (requests sent, replies, stale, in flight)."""


class RemoteEnvError(EnvError):
    """An in-band ``EnvError`` from an env server.

    ``code`` is the EnvErrorCode name (``"INVALID_ACTION"``, ``"INTERNAL"``, ...);
    ``interrupted_episodes`` lists the episodes the failure ended, if the server said.
    """

    def __init__(
        self,
        message: str,
        *,
        interrupted_episodes: Iterable[env_v1.EpisodeMetadata] = (),
        debug_info: str = "",
        **kwargs: Any,
    ) -> None:
        super().__init__(message, **kwargs)
        self.interrupted_episodes = list(interrupted_episodes)
        self.debug_info = debug_info


class RemoteEnvTimeout(RemoteEnvError, OperationTimeout):
    """The request outlived its ``timeout_ms``: the server answered TIMEOUT, or the client's
    own watchdog ended the call at the same deadline first (the same error either way).

    Both an :class:`~trio_rlmesh.OperationTimeout` (``code == "TIMEOUT"``) and a
    :class:`RemoteEnvError`. Recoverable unless the server said otherwise, as TIMEOUT is in
    the wire's table.
    """

    default_recoverable = True


def _error_code_name(code: Any) -> str:
    try:
        name = env_v1.EnvErrorCode(int(code)).name
    except ValueError:
        return "UNSPECIFIED"
    return name if name and name.isidentifier() else "UNSPECIFIED"


def _check_contract(contract: core_v1.EnvContract | None, address: str) -> core_v1.EnvContract:
    spec = contract.spec if contract is not None else None
    if contract is None or spec is None:
        raise refused("env", address, "the answer carries no env contract")
    if spec.observation_space is None or spec.action_space is None:
        missing = "observation" if spec.observation_space is None else "action"
        raise refused("env", address, f"the env contract has no {missing} space")
    return contract


class EnvClient:
    """A connected env endpoint; get one from :func:`open_env_client`.

    Each request method takes a protocol message and returns the endpoint's reply with
    its timings and sizes. Several requests may run concurrently (for a ``subset_step``
    endpoint, one per lane).

    Attributes:
        address: the endpoint's display address (``tcp://host:port``, ``unix:///path``).
        contract: the env contract from the handshake (spaces, lanes, render, autoreset).
        capabilities: capabilities the server advertised.
        workflow_edition: the highest edition both sides support; sent in ConfigureEnv.
        server_info: the server's PeerInfo.
        request_timeout: default per-request deadline in seconds (``None`` = none).
    """

    def __init__(
        self,
        channel: Channel,
        *,
        address: str,
        contract: core_v1.EnvContract,
        capabilities: dict[str, str],
        workflow_edition: str,
        server_info: core_v1.PeerInfo,
        metadata: dict[str, str] | None,
        request_timeout: float | None = None,
        nursery: trio.Nursery | None = None,
    ) -> None:
        self._channel = channel
        self._nursery = nursery
        """Where the Join stream's deadline watchdog runs (requests with a timeout need it)."""
        self._metadata = metadata
        self.address = address
        self.contract = contract
        self.capabilities = capabilities
        self.workflow_edition = workflow_edition
        self.server_info = server_info
        self.request_timeout = request_timeout
        self._mux: JoinMux[env_v1.JoinResponse] | None = None
        self._opening = trio.Lock()
        self._ids: itertools.count[int] = itertools.count(1)
        self._closed = False

    @property
    def num_envs(self) -> int:
        """Lanes behind the endpoint (a reported 0 counts as 1)."""
        return max(1, self.contract.num_envs)

    @property
    def subset_step(self) -> bool:
        """Whether the endpoint steps and resets single lanes (``subset_step`` capability)."""
        return has_capability(self.capabilities, CAP_SUBSET_STEP)

    def statistics(self) -> EnvClientStatistics:
        """Counters of the Join traffic so far."""
        if self._mux is None:
            return EnvClientStatistics(0, 0, 0, 0)
        return self._mux.statistics()

    # ------------------------------------------------------------------ the Join stream

    async def _join(self) -> JoinMux[env_v1.JoinResponse]:
        mux = self._mux
        if mux is not None:
            return mux
        async with self._opening:
            if self._mux is None:
                self._mux = await self._open_join()
            return self._mux

    async def _open_join(self) -> JoinMux[env_v1.JoinResponse]:
        """Open the Join stream and configure it, retrying while the env is busy."""
        give_up = trio.current_time() + BUSY_RETRY_SECONDS
        backoff = _BUSY_FIRST_BACKOFF
        while True:
            try:
                return await self._open_join_once()
            except GrpcError as exc:
                if exc.status is not Status.FAILED_PRECONDITION or trio.current_time() >= give_up:
                    raise
            await trio.sleep(min(backoff, max(0.0, give_up - trio.current_time())))
            backoff = min(backoff * 2, _BUSY_MAX_BACKOFF)

    async def _open_join_once(self) -> JoinMux[env_v1.JoinResponse]:
        self._ids = itertools.count(1)
        call = await self._channel.open_call(ENV_JOIN, self._metadata)
        mux: JoinMux[env_v1.JoinResponse] = JoinMux(
            call, lambda data: decode(env_v1.JoinResponse, data), _request_id, self._nursery
        )
        mux.start()
        # ConfigureEnv goes first, as the 0.1.0 runtime sends it. Its reply also proves
        # the server accepted the stream (a busy or unauthorised Join ends with a status).
        configure = env_v1.JoinRequest(
            configure=env_v1.ConfigureEnvRequest(selected_workflow_edition=self.workflow_edition)
        )
        try:
            reply, _, _ = await self._roundtrip(mux, configure)
        except BaseException:
            await mux.aclose()
            raise
        kind, _ = betterproto2.which_one_of(reply, "kind")
        if kind == "configure":
            return mux
        await mux.aclose()
        if kind == "error" and reply.error is not None:
            code = _error_code_name(reply.error.code)
            raise SpecError(
                f"the env at {self.address} rejected workflow edition "
                f"{self.workflow_edition!r} (ConfigureEnv): {code}: {reply.error.message}",
                code=code,
            )
        raise ProtocolError(
            f"the env at {self.address} answered ConfigureEnv with {kind or 'nothing'!r}"
        )

    async def _roundtrip(
        self,
        mux: JoinMux[env_v1.JoinResponse],
        request: env_v1.JoinRequest,
        *,
        end: bool = False,
        deadline: float = math.inf,
    ) -> tuple[env_v1.JoinResponse, int, int]:
        request_id = f"grpc-req-{next(self._ids)}"
        request.request_id = request_id
        data = encode(request)
        reply, size = await mux.request(request_id, data, end=end, deadline=deadline)
        return reply, len(data), size

    # ------------------------------------------------------------------ requests

    def _deadline(self, own_ms: int, timeout: float | None) -> tuple[int, float | None]:
        """The ``timeout_ms`` to send and the local timer, from the request or the defaults."""
        seconds = timeout if timeout is not None else self.request_timeout
        if own_ms > 0:
            wire_ms = own_ms
            seconds = own_ms / 1000 if timeout is None else seconds
        elif seconds is not None and math.isfinite(seconds):
            wire_ms = max(1, math.ceil(seconds * 1000))
        else:
            wire_ms, seconds = 0, None
        return wire_ms, seconds

    def _with_deadline(self, request: _Timed, timeout: float | None) -> tuple[_Timed, float | None]:
        """``request`` carrying the ``timeout_ms`` to send (a copy if that changes it: the
        caller's object is never modified), and the local timer."""
        wire_ms, local = self._deadline(request.timeout_ms, timeout)
        if wire_ms != request.timeout_ms:
            request = copy.copy(request)
            request.timeout_ms = wire_ms
        return request, local

    async def _call(
        self,
        request: env_v1.JoinRequest,
        *,
        operation: str,
        expected: str,
        timeout: float | None,  # noqa: ASYNC109 - also goes on the wire as timeout_ms
        step: int | None,
        lane: int | None,
    ) -> tuple[env_v1.JoinResponse, int, int]:
        context: dict[str, Any] = {
            "operation": operation,
            "address": self.address,
            "step": step,
            "lane": lane,
        }
        if self._closed:
            raise TransportError(
                f"{operation} on {self.address}: the env client is closed", **context
            )
        deadline = math.inf
        if timeout is not None:
            deadline = trio.current_time() + timeout
        try:
            mux = self._mux
            if mux is None:
                with trio.CancelScope(deadline=deadline) as scope:
                    mux = await self._join()
                if scope.cancelled_caught:
                    raise trio.TooSlowError
                assert mux is not None
            # The multiplexer's watchdog enforces the deadline: no cancel scope per request.
            response, sent, received = await self._roundtrip(mux, request, deadline=deadline)
        except trio.TooSlowError:
            raise self._timed_out(context, timeout) from None
        except GrpcError as exc:
            if exc.status is Status.FAILED_PRECONDITION:
                raise TransportError(
                    f"{operation}: the env at {self.address} already has a client "
                    f"(its Join was refused for {BUSY_RETRY_SECONDS:g} s: {exc.message}); "
                    "an env endpoint serves one client at a time",
                    code=exc.status.name,
                    **context,
                ) from exc
            raise self._transport_error(exc, context) from exc
        except Error as exc:
            raise exc.with_context(**context) from None
        except Exception as exc:
            raise self._transport_error(exc, context) from exc
        kind, _ = betterproto2.which_one_of(response, "kind")
        if kind == "error":
            raise self._env_error(response.error, context, timeout)
        if kind != expected:
            raise ProtocolError(
                f"{operation} on {self.address}: expected a {expected!r} reply to "
                f"{response.request_id}, got {kind or 'an empty reply'!r}",
                **context,
            )
        return response, sent, received

    def _transport_error(self, exc: BaseException, context: dict[str, Any]) -> Error:
        return map_transport_error(exc, token_sent=self._metadata is not None, **context)

    def _env_error(
        self,
        error: env_v1.EnvError | None,
        context: dict[str, Any],
        timeout: float | None = None,
    ) -> RemoteEnvError:
        assert error is not None
        code = _error_code_name(error.code)
        message = f"{context['operation']} failed on {self.address}: {code}: {error.message}"
        kwargs: dict[str, Any] = {
            "recoverable": error.is_recoverable,
            "code": code,
            "interrupted_episodes": error.interrupted_episodes,
            "debug_info": error.debug_info,
            **context,
        }
        if code == "TIMEOUT":
            return self._timed_out(context, timeout, error)
        return RemoteEnvError(message, **kwargs)

    def _timed_out(
        self,
        context: dict[str, Any],
        timeout: float | None,
        answer: env_v1.EnvError | None = None,
    ) -> RemoteEnvTimeout:
        """The one error of a request past its deadline, whether the watchdog saw it first
        or the server's TIMEOUT ``answer`` (whose episodes and debug text it keeps)."""
        operation = context["operation"]
        kwargs: dict[str, Any] = {"code": "TIMEOUT", "timeout": timeout, **context}
        if answer is not None:
            kwargs.update(
                recoverable=answer.is_recoverable,
                interrupted_episodes=answer.interrupted_episodes,
                debug_info=answer.debug_info,
            )
        after = "" if timeout is None else f" after {fmt_seconds(timeout)}"
        return RemoteEnvTimeout(
            f"{operation} on {self.address} timed out{after}; "
            "give the request a longer timeout (RuntimeLimits for a run) if it needs longer",
            **kwargs,
        )

    async def reset(
        self,
        request: env_v1.ResetRequest | None = None,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - also goes on the wire as timeout_ms
        step: int | None = None,
    ) -> EnvResetResult:
        """Reset the lanes in ``request.env_indices`` (all when empty).

        Args:
            request: the reset; ``None`` resets every lane unseeded.
            timeout: seconds for this request (else ``request_timeout``; a non-zero
                ``request.timeout_ms`` wins over both on the wire).
            step: the caller's step count, reported in errors.

        Raises:
            RemoteEnvError: the env answered with an in-band error.
            OperationTimeout: no reply in time (:class:`RemoteEnvTimeout` when the server
                said so).
            TransportError: the connection failed or the server refused the call.
        """
        request, local = self._with_deadline(
            env_v1.ResetRequest() if request is None else request, timeout
        )
        lane = request.env_indices[0] if len(request.env_indices) == 1 else None
        response, sent, received = await self._call(
            env_v1.JoinRequest(reset=request),
            operation="env.reset",
            expected="reset",
            timeout=local,
            step=step,
            lane=lane,
        )
        assert response.reset is not None
        return EnvResetResult(
            response=response.reset,
            timings=EndpointTimings.from_env_response(response),
            request_bytes=sent,
            response_bytes=received,
        )

    async def step(
        self,
        request: env_v1.StepRequest,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - also goes on the wire as timeout_ms
        step: int | None = None,
    ) -> EnvStepResult:
        """Step the lanes in ``request.env_indices`` (all when empty).

        ``step``: the caller's step count, reported in errors (the client keeps none: a
        run's driver adds its own step to the errors it passes on). Raises like
        :meth:`reset`.
        """
        request, local = self._with_deadline(request, timeout)
        lane = request.env_indices[0] if len(request.env_indices) == 1 else None
        response, sent, received = await self._call(
            env_v1.JoinRequest(step=request),
            operation="env.step",
            expected="step",
            timeout=local,
            step=step,
            lane=lane,
        )
        assert response.step is not None
        return EnvStepResult(
            response=response.step,
            timings=EndpointTimings.from_env_response(response),
            request_bytes=sent,
            response_bytes=received,
        )

    async def render(
        self,
        request: env_v1.RenderRequest | None = None,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - also goes on the wire as timeout_ms
    ) -> env_v1.RenderResponse:
        """Render one lane (lane 0 by default, as the reference client asks)."""
        request = copy.copy(request) if request is not None else env_v1.RenderRequest()
        if not request.env_indices:
            request.env_indices = [0]
        request.timeout_ms, local = self._deadline(request.timeout_ms, timeout)
        response, _, _ = await self._call(
            env_v1.JoinRequest(render=request),
            operation="env.render",
            expected="render",
            timeout=local,
            step=None,
            lane=request.env_indices[0],
        )
        assert response.render is not None
        return response.render

    async def close(
        self,
        reason: str = _CLOSE_REASON,
        *,
        timeout: float = CLOSE_TIMEOUT,  # noqa: ASYNC109 - bounds a shielded cleanup
    ) -> list[env_v1.EpisodeMetadata]:
        """End the session: send Close (if a Join is open) and drop the stream.

        The server keeps running for its next client. Returns the episodes the server
        completed on close. Idempotent; never waits longer than ``timeout``.
        """
        if self._closed:
            return []
        self._closed = True
        mux = self._mux
        if mux is None:
            return []
        context: dict[str, Any] = {"operation": "env.close", "address": self.address}
        reply: env_v1.JoinResponse | None = None
        try:
            if mux.failure is None:
                mux.closing = True
                # Close ends our side in the same frame: the rlmesh server resets the stream
                # right after answering, and the answer must not be lost to the reset.
                request = env_v1.JoinRequest(close=env_v1.CloseEnvsRequest(reason=reason))
                with trio.fail_after(timeout):
                    reply, _, _ = await self._roundtrip(mux, request, end=True)
        except trio.TooSlowError:
            raise OperationTimeout(
                f"env.close on {self.address} got no reply within {timeout:g} s",
                timeout=timeout,
                **context,
            ) from None
        except Exception as exc:
            raise self._transport_error(exc, context) from exc
        finally:
            await mux.aclose()
        if reply is None:
            return []
        kind, _ = betterproto2.which_one_of(reply, "kind")
        if kind == "error":
            raise self._env_error(reply.error, context)
        if kind != "close" or reply.close is None:
            raise ProtocolError(
                f"env.close on {self.address}: expected a 'close' reply, got {kind!r}", **context
            )
        return list(reply.close.final_episodes)

    async def shutdown(self, reason: str = "") -> core_v1.ShutdownResponse:
        """Ask the server process to stop (refused unless it allows remote shutdown)."""
        context: dict[str, Any] = {"operation": "env.shutdown", "address": self.address}
        request = env_v1.ShutdownRequest(base=core_v1.ShutdownRequest(reason=reason))
        try:
            data = await self._channel.unary(ENV_SHUTDOWN, encode(request), self._metadata)
            response = decode(env_v1.ShutdownResponse, data)
        except Exception as exc:
            raise self._transport_error(exc, context) from exc
        return response.base or core_v1.ShutdownResponse()


def _request_id(reply: env_v1.JoinResponse) -> str:
    return reply.request_id


@contextlib.asynccontextmanager
async def open_env_client(
    address: str,
    *,
    token: str | None = None,
    connect_timeout: float = 10.0,
    request_timeout: float | None = None,
    editions: Iterable[str] = SUPPORTED_WORKFLOW_EDITIONS,
    backend: BackendName = "trio",
    settings: GrpcSettings = DEFAULT_SETTINGS,
) -> AsyncIterator[EnvClient]:
    """Connect to an env endpoint, handshake, and yield a ready :class:`EnvClient`.

    The Join stream (the endpoint's single client slot) is opened on the first request,
    and closed with a Close message when the block exits.

    Args:
        address: ``host:port``, ``tcp://host:port``, ``unix:///path`` or ``memory://name``.
        token: sent raw in the ``authorization`` header of every call (none if empty).
        connect_timeout: seconds for connecting and the handshake.
        request_timeout: default seconds per request; also sent as ``timeout_ms``.
        editions: workflow editions this client accepts, most preferred first.
        backend: ``"trio"`` (default) or ``"grpclib"``.
        settings: message size limit, keepalive and flow-control windows.

    Raises:
        ProtocolError: the server refused this protocol generation, shares no workflow
            edition with ``editions``, or sent no usable contract.
        TransportError: the server is unreachable, is not an env server, or refused the token.
        OperationTimeout: connecting took longer than ``connect_timeout`` (recoverable).

    Every error names the operation ``env.handshake`` (see
    :mod:`~trio_rlmesh.transports.grpc._handshake` for the rules, the model client's too).

    Example::

        async with open_env_client("127.0.0.1:50051") as env:
            first = await env.reset(env_v1.ResetRequest(seeds=[0]))
    """
    editions = tuple(editions)
    metadata = auth_metadata(token)
    async with (
        get_backend(backend).open_channel(address, settings) as channel,
        background_nursery() as nursery,
    ):
        display = channel.label
        with connecting("env", display, timeout=connect_timeout, token_sent=metadata is not None):
            shake = await handshake(channel, "env", editions=editions, metadata=metadata)
        contract = _check_contract(shake.reply.env_contract, display)
        base = shake.base
        client = EnvClient(
            channel,
            address=display,
            contract=contract,
            capabilities=dict(base.capabilities),
            workflow_edition=shake.workflow_edition,
            server_info=base.peer_info or core_v1.PeerInfo(),
            metadata=metadata,
            request_timeout=request_timeout,
            nursery=nursery,
        )
        try:
            yield client
        finally:
            with (
                trio.CancelScope(shield=True),
                contextlib.suppress(Error),
                trio.move_on_after(CLOSE_TIMEOUT),
            ):
                await client.close()


class EnvClientRuntimeEnv(RuntimeEnv):
    """An :class:`EnvClient` seen as a :class:`~trio_rlmesh.runtime.RuntimeEnv`.

    The driver's deadline reaches the client as the request's ``timeout_ms`` (set by the
    driver, counted from the call's start); the driver numbers steps, so this adapter
    leaves the step to it. The client ends the call by that deadline itself, so the
    adapter ``enforces_deadlines``: the driver opens no scope of its own over it.
    """

    enforces_deadlines = True

    def __init__(self, client: EnvClient) -> None:
        self.client = client

    async def reset(self, request: env_v1.ResetRequest) -> EnvResetResult:
        """Reset through the client (errors name ``env.reset``)."""
        return await self.client.reset(request)

    async def step(self, request: env_v1.StepRequest) -> EnvStepResult:
        """Step through the client (errors name ``env.step``)."""
        return await self.client.step(request)

    async def render(self, request: env_v1.RenderRequest) -> env_v1.RenderResponse:
        """Render one lane through the client."""
        return await self.client.render(request)

    async def close(self, timeout: float) -> None:  # noqa: ASYNC109 - RuntimeEnv's signature
        """Close the session, giving up after ``timeout`` seconds (errors name ``env.close``)."""
        await self.client.close(timeout=timeout)
