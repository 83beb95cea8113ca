"""The ``trio-rlmesh`` console script.

``serve-env`` serves a Gymnasium env over rlmesh-wire-v1 until SIGINT/SIGTERM (exit 130 and 0)
or a remote shutdown / idle stop (exit 0). ``run`` is defined in ``_cli_run``; ``serve-model``
is not implemented yet.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import trio

__all__ = ["load_env_target", "main"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_SIGINT = 130


def load_env_target(target: str) -> Any:
    """Resolve ``gymnasium:<id>`` (a factory calling ``gymnasium.make``) or ``module:attr``.

    ``module:attr`` may name an env, a vector env, a list of envs, or a callable returning
    one; it is returned as is (``serve_env`` calls factories itself).

    Raises:
        ValueError: the target is not of either form or cannot be imported.
    """
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"ENV must be gymnasium:<id> or module:attr, got {target!r}")
    if module_name == "gymnasium":
        import gymnasium

        def make() -> Any:
            return gymnasium.make(attr)

        return make
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"cannot import module {module_name!r}: {exc}") from exc
    value: Any = module
    for part in attr.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise ValueError(f"module {module_name!r} has no attribute {attr!r}") from None
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trio-rlmesh", description="Serve and evaluate envs and models over rlmesh-wire-v1."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve_env = commands.add_parser("serve-env", help="serve a Gymnasium env")
    serve_env.add_argument("env", metavar="ENV", help="gymnasium:<id> or module:attr")
    serve_env.add_argument("--bind", default="127.0.0.1:0", help="bind address")
    serve_env.add_argument("--num-envs", type=int, default=None, help="lanes (factories only)")
    serve_env.add_argument(
        "--autoreset", choices=("next-step", "disabled"), default=None, help="vector envs"
    )
    serve_env.add_argument("--token", default=None, help="require this authorization token")
    serve_env.add_argument("--ready-file", type=Path, default=None, help="write the address here")

    from ._cli_run import add_run_parser

    add_run_parser(commands)

    stub = commands.add_parser("serve-model", help="not implemented yet")
    stub.add_argument("rest", nargs=argparse.REMAINDER)
    return parser


async def _serve_env(args: argparse.Namespace, env: Any) -> int:
    from .transports.grpc._env_server import serve_env

    exit_code = EXIT_OK
    async with trio.open_nursery() as nursery:

        async def watch_signals(task_status: trio.TaskStatus[None]) -> None:
            nonlocal exit_code
            with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                task_status.started()
                async for signum in signals:
                    exit_code = EXIT_SIGINT if signum == signal.SIGINT else EXIT_OK
                    nursery.cancel_scope.cancel()
                    return

        await nursery.start(watch_signals)

        async def serve(task_status: trio.TaskStatus[str]) -> None:
            await serve_env(
                env,
                args.bind,
                num_envs=args.num_envs,
                autoreset=args.autoreset,
                token=args.token,
                task_status=task_status,
            )
            # Stopped by itself (remote shutdown, idle): end the signal watcher too.
            nursery.cancel_scope.cancel()

        address = await nursery.start(serve)
        if args.ready_file is not None:
            # Written (atomically) before the stdout line, so either signal means ready.
            partial = args.ready_file.with_name(args.ready_file.name + ".partial")
            partial.write_text(address + "\n")
            partial.replace(args.ready_file)
        print(address, flush=True)
    return exit_code


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``trio-rlmesh`` script; returns the exit code."""
    args = _parser().parse_args(argv)
    if args.command == "run":
        return int(args.handler(args))
    if args.command != "serve-env":
        print(f"trio-rlmesh {args.command}: not implemented yet", file=sys.stderr)
        return EXIT_USAGE
    try:
        env = load_env_target(args.env)
    except ValueError as exc:
        print(f"trio-rlmesh serve-env: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return trio.run(_serve_env, args, env)
    except KeyboardInterrupt:
        return EXIT_SIGINT
    except Exception as exc:  # the one place a failure becomes an exit status
        cause = _sole_cause(exc)
        print(f"trio-rlmesh serve-env: {type(cause).__name__}: {cause}", file=sys.stderr)
        return EXIT_FAILED


def _sole_cause(exc: BaseException) -> BaseException:
    """The single leaf of nested one-member exception groups (the nurseries' wrapping)."""
    inner = getattr(exc, "exceptions", None)
    while isinstance(inner, tuple) and len(inner) == 1:
        exc = inner[0]
        inner = getattr(exc, "exceptions", None)
    return exc


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
