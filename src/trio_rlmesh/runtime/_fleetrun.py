"""One run over several env endpoints: a driver per endpoint, one model, fused predicts.

:class:`FleetRun` is what ``run_local`` runs for a sequence of env addresses. Inside its
nursery there is one task per endpoint, each running an ordinary
:class:`~trio_rlmesh.runtime.RuntimeDriver` for its endpoint, and, when the model fuses
predicts, the fleet's batcher, which every driver submits to, so predicts from different
endpoints that are ready together reach the model as one call (with a bounded wait for
the endpoints not yet in). What the drivers share is a
:class:`~trio_rlmesh.runtime._fleet.Fleet`: the batcher and the
:class:`~trio_rlmesh.runtime._pool.EpisodePool`, which numbers the fleet's episodes,
seeds them and holds the quota.

Admission: every endpoint connects first, then waits until each of the others has
connected or failed to. Their contracts are then compared (:func:`fleet_mismatch`), once:
one model drives them all, so they must serve the same observation and action spaces; a
fleet that does not is refused with a :class:`~trio_rlmesh.SpecError` before any episode
starts. Lane counts and autoreset modes may differ: each endpoint's driver keeps its own
lanes, and the model sees one row per lane either way.

Failures: by default the first endpoint that fails stops the others (each driver is
cancelled and reports what it finished), and the run fails with that error, carrying the
merged report. With ``tolerate_endpoint_failures`` an endpoint failure (an error of an
``env.*`` operation, connecting included) loses that endpoint only: the episodes it was
running go back to the pool and the others run them again with the same seeds. A model or
hook failure still fails the run, and so does losing every endpoint.

:func:`merge_reports` is the one place a fleet's report is put together.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Protocol, TypeAlias, TypeVar

import attrs
import trio

from .._errors import Error, SpecError
from ..protocol import EnvContractInfo, core_v1, read_env_contract
from ..spaces import Box, Space
from ._calls import is_cancellation
from ._driver import RuntimeDriver
from ._fleet import FLEET_ROUTE, Fleet
from ._report import CANCELLED_BY_CALLER, EndpointReport, EpisodeRecord, RunStatus, RuntimeReport
from ._telemetry import TelemetryRow, merge_sessions

__all__ = [
    "FleetRun",
    "fleet_mismatch",
    "is_endpoint_failure",
    "merge_reports",
]

ADMIT_OPERATION = "fleet.connect"
"""How the refusal of a fleet whose endpoints differ names its operation."""


class Connected(Protocol):
    """An endpoint once connected (handshake done): what admission reads of it."""

    @property
    def contract(self) -> core_v1.EnvContract: ...


_E = TypeVar("_E", bound=Connected)

OpenEndpoint: TypeAlias = Callable[[str], AbstractAsyncContextManager[_E]]
"""Connects to one endpoint (handshake included); closes it on exit."""
Prepare: TypeAlias = Callable[[str, _E, Fleet], Awaitable[RuntimeDriver]]
"""Builds the driver of the endpoint at an address, once connected (route resolved, not
yet run)."""


def is_endpoint_failure(error: Error) -> bool:
    """Whether ``error`` is the env endpoint's (an ``env.*`` operation): what a fleet
    that tolerates endpoint failures survives."""
    return (error.operation or "").startswith("env.")


def fleet_mismatch(contracts: Sequence[tuple[str, EnvContractInfo]]) -> str | None:
    """What differs between a fleet's endpoints that one model cannot drive together
    (``None``: nothing). ``contracts`` are ``(address, contract)`` in the fleet's order;
    the first one's spaces are the reference.

    >>> from trio_rlmesh.protocol import read_env_contract
    >>> from trio_rlmesh.testing import FakeEnv
    >>> four, three = (read_env_contract(FakeEnv(obs_dim=d).contract) for d in (4, 3))
    >>> fleet_mismatch([("a:1", four), ("b:2", four)]) is None
    True
    >>> print(fleet_mismatch([("a:1", four), ("b:2", three)]))
    b:2 serves observation space Box(shape=(3,), dtype=FLOAT32), a:1 Box(shape=(4,), dtype=FLOAT32)
    """
    if not contracts:
        return None
    (first, reference), *others = contracts
    differences = []
    for address, info in others:
        for name in ("observation", "action"):
            mine, theirs = getattr(info, f"{name}_space"), getattr(reference, f"{name}_space")
            if mine != theirs:
                shown = _brief(mine), _brief(theirs)
                if shown[0] == shown[1]:  # the same kind and shape: the bounds differ
                    shown = repr(mine), repr(theirs)
                differences.append(f"{address} serves {name} space {shown[0]}, {first} {shown[1]}")
    return "; ".join(differences) or None


def _brief(space: Space) -> str:
    if isinstance(space, Box):
        return f"Box(shape={space.shape}, dtype={space.dtype.name})"
    return repr(space)


class _Admission:
    """Holds connected endpoints until every endpoint has connected or failed to, then
    compares the connected ones' contracts, once."""

    def __init__(self, addresses: Sequence[str]) -> None:
        self._order = list(addresses)
        self._waiting = set(addresses)
        self._contracts: dict[str, EnvContractInfo] = {}
        self._decided = trio.Event()
        self.refusal: SpecError | None = None

    async def admit(self, address: str, contract: core_v1.EnvContract) -> bool:
        """Wait for the others; whether this endpoint may run (``False``: refused)."""
        self._contracts[address] = read_env_contract(contract)
        self.withdraw(address)
        await self._decided.wait()
        return self.refusal is None

    def withdraw(self, address: str) -> None:
        """``address`` is settled (admitted, or failed before it connected)."""
        self._waiting.discard(address)
        if self._waiting or self._decided.is_set():
            return
        ordered = [(a, self._contracts[a]) for a in self._order if a in self._contracts]
        mismatch = fleet_mismatch(ordered)
        if mismatch is not None:
            self.refusal = SpecError(
                f"fleet of {', '.join(a for a, _ in ordered)} refused: {mismatch}; one model "
                "drives every endpoint of a fleet, so they must all serve the same spaces "
                "(run each kind of env in its own run)",
                operation=ADMIT_OPERATION,
            )
        self._decided.set()


