"""The user-facing entry points: :func:`run_local`, :func:`run_remote` and the sync :func:`run`.

They mirror the reference's ``run_local`` and share one path (:func:`_run`): open the env
(connect and handshake with a server, or host a Gymnasium env in this process), refuse
contracts the runtime cannot drive, resolve the model route before driving (execution
horizon, observation history) through :meth:`RuntimeModel.resolve`, build the session
spec from :class:`RunLocalOptions` (in one place) and drive it. Several env addresses
make a fleet run (:func:`_run_fleet`): the same path once per endpoint, under one
:class:`~trio_rlmesh.runtime._fleetrun.FleetRun`. The gRPC transport is imported inside the
functions, so ``import trio_rlmesh`` stays free of it.
"""

from __future__ import annotations

import math
import operator
import re
import time
from collections.abc import AsyncIterator, Iterable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Literal

import attrs
import trio

from ._errors import Error, SpecError
from .protocol import WORKFLOW_EDITION
from .protocol._internal import check_token
from .runtime._internal import (
    DEFAULT_FUSE_WAIT,
    ServingUserCode,
    UserCode,
    check_count,
    check_prefetch_lead,
    check_seconds_cap,
    check_serving_user_code,
    check_timeout,
    seconds_cap,
)

if TYPE_CHECKING:
    from .model import ModelHandler
    from .record import RecordOptions
    from .runtime import RuntimeDriver, RuntimeHooks, RuntimeLimits, RuntimeReport
    from .runtime._internal import Fleet

__all__ = ["RunLocalOptions", "run", "run_local", "run_remote"]

HOST_INTERRUPT_REASON = "interrupted by the host (signal)"


def _parse_seeds(text: str) -> tuple[int, ...]:
    """Seeds written as text: a list ``0,1,2`` or an inclusive range ``0..39``.

    ``episode_seeds`` takes this form as well as a sequence, and ``--seeds`` is this form.

    >>> _parse_seeds("3..5"), _parse_seeds("7, 9")
    ((3, 4, 5), (7, 9))
    """
    text = text.strip()
    if ".." in text:
        low_text, _, high_text = text.partition("..")
        try:
            low, high = int(low_text), int(high_text)
        except ValueError:
            raise SpecError(f"episode_seeds: bad seed range {text!r}; use e.g. 0..39") from None
        if high < low:
            raise SpecError(f"episode_seeds: seed range {text!r} is empty; use low..high")
        return tuple(range(low, high + 1))
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise SpecError(f"episode_seeds: bad seed list {text!r}; use e.g. 0,1,2") from None


def _seeds(value: str | Iterable[int]) -> tuple[int, ...]:
    if isinstance(value, str):
        return _parse_seeds(value)
    try:
        return tuple(operator.index(seed) for seed in value)
    except TypeError:
        raise SpecError(f"episode_seeds must be integers, got {value!r}") from None


def _count(_: Any, attribute: attrs.Attribute[Any], value: int | None) -> None:
    check_count(attribute.name, value)


def _horizon(_: Any, attribute: attrs.Attribute[Any], value: int) -> None:
    # RLMesh raises 0 to 1 without a word; here every horizon below 1 is refused.
    check_count(attribute.name, value, optional=False)


def _prefetch_lead(_: Any, __: Any, value: int) -> None:
    check_prefetch_lead(value)


def _seconds(_: Any, attribute: attrs.Attribute[Any], value: float | None) -> None:
    check_seconds_cap(attribute.name, value)


def _timeout(_: Any, attribute: attrs.Attribute[Any], value: float | None) -> None:
    check_timeout(attribute.name, value)


def _token(_: Any, __: Any, value: str | None) -> None:
    check_token(value)


def _user_code(value: str | None) -> ServingUserCode | None:
    if value is None:
        return None
    try:
        return check_serving_user_code(value)
    except ValueError as exc:
        raise SpecError(str(exc)) from None


def _backend(value: str) -> Literal["trio", "grpclib"]:
    if value == "trio":
        return "trio"
    if value == "grpclib":
        return "grpclib"
    raise SpecError(f"grpc_backend must be 'trio' or 'grpclib', got {value!r}")


