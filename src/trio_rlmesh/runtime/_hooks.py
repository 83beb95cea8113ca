"""Hooks: a base class of no-op async methods, the events they receive, and the dispatcher.

Subclass :class:`RuntimeHooks` and override what you need. The driver checks once, at
construction, which methods a subclass overrides and only ever calls those, so an
unused hook costs nothing per step.

Payloads are numpy values, never wire bytes: an observation or an action is the batch of
the lanes the event names, decoded with its space as :func:`trio_rlmesh.spaces.decode_batch`
decodes it (arrays with a leading lane axis, dicts and tuples of them, a tuple of ``str`` for
Text). Rewards are floats and infos plain Python values.

Two hooks change the run: ``transform_observation`` and ``transform_action`` may return a
replacement batch of the same form (``None`` keeps the payload), which the driver encodes
with the space; if either raises, or returns a value the space cannot encode, the run fails
with :class:`~trio_rlmesh.HookError` chained to the original. Every other hook only
observes: if it raises, the error is logged on ``trio_rlmesh.runtime`` and counted in
``RuntimeReport.hook_errors``, and the run goes on.

Order for a single-lane run with one two-step episode::

    session_started
    episode_started
    reset_completed                                (the env's reset answer)
    transform_observation, observation_emitted     (reset observation, step 0)
    transform_action, action_received              (step 1)
    step_completed                                 (step 1)
    transform_observation, observation_emitted     (step 1)
    transform_action, action_received              (step 2)
    step_completed                                 (step 2)
    episode_completed
    session_ended                                  (after env close / model release)
    on_telemetry(horizon="session")

A failed run ends with ``on_telemetry(horizon="session")`` then ``session_failed``.
Window telemetry may arrive at any point in between. An env-owned roll (NEXT_STEP) fires
``step_completed`` (whose observation starts the new episode) before its ``episode_started``.

``hooks`` may also be a sequence of :class:`RuntimeHooks`: each event goes to every one that
overrides its method, in order, and transforms chain (each sees the payload the one before
returned).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import attrs

from ..protocol import meta_to_python
from ._report import EpisodeRecord
from ._telemetry import TelemetryRow

if TYPE_CHECKING:
    from ..protocol import EnvContractInfo

__all__ = [
    "ActionReceived",
    "EpisodeCompleted",
    "EpisodeStarted",
    "ObservationEmitted",
    "ResetCompleted",
    "RuntimeHooks",
    "SessionEnded",
    "SessionFailed",
    "SessionStarted",
    "StepCompleted",
    "Telemetry",
]

logger = logging.getLogger("trio_rlmesh.runtime")


@attrs.frozen
class SessionStarted:
    """The run is about to reset its first lanes."""

    session_id: str
    env_id: str
    num_envs: int
    lanes_step_individually: bool
    contract: EnvContractInfo | None = None
    """The env's contract, decoded: its own id (``contract.env_id``, e.g. ``"CartPole-v1"``),
    spaces, metadata and render mode (``None`` if the contract does not decode)."""


@attrs.frozen
class SessionEnded:
    """The run returned a report (``status`` is ``"completed"`` or ``"cancelled"``)."""

    session_id: str
    env_id: str
    status: str
    reason: str | None
    total_steps: int
    total_episodes: int


@attrs.frozen
class SessionFailed:
    """The run is about to raise: ``error`` failed it, or (``None``) the caller cancelled it."""

    session_id: str
    env_id: str
    reason: str
    error: BaseException | None
    total_steps: int
    total_episodes: int


@attrs.frozen
class EpisodeStarted:
    """A lane started an episode: after its reset, or when the env rolled it itself."""

    session_id: str
    env_id: str
    episode_id: str
    index: int
    """0-based start-order index (the future ``EpisodeRecord.index``)."""
    env_index: int
    seed: int | None
    trial: int
    auto_reset: bool
    """True when the env rolled the lane itself (NEXT_STEP), False after a runtime reset."""


@attrs.frozen
class EpisodeCompleted:
    """An episode ended and was counted (its record is the one the report will hold)."""

    session_id: str
    env_id: str
    record: EpisodeRecord
    final_info: dict[str, Any] | None
    """The env's final info for the episode (``None`` for runtime truncations)."""


