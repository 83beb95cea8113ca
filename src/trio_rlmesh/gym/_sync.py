"""Synchronous ``gymnasium.Env`` / ``gymnasium.vector.VectorEnv`` over a remote env endpoint.

Each instance owns a private trio thread (:class:`~._thread.TrioThread`) that holds the async
remote env (:mod:`._async`); every ``reset``, ``step`` and ``render`` is one hand-off to that
thread and back. ``close()`` ends the session and the thread; so do leaving a ``with`` block,
garbage collection and interpreter exit (a ``weakref.finalize``, which also runs at exit),
each bounded so that none of them can hang.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium
import gymnasium.vector
import numpy as np
from typing_extensions import Self

from .._errors import SpecError
from .._timeouts import SYNC_CLOSE_TIMEOUT
from ..transports.grpc import BackendName, GrpcSettings
from ._async import (
    DEFAULT_REQUEST_TIMEOUT,
    AsyncRemoteVectorEnv,
    open_remote_env,
    open_remote_vector_env,
)
from ._thread import TrioThread

__all__ = ["RemoteEnv", "RemoteVectorEnv"]


class _Bound:
    """What :func:`_start` binds on a sync remote env: its thread and the async env's calls."""

    _runner: TrioThread[Any]
    _finalizer: weakref.finalize[Any, Any]
    _call: Callable[..., Any]
    _step: Callable[..., Any]
    _reset: Callable[..., Any]
    _render: Callable[..., Any]
    address: str
    """The endpoint's display address."""


def _start(
    owner: RemoteEnv | RemoteVectorEnv,
    opener: Callable[..., Any],
    address: str,
    render_mode: str | None,
    check: Callable[[Any], None] | None = None,
    **options: Any,
) -> Any:
    """Open the async remote env on a private trio thread and bind ``owner`` to it.

    Runs ``check`` on the opened env (and the render-mode check) before binding; on any
    refusal the thread is closed before the error propagates. Returns the async env.
    """
    kind = type(owner).__name__
    runner: TrioThread[Any] = TrioThread(
        functools.partial(opener, address, **options),
        name=f"trio-rlmesh {kind} {address}",
        close_timeout=SYNC_CLOSE_TIMEOUT,
    )
    remote = runner.resource
    try:
        if render_mode is not None and render_mode != remote.render_mode:
            raise SpecError(
                f"render_mode={render_mode!r}: the remote env renders in "
                f"{remote.render_mode!r}, set by its server; a remote env cannot be made "
                "with another render mode",
                operation="env.handshake",
            )
        if check is not None:
            check(remote)
    except BaseException:
        runner.close()
        raise
    owner._runner = runner
    owner._finalizer = weakref.finalize(owner, runner.close)
    owner._call = runner.call
    owner._step = remote.step
    owner._reset = remote.reset
    owner._render = remote.render
    owner.address = remote.address
    owner.observation_space = remote.observation_space
    owner.action_space = remote.action_space
    owner.metadata = remote.metadata
    owner.render_mode = remote.render_mode
    return remote


