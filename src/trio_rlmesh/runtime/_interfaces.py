"""The seams the driver talks through: :class:`RuntimeEnv` and :class:`RuntimeModel`.

Both exchange protocol messages (like the reference), so an in-process pair skips
serialization entirely, plus the endpoint timings the far side reported. Tests and
users swap in any object that satisfies these Protocols (see ``trio_rlmesh.testing``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import attrs

from .._errors import Error
from ..protocol import env_v1, model_v1

__all__ = [
    "EndpointTimings",
    "EnvResetResult",
    "EnvStepResult",
    "ModelPrediction",
    "RuntimeEnv",
    "RuntimeModel",
]


@attrs.frozen
class EndpointTimings:
    """What the endpoint said about its own handling of one request (all optional).

    Durations are nanoseconds. A gRPC transport fills them from the JoinResponse
    timing fields; an in-process adapter measures them itself.
    """

    total_ns: int | None = None
    """Whole handling time on the endpoint (``endpoint_total_ns``)."""
    decode_ns: int | None = None
    """Time decoding the request."""
    user_ns: int | None = None
    """Time inside user code (the env's reset/step, the model's predict)."""
    encode_ns: int | None = None
    """Time encoding the answer."""
    queue_ns: int | None = None
    """Wait before handling began (outside ``total_ns``)."""
    adapter_ns: int | None = None
    """Adapter work inside ``user_ns`` (model side)."""
    held_episodes: int | None = None
    """Per-episode states the model holds after this request."""
    held_state_bytes: int | None = None
    """Bytes of per-episode state the model holds after this request."""

    @classmethod
    def from_env_response(cls, response: env_v1.JoinResponse) -> EndpointTimings:
        """Read the timing fields of an env JoinResponse."""
        return cls(
            total_ns=response.endpoint_total_ns,
            decode_ns=response.decode_ns,
            user_ns=response.user_ns,
            encode_ns=response.encode_ns,
            queue_ns=response.queue_ns,
        )

    @classmethod
    def from_model_response(cls, response: model_v1.JoinResponse) -> EndpointTimings:
        """Read the timing and held-state fields of a model JoinResponse."""
        return cls(
            total_ns=response.endpoint_total_ns,
            decode_ns=response.decode_ns,
            user_ns=response.user_ns,
            encode_ns=response.encode_ns,
            queue_ns=response.queue_ns,
            adapter_ns=response.adapter_ns,
            held_episodes=response.held_episodes,
            held_state_bytes=response.held_state_bytes,
        )


NO_TIMINGS = EndpointTimings()


@attrs.frozen
class EnvResetResult:
    """A reset's answer plus what the transport measured."""

    response: env_v1.ResetResponse
    timings: EndpointTimings = NO_TIMINGS
    request_bytes: int | None = None
    """Encoded request size; ``None`` on paths that never serialize."""
    response_bytes: int | None = None


@attrs.frozen
class EnvStepResult:
    """A step's answer plus what the transport measured."""

    response: env_v1.StepResponse
    timings: EndpointTimings = NO_TIMINGS
    request_bytes: int | None = None
    response_bytes: int | None = None


@attrs.frozen
class ModelPrediction:
    """A predict's answer plus what the transport measured.

    ``response.actions[0]`` is this step's action batch; ``actions[1:]`` are frames
    to replay open-loop on the following steps.
    """

    response: model_v1.PredictResponse
    timings: EndpointTimings = NO_TIMINGS
    group_size: int | None = None
    """How many groups (lanes or envs) were fused into the forward that produced this."""
    request_bytes: int | None = None
    response_bytes: int | None = None


