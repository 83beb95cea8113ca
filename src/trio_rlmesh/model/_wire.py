"""Between model_v1 messages and the handler's Python types (shared by every serving path)."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import attrs

from .._errors import Error, ModelError
from ..protocol import model_v1, spaces_v1
from ..protocol._internal import CarriedValue, carried_batch
from ..spaces import Space, decode_batch, decode_lanes, encode_lanes
from ..spaces._internal import carry_lanes
from ._handler import (
    EpisodeRef,
    HistoryRow,
    ModelObservation,
    PredictFrames,
    RouteContract,
    env_label,
)
from ._tree import find_nan

__all__ = [
    "encode_frames",
    "model_error_to_wire",
    "observation_from_request",
    "predict_refused",
    "wire_error_to_model",
]


def predict_refused(model: str, problem: str, env: tuple[str, str] | None = None) -> ModelError:
    """A predict request the model cannot serve, in the one wording every seat uses: it
    names the model and, when known, the env (its route id and name; see
    :func:`~trio_rlmesh.model._handler.env_label`). INTERNAL, not recoverable, as RLMesh's
    model server answers a request it cannot validate."""
    target = f"a predict request for {env_label(*env)}" if env else "a predict request"
    return ModelError(
        f"model {model!r} refused {target}: {problem}",
        recoverable=False,
        operation="model.predict",
        code="INTERNAL",
    )


def observation_from_request(
    request: model_v1.PredictRequest, contract: RouteContract, *, model: str = "model"
) -> ModelObservation:
    """Validate and decode one PredictRequest against its route's contract.

    The caller has found the route by the request's ``context.env_id`` (the model host
    checks the context and the route first).

    Raises:
        ModelError: an empty request_id; no, blank or repeated episode ids; an absent or
            undecodable observation (code ``INTERNAL``, not recoverable), naming the model
            and the env.
    """
    context = request.context
    assert context is not None
    env = (context.env_id, contract.env_name)
    if not context.request_id:
        raise predict_refused(model, "its request_id is empty", env)
    infos = request.episode_info
    if not infos:
        raise predict_refused(model, "it names no episode", env)
    episodes = _episodes(infos, model, env)
    space = contract.observation_space
    if space is None:
        raise predict_refused(model, "the env has no observation space to decode it with", env)
    if request.observation is None:
        raise predict_refused(model, "its observation is absent", env)
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
        raise predict_refused(model, f"its observation does not decode: {exc}", env) from exc
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


def _episodes(
    infos: Sequence[model_v1.EpisodeInfo], model: str, env: tuple[str, str]
) -> tuple[EpisodeRef, ...]:
    """A predict's validated lane episodes; the last request's when its rows are the same.

    A run's lanes keep their episodes for many steps, so most requests repeat the last.
    """
    ids = list(map(_episode_id, infos))
    seeds = list(map(_seed, infos))
    last = _Last.episodes  # one read: another thread may replace it, never change it
    if ids == last.ids and seeds == last.seeds:
        return last.refs
    if not all(ids) or len(set(ids)) != len(ids):
        _refuse_episode_ids(ids, model, env)
    refs = tuple(map(EpisodeRef, ids, seeds))
    _Last.episodes = _Episodes(ids, seeds, refs)
    return refs


def _refuse_episode_ids(ids: Sequence[str], model: str, env: tuple[str, str]) -> None:
    """Raise for the first lane with a blank or repeated episode id."""
    seen: set[str] = set()
    for lane, episode_id in enumerate(ids):
        if not episode_id:
            raise predict_refused(model, f"its lane {lane} has no episode_id", env)
        if episode_id in seen:
            raise predict_refused(model, f"it repeats episode id {episode_id!r} (lane {lane})", env)
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
