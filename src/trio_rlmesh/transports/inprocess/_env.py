"""A Gymnasium env (or vector env) as a :class:`~trio_rlmesh.runtime.RuntimeEnv`, no network.

Reset and step produce the same env_v1 messages a served env would (batched codec, infos
as a MetaMap, completed episodes with final info and seeds), so the driver cannot tell
the in-process path from a remote one. A scalar env runs with autoreset DISABLED; a
vector env with NEXT_STEP (Gymnasium's default), whose autoreset step starts the lane's
next episode under the id the runtime pushes on that step.

Old Gym API envs (``reset`` returning the observation alone, ``step`` returning
``(obs, reward, done, info)``) are normalised as RLMesh's server does (see
:mod:`trio_rlmesh.transports._gym_compat`).

The env's own calls (reset, step, close) run on a worker thread of their own by default
(``user_code="thread"``), one at a time and always on the same thread, so the driver's
deadlines and the caller's cancellation can abandon a call that hangs. With
``user_code="inline"`` they run on the trio thread: a hand-off fewer per call, but a
blocking step then blocks the event loop and no deadline can interrupt it.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np
import trio

from ..._errors import EnvError, Error
from ...protocol import core_v1, env_v1, meta_to_python, python_to_meta, spaces_v1
from ...protocol._spacespec import EnvContractInfo, make_env_contract, read_env_contract
from ...runtime._interfaces import EndpointTimings, EnvResetResult, EnvStepResult
from ...runtime._worker import UserCode, WorkerUnavailable, new_worker
from ...spaces import _codec
from ...spaces._gym import from_gymnasium
from .._gym_compat import normalize_reset, normalize_step

__all__ = ["GymEnvRuntimeEnv"]


@attrs.define
class _Lane:
    active: bool = False
    pending_autoreset: bool = False
    episode_id: str = ""
    seed: int | None = None
    steps: int = 0
    reward: float = 0.0
    start_ns: int = 0

    def begin(self, episode_id: str, seed: int | None) -> None:
        self.active, self.pending_autoreset = True, False
        self.episode_id, self.seed = episode_id, seed
        self.steps, self.reward, self.start_ns = 0, 0.0, time.time_ns()


def _autoreset_of(env: Any, vector: bool) -> core_v1.AutoresetMode:
    mode = (getattr(env, "metadata", None) or {}).get("autoreset_mode")
    name = getattr(mode, "value", mode)
    if name is None:
        return core_v1.AutoresetMode.NEXT_STEP if vector else core_v1.AutoresetMode.DISABLED
    if str(name) == "NextStep":
        return core_v1.AutoresetMode.NEXT_STEP
    if str(name) == "Disabled":
        return core_v1.AutoresetMode.DISABLED
    raise EnvError(
        f"autoreset mode {name!r} is not supported; build the env with NEXT_STEP or DISABLED",
        operation="env.open",
    )


def _safe_meta(info: Mapping[str, Any] | None) -> spaces_v1.MetaMap | None:
    if not info:
        return None
    try:
        return python_to_meta({str(k): v for k, v in info.items()})
    except Error as exc:
        raise EnvError(f"env info cannot be sent: {exc}", code="INTERNAL") from exc


class GymEnvRuntimeEnv:
    """Wrap a Gymnasium ``Env`` or ``VectorEnv`` as a runtime env.

    Args:
        env: the env; a vector env is recognised by ``single_observation_space``.
        user_code: where the env's ``reset``/``step``/``close`` run: ``"thread"`` (the
            default), on a worker thread of the env's own, where a deadline or a cancel
            can abandon a call that hangs; or ``"inline"``, on the trio thread, which
            saves a thread hand-off per call but lets a blocking call freeze the event
            loop (no deadline fires, Ctrl-C waits for it).
        env_name: the contract's env id (default: ``env.spec.id`` or ``"UnknownEnv-v1"``).

    Attributes:
        contract: the ``EnvContract`` a served env would return at handshake.
        info: the same, decoded.

    After a call was abandoned (its deadline passed) while the env still runs it, every
    later call fails at once with an :class:`~trio_rlmesh.EnvError` (code ``BUSY``)
    naming the stuck operation, and :meth:`close` skips the env's ``close``.
    """

    def __init__(
        self, env: Any, *, user_code: UserCode = "thread", env_name: str | None = None
    ) -> None:
        self.env = env
        self.vector = hasattr(env, "single_observation_space")
        self.num_envs = int(getattr(env, "num_envs", 1)) if self.vector else 1
        obs_space = env.single_observation_space if self.vector else env.observation_space
        act_space = env.single_action_space if self.vector else env.action_space
        spec = getattr(env, "spec", None)
        name = env_name or (getattr(spec, "id", None) if spec is not None else None)
        self.autoreset = _autoreset_of(env, self.vector)
        self.contract: core_v1.EnvContract = make_env_contract(
            name or "UnknownEnv-v1",
            from_gymnasium(obs_space),
            from_gymnasium(act_space),
            num_envs=self.num_envs,
            render_mode=getattr(env, "render_mode", None),
            autoreset=self.autoreset,
        )
        self.info: EnvContractInfo = read_env_contract(self.contract)
        self._lanes = [_Lane() for _ in range(self.num_envs)]
        self._worker = new_worker(user_code, f"env {self.info.env_id}")
        self._reset_space = getattr(env, "observation_space", None)

    @property
    def user_code(self) -> UserCode:
        """Where the env's calls run: ``"thread"`` or ``"inline"``."""
        return self._worker.user_code

    def _runs_inline(self, method: str) -> bool:
        """Whether ``method`` may be served by its synchronous form.

        Only in inline mode, while open, and not when a subclass (or a patch on this
        instance) replaced the async method: the driver must then go through the
        replacement.
        """
        worker = self._worker
        return (
            worker.user_code == "inline"
            and not worker.closed
            and method not in self.__dict__
            and getattr(type(self), method) is getattr(GymEnvRuntimeEnv, method)
        )

    def _encode_obs(self, obs: Any) -> spaces_v1.SpaceValue:
        space = self.info.observation_space
        try:
            if self.vector:
                return spaces_v1.SpaceValue(leaves=_codec.encode_batch(space, obs, self.num_envs))
            return spaces_v1.SpaceValue(leaves=_codec.encode_lanes(space, [obs]))
        except Error as exc:
            raise EnvError(
                f"env {self.info.env_id} returned an observation outside its space: {exc}",
                code="INTERNAL",
            ) from exc

    # -- reset -------------------------------------------------------------------------------

    async def reset(self, request: env_v1.ResetRequest) -> EnvResetResult:
        started = time.perf_counter_ns()
        kwargs = self._reset_kwargs(request)
        decoded = time.perf_counter_ns()
        try:
            obs, info = normalize_reset(
                await self._worker.run("env.reset", functools.partial(self.env.reset, **kwargs)),
                self._reset_space,
            )
        except WorkerUnavailable as exc:
            raise exc.as_error(EnvError) from exc
        except Exception as exc:
            raise self._reset_failed(exc) from exc
        return self._reset_result(request, obs, info, started, decoded)

    def reset_inline(self, request: env_v1.ResetRequest) -> EnvResetResult | None:
        """:meth:`reset` without the event loop, or ``None`` when it must be awaited.

        The runtime driver calls this first: an inline reset never yields, so it can
        skip the cancel scope an awaited call needs. Only in ``user_code="inline"``
        mode; otherwise the reset must run where a deadline can abandon it.
        """
        if not self._runs_inline("reset"):
            return None
        started = time.perf_counter_ns()
        kwargs = self._reset_kwargs(request)
        decoded = time.perf_counter_ns()
        try:
            obs, info = normalize_reset(self.env.reset(**kwargs), self._reset_space)
        except Exception as exc:
            raise self._reset_failed(exc) from exc
        return self._reset_result(request, obs, info, started, decoded)

    def _reset_kwargs(self, request: env_v1.ResetRequest) -> dict[str, Any]:
        lanes = list(request.env_indices) or list(range(self.num_envs))
        if lanes != list(range(self.num_envs)):
            raise EnvError(
                f"env {self.info.env_id} resets all {self.num_envs} lanes together; a partial "
                f"reset of lanes {lanes} is not supported",
                recoverable=True,
                operation="env.reset",
                code="INVALID_ACTION",
            )
        seeds = list(request.seeds)
        seed: int | list[int] | None = None
        if seeds:
            seed = seeds[0] if not self.vector or len(seeds) == 1 else seeds
        kwargs: dict[str, Any] = {"seed": seed}
        if request.options is not None:
            kwargs["options"] = meta_to_python(request.options)
        return kwargs

    def _reset_failed(self, exc: Exception) -> EnvError:
        return EnvError(
            f"env {self.info.env_id} reset raised {type(exc).__name__}: {exc}",
            operation="env.reset",
            code="INTERNAL",
        )

    def _reset_result(
        self, request: env_v1.ResetRequest, obs: Any, info: Any, started: int, decoded: int
    ) -> EnvResetResult:
        called = time.perf_counter_ns()
        seeds = list(request.seeds)
        ids = list(request.episode_ids)
        for index in range(self.num_envs):
            lane_seed = seeds[index] if index < len(seeds) else None
            self._lanes[index].begin(ids[index] if index < len(ids) else "", lane_seed)
        response = env_v1.ResetResponse(observation=self._encode_obs(obs), infos=_safe_meta(info))
        done = time.perf_counter_ns()
        timings = EndpointTimings(
            total_ns=done - started,
            decode_ns=decoded - started,
            user_ns=called - decoded,
            encode_ns=done - called,
        )
        return EnvResetResult(response=response, timings=timings)

    # -- step --------------------------------------------------------------------------------

    async def step(self, request: env_v1.StepRequest) -> EnvStepResult:
        started = time.perf_counter_ns()
        action = self._decode_action(request)
        decoded = time.perf_counter_ns()
        try:
            obs, reward, terminated, truncated, info = normalize_step(
                await self._worker.run("env.step", self.env.step, action), vector=self.vector
            )
        except WorkerUnavailable as exc:
            raise exc.as_error(EnvError) from exc
        except Exception as exc:
            raise self._step_failed(exc) from exc
        return self._step_result(
            request, (obs, reward, terminated, truncated, info), started, decoded
        )

    def step_inline(self, request: env_v1.StepRequest) -> EnvStepResult | None:
        """:meth:`step` without the event loop, or ``None`` when it must be awaited.

        Answers only in ``user_code="inline"`` mode (see :meth:`reset_inline`).
        """
        if not self._runs_inline("step"):
            return None
        started = time.perf_counter_ns()
        action = self._decode_action(request)
        decoded = time.perf_counter_ns()
        try:
            obs, reward, terminated, truncated, info = normalize_step(
                self.env.step(action), vector=self.vector
            )
        except Exception as exc:
            raise self._step_failed(exc) from exc
        return self._step_result(
            request, (obs, reward, terminated, truncated, info), started, decoded
        )

    def _decode_action(self, request: env_v1.StepRequest) -> Any:
        if request.env_indices:
            raise EnvError(
                "an in-process Gymnasium env steps all lanes together",
                recoverable=True,
                operation="env.step",
                code="UNSUPPORTED",
            )
        space = self.info.action_space
        leaves = request.action.leaves if request.action is not None else []
        try:
            if self.vector:
                return _codec.decode_batch(space, leaves, self.num_envs)
            return _codec.decode_lanes(space, leaves, 1)[0]
        except Error as exc:
            raise EnvError(
                f"action does not decode for env {self.info.env_id}: {exc}",
                recoverable=True,
                operation="env.step",
                code="INVALID_ACTION",
            ) from exc

    def _step_failed(self, exc: Exception) -> EnvError:
        return EnvError(
            f"env {self.info.env_id} step raised {type(exc).__name__}: {exc}",
            operation="env.step",
            code="INTERNAL",
        )

    def _step_result(
        self,
        request: env_v1.StepRequest,
        outcome: tuple[Any, Any, Any, Any, Any],
        started: int,
        decoded: int,
    ) -> EnvStepResult:
        """The response to a step whose env call returned ``outcome`` (its 5-tuple)."""
        called = time.perf_counter_ns()
        obs, reward, terminated, truncated, info = outcome
        rewards = np.asarray(reward, dtype=np.float64).reshape(self.num_envs)
        terms = np.asarray(terminated, dtype=bool).reshape(self.num_envs)
        truncs = np.asarray(truncated, dtype=bool).reshape(self.num_envs)
        completed = self._track(request, rewards, terms, truncs, info)
        response = env_v1.StepResponse(
            observation=self._encode_obs(obs),
            rewards=rewards.tolist(),
            terminated_mask=terms.astype(np.uint8).tobytes(),
            truncated_mask=truncs.astype(np.uint8).tobytes(),
            infos=_safe_meta(info),
            completed_episodes=completed,
        )
        done = time.perf_counter_ns()
        timings = EndpointTimings(
            total_ns=done - started,
            decode_ns=decoded - started,
            user_ns=called - decoded,
            encode_ns=done - called,
        )
        return EnvStepResult(response=response, timings=timings)

    def _track(
        self,
        request: env_v1.StepRequest,
        rewards: np.ndarray[Any, Any],
        terms: np.ndarray[Any, Any],
        truncs: np.ndarray[Any, Any],
        info: Mapping[str, Any],
    ) -> list[env_v1.EpisodeMetadata]:
        ids = list(request.episode_ids)
        completed = []
        for index, lane in enumerate(self._lanes):
            if lane.pending_autoreset:
                # Gymnasium's NEXT_STEP autoreset step: the lane's next episode starts here,
                # under the id the runtime pushed; the step itself is not counted.
                lane.begin(ids[index] if index < len(ids) else "", None)
                continue
            if not lane.active:
                continue
            lane.steps += 1
            lane.reward += float(rewards[index])
            if terms[index] or truncs[index]:
                completed.append(
                    env_v1.EpisodeMetadata(
                        episode_id=lane.episode_id,
                        seed=lane.seed,
                        env_index=index,
                        step_count=lane.steps,
                        cumulative_reward=lane.reward,
                        terminated=bool(terms[index]),
                        truncated=bool(truncs[index]),
                        start_timestamp_ns=lane.start_ns,
                        end_timestamp_ns=time.time_ns(),
                        final_info=self._final_info(info, index),
                    )
                )
                lane.active = False
                lane.pending_autoreset = self.autoreset == core_v1.AutoresetMode.NEXT_STEP
        return completed

    def _final_info(self, info: Mapping[str, Any], lane: int) -> spaces_v1.MetaMap | None:
        if not self.vector:
            return _safe_meta(info)
        final = info.get("final_info")
        if not isinstance(final, Mapping):
            return None
        mask = info.get("_final_info")
        if mask is not None and not bool(np.asarray(mask)[lane]):
            return None
        picked = {}
        for key, value in final.items():
            if str(key).startswith("_"):
                continue
            flags = final.get(f"_{key}")
            if flags is not None and not bool(np.asarray(flags)[lane]):
                continue
            picked[str(key)] = np.asarray(value)[lane] if np.ndim(value) else value
        return _safe_meta(picked)

    async def close(self, timeout: float) -> None:  # noqa: ASYNC109 - RuntimeEnv's signature
        """Run the env's ``close`` once, giving up after ``timeout`` seconds.

        Raises:
            EnvError: an abandoned call (a hung step) still occupies the env, so its
                ``close`` did not run (code ``BUSY``). This returns at once.
        """
        with trio.move_on_after(timeout):
            try:
                await self._worker.aclose("env.close", self.env.close)
            except WorkerUnavailable as exc:
                raise exc.as_error(EnvError) from exc
