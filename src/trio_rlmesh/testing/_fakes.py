"""Scripted :class:`FakeEnv` and :class:`FakeModel`: delays and faults in trio time.

Both record every request they receive so tests can assert on what the driver sent.
Observations are ``float32[obs_dim]`` per lane holding ``[episode step, lane, episodes
started on the lane, 0, ...]``; actions are ``Discrete(n_actions)`` int64 leaves.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import attrs
import numpy as np
import trio

from .._errors import EnvError, Error, ModelError
from ..protocol import core_v1, env_v1, model_v1, python_to_meta, spaces_v1
from ..protocol._internal import CAP_SUBSET_STEP, CAPABILITY_TRUE, META_RESET_OPTIONS
from ..runtime import (
    EndpointTimings,
    EnvResetResult,
    EnvStepResult,
    ModelPrediction,
    RuntimeEnv,
    RuntimeModel,
    RuntimeSessionSpec,
)

__all__ = ["FakeEnv", "FakeModel", "Fault", "decode_observation"]

Autoreset = Literal["disabled", "next_step", "unspecified", "same_step"]
Delays = Mapping[str, float] | Callable[[str, "int | None"], float]

_MODES = {
    "unspecified": core_v1.AutoresetMode.UNSPECIFIED,
    "next_step": core_v1.AutoresetMode.NEXT_STEP,
    "same_step": core_v1.AutoresetMode.SAME_STEP,
    "disabled": core_v1.AutoresetMode.DISABLED,
}


@attrs.frozen
class Fault:
    """Make the ``at``-th call (1-based) of operation ``op`` fail or hang.

    ``op`` is one of ``env.reset``, ``env.step``, ``env.close``, ``model.resolve_adapter``,
    ``model.predict`` (also counts ``predict_group`` calls), ``model.reset_adapter``,
    ``model.release_adapter``.

    >>> Fault("env.step", at=3, kind="hang")
    Fault(op='env.step', at=3, kind='hang', recoverable=False, message='injected fault')
    """

    op: str
    at: int = 1
    kind: Literal["error", "hang"] = "error"
    recoverable: bool = False
    message: str = "injected fault"


class _Script:
    """Shared call counting, delays and faults."""

    def __init__(self, delays: Delays | None, faults: Sequence[Fault]) -> None:
        self._delays = delays if delays is not None else {}
        self._faults = tuple(faults)
        self.calls: dict[str, int] = {}

    async def enter(self, op: str, lane: int | None, error: type[Error]) -> None:
        count = self.calls[op] = self.calls.get(op, 0) + 1
        delays = self._delays
        delay = delays(op, lane) if callable(delays) else delays.get(op, 0.0)
        if delay:
            await trio.sleep(delay)
        for fault in self._faults:
            if fault.op == op and fault.at == count:
                if fault.kind == "hang":
                    await trio.sleep_forever()
                raise error(f"{fault.message} ({op} call {count})", recoverable=fault.recoverable)


def _timings(delay_ns: int) -> EndpointTimings:
    return EndpointTimings(total_ns=delay_ns, user_ns=delay_ns)


@attrs.define(eq=False)
class _Lane:
    active: bool = False
    pending_roll: bool = False
    episode_id: str = ""
    seed: int | None = None
    steps: int = 0
    reward: float = 0.0
    episodes: int = 0


class FakeEnv(RuntimeEnv):
    """A scripted :class:`~trio_rlmesh.runtime.RuntimeEnv`.

    Args:
        num_envs: lanes.
        autoreset: the contract's autoreset mode.
        subset_step: advertise ``subset_step`` (a lane endpoint: requests name one lane).
        episode_length: steps until a lane terminates: one int, one per lane, a callable
            ``(lane, episode_number) -> int``, or ``None`` to never terminate.
        reward: reward per step.
        obs_dim, n_actions: the Box observation length and the Discrete action size.
        delays: seconds of trio time per op name (or a callable ``(op, lane) -> seconds``).
        faults: :class:`Fault` s to inject.
        final_info: the ``final_info`` put on every env-reported completion.
        reset_options: keys declared in ``rlmesh.env.v1.reset_options`` (e.g. ``["trial_index"]``).
        echo_interrupted: like a real env server, report an episode a reset interrupted as a
            truncated completion on the next step.

    >>> env = FakeEnv(num_envs=2, autoreset="next_step", episode_length=[2, 3])
    >>> env.contract.num_envs, env.session_spec(max_episodes=4).num_envs
    (2, 2)
    """

    def __init__(
        self,
        *,
        num_envs: int = 1,
        autoreset: Autoreset = "disabled",
        subset_step: bool = False,
        episode_length: int | Sequence[int] | Callable[[int, int], int] | None = 3,
        reward: float = 1.0,
        obs_dim: int = 4,
        n_actions: int = 2,
        delays: Delays | None = None,
        faults: Sequence[Fault] = (),
        final_info: Mapping[str, Any] | None = None,
        reset_options: Sequence[str] = (),
        echo_interrupted: bool = True,
    ) -> None:
        self.num_envs = num_envs
        self.autoreset = autoreset
        self.subset_step = subset_step
        self.episode_length = episode_length
        self.reward = reward
        self.obs_dim = obs_dim
        self.n_actions = n_actions
        self.final_info = dict(final_info) if final_info is not None else None
        self.reset_options = tuple(reset_options)
        self.echo_interrupted = echo_interrupted
        self._script = _Script(delays, faults)
        self._lanes = [_Lane() for _ in range(num_envs)]
        self._interrupted: list[env_v1.EpisodeMetadata] = []
        self.resets: list[env_v1.ResetRequest] = []
        """Every reset request received, in order."""
        self.steps: list[env_v1.StepRequest] = []
        """Every step request received, in order."""
        self.actions: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
        """``(lanes, actions)`` per step, decoded."""
        self.closed = False
        self.in_flight = 0
        self.max_in_flight = 0

    # -- contract ---------------------------------------------------------------------------

    @property
    def observation_space(self) -> spaces_v1.SpaceSpec:
        return spaces_v1.SpaceSpec(
            shape=[self.obs_dim],
            dtype=spaces_v1.DataType.FLOAT32,
            box=spaces_v1.BoxSpec(unbounded=True),
        )

    @property
    def action_space(self) -> spaces_v1.SpaceSpec:
        return spaces_v1.SpaceSpec(
            dtype=spaces_v1.DataType.INT64,
            discrete=spaces_v1.DiscreteSpec(n=self.n_actions, start=0),
        )

    @property
    def contract(self) -> core_v1.EnvContract:
        """The contract a handshake with this env would return."""
        metadata = (
            python_to_meta({META_RESET_OPTIONS: list(self.reset_options)})
            if self.reset_options
            else None
        )
        return core_v1.EnvContract(
            spec=core_v1.EnvSpec(
                id="FakeEnv-v0",
                observation_space=self.observation_space,
                action_space=self.action_space,
                metadata=metadata,
            ),
            num_envs=self.num_envs,
            autoreset_mode=_MODES[self.autoreset],
        )

    @property
    def capabilities(self) -> dict[str, str]:
        return {CAP_SUBSET_STEP: CAPABILITY_TRUE} if self.subset_step else {}

    def session_spec(self, **overrides: Any) -> RuntimeSessionSpec:
        """A :class:`~trio_rlmesh.runtime.RuntimeSessionSpec` for this env (fields overridable)."""
        fields: dict[str, Any] = {
            "session_id": "fake-session",
            "env_id": "fake-env",
            "env_contract": self.contract,
            "num_envs": self.num_envs,
            "subset_step": self.subset_step,
        }
        fields.update(overrides)
        return RuntimeSessionSpec(**fields)

    # -- behaviour --------------------------------------------------------------------------

    def _length(self, lane: int, episode: int) -> int | None:
        length = self.episode_length
        if length is None or isinstance(length, int):
            return length
        if callable(length):
            return length(lane, episode)
        return length[lane]

    def _observation(self, lanes: Sequence[int]) -> spaces_v1.SpaceValue:
        rows = np.zeros((len(lanes), self.obs_dim), dtype="<f4")
        for row, lane in enumerate(lanes):
            state = self._lanes[lane]
            rows[row, : min(3, self.obs_dim)] = [state.steps, lane, state.episodes][: self.obs_dim]
        return spaces_v1.SpaceValue(leaves=[rows.tobytes()])

    def _begin(self, lane: int, episode_id: str, seed: int | None) -> None:
        state = self._lanes[lane]
        state.active, state.pending_roll = True, False
        state.episode_id, state.seed = episode_id, seed
        state.steps, state.reward = 0, 0.0
        state.episodes += 1

    def _metadata(self, lane: int, *, terminated: bool, truncated: bool) -> env_v1.EpisodeMetadata:
        state = self._lanes[lane]
        final_info = None
        if terminated and self.final_info is not None:
            final_info = python_to_meta(self.final_info)
        return env_v1.EpisodeMetadata(
            episode_id=state.episode_id,
            seed=state.seed,
            env_index=lane,
            step_count=state.steps,
            cumulative_reward=state.reward,
            terminated=terminated,
            truncated=truncated,
            final_info=final_info,
        )

    async def _enter(self, op: str, lanes: Sequence[int]) -> None:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await self._script.enter(op, lanes[0] if len(lanes) == 1 else None, EnvError)
        finally:
            self.in_flight -= 1

    async def reset(self, request: env_v1.ResetRequest) -> EnvResetResult:
        lanes = list(request.env_indices) or list(range(self.num_envs))
        self.resets.append(request)
        await self._enter("env.reset", lanes)
        for position, lane in enumerate(lanes):
            state = self._lanes[lane]
            if state.active and self.echo_interrupted:
                self._interrupted.append(self._metadata(lane, terminated=False, truncated=True))
            episode_id = (
                request.episode_ids[position] if position < len(request.episode_ids) else ""
            )
            seed = request.seeds[position] if position < len(request.seeds) else None
            self._begin(lane, episode_id, seed)
        return EnvResetResult(
            response=env_v1.ResetResponse(observation=self._observation(lanes)),
            timings=_timings(1000),
        )

    async def step(self, request: env_v1.StepRequest) -> EnvStepResult:
        lanes = list(request.env_indices) or list(range(self.num_envs))
        self.steps.append(request)
        await self._enter("env.step", lanes)
        leaves = request.action.leaves if request.action is not None else []
        if len(leaves) != 1 or len(leaves[0]) != 8 * len(lanes):
            raise EnvError(
                f"expected one int64 action leaf for {len(lanes)} lane(s)",
                recoverable=True,
                code="INVALID_ACTION",
            )
        actions = tuple(int(a) for a in np.frombuffer(leaves[0], dtype="<i8"))
        self.actions.append((tuple(lanes), actions))
        rewards: list[float] = []
        terminated = bytearray(len(lanes))
        completed = self._interrupted
        self._interrupted = []
        for position, lane in enumerate(lanes):
            state = self._lanes[lane]
            if state.pending_roll:
                # NEXT_STEP: this step resets the lane; its action is ignored.
                ids = request.episode_ids
                index = lane if len(ids) == self.num_envs and len(lanes) > 1 else position
                self._begin(lane, ids[index] if index < len(ids) else "", None)
                rewards.append(0.0)
                continue
            if not state.active:
                rewards.append(0.0)
                continue
            state.steps += 1
            state.reward += self.reward
            rewards.append(self.reward)
            length = self._length(lane, state.episodes - 1)
            if length is not None and state.steps >= length:
                terminated[position] = 1
                completed.append(self._metadata(lane, terminated=True, truncated=False))
                state.active = False
                state.pending_roll = self.autoreset == "next_step"
        return EnvStepResult(
            response=env_v1.StepResponse(
                observation=self._observation(lanes),
                rewards=rewards,
                terminated_mask=bytes(terminated),
                truncated_mask=bytes(len(lanes)),
                completed_episodes=completed,
                env_indices=list(request.env_indices),
            ),
            timings=_timings(2000),
        )

    async def close(self, timeout: float) -> None:  # noqa: ASYNC109 - the Protocol's signature
        await self._enter("env.close", [0])
        self.closed = True


class FakeModel(RuntimeModel):
    """A scripted :class:`~trio_rlmesh.runtime.RuntimeModel`.

    Args:
        n_actions: the Discrete action size.
        chunk: frames per predict (frame 0 plus ``chunk - 1`` to replay).
        policy: ``(frame, lane) -> action``; the default is ``frame % n_actions``.
        delays: seconds of trio time per op (``model.predict``, ``model.reset_adapter``, ...).
        faults: :class:`Fault` s to inject.
        fuses_predicts, wants_history: what the model reports to the driver.
        mismatch_context: answer with a wrong ``request_id`` (a protocol violation).
        empty_actions: answer with no frames (a protocol violation).

    >>> FakeModel(chunk=3).chunk
    3
    """

    def __init__(
        self,
        *,
        n_actions: int = 2,
        chunk: int = 1,
        policy: Callable[[int, int], int] | None = None,
        delays: Delays | None = None,
        faults: Sequence[Fault] = (),
        fuses_predicts: bool = False,
        wants_history: bool = False,
        mismatch_context: bool = False,
        empty_actions: bool = False,
    ) -> None:
        self.n_actions = n_actions
        self.chunk = chunk
        self.policy = policy
        self._fuses = fuses_predicts
        self._history = wants_history
        self.mismatch_context = mismatch_context
        self.empty_actions = empty_actions
        self._script = _Script(delays, faults)
        self.predicts: list[model_v1.PredictRequest] = []
        """Every predict request, grouped ones included, in arrival order."""
        self.group_sizes: list[int] = []
        """Sizes of the ``predict_group`` calls."""
        self.evicted: list[list[str]] = []
        """Episode ids of every ``reset_adapter`` call."""
        self.releases: list[model_v1.ReleaseAdapterRequest] = []
        self.released = False
        self.resolves: list[model_v1.ResolveAdapterRequest] = []
        """Every resolve request, in arrival order."""

    @property
    def wants_history(self) -> bool:
        return self._history

    async def resolve(
        self, request: model_v1.ResolveAdapterRequest
    ) -> model_v1.ResolveAdapterResponse:
        """Accept the route (``wants_history`` decides whether history is asked for);
        ``model.resolve_adapter`` delays and faults apply."""
        await self._script.enter("model.resolve_adapter", None, ModelError)
        self.resolves.append(request)
        response = model_v1.ResolveAdapterResponse()
        if self._history:
            response.history = model_v1.ObservationHistoryNeeds(keys=["observation"])
        return response

    @property
    def fuses_predicts(self) -> bool:
        return self._fuses

    def _answer(self, request: model_v1.PredictRequest) -> ModelPrediction:
        self.predicts.append(request)
        lanes = max(1, len(request.episode_info))
        frames = []
        if not self.empty_actions:
            for frame in range(self.chunk):
                values = [
                    self.policy(frame, lane) if self.policy else frame % self.n_actions
                    for lane in range(lanes)
                ]
                frames.append(
                    spaces_v1.SpaceValue(leaves=[np.asarray(values, dtype="<i8").tobytes()])
                )
        context = request.context
        if self.mismatch_context and context is not None:
            context = model_v1.AdapterContext(
                session_id=context.session_id, env_id=context.env_id, request_id="wrong"
            )
        return ModelPrediction(
            response=model_v1.PredictResponse(context=context, actions=frames),
            timings=EndpointTimings(total_ns=500, user_ns=400, adapter_ns=100, held_episodes=1),
        )

    async def predict(self, request: model_v1.PredictRequest) -> ModelPrediction:
        await self._script.enter("model.predict", None, ModelError)
        return self._answer(request)

    async def predict_group(
        self, requests: Sequence[model_v1.PredictRequest]
    ) -> list[ModelPrediction | Error]:
        self.group_sizes.append(len(requests))
        await self._script.enter("model.predict", None, ModelError)
        return [self._answer(request) for request in requests]

    async def reset_adapter(self, request: model_v1.ResetAdapterRequest) -> None:
        await self._script.enter("model.reset_adapter", None, ModelError)
        self.evicted.append(list(request.episode_ids))

    async def release_adapter(
        self,
        request: model_v1.ReleaseAdapterRequest,
        timeout: float,  # noqa: ASYNC109 - the Protocol's signature
    ) -> None:
        self.releases.append(request)
        await self._script.enter("model.release_adapter", None, ModelError)
        self.released = True


def decode_observation(leaves: Sequence[bytes], obs_dim: int = 4) -> np.ndarray[Any, Any]:
    """Rows of a :class:`FakeEnv` observation (for assertions in tests)."""
    return np.frombuffer(leaves[0], dtype="<f4").reshape(-1, obs_dim)
