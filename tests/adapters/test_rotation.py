"""The rotation kernels, without RLMesh: conventions by hand, values pinned from RLMesh 0.1.0.

``PINNED`` holds outputs of ``rlmesh.adapters`` 0.1.0 (a state part converting between the
two encodings) for fixed inputs; the interop tests compare the two on random inputs.
"""

from __future__ import annotations

import doctest
import math
from typing import Any

import numpy as np
import pytest

from tests.adapters import wheel
from trio_rlmesh.adapters import _rotation
from trio_rlmesh.adapters._rotation import (
    RotationConversion,
    convert_rotation,
    from_matrix,
    rotation_matrix,
    to_matrix,
)
from trio_rlmesh.adapters._vocab import DIRECTIONS, ROTATION_DIMS

ROTATIONS = [name for name in ROTATION_DIMS if name not in DIRECTIONS]

PINNED = [
    ("quat_xyzw", "euler_xyz", [0.1, -0.2, 0.3, 0.9], [0.07047134, -0.45794442, 0.62707072]),
    ("quat_wxyz", "rot6d", [-0.5, 0.5, -0.5, 0.5], [0.0, -1.0, 0.0, 0.0, 0.0, -1.0]),
    # Through the matrix: normalized, and w made positive by the trace branch.
    ("quat_xyzw", "quat_wxyz", [0.6, 0.0, 0.0, -0.8], [0.80000001, -0.59999996, 0.0, 0.0]),
    # Straight from a quaternion with w < 0: an angle above pi.
    ("quat_xyzw", "axis_angle", [0.0, 0.0, 0.98398596, -0.17825699], [0.0, 0.0, 3.50002146]),
    # The same rotation from a matrix: the w >= 0 side, 2 pi - 3.5 the other way round.
    (
        "rot6d",
        "axis_angle",
        [-0.9364566, -0.35078323, 0.0, 0.35078323, -0.9364566, 0.0],
        [0.0, 0.0, -2.78318524],
    ),
    # Gram-Schmidt repairs a skewed, unnormalized pair.
    (
        "rot6d",
        "quat_xyzw",
        [2.0, 0.1, 0.0, 1.0, 3.0, 0.2],
        [0.03387161, 0.00084626, 0.02496226, 0.99911404],
    ),
    (
        "rot6d_rowmajor",
        "euler_xyz",
        [0.2, 0.9, 0.5, -0.1, 0.7, 0.3],
        [-3.13195658, -0.91505134, 1.19028997],
    ),
    (
        "axis_angle",
        "rot6d_rowmajor",
        [0.3, -0.4, 1.1],
        [0.39438969, -0.90425354, 0.79816121, 0.42533326, 0.45540684, 0.03764489],
    ),
    ("axis_angle", "quat_xyzw", [3.0, 0.0, 0.0], [0.997495, 0.0, 0.0, 0.0707372]),
    ("euler_xyz", "axis_angle", [0.3, 1.5707964, 1.1], [-0.62524426, 1.47884178, 0.62524426]),
    ("euler_xyz", "gravity_xyz", [0.3, -0.2, 2.0], [-0.19866933, -0.28962949, -0.93629336]),
    # Gimbal lock: yaw pinned to 0, roll takes the combined angle.
    ("rot6d", "euler_xyz", [0.0, 0.0, -1.0, 0.29552022, 0.9553365, 0.0], [0.3, 1.57079637, 0.0]),
]


@pytest.mark.parametrize(("source", "target", "value", "expected"), PINNED)
def test_matches_the_pinned_rlmesh_output(
    source: str, target: str, value: list[float], expected: list[float]
) -> None:
    out = convert_rotation(value, source, target)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-6)


def _rx(angle: float) -> np.ndarray:
    c, s = math.cos(angle), math.sin(angle)
    return np.array([[1, 0, 0], [0, c, -s], [0, s, c]])


def _ry(angle: float) -> np.ndarray:
    c, s = math.cos(angle), math.sin(angle)
    return np.array([[c, 0, s], [0, 1, 0], [-s, 0, c]])


def _rz(angle: float) -> np.ndarray:
    c, s = math.cos(angle), math.sin(angle)
    return np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]])


