"""Builders shared by the model tests: routes, requests and observations."""

from __future__ import annotations

from typing import Any

import numpy as np

from trio_rlmesh.model import EpisodeRef, ModelObservation, RouteContract
from trio_rlmesh.protocol import model_v1, spaces_v1
from trio_rlmesh.spaces import Box, Discrete, encode_batch

OBS = Box.from_bounds(-10.0, 10.0, shape=(2,))
ACT_BOX = Box.from_bounds(-1.0, 1.0, shape=(2,))
ACT_DISCRETE = Discrete(3)

BOX_ROUTE = RouteContract("Box-v0", OBS, ACT_BOX)
DISCRETE_ROUTE = RouteContract("Disc-v0", OBS, ACT_DISCRETE)


def obs_batch(values: list[float]) -> np.ndarray[Any, Any]:
    """Lane i observes ``[v_i, v_i]``."""
    return np.array([[v, v] for v in values], dtype=np.float32)


def observation(
    env_id: str,
    values: list[float],
    *,
    seeds: list[int | None] | None = None,
    action_space: Any = ACT_BOX,
    ids: list[str] | None = None,
) -> ModelObservation:
    n = len(values)
    ids = ids or [f"{env_id}-ep{i}" for i in range(n)]
    seeds = seeds or [None] * n
    return ModelObservation(
        observation=obs_batch(values),
        env_id=env_id,
        session_id="s",
        request_id=f"{env_id}:predict:1",
        episodes=tuple(EpisodeRef(i, s) for i, s in zip(ids, seeds, strict=True)),
        observation_space=OBS,
        action_space=action_space,
    )


def predict_request(
    env_id: str,
    values: list[float],
    *,
    seeds: list[int | None] | None = None,
    ids: list[str] | None = None,
    request_id: str | None = None,
) -> model_v1.PredictRequest:
    n = len(values)
    ids = ids or [f"{env_id}-ep{i}" for i in range(n)]
    seeds = seeds or [None] * n
    return model_v1.PredictRequest(
        context=model_v1.AdapterContext(
            session_id="s", env_id=env_id, request_id=request_id or f"{env_id}:predict:1"
        ),
        observation=spaces_v1.SpaceValue(leaves=encode_batch(OBS, obs_batch(values), n)),
        episode_info=[
            model_v1.EpisodeInfo(episode_id=i, seed=s) for i, s in zip(ids, seeds, strict=True)
        ],
    )


BROKEN = ("request_id", "episodes", "observation")
"""What :func:`broken_request` can break."""


def broken_request(env_id: str, broken: str) -> model_v1.PredictRequest:
    """A one-lane predict request for ``env_id`` with one part broken (see :data:`BROKEN`):
    an empty request id, no episode, or an observation that does not decode."""
    request = predict_request(env_id, [1.0])
    if broken == "request_id":
        assert request.context is not None
        request.context.request_id = ""
    elif broken == "episodes":
        request.episode_info = []
    else:
        request.observation = spaces_v1.SpaceValue(leaves=[b"\x00"])
    return request


def route_spec(route: RouteContract) -> Any:
    """The wire ``EnvSpec`` of ``route`` (what a runtime sends in ResolveAdapter)."""
    from trio_rlmesh.protocol import core_v1, python_to_meta, space_to_spec

    return core_v1.EnvSpec(
        id=route.env_name,
        observation_space=space_to_spec(route.observation_space),
        action_space=space_to_spec(route.action_space),
        metadata=python_to_meta(route.metadata) if route.metadata else None,
    )


def resolve_request(
    route: RouteContract, env_id: str, *, horizon: int = 1, delivers_history: bool = True
) -> Any:
    """The ResolveAdapter request for ``route`` under ``env_id``."""
    from trio_rlmesh.runtime._internal import route_request

    return route_request(
        env_id, route_spec(route), execution_horizon=horizon, delivers_history=delivers_history
    )