def _is_addresses(value: Any) -> bool:
    return (
        isinstance(value, (list, tuple)) and bool(value) and all(isinstance(v, str) for v in value)
    )


def _env_target(value: Any) -> Any:
    # Several addresses make a fleet; a list of env objects stays one endpoint's lanes.
    if _is_addresses(value):
        addresses = tuple(value)
        for address in addresses:
            _check_env_address(address)
            if addresses.count(address) > 1:
                raise SpecError(
                    f"env address {address!r} is listed twice; a fleet drives each endpoint once"
                )
        # A fleet object (a tuple) keeps what it carries, its token; see __attrs_post_init__.
        return value if isinstance(value, tuple) else addresses
    if isinstance(value, str):
        _check_env_address(value)
    return value


_GYMNASIUM_ID = re.compile(r"^(?:[\w.-]+/)?[\w.:-]+-v\d+$")
"""A Gymnasium env id: ``[namespace/]name-v<version>`` (``ALE/Pong-v5``, ``CartPole-v1``)."""


def looks_like_gymnasium_id(text: str) -> bool:
    """Whether ``text`` reads as a Gymnasium env id (registered or not).

    >>> looks_like_gymnasium_id("ALE/Pong-v5"), looks_like_gymnasium_id("inprocess://local")
    (True, False)
    """
    return _GYMNASIUM_ID.match(text) is not None


def _check_env_address(address: str) -> None:
    """Refuse a string that is no server address, pointing at what the caller likely meant
    when it reads as a Gymnasium id (an env object runs in this process)."""
    from .transports.grpc import parse_address

    try:
        parse_address(address)
    except ValueError as exc:
        message = f"{exc}; a string env is a server address"
        env_id = address.removeprefix("gymnasium:")
        if looks_like_gymnasium_id(env_id):
            message += (
                ": to run a Gymnasium env in this process, pass the env itself, e.g. "
                f"gymnasium.make({env_id!r})"
            )
        else:
            message += (
                " (ours or RLMesh's); to run an env in this process, pass the env object "
                "itself, or a callable returning one"
            )
        raise SpecError(message) from None


def _fuse_wait(value: float | None) -> float | None:
    if value is None:
        return None
    value = float(value)
    # A fused predict that waited forever would hang the fleet on a lost endpoint.
    if not (math.isfinite(value) and value >= 0):
        raise SpecError(f"fuse_wait must be a finite number of seconds >= 0, got {value!r}")
    return value


def _record(value: Any) -> RecordOptions | None:
    from .record._internal import as_record_options

    return as_record_options(value)


