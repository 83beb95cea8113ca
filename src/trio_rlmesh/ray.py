"""Env fleets on Ray: env servers as Ray actors, for a fleet run (``trio-rlmesh[ray]``).

:func:`env_fleet` starts ``count`` env servers as Ray actors, each serving the env with
:func:`~trio_rlmesh.transports.grpc.serve_env` in its own process on whichever node Ray
places it, and yields their addresses; a fleet run (``run_local`` with several
addresses) then drives them all with one model. Leaving the block stops every actor,
whether it ends normally, by an error or by cancellation. An actor that dies while the
run goes takes its server with it: the run sees that endpoint fail (see
``tolerate_endpoint_failures``).

No server is open to anyone who can reach it: every fleet has a token of its own (random,
from :mod:`secrets`), every server requires it, and the fleet carries it
(:attr:`RayEnvFleet.token`), so ``RunLocalOptions(fleet, ...)`` sends it without being told.
A server whose actor Ray placed on this machine (the node of the process running the fleet)
also binds loopback only; the others bind their node's address.

Before any actor starts, the resources asked for are checked against the cluster's nodes: a
fleet the cluster cannot hold (8 servers of 1 CPU each on 2 CPUs) fails at once, saying what
was asked and what the cluster has, instead of waiting for the start timeout.

Ray is imported when :func:`env_fleet` is first entered, never by ``import trio_rlmesh``.
Without a running Ray (``ray.is_initialized()``), ``ray.init()`` is called, which
connects to the cluster named by ``RAY_ADDRESS`` or else starts a local one.

Example::

    async with env_fleet("gymnasium:CartPole-v1", 2, resources={"num_cpus": 1}) as envs:
        report = await run_local(MyModel(), RunLocalOptions(envs, max_episodes=64))
"""

from __future__ import annotations

import math
import queue
import secrets
import threading
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import trio

from . import _errors
from .runtime._internal import check_count as _check_count

__all__ = ["RayEnvFleet", "RayEnvServer", "env_fleet"]

OPERATION = "ray.env_fleet"
"""How errors of :func:`env_fleet` name their operation."""
DEFAULT_START_TIMEOUT = 120.0
"""Seconds the actors may take to be placed, start and bind (Ray may pull packages first)."""


LOOPBACK = "127.0.0.1"
"""Where a server whose actor runs on this machine binds (and is reached)."""
_RESOURCE_NAMES = {"num_cpus": "CPU", "num_gpus": "GPU", "memory": "memory"}
"""Actor options that ask for a resource, and the name Ray's nodes report it by."""


class RayEnvFleet(tuple[str, ...]):
    """The addresses of a fleet's env servers (a tuple of ``host:port``), with their actors
    and the token they require.

    Pass it as the env of a fleet run: ``RunLocalOptions(fleet, ...)`` (the token goes
    with it).
    """

    actors: tuple[Any, ...]
    """The Ray actor handles, one per address (same order)."""
    token: str
    """The token every server of the fleet requires (the ``authorization`` header)."""

    def __new__(
        cls, addresses: tuple[str, ...], actors: tuple[Any, ...], token: str
    ) -> RayEnvFleet:
        fleet = super().__new__(cls, addresses)
        fleet.actors = actors
        fleet.token = token
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

    def start(self, fleet_node: str | None = None) -> str:
        """Load the env, bind, serve in the background; returns the address to connect to.

        Without a ``host`` of its own, the server binds loopback when this actor runs on
        ``fleet_node`` (the node of the process running the fleet), else its node's IP.
        """
        from .transports.grpc import serve_env

        ray = _ray()

        env: Any = self._target
        if isinstance(env, str):
            from ._cli._internal import load_env_target

            env = load_env_target(env, self._kwargs)
        elif self._kwargs:
            target = env
            env = lambda: target(**self._kwargs)  # noqa: E731 (a factory, called per lane)
        host = self._host
        if host is None:
            here = ray.get_runtime_context().get_node_id()
            host = LOOPBACK if here == fleet_node else ray.util.get_node_ip_address()
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


def _placement_shortfall(
    count: int, resources: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]]
) -> str | None:
    """Why ``count`` actors asking ``resources`` each cannot all be placed on ``nodes``
    (``ray.nodes()``), or ``None`` when they fit. Each actor needs one node with room for
    all it asks; only the resources asked are counted (an actor that names none needs
    none).

    >>> node = {"Alive": True, "Resources": {"CPU": 2.0, "memory": 8e9}}
    >>> _placement_shortfall(2, {"num_cpus": 1}, [node]) is None
    True
    >>> print(_placement_shortfall(8, {"num_cpus": 1}, [node]))
    the cluster has CPU 2 on 1 node, room for 2 of them
    """
    asked = _asked(resources)
    if not asked:
        return None
    alive = [dict(n.get("Resources") or {}) for n in nodes if n.get("Alive", True)]
    room = sum(
        min(math.floor(node.get(name, 0.0) / amount + 1e-9) for name, amount in asked.items())
        for node in alive
    )
    if room >= count:
        return None
    has = ", ".join(
        f"{name} {_amount(sum(node.get(name, 0.0) for node in alive))}" for name in asked
    )
    nodes_text = f"{len(alive)} node" + ("" if len(alive) == 1 else "s")
    return f"the cluster has {has} on {nodes_text}, room for {room} of them"


