"""Rotation encodings and the conversions between them, vectorized over leading axes.

API (stable; the resolver builds one :class:`RotationConversion` per state part or actuator
whose encodings differ, or that has a ``post_rotate``):

- The encodings and their widths are :mod:`._vocab`'s (:data:`~._vocab.ROTATION_DIMS`);
  :data:`~._vocab.DIRECTIONS` holds the encodings that are directions, not rotations
  (``gravity_xyz``): anything converts into them, nothing out of them.
- :func:`to_matrix(values, encoding) <to_matrix>`: ``(..., width)`` → ``(..., 3, 3)``
  float32 rotation matrices; :func:`from_matrix(matrices, encoding) <from_matrix>` back.
- :func:`convert_rotation(values, source, target, post_rotate=None) <convert_rotation>`:
  ``(..., width(source))`` → ``(..., width(target))`` float32, optionally through
  ``R @ post_rotate`` (a ``(3, 3)`` matrix, see :func:`rotation_matrix`).
- :class:`RotationConversion`: the same with its encodings checked and its post-rotation
  matrix computed once; calling it is the per-step work.
- :func:`rotation_matrix(encoding, value) <rotation_matrix>`: the ``(3, 3)`` matrix of one
  literal rotation (a ``Rotation(encoding=..., value=...)``).

The conventions, each measured against RLMesh 0.1.0 (within 1e-6 on random inputs; the
arithmetic mixes float32 and float64 exactly where RLMesh's does):

- ``quat_xyzw`` / ``quat_wxyz``: normalized in float64 (a zero quaternion is the identity).
  A conversion *to* a quaternion branches on ``trace > 0``, else the largest diagonal, so
  its sign is not canonicalized: ``w`` may come out negative.
- ``axis_angle``: the rotation vector (axis times angle, radians); a zero vector is the
  identity. From a quaternion it is read directly (an angle up to 2π when ``w < 0``); from
  anything else through the quaternion with ``w >= 0`` (an angle in [0, π]).
- ``rot6d``: the matrix's first two columns, ``[m00, m10, m20, m01, m11, m21]``;
  ``rot6d_rowmajor``: the same block row by row, ``[m00, m01, m10, m11, m20, m21]``. Read
  back by Gram-Schmidt (in float32): ``b1 = a1 / (|a1| + 1e-8)``,
  ``b2 = (a2 - (b1 · a2) b1) / (|…| + 1e-8)``, ``b3 = b1 × b2``.
- ``euler_xyz``: ``[roll, pitch, yaw]``, extrinsic x-y-z: ``R = Rz(yaw) Ry(pitch) Rx(roll)``
  (scipy's lowercase ``"xyz"``). Read back with ``pitch = atan2(-m20, hypot(m21, m22))`` in
  [-π/2, π/2]; at gimbal lock (``hypot <= 1e-8``) yaw is 0 and roll takes the combined angle.
- ``gravity_xyz``: the world's down direction in the body frame, ``Rᵀ · (0, 0, -1)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt

from ._vocab import DIRECTIONS, ENCODING_ORDER, ROTATION_DIMS

__all__ = [
    "RotationConversion",
    "convert_rotation",
    "from_matrix",
    "rotation_matrix",
    "to_matrix",
]

_EPS = 1e-8
_F32 = np.float32
_F64 = np.float64
_ZERO = np.float32(0.0)

# The math below runs on components: each is a numpy float32/float64 scalar (one rotation)
# or an array over the leading axes (a batch). The same expression serves both, and one
# rotation costs scalar arithmetic instead of dozens of tiny array calls (10x faster).
_Num = Any
_Matrix = tuple[_Num, _Num, _Num, _Num, _Num, _Num, _Num, _Num, _Num]  # row-major


def _check(encoding: str, *, source: bool) -> None:
    if encoding not in ROTATION_DIMS:
        raise ValueError(
            f"unknown rotation encoding {encoding!r}; expected one of {', '.join(ENCODING_ORDER)}"
        )
    if source and encoding in DIRECTIONS:
        raise ValueError(f"{encoding!r} is a direction, not a rotation: nothing converts out of it")


def _values(values: npt.ArrayLike, encoding: str) -> npt.NDArray[np.float32]:
    array = np.asarray(values, dtype=_F32)
    width = ROTATION_DIMS[encoding]
    if array.ndim == 0 or array.shape[-1] != width:
        raise ValueError(f"expected {width}-element {encoding} rotation, got shape {array.shape}")
    return array


def _components(array: npt.NDArray[np.float32]) -> list[_Num]:
    if array.ndim == 1:
        return list(array)  # numpy float32 scalars
    return [array[..., index] for index in range(array.shape[-1])]


def _assemble(components: list[_Num] | tuple[_Num, ...], batched: bool) -> npt.NDArray[np.float32]:
    if batched:
        return np.stack(np.broadcast_arrays(*components), axis=-1).astype(_F32, copy=False)
    return np.array(components, dtype=_F32)


def _f64(value: _Num) -> _Num:
    """float64: a Python float for one rotation (its arithmetic is the cheapest there is)."""
    if isinstance(value, np.ndarray):
        return value.astype(_F64)
    return float(value)


def _math(scalar: Callable[..., float], array: Callable[..., _Num]) -> Callable[..., _Num]:
    """One float64 function: libm's through ``math`` on floats (as RLMesh's Rust calls it),
    numpy's on arrays."""

    def apply(*args: _Num) -> _Num:
        if isinstance(args[0], float):
            return scalar(*args)
        return array(*args)

    return apply


