"""Gymnasium-shaped remote envs for trio programs, on top of the env client.

:func:`open_remote_env` and :func:`open_remote_vector_env` connect with
:func:`~trio_rlmesh.transports.grpc.open_env_client` and wrap it: actions are encoded and
observations decoded with the spaces codec directly (the space plans are compiled once, at
connect), so one ``step`` is one encode, one round trip on the Join stream, one decode and one
copy into Gymnasium's dtypes. No episode ids are minted and no keys are added to infos: what
the env put in its info is what the caller gets (numpy values arrive as lists, as RLMesh sends
them; a vector env's per-lane lists become arrays again).

Deadlines: every call takes ``timeout`` (seconds; ``math.inf`` for none), else the
``request_timeout`` given when opening. The env client puts it on the wire as ``timeout_ms``,
so the server answers TIMEOUT (raised as :class:`~trio_rlmesh.OperationTimeout`), and it keeps
a local timer a second later for a server that never answers.

Cancellation: a call cancelled by the caller's cancel scope leaves the env usable. Its reply,
when it comes, is dropped by the client. The server may still have carried the call out, so
reset before stepping on.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Final

import numpy as np
import trio

from .._errors import Error, ProtocolError, SpecError
from .._png import PngError, decode_png
from ..protocol import (
    SUPPORTED_WORKFLOW_EDITIONS,
    core_v1,
    env_v1,
    python_to_meta,
    read_env_contract,
    spaces_v1,
)
from ..protocol import meta_to_python as _meta_to_python
from ..spaces import (
    Space,
    decode_batch,
    encode_batch,
    encode_lanes,
    stack_lanes,
    to_gymnasium,
    unstack,
)
from ..transports.grpc import BackendName, EnvClient, GrpcSettings, open_env_client
from ._values import Finisher, batch_finisher, lane_finisher, lane_infos

__all__ = [
    "DEFAULT_REQUEST_TIMEOUT",
    "AsyncRemoteEnv",
    "AsyncRemoteVectorEnv",
    "open_remote_env",
    "open_remote_vector_env",
]

DEFAULT_REQUEST_TIMEOUT: Final = 300.0
"""Seconds a reset, step or render may take unless the caller says otherwise (the runtime's
``RuntimeLimits`` default for env calls)."""

_AUTORESET_NAMES: Final = {
    core_v1.AutoresetMode.NEXT_STEP: "NEXT_STEP",
    core_v1.AutoresetMode.SAME_STEP: "SAME_STEP",
    core_v1.AutoresetMode.DISABLED: "DISABLED",
}
_KNOWN_FORMATS: Final = (env_v1.RenderFormat.UNSPECIFIED, env_v1.RenderFormat.PNG)


def _editions(workflow_edition: str | None) -> tuple[str, ...]:
    return SUPPORTED_WORKFLOW_EDITIONS if workflow_edition is None else (workflow_edition,)


def _gym_metadata(metadata: Mapping[str, Any], render_mode: str | None) -> dict[str, Any]:
    """The env's metadata, with ``render_modes`` narrowed to the one the server renders in.

    A remote env renders in the mode its server was started with, and only that one, so
    that is the one mode it can be made with (Gymnasium reads ``render_modes`` so).
    """
    return {**metadata, "render_modes": [render_mode] if render_mode else []}


class _RemoteBase:
    """What both remote envs share: the client, the decoded contract and the call guard."""

    def __init__(self, client: EnvClient) -> None:
        contract = read_env_contract(client.contract)
        self._client = client
        self._observation_wire: Space = contract.observation_space
        self._action_wire: Space = contract.action_space
        self._busy = False
        self.address: str = client.address
        """The endpoint's display address (``tcp://host:port``, ``unix:///path``, ...)."""
        self.spec_id: str = contract.env_id
        """The served env's ``EnvSpec.id`` (e.g. ``"CartPole-v1"``); may be empty."""
        self.render_mode: str | None = contract.render_mode
        """The render mode the server's env was made with (``None`` when it renders nothing)."""
        self.metadata: dict[str, Any] = _gym_metadata(contract.metadata, contract.render_mode)
        """The env's metadata as the server sent it, ``render_modes`` narrowed to
        ``[render_mode]`` (or ``[]``)."""
        self._autoreset = contract.autoreset

    def _enter(self, operation: str) -> None:
        if self._busy:
            raise trio.BusyResourceError(
                f"{operation}: another task is already calling this remote env; "
                "a remote env serves one call at a time"
            )
        self._busy = True

    def _observation(self, value: spaces_v1.SpaceValue | None, n: int, operation: str) -> Any:
        if value is None:
            raise ProtocolError(
                f"{operation} on {self.address}: the reply carries no observation",
                operation=operation,
                address=self.address,
            )
        try:
            return decode_batch(self._observation_wire, value.leaves, n)
        except Error as exc:
            raise ProtocolError(
                f"{operation} on {self.address}: the observation does not fit the env's "
                f"observation space: {exc}",
                operation=operation,
                address=self.address,
            ) from exc

    def _flags(self, mask: bytes, n: int, what: str) -> Any:
        if not mask:
            return np.zeros(n, np.bool_)
        if len(mask) != n:
            raise ProtocolError(
                f"env.step on {self.address}: the {what} mask has {len(mask)} bytes for "
                f"{n} lane(s)",
                operation="env.step",
                address=self.address,
            )
        return np.frombuffer(mask, np.uint8) != 0

    def _rewards(self, rewards: Sequence[float], n: int) -> Sequence[float]:
        if len(rewards) != n:
            raise ProtocolError(
                f"env.step on {self.address}: the reply has {len(rewards)} rewards for {n} lane(s)",
                operation="env.step",
                address=self.address,
            )
        return rewards

    async def _render(self, env_index: int, timeout: float | None) -> Any:  # noqa: ASYNC109
        self._enter("env.render")
        try:
            response = await self._client.render(
                env_v1.RenderRequest(env_indices=[env_index]), timeout=timeout
            )
        finally:
            self._busy = False
        if response.frame is None or response.format not in _KNOWN_FORMATS:
            return None  # no frame; a frame of an unknown format is dropped, as RLMesh does
        try:
            return decode_png(response.frame)
        except PngError as exc:
            raise ProtocolError(
                f"env.render on {self.address}: {exc}",
                operation="env.render",
                address=self.address,
            ) from exc

    async def aclose(self) -> None:
        """End the session (send Close); the server stays up for its next client.

        Idempotent. Leaving the ``open_remote_*`` block does this too.
        """
        await self._client.close()


