"""Errors raised by the spaces layer, and the path notation they use.

A *path* names a node of a space tree: ``$`` is the root, ``.key`` selects a Dict child whose
key is a Python identifier, ``["any key"]`` any other Dict key, and ``[i]`` a Tuple child. For
example ``$.obs[2]`` is the third element of the Tuple stored under the ``obs`` key.
"""

from __future__ import annotations

import json
from typing import Any

from .._errors import Error, SpecError

__all__ = ["CodecError", "SpaceError", "child_path", "index_path"]

ROOT = "$"


def child_path(path: str, key: str) -> str:
    """The path of the Dict child ``key`` under ``path``."""
    if key.isidentifier():
        return f"{path}.{key}"
    return f"{path}[{json.dumps(key, ensure_ascii=False)}]"


def index_path(path: str, index: int) -> str:
    """The path of the Tuple child ``index`` under ``path``."""
    return f"{path}[{index}]"


class SpaceError(SpecError):
    """A space that is not valid on rlmesh-wire-v1, or cannot be converted.

    Also a :class:`ValueError`. ``str(error)`` reads ``"<path>: <problem>"``.

    Attributes:
        path: where in the space tree the problem is (``$`` is the root, e.g. ``$.obs[2]``).
        problem: what is wrong and what would be right, without the path.
    """

    def __init__(self, problem: str, *, path: str = ROOT, **kwargs: Any) -> None:
        super().__init__(f"{path}: {problem}", **kwargs)
        self.path = path
        self.problem = problem

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_space_error, (type(self), self.problem, self.path))


def _rebuild_space_error(cls: type[SpaceError], problem: str, path: str) -> SpaceError:
    return cls(problem, path=path)


class CodecError(Error, ValueError):
    """A value that cannot be encoded for, or leaves that cannot be decoded as, a space.

    Also a :class:`ValueError`. ``str(error)`` reads
    ``"<path>: <problem> (expected <expected>, got <actual>)"``.

    Attributes:
        path: the leaf (or inner node) of the space the problem is at, e.g. ``$.a[1]``.
        problem: what is wrong, without the path.
        expected: what the codec needed there.
        actual: what it found.
    """

    def __init__(
        self, problem: str, *, path: str = ROOT, expected: object, actual: object, **kwargs: Any
    ) -> None:
        super().__init__(f"{path}: {problem} (expected {expected}, got {actual})", **kwargs)
        self.path = path
        self.problem = problem
        self.expected = expected
        self.actual = actual

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _rebuild_codec_error,
            (type(self), self.problem, self.path, self.expected, self.actual),
        )


def _rebuild_codec_error(
    cls: type[CodecError], problem: str, path: str, expected: object, actual: object
) -> CodecError:
    return cls(problem, path=path, expected=expected, actual=actual)
