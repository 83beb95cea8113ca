"""The image kernels, without RLMesh: values pinned from RLMesh 0.1.0, rules stated by hand.

Every expected array below was produced by ``rlmesh.adapters`` 0.1.0 on the same input
(``tests/interop/test_adapter_kernels.py`` re-derives such values from the wheel on random
inputs); the hand-worked cases say where each number comes from.
"""

from __future__ import annotations

import doctest
import importlib
import io
import math
from typing import Any

import numpy as np
import pytest

from tests.adapters import wheel
from tests.gym.test_png import encode as encode_png
from trio_rlmesh import Error, SpecError
from trio_rlmesh.adapters import _image_codec, _vocab
from trio_rlmesh.adapters._image import (
    CastError,
    Geometry,
    ImageDecodeError,
    ImagePipeline,
    axis_weights,
    checked_cast,
    crop_size,
    decode_image,
    fit_geometry,
    jpeg_round_trip,
    normalize,
    resample,
    to_uint8,
)
from trio_rlmesh.adapters._vocab import RESAMPLES

# 5x7 gray ramp: value = 37 * (row * 7 + col) mod 256.
RAMP = ((np.arange(35).reshape(5, 7, 1) * 37) % 256).astype(np.uint8)
# 4x6 hard edges: bicubic and lanczos overshoot here, so the intermediate clip shows.
EDGES = np.array(
    [
        [0, 255, 0, 255, 0, 255],
        [255, 0, 255, 0, 255, 0],
        [0, 0, 255, 255, 0, 0],
        [255, 255, 0, 0, 255, 255],
    ],
    np.uint8,
)[..., None]

RAMP_DOWN_3X4 = {
    "bilinear": [[15, 80, 144, 209], [20, 85, 149, 214], [25, 90, 154, 219]],
    "bilinear_aa": [[21, 78, 146, 204], [25, 83, 151, 209], [30, 88, 156, 213]],
    "bicubic_aa": [[16, 78, 146, 208], [21, 83, 151, 213], [26, 88, 156, 218]],
    "lanczos3_aa": [[15, 78, 146, 209], [20, 83, 151, 214], [25, 88, 156, 219]],
    "area": [[17, 80, 144, 207], [22, 85, 149, 212], [27, 90, 154, 217]],
}
_LINEAR_UP = [
    [0, 25, 53, 82, 111, 140, 169, 197, 222],
    [2, 27, 56, 84, 113, 142, 171, 200, 224],
    [5, 29, 58, 87, 116, 145, 173, 202, 227],
    [7, 32, 61, 89, 118, 147, 176, 205, 229],
    [10, 34, 63, 92, 121, 150, 178, 207, 232],
    [12, 37, 65, 94, 123, 152, 181, 209, 234],
]
RAMP_UP_6X9 = {
    # On an upscale the antialiased triangle is the plain one.
    "bilinear": _LINEAR_UP,
    "bilinear_aa": _LINEAR_UP,
    "area": [
        [0, 26, 53, 79, 111, 143, 169, 196, 222],
        [2, 29, 55, 82, 113, 145, 172, 198, 224],
        [5, 31, 58, 84, 116, 148, 174, 200, 227],
        [7, 34, 60, 86, 118, 150, 176, 203, 229],
        [10, 36, 62, 89, 121, 152, 179, 205, 232],
        [12, 38, 65, 91, 123, 155, 181, 208, 234],
    ],
}
EDGES_UP_7X9 = {
    "bicubic_aa": [
        [0, 136, 253, 2, 128, 253, 2, 119, 255],
        [87, 135, 170, 85, 123, 163, 92, 130, 178],
        [251, 124, 28, 227, 124, 22, 233, 138, 12],
        [128, 43, 0, 255, 207, 120, 135, 52, 0],
        [4, 8, 40, 215, 247, 222, 33, 7, 12],
        [168, 173, 166, 89, 82, 97, 158, 173, 178],
        [255, 255, 240, 15, 0, 15, 240, 255, 255],
    ],
    "lanczos3_aa": [
        [0, 146, 255, 0, 132, 255, 0, 100, 255],
        [97, 147, 174, 81, 114, 156, 100, 135, 182],
        [252, 119, 33, 223, 119, 20, 234, 153, 19],
        [133, 13, 0, 255, 228, 110, 140, 42, 0],
        [10, 12, 48, 201, 244, 216, 34, 10, 26],
        [155, 172, 171, 86, 85, 109, 148, 168, 181],
        [255, 255, 243, 19, 0, 11, 251, 255, 255],
    ],
}


def _resized(image: np.ndarray, height: int, width: int, name: str) -> list[list[int]]:
    rows = axis_weights(image.shape[0], height, name)
    cols = axis_weights(image.shape[1], width, name)
    out: list[list[int]] = resample(image, rows, cols)[..., 0].tolist()
    return out


@pytest.mark.parametrize("name", RESAMPLES)
def test_downscale_matches_the_pinned_rlmesh_output(name: str) -> None:
    assert _resized(RAMP, 3, 4, name) == RAMP_DOWN_3X4[name]


