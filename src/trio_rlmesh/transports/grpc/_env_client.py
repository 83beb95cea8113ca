"""A trio client for a remote env endpoint (``rlmesh.env.v1.EnvService``).

It behaves like the 0.1.0 runtime's env client on the wire: a unary Handshake
(component ``rlmesh-env``, empty capabilities, our editions and the preferred
one), then one Join stream opened lazily on the first request, whose first
message is ConfigureEnv with the negotiated edition. Requests carry ids
``grpc-req-<n>`` (one counter per stream, ConfigureEnv is ``grpc-req-1``).

Theory of operation. Everything touching grpclib runs on the portal's asyncio
loop inside :class:`_JoinConnection`:

* a reader task owns the Join stream: it reads every reply and completes the
  waiting request whose id matches; replies nobody waits for (their caller was
  cancelled or timed out) are counted as stale and dropped, which resyncs the
  stream;
* a request is one coroutine (send, then wait for its reply), so each round trip
  crosses the portal once, and any number of requests may be in flight at once
  (a lane endpoint answers out of order);
* sends are serialized by a lock and shielded: a message is always written
  whole, even if its caller is cancelled halfway, so the stream never carries a
  torn frame;
* when the stream fails, every waiting request fails with the cause, and the
  stream stays failed (later requests fail fast with the same cause).

Errors are mapped to :mod:`trio_rlmesh` errors on the trio side, in one place
(:meth:`EnvClient._call`).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import itertools
import math
from collections.abc import AsyncIterator, Iterable
from typing import Any, Final, NamedTuple, cast

import attrs
import betterproto2
import trio
from grpclib.client import Channel, Stream
from grpclib.const import Cardinality, Status
from grpclib.encoding.base import CodecBase
from grpclib.exceptions import GRPCError

from ..._errors import EnvError, Error, OperationTimeout, ProtocolError, SpecError, TransportError
from ...protocol import (
    CAP_SUBSET_STEP,
    COMPONENT_ENV,
    PROTOCOL_GENERATION,
    SUPPORTED_WORKFLOW_EDITIONS,
    core_v1,
    env_v1,
    has_capability,
    highest_shared_edition,
)
from ...protocol._fastwire import decode_env_join_response, encode_env_join
from ...runtime._interfaces import EndpointTimings, EnvResetResult, EnvStepResult
from ._common import (
    ENV_HANDSHAKE,
    ENV_JOIN,
    ENV_SHUTDOWN,
    Address,
    auth_metadata,
    handshake_request,
    map_grpc_error,
    parse_address,
)
from ._portal import Portal, open_portal

__all__ = [
    "EnvClient",
    "EnvClientRuntimeEnv",
    "EnvClientStatistics",
    "RemoteEnvError",
    "open_env_client",
]

BUSY_RETRY_SECONDS: Final = 2.0
"""How long a Join refused as busy is retried: rlmesh frees its single slot asynchronously."""

_BUSY_FIRST_BACKOFF: Final = 0.02
_BUSY_MAX_BACKOFF: Final = 0.25

LOCAL_TIMEOUT_GRACE: Final = 1.0
"""Seconds the local timer waits beyond a request's ``timeout_ms``, so the server's own
TIMEOUT answer (which names the operation) normally arrives first."""

DEFAULT_CLOSE_TIMEOUT: Final = 5.0

_CLOSE_REASON: Final = "client close"


class _Received(NamedTuple):
    message: Any
    size: int


class _SizedProtoCodec(CodecBase):
    """Protobuf codec that sends pre-encoded bytes and reports received sizes.

    Requests are serialized by the caller (who needs their size anyway); replies
    come back as ``_Received(message, size)``.
    """

    __content_subtype__ = "proto"

    def encode(self, message: Any, message_type: Any) -> bytes:
        if isinstance(message, bytes):
            return message
        return bytes(message)

    def decode(self, data: bytes, message_type: Any) -> _Received:
        if message_type is env_v1.JoinResponse:
            return _Received(decode_env_join_response(data), len(data))
        return _Received(message_type.FromString(data), len(data))


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


@attrs.frozen
class EnvClientStatistics:
    """A snapshot of one client's Join traffic."""

    requests_sent: int
    """Join requests written, ConfigureEnv and Close included."""
    replies_received: int
    """Join replies read, stale ones included."""
    stale_replies: int
    """Replies dropped because nobody waited for their id any more."""
    in_flight: int
    """Requests waiting for their reply right now."""


