"""``trio-rlmesh run``: evaluate a model against an env, with progress, tables and a JSON report."""

from __future__ import annotations

import argparse
import contextlib
import functools
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

import attrs
import trio

from .._errors import Error, SpecError, TransportError
from .._facade import RunLocalOptions
from ..record import RecordOptions
from ..runtime import RuntimeDriver, RuntimeHooks, RuntimeReport
from ..runtime._internal import (
    DEFAULT_FUSE_WAIT,
    SERVING_USER_CODE_MODES,
    FleetRun,
    ServingUserCode,
    check_count,
)
from ._exit import (
    EXIT_CANCELLED,
    EXIT_FAILED,
    EXIT_OK,
    Failure,
    Interrupts,
    UsageError,
    describe,
    unwrap,
)
from ._explain import env_contract, pairing, show_pairing
from ._output import (
    STDOUT,
    UnwritableReport,
    check_writable,
    empty_report_dict,
    episodes_table,
    file_reason,
    format_endpoints,
    format_summary,
    plural,
    read_text_file,
    write_json,
)
from ._policies import RANDOM_MODEL, HeuristicCartPole, RandomPolicy, is_cartpole
from ._targets import (
    GymnasiumFactory,
    add_env_kwargs_options,
    add_grpc_backend_option,
    check_address,
    env_kwargs,
    is_address,
    load_env_target,
    load_model_target,
)
from ._terminal import LiveProgress, RunProgress, open_console
from ._tokens import (
    ENV_TOKEN_VARIABLE,
    MODEL_TOKEN_VARIABLE,
    TOKEN_VARIABLE,
    Side,
    add_side_token_options,
    add_token_options,
    explicit_side_token,
    resolve_token,
)

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["add_run_parser", "run_command"]

DEFAULT_ENV = "gymnasium:CartPole-v1"
DEFAULT_EPISODES = 10
PROBE_TIMEOUT = 5.0
"""Seconds a handshake that tells an env server from a model server may take."""
CANCEL_GRACE = 1.5
"""Seconds a run may spend stopping after SIGINT/SIGTERM (releasing the model, closing the env
session, stopping an in-process env server) before the process ends anyway, writing the
episodes it finished."""
RECORD_CANCEL_GRACE = 15.0
"""The same for a recorded run, which also writes the episodes it counted and still queues."""
FREEZE_TIMEOUT = 10.0
"""Seconds a process that must end at once waits for a recording's write in progress."""
API_OPTIONS: Final = {
    "episode_seeds": "--seeds",
    "base_seed": "--base-seed",
    "max_episodes": "--episodes",
    "max_episode_steps": "--max-episode-steps",
    "max_episode_seconds": "--max-episode-seconds",
    "execution_horizon": "--execution-horizon",
    "prefetch_lead": "--prefetch-lead",
    "fuse_wait": "--fuse-wait",
    "tolerate_endpoint_failures": "--tolerate-endpoint-failures",
    "user_code": "--user-code",
    "grpc_backend": "--grpc-backend",
}
"""The :class:`~trio_rlmesh.RunLocalOptions` fields ``run`` sets from an option, by name: each
field takes its option's value (one not given leaves the field's default), and the options'
errors name the option instead. ``run`` checks none of these values itself: the options do
(see :func:`_run_options`), so the command line and the Python API refuse the same values
with the same words."""


