"""Conformance checks any :class:`RuntimeEnv` / :class:`RuntimeModel` implementation can run.

Each check drives the implementation through the calls the driver makes, with the
shapes the driver sends, and raises :class:`ConformanceError` naming the first thing
that differs from what the driver needs. Every call is bounded by ``call_timeout``; a call
the implementation's ``runs_inline`` announced must not yield at all.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import numpy as np
import trio

from .. import spaces
from .._errors import CodecError, Error
from ..protocol import core_v1, env_v1, model_v1, spaces_v1, spec_to_space
from ..protocol._internal import DEFAULT_ENV_TIMEOUT_MS
from ..runtime import EnvResetResult, EnvStepResult, ModelPrediction, RuntimeEnv, RuntimeModel
from ..runtime._internal import mint_uuid7, route_request

__all__ = ["ConformanceError", "check_runtime_env", "check_runtime_model"]

_T = TypeVar("_T")


class ConformanceError(Error, AssertionError):
    """An implementation does something the driver cannot work with.

    Also an :class:`AssertionError`, so a test runner reports it as a failed check.
    """


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConformanceError(message)


async def _bounded(
    what: str, seconds: float, call: Callable[[], Awaitable[_T]], *, inline: bool = False
) -> _T:
    """``call()`` within ``seconds``; with ``inline`` (the endpoint's ``runs_inline`` said
    so), to its end without yielding once, as the driver then relies on."""
    if not inline:
        with trio.move_on_after(seconds):
            return await call()
        raise ConformanceError(f"{what} did not answer within {seconds:g}s")
    coroutine = call().__await__()
    try:
        coroutine.send(None)
    except StopIteration as done:
        result: _T = done.value
        return result
    # Dropped where it yielded: the check has failed whatever the call would have done.
    with contextlib.suppress(BaseException):
        coroutine.close()
    raise ConformanceError(
        f"{what} yielded to the event loop although runs_inline said it would not: answer "
        "False from runs_inline for a call that may wait"
    )


def _inline(endpoint: RuntimeEnv | RuntimeModel, method: str) -> bool:
    answer = endpoint.runs_inline(method)
    _require(isinstance(answer, bool), f"runs_inline({method!r}) must answer a bool")
    return answer


def _spaces(contract: core_v1.EnvContract) -> tuple[spaces_v1.SpaceSpec, spaces_v1.SpaceSpec]:
    spec = contract.spec
    _require(spec is not None, "the env contract has no spec")
    assert spec is not None
    _require(spec.observation_space is not None, "the env contract has no observation_space")
    _require(spec.action_space is not None, "the env contract has no action_space")
    assert spec.observation_space is not None
    assert spec.action_space is not None
    return spec.observation_space, spec.action_space


def _check_value(
    what: str, value: spaces_v1.SpaceValue | None, space: spaces_v1.SpaceSpec, lanes: int
) -> None:
    _require(value is not None, f"{what} carries no value")
    assert value is not None
    # The codec is the one owner of the value layout: a value it decodes has the leaves,
    # strides and framing the driver needs.
    try:
        spaces.decode_batch(spec_to_space(space), value.leaves, lanes)
    except CodecError as exc:
        raise ConformanceError(f"{what} is not a {lanes}-lane value of its space: {exc}") from exc


def _filler(space: spaces.Space) -> Any:
    """The simplest value of ``space`` for one lane: zeros within the bounds, a Discrete's
    ``start``, the shortest Text."""
    if isinstance(space, spaces.Dict):
        return {key: _filler(child) for key, child in space.entries}
    if isinstance(space, spaces.Tuple):
        return tuple(_filler(child) for child in space.spaces)
    if isinstance(space, spaces.Box):
        return np.clip(np.zeros_like(space.low), space.low, space.high)
    if isinstance(space, spaces.Discrete):
        return space.start
    if isinstance(space, (spaces.MultiBinary, spaces.MultiDiscrete)):
        return np.zeros(space.shape, dtype=space.dtype.numpy_dtype)
    assert isinstance(space, spaces.Text)
    return (space.charset[:1] or "a") * space.min_length


def _simplest_leaves(space: spaces_v1.SpaceSpec, lanes: int) -> list[bytes]:
    """A batched value of ``lanes`` lanes, each the simplest value of ``space``."""
    decoded = spec_to_space(space)
    return spaces.encode_lanes(decoded, [_filler(decoded)] * lanes)


async def check_runtime_env(
    env: RuntimeEnv,
    contract: core_v1.EnvContract,
    *,
    action: Sequence[bytes] | None = None,
    subset_step: bool = False,
    call_timeout: float = 10.0,
) -> None:
    """Reset, step and close ``env`` the way the driver does; raise on the first deviation.

    Args:
        env: the implementation under test (it is closed at the end).
        contract: the contract its handshake returned.
        action: leaves of a valid action batch over every lane; by default an all-zero
            batch (a Discrete leaf holds its ``start``).
        subset_step: also step and reset the last lane on its own, as for a lane endpoint.
        call_timeout: bound on each call, in seconds.

    >>> from trio_rlmesh.testing import FakeEnv
    >>> env = FakeEnv()
    >>> trio.run(check_runtime_env, env, env.contract)
    """
    _require(
        isinstance(env, RuntimeEnv),
        "not a RuntimeEnv: reset, step, close, render, runs_inline and enforces_deadlines are "
        "required (subclass RuntimeEnv to get the defaults of the last three)",
    )
    _require(isinstance(env.enforces_deadlines, bool), "enforces_deadlines must be a bool")
    observation_space, action_space = _spaces(contract)
    lanes = max(1, contract.num_envs)
    ids = [mint_uuid7() for _ in range(lanes)]
    reset = await _bounded(
        "env.reset",
        call_timeout,
        lambda: env.reset(
            env_v1.ResetRequest(timeout_ms=DEFAULT_ENV_TIMEOUT_MS, episode_ids=list(ids))
        ),
        inline=_inline(env, "reset"),
    )
    _require(isinstance(reset, EnvResetResult), "env.reset must return an EnvResetResult")
    _check_value("the reset observation", reset.response.observation, observation_space, lanes)

    leaves = list(action) if action is not None else _simplest_leaves(action_space, lanes)
    step = await _bounded(
        "env.step",
        call_timeout,
        lambda: env.step(
            env_v1.StepRequest(
                action=spaces_v1.SpaceValue(leaves=leaves),
                timeout_ms=DEFAULT_ENV_TIMEOUT_MS,
                episode_ids=list(ids),
            )
        ),
        inline=_inline(env, "step"),
    )
    _require(isinstance(step, EnvStepResult), "env.step must return an EnvStepResult")
    response = step.response
    _check_value("the step observation", response.observation, observation_space, lanes)
    _require(
        len(response.rewards) in (0, lanes),
        f"env.step returned {len(response.rewards)} rewards for {lanes} lane(s)",
    )
    for name in ("terminated_mask", "truncated_mask"):
        mask = getattr(response, name)
        _require(len(mask) in (0, lanes), f"{name} is {len(mask)} bytes for {lanes} lane(s)")
    for meta in response.completed_episodes:
        _require(meta.env_index < lanes, f"a completion names lane {meta.env_index} of {lanes}")
        _require(
            meta.episode_id in ("", *ids),
            f"a completion names episode {meta.episode_id!r}, which the runtime never pushed",
        )

    if subset_step and lanes > 1:
        last = lanes - 1
        one = _simplest_leaves(action_space, 1) if action is None else None
        if one is not None:
            lane_reset = await _bounded(
                "a one-lane env.reset",
                call_timeout,
                lambda: env.reset(
                    env_v1.ResetRequest(env_indices=[last], episode_ids=[mint_uuid7()])
                ),
            )
            _check_value(
                "a one-lane reset observation",
                lane_reset.response.observation,
                observation_space,
                1,
            )
            lane_step = await _bounded(
                "a one-lane env.step",
                call_timeout,
                lambda: env.step(
                    env_v1.StepRequest(action=spaces_v1.SpaceValue(leaves=one), env_indices=[last])
                ),
            )
            _check_value(
                "a one-lane step observation",
                lane_step.response.observation,
                observation_space,
                1,
            )
            _require(
                len(lane_step.response.rewards) <= lanes,
                "a one-lane step returned more rewards than lanes",
            )
    if contract.render_mode and type(env).render is not RuntimeEnv.render:
        rendered = await _bounded(
            "env.render",
            call_timeout,
            lambda: env.render(
                env_v1.RenderRequest(env_indices=[0], timeout_ms=DEFAULT_ENV_TIMEOUT_MS)
            ),
        )
        _require(
            isinstance(rendered, env_v1.RenderResponse), "env.render must answer a RenderResponse"
        )
    await _bounded("env.close", call_timeout, lambda: env.close(call_timeout))


async def check_runtime_model(
    model: RuntimeModel,
    contract: core_v1.EnvContract,
    *,
    lanes: int = 1,
    call_timeout: float = 10.0,
) -> None:
    """Resolve, predict, group-predict, evict and release the way a run does (the route
    resolves before the driver's first predict); raise on a deviation.

    Args:
        model: the implementation under test (its route ``conformance-env`` is resolved
            first and released at the end).
        contract: the env contract the model serves.
        lanes: lanes per predict request.
        call_timeout: bound on each call, in seconds.

    >>> from trio_rlmesh.testing import FakeEnv, FakeModel
    >>> trio.run(check_runtime_model, FakeModel(), FakeEnv().contract)
    """
    _require(
        isinstance(model, RuntimeModel),
        "not a RuntimeModel: wants_history, fuses_predicts, resolve, predict, predict_group, "
        "reset_adapter, release_adapter and runs_inline are required (subclass RuntimeModel "
        "to get the default of the last)",
    )
    _require(isinstance(model.wants_history, bool), "wants_history must be a bool")
    _require(isinstance(model.fuses_predicts, bool), "fuses_predicts must be a bool")
    observation_space, action_space = _spaces(contract)
    await _bounded(
        "model.resolve",
        call_timeout,
        lambda: model.resolve(
            route_request("conformance-env", contract.spec, session_id="conformance")
        ),
    )
    seq = 0

    def request(width: int) -> model_v1.PredictRequest:
        nonlocal seq
        seq += 1
        return model_v1.PredictRequest(
            context=model_v1.AdapterContext(
                session_id="conformance",
                env_id="conformance-env",
                request_id=f"conformance-env:step_observation:{seq:06d}",
            ),
            observation=spaces_v1.SpaceValue(leaves=_simplest_leaves(observation_space, width)),
            episode_info=[model_v1.EpisodeInfo(episode_id=mint_uuid7()) for _ in range(width)],
        )

    def check(sent: model_v1.PredictRequest, got: object, width: int, what: str) -> None:
        _require(isinstance(got, ModelPrediction), f"{what} must answer a ModelPrediction")
        assert isinstance(got, ModelPrediction)
        _require(
            got.response.context == sent.context,
            f"{what} must echo the request's AdapterContext exactly",
        )
        _require(bool(got.response.actions), f"{what} returned no action frames")
        for index, frame in enumerate(got.response.actions):
            _check_value(f"{what} frame {index}", frame, action_space, width)

    single = request(lanes)
    prediction = await _bounded(
        "model.predict",
        call_timeout,
        lambda: model.predict(single),
        inline=_inline(model, "predict"),
    )
    check(single, prediction, lanes, "model.predict")

    group = [request(1), request(lanes)]
    results = await _bounded(
        "model.predict_group", call_timeout, lambda: model.predict_group(group)
    )
    _require(
        isinstance(results, list) and len(results) == len(group),
        "model.predict_group must answer a list aligned with its requests",
    )
    for index, (sent, got) in enumerate(zip(group, results, strict=True)):
        if isinstance(got, Error):
            raise ConformanceError(f"model.predict_group failed group {index}: {got}")
        check(sent, got, len(sent.episode_info), f"model.predict_group result {index}")

    context = model_v1.AdapterContext(
        session_id="conformance", env_id="conformance-env", request_id="conformance-env:x:1"
    )
    evicted = [info.episode_id for info in single.episode_info]
    await _bounded(
        "model.reset_adapter",
        call_timeout,
        lambda: model.reset_adapter(
            model_v1.ResetAdapterRequest(context=context, episode_ids=evicted)
        ),
    )
    await _bounded(
        "model.release_adapter",
        call_timeout,
        lambda: model.release_adapter(
            model_v1.ReleaseAdapterRequest(context=context, reason="conformance check done"),
            call_timeout,
        ),
    )