@pytest.mark.parametrize("name", sorted(RAMP_UP_6X9))
def test_upscale_matches_the_pinned_rlmesh_output(name: str) -> None:
    assert _resized(RAMP, 6, 9, name) == RAMP_UP_6X9[name]


@pytest.mark.parametrize("name", sorted(EDGES_UP_7X9))
def test_negative_lobes_clip_between_the_passes(name: str) -> None:
    assert _resized(EDGES, 7, 9, name) == EDGES_UP_7X9[name]
    # Without the clip after the horizontal pass the overshoot leaks into the vertical one.
    rows = axis_weights(4, 7, name)
    cols = axis_weights(6, 9, name)
    horizontal = (EDGES[..., 0][:, cols.index] * cols.weight).sum(-1)
    unclipped = (horizontal[rows.index] * rows.weight[..., None]).sum(1)
    assert np.clip(np.rint(unclipped), 0, 255).tolist() != EDGES_UP_7X9[name]


def test_bilinear_weights_are_the_two_nearest_with_half_pixel_centres() -> None:
    # 4 -> 8: output 1 sits at source 0.25 (centre 0.75 minus half a pixel).
    taps = axis_weights(4, 8, "bilinear")
    assert taps.index[1].tolist()[:2] == [0, 1]
    assert taps.weight[1].tolist()[:2] == [0.75, 0.25]
    # The edges replicate: output 0 sits at -0.25 and takes pixel 0 alone.
    assert taps.weight[0].tolist()[0] == 1.0


def test_bilinear_does_not_widen_on_a_downscale_but_bilinear_aa_does() -> None:
    assert (axis_weights(12, 3, "bilinear").weight != 0).sum(1).max() == 2
    # Downscale by 4: the triangle widens to radius 4, eight taps per output.
    assert (axis_weights(12, 3, "bilinear_aa").weight != 0).sum(1).max() == 8


def test_area_on_an_integer_downscale_is_the_block_mean() -> None:
    taps = axis_weights(6, 2, "area")
    assert taps.index.tolist() == [[0, 1, 2], [3, 4, 5]]
    assert np.allclose(taps.weight, 1 / 3)
    # A third-pixel box: 3 -> 2 covers 1.5 pixels each.
    third = axis_weights(3, 2, "area")
    assert np.allclose(third.weight, [[2 / 3, 1 / 3], [1 / 3, 2 / 3]])


def test_weights_sum_to_one_and_stay_inside_the_axis() -> None:
    for name in RESAMPLES:
        for src, dst in [(7, 3), (3, 7), (256, 224), (10, 10), (1, 5), (5, 1)]:
            taps = axis_weights(src, dst, name)
            assert taps.weight.shape == taps.index.shape
            assert np.allclose(taps.weight.sum(1), 1.0), (name, src, dst)
            assert taps.index.min() >= 0
            assert taps.index.max() < src


def test_a_box_resamples_only_that_part_of_the_axis() -> None:
    # Pillow's resize(box=...): output centres span the box, not the axis.
    taps = axis_weights(10, 2, "bilinear", (2.0, 6.0))
    assert taps.index[:, :2].tolist() == [[2, 3], [4, 5]]
    assert taps.weight[:, :2].tolist() == [[0.5, 0.5], [0.5, 0.5]]


def test_weights_are_computed_once() -> None:
    assert axis_weights(64, 48, "lanczos3_aa") is axis_weights(64, 48, "lanczos3_aa")


def test_bad_weights_requests_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown resample 'bicubic'"):
        axis_weights(4, 2, "bicubic")
    with pytest.raises(ValueError, match="lengths must be > 0"):
        axis_weights(0, 2, "bilinear")
    with pytest.raises(ValueError, match="not inside an axis of length 4"):
        axis_weights(4, 2, "bilinear", (1.0, 5.0))


def test_resample_rides_along_leading_axes() -> None:
    rng = np.random.default_rng(0)
    batch = rng.integers(0, 256, (2, 3, 9, 11, 3), dtype=np.uint8)
    rows, cols = axis_weights(9, 4, "bilinear_aa"), axis_weights(11, 5, "bilinear_aa")
    out = resample(batch, rows, cols)
    assert out.shape == (2, 3, 4, 5, 3)
    for i in range(2):
        for j in range(3):
            assert np.array_equal(out[i, j], resample(batch[i, j], rows, cols))
    with pytest.raises(ValueError, match="expects width 11"):
        resample(batch[..., :10, :], rows, cols)


def test_round_half_to_even_once_at_the_end() -> None:
    # A 2 -> 1 area mean of [2, 3] is 2.5, which rounds to 2 (half to even); of [3, 4],
    # 3.5 rounds to 4.
    row = np.array([[[2], [3]], [[3], [4]]], np.uint8)
    out = resample(row, None, axis_weights(2, 1, "area"))
    assert out[..., 0].tolist() == [[2], [4]]


