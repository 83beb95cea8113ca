"""The image kernels of the adapters: env camera frame → model image input, vectorized.

API (stable; the resolver builds one :class:`ImagePipeline` per model image input):

- Vocabularies: the choices below are :mod:`._vocab`'s (:data:`~._vocab.IMAGE_LAYOUTS`,
  :data:`~._vocab.FIT_MODES`, :data:`~._vocab.CROP_MODES`, :data:`~._vocab.CHANNEL_ORDERS`,
  :data:`~._vocab.RESAMPLES`, :data:`~._vocab.DTYPES`), shared with the spec layer.
- :class:`ImagePipeline` ``(src_layout, src_range, flip, jpeg_quality, crop, crop_mode,
  size, fit, resample, channel_order, normalize, dtype, dst_layout, lead_dims, src_size)``:
  every decision the resolver makes for one input, frozen. ``pipeline(frame)`` runs it on
  one frame or a batch (any leading axes: lanes, frames) of ``(..., H, W, C)`` (``hwc``) or
  ``(..., C, H, W)`` (``chw``) arrays of any numeric dtype, or on encoded PNG/JPEG bytes.
  ``pipeline.finish(pixels)`` runs only the tail (channel order, normalize, dtype, layout,
  lead dims) on ``(..., H, W, C)`` uint8 pixels: the optional camera's blank frame.
  ``pipeline.geometry(height, width)`` is the :class:`Geometry` of a source size.
- :func:`fit_geometry` / :class:`Geometry`: where the crop fraction, the fit and the resize
  put the pixels (cached per source size; a pipeline built with ``src_size`` precomputes
  its weights at construction, and any other size is computed on first sight).
- :func:`crop_size(height, width, crop) <crop_size>`: the integer size a ``slice`` crop cuts
  (also what RLMesh's resolver and ``explain()`` call the cropped size).
- :func:`decode_image`, :func:`jpeg_round_trip`, :class:`ImageDecodeError`,
  :data:`ADAPTERS_EXTRA` (from :mod:`._image_codec`); :func:`checked_cast`,
  :class:`CastError`, :func:`to_uint8`, :func:`normalize` (from :mod:`._image_cast`);
  :func:`axis_weights`, :class:`AxisWeights`, :func:`resample` (from
  :mod:`._image_resample`).

The steps, in RLMesh 0.1.0's order (each pinned against it by the interop tests):

1. encoded bytes are decoded (PNG, JPEG); any other dtype becomes uint8 (:func:`to_uint8`);
2. ``chw`` is transposed to ``hwc``; ``flip`` rotates by 180° (rows and columns reversed);
3. ``jpeg_quality`` round-trips the upright frame through a JPEG codec;
4. ``crop``: ``slice`` cuts the integer centre box of :func:`crop_size`; ``zoom`` keeps the
   fractional box ``((H - H*f) / 2, (H + H*f) / 2)`` per axis for the resampler;
5. the fit: ``stretch`` resamples to ``size``; ``crop`` scales to cover (each axis
   ``max(round(side * s), target)``, ``s`` the larger ratio, ``round`` halves away from
   zero) then takes the centre (offset ``(scaled - target) // 2``); ``pad`` scales to fit
   (``clamp(round(side * s), 1, target)``, ``s`` the smaller ratio) and letterboxes with 0
   at offset ``(target - scaled) // 2``. Without ``size``, ``zoom`` resamples its box back to
   the source size and ``slice`` keeps the cut;
6. ``bgr`` reverses the channels (3 channels);
7. ``normalize=(low, high)`` maps ``[0, 255]`` to the range in float32; then
   :func:`checked_cast` to ``dtype``;
8. ``chw`` output is transposed; ``lead_dims`` singleton axes go right before the image
   axes (after any batch axes).

>>> import numpy as np
>>> pipeline = ImagePipeline(size=(2, 2), resample="bilinear_aa", dtype="float32",
...                          normalize=(0.0, 1.0), dst_layout="chw", lead_dims=1)
>>> out = pipeline(np.full((4, 4, 3), 255, np.uint8))
>>> out.shape, out.dtype.name, float(out.max())
((1, 3, 2, 2), 'float32', 1.0)
"""

from __future__ import annotations

import functools
import math

import attrs
import numpy as np
import numpy.typing as npt

