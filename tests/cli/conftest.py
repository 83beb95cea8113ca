"""The CLI tests never see the tester's own tokens."""

from __future__ import annotations

import pytest

from .support import TOKEN_VARIABLES


@pytest.fixture(autouse=True)
def _no_token_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in TOKEN_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
