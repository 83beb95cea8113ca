"""A Gymnasium env (or a list of them, or a vector env) seen from the wire.

Everything here is synchronous and free of asyncio: the server calls the ``*_call`` methods
in worker threads (they run user code) and everything else on its event loop thread.

Theory of operation:

* :class:`LaneBackend` serves one scalar env per lane. Lanes reset and step individually
  (``subset_step``); each lane's calls go to that lane's own single worker thread, so calls
  for one lane run in arrival order and different lanes run concurrently.
* :class:`VectorBackend` serves one Gymnasium vector env in lockstep.
* :class:`EpisodeTracker` is the per-Join episode bookkeeping of spec §6.3-§6.4 as a pure
  state machine: it is told about resets and steps and answers with the completed episodes.
  It never mutates on a rejected transition.
* :class:`ValueGate` decodes actions and encodes observations with the conformance policy
  of spec §6.8 (structural deviations rejected, range deviations warned once per path).
"""

from __future__ import annotations

import collections
import enum
import os
import struct
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Literal

import attrs
import numpy as np

from ...protocol import (
    INFO_FINAL_INFO,
    INFO_FINAL_INFO_MASK,
    META_AUTORESET_MODE,
    META_CONFORMANCE_WARNING,
    MetaConversionError,
    core_v1,
    env_v1,
    python_to_meta,
    spaces_v1,
)
from ...spaces import (
    CodecError,
    Space,
    check_batch,
    decode_batch,
    encode_batch,
    from_gymnasium,
    stack_lanes,
    unstack,
)
from .._gym_compat import normalize_reset, normalize_step

__all__ = [
    "INTERRUPTED_BUFFER",
    "EnvBackend",
    "EpisodeTracker",
    "LaneBackend",
    "ValidationPolicy",
    "ValueGate",
    "VectorBackend",
    "WireError",
    "encode_png",
    "make_backend",
]

INTERRUPTED_BUFFER: Final = 100
"""Interrupted episodes kept for delivery; the oldest are dropped beyond this (spec §6.1)."""

ValidationPolicy = Literal["warn", "strict", "off"]

Code = env_v1.EnvErrorCode
_RECOVERABLE_CODES: Final = frozenset(
    {Code.TIMEOUT, Code.INVALID_ACTION, Code.NOT_READY, Code.BUSY, Code.UNSUPPORTED}
)