class AsyncRemoteEnv(_RemoteBase):
    """One remote env lane with Gymnasium's shape, for trio code.

    Get one from :func:`open_remote_env`. ``reset``, ``step`` and ``render`` are async and
    take an optional ``timeout``; they return numpy values in the dtypes of
    ``observation_space``. One call at a time: a second concurrent call raises
    ``trio.BusyResourceError``.

    Attributes:
        observation_space: the observation space, as a ``gymnasium.spaces`` space.
        action_space: the action space, as a ``gymnasium.spaces`` space.

    Example::

        async with open_remote_env("127.0.0.1:50051") as env:
            obs, info = await env.reset(seed=0)
            obs, reward, terminated, truncated, info = await env.step(env.action_space.sample())
    """

    def __init__(self, client: EnvClient) -> None:
        super().__init__(client)
        if client.num_envs != 1:
            raise SpecError(
                f"the env at {client.address} serves {client.num_envs} lanes; "
                "use open_remote_vector_env (or RemoteVectorEnv) for it",
                operation="env.handshake",
                address=client.address,
            )
        self.observation_space: Any = to_gymnasium(self._observation_wire)
        self.action_space: Any = to_gymnasium(self._action_wire)
        self._finish: Finisher = lane_finisher(self._observation_wire, self.observation_space)

    async def reset(
        self,
        *,
        seed: int | None = None,
        options: Mapping[str, Any] | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - also goes on the wire as timeout_ms
    ) -> tuple[Any, dict[str, Any]]:
        """Reset the env; ``seed`` and ``options`` reach the env's own ``reset``.

        Returns:
            ``(observation, info)``.

        Raises:
            RemoteEnvError: the env failed (an :class:`~trio_rlmesh.EnvError`).
            OperationTimeout: no answer within ``timeout``.
            TransportError: the connection failed.
        """
        request = env_v1.ResetRequest(
            seeds=[] if seed is None else [int(seed)],
            options=None if options is None else python_to_meta(options),
        )
        self._enter("env.reset")
        try:
            result = await self._client.reset(request, timeout=timeout)
        finally:
            self._busy = False
        response = result.response
        obs = self._finish(self._observation(response.observation, 1, "env.reset"))
        return obs, _meta_to_python(response.infos)

    async def step(
        self,
        action: Any,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - also goes on the wire as timeout_ms
    ) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """Take one step.

        Returns:
            ``(observation, reward, terminated, truncated, info)`` with a ``float`` reward
            and ``bool`` flags.

        Raises:
            CodecError: ``action`` does not fit ``action_space`` (nothing was sent).
            RemoteEnvError: the env failed (an :class:`~trio_rlmesh.EnvError`).
            OperationTimeout: no answer within ``timeout``.
            TransportError: the connection failed.
        """
        try:
            leaves = encode_lanes(self._action_wire, [action])
        except Error as exc:
            raise exc.with_context(operation="env.step", address=self.address) from None
        request = env_v1.StepRequest(action=spaces_v1.SpaceValue(leaves=leaves))
        self._enter("env.step")
        try:
            result = await self._client.step(request, timeout=timeout)
        finally:
            self._busy = False
        response = result.response
        obs = self._finish(self._observation(response.observation, 1, "env.step"))
        reward = self._rewards(response.rewards, 1)[0]
        return (
            obs,
            float(reward),
            self._flag(response.terminated_mask, "terminated"),
            self._flag(response.truncated_mask, "truncated"),
            _meta_to_python(response.infos),
        )

    def _flag(self, mask: bytes, what: str) -> bool:
        if len(mask) == 1:
            return mask != b"\x00"
        return bool(self._flags(mask, 1, what)[0])

    async def render(
        self,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - also goes on the wire as timeout_ms
    ) -> Any:
        """The env's current frame as a uint8 array ((H, W, 3) for RGB), or ``None``.

        Servers send frames as PNG; an env without a render mode sends none.
        """
        return await self._render(0, timeout)


