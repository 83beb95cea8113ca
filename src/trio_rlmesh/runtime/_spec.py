"""What one run drives: :class:`RuntimeSessionSpec`, its :class:`RuntimeLimits` and peer ceilings.

``RuntimeSessionSpec.validate`` applies the reference's rules in the reference's order
(the first failing rule names what to change), adapted to 0.1.0's lane endpoints: an
env that advertises ``subset_step`` steps and resets each lane on its own, so a vector
of lanes may run with driver-owned (DISABLED) resets.

The rules for values a caller chooses (deadlines, episode and step caps, the time cap,
prefetch) are functions here, each written once: the spec, the limits and the driver apply
them, so do :class:`~trio_rlmesh.RunLocalOptions` and the servers, and the command line
shows their errors under its own option names. Infinity, wherever a deadline or cap is
asked for, means none, as ``None`` does.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from .._errors import SpecError
from ..protocol import (
    SUPPORTED_WORKFLOW_EDITIONS,
    WORKFLOW_EDITION,
    core_v1,
    model_v1,
    spaces_v1,
    value_to_python,
)
from ..protocol._internal import MAX_MESSAGE_SIZE, META_RESET_OPTIONS, RESET_OPTION_TRIAL_INDEX

__all__ = [
    "DEFAULT_MAX_EPISODE_STEPS",
    "PeerCeiling",
    "RuntimeLimits",
    "RuntimeSessionSpec",
    "check_count",
    "check_prefetch_lead",
    "check_seconds_cap",
    "check_timeout",
    "route_request",
    "seconds_cap",
]

DEFAULT_MAX_EPISODE_STEPS = 100_000
"""Step cap applied to every episode when the driver owns resets and no cap was given."""

_KNOWN_AUTORESET = frozenset(int(mode) for mode in core_v1.AutoresetMode)
_DRIVER_OWNED = frozenset(
    {int(core_v1.AutoresetMode.UNSPECIFIED), int(core_v1.AutoresetMode.DISABLED)}
)


# -- option rules -------------------------------------------------------------------------
# Each is written here once. RuntimeSessionSpec, RuntimeLimits and the driver apply them, and
# so do the options above the runtime (RunLocalOptions, the servers' deadlines); the command
# line reads their errors with its own option names.


def check_timeout(name: str, value: float | None) -> None:
    """A deadline: ``None`` or infinity (no deadline), else a number of seconds ``>= 0``.

    >>> check_timeout("drain_timeout", math.inf)  # no deadline, like None
    """
    if value is not None and not value >= 0:
        raise SpecError(
            f"{name} must be >= 0 seconds (None or infinity: no deadline), got {value!r}"
        )


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_count(name: str, value: int | None, *, optional: bool = True) -> None:
    """A count (episodes, steps, lanes, actions per predict): an integer ``>= 1``, or
    ``None`` (no cap) when ``optional``."""
    if value is None and optional:
        return
    if not (_is_int(value) and value >= 1):  # type: ignore[operator]
        when = " when set" if optional else ""
        raise SpecError(f"{name} must be greater than zero{when}, got {value!r}")


def seconds_cap(value: float | None) -> float | None:
    """A time cap as the runtime keeps it: infinity means no cap, as ``None`` does.

    >>> seconds_cap(float("inf")) is None, seconds_cap(2.5)
    (True, 2.5)
    """
    if value is not None and value == math.inf:
        return None
    return value


def check_seconds_cap(name: str, value: float | None) -> None:
    """A time cap: ``None`` (or infinity, see :func:`seconds_cap`), else seconds ``> 0``.
    NaN is refused: it would never cap anything."""
    if value is not None and not value > 0.0:
        raise SpecError(
            f"{name} must be greater than zero when set (None or infinity: no cap), got {value!r}"
        )


def check_prefetch_lead(value: int) -> None:
    """Chunk-replay prefetch: ``0`` (off), or how many frames before a chunk's end to
    predict the next one."""
    if not (_is_int(value) and value >= 0):
        raise SpecError(f"prefetch_lead must be 0 (off) or a positive frame count, got {value!r}")


def _check_limit(instance: Any, attribute: Any, value: Any) -> None:
    check_timeout(f"RuntimeLimits.{attribute.name}", value)


@attrs.frozen
class RuntimeLimits:
    """Deadlines for every operation the driver awaits, in seconds (``None`` = no deadline).

    >>> RuntimeLimits(model_predict_timeout=0.5).env_step_timeout
    300.0
    """

    env_reset_timeout: float | None = attrs.field(default=300.0, validator=_check_limit)
    """Bounds every reset; also sent in ``ResetRequest.timeout_ms``."""
    env_step_timeout: float | None = attrs.field(default=300.0, validator=_check_limit)
    """Bounds every step; also sent in ``StepRequest.timeout_ms``."""
    model_predict_timeout: float | None = attrs.field(default=300.0, validator=_check_limit)
    """Bounds every predict (and every background ``reset_adapter``)."""
    service_close_timeout: float | None = attrs.field(default=5.0, validator=_check_limit)
    """Bounds env close, model release and every other cleanup step at the end of a run."""
    telemetry_window: float | None = attrs.field(default=1.0, validator=_check_limit)
    """Period of the live telemetry ticker; ``None`` or ``0`` turns the ticker off."""


def timeout_ms(seconds: float | None) -> int:
    """A limit as the wire's ``timeout_ms`` (``0`` = no deadline), saturating at u64."""
    if seconds is None or math.isinf(seconds):
        return 0
    return min(max(int(seconds * 1000), 0), (1 << 64) - 1)


