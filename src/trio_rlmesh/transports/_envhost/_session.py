"""The env host: one env (or several) seen through rlmesh-wire-v1, with no I/O.

Theory of operation. An :class:`EnvHost` owns the env shape, its contract, the value gate
and which lanes were ever reset; an :class:`EnvSession` is one client's session (a Join
stream, or one in-process run) with its episode tracker. A request is served in two
synchronous halves around the user code:

* ``plan_*`` validates the request, decodes and checks the actions, and returns a
  :class:`RequestPlan` whose :class:`LaneCall` s say which lane's code to run with which
  arguments;
* the I/O layer runs the calls wherever it runs user code (a worker per lane, or
  inline) — :func:`run_plan` does it for both users, concurrently across lanes;
* ``finish_*`` takes the :class:`~._shapes.LaneResult` s, encodes and checks the
  observations, updates the tracker and returns the response message.

A rejected request raises :class:`~._errors.WireError` and changes nothing; a late answer
(its caller gave up) simply never reaches ``finish_*``, so the tracker only sees results
that were delivered. The same host serves the gRPC env server and the in-process env, so
an env behaves the same both ways.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, NamedTuple, cast

import numpy as np
import trio

from ...protocol import SUPPORTED_WORKFLOW_EDITIONS, core_v1, env_v1, meta_to_python, spaces_v1
from ._errors import Code, WireError
from ._shapes import EnvShape, LaneEnvs, LaneResult, VectorEnv, open_shape
from ._tracker import EpisodeTracker, vector_final_info
from ._values import (
    ValidationPolicy,
    ValueGate,
    encode_png,
    infos_to_meta,
    merge_lane_infos,
    validation_policy_from_env,
)

__all__ = ["EnvHost", "EnvSession", "LaneCall", "RequestPlan", "run_plan"]

_NO_WARNINGS: Final[list[Any]] = []


class LaneCall(NamedTuple):
    """One call into user code: run ``fn(*args)`` for ``lane`` (0 for a vector env)."""

    lane: int
    operation: str
    fn: Callable[..., Any]
    args: tuple[Any, ...]


class RequestPlan:
    """A request half served: what to call, and what ``finish_*`` needs afterwards."""

    __slots__ = ("calls", "lanes", "request", "warnings")

    def __init__(
        self,
        lanes: Sequence[int],
        calls: list[LaneCall],
        request: Any,
        warnings: list[Any] = _NO_WARNINGS,
    ) -> None:
        self.lanes = lanes
        self.calls = calls
        self.request = request
        self.warnings = warnings
        """Conformance warnings from the request's half (never mutated: replaced)."""


async def run_plan(
    plan: RequestPlan, run: Callable[[LaneCall], Awaitable[Any]], *, concurrently: bool = True
) -> list[Any]:
    """Run every call of ``plan`` with ``run`` (concurrently when there are several, unless
    ``concurrently`` is false: then one after the other, with no checkpoint of its own),
    and return the results in call order. The first failure, in call order, is raised once
    every call has ended."""
    calls = plan.calls
    if len(calls) == 1:
        return [await run(calls[0])]
    outcomes: list[Any] = [None] * len(calls)

    async def one(index: int, call: LaneCall) -> None:
        try:
            outcomes[index] = await run(call)
        except WireError as exc:
            outcomes[index] = exc

    if concurrently:
        async with trio.open_nursery() as nursery:
            for index, call in enumerate(calls):
                nursery.start_soon(one, index, call)
    else:
        for index, call in enumerate(calls):
            await one(index, call)
    for item in outcomes:
        if isinstance(item, WireError):
            raise item
    return outcomes


def plan_timings(submitted_ns: int, results: Sequence[LaneResult]) -> tuple[int, int]:
    """``(user_ns, queue_ns)`` of a plan's results: the slowest lane's user time, and the
    longest wait before a lane's call began (``submitted_ns`` on the perf counter)."""
    if len(results) == 1:
        only = results[0]
        return only.user_ns, max(0, only.started_ns - submitted_ns)
    user = max((r.user_ns for r in results), default=0)
    queue = max((max(0, r.started_ns - submitted_ns) for r in results), default=0)
    return user, queue