@attrs.define(eq=False)
class _Seat:
    """One endpoint of the fleet while the run goes."""

    address: str
    scope: trio.CancelScope = attrs.Factory(trio.CancelScope)
    driver: RuntimeDriver | None = None
    report: RuntimeReport | None = None
    error: Error | None = None
    retried: tuple[tuple[int, int | None], ...] = ()
    done: bool = False


class FleetRun:
    """Drive every endpoint of a fleet with one model (see the module docstring).

    ``cancel(reason)`` ends the run at the drivers' next checkpoints (the report's status
    is then ``cancelled``), like :meth:`RuntimeDriver.cancel`.
    """

    def __init__(
        self,
        addresses: Sequence[str],
        fleet: Fleet,
        *,
        session_id: str,
        tolerate_endpoint_failures: bool = False,
    ) -> None:
        self.fleet = fleet
        self._seats = [_Seat(address) for address in addresses]
        self._admission = _Admission(addresses)
        self._session_id = session_id
        self._tolerate = tolerate_endpoint_failures
        self._stop_reason: str | None = None
        self._cancelled = False
        self._failure: Error | None = None
        self.report: RuntimeReport | None = None
        """The merged report, whichever way the run ended."""

    @property
    def endpoints(self) -> int:
        return len(self._seats)

    @property
    def lost(self) -> tuple[str, ...]:
        """Addresses of the endpoints lost so far."""
        return tuple(seat.address for seat in self._seats if seat.error is not None)

    def cancel(self, reason: str = CANCELLED_BY_CALLER) -> None:
        """End the run; every driver reports what it finished (status ``cancelled``)."""
        self._cancelled = True
        self._stop(reason)

    def _stop(self, reason: str) -> None:
        if self._stop_reason is None:
            self._stop_reason = reason
        for seat in self._seats:
            if seat.driver is not None:
                seat.driver.cancel(reason)
            elif not seat.done:
                seat.scope.cancel()  # still connecting: nothing to report yet

    async def run(self, open_endpoint: OpenEndpoint[_E], prepare: Prepare[_E]) -> RuntimeReport:
        """Connect every endpoint, admit the fleet, run every endpoint to the end; returns
        the merged report (or raises, with it).

        Raises:
            SpecError: the endpoints serve different spaces (nothing ran; no report).
        """
        interrupted: BaseException | None = None
        try:
            async with trio.open_nursery() as nursery:
                self.fleet.start(nursery)
                async with trio.open_nursery() as endpoints:
                    for seat in self._seats:
                        endpoints.start_soon(self._endpoint, seat, open_endpoint, prepare)
                nursery.cancel_scope.cancel()
        except BaseException as exc:
            interrupted = exc
        refusal = self._admission.refusal
        if refusal is not None and interrupted is None and self._failure is None:
            raise refusal
        self.report = report = self._conclude(interrupted)
        if interrupted is not None:
            raise interrupted
        if self._failure is not None:
            self._failure.report = report
            raise self._failure
        return report

    async def _endpoint(
        self, seat: _Seat, open_endpoint: OpenEndpoint[_E], prepare: Prepare[_E]
    ) -> None:
        try:
            with seat.scope:
                async with open_endpoint(seat.address) as endpoint:
                    if not await self._admission.admit(seat.address, endpoint.contract):
                        return
                    seat.driver = driver = await prepare(seat.address, endpoint, self.fleet)
                    if self._stop_reason is not None:
                        driver.cancel(self._stop_reason)
                    seat.report = await driver.run()
        except Error as exc:
            seat.report = exc.report
            self._lose(seat, exc)
        except Exception as exc:
            error = Error(f"endpoint {seat.address} failed: {type(exc).__name__}: {exc}")
            error.__cause__ = exc
            self._lose(seat, error)
        finally:
            seat.done = True
            self._admission.withdraw(seat.address)

    def _lose(self, seat: _Seat, error: Error) -> None:
        error.with_context(address=seat.address)
        seat.error = error
        if self._tolerate and is_endpoint_failure(error) and self._stop_reason is None:
            # The driver has ended: what its book still holds was never completed.
            back = seat.driver._book.give_back() if seat.driver is not None else []
            seat.retried = tuple((index, self.fleet.pool.seed(index)) for index in back)
            self.fleet.changed()
            if any(other.error is None and not other.done for other in self._seats):
                return
            if self.fleet.pool.quota_reached:
                return
        if self._failure is None:
            self._failure = error
        self._stop(f"stopped: endpoint {seat.address} failed")

    def _conclude(self, interrupted: BaseException | None) -> RuntimeReport:
        status: RunStatus
        if interrupted is not None:
            status = "cancelled" if is_cancellation(interrupted) else "failed"
            reason: str | None = (
                "cancelled by the caller's cancel scope"
                if status == "cancelled"
                else f"interrupted: {type(interrupted).__name__}"
            )
        elif self._failure is not None:
            status, reason = "failed", str(self._failure)
        elif self._cancelled:
            status, reason = "cancelled", self._stop_reason
        else:
            status, reason = "completed", None
        recorders = [s.driver._telemetry for s in self._seats if s.driver is not None]
        telemetry = tuple(merge_sessions(recorders, self.fleet.telemetry))
        parts = [
            EndpointPart(seat.address, seat.report, seat.error, seat.retried)
            for seat in self._seats
        ]
        return merge_reports(
            parts,
            status=status,
            reason=reason,
            session_id=self._session_id,
            telemetry=telemetry,
        )