def test_euler_xyz_is_extrinsic_x_then_y_then_z() -> None:
    roll, pitch, yaw = 0.3, -0.4, 1.1
    expected = _rz(yaw) @ _ry(pitch) @ _rx(roll)
    np.testing.assert_allclose(to_matrix([roll, pitch, yaw], "euler_xyz"), expected, atol=1e-6)
    np.testing.assert_allclose(from_matrix(expected, "euler_xyz"), [roll, pitch, yaw], atol=1e-6)


def test_rot6d_is_the_first_two_columns_and_rowmajor_their_rows() -> None:
    quarter = math.pi / 4  # a 90 degree turn about z: columns (0, 1, 0) and (-1, 0, 0)
    quat = [0.0, 0.0, math.sin(quarter), math.cos(quarter)]
    np.testing.assert_allclose(
        convert_rotation(quat, "quat_xyzw", "rot6d"), [0, 1, 0, -1, 0, 0], atol=1e-7
    )
    np.testing.assert_allclose(
        convert_rotation(quat, "quat_xyzw", "rot6d_rowmajor"), [0, -1, 1, 0, 0, 0], atol=1e-7
    )


def test_axis_angle_is_the_rotation_vector() -> None:
    np.testing.assert_allclose(to_matrix([0.0, 0.0, 0.7], "axis_angle"), _rz(0.7), atol=1e-6)
    np.testing.assert_allclose(to_matrix([-0.5, 0.0, 0.0], "axis_angle"), _rx(-0.5), atol=1e-6)


def test_quaternion_layouts_are_the_same_rotation() -> None:
    half = 0.35
    xyzw = [math.sin(half), 0.0, 0.0, math.cos(half)]
    wxyz = [math.cos(half), math.sin(half), 0.0, 0.0]
    np.testing.assert_allclose(to_matrix(xyzw, "quat_xyzw"), _rx(0.7), atol=1e-6)
    np.testing.assert_array_equal(to_matrix(xyzw, "quat_xyzw"), to_matrix(wxyz, "quat_wxyz"))
    # A quaternion is normalized first (in float64): scaling it changes nothing.
    np.testing.assert_allclose(
        to_matrix(np.array(xyzw) * 7, "quat_xyzw"), _rx(0.7), rtol=0, atol=1e-7
    )


def test_gravity_is_down_in_the_body_frame() -> None:
    assert convert_rotation([0.0, 0.0, 0.0], "axis_angle", "gravity_xyz").tolist() == [
        -0.0,
        -0.0,
        -1.0,
    ]
    tilted = convert_rotation([0.3, 0.0, 0.0], "axis_angle", "gravity_xyz")
    np.testing.assert_allclose(tilted, _rx(0.3).T @ [0, 0, -1], atol=1e-7)


@pytest.mark.parametrize("source", ROTATIONS)
def test_zero_vectors_are_the_identity_where_rlmesh_says_so(source: str) -> None:
    zero = np.zeros(ROTATION_DIMS[source], np.float32)
    matrix = to_matrix(zero, source)
    if source.startswith("rot6d"):
        # Gram-Schmidt of two zero columns: all zero (the 1e-8 keeps it finite).
        assert matrix.tolist() == [[0.0] * 3] * 3
    else:
        assert matrix.tolist() == np.eye(3).tolist()


def test_half_turns_keep_their_axis() -> None:
    half_turn = convert_rotation([1, 0, 0, 0, -1, 0], "rot6d", "axis_angle")
    np.testing.assert_allclose(np.abs(half_turn), [math.pi, 0, 0], atol=1e-6)


def test_round_trips_recover_the_rotation() -> None:
    rng = np.random.default_rng(3)
    vectors = rng.normal(size=(50, 3)).astype(np.float32)
    vectors *= rng.uniform(0.1, 3.0, size=(50, 1)) / np.linalg.norm(vectors, axis=1, keepdims=True)
    for encoding in ROTATIONS:
        there = convert_rotation(vectors, "axis_angle", encoding)
        back = convert_rotation(there, encoding, "axis_angle")
        # The same rotation, not always the same vector: from a quaternion with w < 0 the
        # angle comes back as 2 pi - angle about the opposite axis.
        np.testing.assert_allclose(
            to_matrix(back, "axis_angle"), to_matrix(vectors, "axis_angle"), atol=2e-6
        )


