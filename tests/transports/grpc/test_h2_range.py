"""The h2 releases the DATA fast path may run with, and the switch that turns it off."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from pathlib import Path

import h2
import pytest

from trio_rlmesh._fastpaths import FAST_PATHS, SWITCH
from trio_rlmesh.transports.grpc import _h2

PYPROJECT = Path(__file__).resolve().parents[3] / "pyproject.toml"


def test_pyproject_requires_exactly_the_checked_h2_releases() -> None:
    (requirement,) = re.findall(r'"h2(>=[^"]*)"', PYPROJECT.read_text())
    low, high = (".".join(map(str, bound)) for bound in _h2.H2_CHECKED)
    assert requirement == f">={low},<{high}"


def test_the_installed_h2_is_a_checked_one_and_the_fast_path_follows_the_switch() -> None:
    # Fails when an unchecked h2 is installed: the fast path would then be off unseen.
    assert _h2.fast_data_allowed(h2.__version__, switched_on=True)
    assert _h2.FAST_DATA is FAST_PATHS


@pytest.mark.parametrize("version", ["4.1.0", "4.2.0", "4.5.0", "5.0.0", "4.x"])
def test_an_unchecked_h2_turns_the_fast_path_off_with_a_log_line(
    version: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger=_h2.__name__):
        assert not _h2.fast_data_allowed(version, switched_on=True)
    (record,) = caplog.records
    assert f"h2 {version} is outside" in record.getMessage()
    assert ">=4.3,<4.5" in record.getMessage()


@pytest.mark.parametrize("version", ["4.3.0", "4.4.1"])
def test_a_checked_h2_keeps_the_fast_path_unless_switched_off(
    version: str, caplog: pytest.LogCaptureFixture
) -> None:
    assert _h2.fast_data_allowed(version, switched_on=True)
    assert not _h2.fast_data_allowed(version, switched_on=False)
    assert not caplog.records


@pytest.mark.parametrize(("value", "fast"), [("", True), ("0", True), ("1", False), ("yes", False)])
def test_the_switch_is_read_at_import(value: str, fast: bool) -> None:
    code = (
        "from trio_rlmesh._fastpaths import FAST_PATHS; "
        "from trio_rlmesh.transports.grpc._h2 import FAST_DATA; "
        "print(FAST_PATHS, FAST_DATA)"
    )
    env = {SWITCH: value}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == [str(fast), str(fast)]