def add_run_parser(commands: Any) -> None:
    """Add ``run`` to the script's subcommands."""
    p: argparse.ArgumentParser = commands.add_parser(
        "run",
        help="evaluate a model against an env",
        description=(
            "Evaluate a model against an env. With no --env, Gymnasium's CartPole-v1 is served "
            "in-process on loopback. With no --model, a built-in heuristic policy runs on "
            "CartPole and a random policy (--model random) on any other env."
        ),
    )
    p.add_argument(
        "--env",
        action="append",
        metavar="TARGET",
        help="gymnasium:<id>, module:attr, or an env server address; repeat it with "
        "addresses to evaluate over a fleet of env servers in one run",
    )
    p.add_argument(
        "--envs-file",
        type=Path,
        metavar="PATH",
        help="env server addresses, one per line (blank lines and # comments skipped), "
        "added to the fleet",
    )
    p.add_argument(
        "--tolerate-endpoint-failures",
        action="store_true",
        help="fleet runs: go on without an env server that fails, and run the episodes "
        "it was running again on the others (same seeds)",
    )
    p.add_argument(
        "--fuse-wait",
        type=float,
        metavar="S",
        help="fleet runs: how long a fused predict waits for the other env servers' "
        f"requests, in seconds (default {DEFAULT_FUSE_WAIT:g}; 0 takes what is ready: fewer "
        "rows per model call, often more steps/s with a cheap model)",
    )
    p.add_argument(
        "--ray-envs",
        type=int,
        metavar="N",
        help="serve the --env target on N Ray actors and evaluate over that fleet "
        "(needs trio-rlmesh[ray]; the cluster of $RAY_ADDRESS, else a local Ray)",
    )
    add_env_kwargs_options(p)
    p.add_argument(
        "--model", help="module:attr, a model server address, or 'random' (samples actions)"
    )
    p.add_argument("--episodes", type=int, help=f"episodes to run (default {DEFAULT_EPISODES})")
    p.add_argument("--seeds", help="seed list 0,1,2 or range 0..39")
    p.add_argument("--base-seed", type=int, help="derive reset seeds from this seed")
    p.add_argument("--max-episode-steps", type=int, help="truncate episodes after N steps")
    p.add_argument("--max-episode-seconds", type=float, help="truncate episodes after S seconds")
    p.add_argument("--execution-horizon", type=int, default=1, help="actions per predict")
    p.add_argument("--prefetch-lead", type=int, default=0, help="frames of prefetch overlap")
    p.add_argument(
        "--user-code",
        choices=SERVING_USER_CODE_MODES,
        help="where this process runs user code: the model's, and the env's when it is served "
        "here (no --env address) or on Ray actors. auto (each one's default): calls inline "
        "on the event loop while they are quick, on a worker thread once one is slow; "
        "thread: always on a worker thread (a call that hangs can be abandoned at its "
        "deadline or on Ctrl-C); inline: always on the event loop",
    )
    add_grpc_backend_option(p)
    add_token_options(p, "auth token for the env and model servers")
    add_side_token_options(p)
    p.add_argument(
        "--json", type=Path, metavar="PATH", help="write the report as JSON to PATH ('-': stdout)"
    )
    p.add_argument("--telemetry", action="store_true", help="print the table of timings too")
    p.add_argument("--no-progress", action="store_true", help="no live progress bar")
    p.add_argument(
        "--record",
        type=Path,
        metavar="DATASET_DIR",
        help="write every counted episode to a new Minari dataset in DATASET_DIR (name-v<N>)",
    )
    p.add_argument(
        "--record-video",
        type=Path,
        metavar="DIR",
        help="write one MP4 per counted episode to DIR, from rgb_array frames (a "
        "gymnasium:<id> env is made with them; other envs must render them)",
    )
    p.set_defaults(handler=run_command)


@attrs.frozen
class _Plan:
    """A run, checked and loaded before anything starts."""

    options: RunLocalOptions
    """The run's options, checked; :func:`_evaluate` only sets the env servers' addresses."""
    env_label: str
    env_addresses: tuple[str, ...]
    """The env servers to connect to (several: a fleet); empty: serve :attr:`env`
    in-process."""
    env: Any
    """The env target loaded, to serve in-process (``None`` for servers)."""
    ray_envs: int | None
    """Serve :attr:`env_label` on this many Ray actors (``--ray-envs``)."""
    env_kwargs: dict[str, Any]
    model_label: str
    model_address: str | None
    model: Any
    """The model object; ``None`` for a model server or a baseline chosen at connect."""
    baseline: Literal["default", "random"] | None = None
    """``default``: no ``--model`` (the heuristic on CartPole, else random); ``random``."""
    env_token: str | None = None
    model_token: str | None = None
    record: RecordOptions | None = None
    """What to record (``--record``, ``--record-video``); the model is named at connect."""

    @property
    def episodes(self) -> int:
        """How many episodes the run counts."""
        assert self.options.max_episodes is not None
        return int(self.options.max_episodes)

    @property
    def seed(self) -> int | None:
        """The run's seed (``--base-seed``, else the first of ``--seeds``), for the random
        policy."""
        if self.options.base_seed is not None:
            return int(self.options.base_seed)
        return self.options.episode_seeds[0] if self.options.episode_seeds else None

    @property
    def user_code(self) -> ServingUserCode | None:
        """``--user-code``: for the model, and for an env served here or on Ray actors."""
        return self.options.user_code

    @property
    def grpc_backend(self) -> Literal["trio", "grpclib"]:
        """``--grpc-backend``: how this process speaks gRPC to the servers."""
        return self.options.grpc_backend

    @property
    def env_address(self) -> str | None:
        """The first env server (the only one unless this is a fleet)."""
        return self.env_addresses[0] if self.env_addresses else None


