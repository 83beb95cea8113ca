"""Per-episode state of an adapter: frame windows and the previous action.

An :class:`EpisodeState` belongs to one episode of one lane; the plan it serves is shared
and never changes. A new episode starts with a new (or :meth:`~EpisodeState.reset`) state,
so two lanes, or two episodes of one lane, never see each other's frames.

Steps are counted the way RLMesh counts them: an episode's first payload is its step 0;
after it, each observation the adapter sees (assembled into a payload, or only observed on a
step that replayed a queued action) is the next step, and the action converted after it is
recorded as that step's action. Observations only observed before the first payload enter
the frame windows but count no step (and actions before it are not recorded), so that
payload reads the ``Previous`` fill.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt

from ._errors import ApplyError

__all__ = ["EpisodeState"]


@attrs.define(eq=False)
class EpisodeState:
    """The history one episode of one lane carries between steps.

    Example:
        >>> state = EpisodeState()
        >>> state.step
        -1
    """

    episode: str = ""
    """The episode's id, named in errors (empty on the single-env local path)."""
    step: int = -1
    """The step of the latest observation (``-1`` before the first)."""
    windows: dict[str, deque[npt.NDArray[Any]]] = attrs.Factory(dict)
    """Processed frames per stacked input (by placement), newest last."""
    actions: dict[int, npt.NDArray[np.float32]] = attrs.Factory(dict)
    """The raw model action recorded per step (only the latest is kept)."""

    def reset(self) -> None:
        """Forget everything: the next observation is step 0 of a new episode."""
        self.step = -1
        self.windows.clear()
        self.actions.clear()

    def tick(self) -> int:
        """Count one more observation, assembled into a payload; its step."""
        self.step += 1
        return self.step

    def tick_observed(self) -> None:
        """Count an observation that was only observed (no payload): a step once the
        episode's first payload was made, nothing before it."""
        if self.step >= 0:
            self.step += 1

    def record(self, action: npt.NDArray[np.float32]) -> None:
        """Keep ``action`` as the action executed at the current step (none before the first)."""
        if self.step < 0:
            return
        self.actions.clear()
        self.actions[self.step] = action

    def previous(self) -> npt.NDArray[np.float32] | None:
        """The action recorded for the step before the current one (``None`` at step 0).

        Raises:
            ApplyError: that step's action never reached the adapter.
        """
        if self.step <= 0:
            return None
        action = self.actions.get(self.step - 1)
        if action is None:
            raise ApplyError(
                f"episode {self.episode}: the observation at step {self.step} reads the "
                f"previous action but no action was recorded for step {self.step - 1}; every "
                "executed action of the episode must reach apply_actions (or transform_action) "
                "once, under its step"
            )
        return action

    def push(
        self, key: str, frame: npt.NDArray[Any], span: int, pad: npt.NDArray[Any] | None
    ) -> deque[npt.NDArray[Any]]:
        """Add the newest frame of one stacked input; its window (``span`` frames).

        The first frame of an episode fills the window: with copies of ``pad`` when given (a
        black frame), else of itself.
        """
        window = self.windows.get(key)
        if window is None:
            filler = frame if pad is None else pad
            window = deque([filler] * (span - 1), maxlen=span)
            self.windows[key] = window
        window.append(frame)
        return window
