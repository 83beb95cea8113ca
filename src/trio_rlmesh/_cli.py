"""The ``trio-rlmesh`` console script: ``serve-env``, ``serve-model`` and ``run``.

The serving commands run until SIGINT (exit 130) or SIGTERM (exit 0), or until the
server stops by itself (remote shutdown, idle timeout; exit 0). They print the bound
address on one line and write it to ``--ready-file`` once serving. ``run`` lives in
``_cli_run``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import trio

from ._errors import SpecError

__all__ = ["load_env_target", "load_model_target", "main"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_SIGINT = 130

_CORNERS = ("predict", "predict_batch", "predict_chunk", "predict_chunk_batch")


def load_object(target: str, what: str, form: str = "module:attr") -> Any:
    """Import ``module:attr`` (dotted attributes allowed) from the installed packages or cwd.

    Raises:
        SpecError: ``target`` is not ``module:attr``, or the import or lookup failed.
    """
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise SpecError(f"{what} must be {form}, got {target!r}")
    # A console script does not put the working directory on sys.path; users expect
    # `trio-rlmesh run --model my_policy:Policy` to find ./my_policy.py.
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        value: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise SpecError(f"cannot import module {module_name!r} for {what}: {exc}") from exc
    for part in attr.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise SpecError(f"module {module_name!r} has no attribute {attr!r}") from None
    return value


def load_env_target(target: str) -> Any:
    """Resolve ENV: ``gymnasium:<id>`` (a factory calling ``gymnasium.make``) or ``module:attr``.

    ``module:attr`` may name an env, a vector env, a list of envs, or a callable returning
    one; it is returned as is (``serve_env`` calls factories itself).
    """
    module_name, _, env_id = target.partition(":")
    if module_name == "gymnasium" and env_id:

        def make() -> Any:
            import gymnasium

            return gymnasium.make(env_id)

        return make
    return load_object(target, "ENV", "gymnasium:<id> or module:attr")


def load_model_target(target: str) -> Any:
    """Resolve MODEL ``module:attr``: a class is instantiated without arguments."""
    model = load_object(target, "MODEL")
    if isinstance(model, type):
        model = model()
    if not any(hasattr(model, corner) for corner in _CORNERS):
        raise SpecError(f"{target!r} has no predict method (nor another predict corner)")
    return model


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trio-rlmesh", description="Serve and evaluate envs and models over rlmesh-wire-v1."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve_env = commands.add_parser("serve-env", help="serve a Gymnasium env")
    serve_env.add_argument("env", metavar="ENV", help="gymnasium:<id> or module:attr")
    serve_env.add_argument("--num-envs", type=int, default=None, help="lanes (factories only)")
    serve_env.add_argument(
        "--autoreset", choices=("next-step", "disabled"), default=None, help="vector envs"
    )
    serve_model = commands.add_parser("serve-model", help="serve a model")
    serve_model.add_argument("model", metavar="MODEL", help="module:attr (class or instance)")
    for sub in (serve_env, serve_model):
        sub.add_argument("--bind", default="127.0.0.1:0", help="bind address")
        sub.add_argument("--token", default=None, help="require this authorization token")
        sub.add_argument("--ready-file", type=Path, default=None, help="write the address here")

    from ._cli_run import add_run_parser

    add_run_parser(commands)
    return parser


ServeFn = Callable[[trio.TaskStatus[str]], Awaitable[None]]


async def _serve(args: argparse.Namespace, serve: ServeFn) -> int:
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

        async def run_server(task_status: trio.TaskStatus[str]) -> None:
            await serve(task_status)
            # Stopped by itself (remote shutdown, idle): end the signal watcher too.
            nursery.cancel_scope.cancel()

        address = await nursery.start(run_server)
        if args.ready_file is not None:
            # Written (atomically) before the stdout line, so either signal means ready.
            partial = args.ready_file.with_name(args.ready_file.name + ".partial")
            partial.write_text(address + "\n")
            partial.replace(args.ready_file)
        print(address, flush=True)
    return exit_code


def _serve_fn(args: argparse.Namespace) -> ServeFn:
    from .transports.grpc import serve_env, serve_model

    if args.command == "serve-env":
        env = load_env_target(args.env)

        async def serve(task_status: trio.TaskStatus[str]) -> None:
            await serve_env(
                env,
                args.bind,
                num_envs=args.num_envs,
                autoreset=args.autoreset,
                token=args.token,
                task_status=task_status,
            )

        return serve
    model = load_model_target(args.model)

    async def serve_the_model(task_status: trio.TaskStatus[str]) -> None:
        await serve_model(model, args.bind, token=args.token, task_status=task_status)

    return serve_the_model


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``trio-rlmesh`` script; returns the exit code."""
    args = _parser().parse_args(argv)
    if args.command == "run":
        return int(args.handler(args))
    try:
        serve = _serve_fn(args)
    except SpecError as exc:
        print(f"trio-rlmesh {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return trio.run(_serve, args, serve)
    except KeyboardInterrupt:
        return EXIT_SIGINT
    except Exception as exc:  # the one place a failure becomes an exit status
        cause = _sole_cause(exc)
        print(f"trio-rlmesh {args.command}: {type(cause).__name__}: {cause}", file=sys.stderr)
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