def read_envs_file(path: Path) -> list[str]:
    """The addresses of an ``--envs-file``: one per line, blank lines and ``#`` comments
    skipped.

    Raises:
        UsageError: the file cannot be read.
    """
    text = read_text_file(path, "--envs-file")
    lines = (line.split("#", 1)[0].strip() for line in text.splitlines())
    return [line for line in lines if line]


def _env_targets(args: argparse.Namespace) -> list[str]:
    """Every ``--env`` and every address of ``--envs-file``, in that order."""
    targets: list[str] = list(args.env or [])
    if args.envs_file is not None:
        listed = read_envs_file(args.envs_file)
        if not listed:
            raise UsageError(f"--envs-file {args.envs_file} lists no address")
        for address in listed:
            if not is_address(address):
                raise UsageError(
                    f"--envs-file {args.envs_file}: {address!r} is not an env server address "
                    "(host:port, tcp://host:port or unix:///path)"
                )
        targets += listed
    return targets


@contextlib.contextmanager
def _usage_errors() -> Iterator[None]:
    """What :class:`~trio_rlmesh.RunLocalOptions` refuses is a mistake on the command line."""
    try:
        yield
    except SpecError as exc:
        raise UsageError(str(exc)) from None


def _run_options(
    args: argparse.Namespace, env: Any, env_token: str | None, record: RecordOptions | None
) -> RunLocalOptions:
    """The run's :class:`~trio_rlmesh.RunLocalOptions`, from the options as typed.

    The options check every value (an error here is a usage error, named by the option in
    :data:`API_OPTIONS`); ``env`` is what they know of the env so far (the servers'
    addresses, the target served here, or ``None`` for servers not started yet).
    """
    typed = {
        field: getattr(args, option.removeprefix("--").replace("-", "_"))
        for field, option in API_OPTIONS.items()
    }
    given = {field: value for field, value in typed.items() if value is not None}
    with _usage_errors():
        options = RunLocalOptions(env, token=env_token, close_env=False, record=record, **given)
    if options.max_episodes is None:  # neither --episodes nor --seeds
        options = attrs.evolve(options, max_episodes=DEFAULT_EPISODES)
    return options


