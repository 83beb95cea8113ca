"""The episodes of a run, whatever drives them: a pure, synchronous pool.

Theory of operation
-------------------

A run drives one env endpoint, or several with one model (a fleet), one driver per
endpoint; a run of one endpoint is a fleet of one. The drivers do not split the work up
front: every episode is taken from one :class:`EpisodePool` when a lane is about to reset
(or the env rolls it, under NEXT_STEP autoreset), so an endpoint that is free sooner runs
more episodes and a slow one never holds up the rest. The pool is the one place that
decides what an episode is:

* **Numbering.** Episodes are numbered ``0, 1, 2, ...`` in the order lanes take them,
  across the whole run: that number is the episode's ``index`` in the report (and
  ``trial_index_base + index`` its trial index).
* **Seeds.** A reset seeds every lane it resets, or none (a ``ResetRequest`` carries a
  seed per lane or no seeds at all). With explicit seeds, episode ``k`` is reset with
  ``episode_seeds[k]``; a reset whose episodes run past the end of the list is not
  seeded, and the seeds it leaves unused are counted in :attr:`discarded_seeds` (the
  reference's rule: seeds are claimed a whole reset at a time). With a base seed, the
  seed is derived (:func:`~trio_rlmesh.runtime._ids.deterministic_reset_seed`) from one
  of two keys, chosen when the pool is made:

  - *by lane* (a run of one endpoint, :meth:`EpisodePool.for_session`): lane ``l``'s
    ``r``-th reset gets ``deterministic_reset_seed(base_seed, session_id, r, l)``, the
    seeds RLMesh's ``run_local`` derives (``r`` is the reset generation of a lockstep
    vector, whose resets cover every lane);
  - *by index* (a fleet of several endpoints): episode ``k`` gets
    ``deterministic_reset_seed(base_seed, session_id, k, 0)``, the seed a one-lane run
    derives for its episode ``k``, so the seed depends on the index only, never on the
    endpoint or lane that runs it.

  Episodes the env rolls itself are never seeded.
* **Quota.** With ``max_episodes = M``, episodes ``0 .. M-1`` are handed out and no
  more (:meth:`can_start`); the run is done when ``M`` have completed
  (:attr:`quota_reached`), and a completion past that is not counted.
* **Retries.** Every episode handed out is held by the endpoint that took it until it
  completes. When an endpoint is lost (:meth:`release`), the episodes it held go back
  to the pool and are handed out again first, lowest index first, with the same index
  and the same seed. An episode that completed is never handed out again, so none is
  counted twice. :meth:`may_come_back` says whether waiting for such an episode makes
  sense.

Which endpoint runs which episode depends on timing; what each episode is (its index,
its seed, its result) does not. The pool does no I/O and never awaits.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING

from ._ids import deterministic_reset_seed

if TYPE_CHECKING:
    from ._spec import RuntimeSessionSpec

__all__ = ["EpisodePool"]


class EpisodePool:
    """A run's episodes: which one a lane takes next, its seed, and the quota.

    ``holder`` is whoever runs the episodes it takes (an endpoint's
    :class:`~trio_rlmesh.runtime._episodes.EpisodeBook`); ``lanes`` are the holder's lanes
    a reset covers.

    >>> pool = EpisodePool(max_episodes=3, episode_seeds=(10, 11, 12))
    >>> pool.claim("a", [0]), pool.claim("b", [0]), pool.claim("a", [1])
    ([(0, 10)], [(1, 11)], [(2, 12)])
    >>> pool.can_start(), pool.complete(0), pool.release("b")
    (False, True, [1])
    >>> pool.can_start(), pool.claim("a", [0])
    (True, [(1, 11)])
    """

    def __init__(
        self,
        *,
        max_episodes: int | None = None,
        episode_seeds: Sequence[int] = (),
        base_seed: int | None = None,
        session_id: str = "local",
        seeds_by_lane: bool = False,
    ) -> None:
        self.max_episodes = max_episodes
        self.episode_seeds = tuple(episode_seeds)
        self.base_seed = base_seed
        self.session_id = session_id
        self.seeds_by_lane = seeds_by_lane
        """Derive base seeds from each lane's reset count (else from the episode index)."""
        self.next_index = 0
        """The first index never handed out."""
        self.completed = 0
        """Episodes counted (at most ``max_episodes``)."""
        self.discarded_seeds = 0
        """Explicit seeds left unused because a reset's episodes ran past their end."""
        self._returned: list[int] = []
        """A heap of indices given back by lost endpoints, handed out again first."""
        self._holders: dict[int, Hashable] = {}
        """Index -> the endpoint running it (handed out, not yet completed)."""
        self._seeds: dict[int, int | None] = {}
        """Index -> its reset seed, while it is handed out or given back."""
        self._resets: dict[tuple[Hashable, int], int] = {}
        """``(holder, lane)`` -> resets so far (the key of seeds by lane)."""

    @classmethod
    def for_session(cls, spec: RuntimeSessionSpec) -> EpisodePool:
        """The pool of a run of one endpoint (seeds by lane, as RLMesh's ``run_local``)."""
        return cls(
            max_episodes=spec.max_episodes,
            episode_seeds=spec.episode_seeds,
            base_seed=spec.base_seed,
            session_id=spec.session_id,
            seeds_by_lane=True,
        )

    # -- queries -------------------------------------------------------------------------

    @property
    def quota_reached(self) -> bool:
        return self.max_episodes is not None and self.completed >= self.max_episodes

    def can_start(self) -> bool:
        """Whether one more episode may be handed out (a returned one, or a new one)."""
        if self._returned:
            return True
        return self.max_episodes is None or self.next_index < self.max_episodes

    def seed(self, index: int) -> int | None:
        """The reset seed episode ``index`` was (or will again be) handed out with."""
        return self._seeds.get(index)

    def may_come_back(self, holder: Hashable) -> bool:
        """Whether an episode another holder runs would come back if that holder were lost
        (see :meth:`release`): what a lane with nothing to start may wait for."""
        limit = self.max_episodes
        return any(
            other != holder and (limit is None or index < limit)
            for index, other in self._holders.items()
        )

    # -- changes -------------------------------------------------------------------------

    def claim(self, holder: Hashable, lanes: Sequence[int]) -> list[tuple[int, int | None]]:
        """Hand ``holder`` one episode per lane of a reset: ``(index, seed)`` each.

        Returned episodes come first. Past the quota new indices are still handed out (a
        lockstep vector resets all its lanes at once); such an episode is counted only if
        the quota is not reached when it completes.
        """
        indices = []
        for _ in lanes:
            if self._returned:
                index = heapq.heappop(self._returned)
            else:
                index = self.next_index
                self.next_index += 1
            self._holders[index] = holder
            indices.append(index)
        seeds = [
            self._seeds[index] if index in self._seeds else self._derive(holder, lane, index)
            for lane, index in zip(lanes, indices, strict=True)
        ]
        if None in seeds:
            self.discarded_seeds += sum(
                1 for index in indices if index not in self._seeds and self._explicit(index)
            )
            seeds = [None] * len(seeds)
        for lane, index, seed in zip(lanes, indices, seeds, strict=True):
            self._seeds[index] = seed
            key = (holder, lane)
            self._resets[key] = self._resets.get(key, 0) + 1
        return list(zip(indices, seeds, strict=True))

    def roll(self, holder: Hashable) -> int:
        """Number an episode the env started itself (never seeded); returns its index."""
        index = self.next_index
        self.next_index += 1
        self._holders[index] = holder
        self._seeds[index] = None
        return index

    def complete(self, index: int) -> bool:
        """Episode ``index`` completed; returns whether it is counted (within the quota)."""
        self._holders.pop(index, None)
        self._seeds.pop(index, None)
        if self.quota_reached:
            return False
        self.completed += 1
        return True

    def release(self, holder: Hashable) -> list[int]:
        """``holder`` is lost: its episodes go back to the pool; returns them in index order.

        Only indices below the quota go back: one past it (a lockstep vector's extra lane)
        was never needed.
        """
        lost = sorted(k for k, h in self._holders.items() if h == holder)
        back = []
        for index in lost:
            del self._holders[index]
            if self.max_episodes is None or index < self.max_episodes:
                heapq.heappush(self._returned, index)
                back.append(index)
            else:
                del self._seeds[index]
        return back

    # -- seeds ---------------------------------------------------------------------------

    def _explicit(self, index: int) -> bool:
        return index < len(self.episode_seeds)

    def _derive(self, holder: Hashable, lane: int, index: int) -> int | None:
        """The seed of a reset that starts episode ``index`` on ``holder``'s ``lane``."""
        if self.episode_seeds:
            return self.episode_seeds[index] if self._explicit(index) else None
        if self.base_seed is None:
            return None
        if self.seeds_by_lane:
            generation = self._resets.get((holder, lane), 0)
            return deterministic_reset_seed(self.base_seed, self.session_id, generation, lane)
        return deterministic_reset_seed(self.base_seed, self.session_id, index, 0)