def test_the_same_encoding_is_returned_unchanged() -> None:
    quat = np.array([0.0, 0.0, 2.0, 0.0], np.float32)  # not normalized, and left so
    out = convert_rotation(quat, "quat_xyzw", "quat_xyzw")
    assert out.tolist() == quat.tolist()
    assert not np.shares_memory(out, quat)


def test_post_rotate_multiplies_on_the_right() -> None:
    post = rotation_matrix("axis_angle", [0.0, 0.0, math.pi / 2])
    turned = convert_rotation([0.4, 0.0, 0.0], "axis_angle", "rot6d", post)
    expected = (_rx(0.4) @ _rz(math.pi / 2))[:, :2].T.reshape(-1)
    np.testing.assert_allclose(turned, expected, atol=1e-6)
    # With a post-rotation, even the same encoding goes through the matrix.
    same = convert_rotation([0.0, 0.0, 0.0, 1.0], "quat_xyzw", "quat_xyzw", post)
    np.testing.assert_allclose(
        same, [0, 0, math.sin(math.pi / 4), math.cos(math.pi / 4)], atol=1e-7
    )


def test_leading_axes_ride_along_and_agree_with_one_at_a_time() -> None:
    rng = np.random.default_rng(4)
    for source in ROTATIONS:
        batch = rng.normal(size=(2, 3, ROTATION_DIMS[source])).astype(np.float32)
        for target in ROTATION_DIMS:
            out = convert_rotation(batch, source, target)
            assert out.shape == (2, 3, ROTATION_DIMS[target])
            one = convert_rotation(batch[1, 2], source, target)
            np.testing.assert_array_equal(out[1, 2], one, err_msg=f"{source}->{target}")


def test_a_batch_of_one_shape_stays_a_batch() -> None:
    assert convert_rotation([[0.0, 0.0, 0.0, 1.0]], "quat_xyzw", "rot6d").shape == (1, 6)
    assert to_matrix(np.zeros((4, 3)), "axis_angle").shape == (4, 3, 3)
    assert from_matrix(np.stack([np.eye(3)] * 2), "euler_xyz").shape == (2, 3)


