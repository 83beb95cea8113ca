"""The authoring class: subclass :class:`Model`, write numpy in, numpy out."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from ..adapters import ModelSpec

__all__ = ["Model"]


class Model:
    """Base class for a model served or run by trio-rlmesh (like ``rlmesh.numpy.Model``).

    Override any subset of the four predict corners; the engine derives the rest and
    picks one per predict (see :func:`~trio_rlmesh.model.as_handler`):

    * ``predict(observation)``: one lane, one action;
    * ``predict_batch(observations)``: every leaf has a leading lane axis; return the
      batched action (leaves ``[N, ...]``) or a list of ``N`` per-lane actions;
    * ``predict_chunk(observation)``: one lane, a chunk of actions (leading axis = frames);
    * ``predict_chunk_batch(observations)``: leaves ``[N, frames, ...]``.

    A chunk corner may take the execution horizon as a second positional parameter, or
    as a keyword-only ``execution_horizon``. Any corner may take a trailing ``context``
    parameter (a :class:`~trio_rlmesh.model.PredictContext`, a list of them for batched
    corners) carrying the episode id and seed, the predict index, ``predict_seed`` (bit
    exact with ``rlmesh.predict_seed``) and a per-episode ``state`` dict that is created
    on the episode's first predict and dropped when it ends.

    Example:
        >>> import numpy as np
        >>> class Zero(Model):
        ...     def predict(self, observation):
        ...         return np.int64(0)
    """

    native_chunk: ClassVar[int | None] = None
    """How many frames ONE chunk-corner call returns, when fixed by the model.

    Declared, it is a promise: a resolve with a larger execution horizon is refused and
    a chunk of any other length fails the predict. May be set in :meth:`load`.
    """

    spec: ModelSpec | None = None
    """The model's input and action layout (a :class:`~trio_rlmesh.adapters.ModelSpec`),
    as ``rlmesh.numpy.Model(fn, spec=...)`` declares it. A class attribute, or set in
    :meth:`load`.

    Declared, every route resolves an adapter between the env's tags and this spec before
    its first predict (a pairing that cannot work fails the route, naming what to change),
    and every step is adapted: the predict corners see the spec's payload and return
    actions in the spec's layout; the env receives its own. ``None`` (the default): the
    model sees the env's observations as they are.
    """

    allow_fusion: ClassVar[bool] = True
    """Whether a batched corner may receive lanes of several envs in one call."""

    def load(self) -> None:
        """Load weights; called once, before the first predict. No-op by default."""

    def predict(self, observation: Any) -> Any:
        """Map one observation to one action. Override this (or another corner)."""
        raise NotImplementedError(f"{type(self).__name__} does not define predict()")

    def predict_batch(self, observations: Any) -> Any:
        """Optional: one forward for a batch of lanes."""
        raise NotImplementedError(f"{type(self).__name__} does not define predict_batch()")

    def predict_chunk(self, observation: Any) -> Any:
        """Optional: one lane, a chunk of actions (the leading axis is the frame axis)."""
        raise NotImplementedError(f"{type(self).__name__} does not define predict_chunk()")

    def predict_chunk_batch(self, observations: Any) -> Any:
        """Optional: a batch of lanes, a chunk per lane (leaves ``[N, frames, ...]``)."""
        raise NotImplementedError(f"{type(self).__name__} does not define predict_chunk_batch()")

    def on_episode_end(self, episode_id: str = "") -> None:
        """Called once per ended episode (after its context state is dropped). No-op."""

    def close(self) -> None:
        """Release resources; called once when the model's server or run ends. No-op."""
