"""What the drivers of one run share: the episodes and the model's predicts.

A run drives one env endpoint, or several with one model (a fleet run,
:class:`~trio_rlmesh.runtime._fleetrun.FleetRun`), one
:class:`~trio_rlmesh.runtime.RuntimeDriver` per endpoint. A run of one endpoint is a
fleet of one (:meth:`Fleet.of_one`), so the driver reads its episodes and sends its
predicts the same way either way, and holds no fleet branches:

* **Episodes** come from the fleet's :class:`~trio_rlmesh.runtime._pool.EpisodePool`
  (numbering, seeds, the quota). A lane with no episode left to start waits
  (:meth:`Fleet.wait_for_work`) only while another endpoint runs episodes that would come
  back if it were lost; a fleet of one never waits.
* **Predicts** go the way the fleet decides once per driver (:meth:`Fleet.predictor`):
  each on its own (the model does not fuse predicts, or only one lane group can predict
  at a time), or through the fleet's batcher, which fuses the requests that are ready
  together into one model call: a lane endpoint's lanes, or every endpoint of a fleet,
  where a group may wait a bounded time for the endpoints due to join it
  (:class:`FleetBatcher`).

This module does not know the driver: a driver takes part through its
:class:`~trio_rlmesh.runtime._calls.Predictor`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

import trio

from .._errors import ModelError
from ..protocol import model_v1
from ._calls import Call, FusedPredict, Outcome, PredictBatcher, Predictor, call_fused
from ._interfaces import ModelPrediction, RuntimeModel
from ._plans import ActionSource
from ._pool import EpisodePool
from ._spec import RuntimeLimits
from ._telemetry import TelemetryRecorder

if TYPE_CHECKING:
    from ._spec import RuntimeSessionSpec

__all__ = ["DEFAULT_FUSE_WAIT", "FLEET_ROUTE", "Fleet", "FleetBatcher", "Predict"]

DEFAULT_FUSE_WAIT = 0.002
"""Seconds a fused predict waits for the fleet's other endpoints (see :class:`Fleet`)."""

FLEET_ROUTE = "fleet"
"""How a fused call's errors name the route when its requests come from several endpoints."""

_FOLD_CALLS = 1024
"""Fused calls between folds of the fleet's own telemetry (two samples a call)."""

_Key: TypeAlias = tuple[Predictor, ActionSource[Any]]
_K = TypeVar("_K", bound=Hashable)

Predict: TypeAlias = Callable[
    [ActionSource[Any], model_v1.PredictRequest], Awaitable[ModelPrediction]
]
"""How a driver asks for one group's prediction (see :meth:`Fleet.predictor`)."""