class AsyncRemoteVectorEnv(_RemoteBase):
    """A remote vector env (every lane of an endpoint) with Gymnasium's shape, for trio code.

    Get one from :func:`open_remote_vector_env`. Values are batched over ``num_envs`` lanes
    as Gymnasium's vector envs batch them: ``observation_space`` and ``action_space`` are
    the batched spaces, ``single_observation_space`` and ``single_action_space`` one lane's.
    ``metadata["autoreset_mode"]`` is the endpoint's autoreset mode as Gymnasium's
    ``AutoresetMode``; the server applies it (with ``NEXT_STEP``, the step after a lane ends
    resets that lane and ignores its action).

    Example::

        async with open_remote_vector_env("127.0.0.1:50051") as envs:
            obs, infos = await envs.reset(seed=0)  # lane i gets seed 0 + i
            actions = envs.action_space.sample()
            obs, rewards, terminations, truncations, infos = await envs.step(actions)
    """

    def __init__(self, client: EnvClient) -> None:
        super().__init__(client)
        from gymnasium.vector import AutoresetMode
        from gymnasium.vector.utils import batch_space

        self.num_envs: int = client.num_envs
        """Lanes behind the endpoint."""
        self.subset_step: bool = client.subset_step
        """Whether the endpoint resets single lanes (needed for ``options["reset_mask"]``)."""
        self.single_observation_space: Any = to_gymnasium(self._observation_wire)
        self.single_action_space: Any = to_gymnasium(self._action_wire)
        self.observation_space: Any = batch_space(self.single_observation_space, self.num_envs)
        self.action_space: Any = batch_space(self.single_action_space, self.num_envs)
        self.autoreset_mode: Any = AutoresetMode[_AUTORESET_NAMES[self._autoreset]]
        """The endpoint's autoreset mode (a ``gymnasium.vector.AutoresetMode``)."""
        self.metadata["autoreset_mode"] = self.autoreset_mode
        self._finish: Finisher = batch_finisher(
            self._observation_wire, self.single_observation_space
        )
        self._last: Any = None  # the last decoded batch, for resets of some lanes

    def _seeds(self, seed: int | Sequence[int | None] | None) -> list[int]:
        n = self.num_envs
        if seed is None:
            return []
        if isinstance(seed, int | np.integer):
            return [int(seed) + index for index in range(n)]
        seeds = list(seed)
        if len(seeds) != n:
            raise SpecError(f"reset got {len(seeds)} seeds for {n} lanes", operation="env.reset")
        if all(s is None for s in seeds):
            return []
        if any(s is None for s in seeds):
            raise SpecError(
                "reset: seed every lane or none (rlmesh-wire-v1 has no per-lane 'unseeded')",
                operation="env.reset",
            )
        return [int(s) for s in seeds if s is not None]

    async def reset(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: Mapping[str, Any] | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - also goes on the wire as timeout_ms
    ) -> tuple[Any, dict[str, Any]]:
        """Reset every lane, or the lanes in ``options["reset_mask"]``.

        Args:
            seed: an int seeds lane ``i`` with ``seed + i`` (Gymnasium's rule); a list gives
                one seed per lane; ``None`` leaves every lane unseeded.
            options: passed to the env's ``reset``. A ``"reset_mask"`` entry (one bool per
                lane) resets only those lanes, as Gymnasium's ``AutoresetMode.DISABLED``
                asks; the endpoint must reset single lanes (``subset_step``). The other
                lanes keep their last observation.
            timeout: seconds for this call (else ``request_timeout``).

        Returns:
            ``(observations, infos)`` batched over every lane.

        Raises:
            SpecError: bad seeds, or a ``reset_mask`` the endpoint cannot honour.
            RemoteEnvError, OperationTimeout, TransportError: as for a step.
        """
        seeds = self._seeds(seed)
        rest = dict(options) if options is not None else None
        mask = None if rest is None else rest.pop("reset_mask", None)
        meta = None if rest is None else python_to_meta(rest)
        if mask is not None:
            flags = np.asarray(mask, dtype=np.bool_).reshape(-1)
            if flags.size != self.num_envs:
                raise SpecError(
                    f"reset_mask has {flags.size} entries for {self.num_envs} lanes",
                    operation="env.reset",
                )
            if not flags.any():
                raise SpecError(
                    "reset_mask selects no lane (as in Gymnasium, at least one must be True)",
                    operation="env.reset",
                )
            if not flags.all():
                lanes = [int(lane) for lane in np.flatnonzero(flags)]
                return await self._reset_lanes(lanes, seeds, meta, timeout)
        request = env_v1.ResetRequest(seeds=seeds, options=meta)
        self._enter("env.reset")
        try:
            result = await self._client.reset(request, timeout=timeout)
        finally:
            self._busy = False
        response = result.response
        batch = self._observation(response.observation, self.num_envs, "env.reset")
        self._last = batch
        return self._finish(batch), lane_infos(_meta_to_python(response.infos), self.num_envs)

    async def _reset_lanes(
        self,
        lanes: list[int],
        seeds: list[int],
        meta: spaces_v1.MetaMap | None,
        timeout: float | None,  # noqa: ASYNC109
    ) -> tuple[Any, dict[str, Any]]:
        if not self.subset_step:
            raise SpecError(
                f"reset_mask: the env at {self.address} resets its lanes only together "
                "(no subset_step capability); reset every lane instead",
                operation="env.reset",
                address=self.address,
            )
        if self._last is None:
            raise SpecError(
                "reset_mask: reset every lane once before resetting some of them",
                operation="env.reset",
                address=self.address,
            )
        space = self._observation_wire
        observations = unstack(space, self._last, self.num_envs)
        infos: dict[str, Any] = {}
        replies: dict[int, Any] = {}
        failures: dict[int, Error] = {}

        async def reset_lane(lane: int) -> None:
            request = env_v1.ResetRequest(
                seeds=[seeds[lane]] if seeds else [], options=meta, env_indices=[lane]
            )
            try:
                result = await self._client.reset(request, timeout=timeout)
            except Error as exc:  # raised below, the lowest lane's, as a plain error
                failures[lane] = exc
            else:
                replies[lane] = result.response

        self._enter("env.reset")
        try:
            async with trio.open_nursery() as nursery:  # one request per lane, concurrently
                for lane in lanes:
                    nursery.start_soon(reset_lane, lane)
        finally:
            self._busy = False
        if failures:
            raise failures[min(failures)]
        for lane in lanes:
            response = replies[lane]
            observations[lane] = unstack(
                space, self._observation(response.observation, 1, "env.reset"), 1
            )[0]
            _add_lane_info(infos, _meta_to_python(response.infos), lane, self.num_envs)
        batch = stack_lanes(space, observations)
        self._last = batch
        return self._finish(batch), infos

    async def step(
        self,
        actions: Any,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - also goes on the wire as timeout_ms
    ) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """Step every lane with a batch of actions (shaped like ``action_space``).

        Returns:
            ``(observations, rewards, terminations, truncations, infos)``: rewards a float64
            array, the flags bool arrays, one item per lane.

        Raises:
            CodecError: ``actions`` do not fit ``action_space`` (nothing was sent).
            RemoteEnvError, OperationTimeout, TransportError: as for a single env.
        """
        n = self.num_envs
        try:
            leaves = encode_batch(self._action_wire, actions, n)
        except Error as exc:
            raise exc.with_context(operation="env.step", address=self.address) from None
        request = env_v1.StepRequest(action=spaces_v1.SpaceValue(leaves=leaves))
        self._enter("env.step")
        try:
            result = await self._client.step(request, timeout=timeout)
        finally:
            self._busy = False
        response = result.response
        batch = self._observation(response.observation, n, "env.step")
        self._last = batch
        return (
            self._finish(batch),
            np.array(self._rewards(response.rewards, n), dtype=np.float64),
            self._flags(response.terminated_mask, n, "terminated"),
            self._flags(response.truncated_mask, n, "truncated"),
            lane_infos(_meta_to_python(response.infos), n),
        )

    async def render(
        self,
        *,
        env_index: int = 0,
        timeout: float | None = None,  # noqa: ASYNC109 - also goes on the wire as timeout_ms
    ) -> Any:
        """One frame as a uint8 array, or ``None``.

        A lane endpoint renders lane ``env_index``; a lockstep vector env renders the
        whole vector, whatever the index (as its server does).
        """
        return await self._render(env_index, timeout)


