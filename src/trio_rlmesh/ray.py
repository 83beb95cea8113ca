"""Env fleets on Ray: env servers as Ray actors, for a fleet run (``trio-rlmesh[ray]``).

:func:`env_fleet` starts ``count`` env servers as Ray actors, each serving the env with
:func:`~trio_rlmesh.transports.grpc.serve_env` in its own process on whichever node Ray
places it, and yields their addresses; a fleet run (``run_local`` with several
addresses) then drives them all with one model. Leaving the block stops every actor,
whether it ends normally, by an error or by cancellation. An actor that dies while the
run goes takes its server with it: the run sees that endpoint fail (see
``tolerate_endpoint_failures``).

Ray is imported when :func:`env_fleet` is first entered, never by ``import trio_rlmesh``.
Without a running Ray (``ray.is_initialized()``), ``ray.init()`` is called, which
connects to the cluster named by ``RAY_ADDRESS`` or else starts a local one.

Example::

    async with env_fleet("gymnasium:CartPole-v1", 8, resources={"num_cpus": 1}) as envs:
        report = await run_local(MyModel(), RunLocalOptions(envs, max_episodes=64))
"""

from __future__ import annotations

import queue
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import trio

from . import _errors

__all__ = ["RayEnvFleet", "RayEnvServer", "env_fleet"]

OPERATION = "ray.env_fleet"
"""How errors of :func:`env_fleet` name their operation."""
DEFAULT_START_TIMEOUT = 120.0
"""Seconds the actors may take to be placed, start and bind (Ray may pull packages first)."""


class RayEnvFleet(tuple[str, ...]):
    """The addresses of a fleet's env servers (a tuple of ``host:port``), with their actors.

    Pass it as the env of a fleet run: ``RunLocalOptions(fleet, ...)``.
    """

    actors: tuple[Any, ...]
    """The Ray actor handles, one per address (same order)."""

    def __new__(cls, addresses: tuple[str, ...], actors: tuple[Any, ...]) -> RayEnvFleet:
        fleet = super().__new__(cls, addresses)
        fleet.actors = actors
        return fleet


class RayEnvServer:
    """The actor class: one env server, serving in a thread of the actor's process.

    Built by Ray (``ray.remote(RayEnvServer)``) in the process Ray gives the actor;
    :func:`env_fleet` is the way to start it. ``env_target`` is a target string as
    ``trio-rlmesh serve-env`` takes (``gymnasium:<id>``, ``module:attr``; the module must
    be importable on the node) or a picklable callable returning an env.
    """

    def __init__(
        self,
        env_target: str | Callable[[], Any],
        env_kwargs: Mapping[str, Any] | None = None,
        host: str | None = None,
        serve_options: Mapping[str, Any] | None = None,
    ) -> None:
        self._target = env_target
        self._kwargs = dict(env_kwargs or {})
        self._host = host
        self._serve_options = dict(serve_options or {})

    def start(self) -> str:
        """Load the env, bind, serve in the background; returns the address to connect to."""
        from .transports.grpc import serve_env

        ray = _ray()

        env: Any = self._target
        if isinstance(env, str):
            from ._cli._internal import load_env_target

            env = load_env_target(env, self._kwargs)
        elif self._kwargs:
            target = env
            env = lambda: target(**self._kwargs)  # noqa: E731 (a factory, called per lane)
        host = self._host or ray.util.get_node_ip_address()
        ready: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()

        async def serve() -> None:
            async with trio.open_nursery() as nursery:
                bound = await nursery.start(
                    lambda task_status: serve_env(
                        env, f"{host}:0", task_status=task_status, **self._serve_options
                    )
                )
                ready.put(("ok", bound))

        def run() -> None:
            try:
                trio.run(serve)
            except BaseException as exc:
                from ._cli._internal import unwrap

                cause = unwrap(exc)  # not the nursery's ExceptionGroup around it
                ready.put(("error", f"{type(cause).__name__}: {cause}"))

        # It serves until the actor's process ends (``ray.kill``, or the actor dying).
        threading.Thread(target=run, name="trio-rlmesh env server", daemon=True).start()
        kind, value = ready.get()
        if kind == "error":
            raise RuntimeError(f"the env server did not start: {value}")
        port = str(value).rpartition(":")[2]
        return f"{host}:{port}"


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise _errors.SpecError(
            "env_fleet needs Ray: pip install 'trio-rlmesh[ray]'", operation=OPERATION
        ) from None
    return ray


@asynccontextmanager
async def env_fleet(
    env_target: str | Callable[[], Any],
    count: int,
    resources: Mapping[str, Any] | None = None,
    *,
    env_kwargs: Mapping[str, Any] | None = None,
    host: str | None = None,
    serve_options: Mapping[str, Any] | None = None,
    start_timeout: float = DEFAULT_START_TIMEOUT,
) -> AsyncIterator[RayEnvFleet]:
    """Start ``count`` env servers as Ray actors; yield their addresses; stop them on exit.

    Args:
        env_target: what each server serves: a target string as for ``serve-env``
            (``gymnasium:CartPole-v1``, ``module:attr``; importable on every node), or a
            picklable callable returning an env.
        count: how many servers (each its own actor, in its own process).
        resources: Ray actor options for each one, as ``actor.options(...)`` takes them
            (``{"num_cpus": 1}``, ``{"num_gpus": 0.25}``, ``{"resources": {"sim": 1}}``...).
        env_kwargs: keyword arguments for the env target (a factory's or a class's).
        host: the address each server binds and is reached at (default: its node's IP, as
            Ray knows it). ``"127.0.0.1"`` for a local Ray on one machine.
        serve_options: keyword arguments for ``serve_env`` on each server (``token``,
            ``user_code``, ...).
        start_timeout: seconds to wait for every actor to be placed and bound. Actors
            that need more resources than the cluster has wait for them; past this the
            fleet fails (and stops whatever started).

    Raises:
        SpecError: a bad ``count``, or Ray is not installed.
        Error: an actor failed to start (its error is in the message) or the servers
            did not start within ``start_timeout``.
    """
    if count < 1:
        raise _errors.SpecError(f"env_fleet needs a count of 1 or more servers, got {count}")
    ray = _ray()
    if not ray.is_initialized():
        # Connects to $RAY_ADDRESS, or starts a local Ray; takes seconds, once per process.
        ray.init()
    actor_class = ray.remote(RayEnvServer).options(**dict(resources or {}))
    actors = tuple(
        actor_class.remote(env_target, env_kwargs, host, serve_options) for _ in range(count)
    )
    try:
        refs = [actor.start.remote() for actor in actors]
        try:
            addresses = await trio.to_thread.run_sync(
                lambda: ray.get(refs, timeout=start_timeout), abandon_on_cancel=True
            )
        except ray.exceptions.GetTimeoutError:
            raise _errors.Error(
                f"{count} env servers on Ray did not all start within {start_timeout} s; "
                f"does the cluster have the resources each asks for ({dict(resources or {})})?",
                operation=OPERATION,
            ) from None
        except ray.exceptions.RayError as exc:
            # A task's error carries the actor's own exception as its cause; its text is
            # the whole remote traceback, in colour.
            cause = getattr(exc, "cause", None) or exc
            raise _errors.Error(
                f"an env server actor failed to start: {cause}", operation=OPERATION
            ) from exc
        yield RayEnvFleet(tuple(addresses), actors)
    finally:
        for actor in actors:
            # Ends the actor's process (and with it its server) at once, on any exit.
            ray.kill(actor, no_restart=True)