@runtime_checkable
class RuntimeEnv(Protocol):
    """An env endpoint the driver can reset, step, render and close.

    Implementations raise :class:`~trio_rlmesh.EnvError` (or
    :class:`~trio_rlmesh.TransportError`, :class:`~trio_rlmesh.OperationTimeout`)
    with ``recoverable`` set; the driver adds the step and lane context.
    A lane endpoint (``subset_step``) accepts concurrent calls for different lanes,
    each naming its lane in ``env_indices``.

    These are all the members the driver uses. Three have defaults, which a class gets by
    subclassing ``RuntimeEnv`` explicitly (a class that does not must define them):
    :attr:`enforces_deadlines` (``False``), :meth:`runs_inline` (never) and
    :meth:`render` (no render call: ``render=True`` is refused up front).

    Example::

        class MyEnv(RuntimeEnv):
            async def reset(self, request): ...
            async def step(self, request): ...
            async def close(self, timeout): ...
    """

    enforces_deadlines: bool = False
    """``True`` says the endpoint itself ends every call by its deadline, the request's
    ``timeout_ms`` counted from the call's start, raising
    :class:`~trio_rlmesh.OperationTimeout` when it runs out (the gRPC env client, whose
    watchdog is on its own I/O). The driver then opens no scope of its own over the call;
    otherwise (fakes, in-process adapters) the driver is the enforcer and cuts the call off
    exactly at its limit."""

    def runs_inline(self, method: str) -> bool:
        """Whether a call of ``method`` (``"reset"`` or ``"step"``) made now returns without
        yielding to the event loop.

        Read just before each call. ``True`` lets the driver skip the cancel scope that
        bounds the call (entering one costs more than a Gymnasium step): a call that does
        not yield cannot be interrupted anyway, and one that answers after its limit is a
        timeout all the same. Answer ``True`` only when sure: a call that yields after all
        then runs without a bound. The default answers ``False``.
        """
        return False

    async def render(self, request: env_v1.RenderRequest) -> env_v1.RenderResponse:
        """The env's picture of one lane (``request.env_indices``, lane 0 when empty) as a
        PNG frame, or a response without a frame when it has none.

        The driver calls it only when asked to render (``RuntimeDriver(render=True)``, e.g.
        to record videos). The default is "no render call": a class that does not define
        its own is refused ``render=True`` when the driver is made.
        """
        raise NotImplementedError(f"{type(self).__name__} has no render call")

    async def reset(self, request: env_v1.ResetRequest) -> EnvResetResult:
        """Reset the lanes in ``request.env_indices`` (all when empty)."""
        ...

    async def step(self, request: env_v1.StepRequest) -> EnvStepResult:
        """Step the lanes in ``request.env_indices`` (all when empty)."""
        ...

    async def close(self, timeout: float) -> None:
        """Close the env, giving up after ``timeout`` seconds."""
        ...


@runtime_checkable
class RuntimeModel(Protocol):
    """A model endpoint the driver can ask for actions.

    ``predict_group`` answers a list of requests 1:1 and in order; a failed group is
    returned as its :class:`~trio_rlmesh.Error` in place, never raised, so one bad
    group does not sink the others.

    These are all the members the driver uses; :meth:`runs_inline` has a default
    (never), which a class gets by subclassing ``RuntimeModel`` explicitly.
    """

    def runs_inline(self, method: str) -> bool:
        """Whether a call of ``method`` (``"predict"``) made now returns without yielding
        to the event loop; see :meth:`RuntimeEnv.runs_inline`. The default answers
        ``False``."""
        return False

    @property
    def wants_history(self) -> bool:
        """Whether the route asked for observation-history rows on each predict."""
        ...

    @property
    def fuses_predicts(self) -> bool:
        """Whether ``predict_group`` runs one fused forward (so the driver should batch lanes)."""
        ...

    async def resolve(
        self, request: model_v1.ResolveAdapterRequest
    ) -> model_v1.ResolveAdapterResponse:
        """Resolve the route before the first predict (the env's spec, the execution
        horizon, the offer of history); afterwards :attr:`wants_history` holds the answer.

        Raises :class:`~trio_rlmesh.ModelError` when the model refuses the route.
        """
        ...

    async def predict(self, request: model_v1.PredictRequest) -> ModelPrediction:
        """Answer one predict request."""
        ...

    async def predict_group(
        self, requests: Sequence[model_v1.PredictRequest]
    ) -> list[ModelPrediction | Error]:
        """Answer several predict requests, results aligned with ``requests``."""
        ...

    async def reset_adapter(self, request: model_v1.ResetAdapterRequest) -> None:
        """Drop per-episode state for the finished episodes named in ``request``."""
        ...

    async def release_adapter(
        self, request: model_v1.ReleaseAdapterRequest, timeout: float
    ) -> None:
        """Release the route at session end; the driver bounds the call by ``timeout``
        seconds (an endpoint needs no timer of its own)."""
        ...
