"""The model host: one model handler seen through rlmesh-wire-v1's model messages, no I/O.

Theory of operation. A :class:`ModelHost` owns a handler (usually the
:class:`~trio_rlmesh.model.ModelEngine` :func:`~trio_rlmesh.model.as_handler` builds around a
user's model), the name its errors use, its route table, and the lock that gives the handler
one call at a time. The gRPC model server and the in-process model both serve through it: the
server decodes and encodes gRPC around it, the in-process model calls it directly (values may
pass through as they are). So a model answers, refuses and words its errors the same in both
seats.

* **Routes.** :meth:`ModelHost.resolve` is the one place a route (an env id) is configured:
  it checks the ResolveAdapter request as RLMesh's model server does, decodes the env's
  contract, asks the handler's route setup what the route needs (history rows, the native
  chunk) and stores the :class:`Route`. A later resolve of the same env id replaces it;
  :meth:`ModelHost.release` forgets it. It is also the one place a spec'd model's adapter
  belongs: resolved against the contract there, and kept on the route.
* **Predicts** are served in three halves, as the env host serves requests: :meth:`plan`
  decodes each request against its route and keeps a request's error in its place; the
  seat calls the handler once for every group that decoded (:meth:`call`: under the lock,
  or, while the handler answers on the trio thread, without yielding at all); and
  :meth:`finish` checks and encodes each answer into its PredictResponse. A failed request
  never sinks the others. The plan then holds the call's phases (decode, user, encode,
  adapter, held state), which every answer of the call reports: the server puts them in
  its JoinResponse, the in-process model in each
  :class:`~trio_rlmesh.runtime.ModelPrediction`. Values pass between the wire and the
  model in :meth:`plan` and :meth:`finish` only, which is where a spec'd model's adapter
  is applied: each group's observation becomes the spec's payload as it is decoded, and
  each answer becomes env actions before it is encoded (:mod:`._adapt`, whose per-episode
  states live on the route).
* **The unresolved-route rule** is RLMesh's model server's: a predict on an env id that
  was never resolved, or was released, fails (INTERNAL, not recoverable) in every seat.
  The runtime resolves before it drives (``run_local`` and ``run`` do it;
  :meth:`~trio_rlmesh.runtime.RuntimeSessionSpec.resolve_request` builds the request).
* **Episode ends** (:meth:`reset`) reach the route setup, then the handler, under the lock.
* **Errors.** Every error the host makes names the model and the env route, with one
  wording in both seats. An error the handler returns in place reaches the caller as it is
  (the engine's name the model, the env and the lane); an exception the handler raises
  becomes the model's :class:`~trio_rlmesh.ModelError` for each group it was asked for.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final, NoReturn, TypeVar

import attrs
import trio

from ..._errors import Error, ModelError
from ...adapters import Adapter
from ...adapters._internal import adapter_for, pairing_failure
from ...model import (
    HeldState,
    ModelEngine,
    ModelHandler,
    ModelObservation,
    PredictFrames,
    ResolveOptions,
    RouteContract,
    as_handler,
)
from ...model._internal import (
    encode_frames,
    env_label,
    observation_from_request,
    predict_refused,
)
from ...protocol import SUPPORTED_WORKFLOW_EDITIONS, model_v1
from ...runtime import EndpointTimings
from ...runtime._internal import ServingUserCode
from ._adapt import RouteAdapter

__all__ = ["ModelHost", "PredictPlan", "Route"]

RESOLVE: Final = "model.resolve_adapter"
PREDICT: Final = "model.predict"
RESET: Final = "model.reset_adapter"
RELEASE: Final = "model.release_adapter"


@attrs.frozen
class Route:
    """One resolved route: what its predicts are decoded, checked and encoded against."""

    contract: RouteContract
    """The env's contract, from the ResolveAdapter's env spec."""
    history: bool
    """Whether the route negotiated observation history (its predicts may carry rows)."""
    adapter: RouteAdapter | None = None
    """A spec'd model's adapter on this route, with its episodes' states."""


_T = TypeVar("_T")

_NONE_YET: Final[list[Any]] = []
"""The answers and results of a plan not that far yet (shared, never mutated: replaced)."""


