"""The path notation of the spaces layer's errors (the errors themselves live in
:mod:`trio_rlmesh._errors`, with every other error).

A *path* names a node of a space tree: ``$`` is the root, ``.key`` selects a Dict child whose
key is a Python identifier, ``["any key"]`` any other Dict key, and ``[i]`` a Tuple child. For
example ``$.obs[2]`` is the third element of the Tuple stored under the ``obs`` key.
"""

from __future__ import annotations

import json

from .._errors import ROOT, CodecError, SpaceError

__all__ = ["ROOT", "CodecError", "SpaceError", "child_path", "index_path"]


def child_path(path: str, key: str) -> str:
    """The path of the Dict child ``key`` under ``path``."""
    if key.isidentifier():
        return f"{path}.{key}"
    return f"{path}[{json.dumps(key, ensure_ascii=False)}]"


def index_path(path: str, index: int) -> str:
    """The path of the Tuple child ``index`` under ``path``."""
    return f"{path}[{index}]"
