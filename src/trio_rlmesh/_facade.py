"""The user-facing entry points: :func:`run_local`, :func:`run_remote` and the sync :func:`run`.

They mirror the reference's ``run_local``: connect and handshake with the env,
refuse contracts the runtime cannot drive, resolve the model route before driving
(execution horizon, observation history), build the session spec and drive it.
The gRPC transport is imported inside the functions, so ``import trio_rlmesh``
stays free of grpclib and asyncio.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ._errors import SpecError
from .protocol import WORKFLOW_EDITION
from .runtime._worker import UserCode, check_user_code

if TYPE_CHECKING:
    from .model import ModelHandler
    from .runtime import RuntimeHooks, RuntimeLimits, RuntimeReport
    from .transports.grpc import EnvClient

__all__ = ["RunLocalOptions", "run", "run_local", "run_remote"]

HOST_INTERRUPT_REASON = "interrupted by the host (signal)"


def _seeds(value: Sequence[int]) -> tuple[int, ...]:
    return tuple(int(v) for v in value)


def _user_code(value: str) -> UserCode:
    try:
        return check_user_code(value)
    except ValueError as exc:
        raise SpecError(str(exc)) from None


def _horizon(value: int) -> int:
    # The reference raises 0 to 1; a negative horizon is a caller mistake.
    if value < 0:
        raise SpecError(f"execution_horizon must be >= 1, got {value}")
    return max(1, int(value))


@attrs.frozen
class RunLocalOptions:
    """Everything :func:`run_local` needs besides the model (the reference's ``RunLocalOptions``).

    Example:
        >>> RunLocalOptions("127.0.0.1:50051", max_episodes=3, base_seed=7).execution_horizon
        1
    """

    env_address: str
    """Env server address: ``host:port``, ``tcp://host:port`` or ``unix:///path``."""
    token: str | None = None
    """Sent as the raw ``authorization`` header when set."""
    workflow_edition: str = WORKFLOW_EDITION
    """The edition this runtime wants; it caps the edition negotiated with the env."""
    base_seed: int | None = None
    """Derive per-lane reset seeds deterministically from this seed."""
    episode_seeds: tuple[int, ...] = attrs.field(default=(), converter=_seeds)
    """Explicit reset seeds, one per episode in start order."""
    max_episodes: int | None = None
    """Stop after exactly this many completed episodes (``None``: until cancelled)."""
    trial_index_base: int | None = None
    """First trial index sent in reset options to envs that declare ``trial_index``."""
    max_episode_steps: int | None = None
    """Truncate an episode after this many steps."""
    max_episode_seconds: float | None = None
    """Truncate an episode after this many seconds."""
    close_env: bool = False
    """Close the env (Join ``close``) when the run ends."""
    execution_horizon: int = attrs.field(default=1, converter=_horizon)
    """Actions per predict: frames beyond the first are replayed open-loop."""
    prefetch_lead: int = 0
    """Predict the next chunk while the last ``prefetch_lead`` frames of this one replay."""
    limits: RuntimeLimits | None = None
    """Per-operation deadlines; ``None`` uses the runtime defaults."""
    connect_timeout: float = 10.0
    """Seconds allowed for connecting and handshaking with the env."""
    session_id: str = "local"
    """Correlation label of the session; it is also an input of the ``base_seed`` law, so
    the same ``base_seed`` and ``session_id`` always derive the same reset seeds."""
    user_code: UserCode = attrs.field(default="thread", converter=_user_code)
    """Where the in-process model's code runs. ``"thread"``: on a worker thread of its
    own, so ``limits.model_predict_timeout`` and cancellation (Ctrl-C) can abandon a
    predict that hangs. ``"inline"``: on the trio thread, a thread hand-off (tens of µs)
    cheaper per predict, but a blocking predict then freezes the event loop, no deadline
    fires and Ctrl-C waits for it. A :class:`~trio_rlmesh.model.ModelHandler` passed to
    :func:`run_local` as is keeps its own choice."""


async def _run_session(
    env: Any,
    model: Any,
    *,
    contract: Any,
    options: RunLocalOptions,
    subset_step: bool = False,
    workflow_edition: str = WORKFLOW_EDITION,
    hooks: RuntimeHooks | None = None,
    env_capabilities: dict[str, str] | None = None,
    env_id: str | None = None,
    session_id: str | None = None,
    task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED,
) -> RuntimeReport:
    """Drive an already connected ``RuntimeEnv``/``RuntimeModel`` pair to completion.

    Private: it takes the protocol ``EnvContract``, and protocol types stay out of the
    public signatures. Users reach it through :func:`run_local` and :func:`run_remote`.

    ``task_status.started`` receives the :class:`~trio_rlmesh.runtime.RuntimeDriver`
    (so a caller can ``cancel`` it) right before driving starts.
    """
    from .protocol import MAX_MESSAGE_SIZE
    from .runtime import PeerCeiling, RuntimeDriver, RuntimeLimits, RuntimeSessionSpec
    from .runtime._ids import mint_uuid7

    num_envs = max(1, int(contract.num_envs))
    spec = RuntimeSessionSpec(
        session_id=session_id or options.session_id,
        env_id=env_id or mint_uuid7(),
        env_component_id="local-env",
        model_component_id="local-model",
        workflow_edition=workflow_edition,
        env_contract=contract,
        num_envs=num_envs,
        base_seed=options.base_seed,
        episode_seeds=options.episode_seeds,
        max_episodes=options.max_episodes,
        trial_index_base=options.trial_index_base,
        max_episode_steps=options.max_episode_steps,
        max_episode_seconds=options.max_episode_seconds,
        close_env_on_end=options.close_env,
        subset_step=subset_step,
        limits=options.limits or RuntimeLimits(),
        env_ceiling=PeerCeiling(
            edition=workflow_edition,
            capabilities=dict(env_capabilities or {}),
            max_message_size=MAX_MESSAGE_SIZE,
        ),
        model_ceiling=None,
    )
    driver = RuntimeDriver(spec, env, model, hooks, prefetch_lead=options.prefetch_lead)
    task_status.started(driver)
    return await driver.run()


def _check_drivable(num_envs: int, subset_step: bool, options: RunLocalOptions) -> None:
    if num_envs > 1 and not subset_step and options.execution_horizon > 1:
        raise SpecError(
            f"execution_horizon={options.execution_horizon} cannot be combined with a lockstep "
            f"vector env (num_envs={num_envs}): chunk replay is whole-batch, so one lane's "
            "episode end discards every lane's buffered frames. Use num_envs=1, a lane "
            "endpoint (one env per lane), or execution_horizon=1."
        )


@asynccontextmanager
async def _connected_env(options: RunLocalOptions) -> AsyncIterator[tuple[EnvClient, Any]]:
    """Connect and handshake, then refuse a contract the runtime cannot drive."""
    from .protocol import read_env_contract
    from .transports.grpc import open_env_client

    async with open_env_client(
        options.env_address,
        token=options.token,
        connect_timeout=options.connect_timeout,
        editions=(options.workflow_edition,),
    ) as client:
        # Decoding validates both spaces; a missing action space fails here, at connect,
        # instead of on the first predict.
        info = read_env_contract(client.contract)
        _check_drivable(client.num_envs, client.subset_step, options)
        yield client, info


async def _drive_client(
    client: EnvClient,
    model: Any,
    options: RunLocalOptions,
    *,
    env_id: str,
    session_id: str,
    hooks: RuntimeHooks | None,
    task_status: trio.TaskStatus[Any],
) -> RuntimeReport:
    from .transports.grpc import EnvClientRuntimeEnv

    return await _run_session(
        EnvClientRuntimeEnv(client),
        model,
        contract=client.contract,
        options=options,
        subset_step=client.subset_step,
        workflow_edition=client.workflow_edition,
        hooks=hooks,
        env_capabilities=dict(client.capabilities),
        env_id=env_id,
        session_id=session_id,
        task_status=task_status,
    )


async def run_local(
    handler: ModelHandler | Any,
    options: RunLocalOptions,
    *,
    hooks: RuntimeHooks | None = None,
    task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED,
) -> RuntimeReport:
    """Connect to an env server and evaluate an in-process model against it.

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
    from .model import ResolveOptions, RouteContract, as_handler
    from .runtime._ids import mint_uuid7
    from .transports.inprocess import ModelHandlerRuntimeModel

    model_handler = as_handler(handler, user_code=options.user_code)
    async with _connected_env(options) as (client, info):
        # The runtime is the env-id authority: the route resolves under the id the
        # session will use, before any step, as the served path does at ResolveAdapter.
        env_id = mint_uuid7()
        wants_history = False
        setup = model_handler.route_setup()
        if setup is not None:
            # A route setup is promised a RouteContract, as on the served path.
            needs = await setup.resolve_adapter(
                env_id,
                RouteContract.from_env_contract(info),
                ResolveOptions(execution_horizon=options.execution_horizon, delivers_history=True),
            )
            wants_history = needs.history is not None
        model = ModelHandlerRuntimeModel(model_handler, info, wants_history=wants_history)
        return await _drive_client(
            client,
            model,
            options,
            env_id=env_id,
            session_id=options.session_id,
            hooks=hooks,
            task_status=task_status,
        )


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
    from .runtime._ids import mint_uuid7
    from .transports.grpc import ModelClientRuntimeModel, open_model_client

    async with (
        _connected_env(options) as (client, _info),
        open_model_client(model_address, token=model_token) as model_client,
    ):
        env_id, session_id = mint_uuid7(), options.session_id
        env_spec = client.contract.spec
        assert env_spec is not None  # read_env_contract refused a contract without one
        model = ModelClientRuntimeModel(model_client)
        await model.resolve(
            env_id,
            env_spec,
            session_id=session_id,
            execution_horizon=options.execution_horizon,
            workflow_edition=client.workflow_edition,
        )
        return await _drive_client(
            client,
            model,
            options,
            env_id=env_id,
            session_id=session_id,
            hooks=hooks,
            task_status=task_status,
        )


def run(handler: Any, env_address: str, **options: Any) -> RuntimeReport:
    """Synchronous :func:`run_local` for scripts and notebooks (starts its own trio loop).

    Keyword arguments are the fields of :class:`RunLocalOptions`.

    Example::

        report = trio_rlmesh.run(MyModel(), "127.0.0.1:50051", max_episodes=3)
        print(report.mean_reward)
    """
    opts = RunLocalOptions(env_address, **options)
    return trio.run(run_local, handler, opts)
