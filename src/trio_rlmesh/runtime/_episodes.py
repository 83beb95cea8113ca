"""Episode and lane bookkeeping: a pure, synchronous, table-driven state machine.

Theory of operation
-------------------

A run has ``num_envs`` *lanes*. Each lane holds at most one live episode and moves
through these states (the whole table; any other pair is illegal)::

    IDLE       --RESET_SENT-->     RESETTING
    IDLE       --RETIRE-->         RETIRED
    RESETTING  --RESET_DONE-->     ACTIVE
    ACTIVE     --STEPPED-->        ACTIVE
    ACTIVE     --ENDED-->          IDLE       (the runtime owns resets)
    ACTIVE     --ENDED_ROLLING-->  ROLLING    (the env autoresets, NEXT_STEP)
    ROLLING    --ROLLED-->         ACTIVE
    ROLLING    --RETIRE-->         RETIRED

* ``IDLE``: no episode; the runtime must reset the lane before stepping it again.
* ``RESETTING``: a reset naming a freshly minted id is in flight.
* ``ACTIVE``: an episode is running; every step adds to its step count and reward.
* ``ROLLING``: (env-owned resets, NEXT_STEP) the episode completed on the last step;
  the lane keeps its old id for one more predict, the next step pushes the minted
  next id, and the env rolls the lane on that step (reward 0, not counted).
* ``RETIRED``: the run has started every episode it needs; this lane starts no more.

Every change goes through :meth:`EpisodeBook._move`, which looks the pair
``(state, event)`` up in ``_TRANSITIONS``. An illegal pair raises
:class:`LaneStateError` and leaves the book unchanged; methods that touch several
lanes check every lane first, so they too are all-or-nothing.

The book also owns what depends only on bookkeeping: minting episode ids, trial
indices, which rewards of a step answer belong to which lane, runtime truncation caps,
and stale-completion filtering (:meth:`EpisodeBook.apply_completions`). What an episode
*is* (its index, its seed) and the ``max_episodes`` quota are the run's
:class:`~trio_rlmesh.runtime._pool.EpisodePool`'s, which the book asks whenever a lane
starts or ends an episode: one endpoint's book has a pool of its own, the endpoints of
a fleet share one. Its counters (``stale_completions``, ``over_quota``) change only
inside it, and its queries (``is_current``, ``step_ids``, ``episode_info``,
``capped_lanes``) change nothing. It does no I/O and never reads a clock: callers pass
``now``.

Ids, seeds and states change only with a transition, which bumps
:attr:`EpisodeBook.epoch`: what depends on them alone (``step_ids``, ``episode_info``,
whether every lane of a step is ACTIVE) is built once per lane group and epoch, so the
common step (every lane active, none ending) loops over its lanes once, to count.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Container, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

from .._errors import ProtocolError
from ..protocol import env_v1, meta_to_python
from ._ids import mint_uuid7
from ._pool import EpisodePool
from ._report import EpisodeRecord, success_from_final_info

if TYPE_CHECKING:
    from ._spec import RuntimeSessionSpec

__all__ = [
    "Completion",
    "EpisodeBook",
    "EpisodeEnd",
    "LaneEvent",
    "LaneState",
    "LaneStateError",
    "PlannedEpisode",
]

_T = TypeVar("_T")


class LaneState(enum.Enum):
    IDLE = "idle"
    RESETTING = "resetting"
    ACTIVE = "active"
    ROLLING = "rolling"
    RETIRED = "retired"

    # Members are singletons compared by identity, so the identity hash agrees with
    # equality; Enum's own __hash__ is a Python call, paid on every table lookup per step.
    __hash__ = object.__hash__


class LaneEvent(enum.Enum):
    RESET_SENT = "reset_sent"
    RESET_DONE = "reset_done"
    STEPPED = "stepped"
    ENDED = "ended"
    ENDED_ROLLING = "ended_rolling"
    ROLLED = "rolled"
    RETIRE = "retire"

    __hash__ = object.__hash__  # see LaneState


_S, _E = LaneState, LaneEvent
_TRANSITIONS: dict[tuple[LaneState, LaneEvent], LaneState] = {
    (_S.IDLE, _E.RESET_SENT): _S.RESETTING,
    (_S.IDLE, _E.RETIRE): _S.RETIRED,
    (_S.RESETTING, _E.RESET_DONE): _S.ACTIVE,
    (_S.ACTIVE, _E.STEPPED): _S.ACTIVE,
    (_S.ACTIVE, _E.ENDED): _S.IDLE,
    (_S.ACTIVE, _E.ENDED_ROLLING): _S.ROLLING,
    (_S.ROLLING, _E.ROLLED): _S.ACTIVE,
    (_S.ROLLING, _E.RETIRE): _S.RETIRED,
}


class LaneStateError(ProtocolError):
    """An event that is illegal in the lane's current state (the book is left unchanged)."""


