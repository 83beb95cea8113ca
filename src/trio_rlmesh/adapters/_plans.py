"""Plans: what resolution decided, as plain frozen data.

A plan holds only decisions (which env leaf, which slice, which conversion, which constants);
it never holds per-episode state (that is :mod:`._history`) and never re-validates. Applying
a plan is a straight line of numpy operations (:mod:`._apply`); ``explain()`` renders plans
(:mod:`._describe`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

import attrs
import numpy as np
import numpy.typing as npt

from ._advice import Advisory
from ._rotation import RotationConversion

__all__ = [
    "ActionPlan",
    "ActionSegment",
    "AdapterPlan",
    "ConstPiece",
    "CustomPlan",
    "EnvPiece",
    "FillPiece",
    "ImagePlan",
    "ObsPlan",
    "Piece",
    "PreviousPiece",
    "RangeMap",
    "StatePlan",
    "TextPlan",
]

Segments = tuple["str | int", ...]
F32Array: TypeAlias = npt.NDArray[np.float32]


def _f32(values: npt.ArrayLike | None) -> F32Array | None:
    """Scale and offset terms as float32, the precision they are applied in (a 0-d array for
    one number, which broadcasts over a slice whatever its width)."""
    return None if values is None else np.asarray(values, np.float64).astype(np.float32)


@attrs.frozen
class RangeMap:
    """The affine map of one range onto another, in float32:
    ``(x - src_low) / src_span * dst_span + dst_low``."""

    src_low: np.float32
    src_span: np.float32
    dst_low: np.float32
    dst_span: np.float32

    @classmethod
    def between(
        cls, src: tuple[float, float] | None, dst: tuple[float, float] | None
    ) -> RangeMap | None:
        """The map of ``src`` onto ``dst``, or ``None`` when either is absent."""
        if src is None or dst is None:
            return None
        low, high = np.float32(src[0]), np.float32(src[1])
        dst_low, dst_high = np.float32(dst[0]), np.float32(dst[1])
        return cls(low, high - low, dst_low, dst_high - dst_low)


def _range_map(plan: EnvPiece | ActionSegment) -> RangeMap | None:
    return RangeMap.between(plan.src_range, plan.dst_range)


@attrs.frozen
class ImagePlan:
    """One model image input."""

    placement: Segments
    source: Segments | None
    """Where the frame is read (``None``: an absent optional camera, a ``fill`` frame)."""
    pipeline: Any
    """The numeric pipeline (an image-kernel ``ImagePipeline``)."""
    blank: tuple[int, int, int] | None
    """``(height, width, channels)`` of the fill frame of an absent optional camera."""
    fill: int
    stack: int
    offsets: tuple[int, ...]
    """Frame offsets of the window, oldest first, ending at 0 (``(0,)`` without a stack)."""
    pad_black: bool
    """Pad an episode's early window with a raw black frame pushed through the pipeline
    (else with the episode's first frame)."""
    env_shape: tuple[int, int, int] | None
    """The env frame's shape, in its own layout (``None`` for a fill frame)."""
    frame_bytes: int
    """Bytes of one processed frame (0 when the env camera size is unknown)."""
    describe: str
    """The ``explain()`` line (rendered at resolve time)."""
    role_rebound: tuple[str, str] | None = None
    part_note: str | None = None
    fit: str = "stretch"
    resized: bool = False

    def black(self) -> npt.NDArray[Any]:
        """A raw 8-bit black frame, processed like a real one."""
        if self.blank is not None:
            return self.pipeline.finish(np.zeros(self.blank, np.uint8))  # type: ignore[no-any-return]
        assert self.env_shape is not None
        return self.pipeline(np.zeros(self.env_shape, np.uint8))  # type: ignore[no-any-return]

    @property
    def span(self) -> int:
        """Consecutive frames the window reaches back over."""
        return 1 - self.offsets[0]


@attrs.frozen
class EnvPiece:
    """A state part read from an env leaf."""

    source: Segments
    start: int | None
    """Slice of the leaf (a split field), or ``None`` for the whole leaf."""
    stop: int | None
    width: int
    """Elements the env leaf (or field) holds."""
    convert: RotationConversion | None
    """The rotation re-encoding (and ``post_rotate``), when there is one."""
    select: npt.NDArray[np.intp] | None
    """Indices taken after conversion (a label permutation, an index, a leading dim)."""
    src_range: tuple[float, float] | None
    dst_range: tuple[float, float] | None
    scale: F32Array | None = attrs.field(converter=_f32)
    offset: F32Array | None = attrs.field(converter=_f32)
    out_width: int
    range_map: RangeMap | None = attrs.field(
        init=False, default=attrs.Factory(_range_map, takes_self=True)
    )


@attrs.frozen
class FillPiece:
    """An optional part the env lacks: its fill (through the part's scale and offset)."""

    width: int
    value: npt.NDArray[np.float32]


@attrs.frozen
class ConstPiece:
    """A :class:`~trio_rlmesh.adapters.Constant` block."""

    width: int
    value: float


@attrs.frozen
class PreviousPiece:
    """The model's previous raw action for one actuator (in model order)."""

    key: str
    """The actuator's identity, keying the per-episode record."""
    start: int
    stop: int
    select: npt.NDArray[np.intp] | None
    fill: float
    out_width: int


Piece: TypeAlias = "EnvPiece | FillPiece | ConstPiece | PreviousPiece"


@attrs.frozen
class StatePlan:
    """One model state input: parts concatenated, clipped, padded, cast, reshaped."""

    placement: Segments
    pieces: tuple[Piece, ...]
    widths: tuple[int | None, ...]
    """Each part's resolved width (``None`` where only the runtime value says)."""
    clip: tuple[float, float] | None
    pad_to: int | None
    dtype: str
    reshape: tuple[int, ...] | None
    container: str
    filled: int
    """How many optional parts the env lacks (filled instead)."""
    describe: str

    @property
    def width(self) -> int | None:
        """The assembled width, when every part's width is known."""
        if any(w is None for w in self.widths):
            return None
        total = sum(w for w in self.widths if w is not None)
        return max(total, self.pad_to) if self.pad_to is not None else total


@attrs.frozen
class TextPlan:
    """One model text input."""

    placement: Segments
    source: Segments | None
    container: str
    fill: str | None
    describe: str


@attrs.frozen
class CustomPlan:
    """A slot filled by the model author's own code."""

    placement: Segments
    transform: Callable[[Mapping[str, Any]], Any]
    describe: str


ObsPlan: TypeAlias = "ImagePlan | StatePlan | TextPlan | CustomPlan"


@attrs.frozen
class ActionSegment:
    """How one env actuator's numbers come from the model's output."""

    role: str | None
    width: int
    fill: float | None
    """A constant actuator (opaque, or optional and not output): its value."""
    start: int = 0
    stop: int = 0
    select: npt.NDArray[np.intp] | None = None
    convert: RotationConversion | None = None
    src_range: tuple[float, float] | None = None
    dst_range: tuple[float, float] | None = None
    model_scale: F32Array | None = attrs.field(default=None, converter=_f32)
    model_offset: F32Array | None = attrs.field(default=None, converter=_f32)
    model_invert: bool = False
    model_threshold: float | None = None
    scale: F32Array | None = attrs.field(default=None, converter=_f32)
    offset: F32Array | None = attrs.field(default=None, converter=_f32)
    invert: bool = False
    threshold: float | None = None
    binarize: bool = False
    clip: tuple[float, float] | None = None
    range_map: RangeMap | None = attrs.field(
        init=False, default=attrs.Factory(_range_map, takes_self=True)
    )


@attrs.frozen
class ActionPlan:
    """The whole env action from the model's output vector."""

    segments: tuple[ActionSegment, ...]
    in_dim: int
    clip: tuple[float, float] | None
    previous: tuple[tuple[str, int, int], ...]
    """``(key, start, stop)`` of each actuator a state part reads back next step."""
    describe: tuple[str, ...]


@attrs.frozen
class AdapterPlan:
    """A resolved pairing: every decision, no state."""

    obs: tuple[ObsPlan, ...]
    action: ActionPlan
    resolve_advisories: tuple[Advisory, ...]
    """Notes raised while resolving (also listed under ``dropped:`` in ``explain()``)."""
    notes: tuple[Advisory, ...]
    """The env's own hints and the bindings' notes, sorted by message."""
    data_loss: tuple[Advisory, ...]
    """Per input, data the model will not see as the env sent it (in input order)."""
    referenced_keys: tuple[str, ...]
    """Top-level observation keys the plans read (``<obs>`` for a non-Dict observation)."""

    @property
    def advisories(self) -> tuple[Advisory, ...]:
        """Every advisory: resolve-time, then the env's own, then the data-loss notes."""
        return self.resolve_advisories + self.notes + self.data_loss

    @property
    def images(self) -> tuple[ImagePlan, ...]:
        return tuple(p for p in self.obs if isinstance(p, ImagePlan))

    @property
    def stacked(self) -> tuple[ImagePlan, ...]:
        """Image inputs that hold a frame window."""
        return tuple(p for p in self.images if p.stack > 1)

    @property
    def reads_previous(self) -> bool:
        """Whether a state part reads the model's previous action."""
        return bool(self.action.previous)
