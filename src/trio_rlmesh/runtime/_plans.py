"""Per-group action planning: a pure, synchronous machine with no I/O and no clock.

Theory of operation
-------------------

A *group* is the lanes that share one action batch: every lane of a lockstep env, or
one lane of a lane endpoint. Its :class:`ActionSource` decides, step by step, where the
next action comes from, and what each predict carries. The driver does the I/O (it
calls the model, runs prefetch tasks, fires hooks) and tells the plan what happened:

* ``reset(observation)`` / ``observe(observation)``: a new observation arrived (a
  reset's, or a step's). Nothing has carried it to the model yet: it is *unseen*.
* ``replay()``: the next queued frame of an earlier chunk, or ``None``.
* ``prefetch_due()`` then ``launch_prefetch(context, handle)``: start the next predict
  early; ``take_prefetch()`` hands the pending one back, with its offset.
* ``request(context)``: the predict request for the current observation.
* ``take_predicted(actions)`` / ``take_prefetched(actions, offset)``: a chunk arrived;
  the frame to apply now (or ``None``: predict again).
* ``end_episode()``: an episode of the group ended; everything planned is stale.

The rules, all here:

* **Replay.** A predict answers a chunk: frame 0 is applied now, frames 1.. are queued
  and replayed on the following steps without calling the model.
* **Seen.** At most one predict (or prefetch) is built per observation; an observation
  no predict carried (a replayed step's) becomes a history row, once.
* **Prefetch** (``lead = L > 0``). When 1 to ``L`` frames are queued and nothing has
  carried the current observation ``O_j``, the next predict starts on ``O_j``. With
  ``d`` frames queued at launch, its first ``d`` frames are for the steps those frames
  cover, so they are skipped (the *offset*); a chunk with nothing left after skipping
  is predicted again on the current observation (counted in ``short_prefetches``).
* **History** (the model asked for it). Every predict carries ``step``, the first
  lane's env-step counter; a one-lane group's predict also carries, in order, the rows
  of the observations no predict carried since its last one. A multi-lane group gets no
  rows (a row names one episode): ``history_refused`` says so.
* **Invalidation.** An episode end on any lane of the group drops the queued frames, the
  pending history rows and the prefetch (whose handle is returned, for the driver to
  cancel). Frames are whole-batch on a multi-lane group, so its other lanes lose theirs
  too: ``discard_events`` and ``discarded_frames`` count that. A lane endpoint's group
  is one lane, so each lane replays on its own.

The plan reads the :class:`~trio_rlmesh.runtime._episodes.EpisodeBook` (episode ids,
seeds, step counters) and never changes it; its own counters change only here.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Generic, TypeVar

from ..protocol import model_v1, spaces_v1
from ._episodes import EpisodeBook

__all__ = ["ActionSource"]

H = TypeVar("H")
"""The driver's handle on a running prefetch (opaque to the plan)."""

_NO_OBSERVATION = spaces_v1.SpaceValue()


