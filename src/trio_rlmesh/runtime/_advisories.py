"""The report's advisories: what a run did differently from what was asked, in plain words.

Pure: the texts are built from counters the run's state machines keep
(:class:`~trio_rlmesh.runtime._episodes.EpisodeBook` and its pool,
:class:`~trio_rlmesh.runtime._plans.ActionSource`) and from the :class:`FailureLog` of
calls whose failure does not fail the run.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from ._episodes import EpisodeBook
from ._plans import ActionSource

__all__ = ["FailureLog", "advisories"]

logger = logging.getLogger("trio_rlmesh.runtime")

_LABELS = (
    ("reset_adapter", "model.reset_adapter"),
    ("release_adapter", "model.release_adapter"),
    ("env_close", "env.close"),
)


class FailureLog:
    """Failures of background and cleanup calls: counted per kind, the first message kept."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.first: dict[str, str] = {}

    def note(self, key: str, message: str) -> None:
        """Count one failure of ``key`` (``reset_adapter``, ``release_adapter``, ``env_close``)."""
        self.counts[key] = self.counts.get(key, 0) + 1
        self.first.setdefault(key, message)
        # reset_adapter runs beside the run; the other two only once it is over.
        when = "the run goes on" if key == "reset_adapter" else "as the run ended"
        logger.warning("%s failed (%s): %s", key, when, message)


def advisories(
    book: EpisodeBook, plans: Iterable[ActionSource[Any]], failures: FailureLog
) -> tuple[str, ...]:
    """The advisory lines of a run's report, in a fixed order."""
    plans = list(plans)
    discard_events = sum(p.discard_events for p in plans)
    short_prefetches = sum(p.short_prefetches for p in plans)
    out = []
    if discard_events:
        frames = sum(p.discarded_frames for p in plans)
        out.append(
            f"an episode ended mid-chunk on a lockstep vector env {discard_events} "
            f"time(s), discarding {frames} planned action frame(s) for "
            "every lane; use a lane endpoint or execution_horizon=1 to avoid re-planning"
        )
    if book.stale_completions:
        out.append(
            f"dropped {book.stale_completions} stale episode completion(s) naming an episode "
            "that had already ended or was never current (such as the env echoing a "
            "runtime truncation)"
        )
    if book.over_quota:
        out.append(
            f"dropped {book.over_quota} completion(s) beyond max_episodes={book.pool.max_episodes}"
        )
    if book.pool.discarded_seeds:
        out.append(
            f"episode_seeds could not cover a whole reset: {book.pool.discarded_seeds} unused "
            "seed(s) were dropped and later episodes were seeded by the env"
        )
    if any(p.history_refused for p in plans):
        out.append(
            "the model asked for observation history, which is delivered only for one-lane "
            "groups; a lockstep vector env gets none"
        )
    if short_prefetches:
        out.append(
            f"{short_prefetches} prefetched chunk(s) had no frame left past the "
            "prefetch lead and were predicted again; lower prefetch_lead"
        )
    for key, label in _LABELS:
        count = failures.counts.get(key)
        if count:
            out.append(
                f"{label} failed {count} time(s) (first: {failures.first[key]}); the run went on"
            )
    return tuple(out)
