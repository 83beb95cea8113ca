"""The seam between a serving path and whatever computes actions: :class:`ModelHandler`.

Both the in-process adapter (:class:`~trio_rlmesh.transports.inprocess.ModelHandlerRuntimeModel`)
and the gRPC model server talk to a model only through this Protocol (by way of the one model
host both serve through), so a user who needs full control (a remote GPU pool, a custom
batching policy) implements it directly, and everybody else gets one from
:func:`~trio_rlmesh.model.as_handler`.

Theory of operation:

* A *route* is one env attached to the model, named by its ``env_id``. The route setup
  (:meth:`ModelHandler.route_setup`) is told about it once, with the env's contract and
  the runtime's execution horizon, and answers what the route needs (history rows, the
  model's native chunk length).
* Every predict arrives as a list of :class:`ModelObservation` groups (one per request)
  and is answered by one :meth:`ModelHandler.predict_grouped` call, results aligned 1:1.
  A failed group is returned as its :class:`~trio_rlmesh.Error` in place; it never sinks
  the other groups, and it reaches the runtime as it is (name the env in it:
  :attr:`ModelObservation.env_label`). An exception the call raises fails every group,
  each as the model's error on that env.
* Episodes end explicitly: ``reset_adapter(env_id, episode_ids)`` drops their state.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

from .._errors import Error
from ..protocol import core_v1, spec_to_space
from ..spaces import Space, unstack

__all__ = [
    "EpisodeRef",
    "HeldState",
    "HistoryRow",
    "ModelHandler",
    "ModelObservation",
    "PredictFrames",
    "ResolveOptions",
    "RouteContract",
    "RouteNeeds",
    "RouteSetup",
]


@attrs.frozen
class EpisodeRef:
    """Which episode a lane of a predict belongs to."""

    episode_id: str
    """Runtime-minted id (a UUIDv7 from real runtimes); never empty on a valid request."""
    seed: int | None = None
    """The seed the episode was reset with; ``None`` when it was not explicitly seeded."""


@attrs.frozen
class HistoryRow:
    """One env step the model did not see (an open-loop replay step), as the runtime sent it."""

    observation: Any
    """The decoded single-lane observation of that step."""
    episode: EpisodeRef | None
    """The episode the row belongs to."""
    step: int
    """The producer's env-step counter for that row."""


@attrs.frozen
class RouteContract:
    """What the model learns about an env when a route is resolved.

    The served path only receives the ``EnvSpec`` (id, spaces, metadata), so the lane
    count and autoreset mode are unknown there; the in-process path knows them.
    """

    env_name: str
    """The env's own name (``EnvSpec.id``, e.g. ``"CartPole-v1"``)."""
    observation_space: Space | None
    """Per-lane observation space (a served route may omit it)."""
    action_space: Space
    """Per-lane action space (always present: actions cannot be encoded without it)."""
    metadata: Mapping[str, Any] = attrs.field(factory=dict)
    """Env metadata as plain Python values."""
    num_envs: int = 1
    """Lane count when known (1 on the served path)."""

    @classmethod
    def from_env_spec(cls, spec: core_v1.EnvSpec) -> RouteContract:
        """Decode and validate the ``EnvSpec`` a ResolveAdapter carries.

        Raises:
            SpaceError: an invalid space, or no action space.
        """
        from .._errors import SpaceError
        from ..protocol import meta_to_python

        if spec.action_space is None:
            raise SpaceError("missing from the env spec", path="$.action_space")
        observation = (
            spec_to_space(spec.observation_space, path="$.observation_space")
            if spec.observation_space is not None
            else None
        )
        return cls(
            env_name=spec.id,
            observation_space=observation,
            action_space=spec_to_space(spec.action_space, path="$.action_space"),
            metadata=meta_to_python(spec.metadata),
        )


@attrs.frozen
class ResolveOptions:
    """How the runtime will drive a route."""

    execution_horizon: int = 1
    """Actions executed per predict (1 = no chunking)."""
    delivers_history: bool = False
    """Whether the runtime offers observation-history rows for skipped steps."""


@attrs.frozen
class RouteNeeds:
    """A route setup's answer to a resolve."""

    history: tuple[str, ...] | None = None
    """Model-input placements that need per-episode history (``None``: no history wanted)."""
    native_chunk: int | None = None
    """The model's declared chunk length, when it declares one."""


@attrs.frozen
class HeldState:
    """How much per-episode state a handler holds right now."""

    episodes: int
    bytes: int