class EnvHost:
    """One env (or one per lane, or a vector env) served over rlmesh-wire-v1.

    Args:
        shape: from :func:`~._shapes.open_shape` (or use :meth:`open`).
        validation: conformance policy for actions and observations (``None`` reads
            ``RLMESH_VALIDATION_POLICY``, as RLMesh's servers do; default warn).
    """

    def __init__(self, shape: EnvShape, validation: ValidationPolicy | None = None) -> None:
        if validation is None:
            validation = validation_policy_from_env()
        if validation not in ("warn", "strict", "off"):
            raise ValueError(f"validation must be 'warn', 'strict' or 'off', got {validation!r}")
        self.shape = shape
        self.contract: core_v1.EnvContract = shape.contract()
        self.gate = ValueGate(shape.observation_space, shape.action_space, validation)
        self.ever_reset: set[int] = set()

    @classmethod
    def open(
        cls,
        env_or_factory: Any,
        *,
        num_envs: int | None = None,
        autoreset: core_v1.AutoresetMode | None = None,
        validation: ValidationPolicy | None = None,
        env_name: str | None = None,
    ) -> EnvHost:
        """Host what the user passed (an env, a vector env, a list, a factory).

        May call a factory (user code). Raises :class:`~trio_rlmesh.SpecError` for a
        combination that cannot be hosted.
        """
        shape = open_shape(
            env_or_factory, num_envs=num_envs, autoreset=autoreset, env_name=env_name
        )
        return cls(shape, validation)

    @property
    def num_lanes(self) -> int:
        return self.shape.num_lanes

    @property
    def lanes_individually(self) -> bool:
        """Whether lanes reset and step on their own (the ``subset_step`` capability)."""
        return self.shape.lanes_individually

    @property
    def workers(self) -> int:
        """How many places run user code: one per lane, or one for a vector env."""
        return self.shape.num_lanes if self.shape.lanes_individually else 1

    def session(self, *, carry: bool = False) -> EnvSession:
        """A new client session (its own episode tracker); with ``carry``, observations
        are carried (:class:`~trio_rlmesh.protocol._carried.CarriedValue`) instead of
        encoded, for a receiver in this process."""
        return EnvSession(self, carry=carry)