class PredictPlan:
    """One predict call under way: each request decoded (or its error), then the handler's
    answers, the results and what the call cost. Built by :meth:`ModelHost.plan`.

    What the later halves fill in starts as a class default, so building a plan (once per
    predict) sets only what the decode knows.
    """

    answers: list[PredictFrames | Error] = _NONE_YET
    """The handler's answers to ``groups``, 1:1 (set by ``call``)."""
    results: list[model_v1.PredictResponse | Error] = _NONE_YET
    """Aligned with ``requests``: each answer, or its error (set by ``finish``)."""
    user_ns: int | None = None
    """Time in the handler's call; ``None`` when no group decoded (no call)."""
    adapter_ns: int | None = None
    host_adapter_ns: int = 0
    """Time the host spent applying routes' adapters (decode and encode halves)."""
    held: HeldState | None = None
    encode_ns: int | None = None
    total_ns: int | None = None

    def __init__(
        self,
        requests: Sequence[model_v1.PredictRequest],
        prepared: list[ModelObservation | Error],
        groups: list[ModelObservation],
        started: int,
    ) -> None:
        self.requests = requests
        self.prepared = prepared
        """Aligned with ``requests``: the decoded group, or the request's error."""
        self.groups = groups
        """The groups the handler is asked for, in request order."""
        self.started = started
        self.decode_ns = time.perf_counter_ns() - started

    def timings(self) -> EndpointTimings:
        """The call's phases, once finished: what every answer of the call reports."""
        held = self.held
        adapter_ns = self.adapter_ns
        if self.host_adapter_ns:
            adapter_ns = (adapter_ns or 0) + self.host_adapter_ns
        return EndpointTimings(
            decode_ns=self.decode_ns,
            user_ns=self.user_ns,
            adapter_ns=adapter_ns,
            held_episodes=held.episodes if held is not None else None,
            held_state_bytes=held.bytes if held is not None else None,
            encode_ns=self.encode_ns,
            total_ns=self.total_ns,
        )


def _malformed(message: str, operation: str) -> ModelError:
    """A malformed request (RLMesh's INVALID_REQUEST): not recoverable."""
    return ModelError(message, recoverable=False, operation=operation, code="INVALID_REQUEST")


def _env_id(context: model_v1.AdapterContext | None) -> str:
    return context.env_id if context is not None else ""