class ActionSource(Generic[H]):
    """Where one group's next action comes from: replay, prefetch or a fresh predict.

    >>> from trio_rlmesh.runtime._episodes import EpisodeBook
    >>> from trio_rlmesh.runtime._pool import EpisodePool
    >>> book = EpisodeBook(num_envs=1, owns_resets=True, pool=EpisodePool())
    >>> plan: ActionSource[str] = ActionSource(book, (0,))
    >>> _ = book.begin_reset([0]); book.reset_done([0], now=0.0)
    >>> plan.reset(spaces_v1.SpaceValue(leaves=[b"o0"]))
    >>> plan.replay() is None  # nothing queued: predict
    True
    >>> request = plan.request(model_v1.AdapterContext(request_id="r1"))
    >>> a, b = spaces_v1.SpaceValue(leaves=[b"a"]), spaces_v1.SpaceValue(leaves=[b"b"])
    >>> plan.take_predicted([a, b]) is a and len(plan.queue)
    1
    >>> plan.observe(spaces_v1.SpaceValue(leaves=[b"o1"]))
    >>> plan.replay() is b
    True
    """

    def __init__(
        self,
        book: EpisodeBook,
        lanes: tuple[int, ...],
        env_indices: tuple[int, ...] = (),
        *,
        wants_history: bool = False,
        lead: int = 0,
    ) -> None:
        self.book = book
        self.lanes = lanes
        self.lane: int | None = lanes[0] if len(lanes) == 1 else None
        """The group's one lane (a lane endpoint's group or a single env), else ``None``."""
        self.env_indices = env_indices
        """What env requests name: empty for a lockstep env (all lanes), ``(k,)`` for lane k."""
        self.lead = lead
        self.wants_history = wants_history
        self.history_enabled = wants_history and len(lanes) == 1
        self.history_refused = wants_history and not self.history_enabled
        self.observation = _NO_OBSERVATION
        self.is_reset = True
        self.seen = False
        """Whether the current observation is accounted for: a predict or prefetch carried
        it, or it waits as a history row for the next predict."""
        self.queue: deque[spaces_v1.SpaceValue] = deque()
        self.history: list[model_v1.ObservationHistoryFrame] = []
        self._prefetch: tuple[H, int] | None = None
        self.discard_events = 0
        self.discarded_frames = 0
        self.short_prefetches = 0
        self._infos: tuple[int, list[model_v1.EpisodeInfo]] = (-1, [])
        """The predict rows of the group's episodes, as of a book epoch (see :meth:`request`)."""

    @property
    def phase(self) -> str:
        """The request-id phase of a predict on the current observation."""
        return "reset_observation" if self.is_reset else "step_observation"

    @property
    def prefetching(self) -> bool:
        return self._prefetch is not None

    # -- observations ----------------------------------------------------------------------

    def reset(self, observation: spaces_v1.SpaceValue) -> H | None:
        """A reset started the group's episodes; returns a stale prefetch's handle, if any."""
        stale = self._drop()
        self.observation = observation
        self.is_reset = True
        return stale

    def observe(self, observation: spaces_v1.SpaceValue) -> None:
        """A step answered with ``observation``."""
        self.observation = observation
        self.is_reset = False
        self.seen = False

    def replace_observation(self, observation: spaces_v1.SpaceValue) -> None:
        """A transform hook replaced the current observation before anything carried it."""
        if self.seen:
            raise RuntimeError("the observation was already carried to the model")
        self.observation = observation

    def end_episode(self) -> H | None:
        """An episode of the group ended: drop what was planned; returns the prefetch handle."""
        return self._drop()

    def _drop(self) -> H | None:
        queue = self.queue
        if queue:
            if len(self.lanes) > 1:
                self.discard_events += 1
                self.discarded_frames += len(queue)
            queue.clear()
        self.history.clear()
        self.seen = False
        if self._prefetch is None:
            return None
        handle, self._prefetch = self._prefetch[0], None
        return handle

    # -- actions ---------------------------------------------------------------------------

    def replay(self) -> spaces_v1.SpaceValue | None:
        """The next queued frame (the current observation becomes a history row), or ``None``."""
        if not self.queue:
            return None
        self._row()
        return self.queue.popleft()

    def prefetch_due(self) -> bool:
        """Whether to start the next predict now, on the current observation."""
        return 0 < len(self.queue) <= self.lead and self._prefetch is None and not self.seen

    def launch_prefetch(
        self, context: model_v1.AdapterContext, handle: H
    ) -> model_v1.PredictRequest:
        """The prefetch's request; the plan keeps ``handle`` and the offset until taken."""
        if not self.prefetch_due():
            raise RuntimeError("no prefetch is due")
        self._prefetch = (handle, len(self.queue))
        return self.request(context)

    def take_prefetch(self) -> tuple[H, int] | None:
        """The pending prefetch and its offset, once the queue has run dry (else ``None``)."""
        if self.queue:
            raise RuntimeError("frames are still queued: replay them first")
        if self._prefetch is None:
            return None
        pending, self._prefetch = self._prefetch, None
        return pending

    def take_prefetched(
        self, actions: Sequence[spaces_v1.SpaceValue], offset: int
    ) -> spaces_v1.SpaceValue | None:
        """A prefetched chunk: skip ``offset`` frames; ``None`` when none is left."""
        frames = actions[offset:]
        if not frames:
            self.short_prefetches += 1
            return None
        # The chunk was planned from an earlier observation: the current one is unseen.
        self._row()
        self.queue.extend(frames[1:])
        return frames[0]

    def take_predicted(self, actions: Sequence[spaces_v1.SpaceValue]) -> spaces_v1.SpaceValue:
        """A chunk predicted on the current observation: apply frame 0, queue the rest."""
        if not actions:
            raise ValueError("a predict answer carries at least one frame")
        if len(actions) > 1:
            self.queue.extend(actions[1:])
        return actions[0]

    def request(self, context: model_v1.AdapterContext) -> model_v1.PredictRequest:
        """The predict request for the current observation (which is then seen)."""
        book = self.book
        epoch, infos = self._infos
        if epoch != book.epoch:
            # Rows change only when a lane moves (a new episode, a roll): reuse them until then.
            infos = [
                model_v1.EpisodeInfo(episode_id=episode_id, seed=seed)
                for episode_id, seed in book.episode_info(self.lanes)
            ]
            self._infos = (book.epoch, infos)
        request = model_v1.PredictRequest(
            context=context, observation=self.observation, episode_info=list(infos)
        )
        if self.wants_history:
            request.step = book.slots[self.lanes[0]].env_steps
            if self.history_enabled:
                request.history, self.history = self.history, []
        self.seen = True
        return request

    def _row(self) -> None:
        """Keep the current observation for the next predict: no predict has carried it."""
        if not self.history_enabled or self.seen:
            return
        lane = self.lanes[0]
        slot = self.book.slots[lane]
        self.history.append(
            model_v1.ObservationHistoryFrame(
                observation=self.observation,
                episode=model_v1.EpisodeInfo(episode_id=slot.episode_id, seed=slot.seed),
                step=slot.env_steps,
            )
        )
        self.seen = True