@attrs.frozen
class RunLocalOptions:
    """Everything :func:`run_local` needs besides the model (the reference's ``RunLocalOptions``).

    Example:
        >>> RunLocalOptions("127.0.0.1:50051", max_episodes=3, base_seed=7).execution_horizon
        1
    """

    env_address: Any = attrs.field(converter=_env_target)
    """The env: a server address (``host:port``, ``tcp://host:port``, ``unix:///path``), or a
    Gymnasium env, vector env or callable returning one, hosted in this process (no
    network; its code runs where :attr:`user_code` says). A sequence of several addresses
    is a *fleet*: one run drives them all with one model (see ``docs/fleet.md``)."""
    token: str | None = attrs.field(default=None, validator=_token)
    """Sent as the raw ``authorization`` header when set. By default, the token of a fleet
    object that carries one (a :class:`~trio_rlmesh.ray.RayEnvFleet` from ``env_fleet``)."""
    workflow_edition: str = WORKFLOW_EDITION
    """The edition this runtime wants; it caps the edition negotiated with the env."""
    base_seed: int | None = None
    """Derive per-lane reset seeds deterministically from this seed."""
    episode_seeds: tuple[int, ...] = attrs.field(default=(), converter=_seeds)
    """Explicit reset seeds, one per episode in start order: a sequence of integers, or
    the text ``--seeds`` takes: a list ``"0,1,2"`` or an inclusive range ``"0..39"``."""
    max_episodes: int | None = attrs.field(default=None, validator=_count)
    """Stop after exactly this many completed episodes. ``None``: one episode per seed when
    :attr:`episode_seeds` are given (a count that disagrees with them is refused), else
    until cancelled."""
    trial_index_base: int | None = None
    """First trial index sent in reset options to envs that declare ``trial_index``."""
    max_episode_steps: int | None = attrs.field(default=None, validator=_count)
    """Truncate an episode after this many steps (``None``: no cap)."""
    max_episode_seconds: float | None = attrs.field(
        default=None, converter=seconds_cap, validator=_seconds
    )
    """Truncate an episode after this many seconds (``None``, or infinity: no cap)."""
    close_env: bool = False
    """Close the env (Join ``close``) when the run ends."""
    execution_horizon: int = attrs.field(default=1, validator=_horizon)
    """Actions per predict (at least 1): frames beyond the first are replayed open-loop."""
    prefetch_lead: int = attrs.field(default=0, validator=_prefetch_lead)
    """Predict the next chunk while the last ``prefetch_lead`` frames of this one replay
    (0: off)."""
    limits: RuntimeLimits | None = None
    """Per-operation deadlines; ``None`` uses the runtime defaults."""
    connect_timeout: float = attrs.field(default=10.0, validator=_timeout)
    """Seconds allowed for connecting and handshaking with the env (infinity: no limit)."""
    session_id: str = "local"
    """Correlation label of the session; it is also an input of the ``base_seed`` law, so
    the same ``base_seed`` and ``session_id`` always derive the same reset seeds."""
    grpc_backend: Literal["trio", "grpclib"] = attrs.field(default="trio", converter=_backend)
    """How gRPC is spoken to servers: ``"trio"`` (the default) or ``"grpclib"``."""
    tolerate_endpoint_failures: bool = False
    """Fleet runs: an endpoint that fails is dropped and the episodes it was running are
    started again on the others (same seeds); by default it fails the run."""
    fuse_wait: float | None = attrs.field(default=None, converter=_fuse_wait)
    """Fleet runs only: how long (seconds) a fused predict waits for every endpoint's
    request before it goes without the ones not yet ready (0: take what is ready; ``None``:
    the default, 2 ms). Refused for a run of one env, where nothing is fused."""
    user_code: ServingUserCode | None = attrs.field(default=None, converter=_user_code)
    """Where in-process user code (the model's, and the env's when it is hosted here) runs.
    ``"thread"``: on a worker thread of its own, so ``limits.model_predict_timeout`` and
    cancellation (Ctrl-C) can abandon a call that hangs. ``"inline"``: on the trio thread,
    a thread hand-off (tens of µs) cheaper per call, but a blocking call then freezes the
    event loop, no deadline fires and Ctrl-C waits for it. ``"auto"`` (models only, so not
    with an env hosted here): the model's predicts run inline while they are quick, on its
    thread from the first slow one on. ``None`` (the default): ``"inline"`` when the env is
    hosted in this process (as ``rlmesh.run(model, env)`` runs it), ``"auto"`` for the
    model when the env is reached over the network (see ``docs/embedding.md``, *Where user
    code runs*). A
    :class:`~trio_rlmesh.model.ModelHandler` passed to :func:`run_local` as is keeps its
    own choice."""
    record: RecordOptions | None = attrs.field(default=None, converter=_record)
    """Record the run (see :mod:`trio_rlmesh.record`): a dataset directory
    (``"runs/cartpole-eval-v0"``: every counted episode into that Minari dataset), or
    :class:`~trio_rlmesh.record.RecordOptions` for videos and more."""

    def __attrs_post_init__(self) -> None:
        target = self.env_address
        if _is_addresses(target):
            if self.token is None:
                object.__setattr__(self, "token", getattr(target, "token", None))
            if len(target) == 1:  # one address is one endpoint, not a fleet
                object.__setattr__(self, "env_address", target[0])
        seeds = len(self.episode_seeds)
        if seeds and self.max_episodes is None:
            object.__setattr__(self, "max_episodes", seeds)
        elif seeds and self.max_episodes != seeds:
            raise SpecError(
                f"max_episodes={self.max_episodes} disagrees with the {seeds} episode_seeds "
                "given; drop max_episodes or give one seed per episode"
            )
        if self.fuse_wait is not None and self.env_address is not None and not _is_fleet(self):
            raise SpecError(
                "fuse_wait tunes how a fleet's predicts are fused (several env addresses); "
                "this run drives one env: drop fuse_wait"
            )