class Fleet:
    """What the drivers of one run share: the episode pool and the predict batcher.

    Args:
        pool: the run's episodes.
        model: the one model endpoint.
        limits: the run's limits (``model_predict_timeout`` bounds each fused call).
        fuse_wait: how long a fused predict may wait for every endpoint's request
            before it goes without the missing ones, or one model call's time if that is
            longer (see :class:`FleetBatcher`; 0: take what is ready). ``None``: no
            gathering at all, a group takes the requests already there after one
            scheduling pass (a fleet of one, whose lanes wake together).
        route: how a fused call's errors name the route.
        groups: how many lane groups may predict at the same time, if known (a fleet
            of one); with one, nothing is ever fused. ``None``: several (a fleet).
    """

    def __init__(
        self,
        pool: EpisodePool,
        model: RuntimeModel,
        limits: RuntimeLimits,
        *,
        fuse_wait: float | None = DEFAULT_FUSE_WAIT,
        route: str = FLEET_ROUTE,
        groups: int | None = None,
    ) -> None:
        self.pool = pool
        self.telemetry = TelemetryRecorder()
        """The fused calls, once each (``model.predict`` round trip and group size)."""
        self.batcher: PredictBatcher[_Key] | None = None
        """Fuses the predicts of lane groups that are ready together; ``None`` when each
        predict goes on its own."""
        if model.fuses_predicts and (groups is None or groups > 1):
            self.batcher = (
                PredictBatcher(self._fused)
                if fuse_wait is None
                else FleetBatcher(self._fused, wait=fuse_wait)
            )
        self._call: Call[Sequence[model_v1.PredictRequest], list[Outcome]] = Call(
            "model.predict", "model_predict_timeout", limits.model_predict_timeout,
            model.predict_group, error_class=ModelError, route=route,
        )  # fmt: skip
        self._rpc = self.telemetry.sink("model.predict", "rpc.total")
        self._size = self.telemetry.sink("model.predict", "group.size")
        self._calls = 0
        self._changed = trio.Event()

    @classmethod
    def of_one(cls, spec: RuntimeSessionSpec, model: RuntimeModel) -> Fleet:
        """The fleet of a run of one endpoint: a pool of its own (seeds by lane, as
        RLMesh's ``run_local``), its errors naming the endpoint's route, and predicts
        fused across a lane endpoint's lanes only, as they come."""
        return cls(
            EpisodePool.for_session(spec),
            model,
            spec.limits,
            fuse_wait=None,
            route=spec.env_id,
            groups=spec.num_envs if spec.lanes_step_individually else 1,
        )

    def start(self, nursery: trio.Nursery) -> None:
        """Start what the fleet runs while its drivers do (the batcher), in the nursery of
        whoever owns the fleet; once."""
        if self.batcher is not None:
            nursery.start_soon(self.batcher.serve)

    # -- predicts --------------------------------------------------------------------------

    def predictor(self, member: Predictor) -> Predict:
        """How a driver whose predicts ``member`` makes and accounts asks for a group's
        prediction: on its own, or through the batcher."""
        batcher = self.batcher
        if batcher is None:
            return member.alone

        async def fused(
            plan: ActionSource[Any], request: model_v1.PredictRequest
        ) -> ModelPrediction:
            return await batcher.submit(request, (member, plan))

        return fused

    def join(self) -> None:
        """One more lane group may submit predicts (see :meth:`FleetBatcher.join`)."""
        if self.batcher is not None:
            self.batcher.join()

    def leave(self) -> None:
        """A lane group that joined will submit no more."""
        if self.batcher is not None:
            self.batcher.leave()

    async def _fused(
        self, requests: Sequence[model_v1.PredictRequest], keys: Sequence[_Key]
    ) -> list[Outcome]:
        """One model call for the ready requests; each driver settles its own part."""
        first, plan = keys[0]
        # The drivers of one fleet share the model, so any of them names it.
        lane = plan.lane if len(keys) == 1 else None
        call = self._call
        outcomes, ms = await call_fused(call, requests, lane, first.step(), first.model_id)
        if self.batcher is not None:
            self.batcher.served(keys, call.finished, ms / 1e3)
        self._rpc(ms)
        self._size(len(requests))
        self._calls += 1
        if not self._calls % _FOLD_CALLS:
            self.telemetry.fold()
        positions: dict[Predictor, list[int]] = {}
        for position, (member, _plan) in enumerate(keys):
            positions.setdefault(member, []).append(position)
        for member, mine in positions.items():
            settled = member.settle(
                [requests[p] for p in mine],
                [keys[p][1] for p in mine],
                [outcomes[p] for p in mine],
                ms,
                len(requests),
            )
            for position, outcome in zip(mine, settled, strict=True):
                outcomes[position] = outcome
        return outcomes

    # -- episodes --------------------------------------------------------------------------

    def changed(self) -> None:
        """The pool changed (an episode ended, an endpoint was lost): wake the waiters."""
        self._changed.set()
        self._changed = trio.Event()

    async def wait_for_work(self, holder: Hashable) -> bool:
        """Whether ``holder`` (an endpoint's book) may start an episode now.

        While none may start and the quota is not reached, waits as long as an episode
        another endpoint runs may still come back (see
        :meth:`~trio_rlmesh.runtime._pool.EpisodePool.may_come_back`); ``False`` when
        the run has every episode it needs, or none is left to start. A lane waiting here
        sends no predicts, so the batcher's groups do not wait for it meanwhile.
        """
        if self._idle(holder):
            self.leave()
            try:
                while self._idle(holder):
                    await self._changed.wait()
            finally:
                self.join()
        pool = self.pool
        return pool.can_start() and not pool.quota_reached

    def _idle(self, holder: Hashable) -> bool:
        pool = self.pool
        return not (pool.can_start() or pool.quota_reached) and pool.may_come_back(holder)


