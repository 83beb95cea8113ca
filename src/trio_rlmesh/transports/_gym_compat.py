"""Old Gym API results, normalised exactly as RLMesh 0.1.0's env server normalises them.

One place for both env paths: the env host (``transports._envhost``), which serves the
gRPC env server and the in-process env alike, passes every ``reset``/``step`` result
through these functions, so an env written for the old Gym API (before Gym 0.26) works
the same whichever way it is run, and the same as under ``rlmesh.EnvServer``.

The rules, as ``rlmesh.EnvServer`` applies them (pinned by
``tests/interop/test_env_server_interop.py``):

* ``reset`` may return the observation alone: the info is then ``{}``. A result is
  ``(obs, info)`` when it is a 2-tuple whose second item is a mapping, except when the
  observation space is itself a 2-entry ``Tuple`` and the first item is not a pair
  (then the 2-tuple is a bare observation).
* ``step`` may return the old 4-tuple ``(obs, reward, done, info)``; this is Gym 0.26's
  ``step_api_compatibility`` rule, without removing the key from ``info``:

  - one env: ``truncated = done and info["TimeLimit.truncated"]`` (missing: false),
    ``terminated = done and not truncated``;
  - a vector env: ``truncated = info["TimeLimit.truncated"]`` per lane (missing: all
    false; the ``_TimeLimit.truncated`` mask is not read, and a lane is truncated even
    when its ``done`` is false), ``terminated = done & ~truncated``; the info must be a
    dict of per-lane arrays (a list of per-lane dicts is refused, as RLMesh does).

* any other length is a ``ValueError``; a 5-tuple passes through unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["TIME_LIMIT_TRUNCATED", "normalize_reset", "normalize_step"]

TIME_LIMIT_TRUNCATED = "TimeLimit.truncated"
"""The info key old Gym's ``TimeLimit`` wrapper set when it cut an episode short."""


def _tuple_arity(space: Any) -> int | None:
    """The number of entries of a ``Tuple`` observation space (Gymnasium's or ours)."""
    inner = getattr(space, "spaces", None)
    if isinstance(inner, (list, tuple)):
        return len(inner)
    return None


def normalize_reset(result: Any, observation_space: Any = None) -> tuple[Any, Any]:
    """``(obs, info)`` from what an env's ``reset`` returned (see the module docstring).

    Args:
        result: the return value of ``env.reset(...)``.
        observation_space: the env's ``observation_space`` (Gymnasium's or ours); only
            used to tell a bare 2-entry ``Tuple`` observation from ``(obs, info)``.
    """
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], Mapping):
        head = result[0]
        head_is_pair = isinstance(head, tuple) and len(head) == 2
        if _tuple_arity(observation_space) == 2 and not head_is_pair:
            return result, {}
        return head, result[1]
    return result, {}


def normalize_step(result: Any, *, vector: bool) -> Sequence[Any]:
    """``(obs, reward, terminated, truncated, info)`` from what ``step`` returned.

    Args:
        result: the return value of ``env.step(action)``: the Gymnasium 5-tuple (returned
            as it is) or the old Gym 4-tuple.
        vector: whether the env is a vector env (per-lane ``done`` and info arrays).

    Raises:
        ValueError: the result is not a 4- or 5-tuple.
        TypeError: an old vector env's info is not a mapping.
    """
    try:
        size = len(result)
    except TypeError:
        raise ValueError(
            f"env.step() must return a 4- or 5-tuple, got {type(result).__name__}"
        ) from None
    if size == 5:
        return result  # type: ignore[no-any-return]
    if size != 4:
        raise ValueError(f"env.step() must return a 4- or 5-tuple, got a {size}-element result")
    obs, reward, done, info = result
    if not vector:
        limited = isinstance(info, Mapping) and bool(info.get(TIME_LIMIT_TRUNCATED, False))
        ended = bool(done)
        return obs, reward, ended and not limited, ended and limited, info
    if info is not None and not isinstance(info, Mapping):
        raise TypeError(
            "an old Gym vector env's step info must be a dict of per-lane arrays, got "
            f"{type(info).__name__} (a list of per-lane dicts is not supported)"
        )
    dones = np.asarray(done, dtype=bool)
    flags = (info or {}).get(TIME_LIMIT_TRUNCATED)
    if flags is None:
        truncated = np.zeros(dones.shape, dtype=bool)
    else:
        truncated = np.broadcast_to(np.asarray(flags, dtype=bool), dones.shape).copy()
    return obs, reward, dones & ~truncated, truncated, info