_sqrt = _math(math.sqrt, np.sqrt)
_sin = _math(math.sin, np.sin)
_cos = _math(math.cos, np.cos)
_atan2 = _math(math.atan2, np.arctan2)
_hypot = _math(math.hypot, np.hypot)


def _where(mask: _Num, when: _Num, otherwise: _Num) -> _Num:
    if isinstance(mask, np.ndarray):
        return np.where(mask, when, otherwise)
    return when if mask else otherwise


def _norm32(*components: _Num) -> _Num:
    """The float32 length (squares summed in order), widened: RLMesh's vector norm."""
    total = components[0] * components[0]
    for component in components[1:]:
        total = total + component * component
    return _f64(np.sqrt(total))


def _identity_where(mask: _Num, matrix: _Matrix) -> _Matrix:
    one, zero = _F32(1.0), _ZERO
    identity = (one, zero, zero, zero, one, zero, zero, zero, one)
    if isinstance(mask, np.ndarray):
        if not mask.any():
            return matrix
        return tuple(np.where(mask, i, m) for i, m in zip(identity, matrix, strict=True))
    return identity if mask else matrix


def _quat_matrix(x: _Num, y: _Num, z: _Num, w: _Num) -> _Matrix:
    x, y, z, w = _f64(x), _f64(y), _f64(z), _f64(w)
    length = _sqrt(x * x + y * y + z * z + w * w)
    degenerate = length <= _EPS
    length = _where(degenerate, 1.0, length)
    x, y, z, w = x / length, y / length, z / length, w / length
    xx, yy, zz = x * x, y * y, z * z
    xy, xz, yz = x * y, x * z, y * z
    wx, wy, wz = w * x, w * y, w * z
    matrix = (
        _F32(1.0 - 2.0 * (yy + zz)),
        _F32(2.0 * (xy - wz)),
        _F32(2.0 * (xz + wy)),
        _F32(2.0 * (xy + wz)),
        _F32(1.0 - 2.0 * (xx + zz)),
        _F32(2.0 * (yz - wx)),
        _F32(2.0 * (xz - wy)),
        _F32(2.0 * (yz + wx)),
        _F32(1.0 - 2.0 * (xx + yy)),
    )
    return _identity_where(degenerate, matrix)


def _axis_angle_matrix(vx: _Num, vy: _Num, vz: _Num) -> _Matrix:
    angle = _norm32(vx, vy, vz)
    degenerate = angle <= _EPS
    scale = _F32(_where(degenerate, 1.0, angle))
    x, y, z = vx / scale, vy / scale, vz / scale
    # Rodrigues, I + sin(a) K + (1 - cos(a)) K @ K, with K @ K summed in full (zeros too) in
    # float32, exactly as RLMesh does: the signs of zero entries survive into atan2 later.
    k = ((_ZERO, -z, y), (z, _ZERO, -x), (-y, x, _ZERO))
    sine = _F32(_sin(angle))
    versine = _F32(1.0 - _cos(angle))
    entries = []
    for row in range(3):
        for col in range(3):
            square = k[row][0] * k[0][col] + k[row][1] * k[1][col] + k[row][2] * k[2][col]
            unit = _F32(1.0) if row == col else _ZERO
            entries.append(unit + (sine * k[row][col] + versine * square))
    return _identity_where(degenerate, tuple(entries))