@attrs.frozen
class ObservationEmitted:
    """An observation about to go to the model (or, when replaying, to be skipped)."""

    session_id: str
    env_id: str
    env_indices: tuple[int, ...]
    """The lanes it covers, in leaf-batch order."""
    episode_ids: tuple[str, ...]
    step: int
    """Episode step count of the first lane (0 right after a reset)."""
    is_reset: bool
    observation: Any
    """The observation batch of the lanes in ``env_indices`` (numpy values, see above)."""


@attrs.frozen
class ActionReceived:
    """An action frame about to be sent to the env."""

    session_id: str
    env_id: str
    env_indices: tuple[int, ...]
    episode_ids: tuple[str, ...]
    step: int
    """The episode step this action produces (first lane)."""
    replayed: bool
    """True when the frame came from an earlier chunk instead of a fresh predict."""
    action: Any
    """The action batch of the lanes in ``env_indices`` (numpy values, see above)."""


def _infos(meta: Any) -> dict[str, Any]:
    return meta_to_python(meta) if meta is not None and meta.entries else {}


@attrs.frozen
class ResetCompleted:
    """The env answered a reset of ``env_indices``; fired after their ``episode_started``."""

    session_id: str
    env_id: str
    env_indices: tuple[int, ...]
    """The lanes reset, in leaf-batch order."""
    episode_ids: tuple[str, ...]
    """The episodes the reset started, aligned with ``env_indices``."""
    frames: tuple[bytes | None, ...] = ()
    """One PNG frame per lane when the driver renders (``RuntimeDriver(render=True)``)."""
    _raw_observation: tuple[bytes, ...] = attrs.field(
        default=(), repr=False, eq=False, alias="raw_observation"
    )
    # The reset observation's wire leaves as the env sent them (before any transform),
    # batched over ``env_indices``: for the recorder, which decodes them off the loop.
    _raw_infos: Any = attrs.field(default=None, repr=False, eq=False, alias="raw_infos")
    # The infos as they came over the wire: decoded only when someone reads ``infos``.

    @property
    def infos(self) -> dict[str, Any]:
        """The reset's infos (``{}`` when none), decoded on each access. A vector env's infos
        hold a list per key over its lanes, with a ``_key`` mask (Gymnasium's layout)."""
        return _infos(self._raw_infos)


@attrs.frozen
class StepCompleted:
    """The env answered a step of the lanes in ``env_indices``."""

    session_id: str
    env_id: str
    env_indices: tuple[int, ...]
    """The lanes stepped, in leaf-batch order."""
    episode_ids: tuple[str, ...]
    """Each lane's episode after the step: a lane that rolled (NEXT_STEP) names its new one."""
    step: int
    rewards: tuple[float, ...]
    """Each lane's reward, aligned with ``env_indices`` (0 on the step a lane rolls)."""
    total_steps: int
    frames: tuple[bytes | None, ...] = ()
    """One PNG frame per lane when the driver renders (``RuntimeDriver(render=True)``)."""
    _raw_action: tuple[bytes, ...] = attrs.field(
        default=(), repr=False, eq=False, alias="raw_action"
    )
    # The action's wire leaves the env got (after ``transform_action``; a replayed chunk
    # frame on a step that needed no predict), batched over ``env_indices``.
    _raw_observation: tuple[bytes, ...] = attrs.field(
        default=(), repr=False, eq=False, alias="raw_observation"
    )
    # The env's answer as it sent it (before any transform); a lane that rolled shows its
    # new episode's first observation.
    _raw_infos: Any = attrs.field(default=None, repr=False, eq=False, alias="raw_infos")
    # The infos as they came over the wire: decoded only when someone reads ``infos``.

    @property
    def infos(self) -> dict[str, Any]:
        """The step's infos (``{}`` when none), decoded on each access (see
        :attr:`ResetCompleted.infos`)."""
        return _infos(self._raw_infos)


@attrs.frozen
class Telemetry:
    """A telemetry snapshot: of the last window while running, of the whole session at the end."""

    session_id: str
    env_id: str
    horizon: Literal["window", "session"]
    rows: tuple[TelemetryRow, ...]


