"""``trio-rlmesh serve-env`` and ``trio-rlmesh serve-model``.

Both run until SIGINT (exit 130) or SIGTERM (exit 0), or until the server stops by itself
(remote shutdown, idle timeout; exit 0). They print the bound address on one line and
write it to ``--ready-file`` once serving.
"""

from __future__ import annotations

import argparse
import math
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

import trio

from ..runtime._internal import SERVING_USER_CODE_MODES, busy_worker_threads
from ..transports.grpc import ServerLimits
from ._exit import EXIT_CANCELLED, EXIT_OK, Interrupts, UsageError, describe
from ._targets import (
    add_env_kwargs_options,
    add_grpc_backend_option,
    check_bind_address,
    env_kwargs,
    load_env_target,
    load_model_target,
)
from ._tokens import add_token_options, resolve_token

__all__ = ["add_serve_parsers"]

ServeFn = Callable[[trio.TaskStatus[str]], Awaitable[None]]

SERVE_OPTIONS: Final = {
    "num_envs": "--num-envs",
    "drain_timeout": "--drain-timeout",
    "max_connections": "--max-connections",
    "idle_connection_timeout": "--idle-connection-timeout",
}
"""The ``serve_env``/``serve_model`` arguments (and :class:`ServerLimits` fields) set from
an option, by name: their errors (they check the values, not this module) name the option
instead."""

DEFAULT_LIMITS = ServerLimits()
DEFAULT_DRAIN_TIMEOUT = 5.0
STUCK_THREAD_WAIT = 0.2
"""Seconds a stopped server waits for its worker threads to end before saying which
still run user code (abandoned, hung) as the process exits."""
STOP_MARGIN = 2.0
"""Seconds past the drain timeout a signalled server may take to stop before the process
ends anyway (closing connections and the env, joining worker threads)."""


def _exit_code(signum: signal.Signals) -> int:
    return EXIT_CANCELLED if signum == signal.SIGINT else EXIT_OK


def add_serve_parsers(commands: Any) -> None:
    """Add ``serve-env`` and ``serve-model`` to the script's subcommands."""
    serve_env = commands.add_parser("serve-env", help="serve a Gymnasium env")
    serve_env.add_argument("env", metavar="ENV", help="gymnasium:<id> or module:attr")
    serve_env.add_argument(
        "--num-envs",
        type=int,
        default=None,
        help="lanes, one env each (gymnasium:<id>, a class or a function)",
    )
    from ..transports.grpc._internal import AUTORESET_MODES

    serve_env.add_argument(
        "--autoreset", choices=tuple(AUTORESET_MODES), default=None, help="vector envs"
    )
    add_env_kwargs_options(serve_env)
    serve_env.set_defaults(handler=serve_env_command)
    serve_model = commands.add_parser("serve-model", help="serve a model")
    serve_model.add_argument(
        "model",
        metavar="MODEL",
        help="module:attr (class or instance), or 'random' (samples each env's action space)",
    )
    serve_model.set_defaults(handler=serve_model_command)
    for sub in (serve_env, serve_model):
        sub.add_argument("--bind", default="127.0.0.1:0", help="bind address")
        add_token_options(sub, "require this authorization token")
        sub.add_argument(
            "--drain-timeout",
            type=float,
            default=DEFAULT_DRAIN_TIMEOUT,
            metavar="S",
            help=f"on SIGINT/SIGTERM, let requests in progress finish for S seconds "
            f"(default {DEFAULT_DRAIN_TIMEOUT:g})",
        )
        sub.add_argument("--ready-file", type=Path, default=None, help="write the address here")
        what, calls, owner = ("env", "a lane's steps", "lane")
        if sub is serve_model:
            what, calls, owner = "model", "predicts", "model"
        sub.add_argument(
            "--user-code",
            choices=SERVING_USER_CODE_MODES,
            default="auto",
            help=f"where the {what}'s code runs. auto (default): {calls} inline on the event "
            f"loop while they are quick (under 5 ms), the rest on the {owner}'s worker thread; "
            "thread: always on the worker thread (a stuck call can be abandoned); inline: "
            "always on the event loop",
        )
        add_grpc_backend_option(sub)
        sub.add_argument(
            "--max-connections",
            type=int,
            default=DEFAULT_LIMITS.max_connections,
            metavar="N",
            help="connections served at once; past it, the one idle longest is closed "
            f"(default {DEFAULT_LIMITS.max_connections})",
        )
        sub.add_argument(
            "--idle-connection-timeout",
            type=float,
            default=DEFAULT_LIMITS.idle_connection_timeout,
            metavar="S",
            help="close a connection that has had no call for S seconds "
            f"(default {DEFAULT_LIMITS.idle_connection_timeout:g})",
        )


