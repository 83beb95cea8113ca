"""A :class:`~trio_rlmesh.model.ModelHandler` as a :class:`~trio_rlmesh.runtime.RuntimeModel`.

The model host (:mod:`trio_rlmesh.transports._modelhost`, which the gRPC model server serves
through too) called directly: no serialization, the driver's PredictRequests decoded straight
into :class:`~trio_rlmesh.model.ModelObservation` groups, and the whole batch sent to ONE
``predict_grouped`` call (so a model with a batched corner runs one fused forward for every
lane waiting on it). A model therefore answers, refuses and words its errors here as it does
when served.

Unlike the reference adapter, every error keeps its ``recoverable`` flag (the reference's
default wrapping dropped it, so a recoverable model decline reached the caller as
permanent).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..._errors import Error
from ...adapters import Adapter
from ...model import ModelHandler
from ...protocol import model_v1
from ...runtime import ModelPrediction, RuntimeModel
from ...runtime._internal import ServingUserCode
from .._modelhost import ModelHost

__all__ = ["ModelHandlerRuntimeModel"]


class ModelHandlerRuntimeModel(RuntimeModel):
    """Drive a model handler (or any model object) in-process from the runtime driver.

    Resolve each route before its first predict (:meth:`resolve`, with the request
    :meth:`RuntimeSessionSpec.resolve_request
    <trio_rlmesh.runtime.RuntimeSessionSpec.resolve_request>` builds): as on a served
    model, a predict on a route that was not resolved fails. ``run_local`` and ``run``
    resolve for you.

    Args:
        handler: a :class:`~trio_rlmesh.model.ModelHandler`, or a model object that
            :func:`~trio_rlmesh.model.as_handler` accepts.
        name: how errors name the model (default: the handler's ``name`` or class).
        user_code: where a model object's code runs when this adapter wraps it with
            :func:`~trio_rlmesh.model.as_handler`: ``"auto"`` (the default: on a worker
            thread until its predicts prove quick, then inline until one is slow),
            ``"thread"`` (deadlines and cancellation can abandon a hung predict) or
            ``"inline"`` (on the trio thread: faster, but a blocking predict blocks the
            event loop). A handler passed in as is keeps its own choice.

    Example::

        model = ModelHandlerRuntimeModel(MyModel())
        await model.resolve(spec.resolve_request())
        report = await RuntimeDriver(spec, env, model).run()
    """

    def __init__(
        self,
        handler: ModelHandler | object,
        *,
        name: str | None = None,
        user_code: ServingUserCode | None = None,
    ) -> None:
        self._host = host = ModelHost.open(handler, name=name, user_code=user_code)
        self.handler: ModelHandler = host.handler
        self.name = host.name
        self._wants_history = False
        self._adapter: Adapter | None = None
        # A replaced predict may yield: only this class's own is known not to.
        self._inline_class = type(self).predict is ModelHandlerRuntimeModel.predict

    @property
    def wants_history(self) -> bool:
        return self._wants_history

    @property
    def fuses_predicts(self) -> bool:
        """Always true: ``predict_group`` is one ``predict_grouped`` call."""
        return True

    @property
    def carry_values(self) -> bool:
        """Answer actions as carried values, not encoded leaves: for an env in this
        process (:func:`~trio_rlmesh.transports.inprocess.link_in_process` sets it)."""
        return self._host.carry

    @carry_values.setter
    def carry_values(self, carry: bool) -> None:
        self._host.carry = carry

    async def resolve(
        self, request: model_v1.ResolveAdapterRequest
    ) -> model_v1.ResolveAdapterResponse:
        """Resolve the route before driving, as a served model does (the same checks, the
        same route setup call, the same refusals); sets :attr:`wants_history` from the
        answer.

        Raises:
            ModelError: the request was malformed or the model refused the route
                (``recoverable`` kept).
        """
        response = await self._host.resolve(request)
        self._wants_history = response.history is not None
        context = request.context
        self._adapter = self._host.adapter(context.env_id if context is not None else "")
        return response

    @property
    def adapter(self) -> Adapter | None:
        """The adapter the last resolved route applies (a spec'd model's), or ``None``."""
        return self._adapter

    def runs_inline(self, method: str) -> bool:
        """Whether a ``predict`` made now returns without yielding.

        True while the model host may call its handler on the trio thread (a
        :class:`~trio_rlmesh.model.ModelEngine` with ``user_code="inline"``, or ``"auto"``
        while its predicts run inline; loaded and open; no eviction holding it) and this
        class's :meth:`predict` is not replaced. Otherwise (``user_code="thread"``, or
        ``"auto"`` while predicts run on the thread) the predict must run where a deadline
        can abandon it.
        """
        return (
            method == "predict"
            and self._inline_class
            and self._host.runs_inline
            and "predict" not in self.__dict__
        )

    async def predict(self, request: model_v1.PredictRequest) -> ModelPrediction:
        plan = await self._host.predict((request,))
        (result,) = plan.results
        if isinstance(result, Error):
            raise result
        return ModelPrediction(result, plan.timings())

    async def predict_group(
        self, requests: Sequence[model_v1.PredictRequest]
    ) -> list[ModelPrediction | Error]:
        plan = await self._host.predict(requests)
        timings = plan.timings()
        return [
            result if isinstance(result, Error) else ModelPrediction(result, timings)
            for result in plan.results
        ]

    async def reset_adapter(self, request: model_v1.ResetAdapterRequest) -> None:
        """Route an episode-end eviction to the route setup, then to the handler."""
        await self._host.reset(request)

    async def release_adapter(
        self,
        request: model_v1.ReleaseAdapterRequest,
        timeout: float,
    ) -> None:
        """Forget the route (through the route setup); the caller bounds the call (the
        driver by ``timeout``), so there is no second timer here."""
        await self._host.release(request)

    async def aclose(self) -> None:
        """Close the handler (runs the model's ``close`` once)."""
        await self.handler.close()