def _model_user_code(options: RunLocalOptions) -> ServingUserCode:
    """``options.user_code`` for the model, its default decided by where the env runs."""
    if options.user_code is not None:
        return options.user_code
    served = isinstance(options.env_address, str) or _is_fleet(options)
    return "auto" if served else "inline"


def _env_user_code(options: RunLocalOptions) -> UserCode:
    """``options.user_code`` for an env hosted in this process (``"inline"`` by default)."""
    user_code = options.user_code
    if user_code == "auto":
        raise SpecError(
            "run_local: user_code='auto' applies to the model of a run against an env "
            "server; an env hosted in this process takes 'thread' or 'inline'"
        )
    return "inline" if user_code is None else user_code


@attrs.frozen
class _Env:
    """An env endpoint ready to drive, however it is reached."""

    runtime: Any
    """The :class:`~trio_rlmesh.runtime.RuntimeEnv`."""
    contract: Any
    """Its ``EnvContract``."""
    subset_step: bool
    workflow_edition: str
    capabilities: dict[str, str]
    component_id: str
    gym_spec: Any = None
    """The Gymnasium ``EnvSpec`` of an env hosted in this process (``None`` for a server)."""


def _check_drivable(num_envs: int, subset_step: bool, options: RunLocalOptions) -> None:
    if num_envs > 1 and not subset_step and options.execution_horizon > 1:
        raise SpecError(
            f"execution_horizon={options.execution_horizon} cannot be combined with a lockstep "
            f"vector env (num_envs={num_envs}): chunk replay is whole-batch, so one lane's "
            "episode end discards every lane's buffered frames. Use num_envs=1, a lane "
            "endpoint (one env per lane), or execution_horizon=1."
        )


@asynccontextmanager
async def _open_env(options: RunLocalOptions, target: Any = None) -> AsyncIterator[_Env]:
    """Connect to the env server, or host the env in this process (no network).

    ``target`` is one endpoint of a fleet (default: ``options.env_address``).
    """
    from .protocol import read_env_contract
    from .protocol._internal import CAP_SUBSET_STEP, CAPABILITY_TRUE

    if target is None:
        target = options.env_address
    if isinstance(target, str):
        from .transports.grpc import EnvClientRuntimeEnv, open_env_client

        async with open_env_client(
            target,
            token=options.token,
            connect_timeout=options.connect_timeout,
            editions=(options.workflow_edition,),
            backend=options.grpc_backend,
        ) as client:
            # Decoding validates both spaces; a missing action space fails here, at
            # connect, instead of on the first predict.
            read_env_contract(client.contract)
            yield _Env(
                EnvClientRuntimeEnv(client),
                client.contract,
                client.subset_step,
                client.workflow_edition,
                dict(client.capabilities),
                client.address,
            )
        return
    from .transports.inprocess import GymEnvRuntimeEnv

    user_code = _env_user_code(options)
    # Opening may call a factory (user code), so not on the event loop.
    env = await trio.to_thread.run_sync(lambda: GymEnvRuntimeEnv(target, user_code=user_code))
    capabilities = {CAP_SUBSET_STEP: CAPABILITY_TRUE} if env.subset_step else {}
    try:
        yield _Env(
            env,
            env.contract,
            env.subset_step,
            options.workflow_edition,
            capabilities,
            "local-env",
            gym_spec=env.gym_spec,
        )
    finally:
        with trio.CancelScope(shield=True):
            await env.release()