def test_the_conversion_object_checks_once() -> None:
    conversion = RotationConversion("quat_wxyz", "gravity_xyz")
    assert (conversion.width, conversion.out_width) == (4, 3)
    assert conversion([1.0, 0.0, 0.0, 0.0]).tolist() == [-0.0, -0.0, -1.0]
    with pytest.raises(ValueError, match=r"post_rotate must be a \(3, 3\) matrix"):
        RotationConversion("rot6d", "rot6d", np.eye(2))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: convert_rotation([0, 0, 0], "rot9d", "rot6d"),
            "unknown rotation encoding 'rot9d'",
        ),
        (lambda: convert_rotation([0, 0, -1], "gravity_xyz", "rot6d"), "is a direction"),
        (
            lambda: convert_rotation([0, 0, 0, 1], "axis_angle", "rot6d"),
            r"expected 3-element axis_angle rotation, got shape \(4,\)",
        ),
        (lambda: from_matrix(np.eye(2), "rot6d"), r"expected \(\.\.\., 3, 3\)"),
        (lambda: rotation_matrix("axis_angle", np.zeros((2, 3))), "expected one axis_angle"),
        (lambda: RotationConversion("euler_zyx", "rot6d"), "unknown rotation encoding"),
    ],
)
def test_bad_requests_are_refused(call: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()  # type: ignore[operator]


def test_docstring_examples() -> None:
    result = doctest.testmod(_rotation, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0


# --- against RLMesh 0.1.0 (interop session) -----------------------------------------------

TARGETS = list(ROTATION_DIMS)


@pytest.fixture
def rlmesh_adapters() -> Any:
    return pytest.importorskip("rlmesh.adapters")


def _gymnasium() -> Any:
    return pytest.importorskip("gymnasium")


def _random(encoding: str, count: int, seed: int) -> np.ndarray:
    """Random rotations in ``encoding``, unnormalized where the encoding allows, plus the
    awkward ones: zero, half turns, gimbal lock, a degenerate 6D pair."""
    rng = np.random.default_rng(seed)
    width = ROTATION_DIMS[encoding]
    if encoding == "axis_angle":
        values = rng.normal(size=(count, 3)) * 1.5
        special = [[math.pi, 0, 0], [0, 0, -math.pi], [1e-9, 0, 0], [3, 3, 3]]
    elif encoding == "euler_xyz":
        values = rng.uniform(-3.2, 3.2, size=(count, 3))
        special = [[0.3, math.pi / 2, 1.1], [0.3, -math.pi / 2, 1.1], [math.pi, 0, 0]]
    elif encoding.startswith("quat"):
        values = rng.normal(size=(count, 4))
        special = [[0, 0, 0, 1], [1, 0, 0, 0], [0, 0, 0, -1], [0.5, 0.5, 0.5, -0.5]]
    else:
        values = rng.normal(size=(count, 6))
        special = [[1, 0, 0, 0, -1, 0], [1, 0, 0, 1, 0, 0], [2, 0, 0, 0, 3, 0]]
    return np.concatenate([values, np.zeros((1, width)), np.array(special)]).astype(np.float32)


@pytest.mark.interop
@pytest.mark.parametrize("source", ROTATIONS)
def test_state_conversions_match_rlmesh(rlmesh_adapters: Any, source: str) -> None:
    values = _random(source, 120, len(source))
    for target in TARGETS:
        reference = wheel.rotation_state(rlmesh_adapters, _gymnasium(), source, target)
        theirs = np.stack([reference.transform_obs({"rot": value})["s"] for value in values])
        batch = convert_rotation(values, source, target)
        one_by_one = np.stack([convert_rotation(value, source, target) for value in values])
        np.testing.assert_allclose(batch, theirs, rtol=0, atol=1e-6, err_msg=target)
        np.testing.assert_array_equal(one_by_one, batch, err_msg=target)


@pytest.mark.interop
@pytest.mark.parametrize(
    ("encoding", "value"),
    [
        ("rot6d", (0.95533649, 0.0, -0.29552021, 0.0, 1.0, 0.0)),
        ("quat_wxyz", (math.cos(0.4), 0.0, math.sin(0.4), 0.0)),
        ("axis_angle", (0.0, 0.0, 0.7)),
        ("euler_xyz", (0.1, 0.2, 0.3)),
    ],
)
def test_post_rotate_matches_rlmesh(
    rlmesh_adapters: Any, encoding: str, value: tuple[float, ...]
) -> None:
    post = rlmesh_adapters.Rotation(encoding=encoding, value=value)
    matrix = rotation_matrix(encoding, value)
    for source in ROTATIONS:
        values = _random(source, 30, 3)
        for target in TARGETS:
            reference = wheel.rotation_state(rlmesh_adapters, _gymnasium(), source, target, post)
            theirs = np.stack([reference.transform_obs({"rot": value})["s"] for value in values])
            ours = RotationConversion(source, target, matrix)(values)
            np.testing.assert_allclose(
                ours, theirs, rtol=0, atol=1e-6, err_msg=f"{source}->{target}"
            )


@pytest.mark.interop
@pytest.mark.parametrize("model", ROTATIONS)
def test_action_conversions_match_rlmesh(rlmesh_adapters: Any, model: str) -> None:
    values = _random(model, 40, 11)
    for env in ROTATIONS:
        reference = wheel.rotation_action(rlmesh_adapters, _gymnasium(), model, env)
        theirs = np.stack([reference.transform_action(value) for value in values])
        ours = convert_rotation(values, model, env)
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-6, err_msg=env)


@pytest.mark.parametrize("source", ROTATIONS)
@pytest.mark.parametrize("target", sorted(ROTATION_DIMS))
def test_one_lane_converts_bit_for_bit_as_in_a_batch(source: str, target: str) -> None:
    # A batch of one takes the float path (the cheap one for a single-env step); its answer
    # must be the row the numpy path gives that rotation among others.
    rng = np.random.default_rng(7)
    batch = rng.normal(size=(5, ROTATION_DIMS[source])).astype(np.float32)
    batch[0] = 0.0  # a degenerate rotation too
    together = RotationConversion(source, target)(batch)
    for row in range(len(batch)):
        alone = RotationConversion(source, target)(batch[row : row + 1])
        assert alone.shape == (1, ROTATION_DIMS[target])
        assert alone.dtype == np.float32
        assert alone.tobytes() == together[row : row + 1].tobytes(), (row, alone, together[row])
