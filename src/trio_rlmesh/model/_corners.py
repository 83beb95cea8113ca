"""Finding a model's predict corners and bringing them to one calling convention.

The four corners form a 2x2 lattice (batched or not, chunked or not). An author writes
any subset; the engine derives the rest *downward* only: a single-lane corner from its
batched sibling (run a batch of one, take lane 0), an un-chunked corner from its chunked
sibling (ask for horizon 1, take frame 0). Going up a chunk axis is impossible (chunking
is a model capability) and going up the batch axis is the engine's per-lane loop.

Signatures are read once, here:

* a trailing positional parameter literally named ``context`` (or ``*args``) asks for the
  :class:`~trio_rlmesh.model.PredictContext` (a list of them for a batched corner);
* a chunk corner receives the execution horizon as its second positional parameter, or by
  keyword when it declares a keyword-only ``execution_horizon``; otherwise it is not told.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Literal

import attrs

__all__ = ["CORNER_NAMES", "Corner", "Corners", "accepts_context", "find_corners"]

CORNER_NAMES = ("predict", "predict_chunk", "predict_batch", "predict_chunk_batch")


def _parameters(fn: Callable[..., Any]) -> list[inspect.Parameter] | None:
    try:
        return list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None


def _positional(params: list[inspect.Parameter]) -> list[inspect.Parameter]:
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p for p in params if p.kind in kinds]


def accepts_context(fn: Callable[..., Any], base_arity: int) -> bool:
    """Whether ``fn`` takes a ``context`` right after its ``base_arity`` positional inputs."""
    params = _parameters(fn)
    if params is None:
        return False
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params):
        return True
    positional = _positional(params)
    return len(positional) > base_arity and positional[base_arity].name == "context"


def _horizon_mode(fn: Callable[..., Any]) -> Literal["positional", "keyword"] | None:
    params = _parameters(fn)
    if params is None:
        return None
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params):
        return "positional"
    if len([p for p in _positional(params) if p.name != "context"]) >= 2:
        return "positional"
    if any(
        p.kind is inspect.Parameter.KEYWORD_ONLY and p.name == "execution_horizon" for p in params
    ):
        return "keyword"
    return None


@attrs.frozen
class Corner:
    """One authored corner, called as ``call(inputs, horizon, context)``.

    ``horizon`` is ignored by un-chunked corners; ``context`` is passed on only when
    ``takes_context`` (it is a list, row-aligned, for batched corners).
    """

    fn: Callable[..., Any]
    chunked: bool
    takes_context: bool
    horizon_mode: Literal["positional", "keyword"] | None = None

    @classmethod
    def of(cls, fn: Callable[..., Any], *, chunked: bool) -> Corner:
        mode = _horizon_mode(fn) if chunked else None
        arity = 2 if mode == "positional" else 1
        return cls(fn, chunked, accepts_context(fn, arity), mode)

    def call(self, inputs: Any, horizon: int, context: Any) -> Any:
        if self.horizon_mode is None and not self.takes_context:
            return self.fn(inputs)
        args: list[Any] = [inputs]
        if self.horizon_mode == "positional":
            args.append(horizon)
        if self.takes_context:
            args.append(context)
        if self.horizon_mode == "keyword":
            return self.fn(*args, execution_horizon=horizon)
        return self.fn(*args)


@attrs.frozen
class Corners:
    """The corners an object authored (``None`` = not authored)."""

    predict: Corner | None
    predict_chunk: Corner | None
    predict_batch: Corner | None
    predict_chunk_batch: Corner | None

    @property
    def has_chunk_batch(self) -> bool:
        return self.predict_chunk_batch is not None

    @property
    def has_chunk(self) -> bool:
        """A per-lane chunk corner exists (authored, or derived from the chunk-batch one)."""
        return self.predict_chunk is not None or self.predict_chunk_batch is not None

    @property
    def has_batch(self) -> bool:
        """A batched un-chunked corner exists (authored, or de-chunked from chunk-batch)."""
        return self.predict_batch is not None or self.predict_chunk_batch is not None


def _authored(obj: object, name: str) -> Callable[..., Any] | None:
    from ._model import Model

    fn = getattr(obj, name, None)
    if fn is None or not callable(fn):
        return None
    if isinstance(obj, Model) and getattr(type(obj), name, None) is getattr(Model, name):
        return None  # the base class placeholder, not an authored corner
    return fn  # type: ignore[no-any-return]


def find_corners(obj: object) -> Corners:
    """Read the corners ``obj`` authored.

    Raises:
        TypeError: no corner ``predict`` can be derived from.
    """
    found = {name: _authored(obj, name) for name in CORNER_NAMES}
    corners = Corners(
        predict=Corner.of(found["predict"], chunked=False) if found["predict"] else None,
        predict_chunk=(
            Corner.of(found["predict_chunk"], chunked=True) if found["predict_chunk"] else None
        ),
        predict_batch=(
            Corner.of(found["predict_batch"], chunked=False) if found["predict_batch"] else None
        ),
        predict_chunk_batch=(
            Corner.of(found["predict_chunk_batch"], chunked=True)
            if found["predict_chunk_batch"]
            else None
        ),
    )
    if not any(found.values()):
        raise TypeError(
            f"{type(obj).__name__} has no predict corner: define predict(observation), or "
            "one of predict_batch, predict_chunk, predict_chunk_batch"
        )
    return corners