@attrs.frozen
class PredictFrames:
    """A group's answer: this step's actions plus frames to replay open-loop.

    ``actions[lane]`` is the action for this step; ``replay[j][lane]`` the action for
    step ``j + 1``. Every frame holds one action per lane of the group.
    """

    actions: list[Any]
    replay: list[list[Any]] = attrs.field(factory=list)


def env_label(env_id: str, env_name: str = "") -> str:
    """How messages name an env route: by the env's own name, with the route id (a run
    mints one per session) to match logs, or by the route id alone when the name is unknown.

    >>> env_label("01a2", "CartPole-v1"), env_label("01a2")
    ("env 'CartPole-v1' (route 01a2)", "env '01a2'")
    """
    if env_name and env_name != env_id:
        return f"env {env_name!r}{_ROUTE.format(env_id)}"
    return f"env {env_id!r}"


_ROUTE = " (route {})"
_ROUTE_NOTES = re.compile(re.escape(_ROUTE).replace(r"\{\}", r"[^\s()]+"))


def without_route_ids(text: str) -> str:
    """``text`` without the route ids :func:`env_label` adds beside env names (for a reader
    who never sees routes: the command line's one-line errors).

    >>> without_route_ids("model 'm' failed on " + env_label("01a2", "CartPole-v1") + " lane 0")
    "model 'm' failed on env 'CartPole-v1' lane 0"
    """
    return _ROUTE_NOTES.sub("", text)


@attrs.frozen
class ModelObservation:
    """One predict group, decoded: a batch of lanes plus the route context."""

    observation: Any
    """The decoded batch (numpy leaves with a leading lane axis; Text leaves a tuple of str)."""
    env_id: str
    session_id: str
    request_id: str
    episodes: tuple[EpisodeRef, ...]
    """One entry per lane, in lane order."""
    step: int | None = None
    """The producer's env-step counter for this observation (history routes only)."""
    history: tuple[HistoryRow, ...] = ()
    """Rows for env steps the model did not see since its last predict."""
    observation_space: Space | None = None
    action_space: Space | None = None
    env_name: str = ""
    """The env's own name from its contract (``"CartPole-v1"``); empty when unknown."""

    @property
    def env_label(self) -> str:
        """How messages name this group's env (see :func:`env_label`)."""
        return env_label(self.env_id, self.env_name)

    @property
    def num_envs(self) -> int:
        """Lanes in this group (``len(episodes)``, at least 1)."""
        return max(1, len(self.episodes))

    def lanes(self) -> list[Any]:
        """The batch split into single-lane values."""
        if self.observation_space is not None:
            return unstack(self.observation_space, self.observation, self.num_envs)
        from ._tree import split_batch

        return split_batch(self.observation, self.num_envs)


@runtime_checkable
class RouteSetup(Protocol):
    """Per-route configuration a handler may expose (see :meth:`ModelHandler.route_setup`).

    Called outside the predict path; an implementation synchronizes itself.
    """

    async def resolve_adapter(
        self, env_id: str, contract: RouteContract, options: ResolveOptions
    ) -> RouteNeeds:
        """Configure (or reconfigure: it is an upsert) the route for ``env_id``.

        Raises:
            Error: the route cannot be served; the resolve fails with it.
        """
        ...

    async def reset_adapter(self, env_id: str, episode_ids: Sequence[str]) -> None:
        """Evict route-level buffers of those episodes (all of the env's for an empty list)."""
        ...

    async def release_adapter(self, env_id: str) -> None:
        """Forget the route entirely."""
        ...


@runtime_checkable
class ModelHandler(Protocol):
    """Anything that answers grouped predicts; the one seam every serving path uses."""

    async def predict_grouped(
        self, observations: list[ModelObservation]
    ) -> list[PredictFrames | Error]:
        """Answer every group, 1:1 and in order; a failed group is its error, in place."""
        ...

    def route_setup(self) -> RouteSetup | None:
        """The route configuration hook, or ``None`` when routes need no setup."""
        ...

    async def reset_adapter(self, env_id: str, episode_ids: Sequence[str]) -> None:
        """Drop per-episode state for ``episode_ids`` (all of the env's for an empty list)."""
        ...

    def take_adapter_ns(self) -> int:
        """Nanoseconds of adapter work since the last call (then reset to zero)."""
        ...

    def held_state(self) -> HeldState | None:
        """Per-episode state held right now, or ``None`` when not tracked."""
        ...

    async def close(self) -> None:
        """Release the model; called once when its session or server ends."""
        ...
