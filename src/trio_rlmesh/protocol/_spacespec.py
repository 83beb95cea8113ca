"""Conversions between the space model and ``SpaceSpec`` / ``EnvContract`` messages.

Emission follows what a real Python peer puts on the wire (spec §7.1-7.2), so a contract we
serve decodes to the same spaces a real ``rlmesh.EnvServer`` would describe. Decoding applies
the checks a real client runs at connect (spec §7.3) and names the offending node by its path.

>>> from trio_rlmesh.spaces import Box
>>> spec = space_to_spec(Box.from_bounds(-1.0, 1.0, shape=(2, 3)))
>>> bytes(spec).hex()
'0a020203100b520e120c0a04000080bf12040000803f'
>>> spec_to_space(spec) == Box.from_bounds(-1.0, 1.0, shape=(2, 3))
True
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from .._errors import ROOT, SpaceError, SpecError
from ..spaces import (
    Box,
    Dict,
    Discrete,
    DType,
    MultiBinary,
    MultiDiscrete,
    Space,
    Text,
    Tuple,
    validate,
)
from ..spaces._internal import child_path, index_path
from ._generated.rlmesh.core import v1 as core_v1
from ._generated.rlmesh.spaces import v1 as spaces_v1
from ._meta import meta_to_python, python_to_meta

__all__ = [
    "EnvContractInfo",
    "make_env_contract",
    "read_env_contract",
    "space_to_spec",
    "spec_to_space",
]

_KNOWN_DTYPES = frozenset(int(member) for member in DType)
_KNOWN_AUTORESET = {
    0: core_v1.AutoresetMode.DISABLED,
    1: core_v1.AutoresetMode.NEXT_STEP,
    2: core_v1.AutoresetMode.SAME_STEP,
    3: core_v1.AutoresetMode.DISABLED,
}


# --------------------------------------------------------------------------------------------
# Space -> SpaceSpec


def space_to_spec(space: Space) -> spaces_v1.SpaceSpec:
    """The ``SpaceSpec`` a real Python peer would emit for ``space``.

    The conversion is exact: :func:`spec_to_space` gives back an equal space. It does not
    validate; call :func:`trio_rlmesh.spaces.validate` first when the result must be
    acceptable to a real peer (:func:`make_env_contract` does).

    Raises:
        TypeError: ``space`` is not one of the seven space kinds.
    """
    if isinstance(space, Box):
        return spaces_v1.SpaceSpec(
            shape=list(space.shape),
            dtype=spaces_v1.DataType(int(space.dtype)),
            box=_box_bounds(space),
        )
    if isinstance(space, Discrete):
        return spaces_v1.SpaceSpec(
            dtype=spaces_v1.DataType(int(space.dtype)),
            discrete=spaces_v1.DiscreteSpec(n=space.n, start=space.start),
        )
    if isinstance(space, MultiBinary):
        return spaces_v1.SpaceSpec(
            shape=list(space.shape),
            dtype=spaces_v1.DataType(int(space.dtype)),
            multi_binary=spaces_v1.MultiBinarySpec(),
        )
    if isinstance(space, MultiDiscrete):
        return spaces_v1.SpaceSpec(
            shape=list(space.shape),
            dtype=spaces_v1.DataType(int(space.dtype)),
            multi_discrete=spaces_v1.MultiDiscreteSpec(nvec=[int(v) for v in space.nvec.flat]),
        )
    if isinstance(space, Text):
        return spaces_v1.SpaceSpec(
            dtype=spaces_v1.DataType.UINT8,
            text=spaces_v1.TextSpec(
                min_length=space.min_length, max_length=space.max_length, charset=space.charset
            ),
        )
    if isinstance(space, Dict):
        return spaces_v1.SpaceSpec(
            dict=spaces_v1.DictSpec(
                keys=list(space.keys()), spaces=[space_to_spec(child) for child in space.values()]
            )
        )
    if isinstance(space, Tuple):
        return spaces_v1.SpaceSpec(
            tuple=spaces_v1.TupleSpec(spaces=[space_to_spec(child) for child in space.spaces])
        )
    raise TypeError(f"{type(space).__name__} is not a trio_rlmesh space")


def _box_bounds(space: Box) -> spaces_v1.BoxSpec:
    kind = space.bounds_kind
    if kind == "unbounded":
        return spaces_v1.BoxSpec(unbounded=True)
    low, high = space.low.reshape(-1), space.high.reshape(-1)
    if kind == "uniform" and low.size:
        return spaces_v1.BoxSpec(
            uniform=spaces_v1.UniformBounds(low=low[:1].tobytes(), high=high[:1].tobytes())
        )
    return spaces_v1.BoxSpec(
        elementwise=spaces_v1.ElementwiseBounds(low=low.tobytes(), high=high.tobytes())
    )


# --------------------------------------------------------------------------------------------
# SpaceSpec -> Space


def spec_to_space(spec: spaces_v1.SpaceSpec, *, path: str = ROOT) -> Space:
    """Decode and validate a ``SpaceSpec`` the way a real client does at connect.

    Args:
        spec: the message.
        path: the path of ``spec`` inside a larger structure, used in error messages.

    Raises:
        SpaceError: the spec breaks a rule of spec §7.3 (unknown dtype, unset kind, wrong
            shape or dtype for the kind, bounds of the wrong byte length, low > high, NaN
            bounds, ...). The message starts with the offending node's path.
    """
    space = _decode(spec, path)
    try:
        validate(space)
    except SpaceError as exc:
        if path == ROOT:
            raise
        raise SpaceError(exc.problem, path=path + exc.path[len(ROOT) :]) from None
    return space


def _dtype_of(spec: spaces_v1.SpaceSpec, path: str) -> DType:
    number = int(spec.dtype)
    if number not in _KNOWN_DTYPES:
        raise SpaceError(f"unknown DataType {number}", path=path)
    return DType(number)


def _require_scalar_shape(spec: spaces_v1.SpaceSpec, kind: str, path: str) -> None:
    if spec.shape:
        raise SpaceError(f"{kind} spec must have an empty shape, got {list(spec.shape)}", path=path)


def _require_dtype(actual: DType, expected: DType, kind: str, path: str) -> None:
    if actual is not expected:
        raise SpaceError(f"{kind} spec dtype must be {expected.name}, got {actual.name}", path=path)


def _decode(spec: spaces_v1.SpaceSpec, path: str) -> Space:
    dtype = _dtype_of(spec, path)
    if spec.box is not None:
        return _decode_box(spec, spec.box, dtype, path)
    if spec.discrete is not None:
        _require_scalar_shape(spec, "Discrete", path)
        return Discrete(spec.discrete.n, start=spec.discrete.start, dtype=dtype)
    if spec.multi_binary is not None:
        return MultiBinary(tuple(spec.shape), dtype=dtype)
    if spec.multi_discrete is not None:
        nvec = np.asarray(spec.multi_discrete.nvec, dtype=np.int64)
        shape = tuple(spec.shape)
        if nvec.size != math.prod(shape):
            raise SpaceError(
                f"MultiDiscrete nvec has {nvec.size} entries but shape {list(shape)} holds "
                f"{math.prod(shape)}",
                path=path,
            )
        return MultiDiscrete(nvec.reshape(shape), dtype=dtype)
    if spec.text is not None:
        _require_scalar_shape(spec, "Text", path)
        _require_dtype(dtype, DType.UINT8, "Text", path)
        return Text(
            spec.text.max_length, min_length=spec.text.min_length, charset=spec.text.charset
        )
    if spec.dict is not None:
        _require_scalar_shape(spec, "Dict", path)
        _require_dtype(dtype, DType.UNSPECIFIED, "Dict", path)
        keys, children = list(spec.dict.keys), list(spec.dict.spaces)
        if len(keys) != len(children):
            raise SpaceError(
                f"Dict spec has {len(keys)} keys but {len(children)} spaces", path=path
            )
        # Decode children first so that a bad grandchild is reported at its own path; key
        # rules (non-empty, unique) are checked by validate() afterwards.
        decoded = [
            _decode(child, child_path(path, key)) for key, child in zip(keys, children, strict=True)
        ]
        return Dict.from_pairs(keys, decoded)
    if spec.tuple is not None:
        _require_scalar_shape(spec, "Tuple", path)
        _require_dtype(dtype, DType.UNSPECIFIED, "Tuple", path)
        return Tuple(
            [_decode(child, index_path(path, i)) for i, child in enumerate(spec.tuple.spaces)]
        )
    raise SpaceError("spec must be set (no space kind in the SpaceSpec oneof)", path=path)


def _decode_box(
    spec: spaces_v1.SpaceSpec, bounds: spaces_v1.BoxSpec, dtype: DType, path: str
) -> Box:
    if dtype is DType.UNSPECIFIED:
        raise SpaceError("Box spec dtype must not be UNSPECIFIED", path=path)
    shape = tuple(spec.shape)
    if not shape or any(dim <= 0 for dim in shape):
        # Reported here because bounds cannot be laid out for such a shape.
        raise SpaceError(
            f"Box shape must have rank >= 1 and dims > 0, got {list(shape)}", path=path
        )
    np_dtype = dtype.numpy_dtype
    numel = math.prod(shape)
    if bounds.uniform is not None:
        low = _read_bounds(bounds.uniform.low, np_dtype, 1, "uniform low", path)
        high = _read_bounds(bounds.uniform.high, np_dtype, 1, "uniform high", path)
        return Box(np.broadcast_to(low, shape), np.broadcast_to(high, shape), shape, dtype)
    if bounds.elementwise is not None:
        low = _read_bounds(bounds.elementwise.low, np_dtype, numel, "elementwise low", path)
        high = _read_bounds(bounds.elementwise.high, np_dtype, numel, "elementwise high", path)
        return Box(low.reshape(shape), high.reshape(shape), shape, dtype)
    if bounds.unbounded is not None:
        if dtype.is_float:
            low_value, high_value = -np.inf, np.inf
        elif dtype.is_bool:
            low_value, high_value = False, True
        else:
            info = np.iinfo(np_dtype)
            low_value, high_value = info.min, info.max
        return Box(
            np.full(shape, low_value, dtype=np_dtype),
            np.full(shape, high_value, dtype=np_dtype),
            shape,
            dtype,
        )
    raise SpaceError("Box bounds must be set (unbounded, uniform or elementwise)", path=path)


def _read_bounds(
    raw: bytes, np_dtype: np.dtype[Any], count: int, what: str, path: str
) -> np.ndarray[Any, Any]:
    expected = count * np_dtype.itemsize
    if len(raw) != expected:
        raise SpaceError(
            f"Box {what} bounds must be {expected} bytes ({count} x {np_dtype.name}), "
            f"got {len(raw)}",
            path=path,
        )
    return np.frombuffer(raw, dtype=np_dtype)


# --------------------------------------------------------------------------------------------
# EnvContract


@attrs.frozen
class EnvContractInfo:
    """A decoded ``EnvContract``: what an env endpoint says about itself at handshake."""

    env_id: str
    """``EnvSpec.id`` (e.g. ``"CartPole-v1"``)."""
    observation_space: Space
    """Per-lane observation space."""
    action_space: Space
    """Per-lane action space."""
    metadata: Mapping[str, Any]
    """Env metadata as plain Python values (empty when absent)."""
    num_envs: int
    """Lane count (at least 1; a wire 0 reads as 1)."""
    render_mode: str | None
    """The env's render mode, ``None`` when the wire string is empty."""
    autoreset: core_v1.AutoresetMode
    """NEXT_STEP, SAME_STEP or DISABLED (a wire 0 reads as DISABLED)."""


