"""The examples in trio_rlmesh.gym's docstrings run."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "trio_rlmesh._png",  # the decoder gym shares with the adapters
    "trio_rlmesh.gym._registration",
    "trio_rlmesh.gym._thread",
    "trio_rlmesh.gym._values",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