@asynccontextmanager
async def _open_model(
    model: Any, options: RunLocalOptions, model_token: str | None
) -> AsyncIterator[Any]:
    """A served model's client, or the model in this process."""
    if isinstance(model, str):
        from .transports.grpc import ModelClientRuntimeModel, open_model_client

        async with open_model_client(
            model, token=model_token, backend=options.grpc_backend
        ) as client:
            yield ModelClientRuntimeModel(client)
        return
    from .model import as_handler
    from .transports.inprocess import ModelHandlerRuntimeModel

    yield ModelHandlerRuntimeModel(as_handler(model, user_code=_model_user_code(options)))


async def _run(
    env: _Env,
    model: Any,
    options: RunLocalOptions,
    *,
    hooks: RuntimeHooks | None,
    task_status: trio.TaskStatus[Any],
    model_label: str = "",
) -> RuntimeReport:
    """The one run path: resolve the route, build the session spec, drive.

    ``task_status.started`` receives the :class:`~trio_rlmesh.runtime.RuntimeDriver` (so
    a caller can ``cancel`` it) right before driving starts. With ``options.record``, the
    run drives inside its recording (see :func:`_recorded`).
    """
    address = options.env_address if isinstance(options.env_address, str) else None
    if options.record is None:
        driver = await _prepare(env, model, options, hooks=hooks, address=address)
        task_status.started(driver)
        return await driver.run()
    async with _recorded(options, options.record, env, model_label) as recording:
        driver = await _prepare(
            env,
            model,
            options,
            hooks=(recording,) if hooks is None else (hooks, recording),
            address=address,
            render=recording.renders,
        )
        task_status.started(driver)
        return await driver.run()


async def _prepare(
    env: _Env,
    model: Any,
    options: RunLocalOptions,
    *,
    hooks: RuntimeHooks | tuple[RuntimeHooks, ...] | None,
    address: str | None,
    fleet: Fleet | None = None,
    render: bool = False,
) -> RuntimeDriver:
    """Resolve the route and build the session spec and its driver (not yet run)."""
    from .protocol._internal import MAX_MESSAGE_SIZE
    from .runtime import PeerCeiling, RuntimeDriver, RuntimeLimits, RuntimeSessionSpec
    from .runtime._internal import mint_uuid7, route_request

    contract = env.contract
    num_envs = max(1, int(contract.num_envs))
    _check_drivable(num_envs, env.subset_step, options)
    if fleet is None:
        from .transports.inprocess import link_in_process

        # An env object and a model object: values pass between them as they are.
        link_in_process(env.runtime, model)
    # The runtime is the env-id authority: the route resolves under the id the session
    # will use, before any step, exactly as the served path does at ResolveAdapter.
    env_id = mint_uuid7()
    session_id = options.session_id
    await model.resolve(
        route_request(
            env_id,
            contract.spec,
            session_id=session_id,
            workflow_edition=env.workflow_edition,
            execution_horizon=options.execution_horizon,
            # Rows name one episode: a lockstep vector env's groups get none, so it is not
            # offered them (a spec'd model with a frame stack would ask in vain).
            delivers_history=num_envs == 1 or env.subset_step,
        )
    )
    spec = RuntimeSessionSpec(
        session_id=session_id,
        env_id=env_id,
        env_component_id=env.component_id,
        model_component_id="local-model",
        workflow_edition=env.workflow_edition,
        env_contract=contract,
        num_envs=num_envs,
        base_seed=options.base_seed,
        episode_seeds=options.episode_seeds,
        max_episodes=options.max_episodes,
        trial_index_base=options.trial_index_base,
        max_episode_steps=options.max_episode_steps,
        max_episode_seconds=options.max_episode_seconds,
        close_env_on_end=options.close_env,
        subset_step=env.subset_step,
        limits=options.limits or RuntimeLimits(),
        env_ceiling=PeerCeiling(
            edition=env.workflow_edition,
            capabilities=env.capabilities,
            max_message_size=MAX_MESSAGE_SIZE,
        ),
        model_ceiling=None,
        env_address=address,
    )
    return RuntimeDriver(
        spec,
        env.runtime,
        model,
        hooks,
        prefetch_lead=options.prefetch_lead,
        fleet=fleet,
        render=render,
    )