class FleetBatcher(PredictBatcher[_K]):
    """The fleet's :class:`~trio_rlmesh.runtime._calls.PredictBatcher`: a group waits,
    bounded, for the endpoints expected to join it, and only for those.

    Every task that may submit (a driver's lane group) is a *participant*, counted by
    :meth:`join` and :meth:`leave`. A group goes when every participant has a request in
    it, or when its *bound* has passed since it started gathering, or as soon as no
    missing participant is expected before then. An endpoint that was just answered is
    off stepping its env: it is expected back one *turnaround* (its last time from an
    answer to its next request) after that answer. So a group waits for participants not
    answered yet and for those due within the bound (or overdue by less than it), and
    ready rows never sit waiting for an endpoint a whole env step away. Keys must be
    hashable: each names one participant.

    The bound is ``wait``, or the model's last fused call if that took longer: a row that
    misses a call waits for the next one, which costs the model a whole call again, so
    for a model whose call costs about the same whatever the batch, waiting up to one
    call's time for an endpoint that is due keeps the fleet in one group instead of
    letting it drift into several that each pay for a call. ``wait=0`` never waits: a
    group takes what is ready.
    """

    def __init__(self, fused: FusedPredict[_K], *, wait: float) -> None:
        super().__init__(fused)
        self._wait = wait
        self._bound = wait
        """How long a group may wait: ``wait``, or the last fused call if longer."""
        self.participants = 0
        """Tasks that may submit."""
        self._away: dict[_K, float] = {}
        """When each participant answered and not back yet got its answer."""
        self._turnaround: dict[_K, float] = {}
        """Each participant's last time from an answer to its next request (seconds)."""
        self._deadline: float | None = None
        """While a group gathers: when it goes at the latest."""

    def join(self) -> None:
        """One more task may submit."""
        self.participants += 1

    def leave(self) -> None:
        """A task that joined will submit no more (a group waiting for it goes now)."""
        self.participants -= 1
        self._wakeup.set()

    def served(self, keys: Sequence[_K], when: float, took: float) -> None:
        """The requests of ``keys`` were answered at ``when``, by a call of ``took``
        seconds: those participants are away, and the next group's bound follows."""
        away = self._away
        for key in keys:
            away[key] = when
        if self._wait:
            self._bound = max(self._wait, took)

    def _arrived(self, key: _K) -> None:
        answered = self._away.pop(key, None)
        now = trio.current_time()
        if answered is not None:
            self._turnaround[key] = now - answered
        deadline = self._deadline
        # A gathering group is woken only when it may go: fewer task switches per row.
        if deadline is None or not self._missing(now, deadline):
            self._wakeup.set()

    def _missing(self, now: float, deadline: float) -> bool:
        """Whether the group should wait on: a participant without a request pending
        may still join it before ``deadline``."""
        pending = len(self._pending)
        if pending >= self.participants:
            return False
        away = self._away
        if pending + len(away) < self.participants:
            return True  # a participant never answered yet: it may come any time
        turnaround, since = self._turnaround, now - self._bound
        for key, answered in away.items():
            if since <= answered + turnaround.get(key, 0.0) <= deadline:
                return True
        return False

    async def _gather(self) -> None:
        if not self._pending:
            return
        now = trio.current_time()
        self._deadline = deadline = now + self._bound
        try:
            with trio.move_on_at(deadline):
                while self._pending and self._missing(now, deadline):
                    self._wakeup = trio.Event()
                    await self._wakeup.wait()
                    now = trio.current_time()
        finally:
            self._deadline = None