class RemoteEnv(_Bound, gymnasium.Env[Any, Any]):
    """A remote single-lane env as a synchronous ``gymnasium.Env``.

    Works with any rlmesh-wire-v1 env server (``serve_env``, ``trio-rlmesh serve-env``,
    ``rlmesh.EnvServer``). Values are numpy, in the dtypes of the Gymnasium spaces;
    ``np_random`` is seeded locally, like any Gymnasium env's, by ``reset(seed=...)``,
    which also sends the seed to the remote env.

    Args:
        address: ``host:port``, ``tcp://host:port`` or ``unix:///path``.
        token: the server's auth token, if it wants one.
        connect_timeout: seconds for connecting and the handshake.
        request_timeout: deadline of every reset, step and render in seconds (``None`` or
            ``math.inf`` for none).
        workflow_edition: the workflow edition to ask for (default: the newest supported).
        backend: ``"trio"`` (default) or ``"grpclib"``.
        settings: gRPC settings (message size, keepalive, flow control).
        render_mode: must be ``None`` or the server's render mode (a remote env renders
            in the mode its server was started with).

    Raises:
        SpecError: the endpoint serves several lanes (use :class:`RemoteVectorEnv`), or
            ``render_mode`` differs from the server's.
        ProtocolError: the server speaks another protocol generation, or shares no
            workflow edition with this client.
        TransportError: the server is unreachable or refused the token.
        OperationTimeout: connecting took longer than ``connect_timeout``.

    Example::

        with RemoteEnv("127.0.0.1:50051") as env:
            obs, info = env.reset(seed=0)
            obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 - Gymnasium's convention

    def __init__(
        self,
        address: str,
        *,
        token: str | None = None,
        connect_timeout: float = 10.0,
        request_timeout: float | None = DEFAULT_REQUEST_TIMEOUT,
        workflow_edition: str | None = None,
        backend: BackendName = "trio",
        settings: GrpcSettings | None = None,
        render_mode: str | None = None,
    ) -> None:
        _start(
            self,
            open_remote_env,
            address,
            render_mode,
            token=token,
            connect_timeout=connect_timeout,
            request_timeout=request_timeout,
            workflow_edition=workflow_edition,
            backend=backend,
            settings=settings,
        )

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset the remote env (and seed ``np_random`` when ``seed`` is given)."""
        super().reset(seed=seed)
        result: tuple[Any, dict[str, Any]] = self._call(self._reset, seed=seed, options=options)
        return result

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """Step the remote env: ``(obs, reward, terminated, truncated, info)``."""
        result: tuple[Any, float, bool, bool, dict[str, Any]] = self._call(self._step, action)
        return result

    def render(self) -> Any:
        """The server's frame as a uint8 array, or ``None`` when it renders nothing."""
        return self._call(self._render)

    def close(self) -> None:
        """End the session and the private thread; idempotent, never raises."""
        self._finalizer()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has run."""
        return not self._finalizer.alive


class RemoteVectorEnv(_Bound, gymnasium.vector.VectorEnv[Any, Any, Any]):
    """Every lane of a remote env endpoint as a synchronous ``gymnasium.vector.VectorEnv``.

    The endpoint may serve a Gymnasium vector env (its lanes step in lockstep and it
    autoresets as its ``metadata["autoreset_mode"]`` says) or a list of lane envs (no
    autoreset; ``reset(options={"reset_mask": mask})`` resets single lanes). Observations,
    rewards and flags are batched numpy arrays; infos are Gymnasium's vector infos (a
    dict of per-lane arrays).

    Args:
        address: as for :class:`RemoteEnv`.
        num_envs: if given, the lane count the endpoint must serve
            (``gymnasium.make_vec`` passes it).
        token: as for :class:`RemoteEnv`, like every other keyword (``connect_timeout``,
            ``request_timeout``, ``workflow_edition``, ``backend``, ``settings``,
            ``render_mode``).

    Raises:
        SpecError: ``num_envs`` is not the endpoint's lane count, or ``render_mode``
            differs from the server's.
        ProtocolError, TransportError, OperationTimeout: as for :class:`RemoteEnv`.

    Example::

        with RemoteVectorEnv("127.0.0.1:50051") as envs:
            obs, infos = envs.reset(seed=0)
            obs, rewards, terminations, truncations, infos = envs.step(
                envs.action_space.sample()
            )
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 - Gymnasium's convention

    def __init__(
        self,
        address: str,
        *,
        num_envs: int | None = None,
        token: str | None = None,
        connect_timeout: float = 10.0,
        request_timeout: float | None = DEFAULT_REQUEST_TIMEOUT,
        workflow_edition: str | None = None,
        backend: BackendName = "trio",
        settings: GrpcSettings | None = None,
        render_mode: str | None = None,
    ) -> None:
        def check_lanes(remote: AsyncRemoteVectorEnv) -> None:
            if num_envs is not None and num_envs != remote.num_envs:
                raise SpecError(
                    f"num_envs={num_envs}: the env at {remote.address} serves "
                    f"{remote.num_envs} lanes",
                    operation="env.handshake",
                    address=remote.address,
                )

        remote: AsyncRemoteVectorEnv = _start(
            self,
            open_remote_vector_env,
            address,
            render_mode,
            check_lanes,
            token=token,
            connect_timeout=connect_timeout,
            request_timeout=request_timeout,
            workflow_edition=workflow_edition,
            backend=backend,
            settings=settings,
        )
        self.num_envs = remote.num_envs
        self.single_observation_space = remote.single_observation_space
        self.single_action_space = remote.single_action_space

    def reset(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[Any, dict[str, Any]]:
        """Reset every lane (or those in ``options["reset_mask"]``).

        An int ``seed`` seeds lane ``i`` with ``seed + i`` and ``np_random`` with ``seed``;
        a list gives one seed per lane.
        """
        if isinstance(seed, int | np.integer):
            super().reset(seed=int(seed))
        result: tuple[Any, dict[str, Any]] = self._call(self._reset, seed=seed, options=options)
        return result

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        """Step every lane: ``(obs, rewards, terminations, truncations, infos)``."""
        result: tuple[Any, Any, Any, Any, dict[str, Any]] = self._call(self._step, actions)
        return result

    def render(self) -> Any:
        """A frame from the server (lane 0, or the whole lockstep vector), or ``None``."""
        return self._call(self._render)

    def close_extras(self, **kwargs: Any) -> None:
        """End the session and the private thread (``close()`` calls this once)."""
        self._finalizer()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