def _plan(args: argparse.Namespace) -> _Plan:
    """Check every argument and load every target, before anything starts."""
    check_writable(args.json, "--json")
    kwargs = env_kwargs(args.env_kwargs, args.env_arg)
    targets = _env_targets(args) or [DEFAULT_ENV]
    env_label = targets[0] if len(targets) == 1 else plural(len(targets), "env server")
    env_addresses: tuple[str, ...] = ()
    env: Any = None
    if len(targets) > 1:
        for target in targets:
            if not is_address(target):
                raise UsageError(
                    f"--env {target} is not a server address: a fleet is several env server "
                    "addresses (serve the env with `trio-rlmesh serve-env` and pass the "
                    "addresses, or give one --env target)"
                )
        if kwargs:
            raise UsageError(
                "--env-kwargs/--env-arg configure an env served in-process; "
                "a fleet's envs are servers"
            )
        env_addresses = tuple(check_address(target, "--env") for target in targets)
    elif is_address(env_label):
        if kwargs:
            raise UsageError(
                "--env-kwargs/--env-arg configure an env served in-process; "
                f"--env {env_label} is a server address"
            )
        env_addresses = (check_address(env_label, "--env"),)
    else:
        kwargs = _with_frames(args, env_label, kwargs)
        env = load_env_target(env_label, kwargs, run=True)
    ray_envs: int | None = args.ray_envs
    if ray_envs is not None:
        with _usage_errors():  # env_fleet's own rule, checked before Ray starts
            check_count("--ray-envs", ray_envs, optional=False)
        if env_addresses:
            raise UsageError(
                "--ray-envs serves an env target on Ray actors; "
                f"--env {', '.join(env_addresses)} is already a server"
            )
        env = None  # loaded (so checked) here; served by the actors
    model_address: str | None = None
    model: Any = None
    baseline: Literal["default", "random"] | None = None
    model_label = args.model
    if args.model is None:
        baseline = "default"
    elif args.model == RANDOM_MODEL:
        baseline = "random"
    elif is_address(args.model):
        model_label = f"the model at {args.model}"
        model_address = check_address(args.model, "--model")
    else:
        model = load_model_target(args.model, run=True)
    if args.user_code is not None and model_address is not None and env_addresses:
        raise UsageError(
            "--user-code sets where this process runs user code, but the env and the model "
            "are both servers here; pass it to their serve-env / serve-model instead"
        )
    record = _record(args)
    env_token = _token(args, "env", env_addresses[0] if env_addresses else None)
    # Servers started later (Ray actors) are not known yet: the options hear of them then.
    known = env_addresses or (None if ray_envs is not None else env)
    return _Plan(
        _run_options(args, known, env_token, record),
        env_label,
        env_addresses,
        env,
        ray_envs,
        kwargs,
        model_label,
        model_address,
        model,
        env_token=env_token,
        model_token=_token(args, "model", model_address),
        baseline=baseline,
        record=record,
    )