@pytest.mark.parametrize(
    ("name", "pillow_filter"),
    [("bilinear_aa", "BILINEAR"), ("bicubic_aa", "BICUBIC"), ("lanczos3_aa", "LANCZOS")],
)
@pytest.mark.parametrize(
    ("shape", "target"),
    [((256, 256, 3), (224, 224)), ((37, 45, 3), (20, 19)), ((12, 16, 1), (30, 7))],
)
def test_the_aa_filters_are_pillows_within_one_step(
    name: str, pillow_filter: str, shape: tuple[int, int, int], target: tuple[int, int]
) -> None:
    """Pillow rounds to 8 bits between its passes and works in fixed point; ours does
    neither, so a pixel may land one step away, never more."""
    image = pytest.importorskip("PIL.Image")
    frame = np.random.default_rng(sum(shape)).integers(0, 256, shape, np.uint8)
    pillow = image.fromarray(frame[..., 0] if shape[-1] == 1 else frame)
    resized = pillow.resize((target[1], target[0]), getattr(image.Resampling, pillow_filter))
    expected = np.asarray(resized).reshape(*target, shape[-1]).astype(np.int64)
    ours = resample(
        frame, axis_weights(shape[0], target[0], name), axis_weights(shape[1], target[1], name)
    )
    assert np.abs(ours.astype(np.int64) - expected).max() <= 1


# --- geometry ---------------------------------------------------------------------------


def test_crop_size_rounds_halves_away_from_zero() -> None:
    assert crop_size(31, 41, 0.5) == (16, 21)  # 15.5 -> 16, 20.5 -> 21
    assert crop_size(30, 40, 2 / 3) == (20, 27)
    assert crop_size(3, 3, 0.01) == (1, 1)


def test_fit_crop_covers_then_takes_the_centre() -> None:
    # 15x20 into 10x14: cover scale 0.7 -> 10.5 rounds up to 11 rows, offset (11-10)//2.
    geometry = fit_geometry(15, 20, size=(10, 14), fit="crop")
    assert geometry == Geometry(
        cut=None, box=None, resize=(11, 14), crop=(0, 0), pad=None, out=(10, 14)
    )


def test_fit_pad_contains_then_letterboxes() -> None:
    geometry = fit_geometry(48, 64, size=(32, 32), fit="pad")
    assert geometry.resize == (24, 32)
    assert geometry.pad == (4, 0)


def test_fit_slice_cuts_integers_before_the_fit() -> None:
    geometry = fit_geometry(30, 40, crop=0.5, crop_mode="slice", size=(10, 10), fit="crop")
    assert geometry.cut == (7, 10, 15, 20)
    assert geometry.resize == (10, 13)  # cover 15x20 to 10 rows
    assert geometry.crop == (0, 1)


def test_fit_zoom_keeps_a_fractional_box() -> None:
    geometry = fit_geometry(30, 40, crop=0.77)
    rows, cols = 30 * 0.77, 40 * 0.77
    assert geometry.box == (((30 - rows) / 2, (30 + rows) / 2), ((40 - cols) / 2, (40 + cols) / 2))
    # Without a size the box is resampled back to the frame's size.
    assert geometry.resize == geometry.out == (30, 40)


def test_same_size_is_no_resize() -> None:
    assert fit_geometry(8, 8, size=(8, 8)).resize is None
    assert fit_geometry(8, 8).resize is None


# --- casts and ranges ---------------------------------------------------------------------


def test_checked_cast_refuses_what_rlmesh_refuses() -> None:
    with pytest.raises(CastError, match=r"^cannot cast non-integral value 0\.5 to uint8$"):
        checked_cast(np.array([1.0, 0.5]), "uint8")
    with pytest.raises(CastError, match=r"^value -1 is out of range for Uint8$"):
        checked_cast(np.array([0.0, -1.0, 0.5]), "uint8")
    with pytest.raises(CastError, match=r"^value 128 is out of range for Int8$"):
        checked_cast(np.arange(0, 200, dtype=np.uint8), "int8")
    with pytest.raises(CastError, match=r"^value 2 is out of range for Bool$"):
        checked_cast(np.array([0, 1, 2], np.uint8), "bool")
    with pytest.raises(CastError, match=r"^cannot cast non-integral value NaN to int32$"):
        checked_cast(np.array([np.nan]), "int32")
    with pytest.raises(CastError, match=r"value 9223372036854775807 is out of range for Int64"):
        checked_cast(np.array([1e30]), "int64")
    with pytest.raises(CastError, match=r"non-integral value 0\.0000001 to"):
        checked_cast(np.array([1e-7]), "int16")  # Rust prints no exponent
    assert isinstance(CastError("x"), Error)
    assert isinstance(CastError("x"), ValueError)


def test_checked_cast_passes_what_fits() -> None:
    assert checked_cast(np.array([0, 1], np.uint8), "bool").tolist() == [False, True]
    assert checked_cast(np.array([3.0, -2.0]), "int16").tolist() == [3, -2]
    assert checked_cast(np.array([70000.0]), "float16").tolist() == [math.inf]
    same = np.zeros(3, np.int32)
    assert checked_cast(same, "int32") is same
    with pytest.raises(ValueError, match="unknown dtype 'bfloat16'"):
        checked_cast(same, "bfloat16")


