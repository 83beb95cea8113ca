"""The engine: any object with predict corners, served as a :class:`ModelHandler`.

Theory of operation. One grouped predict is handled in three steps:

1. **Plan.** Each group's route gives its execution horizon ``h`` (1 for an env that
   was never resolved). When fusion is allowed and a batched corner would be the one
   chosen for a lone group anyway, groups with the same ``h`` and the same observation
   space are *fused*: their batches are joined lane-wise and run as one forward.
2. **Dispatch** picks one corner per forward, in this order:

   ======================================  ===========================================
   condition                               corner
   ======================================  ===========================================
   ``h > 1`` and a chunk-batch corner      ``predict_chunk_batch`` once
   ``h > 1`` and a (derived) chunk corner  ``predict_chunk`` per lane
   a (derived) batch corner                ``predict_batch`` once
   otherwise                               ``predict`` per lane
   ======================================  ===========================================

   A corner the model did not write is derived downward from one it did (see
   :mod:`._corners`). Chunks are cut into frames and capped at ``h``.
3. **Finish.** Frame 0 of each lane is this step's action, the rest become replay
   frames, cut to the shortest lane (a receding horizon).

A failure is the group's own :class:`~trio_rlmesh.ModelError`, naming the model, the env
and (when known) the lane, with ``recoverable`` kept from a raised
:class:`~trio_rlmesh.Error`. A fused failure is reported to every group of its forward.

Where the model's code runs. Every call into the model object (``load``, the predict
corners, ``on_episode_end``, ``close``) goes through one worker
(:mod:`trio_rlmesh.runtime._worker`): with ``user_code="thread"`` its own thread, so a
deadline or a cancel can abandon a call that hangs; with ``user_code="inline"`` the trio
thread; with ``user_code="auto"`` (the default) the thread, except that predicts run inline
while the model's recent predicts were quick (an :class:`AdaptiveWorker`). ``load`` runs
once, on the worker, before the first call that needs the model.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import trio

from .._errors import Error, ModelError
from ..adapters import ModelSpec
from ..runtime._internal import (
    ServingUserCode,
    WorkerUnavailable,
    check_serving_user_code,
    new_worker,
)
from ..spaces import Space
from ._corners import Corner, Corners, find_corners
from ._episodes import EpisodeStore, PredictContext
from ._handler import (
    HeldState,
    ModelHandler,
    ModelObservation,
    PredictFrames,
    ResolveOptions,
    RouteContract,
    RouteNeeds,
    RouteSetup,
)
from ._model import Model
from ._tree import (
    concat_batches,
    describe_batch,
    split_batch,
    split_chunk,
    stack_values,
)

__all__ = ["ModelEngine", "as_handler"]

_log = logging.getLogger("trio_rlmesh.model")

INLINE_OPERATIONS = ("model.predict",)
"""What ``user_code="auto"`` may run inline (while the model's recent predicts were quick)."""


def as_handler(
    model: object,
    *,
    name: str | None = None,
    user_code: ServingUserCode | None = None,
    offload: bool | None = None,
) -> ModelHandler:
    """Serve ``model`` as a :class:`ModelHandler`.

    Args:
        model: a :class:`Model` (instance or subclass, instantiated without arguments),
            any object with a ``predict`` method and optionally the other corners,
            ``load``, ``on_episode_end``, ``close``, ``native_chunk`` and
            ``allow_fusion``, or an object that already is a handler (returned as is;
            ``user_code`` does not apply to it).
        name: how errors name the model (default: its class name).
        user_code: where the model's code runs. ``"thread"``: on a worker thread of its
            own, one call at a time, so deadlines (``RuntimeLimits.model_predict_timeout``)
            and cancellation (Ctrl-C) can abandon a call that hangs. ``"inline"``: on the
            trio thread, which saves a thread hand-off per call (tens of µs) but lets a
            blocking call freeze the event loop: no deadline fires and Ctrl-C waits until
            it returns. ``"auto"`` (the default): on the worker thread, except that
            predicts run inline once the model's recent predicts were quick (under 5 ms);
            a slow predict sends them back to the thread (see *Where user code runs* in
            ``docs/embedding.md``).
        offload: the older spelling: ``True`` is ``user_code="thread"``, ``False`` is
            ``"inline"``.

    Raises:
        TypeError: the object has no predict corner.
        ValueError: an unknown ``user_code``, or one that contradicts ``offload``.

    Example:
        >>> class Policy:
        ...     def predict(self, observation):
        ...         return observation
        >>> as_handler(Policy(), user_code="inline").user_code
        'inline'
    """
    if isinstance(model, type):
        model = model()
    if not isinstance(model, Model) and callable(getattr(model, "predict_grouped", None)):
        return model  # type: ignore[return-value]
    return ModelEngine(model, name=name, user_code=user_code, offload=offload)


def _user_code(user_code: ServingUserCode | None, offload: bool | None) -> ServingUserCode:
    if offload is None:
        return "auto" if user_code is None else check_serving_user_code(user_code)
    implied: ServingUserCode = "thread" if offload else "inline"
    if user_code is not None and check_serving_user_code(user_code) != implied:
        raise ValueError(f"offload={offload} contradicts user_code={user_code!r}; pass one")
    return implied


def _model_name(model: object) -> str:
    return getattr(model, "__name__", None) or type(model).__name__


def _episode_end_hook(model: object) -> Callable[[str], None] | None:
    hook = getattr(model, "on_episode_end", None)
    if hook is None or not callable(hook):
        return None
    try:
        params = list(inspect.signature(hook).parameters.values())
    except (TypeError, ValueError):
        params = []
    takes_id = any(
        p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in params
    )
    if takes_id:
        return hook  # type: ignore[no-any-return]
    return lambda _episode_id: hook()


@attrs.define
class _RouteHorizon:
    """A resolved route's contract, and the execution horizon its predicts run with."""

    contract: RouteContract
    horizon: int


class _Failure(Exception):
    """Internal: a user-code failure, with the lane it happened on when known."""

    def __init__(self, cause: BaseException, lane: int | None) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.lane = lane


class _Forward:
    """One dispatch: a batch of ``n`` lanes and what the corners need to run on it."""

    def __init__(
        self,
        engine: ModelEngine,
        groups: Sequence[ModelObservation],
        horizon: int,
    ) -> None:
        self.engine = engine
        self.groups = groups
        self.horizon = horizon
        self.n = groups[0].num_envs if len(groups) == 1 else sum(g.num_envs for g in groups)
        self.observation_space: Space | None = groups[0].observation_space
        self.action_space: Space | None = groups[0].action_space
        self.batch = concat_batches(self.observation_space, [g.observation for g in groups])
        self._lanes: list[Any] | None = None
        self._contexts: list[PredictContext] | None = None

    def lanes(self) -> list[Any]:
        if self._lanes is None:
            if len(self.groups) == 1:
                self._lanes = self.groups[0].lanes()
            else:
                self._lanes = [lane for g in self.groups for lane in g.lanes()]
        return self._lanes

    def contexts(self) -> list[PredictContext]:
        # Built at most once per forward: building one advances the episode's index.
        if self._contexts is None:
            store = self.engine._store
            self._contexts = [
                store.context(g.env_id, e.episode_id, e.seed)
                for g in self.groups
                for e in (g.episodes or ())
            ]
        return self._contexts


class _EngineRoutes:
    """The engine's route setup (kept apart so its ``reset_adapter`` does not double up)."""

    def __init__(self, engine: ModelEngine) -> None:
        self._engine = engine

    async def resolve_adapter(
        self, env_id: str, contract: RouteContract, options: ResolveOptions
    ) -> RouteNeeds:
        engine = self._engine
        if not engine._loaded:
            await engine.load()
        return engine._resolve(env_id, contract, options)

    async def reset_adapter(self, env_id: str, episode_ids: Sequence[str]) -> None:
        # The engine keeps no route-level frame buffers; episode state lives in the
        # handler's own reset_adapter.
        return None

    async def release_adapter(self, env_id: str) -> None:
        self._engine._routes.pop(env_id, None)


class ModelEngine:
    """The handler :func:`as_handler` builds around a model object (same arguments)."""

    def __init__(
        self,
        model: object,
        *,
        name: str | None = None,
        user_code: ServingUserCode | None = None,
        offload: bool | None = None,
    ) -> None:
        self.model = model
        self.name = name or _model_name(model)
        self.user_code: ServingUserCode = _user_code(user_code, offload)
        """Where the model's code runs: ``"auto"``, ``"thread"`` or ``"inline"``."""
        self._worker = new_worker(
            self.user_code, f"model {self.name!r}", inline_operations=INLINE_OPERATIONS
        )
        self._loaded = False
        self._load_lock = trio.Lock()
        self._load_error: ModelError | None = None
        self._corners: Corners = find_corners(model)
        self._routes: dict[str, _RouteHorizon] = {}
        self._store = EpisodeStore(_episode_end_hook(model))
        self._route_setup = _EngineRoutes(self)
        self._adapter_ns = 0
        self._closed = False
        self._allow_fusion = bool(getattr(model, "allow_fusion", True))
        if getattr(type(model), "native_chunk", None) is not None and not self._corners.has_chunk:
            raise TypeError(
                f"{self.name} declares native_chunk but defines no predict_chunk() or "
                "predict_chunk_batch(); add a chunk corner or drop native_chunk"
            )

    # ------------------------------------------------------------------ handler surface

    @property
    def runs_inline(self) -> bool:
        """Whether :meth:`predict_grouped` made now returns without yielding.

        True while the engine is loaded and open in ``user_code="inline"`` mode, and in
        ``"auto"`` mode while its worker runs predicts inline: the in-process adapter then
        tells the driver it may skip its cancel scope.
        """
        return self._loaded and not self._closed and self._worker.runs_inline("model.predict")

    def route_setup(self) -> RouteSetup:
        return self._route_setup

    async def predict_grouped(
        self, observations: list[ModelObservation]
    ) -> list[PredictFrames | Error]:
        if not self._loaded:
            await self.load()
        try:
            return await self._worker.run("model.predict", self.predict_grouped_sync, observations)
        except WorkerUnavailable as exc:
            raise exc.as_error(ModelError) from exc

    async def reset_adapter(self, env_id: str, episode_ids: Sequence[str]) -> None:
        if not self._loaded:
            await self.load()
        try:
            await self._worker.run(
                "model.reset_adapter", self.reset_adapter_sync, env_id, list(episode_ids)
            )
        except WorkerUnavailable as exc:
            raise exc.as_error(ModelError) from exc

    async def load(self) -> None:
        """Run the model's ``load`` now, once, on its worker (a server calls this at startup).

        Without it, the first call that needs the model (a route resolve, a predict)
        loads it first. A failed load is remembered: every later call raises the same
        :class:`~trio_rlmesh.ModelError` (operation ``model.load``).
        """
        async with self._load_lock:
            if self._loaded:
                return
            try:
                await self._worker.run("model.load", self._load_sync)
            except WorkerUnavailable as exc:
                raise exc.as_error(ModelError) from exc

    def _load_sync(self) -> None:
        """The body of :meth:`load` (inline mode may also run it straight from a predict)."""
        if self._loaded:
            return
        if self._load_error is not None:
            raise self._load_error
        load = getattr(self.model, "load", None)
        if callable(load):
            try:
                load()
            except Exception as exc:
                self._load_error = ModelError(
                    f"model {self.name!r} failed to load: {type(exc).__name__}: {exc}",
                    operation="model.load",
                    code="INTERNAL",
                )
                raise self._load_error from exc
        self._loaded = True

    def take_adapter_ns(self) -> int:
        taken, self._adapter_ns = self._adapter_ns, 0
        return taken

    def held_state(self) -> HeldState:
        return HeldState(episodes=len(self._store), bytes=self._store.held_bytes())

    async def close(self) -> None:
        """Run the model's ``close`` once, as the worker's last call.

        Closing never waits for user code that does not return: when an abandoned call
        (a hung predict) still occupies the model, its ``close`` is skipped and a warning
        is logged. Bound the call with a cancel scope of your own: a ``close`` that
        hangs is abandoned like any call.
        """
        if self._closed:
            return
        self._closed = True
        self._store.clear()
        self._routes.clear()
        close = getattr(self.model, "close", None)
        try:
            await self._worker.aclose("model.close", close if callable(close) else None)
        except WorkerUnavailable as exc:
            _log.warning("%s; its close() was skipped", exc)

    # ------------------------------------------------------------------ routes

    @property
    def spec(self) -> ModelSpec | None:
        """The model's :class:`~trio_rlmesh.adapters.ModelSpec` (its ``spec`` attribute,
        read live: ``load`` may set it), or ``None`` when it declares none.

        A model host resolves it against each route's env tags and applies the adapter on
        every predict, so the model's code sees its own payload.
        """
        return getattr(self.model, "spec", None)

    def metadata(self) -> dict[str, Any]:
        """What the model publishes about itself: its spec under
        :data:`~trio_rlmesh.adapters.MODEL_METADATA_KEY` (as ``spec.to_metadata()``, where
        RLMesh's model envelope carries it), or nothing."""
        spec = self.spec
        return spec.to_metadata() if isinstance(spec, ModelSpec) else {}

    def native_chunk(self) -> int | None:
        """The model's declared chunk length (read live: ``load`` may set it)."""
        value = getattr(self.model, "native_chunk", None)
        return None if value is None else int(value)

    def _resolve(self, env_id: str, contract: RouteContract, options: ResolveOptions) -> RouteNeeds:
        horizon = max(1, int(options.execution_horizon))
        native = self.native_chunk()
        if native is not None and native < 1:
            raise ModelError(
                f"model {self.name} declares native_chunk={native}; it must be >= 1",
                code="INVALID_REQUEST",
            )
        if horizon > 1 and not self._corners.has_chunk:
            _log.warning(
                "execution_horizon=%d requested for env %s but model %s has no chunk corner; "
                "it will predict one action per step",
                horizon,
                env_id,
                self.name,
            )
        if native is not None and horizon > native:
            raise ModelError(
                f"execution_horizon={horizon} exceeds model {self.name}'s native_chunk={native}: "
                f"the model cannot supply {horizon} actions per predict",
                code="INVALID_REQUEST",
            )
        self._routes[env_id] = _RouteHorizon(contract, horizon)
        return RouteNeeds(history=None, native_chunk=native)

    def reset_adapter_sync(self, env_id: str, episode_ids: Sequence[str]) -> None:
        """Drop per-episode state; each named episode also fires ``on_episode_end``."""
        if not episode_ids:
            self._store.drop_env(env_id)
            return
        for episode_id in episode_ids:
            self._store.end(episode_id)

    # ------------------------------------------------------------------ predict

    def _horizon(self, group: ModelObservation) -> int:
        route = self._routes.get(group.env_id)
        return route.horizon if route is not None else 1

    def _plain_predict(self, horizon: int) -> bool:
        """Whether ``_dispatch`` sends each lane to the authored ``predict`` corner."""
        corners = self._corners
        return (
            corners.predict is not None
            and not corners.has_batch
            and (horizon == 1 or not corners.has_chunk)
        )

    def _fuses(self, horizon: int) -> bool:
        corners = self._corners
        if horizon > 1:
            return corners.has_chunk_batch or (not corners.has_chunk and corners.has_batch)
        return corners.has_batch

    def predict_grouped_sync(
        self, observations: Sequence[ModelObservation]
    ) -> list[PredictFrames | Error]:
        """The synchronous body of :meth:`predict_grouped` (what a worker thread runs)."""
        if not self._loaded:
            self._load_sync()
        started = time.perf_counter_ns()
        self._user_ns = 0
        if len(observations) == 1:
            # A lone group (every single-env run): there is nothing to bucket or fuse.
            group = observations[0]
            answers = [self._run_one(group, self._horizon(group))]
        else:
            answers = self._run_groups(observations)
        self._adapter_ns += max(0, time.perf_counter_ns() - started - self._user_ns)
        return answers

    def _run_groups(self, observations: Sequence[ModelObservation]) -> list[PredictFrames | Error]:
        """Several groups: fuse the ones that can share a forward, run the rest alone."""
        results: list[PredictFrames | Error | None] = [None] * len(observations)
        solo: list[int] = list(range(len(observations)))
        if self._allow_fusion and len(observations) > 1:
            buckets: dict[tuple[int, Space | None], list[int]] = {}
            for index, group in enumerate(observations):
                horizon = self._horizon(group)
                if self._fuses(horizon):
                    key = (horizon, group.observation_space)
                    buckets.setdefault(key, []).append(index)
            solo = []
            fused = {i for members in buckets.values() if len(members) > 1 for i in members}
            solo = [i for i in range(len(observations)) if i not in fused]
            for (horizon, _), members in buckets.items():
                if len(members) > 1:
                    self._run_fused(observations, members, horizon, results)
        for index in solo:
            group = observations[index]
            results[index] = self._run_one(group, self._horizon(group))
        return [
            r if r is not None else ModelError("grouped predict left a group unserved")
            for r in results
        ]

    def _run_one(self, group: ModelObservation, horizon: int) -> PredictFrames | Error:
        try:
            corner = self._corners.predict
            if corner is not None and len(group.episodes) <= 1 and self._plain_predict(horizon):
                # The common case: one lane through the authored predict. This is the path
                # _dispatch and _predict take for it, without their per-lane lists (and
                # without the forward, unless the corner asks for its context).
                context = (
                    _Lazy(_Forward(self, [group], horizon), [0], single=True)
                    if corner.takes_context
                    else None
                )
                action = self._user(corner, group.lanes()[0], 1, context, 0)
                return PredictFrames([action], [])
            forward = _Forward(self, [group], horizon)
            if horizon == 1 and self._corners.has_batch:
                # A batch corner at horizon 1: what _dispatch and _finish make of it, without
                # the per-lane frame lists, so the actions keep the batch the model returned
                # (a LaneRows), which the encoder then takes whole.
                n = group.num_envs
                actions = self._batch(forward, forward.batch, n, None)
                if len(actions) != n:
                    return self._finish([[action] for action in actions], n)
                return PredictFrames(actions, [])
            frames = self._dispatch(forward)
            return self._finish(frames, group.num_envs)
        except _Failure as failure:
            return self._error(failure.cause, group, failure.lane)
        except Exception as exc:  # a malformed group (bad observation structure)
            return self._error(exc, group, None)

    def _run_fused(
        self,
        observations: Sequence[ModelObservation],
        members: list[int],
        horizon: int,
        results: list[PredictFrames | Error | None],
    ) -> None:
        groups = [observations[i] for i in members]
        try:
            forward = _Forward(self, groups, horizon)
            frames = self._dispatch(forward)
        except Exception as exc:
            cause = exc.cause if isinstance(exc, _Failure) else exc
            for index, group in zip(members, groups, strict=True):
                results[index] = self._error(cause, group, None)
            return
        offset = 0
        for index, group in zip(members, groups, strict=True):
            part = frames[offset : offset + group.num_envs]
            offset += group.num_envs
            try:
                results[index] = self._finish(part, group.num_envs)
            except _Failure as failure:
                results[index] = self._error(failure.cause, group, failure.lane)

    def _error(self, cause: BaseException, group: ModelObservation, lane: int | None) -> ModelError:
        where = f"model {self.name!r} failed on {group.env_label}"
        if lane is not None:
            where += f" lane {lane}"
        detail = cause.message if isinstance(cause, Error) else f"{type(cause).__name__}: {cause}"
        try:
            signature = describe_batch(group.observation, group.num_envs)
        except Exception:  # the signature is a courtesy; never mask the real error
            signature = f"lanes: {group.num_envs}"
        recoverable = cause.recoverable if isinstance(cause, Error) else False
        error = ModelError(
            f"{where}: {detail}\n{signature}",
            recoverable=recoverable,
            operation="model.predict",
            lane=lane,
            code="INTERNAL",
        )
        error.__cause__ = cause
        return error

    def _finish(self, lane_frames: list[list[Any]], n: int) -> PredictFrames:
        """Frame 0 of every lane, then the replay frames cut to the shortest lane."""
        if len(lane_frames) != n:
            raise _Failure(
                ValueError(f"the model produced {len(lane_frames)} actions for {n} lanes"), None
            )
        replay_len = min(len(frames) for frames in lane_frames) - 1
        return PredictFrames(
            actions=[frames[0] for frames in lane_frames],
            replay=[[frames[j] for frames in lane_frames] for j in range(1, replay_len + 1)],
        )

    # -- corners

    def _user(
        self, corner: Corner, inputs: Any, horizon: int, context: _Lazy | None, lane: int | None
    ) -> Any:
        try:
            resolved = context.resolve() if context is not None and corner.takes_context else None
        except Error as exc:
            raise _Failure(exc, lane) from exc
        started = time.perf_counter_ns()
        try:
            return corner.call(inputs, horizon, resolved)
        except Exception as exc:
            raise _Failure(exc, lane) from exc
        finally:
            self._user_ns += time.perf_counter_ns() - started

    def _frames(self, chunk: Any, horizon: int, lane: int | None) -> list[Any]:
        try:
            frames = split_chunk(chunk)
        except ValueError as exc:
            raise _Failure(exc, lane) from exc
        native = self.native_chunk()
        if native is not None and len(frames) != native:
            raise _Failure(
                ValueError(
                    f"the model declares native_chunk={native} but its chunk corner returned "
                    f"{len(frames)} frames; return the whole native chunk (the runtime "
                    "executes its prefix) or drop the declaration"
                ),
                lane,
            )
        if not frames:
            raise _Failure(ValueError("a chunked model returned an empty action chunk"), lane)
        return frames[:horizon]

    def _dispatch(self, fw: _Forward) -> list[list[Any]]:
        """One forward over ``fw``: a list of frames per lane."""
        corners, h, n = self._corners, fw.horizon, fw.n
        if h > 1 and corners.predict_chunk_batch is not None:
            chunks = self._split(
                self._user(corners.predict_chunk_batch, fw.batch, h, _Lazy(fw), None),
                n,
                None,
                "predict_chunk_batch",
                "chunks",
            )
            return [self._frames(chunk, h, lane) for lane, chunk in enumerate(chunks)]
        if h > 1 and corners.has_chunk:
            lanes = fw.lanes()
            return [self._frames(self._chunk(fw, lanes[i], i, h), h, i) for i in range(n)]
        if corners.has_batch:
            return [[action] for action in self._batch(fw, fw.batch, n, None)]
        lanes = fw.lanes()
        return [[self._predict(fw, lanes[i], i)] for i in range(n)]

    def _split(self, value: Any, n: int, space: Space | None, corner: str, what: str) -> list[Any]:
        try:
            return split_batch(value, n, space)
        except (ValueError, Error) as exc:
            raise _Failure(
                ValueError(f"{corner} returned {what} that do not split into {n} lanes: {exc}"),
                None,
            ) from exc

    def _batch(self, fw: _Forward, batch: Any, n: int, rows: list[int] | None) -> list[Any]:
        """Actions for a batch via predict_batch, or de-chunked predict_chunk_batch."""
        corners = self._corners
        context = _Lazy(fw, rows)
        if corners.predict_batch is not None:
            out = self._user(corners.predict_batch, batch, 1, context, None)
            return self._split(out, n, fw.action_space, "predict_batch", "actions")
        assert corners.predict_chunk_batch is not None
        out = self._user(corners.predict_chunk_batch, batch, 1, context, None)
        chunks = self._split(out, n, None, "predict_chunk_batch", "chunks")
        return [self._frames(chunk, 1, None)[0] for chunk in chunks]

    def _chunk(self, fw: _Forward, lane_value: Any, lane: int, horizon: int) -> Any:
        """One lane's chunk via predict_chunk, or a one-lane predict_chunk_batch."""
        corners = self._corners
        if corners.predict_chunk is not None:
            return self._user(
                corners.predict_chunk, lane_value, horizon, _Lazy(fw, [lane], single=True), lane
            )
        assert corners.predict_chunk_batch is not None
        batch = stack_values(fw.observation_space, [lane_value])
        out = self._user(corners.predict_chunk_batch, batch, horizon, _Lazy(fw, [lane]), lane)
        return self._split(out, 1, None, "predict_chunk_batch", "chunks")[0]

    def _predict(self, fw: _Forward, lane_value: Any, lane: int) -> Any:
        """One lane's action via predict, or derived from predict_batch / predict_chunk."""
        corners = self._corners
        if corners.predict is not None:
            return self._user(corners.predict, lane_value, 1, _Lazy(fw, [lane], single=True), lane)
        if corners.has_batch:
            batch = stack_values(fw.observation_space, [lane_value])
            try:
                return self._batch(fw, batch, 1, [lane])[0]
            except _Failure as failure:
                raise _Failure(failure.cause, lane) from failure.cause
        return self._frames(self._chunk(fw, lane_value, lane, 1), 1, lane)[0]


class _Lazy:
    """A context argument built only if the corner asks for it (see ``Corner.call``)."""

    __slots__ = ("_forward", "_rows", "_single")

    def __init__(self, forward: _Forward, rows: list[int] | None = None, *, single: bool = False):
        self._forward = forward
        self._rows = rows
        self._single = single

    def resolve(self) -> Any:
        contexts = self._forward.contexts()
        if self._rows is not None:
            contexts = [contexts[i] for i in self._rows]
        return contexts[0] if self._single else contexts
