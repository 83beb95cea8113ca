"""Conversion between :mod:`gymnasium.spaces` and this package's spaces.

gymnasium is an optional dependency, imported only when a conversion runs. The mapping follows
what a Python rlmesh peer emits (spec §7.1): Discrete and MultiDiscrete become INT64 and
MultiBinary UINT8 whatever gymnasium's dtype was; Box keeps its dtype and bounds; Dict keeps
gymnasium's key order; Text's default alphanumeric charset becomes ``""`` (unrestricted).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._dtypes import DType
from ._errors import ROOT, SpaceError, child_path, index_path
from ._spaces import Box, Dict, Discrete, MultiBinary, MultiDiscrete, Space, Text, Tuple

__all__ = ["from_gymnasium", "to_gymnasium"]


def _gym_spaces() -> Any:
    try:
        import gymnasium.spaces
    except ImportError:  # pragma: no cover - depends on the environment
        raise ImportError(
            "converting spaces needs gymnasium; install trio-rlmesh[gymnasium]"
        ) from None
    return gymnasium.spaces


def _alphanumeric() -> frozenset[str]:
    from gymnasium.spaces.text import alphanumeric

    return alphanumeric


def from_gymnasium(gym_space: Any) -> Space:
    """The rlmesh space a Python rlmesh peer would emit for a gymnasium space.

    Raises:
        SpaceError: for spaces rlmesh-wire-v1 cannot carry (Graph, Sequence, OneOf, unknown
            space types, MultiDiscrete with a non-zero ``start``, non-string Dict keys), naming
            the path of the offending space, e.g. ``$.obs[2]``.

    Example:
        >>> import gymnasium
        >>> from_gymnasium(gymnasium.spaces.Discrete(3, start=-1))
        Discrete(n=3, start=-1, dtype=<DType.INT64: 9>)
    """
    return _from_gym(gym_space, ROOT, _gym_spaces())


def _from_gym(gym_space: Any, path: str, gym: Any) -> Space:
    if isinstance(gym_space, gym.Box):
        try:
            dtype = DType.from_numpy(gym_space.dtype)
        except SpaceError as exc:
            raise SpaceError(exc.problem, path=path) from None
        return Box.from_bounds(gym_space.low, gym_space.high, gym_space.shape, dtype)
    if isinstance(gym_space, gym.Discrete):
        return Discrete(int(gym_space.n), int(gym_space.start), DType.INT64)
    if isinstance(gym_space, gym.MultiBinary):
        return MultiBinary(gym_space.shape, DType.UINT8)
    if isinstance(gym_space, gym.MultiDiscrete):
        if np.any(gym_space.start != 0):
            raise SpaceError(
                "gymnasium MultiDiscrete with a non-zero start cannot be expressed on "
                "rlmesh-wire-v1 (values are 0..nvec-1); shift the values and drop start",
                path=path,
            )
        return MultiDiscrete(np.asarray(gym_space.nvec), DType.INT64)
    if isinstance(gym_space, gym.Text):
        return _text_from_gym(gym_space, path)
    if isinstance(gym_space, gym.Dict):
        entries = []
        for key, child in gym_space.spaces.items():
            if not isinstance(key, str):
                raise SpaceError(
                    f"gymnasium Dict key {key!r} is not a str; rlmesh-wire-v1 keys are strings",
                    path=path,
                )
            entries.append((key, _from_gym(child, child_path(path, key), gym)))
        return Dict(entries)
    if isinstance(gym_space, gym.Tuple):
        return Tuple(
            _from_gym(child, index_path(path, index), gym)
            for index, child in enumerate(gym_space.spaces)
        )
    unsupported = tuple(
        getattr(gym, name) for name in ("Graph", "Sequence", "OneOf") if hasattr(gym, name)
    )
    if isinstance(gym_space, unsupported):
        raise SpaceError(
            f"gymnasium {type(gym_space).__name__} cannot be expressed on rlmesh-wire-v1",
            path=path,
        )
    raise SpaceError(
        f"{type(gym_space).__name__} is not a gymnasium space rlmesh-wire-v1 supports "
        "(Box, Discrete, MultiBinary, MultiDiscrete, Text, Dict, Tuple)",
        path=path,
    )


def _text_from_gym(gym_space: Any, path: str) -> Text:
    characters: frozenset[str] = gym_space.character_set
    if characters == _alphanumeric():
        charset = ""
    elif characters:
        charset = "".join(sorted(characters))
    else:
        raise SpaceError(
            "gymnasium Text with an empty charset cannot be expressed on rlmesh-wire-v1 "
            '(charset "" means unrestricted)',
            path=path,
        )
    return Text(max_length=gym_space.max_length, min_length=gym_space.min_length, charset=charset)


def to_gymnasium(space: Space) -> Any:
    """The gymnasium space for an rlmesh space.

    Box, Discrete and MultiDiscrete keep their dtype; MultiBinary becomes gymnasium's int8
    MultiBinary; Text with charset ``""`` gets gymnasium's default alphanumeric charset.

    Raises:
        SpaceError: gymnasium rejects the space (e.g. an invalid one), naming its path.

    Example:
        >>> to_gymnasium(Text(4, charset="ab"))
        Text(1, 4, charset=ab)
    """
    return _to_gym(space, ROOT, _gym_spaces())


def _to_gym(space: Space, path: str, gym: Any) -> Any:
    try:
        if isinstance(space, Box):
            # gymnasium may write into the bounds it is given, so hand it copies.
            return gym.Box(
                low=np.array(space.low),
                high=np.array(space.high),
                shape=space.shape,
                dtype=space.dtype.numpy_dtype,
            )
        if isinstance(space, Discrete):
            return gym.Discrete(space.n, start=space.start, dtype=space.dtype.numpy_dtype)
        if isinstance(space, MultiBinary):
            shape = space.shape
            return gym.MultiBinary(shape[0] if len(shape) == 1 else list(shape))
        if isinstance(space, MultiDiscrete):
            return gym.MultiDiscrete(np.array(space.nvec), dtype=space.dtype.numpy_dtype)
        if isinstance(space, Text):
            return gym.Text(
                space.max_length,
                min_length=space.min_length,
                charset=space.charset or _alphanumeric(),
            )
    except (ValueError, TypeError) as exc:
        raise SpaceError(f"gymnasium rejects this space: {exc}", path=path) from None
    if isinstance(space, Dict):
        return gym.Dict(
            [(key, _to_gym(child, child_path(path, key), gym)) for key, child in space.entries]
        )
    if isinstance(space, Tuple):
        return gym.Tuple(
            [_to_gym(child, index_path(path, index), gym) for index, child in enumerate(space)]
        )
    raise SpaceError(f"{type(space).__name__} is not a space", path=path)