def serve_env_command(args: argparse.Namespace) -> int:
    """Entry point of ``trio-rlmesh serve-env``; returns the exit status."""
    from ..transports.grpc import serve_env

    def prepare() -> ServeFn:
        check_bind_address(args.bind)
        limits = _server_limits(args)
        token = resolve_token(args)
        env = load_env_target(args.env, env_kwargs(args.env_kwargs, args.env_arg))

        async def serve(task_status: trio.TaskStatus[str]) -> None:
            await serve_env(
                env,
                args.bind,
                num_envs=args.num_envs,
                autoreset=args.autoreset,
                token=token,
                drain_timeout=args.drain_timeout,
                user_code=args.user_code,
                backend=args.grpc_backend,
                limits=limits,
                task_status=task_status,
            )

        return serve

    return _run_server(args, prepare)


def serve_model_command(args: argparse.Namespace) -> int:
    """Entry point of ``trio-rlmesh serve-model``; returns the exit status."""
    from ..transports.grpc import serve_model

    def prepare() -> ServeFn:
        check_bind_address(args.bind)
        limits = _server_limits(args)
        token = resolve_token(args)
        model = load_model_target(args.model)

        async def serve(task_status: trio.TaskStatus[str]) -> None:
            await serve_model(
                model,
                args.bind,
                token=token,
                drain_timeout=args.drain_timeout,
                user_code=args.user_code,
                backend=args.grpc_backend,
                limits=limits,
                task_status=task_status,
            )

        return serve

    return _run_server(args, prepare)


def _server_limits(args: argparse.Namespace) -> ServerLimits:
    """The limits the options ask for (ServerLimits validates them; :data:`SERVE_OPTIONS`
    names them as the options)."""
    try:
        return ServerLimits(
            max_connections=args.max_connections,
            idle_connection_timeout=args.idle_connection_timeout,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _grace(drain_timeout: float) -> float | None:
    """How long a signalled server may take to stop before the process ends anyway."""
    if drain_timeout == math.inf:
        return None  # asked to drain without a limit: nothing cuts it short
    # A timeout serve_* refuses (negative, NaN) never drains: the margin alone.
    return (drain_timeout if drain_timeout >= 0 else 0.0) + STOP_MARGIN


def _run_server(args: argparse.Namespace, prepare: Callable[[], ServeFn]) -> int:
    interrupts = Interrupts(grace=_grace(args.drain_timeout), exit_code=_exit_code)
    with interrupts.installed():
        try:
            serve = prepare()
            code = trio.run(_serve, args, serve, interrupts)
        except Exception as exc:  # the one place a failure becomes an exit status
            failure = describe(exc, SERVE_OPTIONS)
            print(f"trio-rlmesh {args.command}: {failure.message}", file=sys.stderr)
            return failure.exit_code
        stuck = busy_worker_threads(wait=STUCK_THREAD_WAIT)
        if stuck:
            print(
                f"trio-rlmesh {args.command}: exiting with user code it abandoned still running "
                f"on {len(stuck)} worker thread(s): {', '.join(stuck)}",
                file=sys.stderr,
            )
        return code


async def _serve(args: argparse.Namespace, serve: ServeFn, interrupts: Interrupts) -> int:
    try:
        async with trio.open_nursery() as nursery:
            interrupts.arm(lambda _signum: nursery.cancel_scope.cancel())

            async def run_server(task_status: trio.TaskStatus[str]) -> None:
                await serve(task_status)
                # Stopped by itself (remote shutdown, idle): nothing else to wait for.
                nursery.cancel_scope.cancel()

            address = await nursery.start(run_server)
            if args.ready_file is not None:
                # Written (atomically) before the stdout line, so either signal means ready.
                partial = args.ready_file.with_name(args.ready_file.name + ".partial")
                partial.write_text(address + "\n")
                partial.replace(args.ready_file)
            print(address, flush=True)
    finally:
        interrupts.disarm()
    return EXIT_OK if interrupts.received is None else _exit_code(interrupts.received)