async def _run_fleet(
    model: Any,
    options: RunLocalOptions,
    *,
    hooks: RuntimeHooks | None,
    task_status: trio.TaskStatus[Any],
) -> RuntimeReport:
    """One run over every address of ``options.env_address``: every endpoint opened, the
    fleet admitted (one pair of spaces; see :class:`~trio_rlmesh.runtime._fleetrun.FleetRun`),
    then :func:`_prepare` per endpoint.

    ``task_status.started`` receives the :class:`~trio_rlmesh.runtime._fleetrun.FleetRun`
    (it has ``cancel`` too) before any endpoint is opened.
    """
    from .runtime import RuntimeLimits
    from .runtime._internal import EpisodePool, Fleet, FleetRun

    pool = EpisodePool(
        max_episodes=options.max_episodes,
        episode_seeds=options.episode_seeds,
        base_seed=options.base_seed,
        session_id=options.session_id,
    )
    fuse_wait = DEFAULT_FUSE_WAIT if options.fuse_wait is None else options.fuse_wait
    fleet = Fleet(pool, model, options.limits or RuntimeLimits(), fuse_wait=fuse_wait)
    run = FleetRun(
        options.env_address,
        fleet,
        session_id=options.session_id,
        tolerate_endpoint_failures=options.tolerate_endpoint_failures,
    )

    def open_endpoint(address: str) -> AbstractAsyncContextManager[_Env]:
        return _open_env(options, address)

    async def prepare(address: str, env: _Env, fleet: Fleet) -> RuntimeDriver:
        return await _prepare(env, model, options, hooks=hooks, address=address, fleet=fleet)

    task_status.started(run)
    return await run.run(open_endpoint, prepare)


def _is_fleet(options: RunLocalOptions) -> bool:
    return isinstance(options.env_address, tuple) and all(
        isinstance(v, str) for v in options.env_address
    )


def _recorded(
    options: RunLocalOptions, record: RecordOptions, env: _Env, model_label: str
) -> AbstractAsyncContextManager[Any]:
    """The recording a run drives in (see ``trio_rlmesh.record._recording.for_run``)."""
    from .record._internal import for_run

    return for_run(
        record,
        env.contract,
        env.component_id,
        model=record.model_name or model_label,
        base_seed=options.base_seed,
        episode_seeds=options.episode_seeds,
        session_id=options.session_id,
        env_spec=env.gym_spec,
        max_episode_steps=options.max_episode_steps,
    )


def _paired(report: RuntimeReport, model: Any) -> RuntimeReport:
    """``report`` with the pairing of the model in this process (none for a served one)."""
    adapter = getattr(model, "adapter", None)
    return attrs.evolve(report, pairing=adapter.explain()) if adapter is not None else report


def _model_label(model: Any) -> str:
    """How a recording names the model: its address, or its class."""
    if isinstance(model, str):
        return model
    cls = type(model)
    return f"{cls.__module__}.{cls.__qualname__}"


async def _run_session(
    env: Any,
    model: Any,
    *,
    contract: Any,
    options: RunLocalOptions,
    subset_step: bool = False,
    hooks: RuntimeHooks | None = None,
    task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED,
) -> RuntimeReport:
    """:func:`_run` for a ``RuntimeEnv``/``RuntimeModel`` pair built by the caller (tests).

    Private: it takes the protocol ``EnvContract``, and protocol types stay out of the
    public signatures.
    """
    from .protocol._internal import CAP_SUBSET_STEP, CAPABILITY_TRUE

    capabilities = {CAP_SUBSET_STEP: CAPABILITY_TRUE} if subset_step else {}
    endpoint = _Env(env, contract, subset_step, options.workflow_edition, capabilities, "local-env")
    return await _run(endpoint, model, options, hooks=hooks, task_status=task_status)


