"""The examples in the adapters' docstrings run (the kernels' are run by their own tests)."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "trio_rlmesh.adapters._action_spec",
    "trio_rlmesh.adapters._adapter",
    "trio_rlmesh.adapters._api",
    "trio_rlmesh.adapters._env_spec",
    "trio_rlmesh.adapters._fmt",
    "trio_rlmesh.adapters._history",
    "trio_rlmesh.adapters._model_spec",
    "trio_rlmesh.adapters.constants",
    "trio_rlmesh.adapters.constants.parts",
    "trio_rlmesh.adapters.constants.roles",
    "trio_rlmesh.adapters.helpers",
    "trio_rlmesh.adapters.specs",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