def _error_code_name(code: Any) -> str:
    try:
        name = env_v1.EnvErrorCode(int(code)).name
    except ValueError:
        return "UNSPECIFIED"
    return name if name and name.isidentifier() else "UNSPECIFIED"


class _StreamEnded(ConnectionError):
    """The env server ended the Join stream while requests were outstanding."""


class _JoinConnection:
    """The asyncio half of an env client. Every method runs on the portal's loop."""

    def __init__(self, address: Address, token: str | None) -> None:
        self.address = address
        self._metadata = auth_metadata(token)
        self.token_sent = self._metadata is not None
        self._channel: Channel | None = None
        self._stream: Stream[bytes, Any] | None = None
        self._reader: asyncio.Task[None] | None = None
        self._open_lock: asyncio.Lock | None = None
        self._send_lock: asyncio.Lock | None = None
        self._pending: dict[str, asyncio.Future[_Received]] = {}
        self._ids: itertools.count[int] = itertools.count(1)
        self._failure: BaseException | None = None
        self._closing = False
        self._ended = False
        self.sent = 0
        self.received = 0
        self.stale = 0

    # -- channel and unary calls

    def _get_channel(self) -> Channel:
        if self._channel is None:
            codec = _SizedProtoCodec()
            if self.address.kind == "unix":
                self._channel = Channel(path=self.address.path, codec=codec)
            else:
                self._channel = Channel(self.address.host, self.address.port, codec=codec)
        return self._channel

    async def unary(self, path: str, request: betterproto2.Message, reply_type: type[Any]) -> Any:
        """One unary call; returns the decoded reply."""
        channel = self._get_channel()
        async with channel.request(
            path, Cardinality.UNARY_UNARY, bytes, reply_type, metadata=self._metadata
        ) as stream:
            await stream.send_message(bytes(request), end=True)
            received = await stream.recv_message()
        if received is None:
            raise GRPCError(Status.UNKNOWN, "the server sent no reply")
        return received.message

    # -- the Join stream

    async def _open(self, edition: str) -> None:
        """Open the Join stream and configure it, retrying while the env is busy."""
        if self._open_lock is None:
            self._open_lock = asyncio.Lock()
            self._send_lock = asyncio.Lock()
        async with self._open_lock:
            if self._stream is not None or self._failure is not None:
                return
            loop = asyncio.get_running_loop()
            give_up = loop.time() + BUSY_RETRY_SECONDS
            backoff = _BUSY_FIRST_BACKOFF
            while True:
                try:
                    await self._open_once(edition)
                    return
                except GRPCError as exc:
                    if exc.status is not Status.FAILED_PRECONDITION or loop.time() >= give_up:
                        raise
                await asyncio.sleep(min(backoff, max(0.0, give_up - loop.time())))
                backoff = min(backoff * 2, _BUSY_MAX_BACKOFF)

    async def _open_once(self, edition: str) -> None:
        self._ids = itertools.count(1)
        self._ended = False
        opened: asyncio.Future[Stream[bytes, Any]] = asyncio.get_running_loop().create_future()
        reader = asyncio.create_task(self._read(opened))
        try:
            stream = await asyncio.shield(opened)
        except BaseException:
            reader.cancel()
            with contextlib.suppress(BaseException):
                await reader
            raise
        self._stream = stream
        self._reader = reader
        # ConfigureEnv goes first, as the 0.1.0 runtime sends it. Its reply also
        # proves the server accepted the stream (a busy or unauthorised Join ends
        # with a status instead).
        try:
            configure = env_v1.JoinRequest(
                configure=env_v1.ConfigureEnvRequest(selected_workflow_edition=edition)
            )
            reply, _, _ = await self._roundtrip(configure)
        except BaseException:
            self._stream = None
            self._reader = None
            self._failure = None
            reader.cancel()
            with contextlib.suppress(BaseException):
                await reader
            raise
        kind, _ = betterproto2.which_one_of(reply, "kind")
        if kind == "configure":
            return
        if kind == "error" and reply.error is not None:
            code = _error_code_name(reply.error.code)
            failure: Error = SpecError(
                f"the env at {self.address} rejected workflow edition {edition!r} "
                f"(ConfigureEnv): {code}: {reply.error.message}",
                code=code,
            )
        else:
            failure = ProtocolError(
                f"the env at {self.address} answered ConfigureEnv with {kind or 'nothing'!r}"
            )
        self._failure = failure
        raise failure

    async def _read(self, opened: asyncio.Future[Stream[bytes, Any]]) -> None:
        """Own the Join stream: open it, route each reply to its waiter, record failure."""
        channel = self._get_channel()
        failure: BaseException | None = None
        try:
            async with channel.request(
                ENV_JOIN,
                Cardinality.STREAM_STREAM,
                bytes,
                env_v1.JoinResponse,
                metadata=self._metadata,
            ) as stream:
                await stream.send_request()
                opened.set_result(stream)
                await stream.recv_initial_metadata()
                while True:
                    # The sized codec turns every reply into a _Received.
                    received = cast("_Received | None", await stream.recv_message())
                    if received is None:
                        break
                    self.received += 1
                    waiter = self._pending.pop(received.message.request_id, None)
                    if waiter is None or waiter.done():
                        self.stale += 1
                    else:
                        waiter.set_result(received)
                if not self._closing:
                    failure = _StreamEnded("the env server ended the Join stream")
                if not self._ended:
                    self._ended = True
                    with contextlib.suppress(Exception):
                        await stream.end()
        except asyncio.CancelledError:
            failure = ConnectionAbortedError("the client closed the Join stream")
            raise
        except Exception as exc:
            failure = exc
        finally:
            if not opened.done():
                opened.set_exception(failure or ConnectionAbortedError("Join never opened"))
            if failure is not None:
                self._fail(failure)

    def _fail(self, failure: BaseException) -> None:
        if self._closing and not self._pending:
            return  # the stream ended because we closed it
        if self._failure is None:
            self._failure = failure
        pending, self._pending = self._pending, {}
        for waiter in pending.values():
            if not waiter.done():
                waiter.set_exception(failure)
                # The caller may be gone; never leave "exception never retrieved".
                waiter.exception()

    async def _send(self, data: bytes, end: bool) -> None:
        assert self._send_lock is not None
        assert self._stream is not None
        async with self._send_lock:
            if end:
                self._ended = True
            await self._stream.send_message(data, end=end)

    async def _roundtrip(
        self, request: env_v1.JoinRequest, *, end: bool = False
    ) -> tuple[env_v1.JoinResponse, int, int]:
        if self._failure is not None:
            raise self._failure
        if self._stream is None:
            raise ConnectionAbortedError("the Join stream is closed")
        request_id = f"grpc-req-{next(self._ids)}"
        request.request_id = request_id
        data = encode_env_join(request)
        waiter: asyncio.Future[_Received] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = waiter
        try:
            # Shielded: a cancelled caller must not leave half a message on the wire.
            await asyncio.shield(asyncio.ensure_future(self._send(data, end)))
            self.sent += 1
            received = await waiter
        finally:
            if self._pending.get(request_id) is waiter:
                del self._pending[request_id]
        return received.message, len(data), received.size

    async def request(
        self, request: env_v1.JoinRequest, edition: str
    ) -> tuple[env_v1.JoinResponse, int, int]:
        """Send one Join request (opening the stream first if needed) and wait for its reply."""
        if self._stream is None:
            if self._closing:
                raise ConnectionAbortedError("the env client is closed")
            await self._open(edition)
        return await self._roundtrip(request)

    async def close(self, reason: str | None) -> env_v1.JoinResponse | None:
        """Send Close (with END_STREAM in the same frame) if a stream is open, then shut down.

        ``reason=None`` drops the stream without a Close message. Returns Close's reply.
        """
        reply: env_v1.JoinResponse | None = None
        try:
            if reason is not None and self._stream is not None and self._failure is None:
                self._closing = True
                # The rlmesh server resets the stream right after answering Close;
                # ending our side in the same frame keeps grpclib from dropping the answer.
                request = env_v1.JoinRequest(close=env_v1.CloseEnvsRequest(reason=reason))
                reply, _, _ = await self._roundtrip(request, end=True)
                if self._reader is not None:
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(asyncio.shield(self._reader), 1.0)
        finally:
            self.abort()
        return reply

    def abort(self) -> None:
        """Drop the stream and the connection at once."""
        self._closing = True
        if self._reader is not None and not self._reader.done():
            self._reader.cancel()
        self._stream = None
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    async def aclose(self) -> None:
        """Cancel the reader and wait for it, then close the connection."""
        reader = self._reader
        self.abort()
        if reader is not None:
            with contextlib.suppress(BaseException):
                await reader

    @property
    def in_flight(self) -> int:
        return len(self._pending)