class EnvSession:
    """One client's session with an :class:`EnvHost`; see the module docstring."""

    def __init__(self, host: EnvHost, *, carry: bool = False) -> None:
        self.host = host
        self.carry = carry
        """Answer observations as carried values (for a receiver in this process)."""
        shape = host.shape
        self.shape = shape
        self.gate = host.gate
        self.tracker = EpisodeTracker(
            shape.num_lanes, shape.autoreset is core_v1.AutoresetMode.NEXT_STEP
        )
        self._vector = isinstance(shape, VectorEnv)
        self._all_lanes = tuple(range(shape.num_lanes))

    # ---------------------------------------------------------------- lanes

    def _lanes(self, indices: Sequence[int]) -> Sequence[int]:
        num = self.shape.num_lanes
        if not indices:
            return self._all_lanes
        if len(indices) == 1:
            if indices[0] >= num:
                raise WireError(
                    Code.INVALID_ACTION, f"env_indices {list(indices)} out of range for {num} envs"
                )
            return (indices[0],)
        if any(index >= num for index in indices):
            raise WireError(
                Code.INVALID_ACTION, f"env_indices {list(indices)} out of range for {num} envs"
            )
        if len(set(indices)) != len(indices):
            raise WireError(Code.INVALID_ACTION, f"env_indices {list(indices)} has duplicates")
        return tuple(indices)

    # ---------------------------------------------------------------- reset

    def plan_reset(self, request: env_v1.ResetRequest) -> RequestPlan:
        """Validate a reset and say what to call."""
        lanes = self._lanes(request.env_indices)
        for name, values in (("seeds", request.seeds), ("episode_ids", request.episode_ids)):
            if request.env_indices and values and len(values) != len(lanes):
                raise WireError(
                    Code.INVALID_ACTION,
                    f"{name} has {len(values)} entries for {len(lanes)} env_indices",
                )
        options = meta_to_python(request.options) if request.options is not None else None
        shape = self.shape
        if isinstance(shape, VectorEnv):
            if request.env_indices:
                raise WireError(
                    Code.INTERNAL, "partial reset (env_indices) is not supported by this env"
                )
            calls = [LaneCall(0, "env.reset", shape.reset_call, (list(request.seeds), options))]
        else:
            assert isinstance(shape, LaneEnvs)
            seeds = request.seeds
            calls = [
                LaneCall(
                    lane,
                    "env.reset",
                    shape.reset_call,
                    (lane, seeds[i] if i < len(seeds) else None, options),
                )
                for i, lane in enumerate(lanes)
            ]
        return RequestPlan(lanes, calls, request)

    def finish_reset(
        self, plan: RequestPlan, results: Sequence[LaneResult]
    ) -> env_v1.ResetResponse:
        """The reset's response, from what the env returned."""
        lanes, request = plan.lanes, plan.request
        if isinstance(self.shape, VectorEnv):
            batch, info = results[0].observation, results[0].info
        else:
            batch = self._stack([r.observation for r in results])
            info = merge_lane_infos([r.info for r in results])
        observation, warnings = self._observation(batch, len(lanes))
        infos = infos_to_meta(info, warnings)
        self.host.ever_reset.update(lanes)
        self.tracker.on_reset(lanes, request.episode_ids, request.seeds)
        return env_v1.ResetResponse(observation=observation, infos=infos)

    def _observation(self, batch: Any, n: int) -> tuple[spaces_v1.SpaceValue, list[Any]]:
        """The observation batch as the response carries it (encoded, or carried), and
        its range warnings."""
        if self.carry:
            return self.gate.carry_observations(batch, n)
        leaves, warnings = self.gate.encode_observations(batch, n)
        return spaces_v1.SpaceValue(leaves=leaves), warnings

    def _stack(self, observations: list[Any]) -> Any:
        if len(observations) == 1:
            return self.gate.one_lane(observations[0])
        return self.gate.stack_observations(observations)

    # ---------------------------------------------------------------- step

    def plan_step(self, request: env_v1.StepRequest) -> RequestPlan:
        """Validate a step, decode and check its actions, and say what to call."""
        shape = self.shape
        if request.env_indices and not shape.lanes_individually:
            raise WireError(
                Code.UNSUPPORTED, "subset stepping (env_indices) is not supported by this env"
            )
        lanes = self._lanes(request.env_indices)
        gate = self.gate
        actions, warnings = gate.decode_actions(request.action, len(lanes))
        if shape.lanes_individually:
            ever = self.host.ever_reset
            never = [lane for lane in lanes if lane not in ever]
            if never:
                raise WireError(Code.NOT_READY, f"lane(s) {never} stepped before the first reset")
        if self._vector:
            vector_step = cast(VectorEnv, shape).step_call
            calls = [LaneCall(0, "env.step", vector_step, (gate.writable(actions),))]
        else:
            per_lane = gate.split_actions(actions, len(lanes))
            step = cast(LaneEnvs, shape).step_call
            calls = [
                LaneCall(lane, "env.step", step, (lane, action))
                for lane, action in zip(lanes, per_lane, strict=True)
            ]
        return RequestPlan(lanes, calls, request, warnings)

    def finish_step(self, plan: RequestPlan, results: Sequence[LaneResult]) -> env_v1.StepResponse:
        """The step's response, from what the env returned; completions tracked."""
        lanes, request = plan.lanes, plan.request
        count = len(lanes)
        gate = self.gate
        if self._vector:
            result = results[0]
            rewards = [float(r) for r in _lane_values(result.reward, count, "rewards")]
            term = [bool(t) for t in _lane_values(result.terminated, count, "terminated")]
            trunc = [bool(t) for t in _lane_values(result.truncated, count, "truncated")]
            info = result.info
            finals = {
                i: vector_final_info(info, lane, count) for i, lane in _done(lanes, term, trunc)
            }
            batch = result.observation
        elif count == 1:
            # One lane (every single-env step): the general branch below, without its lists.
            result = results[0]
            rewards, term, trunc = [result.reward], [result.terminated], [result.truncated]
            info = result.info
            finals = {0: info} if result.terminated or result.truncated else {}
            batch = gate.one_lane(result.observation)
        else:
            rewards = [r.reward for r in results]
            term = [r.terminated for r in results]
            trunc = [r.truncated for r in results]
            finals = {i: results[i].info for i, _ in _done(lanes, term, trunc)}
            batch = gate.stack_observations([r.observation for r in results])
            info = merge_lane_infos([r.info for r in results])
        observation, warnings = self._observation(batch, count)
        all_warnings = plan.warnings + warnings if plan.warnings else warnings
        infos = infos_to_meta(info, all_warnings)
        final_infos = {
            i: infos_to_meta(final, _NO_WARNINGS) if final is not None else None
            for i, final in finals.items()
        }
        width = self.shape.num_lanes
        ids = request.episode_ids
        completed = self.tracker.on_step_lanes(
            lanes,
            rewards,
            term,
            trunc,
            final_infos.get,
            lambda position, lane: _episode_id(ids, position, lane, count, width),
        )
        return env_v1.StepResponse(
            observation=observation,
            rewards=rewards,
            terminated_mask=bytes(term),
            truncated_mask=bytes(trunc),
            infos=infos,
            completed_episodes=completed,
            env_indices=list(request.env_indices),
        )

    # ---------------------------------------------------------------- render

    def plan_render(self, request: env_v1.RenderRequest) -> RequestPlan:
        """Validate a render (one lane) and say what to call."""
        if len(request.env_indices) > 1:
            raise WireError(Code.UNSUPPORTED, "render of more than one env index is not supported")
        shape = self.shape
        if isinstance(shape, VectorEnv):
            return RequestPlan([0], [LaneCall(0, "env.render", shape.render_call, ())], request)
        assert isinstance(shape, LaneEnvs)
        lane = request.env_indices[0] if request.env_indices else 0
        if lane >= shape.num_lanes:
            raise WireError(
                Code.INVALID_ACTION,
                f"render env index {lane} out of range for {shape.num_lanes} envs",
            )
        return RequestPlan(
            [lane], [LaneCall(lane, "env.render", shape.render_call, (lane,))], request
        )

    def finish_render(self, plan: RequestPlan, frames: Sequence[Any]) -> env_v1.RenderResponse:
        """The render's response: the frame as PNG, or an empty response for no frame."""
        png = encode_png(frames[0] if frames else None)
        if png is None:
            return env_v1.RenderResponse()
        return env_v1.RenderResponse(frame=png, format=env_v1.RenderFormat.PNG)

    # ---------------------------------------------------------------- session

    def configure(self, request: env_v1.ConfigureEnvRequest) -> env_v1.ConfigureEnvResponse:
        """Accept the workflow edition the client selected (or refuse it, not recoverable)."""
        edition = request.selected_workflow_edition.strip()
        if edition and edition not in SUPPORTED_WORKFLOW_EDITIONS:
            raise WireError(
                Code.INVALID_ACTION,
                f"workflow edition {edition!r} is not supported by this env "
                f"(supported: {', '.join(SUPPORTED_WORKFLOW_EDITIONS)})",
                recoverable=False,
            )
        return env_v1.ConfigureEnvResponse()

    def close(self) -> env_v1.CloseEnvsResponse:
        """End the session: every episode still open is reported truncated."""
        return env_v1.CloseEnvsResponse(final_episodes=self.tracker.on_close())


def _episode_id(ids: Sequence[str], position: int, lane: int, count: int, width: int) -> str:
    # Real runtimes send full-width ids; accept ids aligned with env_indices as well.
    if len(ids) == width:
        return ids[lane]
    if len(ids) == count:
        return ids[position]
    return ""


def _done(lanes: Sequence[int], term: Sequence[Any], trunc: Sequence[Any]) -> list[tuple[int, int]]:
    """``(position, lane)`` of the lanes that terminated or truncated on a step."""
    if not any(term) and not any(trunc):
        return []
    return [(i, lane) for i, lane in enumerate(lanes) if term[i] or trunc[i]]


def _lane_values(values: Any, n: int, what: str) -> list[Any]:
    listed: list[Any] = np.asarray(values).reshape(-1).tolist()
    if len(listed) != n:
        raise WireError(Code.INTERNAL, f"env returned {len(listed)} {what} for {n} envs")
    return listed
