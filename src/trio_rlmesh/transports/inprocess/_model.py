"""A :class:`~trio_rlmesh.model.ModelHandler` as a :class:`~trio_rlmesh.runtime.RuntimeModel`.

No serialization: the driver's PredictRequests are decoded straight into
:class:`~trio_rlmesh.model.ModelObservation` groups, the whole batch goes to ONE
``predict_grouped`` call (so a model with a batched corner runs one fused forward for
every lane waiting on it), and each group's frames are checked against the action space
and encoded with the batched codec.

Unlike the reference adapter, every error keeps its ``recoverable`` flag (the reference's
default wrapping dropped it, so a recoverable model decline reached the caller as
permanent), and every error names the model, the env id and, when known, the lane.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import NamedTuple

import trio

from ..._errors import Error, ModelError
from ...model import (
    HeldState,
    ModelEngine,
    ModelHandler,
    ModelObservation,
    PredictFrames,
    RouteContract,
    as_handler,
)
from ...model._internal import (
    encode_frames,
    env_label,
    observation_from_request,
    resolve_route,
)
from ...protocol import EnvContractInfo, core_v1, model_v1, read_env_contract
from ...runtime import EndpointTimings, ModelPrediction
from ...runtime._internal import ServingUserCode

__all__ = ["ModelHandlerRuntimeModel"]


def _as_route_contract(
    contract: RouteContract | EnvContractInfo | core_v1.EnvContract,
) -> RouteContract:
    if isinstance(contract, RouteContract):
        return contract
    if isinstance(contract, core_v1.EnvContract):
        contract = read_env_contract(contract)
    return RouteContract.from_env_contract(contract)


def _handler_name(handler: object) -> str:
    name = getattr(handler, "name", None)
    return name if isinstance(name, str) else type(handler).__name__


class ModelHandlerRuntimeModel:
    """Drive a model handler (or any model object) in-process from the runtime driver.

    Args:
        handler: a :class:`~trio_rlmesh.model.ModelHandler`, or a model object that
            :func:`~trio_rlmesh.model.as_handler` accepts.
        contract: the env's contract (decoded, a wire ``EnvContract``, or a
            :class:`~trio_rlmesh.model.RouteContract`); ``None`` until :meth:`resolve`
            takes it from the route's env spec.
        wants_history: whether the route negotiated observation history (the driver then
            sends history rows). :meth:`resolve` sets it from the route's answer.
        name: how errors name the model (default: the handler's ``name`` or class).
        user_code: where a model object's code runs when this adapter wraps it with
            :func:`~trio_rlmesh.model.as_handler`: ``"auto"`` (the default: on a worker
            thread until its predicts prove quick, then inline until one is slow),
            ``"thread"`` (deadlines and cancellation can abandon a hung predict) or
            ``"inline"`` (on the trio thread: faster, but a blocking predict blocks the
            event loop). A handler passed in as is keeps its own choice.
    """

    def __init__(
        self,
        handler: ModelHandler | object,
        contract: RouteContract | EnvContractInfo | core_v1.EnvContract | None = None,
        *,
        wants_history: bool = False,
        name: str | None = None,
        user_code: ServingUserCode | None = None,
    ) -> None:
        self.handler: ModelHandler = as_handler(handler, user_code=user_code)
        self.contract: RouteContract | None = (
            _as_route_contract(contract) if contract is not None else None
        )
        self.name = name or _handler_name(self.handler)
        self._routes: dict[str, RouteContract] = {}
        """Each resolved route's contract, by env id: a fleet run resolves one route per
        endpoint, and the endpoints' envs need not be alike."""
        self._wants_history = wants_history
        self.carry_values = False
        """Answer actions as carried values, not encoded leaves: for an env in this
        process (:func:`~trio_rlmesh.transports.inprocess.link_in_process` sets it)."""
        # The driver may evict episodes while a grouped predict is being prepared; the
        # handler sees one call at a time, as a served handler does.
        self._lock = trio.Lock()
        # predict_inline may stand in for predict only when the class did not replace it.
        self._inline_class = type(self).predict is ModelHandlerRuntimeModel.predict

    @property
    def wants_history(self) -> bool:
        return self._wants_history

    @property
    def fuses_predicts(self) -> bool:
        """Always true: ``predict_group`` is one ``predict_grouped`` call."""
        return True

    async def resolve(
        self, request: model_v1.ResolveAdapterRequest
    ) -> model_v1.ResolveAdapterResponse:
        """Resolve the route before driving, with the rules of the served path
        (:func:`~trio_rlmesh.model._wire.resolve_route`): the same validation, the same
        route setup call, the same refusals.

        Sets :attr:`contract` from the route's env spec and :attr:`wants_history` from the
        answer.

        Raises:
            ModelError: the request was malformed or the model refused the route
                (``recoverable`` kept).
        """
        route = await resolve_route(self.handler, request, model=self.name)
        self.contract = route.contract
        if request.context is not None:
            self._routes[request.context.env_id] = route.contract
        self._wants_history = route.history
        return route.response

    def _route_contract(self, env_id: str = "") -> RouteContract:
        routed = self._routes.get(env_id)
        if routed is not None:
            return routed
        if self.contract is None:
            raise ModelError(
                f"model {self.name!r} was asked to predict before its route was resolved",
                operation="model.predict",
                code="INTERNAL",
            )
        return self.contract

    def _wrap(self, exc: BaseException, env_id: str, operation: str) -> ModelError:
        routed = self._routes.get(env_id)
        where = env_label(env_id, routed.env_name if routed is not None else "")
        # An error that already names the env (by name, or by route id alone) stays as it is.
        if isinstance(exc, ModelError) and (
            where in exc.message or env_label(env_id) in exc.message
        ):
            return exc.with_context(operation=operation)  # type: ignore[return-value]
        recoverable = exc.recoverable if isinstance(exc, Error) else False
        detail = exc.message if isinstance(exc, Error) else f"{type(exc).__name__}: {exc}"
        error = ModelError(
            f"model {self.name!r} failed {operation} for {where}: {detail}",
            recoverable=recoverable,
            operation=operation,
            lane=exc.lane if isinstance(exc, Error) else None,
            code=exc.code if isinstance(exc, Error) else "INTERNAL",
        )
        error.__cause__ = exc
        return error

    async def predict(self, request: model_v1.PredictRequest) -> ModelPrediction:
        (result,) = await self.predict_group([request])
        if isinstance(result, Error):
            raise result
        return result

    def predict_inline(self, request: model_v1.PredictRequest) -> ModelPrediction | None:
        """:meth:`predict` without the event loop, or ``None`` when it must be awaited.

        The runtime driver calls this first. It answers only for a handler that would run
        the predict inline anyway (a :class:`~trio_rlmesh.model.ModelEngine` with
        ``user_code="inline"``, or ``"auto"`` while its predicts run inline; open) and
        only while no eviction holds the handler; being synchronous, it needs no lock of
        its own, and it saves the scheduler round an awaited lock costs. Otherwise
        (``user_code="thread"``, or ``"auto"`` while predicts run on the thread) it
        answers ``None``: the predict must run where a deadline can abandon it.
        """
        engine = self.handler
        if (
            type(engine) is not ModelEngine
            or not engine.runs_inline
            or not self._inline_class
            or self._lock.locked()
            or "predict" in self.__dict__
        ):
            return None
        # One request: the per-request halves of predict_group, without its lists.
        started = time.perf_counter_ns()
        group = self._observe(request)
        decode_ns = time.perf_counter_ns() - started
        if isinstance(group, Error):
            raise self._wrap(group, _env_of(request), "model.predict")
        call_started = time.perf_counter_ns()
        try:
            (answer,) = engine.predict_grouped_inline([group])
        except Exception as exc:
            (answer,) = _all_failed(exc, 1)
        finally:
            drained = self._drain(call_started)
        encode_started = time.perf_counter_ns()
        result = self._answer(request, group, answer, started, decode_ns, drained, encode_started)
        if isinstance(result, Error):
            raise result
        return result

    async def predict_group(
        self, requests: Sequence[model_v1.PredictRequest]
    ) -> list[ModelPrediction | Error]:
        started = time.perf_counter_ns()
        prepared, batch = self._decode(requests)
        decode_ns = time.perf_counter_ns() - started
        answers: list[PredictFrames | Error] = []
        drained = _NOT_CALLED
        if batch:
            async with self._lock:
                call_started = time.perf_counter_ns()
                try:
                    answers = list(await self.handler.predict_grouped(batch))
                except Exception as exc:
                    answers = _all_failed(exc, len(batch))
                finally:
                    drained = self._drain(call_started)
        return self._encode(requests, prepared, answers, started, decode_ns, drained)

    def _decode(
        self, requests: Sequence[model_v1.PredictRequest]
    ) -> tuple[list[ModelObservation | Error], list[ModelObservation]]:
        """Each request as a group (or its decode error), and the groups that decoded."""
        prepared = [self._observe(request) for request in requests]
        return prepared, [group for group in prepared if isinstance(group, ModelObservation)]

    def _observe(self, request: model_v1.PredictRequest) -> ModelObservation | Error:
        """One request as a group, or its decode error."""
        try:
            return observation_from_request(
                request, self._route_contract(_env_of(request)), model=self.name
            )
        except Error as exc:
            return exc

    def _drain(self, call_started: int) -> _Drained:
        # Drained even after a failure, or the time leaks into the next predict.
        user_ns = time.perf_counter_ns() - call_started
        return _Drained(user_ns, self.handler.take_adapter_ns(), self.handler.held_state())

    def _encode(
        self,
        requests: Sequence[model_v1.PredictRequest],
        prepared: list[ModelObservation | Error],
        answers: list[PredictFrames | Error],
        started: int,
        decode_ns: int,
        drained: _Drained,
    ) -> list[ModelPrediction | Error]:
        """Check and encode each group's answer, aligned with ``requests``."""
        encode_started = time.perf_counter_ns()
        results: list[ModelPrediction | Error] = []
        answer_iter = iter(answers)
        for request, group in zip(requests, prepared, strict=True):
            if isinstance(group, Error):
                results.append(self._wrap(group, _env_of(request), "model.predict"))
                continue
            answer = next(answer_iter, None)
            if answer is None:
                results.append(
                    ModelError(
                        f"model {self.name!r} returned fewer results than groups "
                        f"({group.env_label})",
                        operation="model.predict",
                        code="INTERNAL",
                    )
                )
                continue
            results.append(
                self._answer(request, group, answer, started, decode_ns, drained, encode_started)
            )
        return results

    def _answer(
        self,
        request: model_v1.PredictRequest,
        group: ModelObservation,
        answer: PredictFrames | Error,
        started: int,
        decode_ns: int,
        drained: _Drained,
        encode_started: int,
    ) -> ModelPrediction | Error:
        """One group's answer checked and encoded (or carried), or its error."""
        if isinstance(answer, BaseException):
            return self._wrap(answer, group.env_id, "model.predict")
        space = group.action_space
        try:
            actions = encode_frames(
                answer,
                space if space is not None else self._route_contract(group.env_id).action_space,
                group.num_envs,
                model=self.name,
                env=(group.env_id, group.env_name),
                carry=self.carry_values,
            )
        except Error as exc:
            return exc
        # The decoded group's route identity is the request's context, field for field;
        # echoing that object also lets the driver's identity check skip a field compare.
        response = model_v1.PredictResponse(context=request.context, actions=actions)
        now = time.perf_counter_ns()
        held = drained.held
        return ModelPrediction(
            response=response,
            timings=EndpointTimings(
                total_ns=now - started,
                decode_ns=decode_ns,
                user_ns=drained.user_ns,
                encode_ns=now - encode_started,
                adapter_ns=drained.adapter_ns,
                held_episodes=held.episodes if held is not None else None,
                held_state_bytes=held.bytes if held is not None else None,
            ),
        )

    async def reset_adapter(self, request: model_v1.ResetAdapterRequest) -> None:
        """Route an episode-end eviction to the route setup, then to the handler."""
        env_id = request.context.env_id if request.context is not None else ""
        async with self._lock:
            try:
                setup = self.handler.route_setup()
                if setup is not None:
                    await setup.reset_adapter(env_id, request.episode_ids)
                await self.handler.reset_adapter(env_id, request.episode_ids)
            except Exception as exc:
                raise self._wrap(exc, env_id, "model.reset_adapter") from exc

    async def release_adapter(
        self,
        request: model_v1.ReleaseAdapterRequest,
        timeout: float,  # noqa: ASYNC109
    ) -> None:
        """Forget the route (through the route setup), giving up after ``timeout`` seconds."""
        env_id = request.context.env_id if request.context is not None else ""
        self._routes.pop(env_id, None)
        setup = self.handler.route_setup()
        if setup is None:
            return
        with trio.move_on_after(timeout):
            try:
                await setup.release_adapter(env_id)
            except Exception as exc:
                raise self._wrap(exc, env_id, "model.release_adapter") from exc

    async def aclose(self) -> None:
        """Close the handler (runs the model's ``close`` once)."""
        await self.handler.close()


def _env_of(request: model_v1.PredictRequest) -> str:
    return request.context.env_id if request.context is not None else ""


class _Drained(NamedTuple):
    """What the handler reported after one grouped call."""

    user_ns: int
    adapter_ns: int
    held: HeldState | None


_NOT_CALLED = _Drained(0, 0, None)
"""No group decoded, so the handler was not called."""


def _all_failed(exc: Exception, count: int) -> list[PredictFrames | Error]:
    """A grouped call that raised fails every group of it with the same error."""
    return [exc if isinstance(exc, Error) else ModelError(str(exc))] * count
