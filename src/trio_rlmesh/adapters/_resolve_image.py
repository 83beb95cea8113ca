"""Pair one model image input with an env camera and fix its pipeline."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ._advice import Advisory
from ._errors import AdapterResolutionError
from ._fmt import display_float, quoted, quoted_list, render_placement
from ._image import ImagePipeline, crop_size
from ._join import EnvFeatures, EnvImage
from ._plans import ImagePlan
from ._resolve_common import Notes, by_part, fail, offers, refuse_unknown_kind, where
from ._vocab import DTYPES, FIT_MODES, MAX_STACK_SPAN, RESAMPLES, is_sanctioned

__all__ = ["plan_image"]

Segments = tuple["str | int", ...]


def _bind(
    leaf: Mapping[str, Any], at: Segments, env: EnvFeatures, notes: Notes
) -> tuple[EnvImage | None, tuple[str, str] | None]:
    """The env camera a model image reads, or ``None`` (an optional camera to fill)."""
    role: str = leaf["role"]
    part: str | None = leaf.get("part")
    images = env.images
    candidates, implicit = by_part(
        [i for i in images if i.role == role],
        lambda i: i.part,
        part,
        lambda parts: (
            f"model input {where(at)} needs image role {quoted(role)} but the env declares it "
            f"under parts {quoted_list(parts)}; declare part="
        ),
    )
    if candidates:
        bound = candidates[0]
        if implicit is not None:
            notes.checks.append(
                Advisory(
                    "info",
                    f"model input {where(at)}: image role {quoted(role)} declares no part and "
                    f"the env declares it only under part {quoted(implicit)}; bound to that "
                    "leaf (declare part= to pin it)",
                )
            )
        return bound, None
    refuse_unknown_kind(role, at, env)
    # The lone-camera fallback: a registered (or x/) role the env lacks binds the env's only
    # camera, so a typo'd ad-hoc role still fails loudly and an optional camera is filled.
    if part is None and not leaf.get("optional") and len(images) == 1 and is_sanctioned(role):
        return images[0], (role, images[0].role)
    if leaf.get("optional"):
        notes.ad_hoc_fill(role, (i.role for i in images))
        return None, None
    wanted = "" if part is None else f" (part {quoted(part)})"
    raise AdapterResolutionError(
        f"model input {where(at)} wants an image with role {quoted(role)}{wanted} but the env "
        f"offers {offers((i.role, i.part, None) for i in images)}"
    )


def _check_window(leaf: Mapping[str, Any], at: Segments) -> tuple[int, ...]:
    stack: int = leaf.get("stack", 1)
    offsets: Sequence[int] | None = leaf.get("offsets")
    if leaf.get("stack_pad", "first") != "first" and stack <= 1:
        fail(
            f"model input {where(at)}: stack_pad only applies to a stacked image;                  "
            "set stack > 1 or drop stack_pad"
        )
    if offsets is None:
        return tuple(range(1 - stack, 1))
    window = tuple(offsets)
    increasing = all(a < b for a, b in itertools.pairwise(window))
    if not window or window[-1] != 0 or not increasing or len(window) != stack:
        if len(window) != stack and window and window[-1] == 0 and increasing:
            fail(
                f"model input {where(at)}: stack={stack} but offsets {list(window)} name "
                f"{len(window)} frame(s); a frame window declares both and they are never "
                "inferred from each other"
            )
        fail(
            f"model input {where(at)}: offsets must be non-positive and strictly increasing,"
            f"                  ending at 0 (the current frame), got {list(window)}"
        )
    span = 1 - window[0]
    if span > MAX_STACK_SPAN:
        fail(
            f"model input {where(at)}: stack={stack} over offsets {list(window)} spans {span} "
            f"consecutive                  frames, more than the {MAX_STACK_SPAN} a window may hold"
        )
    return window


def _crop_fraction(leaf: Mapping[str, Any]) -> float | None:
    if leaf.get("crop") is not None:
        return float(leaf["crop"])
    if leaf.get("crop_area") is not None:
        return math.sqrt(float(leaf["crop_area"]))
    return None


def _choose_fit(
    leaf: Mapping[str, Any], at: Segments, region: tuple[int, int], size: tuple[int, int] | None
) -> str:
    """The fit mode for this env: the first declared one that needs no disallowed upscale."""
    if size is None:
        return "stretch"
    (target_h, target_w), (env_h, env_w) = size, region
    known = env_h != 0 and env_w != 0
    allow = bool(leaf.get("allow_upscale"))

    def upscales(mode: str) -> bool:
        if not known:
            return False
        if mode == "pad":
            return target_h > env_h and target_w > env_w
        return target_h > env_h or target_w > env_w

    declared = leaf.get("fit")
    names = [] if declared is None else [declared] if isinstance(declared, str) else list(declared)
    permitted = [name for name in names if name in FIT_MODES]
    if known and env_h * target_w != env_w * target_h:
        for mode in permitted:
            if allow or not upscales(mode):
                return mode
        if declared is None:
            fail(
                f"model input {where(at)}: target {target_h}x{target_w} changes the env's "
                f"{env_h}x{env_w} aspect ratio; set fit to 'stretch', 'crop', or 'pad'"
            )
        if not permitted:
            fail(
                f"model input {where(at)}: target {target_h}x{target_w} changes the env's "
                f"{env_h}x{env_w} aspect ratio and the declared fit {quoted_list(names)} names "
                "no mode this build recognizes; expected 'stretch', 'crop', or 'pad'"
            )
        fail(
            f"model input {where(at)}: every declared fit would upscale the env's "
            f"{env_h}x{env_w} image to {target_h}x{target_w}; set allow_upscale or declare a "
            "fit that downscales (e.g. 'pad')"
        )
    if declared is not None and not permitted:
        fail(
            f"model input {where(at)}: the declared fit {quoted_list(names)} names no mode this "
            "build recognizes; expected 'stretch', 'crop', or 'pad'"
        )
    mode = permitted[0] if permitted else "stretch"
    if not allow and upscales(mode):
        fail(
            f"model input {where(at)}: target {target_h}x{target_w} upscales the env's "
            f"{env_h}x{env_w} image; set allow_upscale to interpolate detail that is not there"
        )
    return mode


def _normalize(value: Any) -> tuple[float, float] | None:
    if value is True:
        return (0.0, 1.0)
    if value is False:
        return None
    return (float(value[0]), float(value[1]))


def _describe(
    leaf: Mapping[str, Any],
    at: Segments,
    image: EnvImage,
    flip: bool,
    crop: float | None,
    cut: tuple[int, int] | None,
    size: tuple[int, int] | None,
    normalize: tuple[float, float] | None,
    offsets: tuple[int, ...],
) -> str:
    steps: list[str] = []
    render = leaf.get("render")
    if render is not None:
        steps.append(f"render {render[0]}x{render[1]}")
    if image.layout != "hwc":
        steps.append(f"{image.layout}->hwc")
    if flip:
        steps.append("flip 180")
    if leaf.get("jpeg_quality") is not None:
        steps.append(f"jpeg q{leaf['jpeg_quality']}")
    if crop is not None:
        if leaf.get("crop_mode", "zoom") == "slice":
            assert cut is not None
            step = f"crop {crop:.3f} (slice)"
        else:
            step = f"zoom {crop:.3f}"
        if leaf.get("crop_area") is not None:
            step += f" (crop {leaf['crop_area'] * 100:.1f}% area)"
        if cut is not None:
            step += f" -> {cut[0]}x{cut[1]}"
        steps.append(step)
    if size is not None:
        steps.append(f"resize {size[0]}x{size[1]} ({leaf['resample']})")
    if leaf.get("channel_order", "rgb") != "rgb":
        steps.append(leaf["channel_order"])
    if normalize is not None:
        if normalize == (0.0, 1.0):
            steps.append("normalize /255")
        else:
            steps.append(
                f"normalize [{display_float(normalize[0])}, {display_float(normalize[1])}]"
            )
    steps.append(leaf["dtype"])
    if leaf["layout"] != "hwc":
        steps.append(f"hwc->{leaf['layout']}")
    if leaf["lead_dims"] > 0:
        steps.append(f"+{leaf['lead_dims']} lead dims")
    if leaf.get("offsets") is not None:
        steps.append(f"stack {leaf.get('stack', 1)} @[{','.join(str(o) for o in offsets)}]")
    if leaf.get("stack_pad", "first") != "first":
        steps.append(f"pad {leaf['stack_pad']}")
    source = quoted(render_placement(image.source))
    if image.part is not None:
        source += f"#{image.part}"
    return f"{where(at)} <- image {source} ({', '.join(steps)})"


def _frame_bytes(leaf: Mapping[str, Any], height: int, width: int, channels: int) -> int:
    """Bytes of one processed frame (a window holds ``span`` of them)."""
    return height * width * channels * int(np.dtype(leaf["dtype"]).itemsize)


def plan_image(leaf: Mapping[str, Any], at: Segments, env: EnvFeatures, notes: Notes) -> ImagePlan:
    """Resolve one model image leaf (a canonical document) against the env's cameras."""
    if leaf.get("fill") is not None and not leaf.get("optional"):
        fail(
            f"model input {where(at)}: fill only applies to an optional camera; set optional "
            "or drop fill"
        )
    image, rebound = _bind(leaf, at, env, notes)
    offsets = _check_window(leaf, at)
    normalize = _normalize(leaf["normalize"])
    common: dict[str, Any] = {
        "normalize": normalize,
        "dtype": leaf["dtype"],
        "dst_layout": leaf["layout"],
        "lead_dims": leaf["lead_dims"],
        "channel_order": leaf.get("channel_order", "rgb"),
    }
    stack = leaf.get("stack", 1)
    pad_black = leaf.get("stack_pad", "first") == "black"
    if image is None:
        height, width, channels = leaf["height"], leaf["width"], leaf.get("channels")
        if height is None or width is None or channels is None:
            fail(
                f"model input {where(at)}: an optional image the env does not provide needs "
                "height, width, and channels to size the zero-filled frame"
            )
        _check_dtype(leaf, at)
        pipeline = ImagePipeline(**common)
        blank = (height, width, channels)
        return ImagePlan(
            placement=at,
            source=None,
            pipeline=pipeline,
            blank=blank,
            fill=leaf.get("fill") or 0,
            stack=stack,
            offsets=offsets,
            pad_black=pad_black,
            env_shape=None,
            frame_bytes=_frame_bytes(leaf, *blank),
            describe=f"{where(at)} <- zeros({height}x{width}x{channels})"
            + ("" if leaf.get("part") is None else f"#{leaf['part']}"),
        )
    if leaf["resample"] not in RESAMPLES:
        fail(
            f"model input {where(at)}: unsupported resample {quoted(leaf['resample'])}; "
            f"expected one of {quoted_list(RESAMPLES)}"
        )
    _check_dtype(leaf, at)
    expected = leaf.get("channels")
    if expected is not None and image.channels != 0 and image.channels != expected:
        fail(
            f"model input {where(at)}: expects {expected} channel(s) but the env image has "
            f"{image.channels}; the adapter does not convert between channel counts (e.g. RGB vs "
            "grayscale)"
        )
    if leaf.get("jpeg_quality") is not None and image.channels != 3:
        fail(
            f"model input {where(at)}: jpeg_quality needs a 3-channel image, got "
            f"{image.channels} channel(s)"
        )
    if leaf.get("channel_order", "rgb") == "bgr" and image.channels != 3:
        fail(
            f'model input {where(at)}: channel_order "bgr" needs a 3-channel image, got '
            f"{image.channels} channel(s)"
        )
    render = leaf.get("render")
    if render is not None and (render[0], render[1]) != (image.height, image.width):
        fail(
            f"model input {where(at)}: declares render {render[0]}x{render[1]} but the bound "
            f"camera {quoted(image.role)} renders {image.height}x{image.width}"
        )
    crop = _crop_fraction(leaf)
    region = (image.height, image.width)
    if crop is not None:
        region = crop_size(image.height, image.width, crop)
    cut = region if crop is not None and leaf.get("crop_mode", "zoom") == "slice" else None
    height, width = leaf["height"], leaf["width"]
    size: tuple[int, int] | None = None
    if height is not None or width is not None:
        # The axis the model leaves open keeps the camera's own size (not the cropped one).
        size = (
            height if height is not None else image.height,
            width if width is not None else image.width,
        )
    fit = _choose_fit(leaf, at, region, size)
    flip = image.upside_down != leaf["upside_down"]
    pipeline = ImagePipeline(
        src_layout=image.layout,
        src_range=image.value_range,
        flip=flip,
        jpeg_quality=leaf.get("jpeg_quality"),
        crop=crop,
        crop_mode=leaf.get("crop_mode", "zoom"),
        size=size,
        fit=fit,
        resample=leaf["resample"],
        src_size=(image.height, image.width) if image.height and image.width else None,
        **common,
    )
    # Without a target size a slice keeps its cut, and a zoom resamples back to full size.
    out_h, out_w = (
        size if size is not None else cut if cut is not None else (image.height, image.width)
    )
    # The fit only matters (and draws its note) when the target changes the aspect ratio.
    reshaped = size is not None and region[0] * size[1] != region[1] * size[0]
    env_shape = (image.height, image.width, image.channels)
    if image.layout == "chw":
        env_shape = (image.channels, image.height, image.width)
    return ImagePlan(
        placement=at,
        source=image.source,
        pipeline=pipeline,
        blank=None,
        fill=0,
        stack=stack,
        offsets=offsets,
        pad_black=pad_black,
        env_shape=env_shape,
        frame_bytes=_frame_bytes(leaf, out_h, out_w, image.channels),
        describe=_describe(leaf, at, image, flip, crop, cut, size, normalize, offsets),
        role_rebound=rebound,
        fit=fit,
        resized=reshaped,
    )


def _check_dtype(leaf: Mapping[str, Any], at: Segments) -> None:
    if leaf["dtype"] not in DTYPES:
        fail(f"model input {where(at)}: unknown dtype {quoted(leaf['dtype'])}")