def test_to_uint8_maps_float_ranges_and_saturates_integers() -> None:
    assert to_uint8(np.array([0.0, 0.5, 1.0, 2.0, -1.0, np.nan])).tolist() == [
        0,
        128,
        255,
        255,
        0,
        0,
    ]
    assert to_uint8(np.array([0.0, 5.0, 10.0]), (0.0, 10.0)).tolist() == [0, 128, 255]
    # An empty range falls back to [0, 1].
    assert to_uint8(np.array([0.5]), (1.0, 1.0)).tolist() == [128]
    assert to_uint8(np.array([-5, 7, 300], np.int32), (0.0, 1.0)).tolist() == [0, 7, 255]
    pixels = np.zeros(3, np.uint8)
    assert to_uint8(pixels) is pixels


def test_normalize_is_float32_arithmetic() -> None:
    out = normalize(np.array([0, 128, 255], np.uint8), -1.0, 1.0)
    assert out.dtype == np.float32
    assert out.tolist() == [-1.0, np.float32(-1.0) + np.float32(128 / 255) * np.float32(2), 1.0]
    # 3/255 in float32, scaled: the same bits RLMesh produces.
    assert normalize(np.array([3], np.uint8), 0.0, 1.0)[0] == np.float32(0.011764706)


# --- the pipeline ---------------------------------------------------------------------------


def _frame(height: int = 6, width: int = 8, channels: int = 3) -> np.ndarray:
    return (np.arange(height * width * channels).reshape(height, width, channels) % 251).astype(
        np.uint8
    )


def test_the_default_pipeline_is_a_copy() -> None:
    frame = _frame()
    out = ImagePipeline()(frame)
    assert np.array_equal(out, frame)
    assert not np.shares_memory(out, frame)


def test_flip_is_a_180_degree_rotation_not_a_mirror() -> None:
    frame = _frame()
    assert np.array_equal(ImagePipeline(flip=True)(frame), frame[::-1, ::-1])


def test_layouts_lead_dims_and_channel_order() -> None:
    frame = _frame()
    chw = np.ascontiguousarray(frame.transpose(2, 0, 1))
    out = ImagePipeline(src_layout="chw", channel_order="bgr", dst_layout="chw", lead_dims=2)(chw)
    assert out.shape == (1, 1, 3, 6, 8)
    assert np.array_equal(out[0, 0], chw[::-1])
    assert out.flags.c_contiguous


def test_batches_keep_their_axes_before_the_lead_dims() -> None:
    frames = np.stack([_frame(), _frame()[::-1]])
    pipeline = ImagePipeline(size=(3, 4), resample="bilinear_aa", dst_layout="chw", lead_dims=1)
    out = pipeline(frames)
    assert out.shape == (2, 1, 3, 3, 4)
    assert np.array_equal(out[1], pipeline(frames[1]))


def test_the_steps_run_in_rlmesh_order() -> None:
    # flip, slice crop, crop fit, bgr, normalize, chw, lead dims (the same frame through
    # RLMesh 0.1.0 gives these numbers).
    frame = _frame(9, 12)
    pipeline = ImagePipeline(
        flip=True,
        crop=0.8,
        crop_mode="slice",
        size=(4, 4),
        fit="crop",
        resample="bilinear_aa",
        channel_order="bgr",
        normalize=(0.0, 1.0),
        dtype="float32",
        dst_layout="chw",
        lead_dims=1,
    )
    cut = frame[::-1, ::-1][1:8, 1:11]  # 7x10 centre of the upright frame
    upright = ImagePipeline(size=(4, 6), resample="bilinear_aa")(cut)[:, 1:5]
    expected = normalize(upright[..., ::-1], 0.0, 1.0).transpose(2, 0, 1)[None]
    assert np.array_equal(pipeline(frame), expected)


def test_pad_fills_with_zero() -> None:
    frame = np.full((4, 8, 3), 200, np.uint8)
    out = ImagePipeline(size=(8, 8), fit="pad")(frame)
    assert out[2:6].min() == 200
    assert out[:2].max() == 0
    assert out[6:].max() == 0


def test_finish_is_the_blank_frame_path() -> None:
    blank = np.full((2, 3, 3), 7, np.uint8)
    out = ImagePipeline(normalize=(-1.0, 1.0), dtype="float64", dst_layout="chw").finish(blank)
    assert out.shape == (3, 2, 3)
    assert out.dtype == np.float64
    assert np.all(out == np.float64(np.float32(-1) + np.float32(7 / 255) * np.float32(2)))


def test_float_frames_map_their_range() -> None:
    frame = np.linspace(-1.0, 1.0, 24, dtype=np.float32).reshape(2, 4, 3)
    out = ImagePipeline(src_range=(-1.0, 1.0))(frame)
    assert out.dtype == np.uint8
    assert out[0, 0, 0] == 0
    assert out[-1, -1, -1] == 255