def _validate_handshake(
    response: env_v1.HandshakeResponse, editions: tuple[str, ...], address: str
) -> tuple[core_v1.HandshakeResponse, core_v1.EnvContract, str]:
    where = f"env handshake with {address}"
    base = response.base
    if base is None:
        raise ProtocolError(f"{where}: the reply has no base", operation="env.handshake")
    if not base.compatible:
        detail = base.error_message or "no reason given"
        raise ProtocolError(
            f"{where}: the server is not compatible with protocol generation "
            f"{PROTOCOL_GENERATION}: {detail}",
            operation="env.handshake",
            address=address,
        )
    contract = response.env_contract
    spec = contract.spec if contract is not None else None
    if contract is None or spec is None:
        raise ProtocolError(
            f"{where}: the reply carries no env contract", operation="env.handshake"
        )
    if spec.observation_space is None or spec.action_space is None:
        missing = "observation" if spec.observation_space is None else "action"
        raise ProtocolError(
            f"{where}: the env contract has no {missing} space", operation="env.handshake"
        )
    edition = highest_shared_edition(list(base.supported_workflow_editions), editions)
    if edition is None:
        raise SpecError(
            f"{where}: no mutual workflow edition: the server supports "
            f"{list(base.supported_workflow_editions)}, this client {list(editions)}",
            operation="env.handshake",
            address=address,
        )
    return base, contract, edition


