"""The adapter objects users hold: :class:`Adapter` (resolved) and :class:`AdapterBase`."""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar, final

import numpy as np
import numpy.typing as npt

from ._advice import Advisory
from ._apply import assemble, convert_action, observe, place, select_referenced
from ._fmt import render_placement
from ._history import EpisodeState
from ._host import ActionShim, StateShim, repack_action, repack_state
from ._plans import AdapterPlan, ImagePlan, PreviousPiece, StatePlan
from ._resolve import OBS_ROOT_KEY

__all__ = ["Adapter", "AdapterBase", "explain_plan"]

ActionT = TypeVar("ActionT")
Segments = tuple["str | int", ...]


class AdapterBase(ABC, Generic[ActionT]):
    """The base of every env-to-model adapter.

    :func:`~trio_rlmesh.adapters.resolve` builds the spec-driven :class:`Adapter`; subclass
    this for a pairing no spec can express (a control-space conversion needing a kinematic
    model, say). Implement the two transforms; :meth:`wrap_predict` comes with it. A custom
    adapter may keep state across steps; override :meth:`reset` (episode start) and
    :meth:`observe` (a step that predicted nothing) to keep it right.

    Example:
        >>> class Halve(AdapterBase):
        ...     def transform_obs(self, raw_obs):
        ...         return raw_obs
        ...     def transform_action(self, raw_action):
        ...         return raw_action / 2
        >>> Halve().wrap_predict(lambda obs: 4.0)({"x": 1})
        2.0
    """

    @abstractmethod
    def transform_obs(self, raw_obs: Any) -> Any:
        """The model payload for a raw env observation (a mapping, or a bare leaf)."""

    @abstractmethod
    def transform_action(self, raw_action: Any) -> ActionT:
        """The env action for the model's output."""

    def reset(self) -> None:
        """Clear episode-scoped state (nothing by default)."""

    def observe(self, raw_obs: Any) -> None:
        """See the observation of a step that predicted nothing (a replayed chunk frame)."""

    def explain(self) -> str:
        """A human-readable summary of the adapter."""
        return f"{type(self).__name__} (custom adapter)"

    def wrap_predict(self, predict_fn: Callable[[Any], Any]) -> Callable[[Any], ActionT]:
        """``predict_fn`` (payload in, model action out) as raw observation in, env action out."""

        def predict(raw_obs: Any) -> ActionT:
            return self.transform_action(predict_fn(self.transform_obs(raw_obs)))

        return predict


def explain_plan(
    plan: AdapterPlan,
    state_shims: tuple[StateShim, ...] = (),
    action_shims: tuple[ActionShim, ...] = (),
) -> str:
    """The ``explain()`` text of a plan (and its custom-encoding shims)."""
    lines = ["observation:"]
    lines += [f"  {obs.describe}" for obs in plan.obs]
    lines.append("action:")
    lines += [f"  {line}" for line in plan.action.describe]
    if plan.resolve_advisories:
        lines.append("dropped:")
        lines += [f"  {note.message}" for note in plan.resolve_advisories]
    if state_shims or action_shims:
        lines.append("host-side encodings:")
        for state in state_shims:
            stop = state.offset + state.width
            placement = render_placement(state.placement)
            lines.append(
                f"  obs    {placement!r}[{state.offset}:{stop}]: {state.base} -> {state.name}"
            )
        for action in action_shims:
            stop = action.offset + action.width
            lines.append(f"  action [{action.offset}:{stop}]: {action.name} -> {action.base}")
    return "\n".join(lines)


