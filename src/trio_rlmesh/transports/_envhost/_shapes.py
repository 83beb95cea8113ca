"""What a user hands the env host, and how its code is called.

Two shapes: :class:`LaneEnvs`, one scalar env per lane, each lane reset and stepped on its
own (a lane endpoint, ``subset_step``); and :class:`VectorEnv`, one Gymnasium vector env
stepped in lockstep. Every call into user code goes through a ``*_call`` method: it
normalises what the env returned (old Gym API included, see ``transports._gym_compat``),
measures the time spent in user code, and turns the env's own exceptions into an
INTERNAL :class:`~._errors.WireError`. The I/O layers run these calls where they choose
(a worker thread per lane, or inline); nothing here blocks on anything but user code.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from ..._errors import SpecError
from ...protocol import core_v1, make_env_contract
from ...protocol._internal import META_AUTORESET_MODE
from ...runtime._internal import check_count
from ...spaces import Space, from_gymnasium
from .._gym_compat import normalize_reset, normalize_step
from ._errors import Code, WireError, user_failure

__all__ = ["EnvShape", "LaneEnvs", "LaneResult", "VectorEnv", "open_shape"]


def _space_of(value: Any) -> Space:
    return value if isinstance(value, Space) else from_gymnasium(value)


def _env_id(env: Any) -> str:
    spec = getattr(env, "spec", None)
    env_id = getattr(spec, "id", None)
    return env_id if isinstance(env_id, str) and env_id else "UnknownEnv-v1"


def declared_autoreset(env: Any) -> core_v1.AutoresetMode:
    """The autoreset mode an env's ``metadata["autoreset_mode"]`` declares.

    As RLMesh 0.1.0 reads it: no key means DISABLED; ``NextStep``/``Disabled`` (the
    Gymnasium enum or its value); a key that is ``None``, SAME_STEP, or anything else is a
    :class:`~trio_rlmesh.SpecError` saying what to do.
    """
    metadata = getattr(env, "metadata", None)
    if not isinstance(metadata, Mapping) or META_AUTORESET_MODE not in metadata:
        return core_v1.AutoresetMode.DISABLED
    mode = metadata[META_AUTORESET_MODE]
    if mode is None:
        raise SpecError(
            'metadata["autoreset_mode"] is present but None; set it to a Gymnasium '
            "AutoresetMode (or omit the key for DISABLED)"
        )
    name = getattr(mode, "value", mode)
    if name == "NextStep":
        return core_v1.AutoresetMode.NEXT_STEP
    if name == "Disabled":
        return core_v1.AutoresetMode.DISABLED
    if name == "SameStep":
        raise SpecError(
            "SAME_STEP autoreset is not supported on rlmesh-wire-v1; build the vector env with "
            "autoreset_mode=AutoresetMode.NEXT_STEP (or DISABLED)"
        )
    raise SpecError(f"unknown autoreset_mode {mode!r} in the env's metadata")


@attrs.define(eq=False)
class LaneResult:
    """What one env call returned (normalised), and how long the user code took.

    For a vector env the fields hold the whole batch (``reward`` and the flags as arrays).
    """

    observation: Any
    info: Mapping[str, Any]
    user_ns: int
    started_ns: int
    reward: Any = 0.0
    terminated: Any = False
    truncated: Any = False


def _as_info(info: Any) -> Mapping[str, Any]:
    if info is None:
        return {}
    if not isinstance(info, Mapping):
        raise WireError(Code.INTERNAL, f"env returned info of type {type(info).__name__}")
    return info


def _reset_kwargs(seed: Any, options: dict[str, Any] | None) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"seed": seed}
    if options is not None:
        kwargs["options"] = options
    return kwargs


class EnvShape:
    """What the host needs from the env(s): spaces, lanes, modes and the calls."""

    env_id: str
    observation_space: Space
    action_space: Space
    metadata: Mapping[str, Any]
    num_lanes: int
    render_mode: str | None
    autoreset: core_v1.AutoresetMode
    lanes_individually: bool
    """True for a lane endpoint (``subset_step``); False for a lockstep vector env."""

    @property
    def gym_spec(self) -> Any:
        """The Gymnasium ``EnvSpec`` that makes this env again (``gymnasium.make(spec)``),
        or ``None``: an env not made from a registered id, or a vector env (whose spec
        describes the batch, not one env)."""
        return None

    def contract(self) -> core_v1.EnvContract:
        """The env contract a server sends at handshake."""
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
        """Close the env(s) (user code)."""
        raise NotImplementedError


class LaneEnvs(EnvShape):
    """One scalar Gymnasium-style env per lane."""

    @property
    def gym_spec(self) -> Any:
        spec = getattr(self.envs[0], "spec", None)
        # Old-Gym envs carry a spec of their own kind: only Gymnasium's makes the env again.
        return spec if type(spec).__module__.startswith("gymnasium.") else None

    def __init__(self, envs: Sequence[Any], env_name: str | None = None) -> None:
        if not envs:
            raise SpecError("an env host needs at least one env")
        self.envs = list(envs)
        first = self.envs[0]
        self.env_id = env_name or _env_id(first)
        self.observation_space = _space_of(first.observation_space)
        self.action_space = _space_of(first.action_space)
        for index, env in enumerate(self.envs[1:], start=1):
            if (
                _space_of(env.observation_space) != self.observation_space
                or _space_of(env.action_space) != self.action_space
            ):
                raise SpecError(f"lane {index} has different spaces from lane 0")
        metadata = getattr(first, "metadata", None)
        self.metadata = dict(metadata) if isinstance(metadata, Mapping) else {}
        self.num_lanes = len(self.envs)
        self.render_mode = getattr(first, "render_mode", None)
        self.autoreset = core_v1.AutoresetMode.DISABLED
        self.lanes_individually = True
        self._reset_spaces = [getattr(env, "observation_space", None) for env in self.envs]

    def reset_call(self, lane: int, seed: int | None, options: dict[str, Any] | None) -> LaneResult:
        started = time.perf_counter_ns()
        try:
            observation, info = normalize_reset(
                self.envs[lane].reset(**_reset_kwargs(seed, options)), self._reset_spaces[lane]
            )
        except Exception as exc:
            raise user_failure("env.reset", exc) from exc
        return LaneResult(observation, _as_info(info), time.perf_counter_ns() - started, started)

    def step_call(self, lane: int, action: Any) -> LaneResult:
        started = time.perf_counter_ns()
        try:
            observation, reward, terminated, truncated, info = normalize_step(
                self.envs[lane].step(action), vector=False
            )
        except Exception as exc:
            raise user_failure("env.step", exc) from exc
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
            raise user_failure("env.render", exc) from exc

    def close_call(self) -> None:
        for env in self.envs:
            close = getattr(env, "close", None)
            if close is not None:
                close()


class VectorEnv(EnvShape):
    """A Gymnasium vector env stepped in lockstep."""

    def __init__(
        self,
        env: Any,
        autoreset: core_v1.AutoresetMode | None = None,
        env_name: str | None = None,
    ) -> None:
        self.env = env
        self.env_id = env_name or _env_id(env)
        self.observation_space = _space_of(env.single_observation_space)
        self.action_space = _space_of(env.single_action_space)
        metadata = getattr(env, "metadata", None)
        self.metadata = dict(metadata) if isinstance(metadata, Mapping) else {}
        self.num_lanes = int(env.num_envs)
        self.render_mode = getattr(env, "render_mode", None)
        self.autoreset = declared_autoreset(env) if autoreset is None else autoreset
        self.lanes_individually = False
        self._reset_space = getattr(env, "observation_space", None)

    def reset_call(self, seeds: Sequence[int], options: dict[str, Any] | None) -> LaneResult:
        started = time.perf_counter_ns()
        seed: int | list[int] | None = None
        if seeds:
            seed = int(seeds[0]) if len(seeds) == 1 else [int(s) for s in seeds]
        try:
            observation, info = normalize_reset(
                self.env.reset(**_reset_kwargs(seed, options)), self._reset_space
            )
        except Exception as exc:
            raise user_failure("env.reset", exc) from exc
        return LaneResult(observation, _as_info(info), time.perf_counter_ns() - started, started)

    def step_call(self, actions: Any) -> LaneResult:
        started = time.perf_counter_ns()
        try:
            observation, rewards, terminated, truncated, info = normalize_step(
                self.env.step(actions), vector=True
            )
        except Exception as exc:
            raise user_failure("env.step", exc) from exc
        return LaneResult(
            observation,
            _as_info(info),
            time.perf_counter_ns() - started,
            started,
            rewards,
            terminated,
            truncated,
        )

    def render_call(self) -> Any:
        render = getattr(self.env, "render", None)
        if render is None:
            return None
        try:
            frames = render()
        except Exception as exc:
            raise user_failure("env.render", exc) from exc
        if isinstance(frames, (list, tuple)) and frames:
            return frames[0]
        return frames

    def close_call(self) -> None:
        close = getattr(self.env, "close", None)
        if close is not None:
            close()


def is_vector_env(env: Any) -> bool:
    """Whether ``env`` is a (Gymnasium-style) vector env."""
    return hasattr(env, "num_envs") and hasattr(env, "single_observation_space")


def _is_env(value: Any) -> bool:
    return hasattr(value, "step") and hasattr(value, "reset")


def open_shape(
    env_or_factory: Any,
    *,
    num_envs: int | None = None,
    autoreset: core_v1.AutoresetMode | None = None,
    env_name: str | None = None,
) -> EnvShape:
    """Pick the shape for what the user passed (this may call a factory: user code).

    * a Gymnasium vector env → lockstep :class:`VectorEnv`;
    * a scalar env → a one-lane :class:`LaneEnvs`;
    * a list or tuple of scalar envs → one lane each;
    * a callable returning a scalar env → ``num_envs`` (default 1) lanes, one call each.

    Raises:
        SpecError: an unusable combination (``num_envs`` with a single env instance, a
            vector env inside a list, SAME_STEP autoreset, NEXT_STEP declared for scalar
            envs, something that is not an env, ...), saying what to do.
    """
    check_count("num_envs", num_envs)
    if isinstance(env_or_factory, (list, tuple)):
        envs = list(env_or_factory)
        if num_envs is not None and num_envs != len(envs):
            raise SpecError(f"num_envs={num_envs} but {len(envs)} envs were given")
    elif is_vector_env(env_or_factory):
        if num_envs is not None and num_envs != int(env_or_factory.num_envs):
            raise SpecError(
                f"num_envs={num_envs} but the vector env has {env_or_factory.num_envs} lanes"
            )
        return VectorEnv(env_or_factory, autoreset, env_name)
    elif _is_env(env_or_factory):
        if num_envs not in (None, 1):
            raise SpecError(
                f"num_envs={num_envs} needs a factory (a class, or a callable returning an "
                f"env; one env per lane), not one env object ({type(env_or_factory).__name__})"
            )
        envs = [env_or_factory]
    elif callable(env_or_factory):
        factory: Callable[[], Any] = env_or_factory
        first = factory()
        if is_vector_env(first):
            if num_envs not in (None, int(first.num_envs)):
                raise SpecError(f"num_envs={num_envs} but the factory built a vector env")
            return VectorEnv(first, autoreset, env_name)
        envs = [first] + [factory() for _ in range((num_envs or 1) - 1)]
    else:
        raise SpecError(
            f"cannot host a {type(env_or_factory).__name__}: pass an env, a vector env, a "
            "list of envs, or a callable returning an env"
        )
    for index, env in enumerate(envs):
        if is_vector_env(env):
            raise SpecError(f"lane {index} is a vector env; lanes must be scalar envs")
        if not _is_env(env):
            raise SpecError(f"lane {index} is a {type(env).__name__}, not an env")
    if autoreset is core_v1.AutoresetMode.NEXT_STEP:
        raise SpecError(
            "scalar envs are hosted with autoreset DISABLED (lanes reset individually); "
            "host a Gymnasium vector env for NEXT_STEP"
        )
    return LaneEnvs(envs, env_name)
