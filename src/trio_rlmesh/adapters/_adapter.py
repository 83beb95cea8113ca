"""The adapter objects users hold: :class:`Adapter` (resolved) and :class:`AdapterBase`."""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar, final

import numpy as np
import numpy.typing as npt

from ._advice import Advisory
from ._apply import (
    assemble,
    convert_action,
    model_actions,
    observe,
    place,
    record,
    select_referenced,
)
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

    def _payload(self, raw_obs: Any, state: EpisodeState) -> Any:
        entries = _entries(raw_obs)
        payload = assemble(self._plan, select_referenced(self._plan, entries), (state,))
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
        return self._payload(raw_obs, self._state)

    def observe(self, raw_obs: Any, *, input_bridge: object = None) -> None:
        """Count a step that predicted nothing (a replayed chunk frame): its frames still
        enter the windows, and the next action is recorded under it. A no-op without history.

        ``input_bridge`` is accepted so RLMesh code runs unchanged, and ignored: values are
        read through numpy (``np.asarray``), whichever array library made them.
        """
        del input_bridge
        if self._history_keys:
            observe(self._plan, select_referenced(self._plan, _entries(raw_obs)), (self._state,))

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
        values = model_actions(self._plan.action, repack_action(self._action_shims, raw_action))
        record(self._plan.action, values, (self._state,))
        return convert_action(self._plan.action, values)

    # -- Lanes and chunks (trio-rlmesh additions; the plan is shared, the episodes are not) --

    def new_episode(self, episode: str = "") -> EpisodeState:
        """A fresh history for one episode of one lane (``episode`` names it in errors)."""
        return EpisodeState(episode)

    def transform_obs_lanes(
        self, observations: Sequence[Any], episodes: Sequence[EpisodeState]
    ) -> Any:
        """The payload for one step of ``N`` lanes at once: every leaf gains a leading lane
        axis (a list for text and list containers). ``episodes[i]`` is lane ``i``'s history.

        Example:
            >>> import numpy as np
            >>> from gymnasium import spaces
            >>> from trio_rlmesh import adapters as adapt
            >>> adapter = adapt.resolve(
            ...     adapt.EnvTags({"q": adapt.StateTag(adapt.JOINT_POS)},
            ...                   adapt.Action(adapt.Actuator(adapt.ACTION_JOINT_POS, 2))),
            ...     spaces.Dict({"q": spaces.Box(-1, 1, (2,))}), spaces.Box(-1, 1, (2,)),
            ...     adapt.ModelSpec({"q": adapt.State(adapt.JOINT_POS, scale=2.0)},
            ...                     adapt.Action(adapt.Actuator(adapt.ACTION_JOINT_POS, 2))),
            ... )
            >>> lanes = [adapter.new_episode(), adapter.new_episode()]
            >>> adapter.transform_obs_lanes([{"q": np.ones(2)}, {"q": np.zeros(2)}], lanes)["q"]
            array([[2., 2.],
                   [0., 0.]], dtype=float32)
        """
        lanes = len(observations)
        if len(episodes) != lanes:
            raise ValueError(f"{lanes} observations but {len(episodes)} episodes")
        entries = [_entries(obs) for obs in observations]
        selected = [select_referenced(self._plan, e) for e in entries]
        payload = assemble(self._plan, selected, episodes, lanes)
        for shim in self._state_shims:
            repack = functools.partial(_per_lane, functools.partial(repack_state, shim))
            payload = _replace_at(payload, shim.placement, repack)
        for placement, transform in self._customs.items():
            values = [_plain(transform(e)) for e in entries]
            payload = place(payload, placement, _batched(values))
        return payload

    def observe_lanes(self, observations: Sequence[Any], episodes: Sequence[EpisodeState]) -> None:
        """:meth:`observe` for ``N`` lanes at once."""
        if self._history_keys:
            selected = [select_referenced(self._plan, _entries(obs)) for obs in observations]
            observe(self._plan, selected, episodes, len(observations))

    def transform_action_lanes(
        self, raw_actions: Any, episodes: Sequence[EpisodeState]
    ) -> npt.NDArray[np.float32]:
        """The env actions ``(N, env_dim)`` for the model's actions ``(N, model_dim)``, each
        recorded as its lane's action of this step."""
        lanes = len(episodes)
        rows = _repack_rows(self._action_shims, raw_actions, lanes)
        values = model_actions(self._plan.action, rows, (lanes,))
        record(self._plan.action, values, episodes)
        return convert_action(self._plan.action, values)

    def transform_chunk(self, raw_chunk: Any, lanes: int | None = None) -> npt.NDArray[np.float32]:
        """The env actions for a chunk of model actions, frame by frame: ``(H, model_dim)``
        gives ``(H, env_dim)``; with ``lanes=N``, ``(N, H, model_dim)`` gives
        ``(N, H, env_dim)``. Nothing is recorded: :meth:`record_action` each frame as it
        executes (between :meth:`observe` calls), for parts reading the previous action."""
        chunk = np.asarray(raw_chunk)
        lead = chunk.shape[:-1] if lanes is None else (lanes, *chunk.shape[1:-1])
        rows = _repack_rows(self._action_shims, chunk, int(np.prod(lead)))
        values = model_actions(self._plan.action, rows, lead)
        return convert_action(self._plan.action, values)

    def record_action(self, episode: EpisodeState, raw_action: Any) -> None:
        """Record one executed model action (a chunk frame) as ``episode``'s current step's."""
        values = model_actions(self._plan.action, repack_action(self._action_shims, raw_action))
        record(self._plan.action, values, (episode,))

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


def _entries(raw_obs: Any) -> Mapping[str, Any]:
    """An observation as a mapping: a non-Dict observation sits under ``<obs>``."""
    return raw_obs if isinstance(raw_obs, Mapping) else {OBS_ROOT_KEY: raw_obs}


def _per_lane(change: Callable[[Any], Any], rows: Any) -> Any:
    return np.stack([change(row) for row in rows])


def _batched(values: list[Any]) -> Any:
    """Each lane's custom value, stacked when they are numbers or same-shape arrays."""
    try:
        arrays = [np.asarray(v) for v in values]
    except (TypeError, ValueError):
        return values
    if all(a.dtype.kind in "biuf" for a in arrays) and len({a.shape for a in arrays}) == 1:
        return np.stack(arrays)
    return values


def _repack_rows(shims: tuple[ActionShim, ...], actions: Any, rows: int) -> Any:
    """``actions`` with each row's custom slices back in their base packing."""
    if not shims:
        return actions
    array = np.asarray(actions, dtype=np.float64)
    flat = array.reshape(rows, -1)
    return np.stack([repack_action(shims, row) for row in flat]).reshape(array.shape)


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