def test_integer_dtypes_are_checked() -> None:
    with pytest.raises(CastError, match="non-integral"):
        ImagePipeline(normalize=(0.0, 1.0), dtype="uint8")(_frame())
    with pytest.raises(CastError, match="out of range for Int8"):
        ImagePipeline(dtype="int8")(np.full((2, 2, 3), 200, np.uint8))


def test_the_source_size_can_change_between_calls() -> None:
    pipeline = ImagePipeline(size=(4, 4), resample="area", src_size=(8, 8))
    assert pipeline(_frame(8, 8)).shape == (4, 4, 3)
    assert pipeline(_frame(12, 12)).shape == (4, 4, 3)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"resample": "bicubic"}, "unknown resample 'bicubic'"),
        ({"fit": "squish"}, "unknown fit"),
        ({"dtype": "float"}, "unknown dtype"),
        ({"crop": 0.0}, "crop must be a side fraction"),
        ({"jpeg_quality": 0}, "jpeg_quality must be in 1..100"),
        ({"size": (0, 4)}, "size must be positive"),
        ({"src_layout": "whc"}, "unknown layout"),
    ],
)
def test_construction_refuses_bad_choices(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ImagePipeline(**kwargs)  # type: ignore[arg-type]


def test_a_frame_needs_three_axes() -> None:
    with pytest.raises(ValueError, match=r"expected an image with 3 axes \(hwc\), got shape"):
        ImagePipeline()(np.zeros((4, 4), np.uint8))


# --- encoded frames ------------------------------------------------------------------------


def _png(pixels: np.ndarray) -> bytes:
    """A minimal PNG (filter type 0 rows) of 8-bit ``(H, W, C)`` pixels."""
    import struct
    import zlib

    height, width, channels = pixels.shape
    colour = {1: 0, 2: 4, 3: 2, 4: 6}[channels]

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body) & 0xFFFFFFFF
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", width, height, 8, colour, 0, 0, 0)
    rows = b"".join(b"\x00" + pixels[row].tobytes() for row in range(height))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


