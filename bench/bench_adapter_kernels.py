"""The adapter kernels against RLMesh 0.1.0's native adapter core, side by side in one run.

    python bench/bench_adapter_kernels.py            # about a minute on 2 busy cores
    python bench/bench_adapter_kernels.py --quick    # a few seconds

Each row times RLMesh's resolved adapter (``rlmesh.adapters``, native core) and our kernel
doing the same work, in interleaved rounds (A B, B A, ...), and prints the median calls/s of
each side and the median of the per-round ratios (above 1: ours is faster). RLMesh's side
is a whole ``transform_obs``/``transform_action`` (its Python wrapper, the crossing into
Rust and back); ours is the kernel alone, so the image rows bound what the full adapter
can reach (its own assembly adds a little) and the rotation rows are an upper bound.

The "resize variants" rows compare ways to apply the same float64 weights (ours only):
cache-sized blocks of per-tap gathers (shipped), whole-image gathers, and dense (out, in)
weight matrices through BLAS.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

# RLMesh's side is built by the interop tests' helpers (one pairing per kernel).
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.adapters import wheel as reference  # noqa: E402

from trio_rlmesh.adapters import _image_resample  # noqa: E402
from trio_rlmesh.adapters._image import ImagePipeline, axis_weights, resample  # noqa: E402
from trio_rlmesh.adapters._rotation import RotationConversion  # noqa: E402

Call = Callable[[], object]


def _rate(call: Call, seconds: float) -> float:
    """Calls per second over about ``seconds``."""
    call()
    count, started = 0, time.perf_counter()
    while True:
        call()
        count += 1
        elapsed = time.perf_counter() - started
        if elapsed >= seconds:
            return count / elapsed


def side_by_side(
    theirs: Call, ours: Call, rounds: int, seconds: float
) -> tuple[float, float, float]:
    """(their calls/s, our calls/s, median ratio ours/theirs), interleaved rounds."""
    mine, other, ratios = [], [], []
    for index in range(rounds):
        if index % 2:
            a = _rate(ours, seconds)
            b = _rate(theirs, seconds)
        else:
            b = _rate(theirs, seconds)
            a = _rate(ours, seconds)
        mine.append(a)
        other.append(b)
        ratios.append(a / b)
    return statistics.median(other), statistics.median(mine), statistics.median(ratios)


class _Stack:
    """What a frame stack adds per call: keep the last ``depth`` outputs, stack them."""

    def __init__(self, depth: int) -> None:
        self.frames: list[np.ndarray] = []
        self.depth = depth

    def push(self, frame: np.ndarray) -> np.ndarray:
        self.frames = (
            [*self.frames[-(self.depth - 1) :], frame] if self.frames else [frame] * self.depth
        )
        return np.stack(self.frames)


def image_rows(
    adapt: Any, gym: Any, rounds: int, seconds: float
) -> list[tuple[str, float, float, float]]:
    frame = np.random.default_rng(0).integers(0, 256, (256, 256, 3), np.uint8)
    rows = []
    for name, stack in [
        ("bilinear_aa", 2),
        ("bilinear_aa", 1),
        ("bilinear", 1),
        ("area", 1),
        ("bicubic_aa", 1),
        ("lanczos3_aa", 1),
    ]:
        wheel = reference.camera(adapt, gym, (256, 256, 3), size=224, resample=name, stack=stack)
        pipeline = ImagePipeline(size=(224, 224), resample=name, src_size=(256, 256))
        stacker = _Stack(stack)
        observation = {"cam": frame}

        def theirs(wheel: Any = wheel, observation: dict[str, Any] = observation) -> object:
            return wheel.transform_obs(observation)

        def ours(pipeline: ImagePipeline = pipeline, stacker: _Stack = stacker) -> object:
            out = pipeline(frame)
            return stacker.push(out) if stacker.depth > 1 else out

        label = f"256x256x3 -> 224x224 {name}" + (f", stack {stack}" if stack > 1 else "")
        rows.append((label, *side_by_side(theirs, ours, rounds, seconds)))
    return rows


def resize_variants(seconds: float) -> list[tuple[str, float]]:
    frame = np.random.default_rng(0).integers(0, 256, (256, 256, 3), np.uint8)
    rows_taps = axis_weights(256, 224, "bilinear_aa")
    cols_taps = axis_weights(256, 224, "bilinear_aa")

    def dense(taps: _image_resample.AxisWeights) -> np.ndarray:
        matrix = np.zeros((taps.dst, taps.src))
        for tap in range(taps.index.shape[1]):
            np.add.at(matrix, (np.arange(taps.dst), taps.index[:, tap]), taps.weight[:, tap])
        return matrix

    row_matrix, col_matrix = dense(rows_taps), dense(cols_taps)

    def blocked() -> object:
        return resample(frame, rows_taps, cols_taps)

    def whole() -> object:
        saved = _image_resample._BLOCK_BYTES
        _image_resample._BLOCK_BYTES = 1 << 40
        try:
            return resample(frame, rows_taps, cols_taps)
        finally:
            _image_resample._BLOCK_BYTES = saved

    def matrices() -> object:
        horizontal = np.matmul(col_matrix, frame.astype(np.float64))  # (256, 224, 3)
        out = np.tensordot(row_matrix, horizontal, axes=(1, 0))
        return np.clip(np.rint(out), 0, 255).astype(np.uint8)

    return [
        ("per-tap gathers in cache-sized blocks (shipped)", _rate(blocked, seconds)),
        ("per-tap gathers over the whole image", _rate(whole, seconds)),
        ("dense (out, in) matrices, matmul + tensordot", _rate(matrices, seconds)),
    ]


def rotation_rows(
    adapt: Any, gym: Any, rounds: int, seconds: float
) -> list[tuple[str, float, float, float]]:
    rng = np.random.default_rng(0)
    rows = []
    for source, target in [("quat_xyzw", "rot6d"), ("rot6d", "axis_angle")]:
        value = rng.normal(size={"quat_xyzw": 4, "rot6d": 6}[source]).astype(np.float32)
        wheel = reference.rotation_state(adapt, gym, source, target)
        conversion = RotationConversion(source, target)
        observation = {"rot": value}
        rows.append(
            (
                f"state {source} -> {target} (one rotation)",
                *side_by_side(
                    lambda wheel=wheel, observation=observation: wheel.transform_obs(observation),
                    lambda conversion=conversion, value=value: conversion(value),
                    rounds,
                    seconds,
                ),
            )
        )
    value = rng.normal(size=6).astype(np.float32)
    wheel = reference.rotation_action(adapt, gym, "rot6d", "quat_xyzw")
    conversion = RotationConversion("rot6d", "quat_xyzw")
    rows.append(
        (
            "action rot6d -> quat_xyzw (one rotation)",
            *side_by_side(
                lambda: wheel.transform_action(value), lambda: conversion(value), rounds, seconds
            ),
        )
    )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one short round per row")
    options = parser.parse_args()
    rounds, seconds = (2, 0.2) if options.quick else (6, 0.5)
    try:
        import gymnasium as gym
        import rlmesh.adapters as adapt
    except ImportError as exc:
        raise SystemExit(f"needs rlmesh==0.1.0 and gymnasium: {exc}") from None
    print(f"{'row':58} {'rlmesh/s':>10} {'ours/s':>10} {'ours/theirs':>12}")
    for label, theirs, ours, ratio in image_rows(adapt, gym, rounds, seconds) + rotation_rows(
        adapt, gym, rounds, seconds
    ):
        print(f"{label:58} {theirs:10.0f} {ours:10.0f} {ratio:11.2f}x")
    print("\nresize variants, 256x256x3 -> 224x224 bilinear_aa (ours only)")
    for label, rate in resize_variants(seconds * 2):
        print(f"  {label:56} {rate:10.0f}/s")


if __name__ == "__main__":
    main()