@attrs.define(eq=False)
class _Slot:
    env_index: int
    state: LaneState = LaneState.IDLE
    episode_id: str = ""
    index: int = -1
    seed: int | None = None
    trial: int = 0
    steps: int = 0
    reward: float = 0.0
    started_at: float = 0.0
    next_id: str = ""
    predict_ms: float = 0.0
    predicts: int = 0
    step_ms: float = 0.0
    env_steps: int = 0
    """Every env step this lane took, across episodes (history rows' producer counter)."""


@attrs.frozen
class PlannedEpisode:
    """An episode a reset (or roll) is about to start."""

    env_index: int
    episode_id: str
    index: int
    seed: int | None
    trial: int


@attrs.frozen
class Completion:
    """A counted episode end."""

    record: EpisodeRecord
    final_info: dict[str, Any] | None


@attrs.frozen
class EpisodeEnd:
    """An episode that ended: its lane, its id, and its completion (``None`` over quota)."""

    lane: int
    episode_id: str
    completion: Completion | None


class EpisodeBook:
    """All per-lane and per-episode state of one endpoint's run. Pure: no I/O, no clock.

    ``pool`` numbers and seeds the episodes and holds the quota (see the module
    docstring).
    """

    def __init__(
        self,
        *,
        num_envs: int,
        owns_resets: bool,
        pool: EpisodePool,
        lockstep: bool = True,
        trial_index_base: int | None = None,
        step_cap: int | None = None,
        seconds_cap: float | None = None,
        mint: Callable[[], str] = mint_uuid7,
        endpoint: str | None = None,
    ) -> None:
        self.slots = [_Slot(k) for k in range(num_envs)]
        self.owns_resets = owns_resets
        self.lockstep = lockstep
        self.pool = pool
        """The run's episodes: their indices, seeds and the quota."""
        self.trial_base = trial_index_base or 0
        self.step_cap = step_cap
        self.seconds_cap = seconds_cap
        self._mint = mint
        self.endpoint = endpoint
        """What every record names as its endpoint (the env's address, if it has one)."""
        self.completed: list[EpisodeRecord] = []
        self.stale_completions = 0
        self.over_quota = 0
        self.epoch = 0
        """Bumped by every lane transition; ids, seeds and states change only with one."""
        self._ids: dict[tuple[int, ...], tuple[int, list[str]]] = {}
        self._infos: dict[tuple[int, ...], tuple[int, list[tuple[str, int | None]]]] = {}
        self._steady: dict[tuple[int, ...], tuple[int, bool]] = {}

    @classmethod
    def for_session(cls, spec: RuntimeSessionSpec, pool: EpisodePool) -> EpisodeBook:
        """The book of the endpoint ``spec`` describes, taking its episodes from ``pool``."""
        return cls(
            num_envs=spec.num_envs,
            owns_resets=spec.driver_owns_resets,
            pool=pool,
            lockstep=not spec.lanes_step_individually,
            trial_index_base=spec.trial_index_base,
            step_cap=spec.step_cap,
            seconds_cap=spec.max_episode_seconds,
            endpoint=spec.env_address,
        )

    # -- the table -----------------------------------------------------------------------

    def state(self, lane: int) -> LaneState:
        return self.slots[lane].state

    def _check(self, lanes: Sequence[int], event: LaneEvent) -> None:
        for lane in lanes:
            if not 0 <= lane < len(self.slots):
                raise LaneStateError(f"lane {lane} does not exist (num_envs={len(self.slots)})")
            state = self.slots[lane].state
            if (state, event) not in _TRANSITIONS:
                raise LaneStateError(
                    f"lane {lane}: {event.value} is illegal while the lane is {state.value}"
                )

    def _move(self, slot: _Slot, event: LaneEvent) -> None:
        slot.state = _TRANSITIONS[(slot.state, event)]
        self.epoch += 1

    def _since_move(
        self,
        cache: dict[tuple[int, ...], tuple[int, _T]],
        lanes: Sequence[int],
        build: Callable[[tuple[int, ...]], _T],
    ) -> _T:
        """``build(lanes)``, reused until the next lane transition (:attr:`epoch`).

        Only for what a transition alone changes: ids, seeds and states.
        """
        key = lanes if type(lanes) is tuple else tuple(lanes)
        hit = cache.get(key)
        if hit is not None and hit[0] == self.epoch:
            return hit[1]
        value = build(key)
        cache[key] = (self.epoch, value)
        return value

    # -- quota ---------------------------------------------------------------------------

    @property
    def quota_reached(self) -> bool:
        """Whether the run has counted every episode it needs (the pool's quota)."""
        return self.pool.quota_reached

    def can_start(self) -> bool:
        """Whether starting one more episode could still be counted (the pool's rule)."""
        return self.pool.can_start()

    # -- resets --------------------------------------------------------------------------

    def _new_episode(self, slot: _Slot, index: int, seed: int | None) -> PlannedEpisode:
        slot.index = index
        slot.seed = seed
        slot.trial = self.trial_base + index
        return PlannedEpisode(slot.env_index, slot.episode_id, index, seed, slot.trial)

    def begin_reset(self, lanes: Sequence[int]) -> list[PlannedEpisode]:
        """Mint ids, take indices and seeds from the pool, and plan trial indices for a
        reset of ``lanes`` (IDLE -> RESETTING)."""
        self._check(lanes, LaneEvent.RESET_SENT)
        planned = []
        for lane, (index, seed) in zip(lanes, self.pool.claim(self, lanes), strict=True):
            slot = self.slots[lane]
            self._move(slot, LaneEvent.RESET_SENT)
            slot.episode_id = self._mint()
            planned.append(self._new_episode(slot, index, seed))
        return planned

    def reset_done(self, lanes: Sequence[int], now: float) -> None:
        """The reset answered: the lanes' episodes start now (RESETTING -> ACTIVE)."""
        self._check(lanes, LaneEvent.RESET_DONE)
        for lane in lanes:
            slot = self.slots[lane]
            self._move(slot, LaneEvent.RESET_DONE)
            slot.steps, slot.reward, slot.started_at = 0, 0.0, now
            slot.predict_ms, slot.predicts, slot.step_ms = 0.0, 0, 0.0

    def give_back(self) -> list[int]:
        """This endpoint is lost: the episodes it runs go back to the pool.

        Returns their indices (see :meth:`EpisodePool.release`).
        """
        return self.pool.release(self)

    def retire(self, lane: int) -> None:
        self._check([lane], LaneEvent.RETIRE)
        self._move(self.slots[lane], LaneEvent.RETIRE)

    # -- steps ---------------------------------------------------------------------------

    def step_ids(self, lanes: Sequence[int]) -> list[str]:
        """Ids to push in a StepRequest: a rolling lane already carries its next id."""
        ids: list[str] = self._since_move(self._ids, lanes, self._build_step_ids)
        return list(ids)  # the caller's own copy

    def _build_step_ids(self, lanes: tuple[int, ...]) -> list[str]:
        slots = self.slots
        out = []
        for lane in lanes:
            slot = slots[lane]
            out.append(slot.next_id if slot.state is LaneState.ROLLING else slot.episode_id)
        return out

    def episode_info(self, lanes: Sequence[int]) -> list[tuple[str, int | None]]:
        """``(episode_id, seed)`` per lane; a rolling lane still names its old episode."""
        infos: list[tuple[str, int | None]]
        infos = self._since_move(self._infos, lanes, self._build_episode_info)
        return list(infos)

    def _build_episode_info(self, lanes: tuple[int, ...]) -> list[tuple[str, int | None]]:
        return [(self.slots[lane].episode_id, self.slots[lane].seed) for lane in lanes]

    def _all_active(self, lanes: tuple[int, ...]) -> bool:
        n = len(self.slots)
        return all(0 <= lane < n and self.slots[lane].state is LaneState.ACTIVE for lane in lanes)

    def record_step(
        self, lanes: Sequence[int], rewards: Sequence[float], now: float
    ) -> list[tuple[PlannedEpisode, str]]:
        """Account one env step over ``lanes``; ``rewards`` align with ``lanes`` (missing = 0).

        Rolling lanes roll here (their reward on this step is the autoreset's 0 and is not
        counted). Returns ``(new episode, old episode id)`` for each lane that rolled.
        """
        slots, active, rolling = self.slots, LaneState.ACTIVE, LaneState.ROLLING
        # Every lane ACTIVE (the common step, known since the last transition): all legal.
        if not self._since_move(self._steady, lanes, self._all_active):
            for lane in lanes:
                # The only legal pairs here are (ACTIVE, STEPPED) and (ROLLING, ROLLED);
                # anything else goes through the table check, which raises before anything
                # changed.
                state = slots[lane].state if 0 <= lane < len(slots) else None
                if state is not active and state is not rolling:
                    self._check([lane], LaneEvent.STEPPED)
        rolled = []
        for position, lane in enumerate(lanes):
            slot = slots[lane]
            slot.env_steps += 1
            if slot.state is rolling:
                self._move(slot, LaneEvent.ROLLED)
                old = slot.episode_id
                slot.episode_id, slot.next_id = slot.next_id, ""
                slot.steps, slot.reward, slot.started_at = 0, 0.0, now
                slot.predict_ms, slot.predicts, slot.step_ms = 0.0, 0, 0.0
                rolled.append((self._new_episode(slot, self.pool.roll(self), None), old))
                continue
            # ACTIVE --STEPPED--> ACTIVE: the state stays; no table lookup needed.
            slot.steps += 1
            if position < len(rewards):
                slot.reward += float(rewards[position])
        return rolled

    def note_predict(self, lanes: Sequence[int], ms: float) -> None:
        for lane in lanes:
            slot = self.slots[lane]
            slot.predict_ms += ms
            slot.predicts += 1

    def note_step(self, lanes: Sequence[int], ms: float) -> None:
        for lane in lanes:
            self.slots[lane].step_ms += ms

    # -- completions ---------------------------------------------------------------------

    def is_current(self, env_index: int, episode_id: str, lanes: Sequence[int]) -> bool:
        """Whether an env-reported completion names a live episode of one of ``lanes``.

        A query: it changes nothing. An empty id means the lane's current episode.
        """
        if env_index in lanes and 0 <= env_index < len(self.slots):
            slot = self.slots[env_index]
            return slot.state is LaneState.ACTIVE and episode_id in ("", slot.episode_id)
        return False

    def step_rewards(
        self, lanes: Sequence[int], rewards: Sequence[float], env_indices: Sequence[int]
    ) -> Sequence[float]:
        """The rewards of a step answer for ``lanes``, aligned with them (a query).

        A lockstep group's answer covers every lane in order. A lane's answer is aligned
        with the lanes it names (``env_indices``); without them, a full-width answer is
        indexed by lane, and anything else is taken as the lane's own.
        """
        if self.lockstep:
            return rewards
        lane = lanes[0]
        if env_indices:
            for position, index in enumerate(env_indices):
                if index == lane:
                    return rewards[position : position + 1]
            return []
        if len(rewards) == len(self.slots) and len(rewards) > 1:
            return rewards[lane : lane + 1]
        return rewards[:1]

    def apply_completions(
        self,
        lanes: Sequence[int],
        completed: Sequence[env_v1.EpisodeMetadata],
        now: float,
    ) -> list[EpisodeEnd]:
        """End the episodes a step ended: env-reported completions, then runtime caps.

        A completion counts only when it names a live episode of ``lanes`` (see
        :meth:`is_current`); anything else, including a second report for a lane in the
        same answer, is stale and counted in ``stale_completions``. Lanes that reached
        the step or time cap are then truncated, in lane order. Returns every episode
        ended, in that order (see :meth:`end_episode` for the quota).
        """
        ended: list[EpisodeEnd] = []
        if not completed and self.step_cap is None and self.seconds_cap is None:
            return ended  # nothing reported, no caps: the common step
        for meta in completed:
            lane = meta.env_index
            if not self.is_current(lane, meta.episode_id, lanes):
                # Also a second report for a lane this answer already ended: it is IDLE
                # or ROLLING now.
                self.stale_completions += 1
                continue
            info = meta_to_python(meta.final_info) if meta.final_info is not None else None
            episode_id, completion = self.end_episode(
                lane, terminated=meta.terminated, truncated=meta.truncated, final_info=info, now=now
            )
            ended.append(EpisodeEnd(lane, episode_id, completion))
        for lane in self.capped_lanes(lanes, now):
            episode_id, completion = self.end_episode(
                lane, terminated=False, truncated=True, final_info=None, now=now
            )
            ended.append(EpisodeEnd(lane, episode_id, completion))
        return ended

    def capped_lanes(
        self, lanes: Sequence[int], now: float, exclude: Container[int] = ()
    ) -> list[int]:
        """Active lanes of ``lanes`` that reached the step or time cap (in lane order)."""
        out = []
        for lane in lanes:
            slot = self.slots[lane]
            if lane in exclude or slot.state is not LaneState.ACTIVE:
                continue
            by_steps = self.step_cap is not None and slot.steps >= self.step_cap
            by_time = self.seconds_cap is not None and now - slot.started_at >= self.seconds_cap
            if by_steps or by_time:
                out.append(lane)
        return out

    def end_episode(
        self,
        lane: int,
        *,
        terminated: bool,
        truncated: bool,
        final_info: Mapping[str, Any] | None,
        now: float,
    ) -> tuple[str, Completion | None]:
        """End the lane's episode; returns ``(ended id, completion or None when over quota)``.

        With env-owned resets the lane starts ROLLING with a freshly minted next id;
        otherwise it goes IDLE and waits for a runtime reset.
        """
        event = LaneEvent.ENDED if self.owns_resets else LaneEvent.ENDED_ROLLING
        self._check([lane], event)
        slot = self.slots[lane]
        self._move(slot, event)
        if event is LaneEvent.ENDED_ROLLING:
            slot.next_id = self._mint()
        ended = slot.episode_id
        if not self.pool.complete(slot.index):
            self.over_quota += 1
            return ended, None
        info = dict(final_info) if final_info is not None else None
        record = EpisodeRecord(
            index=slot.index,
            env_index=lane,
            episode_id=ended,
            seed=slot.seed,
            trial=slot.trial,
            steps=slot.steps,
            reward=slot.reward,
            terminated=terminated,
            truncated=truncated,
            success=success_from_final_info(info),
            duration_s=max(0.0, now - slot.started_at),
            predict_ms=slot.predict_ms / slot.predicts if slot.predicts else 0.0,
            step_ms=slot.step_ms / slot.steps if slot.steps else 0.0,
            endpoint=self.endpoint,
        )
        self.completed.append(record)
        return ended, Completion(record, info)