def _with_frames(args: argparse.Namespace, target: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``--record-video`` on an env this command makes from a Gymnasium id: ask it for the
    ``rgb_array`` frames a video is made of (a ``render_mode`` given stays)."""
    if args.record_video is None or not target.startswith("gymnasium:") or "render_mode" in kwargs:
        return kwargs
    return {**kwargs, "render_mode": "rgb_array"}


def _record(args: argparse.Namespace) -> RecordOptions | None:
    """``--record``/``--record-video``, checked before anything starts (names, packages)."""
    if args.record is None and args.record_video is None:
        return None
    from ..record._internal import check_available

    record = RecordOptions(dataset=args.record, video=args.record_video)
    check_available(record)
    return record


def _token(args: argparse.Namespace, side: Side, address: str | None) -> str | None:
    """The token to send to ``side``'s server; none for a side that runs in-process."""
    if address is not None:
        return resolve_token(args, side)
    option = explicit_side_token(args, side)
    if option is not None:
        raise UsageError(
            f"{option} is for a {side} server address, but the {side} runs in-process; "
            f"drop {option} or pass the server's address as --{side}"
        )
    return None


class _DriverSlot:
    """The ``task_status`` a run reports its driver to, so that a signal can cancel it.

    A cancel that comes before the driver exists cancels the connect instead.
    """

    def __init__(self, scope: trio.CancelScope) -> None:
        self.driver: RuntimeDriver | FleetRun | None = None
        self.reason: str | None = None
        self.report: RuntimeReport | None = None
        self.progress: RunProgress | None = None
        self._scope = scope

    def started(self, value: Any = None) -> None:
        self.driver = value
        if isinstance(value, FleetRun) and self.progress is not None:
            self.progress.lost = lambda: len(value.lost)
        if self.reason is not None and value is not None:
            value.cancel(self.reason)

    def cancel(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason
        if self.driver is not None:
            self.driver.cancel(reason)
        else:
            self._scope.cancel()  # still connecting: nothing to report yet


async def _evaluate(
    args: argparse.Namespace, plan: _Plan, console: Console, interrupts: Interrupts
) -> RuntimeReport:
    from ..transports.grpc import serve_env

    progress = RunProgress(plan.episodes, plan.ray_envs or max(1, len(plan.env_addresses)))
    bar = LiveProgress(console, progress) if not args.no_progress else None
    async with AsyncExitStack() as stack, trio.open_nursery() as nursery:
        slot = _DriverSlot(nursery.cancel_scope)
        slot.progress = progress
        interrupts.arm(lambda signum: slot.cancel(f"interrupted by {signum.name}"))

        def last_words() -> None:
            if bar is not None:
                bar.stop()
            _last_words(args, console, progress.report(_interrupted(interrupts)))

        interrupts.last_words(last_words)
        addresses: Sequence[str] = plan.env_addresses
        if plan.ray_envs is not None:
            addresses = await stack.enter_async_context(_ray_fleet(plan))
        elif not addresses:
            served = serve_env
            if plan.user_code is not None:
                served = functools.partial(serve_env, user_code=plan.user_code)
            addresses = [await nursery.start(served, plan.env, "127.0.0.1:0")]
        with _usage_errors():  # a Ray fleet brings its own token
            options = attrs.evolve(plan.options, env_address=addresses)
        # The bar starts below the line that says what runs (printed once connected).
        announced = None if bar is None else functools.partial(nursery.start_soon, bar.run)
        try:
            await _drive(plan, options, progress, slot, announced, console)
        finally:
            # The in-process env server and the bar end with the run, before any result
            # or error is printed.
            interrupts.disarm()
            nursery.cancel_scope.cancel()
            if bar is not None:
                bar.stop()
    if slot.report is None:  # cancelled while connecting
        return RuntimeReport(
            status="cancelled",
            reason=slot.reason,
            session_id="",
            env_id="",
            episodes=(),
            env_step_calls=0,
        )
    return slot.report


def _ray_fleet(plan: _Plan) -> AbstractAsyncContextManager[Sequence[str]]:
    """``--ray-envs N``: the env target served on N Ray actors, for the run."""
    from ..ray import env_fleet

    sys.stderr.write(f"trio-rlmesh: starting {plural(plan.ray_envs or 0, 'env server')} on Ray\n")
    sys.stderr.flush()
    # The servers on this machine bind loopback, and each requires the fleet's own token,
    # which the run takes from the fleet.
    return env_fleet(
        plan.env_label,
        plan.ray_envs or 0,
        env_kwargs=plan.env_kwargs,
        serve_options=None if plan.user_code is None else {"user_code": plan.user_code},
    )


async def _drive(
    plan: _Plan,
    options: Any,
    hooks: RuntimeHooks,
    slot: _DriverSlot,
    announced: Callable[[], object] | None = None,
    console: Console | None = None,
) -> None:
    from .._facade import run_local, run_remote

    try:
        model, label = plan.model, plan.model_label
        addresses = _addresses(options.env_address)
        if plan.baseline is not None:
            model, label = await _baseline(plan, addresses[0], options.token)
        _announce(plan, label, addresses)
        if console is not None and getattr(model, "spec", None) is not None:
            # A spec'd model: what it will see and answer, before the first episode (a
            # pairing that cannot work ends the run here, exit status 2).
            contract = await env_contract(addresses[0], options.token, plan.grpc_backend)
            adapter = pairing(model, repr(plan.model_label), contract)
            if adapter is not None:
                show_pairing(console, adapter, f"pairing of {label} with {contract.env_id}:")
        if announced is not None:
            announced()
        if options.record is not None:
            # The dataset names the model as the command line did, and the env as this
            # command made it (served here, so the run sees an address).
            name = plan.model_address or plan.model_label
            if plan.baseline is not None:
                name = _BASELINE_NAMES[type(model)]
            spec = plan.env.spec if isinstance(plan.env, GymnasiumFactory) else None
            record = attrs.evolve(options.record, model_name=name, env_spec=spec)
            options = attrs.evolve(options, record=record)
        if plan.model_address is not None:
            slot.report = await run_remote(
                plan.model_address,
                options,
                model_token=plan.model_token,
                hooks=hooks,
                task_status=slot,
            )
        else:
            slot.report = await run_local(model, options, hooks=hooks, task_status=slot)
    except TransportError as exc:
        raise await _explain_connect_failure(exc, plan) from exc


def _addresses(env_address: str | Sequence[str]) -> Sequence[str]:
    return [env_address] if isinstance(env_address, str) else env_address


def _announce(plan: _Plan, model_label: str, addresses: Sequence[str]) -> None:
    """The first line: what is evaluated on what (a fleet: on which servers)."""
    count = plural(plan.episodes, "episode")
    where = ", ".join(addresses)
    env = plan.env_label if plan.env_label == where else f"{plan.env_label} ({where})"
    sys.stderr.write(f"trio-rlmesh: evaluating {model_label} on {env}, {count}\n")
    sys.stderr.flush()


async def _baseline(plan: _Plan, address: str, token: str | None) -> tuple[Any, str]:
    """The policy ``--model random`` or no ``--model`` stands for, from the env's contract."""
    info = await env_contract(address, token, plan.grpc_backend)
    if plan.baseline == "default" and is_cartpole(info):
        return HeuristicCartPole(), "the built-in heuristic CartPole policy (no --model given)"
    why = "it samples the action space"
    if plan.baseline == "default":
        why = f"no --model given and {info.env_id or 'the env'} is not CartPole; {why}"
    if plan.seed is not None:
        why += f", seed {plan.seed}"
    return RandomPolicy(plan.seed), f"a random policy ({why})"


_BASELINE_NAMES: dict[type, str] = {
    HeuristicCartPole: "trio-rlmesh heuristic CartPole policy",
    RandomPolicy: "trio-rlmesh random policy",
}

_OTHER: dict[Side, Side] = {"env": "model", "model": "env"}
_TOKEN_SOURCES: dict[Side, str] = {
    "env": f"--env-token, --token, a --token-file or ${ENV_TOKEN_VARIABLE}/${TOKEN_VARIABLE}",
    "model": f"--model-token, --token, a --token-file or ${MODEL_TOKEN_VARIABLE}/${TOKEN_VARIABLE}",
}


async def _explain_connect_failure(error: TransportError, plan: _Plan) -> Error:
    """Say what a failed connect means on the command line.

    An address given for one service that serves the other (an env server passed as
    ``--model``, or the reverse) is told apart by a handshake on the other service; a token
    problem names the options that carry tokens.
    """
    from ..transports.grpc._internal import handshake_operation

    sides: tuple[Side, ...] = ("env", "model")
    side = next((s for s in sides if error.operation == handshake_operation(s)), None)
    address = plan.env_address if side == "env" else plan.model_address
    if side == "env" and error.address in plan.env_addresses:
        address = error.address  # a fleet: the server that failed
    if side is None or address is None:
        return error
    token = plan.env_token if side == "env" else plan.model_token
    if error.code == "UNAUTHENTICATED":
        return _with_message(error, f"{error.message} ({_TOKEN_SOURCES[side]})")
    if error.code is None:
        return error  # no gRPC answer at all: nothing else to learn from the server
    other = _OTHER[side]
    if not await _serves(other, address, token, plan.grpc_backend):
        return error
    return UsageError(
        f"--{side} {address} is {'an' if other == 'env' else 'a'} {other} server (it answers "
        f"rlmesh.{other}.v1.{other.capitalize()}Service, not the {side} service): pass it as "
        f"--{other}, and the {side} server's address (or a target) as --{side}"
    )


def _with_message(error: TransportError, message: str) -> TransportError:
    return TransportError(
        message,
        recoverable=error.recoverable,
        operation=error.operation,
        address=error.address,
        code=error.code,
    )


async def _serves(
    side: Side, address: str, token: str | None, backend: Literal["trio", "grpclib"]
) -> bool:
    """Whether the server at ``address`` completes a ``side`` handshake (or wants a token)."""
    from ..transports.grpc import open_env_client, open_model_client

    opener = open_env_client if side == "env" else open_model_client
    with trio.move_on_after(PROBE_TIMEOUT):
        try:
            async with opener(address, token=token, backend=backend):
                return True
        except Error as exc:
            return exc.code == "UNAUTHENTICATED"
    return False


def run_command(args: argparse.Namespace) -> int:
    """Entry point of ``trio-rlmesh run``; returns the process exit status."""
    # With the report on stdout, every other line goes to stderr.
    console = open_console(sys.stderr if args.json == STDOUT else sys.stdout)
    recording = args.record is not None or args.record_video is not None
    grace = RECORD_CANCEL_GRACE if recording else CANCEL_GRACE
    interrupts = Interrupts(grace=grace, exit_code=lambda _signum: EXIT_CANCELLED)
    with interrupts.installed():
        # Until the run starts there is nothing to report but the interruption itself.
        interrupts.last_words(
            lambda: _write_results(
                args, console, RunProgress(0).report(_interrupted(interrupts)), None
            )
        )
        report: RuntimeReport | None = None
        failure: Failure | None = None
        try:
            plan = _plan(args)
            report = trio.run(_evaluate, args, plan, console, interrupts)
        except Exception as exc:  # the one place a failure becomes an exit status
            failure = describe(exc, API_OPTIONS)
            report = getattr(unwrap(exc), "report", None)
            if isinstance(unwrap(exc), UnwritableReport):
                args.json = None  # the failed report has nowhere to go either
        if interrupts.received is not None and report is not None:
            # The process ends within its grace after a signal: no time for the bootstrap.
            report = attrs.evolve(report, summary_resamples=0)
        status = _status(report, failure)
        with interrupts.final_output(status):
            if not _write_results(args, console, report, failure) and status == EXIT_OK:
                status = EXIT_FAILED  # the run went well, but its report is not where asked
        return status


def _last_words(args: argparse.Namespace, console: Console, report: RuntimeReport) -> None:
    """What a run that must end at once writes: a recording stops between two writes first
    (its dataset then holds the episodes written so far), then the episodes counted."""
    if args.record is not None or args.record_video is not None:
        from ..record._internal import freeze_writers

        freeze_writers(FREEZE_TIMEOUT)
    _write_results(args, console, report, None)


def _interrupted(interrupts: Interrupts) -> str:
    signum = interrupts.received
    return f"interrupted by {signum.name}" if signum is not None else "interrupted"


def _status(report: RuntimeReport | None, failure: Failure | None) -> int:
    if failure is not None:
        return failure.exit_code
    assert report is not None
    return EXIT_CANCELLED if report.status == "cancelled" else EXIT_OK


def _write_results(
    args: argparse.Namespace,
    console: Console,
    report: RuntimeReport | None,
    failure: Failure | None,
) -> bool:
    """Print the results (the episodes finished, however the run ended), write the report,
    say where it and the recording went, then the error; False when the report could not be
    written (said on stderr)."""
    if report is not None and (report.episodes or failure is None):
        console.print(episodes_table(report))
        shown = report if failure is None else attrs.evolve(report, reason=None)
        console.print(format_summary(shown))
        if report.endpoints:
            console.print(format_endpoints(report))
        if args.telemetry and report.telemetry:
            from ..runtime._internal import format_telemetry

            console.print(format_telemetry(report.telemetry))
            for part in report.endpoints:  # a fleet: the total above, then each endpoint's
                if part.telemetry:
                    console.print(f"\n{part.endpoint}:\n{format_telemetry(part.telemetry)}")
    if failure is not None:
        data = report.to_json_dict() if report is not None else empty_report_dict("")
        data["status"], data["reason"] = "failed", failure.reason
    else:
        assert report is not None
        data = report.to_json_dict()
    written = True
    try:
        write_json(args.json, data)
    except OSError as exc:
        sys.stderr.write(
            f"trio-rlmesh run: could not write the report to {args.json}: {file_reason(exc)}\n"
        )
        written = False
    for line in _written(args, report, written):
        console.print(line)
    console.file.flush()
    if failure is not None:
        sys.stderr.write(f"trio-rlmesh run: {failure.message}\n")
    return written


def _written(
    args: argparse.Namespace, report: RuntimeReport | None, report_written: bool
) -> list[str]:
    """One line for each file the run wrote: the report, the dataset, the videos."""
    lines = []
    if args.json is not None and args.json != STDOUT and report_written:
        lines.append(f"report written to {args.json}")
    episodes = plural(len(report.episodes) if report is not None else 0, "episode")
    if args.record is not None and args.record.is_dir():
        lines.append(f"dataset written to {args.record} ({episodes})")
    if args.record_video is not None and args.record_video.is_dir():
        lines.append(f"videos written to {args.record_video} ({episodes}, one MP4 each)")
    return lines