def _add_lane_info(infos: dict[str, Any], info: Mapping[str, Any], lane: int, n: int) -> None:
    """Merge one lane's info into vector infos, as Gymnasium's vector envs do."""
    for key, value in info.items():
        if isinstance(value, Mapping):
            child = infos.get(key)
            if not isinstance(child, dict):
                child = infos[key] = {}
            _add_lane_info(child, value, lane, n)
        else:
            array = infos.get(key)
            if not isinstance(array, np.ndarray):
                if isinstance(value, bool | int | float):
                    array = np.zeros(n, dtype=type(value))
                else:
                    array = np.full(n, None, dtype=object)
                infos[key] = array
            array[lane] = value
        mask = infos.get(f"_{key}")
        if not isinstance(mask, np.ndarray):
            mask = infos[f"_{key}"] = np.zeros(n, np.bool_)
        mask[lane] = True


def _client_kwargs(
    token: str | None,
    connect_timeout: float,
    request_timeout: float | None,
    workflow_edition: str | None,
    backend: BackendName,
    settings: GrpcSettings | None,
) -> dict[str, Any]:
    if request_timeout is not None and math.isinf(request_timeout):
        request_timeout = None
    return {
        "token": token,
        "connect_timeout": connect_timeout,
        "request_timeout": request_timeout,
        "editions": _editions(workflow_edition),
        "backend": backend,
        "settings": settings if settings is not None else GrpcSettings(),
    }