from ._image_cast import CastError, checked_cast, normalize, to_uint8
from ._image_codec import (
    ADAPTERS_EXTRA,
    ImageDecodeError,
    decode_image,
    jpeg_round_trip,
    require_pillow,
)
from ._image_resample import AxisWeights, axis_weights, resample
from ._vocab import CHANNEL_ORDERS, CROP_MODES, DTYPES, FIT_MODES, IMAGE_LAYOUTS, RESAMPLES

__all__ = [
    "ADAPTERS_EXTRA",
    "AxisWeights",
    "CastError",
    "Geometry",
    "ImageDecodeError",
    "ImagePipeline",
    "axis_weights",
    "checked_cast",
    "crop_size",
    "decode_image",
    "fit_geometry",
    "jpeg_round_trip",
    "normalize",
    "require_pillow",
    "resample",
    "to_uint8",
]


def _round_half_away(value: float) -> int:
    """``value`` (>= 0) to the nearest integer, halves away from zero (Rust's ``round``)."""
    floor = math.floor(value)
    return floor + 1 if value - floor >= 0.5 else floor


def crop_size(height: int, width: int, crop: float) -> tuple[int, int]:
    """The integer centre box a ``crop`` side fraction keeps: ``max(round(side * crop), 1)``.

    >>> crop_size(31, 41, 0.5)  # halves round away from zero
    (16, 21)
    """
    return (max(_round_half_away(height * crop), 1), max(_round_half_away(width * crop), 1))


@attrs.frozen
class Geometry:
    """Where one source size's pixels go. Offsets are ``(row, column)``."""

    cut: tuple[int, int, int, int] | None
    """``(top, left, height, width)`` of the integer ``slice`` crop, or ``None``."""
    box: tuple[tuple[float, float], tuple[float, float]] | None
    """The fractional ``zoom`` crop, ``((top, bottom), (left, right))`` in source pixels."""
    resize: tuple[int, int] | None
    """Size the (cut or boxed) source is resampled to; ``None``: no resampling."""
    crop: tuple[int, int] | None
    """Offset of the ``crop`` fit's centre window in the resampled image."""
    pad: tuple[int, int] | None
    """Offset of the resampled image in the ``pad`` fit's zero canvas."""
    out: tuple[int, int]
    """The final ``(height, width)``."""