def _gram_schmidt(a1: tuple[_Num, _Num, _Num], a2: tuple[_Num, _Num, _Num]) -> _Matrix:
    scale = _F32(_norm32(*a1) + _EPS)
    b1 = (a1[0] / scale, a1[1] / scale, a1[2] / scale)
    dot = b1[0] * a2[0] + b1[1] * a2[1] + b1[2] * a2[2]
    b2 = (a2[0] - dot * b1[0], a2[1] - dot * b1[1], a2[2] - dot * b1[2])
    scale = _F32(_norm32(*b2) + _EPS)
    b2 = (b2[0] / scale, b2[1] / scale, b2[2] / scale)
    b3 = (
        b1[1] * b2[2] - b1[2] * b2[1],
        b1[2] * b2[0] - b1[0] * b2[2],
        b1[0] * b2[1] - b1[1] * b2[0],
    )
    return (b1[0], b2[0], b3[0], b1[1], b2[1], b3[1], b1[2], b2[2], b3[2])


def _euler_matrix(roll: _Num, pitch: _Num, yaw: _Num) -> _Matrix:
    roll, pitch, yaw = _f64(roll), _f64(pitch), _f64(yaw)
    sr, cr = _sin(roll), _cos(roll)
    sp, cp = _sin(pitch), _cos(pitch)
    sy, cy = _sin(yaw), _cos(yaw)
    return (
        _F32(cy * cp),
        _F32(cy * sp * sr - sy * cr),
        _F32(cy * sp * cr + sy * sr),
        _F32(sy * cp),
        _F32(sy * sp * sr + cy * cr),
        _F32(sy * sp * cr - cy * sr),
        _F32(-sp),
        _F32(cp * sr),
        _F32(cp * cr),
    )


def _matrix_of(c: list[_Num], encoding: str) -> _Matrix:
    if encoding == "quat_xyzw":
        return _quat_matrix(c[0], c[1], c[2], c[3])
    if encoding == "quat_wxyz":
        return _quat_matrix(c[1], c[2], c[3], c[0])
    if encoding == "axis_angle":
        return _axis_angle_matrix(c[0], c[1], c[2])
    if encoding == "rot6d":
        return _gram_schmidt((c[0], c[1], c[2]), (c[3], c[4], c[5]))
    if encoding == "rot6d_rowmajor":
        return _gram_schmidt((c[0], c[2], c[4]), (c[1], c[3], c[5]))
    return _euler_matrix(c[0], c[1], c[2])


def _quat_branch(m: tuple[_Num, ...], branch: int) -> list[_Num]:
    m00, m01, m02, m10, m11, m12, m20, m21, m22 = m
    if branch == 0:
        s = 2.0 * _sqrt(m00 + m11 + m22 + 1.0)
        return [(m21 - m12) / s, (m02 - m20) / s, (m10 - m01) / s, 0.25 * s]
    if branch == 1:
        s = 2.0 * _sqrt(1.0 + m00 - m11 - m22)
        return [0.25 * s, (m01 + m10) / s, (m02 + m20) / s, (m21 - m12) / s]
    if branch == 2:
        s = 2.0 * _sqrt(1.0 + m11 - m00 - m22)
        return [(m01 + m10) / s, 0.25 * s, (m12 + m21) / s, (m02 - m20) / s]
    s = 2.0 * _sqrt(1.0 + m22 - m00 - m11)
    return [(m02 + m20) / s, (m12 + m21) / s, 0.25 * s, (m10 - m01) / s]


def _quat_of(matrix: _Matrix) -> list[_Num]:
    """xyzw float32 quaternion components: from the trace when it is positive, else from
    the largest diagonal entry (computed in float64)."""
    m = tuple(_f64(entry) for entry in matrix)
    m00, m11, m22 = m[0], m[4], m[8]
    if isinstance(m00, float):
        if m00 + m11 + m22 > 0.0:
            branch = 0
        elif m00 > m11 and m00 > m22:
            branch = 1
        else:
            branch = 2 if m11 > m22 else 3
        return [_F32(value) for value in _quat_branch(m, branch)]
    by_trace = m00 + m11 + m22 > 0.0
    by_x = ~by_trace & (m00 > m11) & (m00 > m22)
    by_y = ~by_trace & ~by_x & (m11 > m22)
    with np.errstate(invalid="ignore", divide="ignore"):
        branches = [_quat_branch(m, branch) for branch in range(4)]
    return [
        _F32(np.select([by_trace, by_x, by_y], [b[i] for b in branches[:3]], branches[3][i]))
        for i in range(4)
    ]


