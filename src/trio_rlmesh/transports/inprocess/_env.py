"""A Gymnasium env (or vector env) as a :class:`~trio_rlmesh.runtime.RuntimeEnv`, no network.

It serves through the same env host as ``serve_env`` (:mod:`trio_rlmesh.transports._envhost`):
the same contract, the same action and observation checks, the same autoreset and
completed-episode rules, the same old-Gym normalisation. An env behaves the same in
process and served; only the bytes never travel.

The env's own calls (reset, step, render, close) run on a worker thread of their own by
default (``user_code="thread"``; one per lane for a list of envs), one at a time and
always on the same thread, so the driver's deadlines and the caller's cancellation can
abandon a call that hangs. With ``user_code="inline"`` they run on the trio thread: a
hand-off fewer per call, and a reset or step never yields to the event loop (so
:meth:`~GymEnvRuntimeEnv.runs_inline` tells the driver it may skip its cancel scope), but a
blocking step then blocks the event loop and no deadline can interrupt it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import trio

from ..._errors import EnvError
from ...protocol import EnvContractInfo, core_v1, env_v1, read_env_contract
from ...runtime import EndpointTimings, EnvResetResult, EnvStepResult, RuntimeEnv
from ...runtime._internal import UserCode, WorkerUnavailable, check_user_code, new_worker
from .._envhost import Code, EnvHost, LaneCall, RequestPlan, ValidationPolicy, WireError, run_plan

__all__ = ["GymEnvRuntimeEnv", "link_in_process"]

_R = TypeVar("_R", EnvResetResult, EnvStepResult)


class GymEnvRuntimeEnv(RuntimeEnv):
    """Host a Gymnasium ``Env``, ``VectorEnv``, a list of envs (one per lane) or a factory
    as a runtime env.

    Args:
        env: the env (a vector env is recognised by ``single_observation_space``), a list
            of scalar envs, or a callable returning an env (called ``num_envs`` times).
        user_code: where the env's code runs: ``"thread"`` (the default), on a worker
            thread per lane, where a deadline or a cancel can abandon a call that hangs;
            or ``"inline"``, on the trio thread, which saves a thread hand-off per call but
            lets a blocking call freeze the event loop (no deadline fires, Ctrl-C waits).
        env_name: the contract's env id (default: ``env.spec.id`` or ``"UnknownEnv-v1"``).
        num_envs: lanes for a factory.
        validation: conformance policy for actions and observations (``"warn"``,
            ``"strict"``, ``"off"``; ``None`` reads ``RLMESH_VALIDATION_POLICY``).

    Attributes:
        contract: the ``EnvContract`` a served env would return at handshake.
        info: the same, decoded.
        subset_step: whether lanes reset and step on their own (a list of envs, or one env).

    After a call was abandoned (its deadline passed) while the env still runs it, every
    later call fails at once with an :class:`~trio_rlmesh.EnvError` (code ``BUSY``)
    naming the stuck operation, and :meth:`close` skips the env's ``close``.
    """

    def __init__(
        self,
        env: Any,
        *,
        user_code: UserCode = "thread",
        env_name: str | None = None,
        num_envs: int | None = None,
        validation: ValidationPolicy | None = None,
    ) -> None:
        user_code = check_user_code(user_code)
        self.host = EnvHost.open(env, num_envs=num_envs, env_name=env_name, validation=validation)
        self.env = env
        self._session = self.host.session()
        self.contract: core_v1.EnvContract = self.host.contract
        self.info: EnvContractInfo = read_env_contract(self.contract)
        self.num_envs = self.host.num_lanes
        self.subset_step = self.host.lanes_individually
        self._workers = [
            new_worker(user_code, f"env {self.info.env_id}" + (f" lane {k}" if k else ""))
            for k in range(self.host.workers)
        ]
        self._user_code: UserCode = user_code
        # The methods that never yield: in inline mode, those the class did not replace (an
        # instance patch is checked per call).
        self._inline = frozenset(
            name
            for name in ("reset", "step")
            if user_code == "inline"
            and getattr(type(self), name) is getattr(GymEnvRuntimeEnv, name)
        )

    @property
    def gym_spec(self) -> Any:
        """The Gymnasium ``EnvSpec`` that makes the hosted env again, or ``None`` (an env
        not made from a registered id, or a vector env)."""
        return self.host.shape.gym_spec

    @property
    def user_code(self) -> UserCode:
        """Where the env's calls run: ``"thread"`` or ``"inline"``."""
        return self._user_code

    @property
    def vector(self) -> bool:
        """Whether a vector env is hosted (lockstep lanes)."""
        return not self.subset_step and self.num_envs > 1

    def runs_inline(self, method: str) -> bool:
        """Whether a ``reset`` or ``step`` made now returns without yielding: only in inline
        mode, while open, and not when a subclass (or a patch on this instance) replaced the
        method (the replacement may yield)."""
        return (
            method in self._inline and not self._workers[0].closed and method not in self.__dict__
        )

    async def _run(self, call: LaneCall) -> Any:
        try:
            return await self._workers[call.lane].run(call.operation, call.fn, *call.args)
        except WorkerUnavailable as exc:
            raise _busy(exc) from exc

    def _begin(
        self, plan: Callable[[Any], RequestPlan], request: Any, op: str
    ) -> tuple[RequestPlan, int, int]:
        started = time.perf_counter_ns()
        try:
            planned = plan(request)
        except EnvError as exc:
            raise exc.with_context(operation=op) from None
        return planned, started, time.perf_counter_ns()

    def _end(
        self,
        finish: Callable[[RequestPlan, Sequence[Any]], Any],
        wrap: type[_R],
        plan: RequestPlan,
        results: Sequence[Any],
        started: int,
        decoded: int,
        op: str,
    ) -> _R:
        called = time.perf_counter_ns()
        try:
            response = finish(plan, results)
        except EnvError as exc:
            raise exc.with_context(operation=op) from None
        done = time.perf_counter_ns()
        timings = EndpointTimings(
            total_ns=done - started,
            decode_ns=decoded - started,
            user_ns=called - decoded,
            encode_ns=done - called,
        )
        return wrap(response=response, timings=timings)

    @property
    def carry_values(self) -> bool:
        """Whether observations are answered as carried values
        (:class:`~trio_rlmesh.protocol._carried.CarriedValue`), not encoded leaves: for a
        model in this process (:func:`link_in_process` sets it). Off by default."""
        return self._session.carry

    @carry_values.setter
    def carry_values(self, value: bool) -> None:
        self._session.carry = value

    async def reset(self, request: env_v1.ResetRequest) -> EnvResetResult:
        """Reset the lanes in ``request.env_indices`` (all when empty)."""
        session = self._session
        plan, started, decoded = self._begin(session.plan_reset, request, "env.reset")
        results = await self._results(plan, "env.reset")
        return self._end(
            session.finish_reset, EnvResetResult, plan, results, started, decoded, "env.reset"
        )

    async def step(self, request: env_v1.StepRequest) -> EnvStepResult:
        """Step the lanes in ``request.env_indices`` (all when empty)."""
        session = self._session
        plan, started, decoded = self._begin(session.plan_step, request, "env.step")
        results = await self._results(plan, "env.step")
        return self._end(
            session.finish_step, EnvStepResult, plan, results, started, decoded, "env.step"
        )

    async def _results(self, plan: RequestPlan, op: str) -> list[Any]:
        calls = plan.calls
        try:
            if len(calls) == 1:  # most calls: straight to the lane's worker, a layer fewer
                call = calls[0]
                try:
                    return [await self._workers[call.lane].run(call.operation, call.fn, *call.args)]
                except WorkerUnavailable as exc:
                    raise _busy(exc) from exc
            # Inline lanes run one after the other: a nursery would yield, and runs_inline
            # promised a call that does not.
            return await run_plan(plan, self._run, concurrently=self._user_code != "inline")
        except EnvError as exc:
            raise exc.with_context(operation=op) from None

    async def render(self, request: env_v1.RenderRequest | None = None) -> env_v1.RenderResponse:
        """Render one lane (lane 0 by default), as a PNG frame (empty when there is none)."""
        request = request if request is not None else env_v1.RenderRequest()
        plan = self._session.plan_render(request)
        frames = await self._results(plan, "env.render")
        return self._session.finish_render(plan, frames)

    async def release(self) -> None:
        """Let go of the env without closing it (the caller owns it): end the session and
        stop the workers (never waiting for a stuck call)."""
        self._session.close()
        for worker in self._workers:
            with trio.CancelScope(shield=True), contextlib.suppress(WorkerUnavailable):
                await worker.aclose("env.release", _nothing)

    async def close(self, timeout: float) -> None:  # noqa: ASYNC109 - RuntimeEnv's signature
        """End the session and run the env's ``close`` once.

        The caller bounds the call (the driver by ``timeout``, the env not enforcing
        deadlines itself): no second timer here.

        Raises:
            EnvError: an abandoned call (a hung step) still occupies the env, so its
                ``close`` did not run (code ``BUSY``). This returns at once.
        """
        self._session.close()
        close = self.host.shape.close_call
        try:
            await self._workers[0].aclose("env.close", close)
        except WorkerUnavailable as exc:
            raise exc.as_error(EnvError) from exc
        finally:
            for worker in self._workers[1:]:
                with trio.CancelScope(shield=True), contextlib.suppress(WorkerUnavailable):
                    await worker.aclose("env.close", _nothing)


def _nothing() -> None:
    pass


def _busy(exc: WorkerUnavailable) -> WireError:
    """A call refused because the lane's worker is stuck or closed, as the env server says it."""
    return WireError(Code.BUSY, str(exc))


def link_in_process(env: object, model: object) -> bool:
    """Let values pass between an in-process env and an in-process model as they are.

    When ``env`` is a :class:`GymEnvRuntimeEnv` and ``model`` a
    :class:`~trio_rlmesh.transports.inprocess.ModelHandlerRuntimeModel`, both answer with
    carried values from now on (observations and actions are checked as always, but never
    encoded to leaf bytes and decoded again), and this returns ``True``; otherwise it
    changes nothing and returns ``False``. Only for a pair that talks to nobody else: a
    carried value read by a wire encoder is encoded then, at extra cost.
    """
    from ._model import ModelHandlerRuntimeModel

    if isinstance(env, GymEnvRuntimeEnv) and isinstance(model, ModelHandlerRuntimeModel):
        env.carry_values = model.carry_values = True
        return True
    return False