@attrs.define(eq=False)
class EnvClient:
    """A connected env endpoint; get one from :func:`open_env_client`.

    Each request method takes a protocol message and returns the endpoint's reply
    with its timings and sizes. Several requests may run concurrently (for a
    ``subset_step`` endpoint, one per lane).
    """

    _portal: Portal
    _conn: _JoinConnection
    address: str
    """The endpoint's display address (``tcp://host:port`` or ``unix:///path``)."""
    contract: core_v1.EnvContract
    """The env contract from the handshake (spaces, lanes, render and autoreset modes)."""
    capabilities: dict[str, str]
    """Capabilities the server advertised."""
    workflow_edition: str
    """The highest workflow edition both sides support; sent in ConfigureEnv."""
    server_info: core_v1.PeerInfo
    """The server's PeerInfo."""
    request_timeout: float | None = None
    """Default per-request deadline in seconds (``None`` = none)."""
    _steps: int = attrs.field(init=False, default=0)
    _closed: bool = attrs.field(init=False, default=False)

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
        return EnvClientStatistics(
            requests_sent=self._conn.sent,
            replies_received=self._conn.received,
            stale_replies=self._conn.stale,
            in_flight=self._conn.in_flight,
        )

    # -- requests

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
        if self._closed:
            raise TransportError(
                f"{operation} on {self.address}: the env client is closed",
                operation=operation,
                address=self.address,
            )
        context: dict[str, Any] = {
            "operation": operation,
            "address": self.address,
            "step": step,
            "lane": lane,
        }
        try:
            with trio.fail_after(math.inf if timeout is None else timeout + LOCAL_TIMEOUT_GRACE):
                response, request_bytes, response_bytes = await self._portal.run(
                    self._conn.request, request, self.workflow_edition
                )
        except trio.TooSlowError:
            raise OperationTimeout(
                f"{operation} on {self.address} got no reply within {timeout} s",
                timeout=timeout,
                **context,
            ) from None
        except GRPCError as exc:
            if exc.status is Status.FAILED_PRECONDITION:
                raise TransportError(
                    f"{operation}: the env at {self.address} already has a client "
                    f"(its Join was refused for {BUSY_RETRY_SECONDS:g} s: {exc.message}); "
                    "an env endpoint serves one client at a time",
                    code=exc.status.name,
                    **context,
                ) from exc
            raise map_grpc_error(exc, **context, token_sent=self._conn.token_sent) from exc
        except Error as exc:
            raise exc.with_context(**context) from None
        except Exception as exc:
            raise map_grpc_error(exc, **context, token_sent=self._conn.token_sent) from exc
        kind, _ = betterproto2.which_one_of(response, "kind")
        if kind == "error":
            raise self._env_error(response.error, context)
        if kind != expected:
            raise ProtocolError(
                f"{operation} on {self.address}: expected a {expected!r} reply to "
                f"{response.request_id}, got {kind or 'an empty reply'!r}",
                **context,
            )
        return response, request_bytes, response_bytes

    def _env_error(self, error: env_v1.EnvError | None, context: dict[str, Any]) -> RemoteEnvError:
        assert error is not None
        code = _error_code_name(error.code)
        return RemoteEnvError(
            f"{context['operation']} failed on {self.address}: {code}: {error.message}",
            recoverable=error.is_recoverable,
            code=code,
            interrupted_episodes=error.interrupted_episodes,
            debug_info=error.debug_info,
            **context,
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
            OperationTimeout: no reply in time.
            TransportError: the connection failed or the server refused the call.
        """
        request = copy.copy(request) if request is not None else env_v1.ResetRequest()
        request.timeout_ms, local = self._deadline(request.timeout_ms, timeout)
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

        ``step`` (for error messages) defaults to the steps this client has completed.
        Raises like :meth:`reset`.
        """
        request = copy.copy(request)
        request.timeout_ms, local = self._deadline(request.timeout_ms, timeout)
        lane = request.env_indices[0] if len(request.env_indices) == 1 else None
        response, sent, received = await self._call(
            env_v1.JoinRequest(step=request),
            operation="env.step",
            expected="step",
            timeout=local,
            step=self._steps if step is None else step,
            lane=lane,
        )
        self._steps += 1
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
        timeout: float = DEFAULT_CLOSE_TIMEOUT,  # noqa: ASYNC109 - bounds a shielded cleanup
    ) -> list[env_v1.EpisodeMetadata]:
        """End the session: send Close (if a Join is open) and drop the connection.

        The server keeps running for its next client. Returns the episodes the
        server completed on close. Idempotent; never waits longer than ``timeout``.
        """
        if self._closed:
            return []
        self._closed = True
        context: dict[str, Any] = {"operation": "env.close", "address": self.address}
        reply: env_v1.JoinResponse | None = None
        try:
            with trio.fail_after(timeout):
                reply = await self._portal.run(self._conn.close, reason)
        except trio.TooSlowError:
            raise OperationTimeout(
                f"env.close on {self.address} got no reply within {timeout} s",
                timeout=timeout,
                **context,
            ) from None
        except Exception as exc:
            raise map_grpc_error(exc, **context, token_sent=self._conn.token_sent) from exc
        finally:
            with trio.CancelScope(shield=True):
                await self._portal.run(self._conn.aclose)
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
            response = await self._portal.run(
                self._conn.unary, ENV_SHUTDOWN, request, env_v1.ShutdownResponse
            )
        except Exception as exc:
            raise map_grpc_error(exc, **context, token_sent=self._conn.token_sent) from exc
        return response.base or core_v1.ShutdownResponse()