@contextlib.asynccontextmanager
async def open_remote_env(
    address: str,
    *,
    token: str | None = None,
    connect_timeout: float = 10.0,
    request_timeout: float | None = DEFAULT_REQUEST_TIMEOUT,
    workflow_edition: str | None = None,
    backend: BackendName = "trio",
    settings: GrpcSettings | None = None,
) -> AsyncIterator[AsyncRemoteEnv]:
    """Connect to a single-lane env endpoint and yield it as an :class:`AsyncRemoteEnv`.

    The endpoint may be ours (``serve_env``, ``trio-rlmesh serve-env``) or RLMesh's
    (``rlmesh.EnvServer``). Leaving the block ends the session (Close); the server keeps
    running.

    Args:
        address: ``host:port``, ``tcp://host:port``, ``unix:///path`` or ``memory://name``.
        token: sent as the ``authorization`` header, if the server wants one.
        connect_timeout: seconds for connecting and the handshake.
        request_timeout: default seconds per call; ``None`` or ``math.inf`` for none.
        workflow_edition: the edition to ask for (default: the newest this package speaks).
        backend: ``"trio"`` (default) or ``"grpclib"``.
        settings: gRPC message size, keepalive and flow-control settings.

    Raises:
        SpecError: the endpoint serves more than one lane (use
            :func:`open_remote_vector_env`).
        ProtocolError: the server speaks another protocol generation, or shares no
            workflow edition with this client.
        TransportError: the server is unreachable or refused the token.
        OperationTimeout: connecting took longer than ``connect_timeout``.

    Example::

        async with open_remote_env("127.0.0.1:50051") as env:
            obs, info = await env.reset(seed=42)
            while True:
                obs, reward, terminated, truncated, info = await env.step(policy(obs))
                if terminated or truncated:
                    break
    """
    kwargs = _client_kwargs(
        token, connect_timeout, request_timeout, workflow_edition, backend, settings
    )
    async with open_env_client(address, **kwargs) as client:
        yield AsyncRemoteEnv(client)


@contextlib.asynccontextmanager
async def open_remote_vector_env(
    address: str,
    *,
    token: str | None = None,
    connect_timeout: float = 10.0,
    request_timeout: float | None = DEFAULT_REQUEST_TIMEOUT,
    workflow_edition: str | None = None,
    backend: BackendName = "trio",
    settings: GrpcSettings | None = None,
) -> AsyncIterator[AsyncRemoteVectorEnv]:
    """Connect to an env endpoint and yield all its lanes as an :class:`AsyncRemoteVectorEnv`.

    Any endpoint works, whatever its lane count: a Gymnasium vector env served in lockstep,
    a list of lane envs, or a single env (a vector of one). Arguments and errors are those
    of :func:`open_remote_env`.

    Example::

        async with open_remote_vector_env("127.0.0.1:50051") as envs:
            obs, infos = await envs.reset(seed=0)
            for _ in range(100):
                obs, rewards, terminations, truncations, infos = await envs.step(
                    envs.action_space.sample()
                )
    """
    kwargs = _client_kwargs(
        token, connect_timeout, request_timeout, workflow_edition, backend, settings
    )
    async with open_env_client(address, **kwargs) as client:
        yield AsyncRemoteVectorEnv(client)