class ModelHost:
    """One model handler served over rlmesh-wire-v1; see the module docstring.

    Args:
        handler: what answers the predicts (a :class:`~trio_rlmesh.model.ModelHandler`).
        name: how errors name the model.
    """

    def __init__(self, handler: ModelHandler, name: str) -> None:
        self.handler = handler
        self.name = name
        self.routes: dict[str, Route] = {}
        """Every resolved route, by env id."""
        self.lock = trio.Lock()
        """Held while the handler is called: it sees one call at a time."""
        self.carry = False
        """Answer actions as carried values, not encoded leaves (for an env in this process)."""
        self._adapter_ns = 0
        """Adapter time of the plan half now running (moved into its plan as it ends)."""

    @classmethod
    def open(
        cls,
        model: object,
        *,
        name: str | None = None,
        user_code: ServingUserCode | None = None,
    ) -> ModelHost:
        """Host what the user passed: a model object (wrapped by
        :func:`~trio_rlmesh.model.as_handler`, its code run where ``user_code`` says) or a
        :class:`~trio_rlmesh.model.ModelHandler` (as it is)."""
        handler = as_handler(model, name=name, user_code=user_code)
        label = getattr(handler, "name", None)
        return cls(handler, name or (label if isinstance(label, str) else type(handler).__name__))

    # ---------------------------------------------------------------- routes

    async def resolve(
        self, request: model_v1.ResolveAdapterRequest
    ) -> model_v1.ResolveAdapterResponse:
        """Configure (or reconfigure) the route the request names, and answer it.

        Checks the request as RLMesh's model server does (context, env id, env spec, the
        pinned workflow edition), asks the handler's route setup (if any) with the
        execution horizon and the offer of history, and refuses a model that needs history
        the runtime does not deliver.

        Raises:
            ModelError: the request is malformed (``INVALID_REQUEST``) or the model refused
                the route (its own error, ``recoverable`` kept), naming the model and env.
        """
        env_id = _env_id(request.context)
        if request.context is None:
            raise _malformed("resolve_adapter missing context", RESOLVE)
        if not env_id:
            raise _malformed("resolve_adapter missing env_id", RESOLVE)
        if request.env_spec is None:
            raise _malformed("resolve_adapter missing env_spec", RESOLVE)
        pin = request.selected_workflow_edition.strip()
        if pin and pin not in SUPPORTED_WORKFLOW_EDITIONS:
            raise _malformed(
                f"selected workflow edition {pin} is not supported: this model endpoint does "
                f"not implement it (supported: {', '.join(SUPPORTED_WORKFLOW_EDITIONS)})",
                RESOLVE,
            )
        if not pin and len(SUPPORTED_WORKFLOW_EDITIONS) != 1:
            raise _malformed("resolve_adapter must pin a workflow edition", RESOLVE)
        try:
            contract = RouteContract.from_env_spec(request.env_spec)
        except Error as exc:
            raise _malformed(f"invalid env spec: {exc}", RESOLVE) from exc
        horizon = max(1, request.execution_horizon)
        setup = self.handler.route_setup()
        needs = None
        if setup is not None:
            try:
                needs = await setup.resolve_adapter(
                    env_id, contract, ResolveOptions(horizon, request.delivers_history)
                )
            except Exception as exc:
                detail = exc.message if isinstance(exc, Error) else f"{type(exc).__name__}: {exc}"
                raise ModelError(
                    f"model {self.name!r} refused the route for "
                    f"{env_label(env_id, contract.env_name)}: {detail}",
                    recoverable=exc.recoverable if isinstance(exc, Error) else False,
                    operation=RESOLVE,
                    code=exc.code if isinstance(exc, Error) and exc.code else "INTERNAL",
                ) from exc
        adapter = self._adapter(env_id, contract, horizon)
        history_keys = needs.history if needs is not None else None
        if adapter is not None:
            refusal = adapter.refusal(request.delivers_history)
            if refusal is not None:
                raise ModelError(
                    f"model {self.name!r} refused the route for "
                    f"{env_label(env_id, contract.env_name)}: {refusal}",
                    operation=RESOLVE,
                    code="INTERNAL",
                )
            if history_keys is None:
                history_keys = adapter.needs(request.delivers_history)
        history = history_keys is not None
        if history and not request.delivers_history:
            raise ModelError(
                f"model {self.name!r} needs observation history, but the runtime did not offer "
                f"it (delivers_history) at execution_horizon={horizon}",
                operation=RESOLVE,
                code="INTERNAL",
            )
        response = model_v1.ResolveAdapterResponse()
        if needs is not None and needs.native_chunk is not None:
            response.native_chunk = needs.native_chunk
        if history_keys is not None:
            response.history = model_v1.ObservationHistoryNeeds(keys=list(history_keys))
        self.routes[env_id] = Route(contract, history, adapter)
        return response

    def _adapter(self, env_id: str, contract: RouteContract, horizon: int) -> RouteAdapter | None:
        """The route's adapter when the model declares a spec (read after the route setup
        loaded the model: ``load`` may set it).

        Raises:
            ModelError: the spec and the env's tags cannot be paired (``INVALID_REQUEST``),
                naming the model, the env and what to change.
        """
        spec = getattr(self.handler, "spec", None)
        if spec is None:
            return None
        try:
            adapter = adapter_for(spec, contract)
        except ValueError as exc:  # AdapterResolutionError and the spec readers' errors
            raise ModelError(
                pairing_failure(repr(self.name), env_label(env_id, contract.env_name), exc),
                operation=RESOLVE,
                code="INVALID_REQUEST",
            ) from exc
        return RouteAdapter(adapter, horizon) if adapter is not None else None

    def adapter(self, env_id: str) -> Adapter | None:
        """The adapter a resolved route applies (a spec'd model's), or ``None``."""
        route = self.routes.get(env_id)
        return route.adapter.adapter if route is not None and route.adapter is not None else None

    async def release(self, request: model_v1.ReleaseAdapterRequest) -> None:
        """Forget the route the request names (an unknown one is fine), through the route
        setup.

        Raises:
            ModelError: the request names no env (``INVALID_REQUEST``), or the route setup
                failed.
        """
        env_id = _env_id(request.context)
        if not env_id:
            raise _malformed("release_adapter missing env_id", RELEASE)
        route = self.routes.pop(env_id, None)
        setup = self.handler.route_setup()
        if setup is None:
            return
        try:
            await setup.release_adapter(env_id)
        except Exception as exc:
            self._reraise(exc, self._label(env_id, route), RELEASE)

    async def release_all(self) -> None:
        """Forget every route (a served Join stream's Close does: RLMesh's rule)."""
        setup = self.handler.route_setup()
        try:
            for env_id in list(self.routes):
                if setup is not None:
                    await setup.release_adapter(env_id)
                del self.routes[env_id]
        finally:
            self.routes.clear()

    # ---------------------------------------------------------------- episodes

    async def reset(self, request: model_v1.ResetAdapterRequest) -> None:
        """Drop the named episodes' state (all of the env's for an empty list): the route
        setup's first, then the handler's. The route stays resolved.

        Raises:
            ModelError: the request names no env (``INVALID_REQUEST``), or the model failed.
        """
        env_id = _env_id(request.context)
        if not env_id:
            raise _malformed("reset_adapter missing env_id", RESET)
        route = self.routes.get(env_id)
        if route is not None and route.adapter is not None:
            route.adapter.reset(request.episode_ids)
        async with self.lock:
            try:
                setup = self.handler.route_setup()
                if setup is not None:
                    await setup.reset_adapter(env_id, request.episode_ids)
                await self.handler.reset_adapter(env_id, request.episode_ids)
            except Exception as exc:
                self._reraise(exc, self._label(env_id), RESET)

    # ---------------------------------------------------------------- predict

    def plan(self, requests: Sequence[model_v1.PredictRequest]) -> PredictPlan:
        """Decode every request against its route; a request that cannot be served keeps
        its error in its place."""
        started = time.perf_counter_ns()
        if len(requests) == 1:  # every single-lane predict: no comprehensions to set up
            group = self._decode(requests[0])
            lone = [group] if isinstance(group, ModelObservation) else []
            plan = PredictPlan(requests, [group], lone, started)
        else:
            prepared = [self._decode(request) for request in requests]
            groups = [group for group in prepared if isinstance(group, ModelObservation)]
            plan = PredictPlan(requests, prepared, groups, started)
        if self._adapter_ns:
            plan.decode_ns -= self._take_adapter_time(plan)
        return plan

    @property
    def runs_inline(self) -> bool:
        """Whether :meth:`call` made now returns without yielding: the handler is the
        engine, running predicts on the trio thread, and nothing holds it."""
        handler = self.handler
        return type(handler) is ModelEngine and handler.runs_inline and not self.lock.locked()

    async def call(self, plan: PredictPlan) -> None:
        """Ask the handler for every group of ``plan`` in one call, under the lock (a call
        that :attr:`runs_inline` needs none: nothing can come between its start and end)."""
        if not plan.groups:
            return
        if self.runs_inline:
            await self._call(plan)
            return
        async with self.lock:
            await self._call(plan)

    async def _call(self, plan: PredictPlan) -> None:
        started = time.perf_counter_ns()
        try:
            answers = await self.handler.predict_grouped(plan.groups)
        except Exception as exc:
            answers = self._raised(exc, plan.groups)
        self._answered(plan, answers, started)

    def finish(self, plan: PredictPlan) -> list[model_v1.PredictResponse | Error]:
        """Each request's answer, checked and encoded (or its error), in request order;
        the call's phases are then the plan's :meth:`~PredictPlan.timings`."""
        encode_started = time.perf_counter_ns()
        prepared, groups, answers = plan.prepared, plan.groups, plan.answers
        results: list[model_v1.PredictResponse | Error]
        if len(answers) == len(prepared) == 1:
            # A lone request, decoded and answered (every single-lane predict).
            results = [self._answer(plan.requests[0], groups[0], answers[0])]
        elif len(prepared) == len(groups) == len(answers):
            # Every request decoded and was answered (the usual case): they line up.
            results = [
                self._answer(request, group, answer)
                for request, group, answer in zip(plan.requests, groups, answers, strict=True)
            ]
        else:
            results = []
            remaining = iter(answers)
            for request, group in zip(plan.requests, prepared, strict=True):
                if isinstance(group, Error):
                    results.append(group)
                else:
                    results.append(self._answer(request, group, next(remaining, None)))
        now = time.perf_counter_ns()
        adapted = self._take_adapter_time(plan) if self._adapter_ns else 0
        plan.encode_ns, plan.total_ns = now - encode_started - adapted, now - plan.started
        plan.results = results
        return results

    async def predict(self, requests: Sequence[model_v1.PredictRequest]) -> PredictPlan:
        """:meth:`plan`, :meth:`call` and :meth:`finish`: the answers are in the plan's
        ``results``, the call's phases in its :meth:`~PredictPlan.timings`."""
        plan = self.plan(requests)
        await self.call(plan)
        self.finish(plan)
        return plan

    # ---------------------------------------------------------------- the halves' parts

    def _decode(self, request: model_v1.PredictRequest) -> ModelObservation | Error:
        context = request.context
        if context is None:
            return predict_refused(self.name, "it has no context")
        route = self.routes.get(context.env_id)
        if route is None:
            if not context.env_id:
                return predict_refused(self.name, "its context has an empty env_id")
            return ModelError(
                f"model {self.name!r} has no route for {env_label(context.env_id)}: model env "
                "adapter was not resolved; resolve the route (ResolveAdapter) before the first "
                "predict on it",
                recoverable=False,
                operation=PREDICT,
                code="INTERNAL",
            )
        if request.history and not route.history:
            return predict_refused(
                self.name,
                "it carries observation history rows but this route did not negotiate history "
                "(ResolveAdapterResponse.history was unset): send rows only to a route that "
                "asked for them",
                (context.env_id, route.contract.env_name),
            )
        try:
            group = observation_from_request(request, route.contract, model=self.name)
        except Error as exc:
            return exc
        if route.adapter is None:
            return group
        adapter = route.adapter
        return self._adapted(group, lambda: adapter.payload(group))

    def _take_adapter_time(self, plan: PredictPlan) -> int:
        """Move the adapter time the half just run spent into ``plan``'s adapter phase, and
        return it (the half's own phase excludes it). Each half is synchronous, so the time
        is always its own plan's, whatever other predicts wait in between."""
        spent, self._adapter_ns = self._adapter_ns, 0
        plan.host_adapter_ns += spent
        return spent

    def _adapted(self, group: ModelObservation, step: Callable[[], _T]) -> _T | ModelError:
        """One adapter step for ``group`` (its payload, or its answer's env actions), timed
        into the call's adapter phase; an observation or action that does not fit the plan
        is the model's error on that env."""
        started = time.perf_counter_ns()
        try:
            return step()
        except ValueError as exc:  # ApplyError, and numpy's on a ragged answer
            return ModelError(
                f"model {self.name!r} could not adapt {group.env_label}: {exc}",
                recoverable=False,
                operation=PREDICT,
                code="INTERNAL",
            )
        finally:
            self._adapter_ns += time.perf_counter_ns() - started

    def _answered(
        self, plan: PredictPlan, answers: Iterable[PredictFrames | Error], started: int
    ) -> None:
        plan.user_ns = time.perf_counter_ns() - started
        plan.answers = answers if type(answers) is list else list(answers)
        # Drained after every call, failed or not, or the time leaks into the next predict.
        plan.adapter_ns = self.handler.take_adapter_ns()
        plan.held = self.handler.held_state()

    def _answer(
        self,
        request: model_v1.PredictRequest,
        group: ModelObservation,
        answer: PredictFrames | Error | None,
    ) -> model_v1.PredictResponse | Error:
        if answer is None:
            return ModelError(
                f"model {self.name!r} returned no result for {group.env_label}: "
                "predict_grouped returned fewer results than prepared groups",
                recoverable=False,
                operation=PREDICT,
                code="INTERNAL",
            )
        if isinstance(answer, BaseException):
            return answer
        space = group.action_space
        route = self.routes.get(group.env_id)
        if route is not None and route.adapter is not None:
            adapter = route.adapter
            answered = answer
            converted = self._adapted(group, lambda: adapter.actions(group, answered))
            if isinstance(converted, Error):
                return converted
            answer, space = converted, route.contract.action_space
        assert space is not None  # the route's contract always has one
        try:
            actions = encode_frames(
                answer,
                space,
                group.num_envs,
                model=self.name,
                env=(group.env_id, group.env_name),
                carry=self.carry,
            )
        except Error as exc:
            return exc
        # The decoded group's route identity is the request's context, field for field;
        # echoing that object also lets the driver's identity check skip a field compare.
        return model_v1.PredictResponse(context=request.context, actions=actions)

    # ---------------------------------------------------------------- errors

    def _label(self, env_id: str, route: Route | None = None) -> str:
        if route is None:
            route = self.routes.get(env_id)
        return env_label(env_id, route.contract.env_name if route is not None else "")

    def _failed(self, exc: BaseException, where: str, operation: str) -> Error:
        """What the model's own code raised, as the error the caller sees: an
        :class:`~trio_rlmesh.Error` as it is, anything else the model's INTERNAL failure."""
        if isinstance(exc, Error):
            return exc.with_context(operation=operation)
        return ModelError(
            f"model {self.name!r} failed {operation} on {where}: {type(exc).__name__}: {exc}",
            recoverable=False,
            operation=operation,
            code="INTERNAL",
        )

    def _reraise(self, exc: Exception, where: str, operation: str) -> NoReturn:
        error = self._failed(exc, where, operation)
        if error is exc:
            raise exc
        raise error from exc

    def _raised(
        self, exc: Exception, groups: Sequence[ModelObservation]
    ) -> list[PredictFrames | Error]:
        """A grouped call that raised fails every group of it."""
        return [self._failed(exc, group.env_label, PREDICT) for group in groups]