def make_env_contract(
    env_id: str,
    observation_space: Space,
    action_space: Space,
    metadata: Mapping[str, Any] | None = None,
    num_envs: int = 1,
    render_mode: str | None = None,
    autoreset: core_v1.AutoresetMode = core_v1.AutoresetMode.DISABLED,
) -> core_v1.EnvContract:
    """Build the ``EnvContract`` an env server returns at handshake.

    Both spaces are validated first, so a contract a real client would reject is never
    served.

    Raises:
        SpaceError: a space a real peer would reject (path ``$.observation_space...`` or
            ``$.action_space...``).
        MetaConversionError: ``metadata`` holds a value with no MetaValue form.
        SpecError: ``num_envs`` < 1.
    """
    if num_envs < 1:
        raise SpecError(f"num_envs must be >= 1, got {num_envs}")
    specs = {}
    for name, space in (("observation_space", observation_space), ("action_space", action_space)):
        try:
            validate(space)
        except SpaceError as exc:
            raise SpaceError(exc.problem, path=f"$.{name}{exc.path[len(ROOT) :]}") from None
        specs[name] = space_to_spec(space)
    return core_v1.EnvContract(
        spec=core_v1.EnvSpec(
            id=env_id,
            action_space=specs["action_space"],
            observation_space=specs["observation_space"],
            metadata=python_to_meta(metadata, path="$.metadata") if metadata else None,
        ),
        num_envs=num_envs,
        render_mode=render_mode or "",
        autoreset_mode=autoreset,
    )


def read_env_contract(contract: core_v1.EnvContract) -> EnvContractInfo:
    """Decode and validate an ``EnvContract`` the way a real env client does at connect.

    Raises:
        SpaceError: a missing or invalid space (the path starts ``$.observation_space`` or
            ``$.action_space``).
        SpecError: no ``spec``, or an unknown autoreset mode.
    """
    spec = contract.spec
    if spec is None:
        raise SpecError("env contract has no spec")
    spaces: dict[str, Space] = {}
    for name in ("observation_space", "action_space"):
        message = getattr(spec, name)
        if message is None:
            raise SpaceError("missing from the env contract", path=f"$.{name}")
        spaces[name] = spec_to_space(message, path=f"$.{name}")
    mode = _KNOWN_AUTORESET.get(int(contract.autoreset_mode))
    if mode is None:
        raise SpecError(f"env contract has unknown autoreset mode {int(contract.autoreset_mode)}")
    return EnvContractInfo(
        env_id=spec.id,
        observation_space=spaces["observation_space"],
        action_space=spaces["action_space"],
        metadata=meta_to_python(spec.metadata),
        num_envs=max(1, contract.num_envs),
        render_mode=contract.render_mode or None,
        autoreset=mode,
    )