async def run_local(
    handler: ModelHandler | Any,
    options: RunLocalOptions,
    *,
    hooks: RuntimeHooks | None = None,
    task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED,
) -> RuntimeReport:
    """Evaluate an in-process model against an env server, or against an env in this
    process (``options.env_address`` a Gymnasium env, vector env or factory: no network).

    ``handler`` is a :class:`~trio_rlmesh.model.ModelHandler`, a
    :class:`~trio_rlmesh.model.Model`, or any object with a numpy ``predict``.
    Returns the :class:`~trio_rlmesh.runtime.RuntimeReport` (status ``completed``,
    or ``cancelled`` after ``driver.cancel``); a failure raises a
    :class:`~trio_rlmesh.Error` whose ``report`` holds the episodes finished so far.
    ``task_status.started`` receives the driver, for ``nursery.start`` callers that
    want to ``cancel`` it.

    Example::

        async def main():
            options = RunLocalOptions("127.0.0.1:50051", max_episodes=5, base_seed=0)
            with trio.move_on_after(60):
                report = await run_local(MyModel(), options)
    """
    return await _run_entry(handler, options, None, hooks, task_status, _model_label(handler))


async def run_remote(
    model_address: str,
    options: RunLocalOptions,
    *,
    model_token: str | None = None,
    hooks: RuntimeHooks | None = None,
    task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED,
) -> RuntimeReport:
    """Like :func:`run_local`, but the model is served elsewhere (ours or RLMesh's).

    The route is resolved on the model server (ResolveAdapter with the env's spec,
    the execution horizon and the offer of observation history) before driving.
    """
    return await _run_entry(model_address, options, model_token, hooks, task_status, model_address)


async def _run_entry(
    model: Any,
    options: RunLocalOptions,
    model_token: str | None,
    hooks: RuntimeHooks | None,
    task_status: trio.TaskStatus[Any],
    model_label: str,
) -> RuntimeReport:
    """What :func:`run_local` and :func:`run_remote` do, for a model in this process or
    the address of a served one (see :func:`_open_model`): check the recording, then run
    one env or a fleet."""
    check_token(model_token)
    if options.record is not None:
        from .record._internal import check_available

        check_available(options.record)
    # The run's own timing, wall clock from connect to close: the report's summary has it.
    started_at, clock = datetime.now(timezone.utc), time.perf_counter()

    def timed(report: RuntimeReport) -> RuntimeReport:
        return attrs.evolve(report, started_at=started_at, duration_s=time.perf_counter() - clock)

    async def connect_and_run() -> RuntimeReport:
        if _is_fleet(options):
            if options.record is not None:
                raise SpecError(
                    "recording a fleet run is not supported; record the run of one env address"
                )
            async with _open_model(model, options, model_token) as endpoint:
                return _paired(
                    await _run_fleet(endpoint, options, hooks=hooks, task_status=task_status),
                    endpoint,
                )
        async with (
            _open_env(options) as env,
            _open_model(model, options, model_token) as endpoint,
        ):
            return _paired(
                await _run(
                    env,
                    endpoint,
                    options,
                    hooks=hooks,
                    task_status=task_status,
                    model_label=model_label,
                ),
                endpoint,
            )

    try:
        report = await connect_and_run()
    except Error as exc:
        if exc.report is not None:  # a failed run's partial report
            exc.report = timed(exc.report)
        raise
    return timed(report)


def run(handler: Any, env: Any, **options: Any) -> RuntimeReport:
    """Synchronous :func:`run_local` for scripts and notebooks (starts its own trio loop).

    ``env`` is an env server address, or a Gymnasium env, vector env or callable returning
    one, run in this process with no network (as ``rlmesh.run(model, env)`` does).
    Keyword arguments are the fields of :class:`RunLocalOptions`.

    Example::

        report = trio_rlmesh.run(MyModel(), gymnasium.make("CartPole-v1"), max_episodes=3)
        print(report.mean_reward)
    """
    opts = RunLocalOptions(env, **options)
    return trio.run(run_local, handler, opts)