@attrs.frozen
class PeerCeiling:
    """What one peer can decode: its edition, its capability map and its message-size cap."""

    edition: str = WORKFLOW_EDITION
    capabilities: Mapping[str, str] = attrs.field(factory=dict)
    max_message_size: int = MAX_MESSAGE_SIZE


def route_request(
    env_id: str,
    env_spec: core_v1.EnvSpec | None,
    *,
    session_id: str = "",
    workflow_edition: str = WORKFLOW_EDITION,
    execution_horizon: int = 1,
    delivers_history: bool = True,
) -> model_v1.ResolveAdapterRequest:
    """The ResolveAdapter request a runtime sends before driving ``env_id`` (request id
    ``<env_id>:resolve_adapter``, as the reference's runtime names it)."""
    return model_v1.ResolveAdapterRequest(
        context=model_v1.AdapterContext(
            session_id=session_id, env_id=env_id, request_id=f"{env_id}:resolve_adapter"
        ),
        env_spec=env_spec,
        selected_workflow_edition=workflow_edition,
        execution_horizon=max(1, execution_horizon),
        delivers_history=delivers_history,
    )


def _seed_tuple(seeds: Iterable[int]) -> tuple[int, ...]:
    return tuple(seeds)


def _blank(value: str) -> bool:
    return not value.strip()