class RuntimeHooks:
    """Base class of run observers and transforms; every method is a no-op.

    >>> class CountSteps(RuntimeHooks):
    ...     def __init__(self) -> None:
    ...         self.steps = 0
    ...
    ...     async def step_completed(self, event: StepCompleted) -> None:
    ...         self.steps += 1
    """

    async def session_started(self, event: SessionStarted) -> None:
        """Once, before the first reset."""

    async def episode_started(self, event: EpisodeStarted) -> None:
        """Per new episode: after its reset, or when an autoreset lane rolls."""

    async def reset_completed(self, event: ResetCompleted) -> None:
        """After every env reset answer, before the reset observation is transformed."""

    async def transform_observation(self, event: ObservationEmitted) -> Any:
        """Return a replacement observation batch, or ``None`` to keep it. Raising fails the run."""
        return None

    async def observation_emitted(self, event: ObservationEmitted) -> None:
        """After ``transform_observation``, with the payload the model will see."""

    async def transform_action(self, event: ActionReceived) -> Any:
        """Return a replacement action batch, or ``None`` to keep it. Raising fails the run."""
        return None

    async def action_received(self, event: ActionReceived) -> None:
        """After ``transform_action``, with the payload the env will get."""

    async def step_completed(self, event: StepCompleted) -> None:
        """After every env step, before its completions are processed."""

    async def episode_completed(self, event: EpisodeCompleted) -> None:
        """Per counted completion (never more than ``max_episodes`` in all)."""

    async def session_ended(self, event: SessionEnded) -> None:
        """When the run returns its report, after env close and model release."""

    async def session_failed(self, event: SessionFailed) -> None:
        """When the run is about to raise, after env close and model release."""

    async def on_telemetry(self, event: Telemetry) -> None:
        """Window snapshots while running, then one session snapshot at the end."""


_OBSERVERS = (
    "session_started",
    "episode_started",
    "reset_completed",
    "observation_emitted",
    "action_received",
    "step_completed",
    "episode_completed",
    "session_ended",
    "session_failed",
    "on_telemetry",
)
_TRANSFORMS = ("transform_observation", "transform_action")


_PAYLOADS = {"transform_observation": "observation", "transform_action": "action"}
"""The event field each transform replaces."""

HooksArg = RuntimeHooks | Sequence[RuntimeHooks] | None
"""What the driver takes as ``hooks``: one object, several (called in order), or none."""


def _overrides(hooks: RuntimeHooks, name: str) -> bool:
    return getattr(type(hooks), name, None) is not getattr(RuntimeHooks, name)


class HookDispatcher:
    """Calls only the hooks a subclass overrides; counts and logs observer failures.

    With several hook objects, each method goes to those that override it, in order.
    """

    def __init__(self, hooks: HooksArg) -> None:
        if hooks is None:
            chain: tuple[RuntimeHooks, ...] = ()
        elif isinstance(hooks, RuntimeHooks):
            chain = (hooks,)
        else:
            chain = tuple(hooks)
        self.errors = 0
        self._targets: dict[str, tuple[RuntimeHooks, ...]] = {}
        for name in _OBSERVERS + _TRANSFORMS:
            targets = tuple(h for h in chain if _overrides(h, name))
            if targets:
                self._targets[name] = targets
        self.overridden: frozenset[str] = frozenset(self._targets)

    def wants(self, name: str) -> bool:
        return name in self.overridden

    async def fire(self, name: str, event: object) -> None:
        """Deliver ``event`` to observer ``name``, if overridden; a raise is logged and counted."""
        for hooks in self._targets.get(name, ()):
            try:
                await getattr(hooks, name)(event)
            except Exception:
                self.errors += 1
                logger.warning("runtime hook %s raised; the run goes on", name, exc_info=True)

    async def transform(self, name: str, event: object) -> Any:
        """Run transform ``name`` (if overridden); its exceptions propagate to the caller.

        Several transforms chain: each gets the event carrying the batch the one before
        returned; the last replacement (or ``None`` when none replaced it) is the answer.
        """
        replaced: Any = None
        for hooks in self._targets.get(name, ()):
            result = await getattr(hooks, name)(event)
            if result is not None:
                replaced = result
                event = attrs.evolve(event, **{_PAYLOADS[name]: result})  # type: ignore[misc]
        return replaced