@contextlib.asynccontextmanager
async def open_env_client(
    address: str,
    *,
    token: str | None = None,
    connect_timeout: float = 10.0,
    request_timeout: float | None = None,
    editions: Iterable[str] = SUPPORTED_WORKFLOW_EDITIONS,
) -> AsyncIterator[EnvClient]:
    """Connect to an env endpoint, handshake, and yield a ready :class:`EnvClient`.

    The Join stream (the endpoint's single client slot) is opened on the first
    request, and closed with a Close message when the block exits.

    Args:
        address: ``host:port``, ``tcp://host:port`` or ``unix:///path``.
        token: sent raw in the ``authorization`` header of every call (none if empty).
        connect_timeout: seconds for connecting and the handshake.
        request_timeout: default seconds per request; also sent as ``timeout_ms``.
        editions: workflow editions this client accepts, most preferred first.

    Raises:
        ProtocolError: the server speaks another protocol generation or sent no contract.
        SpecError: no workflow edition in common.
        TransportError: the server is unreachable or rejected the token.
        OperationTimeout: connecting took longer than ``connect_timeout``.

    Example::

        async with open_env_client("127.0.0.1:50051") as env:
            first = await env.reset(env_v1.ResetRequest(seeds=[0]))
    """
    parsed = parse_address(address)
    display = str(parsed)
    editions = tuple(editions)
    context: dict[str, Any] = {"operation": "env.handshake", "address": display}
    async with open_portal() as portal:
        conn = _JoinConnection(parsed, token)
        try:
            base_request = handshake_request(COMPONENT_ENV, editions=editions)
            request = env_v1.HandshakeRequest(base=base_request)
            try:
                with trio.fail_after(connect_timeout):
                    response = await portal.run(
                        conn.unary, ENV_HANDSHAKE, request, env_v1.HandshakeResponse
                    )
            except trio.TooSlowError:
                raise OperationTimeout(
                    f"connecting to the env at {display} timed out after {connect_timeout} s",
                    timeout=connect_timeout,
                    recoverable=True,
                    **context,
                ) from None
            except Exception as exc:
                raise map_grpc_error(exc, **context, token_sent=conn.token_sent) from exc
            base, contract, edition = _validate_handshake(response, editions, display)
            client = EnvClient(
                portal,
                conn,
                address=display,
                contract=contract,
                capabilities=dict(base.capabilities),
                workflow_edition=edition,
                server_info=base.peer_info or core_v1.PeerInfo(),
                request_timeout=request_timeout,
            )
            try:
                yield client
            finally:
                with (
                    trio.CancelScope(shield=True),
                    contextlib.suppress(Error),
                    trio.move_on_after(DEFAULT_CLOSE_TIMEOUT),
                ):
                    await client.close()
        finally:
            with trio.CancelScope(shield=True):
                await portal.run(conn.aclose)


@attrs.define(eq=False)
class EnvClientRuntimeEnv:
    """An :class:`EnvClient` seen as a :class:`~trio_rlmesh.runtime.RuntimeEnv`."""

    client: EnvClient

    async def reset(self, request: env_v1.ResetRequest) -> EnvResetResult:
        """Reset through the client (errors name ``env.reset``)."""
        return await self.client.reset(request)

    async def step(self, request: env_v1.StepRequest) -> EnvStepResult:
        """Step through the client (errors name ``env.step`` and the step being attempted).

        The driver numbers a failed step as the step it was attempting (completed + 1),
        as the in-process env path does; the client's own default is the completed count.
        """
        return await self.client.step(request, step=self.client._steps + 1)

    async def close(self, timeout: float) -> None:  # noqa: ASYNC109 - RuntimeEnv's signature
        """Close the session, giving up after ``timeout`` seconds (errors name ``env.close``)."""
        await self.client.close(timeout=timeout)