def _axis_angle_of_quat(x: _Num, y: _Num, z: _Num, w: _Num) -> list[_Num]:
    """The rotation vector of an xyzw quaternion, float32 in and out as RLMesh computes it."""
    length = _norm32(x, y, z, w)
    scale = _F32(_where(length <= _EPS, 1.0, length))
    x, y, z, w = x / scale, y / scale, z / scale, w / scale
    sin_half = _norm32(x, y, z)
    angle = 2.0 * _atan2(sin_half, _f64(w))
    degenerate = (length <= _EPS) | (sin_half <= _EPS)
    factor = _F32(angle / _where(degenerate, 1.0, sin_half))
    return [
        _where(degenerate, _ZERO, x * factor),
        _where(degenerate, _ZERO, y * factor),
        _where(degenerate, _ZERO, z * factor),
    ]


def _euler_of(matrix: _Matrix) -> list[_Num]:
    m00, m01, _, m10, m11, _, m20, m21, m22 = (_f64(entry) for entry in matrix)
    cos_pitch = _hypot(m21, m22)
    pitch = _atan2(-m20, cos_pitch)
    # At gimbal lock roll and yaw turn about one axis: yaw is pinned to 0 and roll takes the
    # combined angle, whose sign follows sin(pitch).
    roll: _Num
    yaw: _Num
    if isinstance(cos_pitch, float):
        if cos_pitch > _EPS:
            roll, yaw = math.atan2(m21, m22), math.atan2(m10, m00)
        else:
            roll, yaw = math.atan2(min(max(-m20, -1.0), 1.0) * m01, m11), 0.0
    else:
        free = cos_pitch > _EPS
        locked = np.arctan2(np.clip(-m20, -1.0, 1.0) * m01, m11)
        roll = np.where(free, np.arctan2(m21, m22), locked)
        yaw = np.where(free, np.arctan2(m10, m00), 0.0)
    return [_F32(roll), _F32(pitch), _F32(yaw)]


def _encode(matrix: _Matrix, encoding: str) -> list[_Num]:
    m00, m01, _, m10, m11, _, m20, m21, m22 = matrix
    if encoding == "rot6d":
        return [m00, m10, m20, m01, m11, m21]
    if encoding == "rot6d_rowmajor":
        return [m00, m01, m10, m11, m20, m21]
    if encoding == "gravity_xyz":
        return [-m20, -m21, -m22]
    if encoding == "euler_xyz":
        return _euler_of(matrix)
    x, y, z, w = _quat_of(matrix)
    if encoding == "quat_xyzw":
        return [x, y, z, w]
    if encoding == "quat_wxyz":
        return [w, x, y, z]
    # axis_angle: through the quaternion on its w >= 0 side, so the angle is in [0, pi].
    flip = w < 0.0
    return _axis_angle_of_quat(*(_where(flip, -c, c) for c in (x, y, z, w)))


def _matrix_array(matrix: _Matrix, batched: bool) -> npt.NDArray[np.float32]:
    flat = _assemble(matrix, batched)
    return flat.reshape(*flat.shape[:-1], 3, 3)


def _matrix_components(matrices: npt.NDArray[np.float32]) -> _Matrix:
    flat = matrices.reshape(*matrices.shape[:-2], 9)
    return tuple(_components(flat))


def to_matrix(values: npt.ArrayLike, encoding: str) -> npt.NDArray[np.float32]:
    """The ``(..., 3, 3)`` float32 rotation matrices of ``(..., width)`` ``values``.

    Raises:
        ValueError: An unknown encoding, a direction (``gravity_xyz``), or a last axis that
            is not the encoding's width.

    >>> (to_matrix([0.0, 0.0, np.pi / 2], "euler_xyz").round(6) + 0.0).tolist()
    [[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]
    """
    _check(encoding, source=True)
    array = _values(values, encoding)
    return _matrix_array(_matrix_of(_components(array), encoding), array.ndim > 1)


def from_matrix(matrices: npt.ArrayLike, encoding: str) -> npt.NDArray[np.float32]:
    """``(..., 3, 3)`` rotation matrices in ``encoding``, ``(..., width)`` float32.

    >>> from_matrix(np.eye(3), "quat_wxyz").tolist()
    [1.0, 0.0, 0.0, 0.0]
    """
    _check(encoding, source=False)
    array = np.asarray(matrices, dtype=_F32)
    if array.shape[-2:] != (3, 3):
        raise ValueError(f"expected (..., 3, 3) rotation matrices, got shape {array.shape}")
    return _assemble(_encode(_matrix_components(array), encoding), array.ndim > 2)


def rotation_matrix(encoding: str, value: npt.ArrayLike) -> npt.NDArray[np.float32]:
    """The ``(3, 3)`` float32 matrix of one literal rotation (a ``post_rotate``).

    >>> rotation_matrix("rot6d", [1, 0, 0, 0, 1, 0]).tolist()
    [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    """
    matrix = to_matrix(value, encoding)
    if matrix.shape != (3, 3):
        raise ValueError(f"expected one {encoding} rotation, got shape {np.shape(value)}")
    return matrix