def _asked(resources: Mapping[str, Any]) -> dict[str, float]:
    """The resources one actor asks for, by the names Ray's nodes report them under."""
    asked = {
        name: float(resources[option])
        for option, name in _RESOURCE_NAMES.items()
        if resources.get(option)
    }
    for name, amount in dict(resources.get("resources") or {}).items():
        if amount:
            asked[str(name)] = float(amount)
    return asked


def _amount(value: float) -> str:
    return f"{value:g}" if value < 1e6 else f"{value / 2**30:.1f} GiB"


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
    check_resources: bool = True,
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
        host: the address each server binds and is reached at (default: loopback for a
            server on this machine's node, its node's IP as Ray knows it for the others).
        serve_options: keyword arguments for ``serve_env`` on each server (``user_code``,
            ...). A ``token`` here is the fleet's; without one, the fleet makes its own.
        start_timeout: seconds to wait for every actor to be placed and bound. Actors
            whose resources are in use wait for them; past this the fleet fails (and stops
            whatever started).
        check_resources: refuse at once a fleet the cluster's nodes cannot hold (what
            ``resources`` asks, ``count`` times). ``False`` for a cluster that adds nodes on
            demand (an autoscaler): the actors then wait, ``start_timeout`` at most.

    Raises:
        SpecError: a bad ``count``, Ray is not installed, or the cluster cannot hold the
            fleet (the message says what was asked and what the cluster has).
        Error: an actor failed to start (its error is in the message) or the servers
            did not start within ``start_timeout``.
    """
    _check_count("env_fleet count", count, optional=False)
    ray = _ray()
    if not ray.is_initialized():
        # Connects to $RAY_ADDRESS, or starts a local Ray; takes seconds, once per process.
        ray.init()
    asked = dict(resources or {})
    if check_resources:
        shortfall = _placement_shortfall(count, asked, ray.nodes())
        if shortfall is not None:
            raise _errors.SpecError(
                f"{count} env servers on Ray asking {asked} each cannot all be placed: "
                f"{shortfall}; ask for fewer servers or less each (num_cpus=0.5 shares a "
                "CPU), or pass check_resources=False for a cluster that adds nodes on demand",
                operation=OPERATION,
            )
    options = dict(serve_options or {})
    if options.get("token") is None:  # never a server without one
        options["token"] = secrets.token_urlsafe(32)
    token: str = options["token"]
    # A Ray Client session runs elsewhere than the node it reports: loopback there would
    # be another machine's.
    fleet_node = None if _client_mode(ray) else ray.get_runtime_context().get_node_id()
    actor_class = ray.remote(RayEnvServer).options(**asked)
    actors = tuple(actor_class.remote(env_target, env_kwargs, host, options) for _ in range(count))
    try:
        refs = [actor.start.remote(fleet_node) for actor in actors]
        try:
            addresses = await trio.to_thread.run_sync(
                lambda: ray.get(refs, timeout=start_timeout), abandon_on_cancel=True
            )
        except ray.exceptions.GetTimeoutError:
            raise _errors.Error(
                f"{count} env servers on Ray did not all start within {start_timeout} s; "
                f"each asks for {asked}, and the cluster has {_free(ray, asked)} free",
                operation=OPERATION,
            ) from None
        except ray.exceptions.RayError as exc:
            # A task's error carries the actor's own exception as its cause; its text is
            # the whole remote traceback, in colour.
            cause = getattr(exc, "cause", None) or exc
            raise _errors.Error(
                f"an env server actor failed to start: {cause}", operation=OPERATION
            ) from exc
        yield RayEnvFleet(tuple(addresses), actors, token)
    finally:
        for actor in actors:
            # Ends the actor's process (and with it its server) at once, on any exit.
            ray.kill(actor, no_restart=True)


def _client_mode(ray: Any) -> bool:
    """Whether this process reaches its cluster through Ray Client (``ray://``)."""
    client = getattr(getattr(ray.util, "client", None), "ray", None)
    return bool(client is not None and client.is_connected())


def _free(ray: Any, asked: Mapping[str, Any]) -> str:
    """The cluster's free amounts of what an actor asks for (else of its CPUs), for a
    message: ``CPU 0.5, GPU 0``. Ray leaves out a resource none is free of."""
    free = ray.available_resources()
    names = list(_asked(asked)) or ["CPU"]
    return ", ".join(f"{name} {_amount(free.get(name, 0.0))}" for name in names)
