"""Between model_v1 messages and the handler's Python types (shared by every serving path)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._errors import Error, ModelError
from ..protocol import model_v1, spaces_v1
from ..spaces import _codec
from ..spaces._spaces import Space
from ._handler import EpisodeRef, HistoryRow, ModelObservation, PredictFrames, RouteContract
from ._tree import find_nan

__all__ = [
    "encode_frames",
    "model_error_to_wire",
    "observation_from_request",
    "wire_error_to_model",
]


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
    seen: set[str] = set()
    episodes = []
    for lane, info in enumerate(infos):
        if not info.episode_id:
            raise _invalid(
                f"predict request lane {lane} for env {context.env_id!r} has no episode_id"
            )
        if info.episode_id in seen:
            raise _invalid(
                f"predict request for env {context.env_id!r} repeats episode id "
                f"{info.episode_id!r} (lane {lane})"
            )
        seen.add(info.episode_id)
        episodes.append(EpisodeRef(info.episode_id, info.seed))
    space = contract.observation_space
    if space is None:
        raise _invalid(f"env {context.env_id!r} has no observation space to decode with")
    if request.observation is None:
        raise _invalid(f"predict request for env {context.env_id!r}: observation absent")
    n = len(episodes)
    try:
        batch = _codec.decode_batch(space, request.observation.leaves, n)
        history = (
            ()
            if not request.history
            else tuple(
                HistoryRow(
                    observation=_codec.decode_lanes(
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
            f"model {model!r} cannot decode the observation for env {context.env_id!r}: {exc}"
        ) from exc
    return ModelObservation(
        observation=batch,
        env_id=context.env_id,
        session_id=context.session_id,
        request_id=context.request_id,
        episodes=tuple(episodes),
        step=request.step,
        history=history,
        observation_space=space,
        action_space=contract.action_space,
    )


def _bad_action(model: str, env_id: str) -> str:
    # Built only on failure: formatting it on every predict costs more than the check.
    return f"model {model!r} returned a bad action for env {env_id!r}"


def _encode_frame(
    space: Space, actions: Sequence[Any], *, model: str, env_id: str, frame: int
) -> spaces_v1.SpaceValue:
    nan = find_nan(space, actions)
    if nan is not None:
        lane, path = nan
        where = _bad_action(model, env_id)
        raise ModelError(
            f"{where} lane {lane}"
            + (f" (replay frame {frame})" if frame else "")
            + f": {path} holds NaN",
            lane=lane,
            operation="model.predict",
            code="INTERNAL",
        )
    try:
        return spaces_v1.SpaceValue(leaves=_codec.encode_lanes(space, actions))
    except Error as exc:
        failure: Error = exc
    where = _bad_action(model, env_id)
    # Find the first lane that fails on its own, so the error can name it.
    for lane, action in enumerate(actions):
        try:
            _codec.encode_lanes(space, [action])
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
    frames: PredictFrames, space: Space, n: int, *, model: str, env_id: str
) -> list[spaces_v1.SpaceValue]:
    """Frame 0 and every replay frame of a group, each checked and encoded as ``n`` lanes.

    Raises:
        ModelError: a frame with the wrong number of actions, or an action that does not
            fit the action space (wrong kind, shape, arity, key, an out-of-domain discrete
            value, a NaN); the message names the model, the env and the lane.
    """
    out = []
    for index, frame in enumerate([frames.actions, *frames.replay]):
        if len(frame) != n:
            what = "actions" if index == 0 else f"actions in replay frame {index}"
            raise ModelError(
                f"model {model!r} returned {len(frame)} {what} for {n} lanes of env {env_id!r}",
                operation="model.predict",
                code="INTERNAL",
            )
        out.append(_encode_frame(space, frame, model=model, env_id=env_id, frame=index))
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