@final
class Adapter(AdapterBase[npt.NDArray[np.float32]]):
    """A resolved env-to-model adapter; :func:`~trio_rlmesh.adapters.resolve` builds one.

    The adapter keeps the history of one episode of one env (frame windows, the previous
    action): call :meth:`reset` when a new episode starts.

    Example:
        >>> import numpy as np
        >>> from gymnasium import spaces
        >>> from trio_rlmesh import adapters as adapt
        >>> tags = adapt.EnvTags(
        ...     observation={"pos": adapt.StateTag(adapt.EEF_POS)},
        ...     action=adapt.Action(adapt.Actuator(adapt.ACTION_GRIPPER, 1)),
        ... )
        >>> spec = adapt.ModelSpec(
        ...     input={"state": adapt.Concat(adapt.EEF_POS, pad_to=4)},
        ...     output=adapt.Action(adapt.Actuator(adapt.ACTION_GRIPPER, 1, invert=True)),
        ... )
        >>> adapter = adapt.resolve(
        ...     tags,
        ...     spaces.Dict({"pos": spaces.Box(-1, 1, (3,))}),
        ...     spaces.Box(-1, 1, (1,)),
        ...     spec,
        ... )
        >>> adapter.transform_obs({"pos": np.ones(3)})["state"].tolist()
        [1.0, 1.0, 1.0, 0.0]
        >>> adapter.transform_action(np.array([0.5])).tolist()
        [-0.5]
    """

    def __init__(
        self,
        plan: AdapterPlan,
        customs: Mapping[Segments, Callable[[Mapping[str, Any]], Any]] | None = None,
        state_shims: tuple[StateShim, ...] = (),
        action_shims: tuple[ActionShim, ...] = (),
    ) -> None:
        self._plan = plan
        self._customs = dict(customs or {})
        self._state_shims = state_shims
        self._action_shims = action_shims
        self._state = EpisodeState()
        self._history_keys = tuple(
            render_placement(p.placement)
            for p in plan.obs
            if (isinstance(p, ImagePlan) and p.stack > 1)
            or (isinstance(p, StatePlan) and any(isinstance(x, PreviousPiece) for x in p.pieces))
        )

    @property
    def plan(self) -> AdapterPlan:
        """The resolved plan (shared, immutable: safe to apply for many lanes at once)."""
        return self._plan

    def _payload(self, raw_obs: Any) -> Any:
        entries: Mapping[str, Any] = (
            raw_obs if isinstance(raw_obs, Mapping) else {OBS_ROOT_KEY: raw_obs}
        )
        selected = select_referenced(self._plan, entries)
        payload = assemble(self._plan, selected, (self._state,))
        for shim in self._state_shims:
            payload = _replace_at(payload, shim.placement, functools.partial(repack_state, shim))
        for placement, transform in self._customs.items():
            payload = place(payload, placement, _plain(transform(entries)))
        return payload

    def transform_obs(self, raw_obs: Any) -> Any:
        """The model payload (a dict, a list or a bare leaf, as the spec's input tree) for a
        raw env observation (a mapping, or the bare leaf of a non-Dict observation).

        Raises:
            ApplyError: the observation lacks what the plan reads, or has the wrong width.
        """
        return self._payload(raw_obs)

    def observe(self, raw_obs: Any) -> None:
        """Count a step that predicted nothing (a replayed chunk frame): its frames still
        enter the windows, and the next action is recorded under it. A no-op without history."""
        if not self._history_keys:
            return
        entries: Mapping[str, Any] = (
            raw_obs if isinstance(raw_obs, Mapping) else {OBS_ROOT_KEY: raw_obs}
        )
        observe(self._plan, select_referenced(self._plan, entries), (self._state,))

    def history_windows(self) -> tuple[tuple[str, int, int], ...]:
        """``(placement, span, frame_bytes)`` per frame window of one episode."""
        return tuple(
            (render_placement(p.placement), p.span, p.frame_bytes) for p in self._plan.stacked
        )

    def history_keys(self) -> tuple[str, ...]:
        """Placements of the inputs holding per-episode history (frame windows, previous
        actions); empty when :meth:`observe` has nothing to do."""
        return self._history_keys

    def reset(self) -> None:
        """Start a new episode: clear the frame windows and the previous action."""
        self._state.reset()

    def transform_action(self, raw_action: Any) -> npt.NDArray[np.float32]:
        """The env action (a float32 vector) for the model's action vector.

        Raises:
            ApplyError: the action has the wrong length or is not numeric.
        """
        action = repack_action(self._action_shims, raw_action)
        return convert_action(self._plan.action, action, (self._state,))

    def explain(self) -> str:
        """What the adapter does, input by input and actuator by actuator (RLMesh's text)."""
        return explain_plan(self._plan, self._state_shims, self._action_shims)

    def advisories(self) -> list[Advisory]:
        """Non-fatal notes about this pairing (``severity`` ``"info"`` or ``"caution"``)."""
        return list(self._plan.advisories)


def _plain(value: Any) -> Any:
    """A custom input's value as a payload carries it: numpy scalars (and 0-d arrays) as
    Python numbers, inside lists and dicts too (as RLMesh's value bridge hands it back)."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return value.item()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _replace_at(payload: Any, placement: Segments, change: Callable[[Any], Any]) -> Any:
    if not placement:
        return change(payload)
    head = placement[0]
    try:
        child = payload[head]
    except (KeyError, IndexError, TypeError):
        return payload
    payload[head] = _replace_at(child, placement[1:], change)
    return payload