def _post_rotated(matrix: _Matrix, post: _Matrix) -> _Matrix:
    """``matrix @ post`` in float32, each entry's three products summed in order."""
    return tuple(
        matrix[3 * row] * post[col]
        + matrix[3 * row + 1] * post[3 + col]
        + matrix[3 * row + 2] * post[6 + col]
        for row in range(3)
        for col in range(3)
    )


def convert_rotation(
    values: npt.ArrayLike,
    source: str,
    target: str,
    post_rotate: npt.ArrayLike | None = None,
) -> npt.NDArray[np.float32]:
    """``(..., width(source))`` rotations re-encoded as ``target``, float32.

    Args:
        values: Rotations along the last axis; any leading axes (lanes, frames).
        source: Their encoding.
        target: The wanted encoding (a direction such as ``gravity_xyz`` is allowed here).
        post_rotate: A ``(3, 3)`` matrix ``P``: the result encodes ``R @ P``.

    Raises:
        ValueError: Unknown encodings, a direction as the source, a wrong width.

    >>> convert_rotation([0.0, 0.0, 0.0, 1.0], "quat_xyzw", "rot6d").tolist()
    [1.0, 0.0, 0.0, 0.0, 1.0, 0.0]
    >>> convert_rotation([[0.0, 0.0, 0.0]], "axis_angle", "gravity_xyz").tolist()
    [[-0.0, -0.0, -1.0]]
    """
    _check(source, source=True)
    _check(target, source=False)
    array = _values(values, source)
    post = None
    if post_rotate is not None:
        post = _matrix_components(np.asarray(post_rotate, dtype=_F32).reshape(3, 3))
    return _convert(array, source, target, post)


def _convert(
    array: npt.NDArray[np.float32], source: str, target: str, post: _Matrix | None
) -> npt.NDArray[np.float32]:
    if post is None and source == target:
        copy: npt.NDArray[np.float32] = array.copy()
        return copy
    if array.shape[:-1] == (1,):
        # One lane (every single-env step): its row on the float path, several times
        # cheaper than numpy's on arrays of one, with the same float32 results.
        return _convert(array[0], source, target, post)[None]
    batched = array.ndim > 1
    components = _components(array)
    if post is None and target == "axis_angle" and source in ("quat_xyzw", "quat_wxyz"):
        x, y, z, w = components if source == "quat_xyzw" else components[1:] + components[:1]
        return _assemble(_axis_angle_of_quat(x, y, z, w), batched)
    matrix = _matrix_of(components, source)
    if post is not None:
        matrix = _post_rotated(matrix, post)
    return _assemble(_encode(matrix, target), batched)


@attrs.frozen(eq=False)
class RotationConversion:
    """One state part's or actuator's rotation conversion, checked and prepared once.

    >>> to_rot6d = RotationConversion("quat_wxyz", "rot6d")
    >>> to_rot6d(np.array([[1.0, 0.0, 0.0, 0.0]] * 2)).tolist()
    [[1.0, 0.0, 0.0, 0.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0, 1.0, 0.0]]
    """

    source: str
    """The encoding of the values coming in."""
    target: str
    """The encoding going out."""
    post_rotate: npt.NDArray[np.float32] | None = attrs.field(default=None)
    """``P`` of ``R_out = R_in @ P`` as a ``(3, 3)`` matrix, or ``None``."""

    def __attrs_post_init__(self) -> None:
        _check(self.source, source=True)
        _check(self.target, source=False)
        if self.post_rotate is not None:
            post = np.array(self.post_rotate, dtype=_F32)
            if post.shape != (3, 3):
                raise ValueError(f"post_rotate must be a (3, 3) matrix, got shape {post.shape}")
            post.setflags(write=False)
            object.__setattr__(self, "post_rotate", post)

    @property
    def width(self) -> int:
        """How many values one source rotation has."""
        return ROTATION_DIMS[self.source]

    @property
    def out_width(self) -> int:
        """How many values one converted rotation has."""
        return ROTATION_DIMS[self.target]

    def __call__(self, values: npt.ArrayLike) -> npt.NDArray[np.float32]:
        """``(..., width)`` → ``(..., out_width)`` float32 (see :func:`convert_rotation`)."""
        post = None if self.post_rotate is None else _matrix_components(self.post_rotate)
        return _convert(_values(values, self.source), self.source, self.target, post)