@attrs.frozen
class EndpointPart:
    """What one endpoint left: its driver's report (if it got that far), its error."""

    address: str
    report: RuntimeReport | None
    error: Error | None = None
    retried: tuple[tuple[int, int | None], ...] = ()


def merge_reports(
    parts: Sequence[EndpointPart],
    *,
    status: RunStatus,
    reason: str | None,
    session_id: str,
    telemetry: tuple[TelemetryRow, ...] = (),
) -> RuntimeReport:
    """The fleet's report from its endpoints' parts (the one place they are merged).

    Episodes come in index order (the fleet's start order; which endpoint finished first
    is timing, the index is not). Counts add up; each endpoint's advisories are kept,
    prefixed with its address; a lost endpoint adds one naming its error and the episodes
    started again elsewhere. ``telemetry`` is the total (see
    :func:`~trio_rlmesh.runtime._telemetry.merge_sessions`); each endpoint keeps its own.

    >>> merge_reports([EndpointPart("a:1", None)], status="cancelled", reason="stop",
    ...               session_id="s").endpoints[0].status
    'cancelled'
    """
    episodes: list[EpisodeRecord] = []
    advisories: list[str] = []
    endpoints = []
    steps = hook_errors = 0
    for part in parts:
        report = part.report
        if report is not None:
            episodes.extend(report.episodes)
            steps += report.env_step_calls
            hook_errors += report.hook_errors
            advisories.extend(f"{part.address}: {text}" for text in report.advisories)
        error = _describe(part.error) if part.error is not None else None
        if part.error is not None:
            retried = ", ".join(str(index) for index, _seed in part.retried) or "none"
            advisories.append(
                f"endpoint {part.address} was lost ({error}); episodes started again "
                f"elsewhere: {retried}"
            )
        # An endpoint stopped while it was still connecting has no report: cancelled.
        part_status: RunStatus = "failed" if part.error is not None else "cancelled"
        if part.error is None and report is not None:
            part_status = report.status
        endpoints.append(
            EndpointReport(
                endpoint=part.address,
                status=part_status,
                error=error,
                episodes=len(report.episodes) if report is not None else 0,
                env_step_calls=report.env_step_calls if report is not None else 0,
                retried=part.retried,
                telemetry=report.telemetry if report is not None else (),
            )
        )
    episodes.sort(key=lambda record: record.index)
    # Admission made every endpoint serve the same spaces: the first setup is the fleet's.
    setups = (part.report.setup for part in parts if part.report is not None)
    return RuntimeReport(
        status=status,
        reason=reason if status != "completed" else None,
        session_id=session_id,
        env_id=FLEET_ROUTE,
        episodes=tuple(episodes),
        env_step_calls=steps,
        telemetry=telemetry,
        advisories=tuple(advisories),
        hook_errors=hook_errors,
        endpoints=tuple(endpoints),
        setup=next(setups, None),
    )


def _describe(error: Error) -> str:
    return f"{type(error).__name__}: {error}"
