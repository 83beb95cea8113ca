"""The episodes of a fleet run, shared by its endpoints: a pure, synchronous pool.

Theory of operation
-------------------

A fleet run drives several env endpoints with one model, one driver per endpoint. The
drivers do not split the work up front: every episode is taken from one
:class:`EpisodePool` when a lane is about to reset, so an endpoint that is free sooner
runs more episodes and a slow one never holds up the rest. The pool is the one place
that decides what an episode is:

* **Numbering.** Episodes are numbered ``0, 1, 2, ...`` in the order lanes take them,
  across the whole fleet: that number is the episode's ``index`` in the report (and
  ``trial_index_base + index`` its trial index).
* **Seeds.** Episode ``k`` is reset with ``episode_seeds[k]`` when explicit seeds were
  given (past their end, the env picks); else, with a base seed, with
  ``deterministic_reset_seed(base_seed, session_id, k, 0)``, the seed a one-endpoint,
  one-lane run derives for its episode ``k``; else the env picks. The seed depends on the
  index only, never on the endpoint, so each episode's result is the one a single
  endpoint gives for the same seed.
* **Quota.** With ``max_episodes = M``, episodes ``0 .. M-1`` are handed out and no
  more (:meth:`can_start`); the run is done when ``M`` have completed
  (:attr:`quota_reached`), and a completion past that is not counted.
* **Retries.** Every episode handed out is held by the endpoint that took it until it
  completes. When an endpoint is lost (:meth:`release`), the episodes it held go back
  to the pool and are handed out again first, lowest index first, with the same index
  and so the same seed. An episode that completed is never handed out again, so none is
  counted twice.

Which endpoint runs which episode depends on timing; what each episode is (its index,
its seed, its result) does not. The pool does no I/O and never awaits.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Sequence

from ._ids import deterministic_reset_seed

__all__ = ["EpisodePool"]


class EpisodePool:
    """The fleet's episodes: which one a lane takes next, its seed, and the quota.

    >>> pool = EpisodePool(max_episodes=3, episode_seeds=(10, 11, 12))
    >>> pool.claim("a"), pool.claim("b"), pool.claim("a")
    ((0, 10), (1, 11), (2, 12))
    >>> pool.can_start(), pool.complete(0), pool.release("b")
    (False, True, [1])
    >>> pool.can_start(), pool.claim("a")
    (True, (1, 11))
    """

    def __init__(
        self,
        *,
        max_episodes: int | None = None,
        episode_seeds: Sequence[int] = (),
        base_seed: int | None = None,
        session_id: str = "local",
    ) -> None:
        self.max_episodes = max_episodes
        self.episode_seeds = tuple(episode_seeds)
        self.base_seed = base_seed
        self.session_id = session_id
        self.next_index = 0
        """The first index never handed out."""
        self.completed = 0
        """Episodes counted (at most ``max_episodes``)."""
        self._returned: list[int] = []
        """A heap of indices given back by lost endpoints, handed out again first."""
        self._holders: dict[int, Hashable] = {}
        """Index -> the endpoint running it (handed out, not yet completed)."""

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
        """The reset seed of episode ``index`` (``None``: the env picks)."""
        if self.episode_seeds:
            return self.episode_seeds[index] if index < len(self.episode_seeds) else None
        if self.base_seed is not None:
            return deterministic_reset_seed(self.base_seed, self.session_id, index, 0)
        return None

    def held_by(self, holder: Hashable) -> list[int]:
        """The episodes ``holder`` runs now, in index order."""
        return sorted(k for k, h in self._holders.items() if h == holder)

    @property
    def returned(self) -> tuple[int, ...]:
        """Indices waiting to be handed out again, in index order."""
        return tuple(sorted(self._returned))

    # -- changes -------------------------------------------------------------------------

    def claim(self, holder: Hashable) -> tuple[int, int | None]:
        """Hand ``holder`` the next episode: ``(index, seed)``.

        A returned episode comes first. Past the quota a new index is still handed out
        (a lockstep vector resets all its lanes at once); such an episode is counted only
        if the quota is not reached when it completes.
        """
        if self._returned:
            index = heapq.heappop(self._returned)
        else:
            index = self.next_index
            self.next_index += 1
        self._holders[index] = holder
        return index, self.seed(index)

    def complete(self, index: int) -> bool:
        """Episode ``index`` completed; returns whether it is counted (within the quota)."""
        self._holders.pop(index, None)
        if self.quota_reached:
            return False
        self.completed += 1
        return True

    def drop(self, index: int) -> None:
        """Episode ``index`` ended without being counted (the run is over): forget it."""
        self._holders.pop(index, None)

    def release(self, holder: Hashable) -> list[int]:
        """``holder`` is lost: its episodes go back to the pool; returns them in index order.

        Only indices below the quota go back: one past it (a lockstep vector's extra lane)
        was never needed.
        """
        lost = self.held_by(holder)
        back = []
        for index in lost:
            del self._holders[index]
            if self.max_episodes is None or index < self.max_episodes:
                heapq.heappush(self._returned, index)
                back.append(index)
        return back