@pytest.mark.parametrize("channels", [1, 2, 3, 4])
@pytest.mark.parametrize("pillow", [True, False], ids=["pillow", "builtin"])
def test_png_bytes_keep_their_channels(
    channels: int, pillow: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if pillow:
        pytest.importorskip("PIL")
    else:
        monkeypatch.setattr(_image_codec, "_pillow", lambda: None)
    pixels = _frame(3, 5, channels)
    decoded = decode_image(_png(pixels))
    assert decoded.shape == (3, 5, channels)
    assert np.array_equal(decoded, pixels)
    assert np.array_equal(ImagePipeline(flip=True)(_png(pixels)), pixels[::-1, ::-1])


@pytest.mark.parametrize("channels", [1, 2, 3, 4])
@pytest.mark.parametrize("pillow", [True, False], ids=["pillow", "builtin"])
def test_sixteen_bit_png_bytes_round_to_eight_bits_like_rlmesh(
    channels: int, pillow: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # RLMesh's decoder maps a 16-bit sample v to (v + 128) // 257; Pillow alone keeps the
    # high byte of colour samples (v >> 8), a step higher for some v, such as 55869.
    if not pillow:
        monkeypatch.setattr(_image_codec, "_pillow", lambda: None)
    samples = np.random.default_rng(channels).integers(0, 65536, (5, 6, channels), np.uint16)
    samples[0, 0, 0] = 55869  # (v + 128) // 257 = 217, v >> 8 = 218
    image = samples if channels > 1 else samples[..., 0]
    decoded = decode_image(encode_png(image, [0, 1, 2, 3, 4], depth=16))
    assert decoded.shape == (5, 6, channels)
    np.testing.assert_array_equal(decoded, (samples.astype(np.int64) + 128) // 257)


def test_undecodable_bytes_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ImageDecodeError, match="neither PNG nor JPEG"):
        decode_image(b"not an image")
    monkeypatch.setattr(_image_codec, "_pillow", lambda: None)
    with pytest.raises(
        ImageDecodeError, match=r"needs Pillow: pip install 'trio-rlmesh\[adapters\]'"
    ):
        decode_image(b"\xff\xd8\xff\xe0 rest of a jpeg")
    with pytest.raises(ImageDecodeError, match=r"could not decode image bytes: .*\[adapters\]"):
        decode_image(b"\x89PNG\r\n\x1a\n" + b"\x00" * 8)


def test_jpeg_quality_without_pillow_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_image_codec, "_pillow", lambda: None)
    with pytest.raises(SpecError, match=r"jpeg_quality needs Pillow: pip install"):
        ImagePipeline(jpeg_quality=90)


def test_jpeg_round_trip_is_a_lossy_identity_at_high_quality() -> None:
    pytest.importorskip("PIL")
    smooth = np.broadcast_to(
        np.linspace(0, 255, 32, dtype=np.uint8)[None, :, None], (16, 32, 3)
    ).copy()
    out = ImagePipeline(jpeg_quality=95)(smooth)
    assert out.shape == smooth.shape
    assert np.abs(out.astype(int) - smooth).max() <= 4
    with pytest.raises(ValueError, match="needs a 3-channel image"):
        ImagePipeline(jpeg_quality=95)(smooth[..., :1])


def test_jpeg_bytes_decode_with_pillow() -> None:
    image = pytest.importorskip("PIL.Image")
    smooth = np.broadcast_to(np.linspace(0, 255, 16, dtype=np.uint8)[:, None, None], (16, 8, 3))
    encoded = io.BytesIO()
    image.fromarray(np.ascontiguousarray(smooth)).save(encoded, format="JPEG", quality=95)
    decoded = decode_image(encoded.getvalue())
    assert decoded.shape == (16, 8, 3)
    assert np.abs(decoded.astype(int) - smooth).max() <= 4


# Every choice a spec may name, as the pipeline field that takes it.
CHOICES = [
    *(("src_layout", name) for name in _vocab.IMAGE_LAYOUTS),
    *(("dst_layout", name) for name in _vocab.IMAGE_LAYOUTS),
    *(("fit", name) for name in _vocab.FIT_MODES),
    *(("crop_mode", name) for name in _vocab.CROP_MODES),
    *(("resample", name) for name in _vocab.RESAMPLES),
    *(("channel_order", name) for name in _vocab.CHANNEL_ORDERS),
    *(("dtype", name) for name in _vocab.DTYPES),
]


@pytest.mark.parametrize(("field", "choice"), CHOICES, ids=[f"{f}={c}" for f, c in CHOICES])
def test_the_pipeline_runs_every_choice_the_spec_vocabulary_names(field: str, choice: str) -> None:
    # 0/1 pixels stay 0/1 through any resample, so even a bool or int8 cast holds them.
    frame = (np.arange(4 * 6 * 3).reshape(4, 6, 3) % 2).astype(np.uint8)
    if field == "src_layout" and choice == "chw":
        frame = frame.transpose(2, 0, 1).copy()
    options: dict[str, Any] = {"size": (2, 2), "crop": 0.5, field: choice}
    out = ImagePipeline(**options)(frame)
    assert out.shape == ((3, 2, 2) if options.get("dst_layout") == "chw" else (2, 2, 3))
    assert out.dtype.name == options.get("dtype", "uint8")


@pytest.mark.parametrize(
    "name",
    [
        "trio_rlmesh.adapters._image",
        "trio_rlmesh.adapters._image_cast",
        "trio_rlmesh.adapters._image_resample",
    ],
)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0


# --- against RLMesh 0.1.0 (interop session) -----------------------------------------------


@pytest.fixture
def rlmesh_adapters() -> Any:
    return pytest.importorskip("rlmesh.adapters")


def _gymnasium() -> Any:
    return pytest.importorskip("gymnasium")


def _our_image(shape: tuple[int, int, int], **kwargs: Any) -> ImagePipeline:
    """The pipeline our resolver builds for :func:`wheel.camera`'s pairing (by hand)."""
    image = dict(kwargs)
    height, width, _ = shape
    env_dtype = np.dtype(image.pop("env_dtype", np.uint8))
    env_range = image.pop("env_range", (0, 255))
    size = image.pop("size", None)
    target = (size, size) if size is not None else None
    if "height" in image or "width" in image:
        target = (image.pop("height", None) or height, image.pop("width", None) or width)
    if "crop_area" in image:
        image["crop"] = math.sqrt(image.pop("crop_area"))
    normalize = image.pop("normalize", False)
    image.pop("allow_upscale", None)
    return ImagePipeline(
        src_layout=image.pop("env_layout", "hwc"),
        src_range=tuple(map(float, env_range)) if env_dtype.kind == "f" else None,
        flip=image.pop("env_upside_down", False) != image.pop("upside_down", False),
        size=target,
        fit=image.pop("fit", None) or "stretch",
        normalize=None if normalize is False else (0.0, 1.0) if normalize is True else normalize,
        dst_layout=image.pop("layout", "hwc"),
        src_size=(height, width),
        **image,
    )


def _compare(
    adapt: Any, frame: np.ndarray | bytes, shape: tuple[int, int, int], **kwargs: Any
) -> tuple[np.ndarray, np.ndarray]:
    theirs = wheel.camera(adapt, _gymnasium(), shape, **kwargs).transform_obs({"cam": frame})["img"]
    ours = _our_image(shape, **kwargs)(frame)
    assert ours.shape == theirs.shape
    assert ours.dtype == theirs.dtype
    return ours, theirs


def _within_one_step(ours: np.ndarray, theirs: np.ndarray, *, zoom: bool = False) -> None:
    """The v1 tolerance for a resize: one uint8 step. Without a zoom crop, all but exact;
    a zoom box's fractional edges round differently from RLMesh's at exact ties (a few
    pixels in a hundred on crop fractions such as 1/3, measured)."""
    difference = np.abs(ours.astype(np.int64) - theirs.astype(np.int64))
    assert difference.max(initial=0) <= 1
    if not zoom:
        assert np.count_nonzero(difference) <= max(1, difference.size // 1000)


SIZES = [
    ((256, 256, 3), (224, 224)),
    ((37, 45, 3), (20, 19)),
    ((7, 9, 1), (3, 4)),
    ((12, 8, 3), (12, 20)),
    ((5, 5, 4), (9, 9)),
    ((33, 17, 3), (64, 40)),
    ((100, 100, 3), (30, 30)),
]


@pytest.mark.interop
@pytest.mark.parametrize("name", RESAMPLES)
@pytest.mark.parametrize(("shape", "target"), SIZES)
def test_resize_matches_rlmesh(
    rlmesh_adapters: Any, name: str, shape: tuple[int, int, int], target: tuple[int, int]
) -> None:
    frame = np.random.default_rng(sum(shape) + sum(target)).integers(0, 256, shape, np.uint8)
    ours, theirs = _compare(
        rlmesh_adapters,
        frame,
        shape,
        height=target[0],
        width=target[1],
        resample=name,
        fit="stretch",
        allow_upscale=True,
    )
    _within_one_step(ours, theirs)


GEOMETRIES: list[dict[str, Any]] = [
    {"height": 20, "width": 30, "fit": "crop"},
    {"height": 30, "width": 20, "fit": "crop", "resample": "area"},
    {"height": 20, "width": 30, "fit": "pad", "resample": "bicubic_aa"},
    {"height": 40, "width": 10, "fit": "pad", "resample": "bilinear"},
    {"crop": 0.8, "allow_upscale": True},
    {"crop": 2 / 3, "crop_mode": "slice"},
    {"crop_area": 0.7, "size": 16, "fit": "crop", "crop_mode": "slice"},
    {"crop": 0.77, "height": 10, "width": 14, "fit": "crop"},
    {"crop": 0.6, "size": 18, "fit": "pad", "resample": "lanczos3_aa"},
    {"crop": 0.9, "height": 12, "width": 25, "fit": "stretch", "resample": "area"},
]


@pytest.mark.interop
@pytest.mark.parametrize("geometry", GEOMETRIES)
@pytest.mark.parametrize("shape", [(40, 52, 3), (37, 45, 3), (31, 41, 1)])
def test_crop_and_fit_geometry_match_rlmesh(
    rlmesh_adapters: Any, geometry: dict[str, Any], shape: tuple[int, int, int]
) -> None:
    frame = np.random.default_rng(len(geometry) + shape[0]).integers(0, 256, shape, np.uint8)
    ours, theirs = _compare(
        rlmesh_adapters, frame, shape, **{"resample": "bilinear_aa", **geometry}
    )
    zoom = geometry.get("crop_mode", "zoom") == "zoom" and "crop" in geometry
    _within_one_step(ours, theirs, zoom=zoom)


FINISHES: list[dict[str, Any]] = [
    {"layout": "chw", "lead_dims": 2},
    {"upside_down": True, "channel_order": "bgr"},
    {"env_layout": "chw", "env_upside_down": True, "layout": "chw"},
    {"normalize": True, "dtype": "float32"},
    {"normalize": (-1.0, 1.0), "dtype": "float64", "layout": "chw"},
    {"normalize": (0.1, 0.7), "dtype": "float16"},
    {"dtype": "int16"},
    {"dtype": "float32", "channel_order": "bgr", "lead_dims": 1},
    {"env_dtype": np.float32, "env_range": (0.0, 1.0)},
    {"env_dtype": np.float64, "env_range": (-1.0, 1.0), "normalize": True, "dtype": "float32"},
    {"env_dtype": np.uint16, "env_range": (0, 1000)},
]


@pytest.mark.interop
@pytest.mark.parametrize("finish", FINISHES)
def test_layouts_flips_and_dtypes_match_rlmesh_exactly(
    rlmesh_adapters: Any, finish: dict[str, Any]
) -> None:
    rng = np.random.default_rng(7)
    shape = (9, 11, 3)
    dtype = np.dtype(finish.get("env_dtype", np.uint8))
    low, high = finish.get("env_range", (0, 255))
    if dtype.kind == "f":
        frame = rng.uniform(low, high, shape).astype(dtype)
    else:
        frame = rng.integers(low, high, shape, endpoint=True).astype(dtype)
    if finish.get("env_layout") == "chw":
        frame = np.ascontiguousarray(frame.transpose(2, 0, 1))
    ours, theirs = _compare(rlmesh_adapters, frame, shape, **finish)
    np.testing.assert_array_equal(ours, theirs)


@pytest.mark.interop
@pytest.mark.parametrize(("dtype", "normalize"), [("uint8", True), ("int8", False)])
def test_refused_casts_match_rlmesh(rlmesh_adapters: Any, dtype: str, normalize: bool) -> None:
    frame = np.full((4, 4, 3), 200, np.uint8)
    frame[0, 0, 0] = 3
    reference = wheel.camera(
        rlmesh_adapters, _gymnasium(), frame.shape, dtype=dtype, normalize=normalize
    )
    with pytest.raises(ValueError) as theirs:
        reference.transform_obs({"cam": frame})
    with pytest.raises(CastError) as ours:
        _our_image(frame.shape, dtype=dtype, normalize=normalize)(frame)
    assert str(ours.value) == str(theirs.value)


@pytest.mark.interop
def test_resize_property_matches_rlmesh(rlmesh_adapters: Any) -> None:
    """Random sizes, algorithms and fits, every one against RLMesh."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(
        height=st.integers(1, 48),
        width=st.integers(1, 48),
        channels=st.sampled_from([1, 3]),
        target=st.tuples(st.integers(1, 48), st.integers(1, 48)),
        name=st.sampled_from(RESAMPLES),
        fit=st.sampled_from(["stretch", "crop", "pad"]),
        crop=st.one_of(st.none(), st.floats(0.3, 1.0)),
        crop_mode=st.sampled_from(["zoom", "slice"]),
        seed=st.integers(0, 2**32 - 1),
    )
    def check(
        height: int,
        width: int,
        channels: int,
        target: tuple[int, int],
        name: str,
        fit: str,
        crop: float | None,
        crop_mode: str,
        seed: int,
    ) -> None:
        shape = (height, width, channels)
        frame = np.random.default_rng(seed).integers(0, 256, shape, np.uint8)
        ours, theirs = _compare(
            rlmesh_adapters,
            frame,
            shape,
            height=target[0],
            width=target[1],
            resample=name,
            fit=fit,
            crop=crop,
            crop_mode=crop_mode,
            allow_upscale=True,
        )
        _within_one_step(ours, theirs, zoom=crop is not None and crop_mode == "zoom")

    check()


def _smooth(height: int, width: int) -> np.ndarray:
    rows, cols = np.mgrid[0:height, 0:width]
    planes = [(rows * 3) % 256, (cols * 2) % 256, ((rows + cols) * 2) % 256]
    return np.stack(planes, axis=-1).astype(np.uint8)


@pytest.mark.interop
def test_png_bytes_match_rlmesh(rlmesh_adapters: Any) -> None:
    image = pytest.importorskip("PIL.Image")
    frame = np.random.default_rng(1).integers(0, 256, (24, 40, 3), np.uint8)
    for mode, shape in [("RGB", (24, 40, 3)), ("L", (24, 40, 1)), ("RGBA", (24, 40, 4))]:
        encoded = io.BytesIO()
        pixels = np.dstack([frame, frame[..., :1]]) if mode == "RGBA" else frame
        image.fromarray(pixels).convert(mode).save(encoded, format="PNG")
        ours, theirs = _compare(
            rlmesh_adapters, encoded.getvalue(), shape, size=20, resample="area", fit="crop"
        )
        np.testing.assert_array_equal(ours, theirs)
    sixteen = np.random.default_rng(2).integers(0, 65536, (6, 5, 3), np.uint16)
    data = encode_png(sixteen, [4, 1], depth=16)
    ours, theirs = _compare(rlmesh_adapters, data, (6, 5, 3))
    np.testing.assert_array_equal(ours, theirs)


@pytest.mark.interop
def test_jpeg_bytes_decode_close_to_rlmesh(rlmesh_adapters: Any) -> None:
    """Two JPEG decoders (Pillow's libjpeg, RLMesh's Rust one): not bit-equal, but close."""
    image = pytest.importorskip("PIL.Image")
    encoded = io.BytesIO()
    image.fromarray(_smooth(48, 64)).save(encoded, format="JPEG", quality=90)
    ours, theirs = _compare(rlmesh_adapters, encoded.getvalue(), (48, 64, 3))
    difference = np.abs(ours.astype(int) - theirs.astype(int))
    assert difference.max() <= 3
    assert difference.mean() < 0.5


@pytest.mark.interop
@pytest.mark.parametrize("quality", [95, 75, 30])
def test_jpeg_quality_is_close_to_rlmesh(rlmesh_adapters: Any, quality: int) -> None:
    """Pillow's encoder against RLMesh's: the same artifacts on average (measured: mean
    difference 0.3-0.5 of a step on this frame, max 2-7), not pixel for pixel."""
    pytest.importorskip("PIL")
    frame = _smooth(64, 80)
    ours, theirs = _compare(rlmesh_adapters, frame, (64, 80, 3), jpeg_quality=quality)
    difference = np.abs(ours.astype(int) - theirs.astype(int))
    assert difference.mean() < 1.0
    assert difference.max() <= 10
    # Both really are lossy: neither hands the model the clean frame.
    assert np.abs(ours.astype(int) - frame).mean() > difference.mean()


@pytest.mark.interop
def test_jpeg_runs_on_the_upright_frame_like_rlmesh(rlmesh_adapters: Any) -> None:
    """Flip, then JPEG: 8x8 blocks land differently on a 60x76 frame the other way round."""
    pytest.importorskip("PIL")
    frame = _smooth(60, 76)
    kwargs = {"jpeg_quality": 50, "env_upside_down": True}
    ours, theirs = _compare(rlmesh_adapters, frame, (60, 76, 3), **kwargs)
    other_order = jpeg_round_trip(frame, 50)[::-1, ::-1]
    assert (
        np.abs(ours.astype(int) - theirs.astype(int)).mean()
        < np.abs(other_order.astype(int) - theirs.astype(int)).mean()
    )