class WireError(Exception):
    """An in-band ``EnvError`` to answer with (the stream continues)."""

    def __init__(self, code: env_v1.EnvErrorCode, message: str, recoverable: bool | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.recoverable = code in _RECOVERABLE_CODES if recoverable is None else recoverable

    def to_proto(self) -> env_v1.EnvError:
        return env_v1.EnvError(
            code=self.code, message=self.message, is_recoverable=self.recoverable
        )


def _user_failure(op: str, exc: BaseException) -> WireError:
    return WireError(Code.INTERNAL, f"{op} failed: {type(exc).__name__}: {exc}")


# --------------------------------------------------------------------------------------------
# Values


@attrs.define(eq=False)
class ValueGate:
    """Action decoding and observation encoding under one conformance policy.

    Range warnings are reported once per ``(kind, path)`` for the gate's lifetime (one
    server), merged into the infos of the response that first saw them.
    """

    observation_space: Space
    action_space: Space
    policy: ValidationPolicy = "warn"
    _warned: set[tuple[str, str]] = attrs.field(factory=set)

    def decode_actions(self, action: spaces_v1.SpaceValue | None, n: int) -> tuple[Any, list[Any]]:
        """The action batch of ``n`` lanes, and range warnings to report.

        Raises:
            WireError: INVALID_ACTION for undecodable or structurally wrong actions (or any
                deviation under the strict policy).
        """
        leaves = action.leaves if action is not None else []
        if action is None or (not leaves and n):
            raise WireError(Code.INVALID_ACTION, f"expected {n} actions, got 0")
        try:
            batch = decode_batch(self.action_space, leaves, n)
        except CodecError as exc:
            raise WireError(Code.INVALID_ACTION, f"action does not decode: {exc}") from None
        warnings = self._check("action", batch, n, Code.INVALID_ACTION)
        return batch, warnings

    def encode_observations(self, batch: Any, n: int) -> tuple[list[bytes], list[Any]]:
        """Leaves of a batched observation, and range warnings to report.

        Raises:
            WireError: INTERNAL when the env produced an observation outside its space.
        """
        warnings = self._check("observation", batch, n, Code.INTERNAL)
        try:
            return encode_batch(self.observation_space, batch, n), warnings
        except CodecError as exc:
            raise WireError(Code.INTERNAL, f"observation does not encode: {exc}") from None

    def stack_observations(self, lanes: Sequence[Any]) -> Any:
        """Single-lane observations stacked into one batch (INTERNAL on a bad shape)."""
        try:
            return stack_lanes(self.observation_space, lanes)
        except CodecError as exc:
            raise WireError(Code.INTERNAL, f"observation does not fit its space: {exc}") from None

    def split_actions(self, batch: Any, n: int) -> list[Any]:
        """An action batch split into per-lane values the env's ``step`` takes."""
        return [_writable(lane) for lane in unstack(self.action_space, batch, n)]

    def writable(self, batch: Any) -> Any:
        """A decoded batch with every array copied, so the env may write to it."""
        return _writable(batch)

    def _check(self, kind: str, batch: Any, n: int, code: env_v1.EnvErrorCode) -> list[Any]:
        if self.policy == "off":
            deviations = [d for d in check_batch(self._space(kind), batch, n) if d.kind != "range"]
        else:
            deviations = check_batch(self._space(kind), batch, n)
        structural = [d for d in deviations if d.kind == "structural"]
        if structural:
            first = structural[0]
            raise WireError(code, f"{kind} does not conform at {first.path}: {first.detail}")
        if not deviations:
            return []
        if self.policy == "strict":
            first = deviations[0]
            raise WireError(code, f"{kind} out of range at {first.path}: {first.detail}")
        warnings = []
        for deviation in deviations:
            key = (kind, deviation.path)
            if key not in self._warned:
                self._warned.add(key)
                warnings.append({"kind": kind, "path": deviation.path, "detail": deviation.detail})
        return warnings

    def _space(self, kind: str) -> Space:
        return self.observation_space if kind == "observation" else self.action_space


def _writable(value: Any) -> Any:
    # Decoded arrays are read-only views of the request bytes; envs may write to actions.
    if isinstance(value, np.ndarray):
        return value.copy() if value.ndim else value[()]
    if isinstance(value, dict):
        return {key: _writable(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return tuple(_writable(item) for item in value)
    return value


def infos_to_meta(info: Mapping[str, Any] | None, warnings: list[Any]) -> spaces_v1.MetaMap:
    """Env infos (plus conformance warnings) as a MetaMap; INTERNAL if not convertible."""
    if warnings:
        info = dict(info or {})
        info[META_CONFORMANCE_WARNING] = [*info.get(META_CONFORMANCE_WARNING, []), *warnings]
    if not info:
        return spaces_v1.MetaMap()
    try:
        return python_to_meta(info, path="$.info")
    except MetaConversionError as exc:
        raise WireError(Code.INTERNAL, f"env info cannot be sent: {exc}") from None


def merge_lane_infos(infos: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Several lanes' infos as one vector-style info: per key a list over lanes plus a
    ``_key`` mask of the lanes that set it (one lane: its info unchanged)."""
    if len(infos) == 1:
        return dict(infos[0])
    merged: dict[str, Any] = {}
    for key in dict.fromkeys(k for info in infos for k in info):
        merged[key] = [info.get(key) for info in infos]
        merged[f"_{key}"] = [key in info for info in infos]
    return merged


# --------------------------------------------------------------------------------------------
# Episode tracking (spec §6.3, §6.4)


class LaneState(enum.Enum):
    IDLE = "idle"
    ACTIVE = "active"
    PENDING_AUTORESET = "pending_autoreset"


@attrs.define
class _Episode:
    episode_id: str
    seed: int | None
    start_ns: int
    steps: int = 0
    reward: float = 0.0

    def finish(
        self,
        lane: int,
        terminated: bool,
        truncated: bool,
        final_info: spaces_v1.MetaMap | None,
    ) -> env_v1.EpisodeMetadata:
        return env_v1.EpisodeMetadata(
            episode_id=self.episode_id,
            seed=self.seed,
            env_index=lane,
            step_count=self.steps,
            cumulative_reward=self.reward,
            terminated=terminated,
            truncated=truncated,
            start_timestamp_ns=self.start_ns,
            end_timestamp_ns=time.time_ns(),
            final_info=final_info,
        )


@attrs.define(eq=False)
class StepOutcome:
    """One lane's result of a step, as the tracker needs it."""

    lane: int
    reward: float
    terminated: bool
    truncated: bool
    final_info: spaces_v1.MetaMap | None
    next_episode_id: str = ""
    """The id the runtime pushed for this lane on this step (adopted by a NEXT_STEP roll)."""


@attrs.define(eq=False)
class EpisodeTracker:
    """Episode bookkeeping of one Join session; no I/O, mutations only on success."""

    num_lanes: int
    next_step: bool
    """Whether the env autoresets lanes on the step after they finish (NEXT_STEP)."""
    _states: list[LaneState] = attrs.field(init=False)
    _episodes: list[_Episode | None] = attrs.field(init=False)
    _interrupted: collections.deque[env_v1.EpisodeMetadata] = attrs.field(
        init=False, factory=lambda: collections.deque(maxlen=INTERRUPTED_BUFFER)
    )

    def __attrs_post_init__(self) -> None:
        self._states = [LaneState.IDLE] * self.num_lanes
        self._episodes = [None] * self.num_lanes

    def state(self, lane: int) -> LaneState:
        return self._states[lane]

    def on_reset(
        self, lanes: Sequence[int], episode_ids: Sequence[str], seeds: Sequence[int]
    ) -> None:
        """Lanes were reset: start new episodes, interrupting any still active."""
        now = time.time_ns()
        for position, lane in enumerate(lanes):
            old = self._episodes[lane]
            if old is not None and self._states[lane] is LaneState.ACTIVE:
                self._interrupted.append(old.finish(lane, False, True, None))
            self._episodes[lane] = _Episode(
                episode_id=episode_ids[position] if position < len(episode_ids) else "",
                seed=seeds[position] if position < len(seeds) else None,
                start_ns=now,
            )
            self._states[lane] = LaneState.ACTIVE

    def check_step(self, outcomes: Sequence[StepOutcome]) -> None:
        """Raise INTERNAL for a NEXT_STEP contract violation (spec §6.4); no mutation."""
        if not self.next_step:
            return
        for outcome in outcomes:
            state = self._states[outcome.lane]
            if state is LaneState.IDLE:
                raise WireError(
                    Code.INTERNAL,
                    f"lane {outcome.lane} was stepped before it was reset (NEXT_STEP env)",
                )
            if state is LaneState.PENDING_AUTORESET:
                if outcome.terminated or outcome.truncated:
                    raise WireError(
                        Code.INTERNAL,
                        f"lane {outcome.lane} reported done again on its autoreset step",
                    )
                if outcome.reward != 0.0:
                    raise WireError(
                        Code.INTERNAL,
                        f"lane {outcome.lane} returned reward {outcome.reward} on its autoreset "
                        "step; it must be 0.0",
                    )

    def on_step(self, outcomes: Sequence[StepOutcome]) -> list[env_v1.EpisodeMetadata]:
        """Record a step; returns buffered interrupted episodes then new completions."""
        self.check_step(outcomes)
        completed = list(self._interrupted)
        self._interrupted.clear()
        now = time.time_ns()
        for outcome in outcomes:
            lane = outcome.lane
            state = self._states[lane]
            if state is LaneState.PENDING_AUTORESET:
                self._episodes[lane] = _Episode(outcome.next_episode_id, None, now)
                self._states[lane] = LaneState.ACTIVE
                continue
            episode = self._episodes[lane]
            if state is not LaneState.ACTIVE or episode is None:
                continue
            episode.steps += 1
            episode.reward += outcome.reward
            if outcome.terminated or outcome.truncated:
                completed.append(
                    episode.finish(lane, outcome.terminated, outcome.truncated, outcome.final_info)
                )
                self._episodes[lane] = None
                self._states[lane] = (
                    LaneState.PENDING_AUTORESET if self.next_step else LaneState.IDLE
                )
        return completed

    def on_close(self) -> list[env_v1.EpisodeMetadata]:
        """End the session: buffered interrupted episodes plus every active one, truncated."""
        final = list(self._interrupted)
        self._interrupted.clear()
        for lane, episode in enumerate(self._episodes):
            if episode is not None and self._states[lane] is LaneState.ACTIVE:
                final.append(episode.finish(lane, False, True, None))
        self._episodes = [None] * self.num_lanes
        self._states = [LaneState.IDLE] * self.num_lanes
        return final


def vector_final_info(
    infos: Mapping[str, Any], lane: int, num_lanes: int
) -> Mapping[str, Any] | None:
    """The final info of ``lane`` from a step's infos, by the rules of spec §6.3."""
    if INFO_FINAL_INFO not in infos:
        return infos if num_lanes == 1 else None
    mask = infos.get(INFO_FINAL_INFO_MASK)
    if mask is None:
        flagged = num_lanes == 1
    else:
        try:
            flagged = bool(mask[lane])
        except (IndexError, TypeError, KeyError):
            flagged = False
    if not flagged:
        return None
    value = infos[INFO_FINAL_INFO]
    if isinstance(value, Mapping):
        return value
    if isinstance(value, (list, tuple, np.ndarray)) and lane < len(value):
        item = value[lane]
        return item if isinstance(item, Mapping) else None
    return None


# --------------------------------------------------------------------------------------------
# Backends


def _space_of(value: Any) -> Space:
    return value if isinstance(value, Space) else from_gymnasium(value)


def _env_id(env: Any) -> str:
    spec = getattr(env, "spec", None)
    env_id = getattr(spec, "id", None)
    return env_id if isinstance(env_id, str) and env_id else "UnknownEnv-v1"


def _declared_autoreset(env: Any) -> core_v1.AutoresetMode:
    metadata = getattr(env, "metadata", None)
    if not isinstance(metadata, Mapping) or META_AUTORESET_MODE not in metadata:
        return core_v1.AutoresetMode.DISABLED
    mode = metadata[META_AUTORESET_MODE]
    name = getattr(mode, "value", mode)
    if name == "NextStep":
        return core_v1.AutoresetMode.NEXT_STEP
    if name == "Disabled":
        return core_v1.AutoresetMode.DISABLED
    if name == "SameStep":
        raise ValueError(
            "SAME_STEP autoreset is not supported on rlmesh-wire-v1; build the vector env with "
            "autoreset_mode=AutoresetMode.NEXT_STEP"
        )
    raise ValueError(f"unknown autoreset_mode {mode!r} in env metadata")


@attrs.define(eq=False)
class LaneResult:
    """What one lane's env call returned, plus how long the user code took."""

    observation: Any
    info: Mapping[str, Any]
    user_ns: int
    started_ns: int
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False


def _as_info(info: Any) -> Mapping[str, Any]:
    if info is None:
        return {}
    if not isinstance(info, Mapping):
        raise WireError(Code.INTERNAL, f"env returned info of type {type(info).__name__}")
    return info


class EnvBackend:
    """What the server needs from the env(s) it serves."""

    env_id: str
    observation_space: Space
    action_space: Space
    metadata: Mapping[str, Any]
    num_lanes: int
    render_mode: str | None
    autoreset: core_v1.AutoresetMode
    lanes_individually: bool
    """True for a lane endpoint (``subset_step``); False for a lockstep vector env."""

    def contract(self) -> core_v1.EnvContract:
        from ...protocol import make_env_contract

        return make_env_contract(
            self.env_id,
            self.observation_space,
            self.action_space,
            self.metadata,
            num_envs=self.num_lanes,
            render_mode=self.render_mode,
            autoreset=self.autoreset,
        )

    def close_call(self) -> None:
        raise NotImplementedError


class LaneBackend(EnvBackend):
    """One scalar Gymnasium-style env per lane."""

    def __init__(self, envs: Sequence[Any]) -> None:
        if not envs:
            raise ValueError("serve_env needs at least one env")
        self.envs = list(envs)
        first = self.envs[0]
        self.env_id = _env_id(first)
        self.observation_space = _space_of(first.observation_space)
        self.action_space = _space_of(first.action_space)
        for index, env in enumerate(self.envs[1:], start=1):
            if (
                _space_of(env.observation_space) != self.observation_space
                or _space_of(env.action_space) != self.action_space
            ):
                raise ValueError(f"lane {index} has different spaces from lane 0")
        metadata = getattr(first, "metadata", None)
        self.metadata = dict(metadata) if isinstance(metadata, Mapping) else {}
        self.num_lanes = len(self.envs)
        self.render_mode = getattr(first, "render_mode", None)
        self.autoreset = core_v1.AutoresetMode.DISABLED
        self.lanes_individually = True

    def reset_call(self, lane: int, seed: int | None, options: dict[str, Any] | None) -> LaneResult:
        started = time.perf_counter_ns()
        kwargs: dict[str, Any] = {"seed": seed}
        if options is not None:
            kwargs["options"] = options
        env = self.envs[lane]
        try:
            observation, info = normalize_reset(
                env.reset(**kwargs), getattr(env, "observation_space", None)
            )
        except Exception as exc:
            raise _user_failure("env.reset", exc) from exc
        return LaneResult(observation, _as_info(info), time.perf_counter_ns() - started, started)

    def step_call(self, lane: int, action: Any) -> LaneResult:
        started = time.perf_counter_ns()
        try:
            observation, reward, terminated, truncated, info = normalize_step(
                self.envs[lane].step(action), vector=False
            )
        except Exception as exc:
            raise _user_failure("env.step", exc) from exc
        return LaneResult(
            observation,
            _as_info(info),
            time.perf_counter_ns() - started,
            started,
            float(reward),
            bool(terminated),
            bool(truncated),
        )

    def render_call(self, lane: int) -> Any:
        render = getattr(self.envs[lane], "render", None)
        if render is None:
            return None
        try:
            return render()
        except Exception as exc:
            raise _user_failure("env.render", exc) from exc

    def close_call(self) -> None:
        for env in self.envs:
            close = getattr(env, "close", None)
            if close is not None:
                close()


class VectorBackend(EnvBackend):
    """A Gymnasium vector env stepped in lockstep."""

    def __init__(self, env: Any, autoreset: core_v1.AutoresetMode | None = None) -> None:
        self.env = env
        self.env_id = _env_id(env)
        self.observation_space = _space_of(env.single_observation_space)
        self.action_space = _space_of(env.single_action_space)
        metadata = getattr(env, "metadata", None)
        self.metadata = dict(metadata) if isinstance(metadata, Mapping) else {}
        self.num_lanes = int(env.num_envs)
        self.render_mode = getattr(env, "render_mode", None)
        self.autoreset = _declared_autoreset(env) if autoreset is None else autoreset
        self.lanes_individually = False

    def reset_call(
        self, seeds: Sequence[int], options: dict[str, Any] | None
    ) -> tuple[Any, Mapping[str, Any], int]:
        started = time.perf_counter_ns()
        kwargs: dict[str, Any] = {}
        if seeds:
            kwargs["seed"] = int(seeds[0]) if len(seeds) == 1 else [int(s) for s in seeds]
        if options is not None:
            kwargs["options"] = options
        try:
            observation, info = normalize_reset(
                self.env.reset(**kwargs), getattr(self.env, "observation_space", None)
            )
        except Exception as exc:
            raise _user_failure("env.reset", exc) from exc
        return observation, _as_info(info), time.perf_counter_ns() - started

    def step_call(self, actions: Any) -> tuple[Any, Any, Any, Any, Mapping[str, Any], int]:
        started = time.perf_counter_ns()
        try:
            observation, rewards, terminated, truncated, info = normalize_step(
                self.env.step(actions), vector=True
            )
        except Exception as exc:
            raise _user_failure("env.step", exc) from exc
        return (
            observation,
            rewards,
            terminated,
            truncated,
            _as_info(info),
            (time.perf_counter_ns() - started),
        )

    def render_call(self) -> Any:
        render = getattr(self.env, "render", None)
        if render is None:
            return None
        try:
            frames = render()
        except Exception as exc:
            raise _user_failure("env.render", exc) from exc
        if isinstance(frames, (list, tuple)) and frames:
            return frames[0]
        return frames

    def close_call(self) -> None:
        close = getattr(self.env, "close", None)
        if close is not None:
            close()


def _is_vector_env(env: Any) -> bool:
    return hasattr(env, "num_envs") and hasattr(env, "single_observation_space")


def _is_env(value: Any) -> bool:
    return hasattr(value, "step") and hasattr(value, "reset")


def make_backend(
    env_or_factory: Any,
    *,
    num_envs: int | None = None,
    autoreset: core_v1.AutoresetMode | None = None,
) -> EnvBackend:
    """Pick the backend for what the user passed to ``serve_env``.

    * a Gymnasium vector env → lockstep :class:`VectorBackend`;
    * a scalar env → a one-lane :class:`LaneBackend`;
    * a list or tuple of scalar envs → one lane each;
    * a callable returning a scalar env → ``num_envs`` (default 1) lanes, one call each.

    Raises:
        ValueError: an unusable combination (``num_envs`` with a single env instance, a
            vector env inside a list, SAME_STEP autoreset, ...).
    """
    if num_envs is not None and num_envs < 1:
        raise ValueError(f"num_envs must be >= 1, got {num_envs}")
    if isinstance(env_or_factory, (list, tuple)):
        envs = list(env_or_factory)
        if num_envs is not None and num_envs != len(envs):
            raise ValueError(f"num_envs={num_envs} but {len(envs)} envs were given")
    elif _is_vector_env(env_or_factory):
        if num_envs is not None and num_envs != int(env_or_factory.num_envs):
            raise ValueError(
                f"num_envs={num_envs} but the vector env has {env_or_factory.num_envs} lanes"
            )
        return VectorBackend(env_or_factory, autoreset)
    elif _is_env(env_or_factory):
        if num_envs not in (None, 1):
            raise ValueError("num_envs > 1 needs a factory (a callable returning an env)")
        envs = [env_or_factory]
    elif callable(env_or_factory):
        factory: Callable[[], Any] = env_or_factory
        first = factory()
        if _is_vector_env(first):
            if num_envs not in (None, int(first.num_envs)):
                raise ValueError(f"num_envs={num_envs} but the factory built a vector env")
            return VectorBackend(first, autoreset)
        envs = [first] + [factory() for _ in range((num_envs or 1) - 1)]
    else:
        raise TypeError(
            f"cannot serve a {type(env_or_factory).__name__}: pass an env, a vector env, a "
            "list of envs, or a callable returning an env"
        )
    for index, env in enumerate(envs):
        if _is_vector_env(env):
            raise ValueError(f"lane {index} is a vector env; lanes must be scalar envs")
        if not _is_env(env):
            raise TypeError(f"lane {index} is a {type(env).__name__}, not an env")
    if autoreset is core_v1.AutoresetMode.NEXT_STEP:
        raise ValueError(
            "scalar envs are served with autoreset DISABLED (lanes reset individually); "
            "serve a Gymnasium vector env for NEXT_STEP"
        )
    return LaneBackend(envs)


def validation_policy_from_env(default: ValidationPolicy = "warn") -> ValidationPolicy:
    """``RLMESH_VALIDATION_POLICY`` as the reference reads it (strict, off, else warn)."""
    value = os.environ.get("RLMESH_VALIDATION_POLICY", "").strip().lower()
    if value in ("strict", "off"):
        return value  # type: ignore[return-value]
    return default


# --------------------------------------------------------------------------------------------
# PNG


def _chunk(kind: bytes, data: bytes) -> bytes:
    body = kind + data
    return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)


def encode_png(frame: Any) -> bytes | None:
    """PNG bytes for an image array of shape (H,W), (H,W,3|4) or (3|4,H,W); else None.

    Values are converted to uint8 (floats in [0, 1] are scaled to 0..255).
    """
    if frame is None:
        return None
    image = np.asarray(frame)
    if image.ndim == 3 and image.shape[-1] not in (3, 4) and image.shape[0] in (3, 4):
        image = np.moveaxis(image, 0, -1)
    if image.ndim == 2:
        color_type, channels = 0, 1
    elif image.ndim == 3 and image.shape[-1] in (3, 4):
        channels = image.shape[-1]
        color_type = 2 if channels == 3 else 6
    else:
        return None
    height, width = image.shape[:2]
    if height == 0 or width == 0:
        return None
    if image.dtype.kind == "f":
        scale = 255.0 if image.size and float(np.nanmax(image)) <= 1.0 else 1.0
        image = np.clip(np.nan_to_num(image) * scale, 0, 255)
    elif image.dtype.kind == "b":
        image = image.astype(np.uint8) * 255
    image = np.ascontiguousarray(image.astype(np.uint8)).reshape(height, width * channels)
    # Filter type 0 (none) in front of every row.
    raw = np.zeros((height, width * channels + 1), dtype=np.uint8)
    raw[:, 1:] = image
    header = struct.pack(">IIBBBBB", width, height, 8, color_type, 0, 0, 0)
    return b"".join(
        (
            b"\x89PNG\r\n\x1a\n",
            _chunk(b"IHDR", header),
            _chunk(b"IDAT", zlib.compress(raw.tobytes(), 6)),
            _chunk(b"IEND", b""),
        )
    )
