"""Between model_v1 messages and the handler's Python types (shared by every serving path)."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import attrs

from .._errors import Error, ModelError
from ..protocol import SUPPORTED_WORKFLOW_EDITIONS, WORKFLOW_EDITION, model_v1, spaces_v1
from ..protocol._internal import CarriedValue, carried_batch
from ..spaces import Space, decode_batch, decode_lanes, encode_lanes
from ..spaces._internal import carry_lanes
from ._handler import (
    EpisodeRef,
    HistoryRow,
    ModelHandler,
    ModelObservation,
    PredictFrames,
    ResolveOptions,
    RouteContract,
    env_label,
)
from ._tree import find_nan

__all__ = [
    "ResolvedRoute",
    "encode_frames",
    "model_error_to_wire",
    "observation_from_request",
    "resolve_route",
    "route_request",
    "wire_error_to_model",
]


def _refused(message: str) -> ModelError:
    return ModelError(
        message, recoverable=False, operation="model.resolve_adapter", code="INVALID_REQUEST"
    )


@attrs.frozen
class ResolvedRoute:
    """A route a handler accepted: the answer to send, and what predicts will need."""

    response: model_v1.ResolveAdapterResponse
    contract: RouteContract
    history: bool
    """Whether predicts on this route carry observation-history rows."""


def route_request(
    env_id: str,
    env_spec: Any,
    *,
    session_id: str = "",
    workflow_edition: str = WORKFLOW_EDITION,
    execution_horizon: int = 1,
    delivers_history: bool = True,
) -> model_v1.ResolveAdapterRequest:
    """The ResolveAdapter request a runtime sends before driving ``env_id`` (request id
    ``<env_id>:resolve_adapter``, as the reference's runtime names it)."""
    return model_v1.ResolveAdapterRequest(
        context=model_v1.AdapterContext(
            session_id=session_id, env_id=env_id, request_id=f"{env_id}:resolve_adapter"
        ),
        env_spec=env_spec,
        selected_workflow_edition=workflow_edition,
        execution_horizon=max(1, execution_horizon),
        delivers_history=delivers_history,
    )


async def resolve_route(
    handler: ModelHandler, request: model_v1.ResolveAdapterRequest, *, model: str
) -> ResolvedRoute:
    """Resolve one route on ``handler``: the one rule for a served and an in-process model.

    Validates the request as the reference's model server does (context, env id, env spec,
    the pinned workflow edition), builds the :class:`RouteContract`, asks the handler's
    route setup (if any) with the execution horizon and the offer of history, and refuses a
    model that needs history the runtime does not deliver.

    Raises:
        ModelError: the request is malformed (``INVALID_REQUEST``) or the model refused the
            route (its own error, ``recoverable`` kept), each naming the model and env.
    """
    context = request.context
    if context is None:
        raise _refused("resolve_adapter missing context")
    env_id = context.env_id
    if not env_id:
        raise _refused("resolve_adapter missing env_id")
    if request.env_spec is None:
        raise _refused("resolve_adapter missing env_spec")
    pin = request.selected_workflow_edition.strip()
    if pin and pin not in SUPPORTED_WORKFLOW_EDITIONS:
        raise _refused(
            f"selected workflow edition {pin} is not supported: this model endpoint does "
            f"not implement it (supported: {', '.join(SUPPORTED_WORKFLOW_EDITIONS)})"
        )
    if not pin and len(SUPPORTED_WORKFLOW_EDITIONS) != 1:
        raise _refused("resolve_adapter must pin a workflow edition")
    try:
        contract = RouteContract.from_env_spec(request.env_spec)
    except Error as exc:
        raise _refused(f"invalid env spec: {exc}") from exc
    horizon = max(1, request.execution_horizon)
    setup = handler.route_setup()
    needs = None
    if setup is not None:
        try:
            needs = await setup.resolve_adapter(
                env_id, contract, ResolveOptions(horizon, request.delivers_history)
            )
        except Exception as exc:
            recoverable = exc.recoverable if isinstance(exc, Error) else False
            detail = exc.message if isinstance(exc, Error) else f"{type(exc).__name__}: {exc}"
            error = ModelError(
                f"model {model!r} refused the route for env {env_id!r}: {detail}",
                recoverable=recoverable,
                operation="model.resolve_adapter",
                code=exc.code if isinstance(exc, Error) and exc.code else "INTERNAL",
            )
            raise error from exc
    history = needs is not None and needs.history is not None
    if history and not request.delivers_history:
        raise ModelError(
            f"model {model!r} needs observation history, but the runtime did not offer it "
            f"(delivers_history) at execution_horizon={horizon}",
            operation="model.resolve_adapter",
            code="INTERNAL",
        )
    response = model_v1.ResolveAdapterResponse()
    if needs is not None and needs.native_chunk is not None:
        response.native_chunk = needs.native_chunk
    if history:
        assert needs is not None
        assert needs.history is not None
        response.history = model_v1.ObservationHistoryNeeds(keys=list(needs.history))
    return ResolvedRoute(response, contract, history)


def _invalid(message: str, *, env_id: str | None = None) -> ModelError:
    return ModelError(message, recoverable=False, operation="model.predict", code="INTERNAL")


def observation_from_request(
    request: model_v1.PredictRequest, contract: RouteContract, *, model: str = "model"
) -> ModelObservation:
    """Validate and decode one PredictRequest against its route's contract.

    Raises:
        ModelError: a missing context, env_id or request_id; no, blank or repeated episode
            ids; an absent or undecodable observation (code ``INTERNAL``, not recoverable).
    """
    context = request.context
    if context is None:
        raise _invalid("predict request has no context")
    if not context.env_id:
        raise _invalid("predict request context has an empty env_id")
    if not context.request_id:
        raise _invalid(f"predict request for env {context.env_id!r} has an empty request_id")
    infos = request.episode_info
    if not infos:
        raise _invalid(f"predict request for env {context.env_id!r} names no episode")
    episodes = _episodes(infos, context.env_id)
    space = contract.observation_space
    if space is None:
        raise _invalid(f"env {context.env_id!r} has no observation space to decode with")
    if request.observation is None:
        raise _invalid(f"predict request for env {context.env_id!r}: observation absent")
    n = len(episodes)
    try:
        batch = carried_batch(request.observation, space, n)
        if batch is None:
            batch = decode_batch(space, request.observation.leaves, n)
        history = (
            ()
            if not request.history
            else tuple(
                HistoryRow(
                    observation=decode_lanes(
                        space, row.observation.leaves if row.observation else [], 1
                    )[0],
                    episode=(
                        EpisodeRef(row.episode.episode_id, row.episode.seed)
                        if row.episode is not None
                        else None
                    ),
                    step=row.step,
                )
                for row in request.history
            )
        )
    except Error as exc:
        raise _invalid(
            f"model {model!r} cannot decode the observation for "
            f"{env_label(context.env_id, contract.env_name)}: {exc}"
        ) from exc
    return ModelObservation(
        observation=batch,
        env_id=context.env_id,
        session_id=context.session_id,
        request_id=context.request_id,
        episodes=episodes,
        step=request.step,
        history=history,
        observation_space=space,
        action_space=contract.action_space,
        env_name=contract.env_name,
    )


_episode_id = operator.attrgetter("episode_id")
_seed = operator.attrgetter("seed")


@attrs.frozen
class _Episodes:
    ids: list[str]
    seeds: list[int | None]
    refs: tuple[EpisodeRef, ...]


class _Last:
    """The episodes of the last valid predict request decoded (any route, any thread)."""

    episodes = _Episodes([], [], ())


def _episodes(infos: Sequence[model_v1.EpisodeInfo], env_id: str) -> tuple[EpisodeRef, ...]:
    """A predict's validated lane episodes; the last request's when its rows are the same.

    A run's lanes keep their episodes for many steps, so most requests repeat the last.
    """
    ids = list(map(_episode_id, infos))
    seeds = list(map(_seed, infos))
    last = _Last.episodes  # one read: another thread may replace it, never change it
    if ids == last.ids and seeds == last.seeds:
        return last.refs
    if not all(ids) or len(set(ids)) != len(ids):
        _refuse_episode_ids(ids, env_id)
    refs = tuple(map(EpisodeRef, ids, seeds))
    _Last.episodes = _Episodes(ids, seeds, refs)
    return refs


def _refuse_episode_ids(ids: Sequence[str], env_id: str) -> None:
    """Raise for the first lane with a blank or repeated episode id."""
    seen: set[str] = set()
    for lane, episode_id in enumerate(ids):
        if not episode_id:
            raise _invalid(f"predict request lane {lane} for env {env_id!r} has no episode_id")
        if episode_id in seen:
            raise _invalid(
                f"predict request for env {env_id!r} repeats episode id "
                f"{episode_id!r} (lane {lane})"
            )
        seen.add(episode_id)


def _bad_action(model: str, env: tuple[str, str]) -> str:
    # Built only on failure: formatting it on every predict costs more than the check.
    return f"model {model!r} returned a bad action for {env_label(*env)}"


def _encode_frame(
    space: Space,
    actions: Sequence[Any],
    *,
    model: str,
    env: tuple[str, str],
    frame: int,
    carry: bool,
) -> spaces_v1.SpaceValue:
    nan = find_nan(space, actions)
    if nan is not None:
        lane, path = nan
        where = _bad_action(model, env)
        raise ModelError(
            f"{where} lane {lane}"
            + (f" (replay frame {frame})" if frame else "")
            + f": {path} holds NaN",
            lane=lane,
            operation="model.predict",
            code="INTERNAL",
        )
    try:
        if carry:
            return CarriedValue(space, carry_lanes(space, actions), len(actions))
        return spaces_v1.SpaceValue(leaves=encode_lanes(space, actions))
    except Error as exc:
        failure: Error = exc
    where = _bad_action(model, env)
    # Find the first lane that fails on its own, so the error can name it.
    for lane, action in enumerate(actions):
        try:
            encode_lanes(space, [action])
        except Error as exc:
            raise ModelError(
                f"{where} lane {lane}"
                + (f" (replay frame {frame})" if frame else "")
                + f": {exc}; the action space is {space!r}",
                lane=lane,
                operation="model.predict",
                code="INTERNAL",
            ) from exc
    raise ModelError(f"{where}: {failure}", operation="model.predict", code="INTERNAL")


def encode_frames(
    frames: PredictFrames,
    space: Space,
    n: int,
    *,
    model: str,
    env: tuple[str, str],
    carry: bool = False,
) -> list[spaces_v1.SpaceValue]:
    """Frame 0 and every replay frame of a group, each checked and encoded as ``n`` lanes
    (with ``carry``, checked and carried instead: a
    :class:`~trio_rlmesh.protocol._carried.CarriedValue` for an env in this process).

    Raises:
        ModelError: a frame with the wrong number of actions, or an action that does not
            fit the action space (wrong kind, shape, arity, key, an out-of-domain discrete
            value, a NaN); the message names the model, the env (``env`` is its route id
            and name, worded by :func:`~trio_rlmesh.model._handler.env_label` only on
            failure) and the lane.
    """
    out = []
    for index, frame in enumerate([frames.actions, *frames.replay]):
        if len(frame) != n:
            what = "actions" if index == 0 else f"actions in replay frame {index}"
            raise ModelError(
                f"model {model!r} returned {len(frame)} {what} for {n} lanes of {env_label(*env)}",
                operation="model.predict",
                code="INTERNAL",
            )
        out.append(_encode_frame(space, frame, model=model, env=env, frame=index, carry=carry))
    return out


_CODE_NAMES = {code.name: code for code in model_v1.ModelErrorCode}


def model_error_to_wire(error: Error) -> model_v1.ModelError:
    """An error as the ModelError a served endpoint sends (code from ``error.code``)."""
    code = _CODE_NAMES.get(error.code or "", model_v1.ModelErrorCode.INTERNAL)
    prefix = "model error" if isinstance(error, ModelError) else "internal error"
    return model_v1.ModelError(
        code=code, message=f"{prefix}: {error.message}", is_recoverable=error.recoverable
    )


def wire_error_to_model(error: model_v1.ModelError, *, operation: str) -> ModelError:
    """A received ModelError as this package's :class:`~trio_rlmesh.ModelError`."""
    code = model_v1.ModelErrorCode(error.code)
    return ModelError(
        error.message or f"model endpoint answered {code.name}",
        recoverable=error.is_recoverable,
        operation=operation,
        code=code.name,
    )