@attrs.frozen
class RuntimeSessionSpec:
    """Everything one driver run needs to know about its route (the seed's session spec).

    ``env_contract`` is the contract the env handshake returned. Build the spec, then hand
    it to :class:`~trio_rlmesh.runtime.RuntimeDriver`, which calls :meth:`validate` before
    anything else happens.
    """

    session_id: str
    """Correlation label; part of every AdapterContext and an input of derived seeds."""
    env_id: str
    """The route key (a UUIDv7 minted by whoever attached the env); prefixes request ids."""
    env_contract: core_v1.EnvContract
    """The negotiated env contract; the driver reads the spaces, autoreset mode and metadata."""
    num_envs: int = 1
    """Number of lanes."""
    env_component_id: str = "local-env"
    model_component_id: str = "local-model"
    workflow_edition: str = WORKFLOW_EDITION
    base_seed: int | None = None
    """Derive a reset seed per lane and reset (ignored when ``episode_seeds`` is non-empty)."""
    episode_seeds: tuple[int, ...] = attrs.field(default=(), converter=_seed_tuple)
    """Explicit reset seeds, consumed in episode-start order."""
    max_episodes: int | None = None
    """End the run after exactly this many completed episodes (``None``: run until cancelled)."""
    trial_index_base: int | None = None
    """First ``trial_index`` reset option (episode ``k`` gets ``base + k``); default 0."""
    max_episode_steps: int | None = None
    max_episode_seconds: float | None = attrs.field(default=None, converter=seconds_cap)
    """Truncate an episode after this many seconds (``None``, or infinity: no cap)."""
    close_env_on_end: bool = False
    subset_step: bool = False
    """The env is a lane endpoint: each lane steps and resets on its own (``subset_step``)."""
    limits: RuntimeLimits = attrs.field(factory=RuntimeLimits)
    env_ceiling: PeerCeiling | None = None
    model_ceiling: PeerCeiling | None = None
    env_address: str | None = None
    """The env's address as the caller gave it; every episode record names it as its
    ``endpoint`` (``None``: an env in this process)."""

    # -- derived views ------------------------------------------------------------------

    @property
    def autoreset_mode(self) -> int:
        """The contract's autoreset mode as a plain int (unknown values kept as is)."""
        return int(self.env_contract.autoreset_mode)

    @property
    def driver_owns_resets(self) -> bool:
        """Whether the driver resets finished lanes itself (DISABLED or UNSPECIFIED)."""
        return self.autoreset_mode in _DRIVER_OWNED

    @property
    def lanes_step_individually(self) -> bool:
        """Whether lanes are driven one by one (a lane endpoint with several lanes)."""
        return self.subset_step and self.num_envs > 1 and self.driver_owns_resets

    @property
    def observation_space(self) -> spaces_v1.SpaceSpec | None:
        spec = self.env_contract.spec
        return None if spec is None else spec.observation_space

    @property
    def action_space(self) -> spaces_v1.SpaceSpec | None:
        spec = self.env_contract.spec
        return None if spec is None else spec.action_space

    @property
    def sends_trial_index(self) -> bool:
        """Whether the env declared ``trial_index`` in its ``rlmesh.env.v1.reset_options``."""
        spec = self.env_contract.spec
        if spec is None or spec.metadata is None:
            return False
        entry = spec.metadata.entries.get(META_RESET_OPTIONS)
        if entry is None:
            return False
        declared = value_to_python(entry)
        return isinstance(declared, list) and RESET_OPTION_TRIAL_INDEX in declared

    @property
    def step_cap(self) -> int | None:
        """The per-episode step cap in force (the implicit default when the driver owns resets)."""
        if self.max_episode_steps is not None:
            return self.max_episode_steps
        return DEFAULT_MAX_EPISODE_STEPS if self.driver_owns_resets else None

    def resolve_request(self, *, execution_horizon: int = 1) -> model_v1.ResolveAdapterRequest:
        """The request that resolves this session's route on the model
        (:meth:`RuntimeModel.resolve <trio_rlmesh.runtime.RuntimeModel.resolve>`), which
        must happen before the driver's first predict: a model predicts only on a resolved
        route. ``run_local`` and ``run`` send it themselves; an embedding that builds its
        own :class:`~trio_rlmesh.runtime.RuntimeDriver` sends it first.

        >>> from trio_rlmesh.testing import FakeEnv
        >>> request = FakeEnv().session_spec(env_id="env-1").resolve_request()
        >>> request.context.request_id, request.execution_horizon
        ('env-1:resolve_adapter', 1)
        """
        return route_request(
            self.env_id,
            self.env_contract.spec,
            session_id=self.session_id,
            workflow_edition=self.workflow_edition,
            execution_horizon=execution_horizon,
        )

    # -- validation ---------------------------------------------------------------------

    def validate(self) -> None:
        """Raise :class:`~trio_rlmesh.SpecError` for the first rule this spec breaks.

        The order is the reference's, so the same spec fails with the same message.
        """
        for field, value in (
            ("session_id", self.session_id),
            ("env_id", self.env_id),
            ("env_component_id", self.env_component_id),
            ("model_component_id", self.model_component_id),
        ):
            if _blank(value):
                raise SpecError(f"runtime {field} must not be empty")
        if self.num_envs < 1:
            raise SpecError("runtime num_envs must be greater than zero")
        if self.observation_space is None:
            raise SpecError("runtime env_contract is missing observation_space")
        if self.action_space is None:
            raise SpecError("runtime env_contract is missing action_space")
        check_count("max_episodes", self.max_episodes)
        check_count("max_episode_steps", self.max_episode_steps)
        # NaN fails here too: the reference lets it through and then never caps.
        check_seconds_cap("max_episode_seconds", self.max_episode_seconds)
        per_lane = self.lanes_step_individually
        seeds = len(self.episode_seeds)
        if seeds and self.num_envs > 1 and not per_lane and seeds % self.num_envs:
            raise SpecError(
                f"episode_seeds ({seeds} seeds) must be a multiple of num_envs "
                f"({self.num_envs}) for a vectorized env: every reset seeds the whole vector; "
                "add or drop seeds so they cover whole batches"
            )
        if not self.driver_owns_resets:
            mode = _mode_name(self.autoreset_mode)
            if seeds:
                raise SpecError(
                    f"episode_seeds requires an env with autoreset disabled (this env uses {mode}):"
                    " "
                    "the env resets its own lanes, so the runtime cannot seed them; drop "
                    "episode_seeds or serve the env with autoreset disabled"
                )
            if self.max_episode_steps is not None or self.max_episode_seconds is not None:
                raise SpecError(
                    "max_episode_steps / max_episode_seconds require an env with autoreset "
                    f"disabled (this env uses {mode}): the runtime cannot reset a lane the env "
                    "owns; drop the caps or serve the env with autoreset disabled"
                )
            if self.trial_index_base is not None:
                raise SpecError(
                    f"trial_index_base requires an env with autoreset disabled (this env uses "
                    f"{mode}): trial indices travel in reset options, and the env resets its "
                    "own lanes; drop trial_index_base or serve the env with autoreset disabled"
                )
        edition = self.workflow_edition.strip()
        if edition not in SUPPORTED_WORKFLOW_EDITIONS:
            raise SpecError(
                f'runtime cannot drive workflow edition "{self.workflow_edition}"; this build '
                f"implements {list(SUPPORTED_WORKFLOW_EDITIONS)}"
            )
        if self.autoreset_mode not in _KNOWN_AUTORESET:
            raise SpecError(
                f"unknown autoreset mode {self.autoreset_mode} on the wire; this build supports "
                "UNSPECIFIED, NEXT_STEP, SAME_STEP, DISABLED only"
            )
        if self.autoreset_mode == int(core_v1.AutoresetMode.SAME_STEP):
            raise SpecError(
                "SAME_STEP autoreset is reserved but not yet supported by the runtime; serve the "
                "env with NEXT_STEP or DISABLED autoreset"
            )
        if (
            self.num_envs > 1
            and self.autoreset_mode != int(core_v1.AutoresetMode.NEXT_STEP)
            and not self.subset_step
        ):
            raise SpecError(
                f"vectorized runtime sessions (num_envs > 1) require NEXT_STEP autoreset unless "
                f"the env steps lanes individually (subset_step); this env has "
                f"num_envs={self.num_envs} with {_mode_name(self.autoreset_mode)}: serve the "
                "vector env with NEXT_STEP autoreset, as a lane endpoint, or with num_envs=1"
            )


def _mode_name(mode: int) -> str:
    try:
        return core_v1.AutoresetMode(mode).name or str(mode)
    except ValueError:  # pragma: no cover - betterproto2 keeps unknown values
        return str(mode)