def fit_geometry(
    height: int,
    width: int,
    *,
    size: tuple[int, int] | None = None,
    fit: str = "stretch",
    crop: float | None = None,
    crop_mode: str = "zoom",
) -> Geometry:
    """The :class:`Geometry` of a ``height`` x ``width`` source.

    Args:
        height: Source height.
        width: Source width.
        size: Target ``(height, width)``, or ``None`` to keep the (cropped) size.
        fit: ``stretch``, ``crop`` or ``pad``; matters only when the aspect ratio changes.
        crop: Side fraction of a centre crop, in ``(0, 1]`` (an area fraction's square root).
        crop_mode: ``zoom`` (resample the fractional box) or ``slice`` (cut integers first).

    >>> fit_geometry(48, 64, size=(32, 32), fit="crop")  # cover to 32x43, take the middle
    Geometry(cut=None, box=None, resize=(32, 43), crop=(0, 5), pad=None, out=(32, 32))
    >>> fit_geometry(48, 64, size=(32, 32), fit="pad").pad  # contain in 24x32, letterbox
    (4, 0)
    """
    if fit not in FIT_MODES:
        raise ValueError(f"unknown fit {fit!r}; expected one of {', '.join(FIT_MODES)}")
    if crop_mode not in CROP_MODES:
        raise ValueError(
            f"unknown crop_mode {crop_mode!r}; expected one of {', '.join(CROP_MODES)}"
        )
    cut = box = None
    region: tuple[float, float] = (float(height), float(width))
    if crop is not None and crop_mode == "slice":
        cut_height, cut_width = crop_size(height, width, crop)
        cut = ((height - cut_height) // 2, (width - cut_width) // 2, cut_height, cut_width)
        region = (float(cut_height), float(cut_width))
    elif crop is not None:
        region = (height * crop, width * crop)
        box = (
            ((height - region[0]) / 2.0, (height + region[0]) / 2.0),
            ((width - region[1]) / 2.0, (width + region[1]) / 2.0),
        )
        if size is None:
            size = (height, width)
    if size is None:
        out = (int(region[0]), int(region[1]))
        return Geometry(cut=cut, box=None, resize=None, crop=None, pad=None, out=out)
    target_height, target_width = size
    resize, offset_crop, offset_pad = size, None, None
    if fit == "crop":
        scale = max(target_height / region[0], target_width / region[1])
        resize = (
            max(_round_half_away(region[0] * scale), target_height),
            max(_round_half_away(region[1] * scale), target_width),
        )
        offset_crop = ((resize[0] - target_height) // 2, (resize[1] - target_width) // 2)
    elif fit == "pad":
        scale = min(target_height / region[0], target_width / region[1])
        resize = (
            min(max(_round_half_away(region[0] * scale), 1), target_height),
            min(max(_round_half_away(region[1] * scale), 1), target_width),
        )
        offset_pad = ((target_height - resize[0]) // 2, (target_width - resize[1]) // 2)
    # Without a zoom box the region is whole pixels: a resize to its own size is no resize.
    scaled: tuple[int, int] | None = resize
    if box is None and resize == (int(region[0]), int(region[1])):
        scaled = None  # whole pixels resampled to their own size: nothing to do
    return Geometry(cut=cut, box=box, resize=scaled, crop=offset_crop, pad=offset_pad, out=size)


@functools.lru_cache(maxsize=256)
def _taps(
    height: int, width: int, geometry: Geometry, resample_name: str
) -> tuple[AxisWeights | None, AxisWeights | None]:
    """The row and column taps of ``geometry`` on a (cut) ``height`` x ``width`` source;
    ``None`` for an axis that keeps its pixels."""
    if geometry.resize is None:
        return None, None
    rows_box, cols_box = geometry.box if geometry.box is not None else (None, None)
    out_height, out_width = geometry.resize
    rows = None
    if rows_box is not None or out_height != height:
        rows = axis_weights(height, out_height, resample_name, rows_box)
    cols = None
    if cols_box is not None or out_width != width:
        cols = axis_weights(width, out_width, resample_name, cols_box)
    return rows, cols


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"unknown {name} {value!r}; expected one of {', '.join(choices)}")


@attrs.frozen(eq=False)
class ImagePipeline:
    """One model image input's numeric pipeline, every choice already made (see the module).

    Only construction validates; a call runs the steps and nothing else.
    """

    src_layout: str = "hwc"
    """The env frame's axis layout, ``hwc`` or ``chw``."""
    src_range: tuple[float, float] | None = None
    """For a float env image, the value range mapped onto ``[0, 255]`` (default ``[0, 1]``)."""
    flip: bool = False
    """Rotate by 180° (the env and model disagree about ``upside_down``)."""
    jpeg_quality: int | None = None
    """Round-trip the upright frame through JPEG at this IJG quality (1-100); needs 3 channels."""
    crop: float | None = None
    """Side fraction of the centre crop (``crop_area``'s square root), in ``(0, 1]``."""
    crop_mode: str = "zoom"
    """``zoom`` or ``slice`` (see :func:`fit_geometry`)."""
    size: tuple[int, int] | None = None
    """Target ``(height, width)``; ``None`` keeps the (cropped) size."""
    fit: str = "stretch"
    """How an aspect change is reconciled: ``stretch``, ``crop`` or ``pad``."""
    resample: str = "bilinear"
    """One of :data:`RESAMPLES`."""
    channel_order: str = "rgb"
    """``bgr`` reverses the three channels after the spatial steps."""
    normalize: tuple[float, float] | None = None
    """Map ``[0, 255]`` onto ``(low, high)`` in float32 before the cast; ``None``: off."""
    dtype: str = "uint8"
    """The model's dtype (one of :data:`DTYPES`); integer targets are checked casts."""
    dst_layout: str = "hwc"
    """The model's axis layout."""
    lead_dims: int = 0
    """Singleton axes added right before the image axes."""
    src_size: tuple[int, int] | None = None
    """The env frame's ``(height, width)``, if known: its weights are computed now."""

    def __attrs_post_init__(self) -> None:
        _check_choice("layout", self.src_layout, IMAGE_LAYOUTS)
        _check_choice("layout", self.dst_layout, IMAGE_LAYOUTS)
        _check_choice("fit", self.fit, FIT_MODES)
        _check_choice("crop_mode", self.crop_mode, CROP_MODES)
        _check_choice("resample", self.resample, RESAMPLES)
        _check_choice("channel_order", self.channel_order, CHANNEL_ORDERS)
        _check_choice("dtype", self.dtype, DTYPES)
        if self.crop is not None and not 0.0 < self.crop <= 1.0:
            raise ValueError(f"crop must be a side fraction in (0, 1], got {self.crop!r}")
        if self.jpeg_quality is not None:
            if not 1 <= self.jpeg_quality <= 100:
                raise ValueError(f"jpeg_quality must be in 1..100, got {self.jpeg_quality!r}")
            require_pillow("jpeg_quality")
        if self.size is not None and min(self.size) < 1:
            raise ValueError(f"size must be positive, got {self.size!r}")
        if self.lead_dims < 0:
            raise ValueError(f"lead_dims must be >= 0, got {self.lead_dims!r}")
        if self.src_size is not None:
            self._plan(*self.src_size)

    def geometry(self, height: int, width: int) -> Geometry:
        """The :class:`Geometry` of a ``height`` x ``width`` frame (cached)."""
        return _geometry(height, width, self.size, self.fit, self.crop, self.crop_mode)

    def _plan(
        self, height: int, width: int
    ) -> tuple[Geometry, AxisWeights | None, AxisWeights | None]:
        geometry = self.geometry(height, width)
        if geometry.cut is not None:
            height, width = geometry.cut[2], geometry.cut[3]
        return (geometry, *_taps(height, width, geometry, self.resample))

    def __call__(self, frame: npt.ArrayLike | bytes) -> npt.NDArray[np.generic]:
        """The model's image for ``frame`` (a new array, never a view of ``frame``).

        Raises:
            ImageDecodeError: Bytes that are not a PNG or JPEG this build decodes.
            CastError: A value the model's dtype cannot hold.
            ValueError: A frame with fewer than three axes.
        """
        if isinstance(frame, (bytes, bytearray, memoryview)):
            pixels = decode_image(bytes(frame))
        else:
            array = np.asarray(frame)
            if array.ndim < 3:
                raise ValueError(
                    f"expected an image with 3 axes ({self.src_layout}), got shape {array.shape}"
                )
            pixels = to_uint8(array, self.src_range)
            if self.src_layout == "chw":
                pixels = np.moveaxis(pixels, -3, -1)
        if self.flip:
            pixels = pixels[..., ::-1, ::-1, :]
        if self.jpeg_quality is not None:
            pixels = jpeg_round_trip(pixels, self.jpeg_quality)
        geometry, rows, cols = self._plan(pixels.shape[-3], pixels.shape[-2])
        if geometry.cut is not None:
            top, left, height, width = geometry.cut
            pixels = pixels[..., top : top + height, left : left + width, :]
        pixels = resample(pixels, rows, cols)
        if geometry.crop is not None:
            top, left = geometry.crop
            height, width = geometry.out
            pixels = pixels[..., top : top + height, left : left + width, :]
        elif geometry.pad is not None:
            pixels = _letterbox(pixels, geometry.pad, geometry.out)
        out = self.finish(pixels)
        if isinstance(frame, np.ndarray) and np.may_share_memory(out, frame):
            out = out.copy()
        return out

    def finish(self, pixels: npt.NDArray[np.uint8]) -> npt.NDArray[np.generic]:
        """The tail of the pipeline on ``(..., H, W, C)`` uint8 pixels: channel order,
        normalize, dtype, layout, lead dims. The output is C-contiguous."""
        if self.channel_order == "bgr":
            pixels = pixels[..., ::-1]
        values: npt.NDArray[np.generic] = pixels
        if self.normalize is not None:
            values = normalize(pixels, *self.normalize)
        values = checked_cast(values, self.dtype)
        if self.dst_layout == "chw":
            values = np.moveaxis(values, -1, -3)
        if self.lead_dims:
            shape = values.shape
            values = values.reshape(shape[:-3] + (1,) * self.lead_dims + shape[-3:])
        return np.ascontiguousarray(values)


@functools.lru_cache(maxsize=256)
def _geometry(
    height: int,
    width: int,
    size: tuple[int, int] | None,
    fit: str,
    crop: float | None,
    crop_mode: str,
) -> Geometry:
    return fit_geometry(height, width, size=size, fit=fit, crop=crop, crop_mode=crop_mode)


def _letterbox(
    pixels: npt.NDArray[np.uint8], offset: tuple[int, int], out: tuple[int, int]
) -> npt.NDArray[np.uint8]:
    canvas = np.zeros(pixels.shape[:-3] + out + pixels.shape[-1:], np.uint8)
    top, left = offset
    canvas[..., top : top + pixels.shape[-3], left : left + pixels.shape[-2], :] = pixels
    return canvas
