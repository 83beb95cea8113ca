"""``run`` in a real pseudo-terminal, and in a pipe: what the user reads must be clean.

The screen a run leaves is replayed by :func:`.terminal.render`; every line on it must be one
the run means to print, whole: the line saying what is evaluated, lines printed while the bar
runs, the final state of the bar, the results, an error. A progress line drawn by hand
before the first line, glued to an error, or wider than the terminal fails these tests.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import pytest

from .support import ROOT, child_env
from .terminal import render, run_on_terminal

pytestmark = pytest.mark.network

SLOW_COUNTER = (
    "run",
    "--env",
    "tests.cli.envs:Counter",
    "--env-arg",
    "length=3",
    "--env-arg",
    "delay=0.05",
    "--env-arg",
    "announce=true",
    "--model",
    "tests.cli.models:AlwaysLeft",
)
EVALUATING = re.compile(r"^trio-rlmesh: evaluating tests\.cli\.models:AlwaysLeft on .+ episodes$")
BAR = re.compile(r"^[━╸╺ ]*\d+/\d+ episodes  [\d,]+ steps/s(  mean reward [-\d.]+)?$")
PRINTED = re.compile(r"^counter: (reset \d+|slow step)$")
TABLE = re.compile(r"^(# +steps +reward +ended|─+|\d+ +\d+ +[-\d.]+ +(terminated|truncated))$")
SUMMARY = re.compile(r"^(completed|cancelled|failed): \d+ episodes?, \d+ steps|^reward |^mean ")


def _unexpected(lines: list[str], *allowed: re.Pattern[str]) -> list[str]:
    return [line for line in lines if not any(p.search(line) for p in allowed)]


def test_the_first_line_and_lines_printed_meanwhile_stand_alone() -> None:
    output, status = run_on_terminal([*SLOW_COUNTER, "--episodes", "3"])
    assert status == 0, output
    lines = render(output, 80)
    assert EVALUATING.match(lines[0]), lines
    assert [line for line in lines if PRINTED.match(line)][:2] == [
        "counter: reset 1",
        "counter: slow step",
    ]
    assert _unexpected(lines, EVALUATING, BAR, PRINTED, TABLE, SUMMARY) == []
    assert sum(1 for line in lines if BAR.match(line)) == 1  # redrawn in place, left once
    assert lines[-3:] == [
        "completed: 3 episodes, 9 steps",
        "reward 3.00 ± 0.00 (min 3.00, max 3.00), mean length 3.0 steps",
        "mean 3.000 [3.000, 3.000] · IQM 3.000 [3.000, 3.000] (n=3)",
    ]


def test_an_error_stands_alone_on_its_line() -> None:
    argv = [*SLOW_COUNTER[:-1], "tests.cli.models:FailsOnFifthPredict", "--episodes", "5"]
    output, status = run_on_terminal(argv)
    assert status == 1, output
    lines = render(output, 80)
    error = re.compile(r"^trio-rlmesh run: model 'FailsOnFifthPredict' failed .*fifth predict")
    evaluating = re.compile(r"^trio-rlmesh: evaluating tests\.cli\.models:FailsOnFifthPredict ")
    assert evaluating.match(lines[0]), lines
    assert error.match(lines[-1]), lines
    assert _unexpected(lines, evaluating, error, BAR, PRINTED, TABLE, SUMMARY) == []


def test_ctrl_c_cancels_and_every_line_stays_whole() -> None:
    def interrupt_on_the_second_episode(text: str, pid: int) -> bool:
        if "counter: reset 2" not in text:
            return False
        os.kill(pid, signal.SIGINT)
        return True

    output, status = run_on_terminal(
        [*SLOW_COUNTER, "--episodes", "50"], on_output=interrupt_on_the_second_episode
    )
    assert status == 130, output
    lines = render(output, 80)
    stopping = re.compile(r"^trio-rlmesh: stopping after SIGINT \(at most [\d.]+ s\)")
    # On a loaded machine the stop may outlast its grace; the process then ends at once,
    # saying so on a line of its own, and still writes the episodes it finished.
    forced = re.compile(r"^trio-rlmesh: still stopping [\d.]+ s after SIGINT: exiting now$")
    assert EVALUATING.match(lines[0]), lines
    assert sum(1 for line in lines if stopping.match(line)) == 1, lines
    assert sum(1 for line in lines if forced.match(line)) <= 1, lines
    assert _unexpected(lines, EVALUATING, stopping, forced, BAR, PRINTED, TABLE, SUMMARY) == []
    assert any(
        line.startswith("cancelled: ") and line.endswith("(interrupted by SIGINT)")
        for line in lines
    )


def test_a_narrow_terminal_gets_lines_no_wider_than_itself() -> None:
    output, status = run_on_terminal([*SLOW_COUNTER, "--seeds", "0..2"], columns=40)
    assert status == 0, output
    # Everything but the first line (written before the bar, as is) fits in 40 columns:
    # the bar, the table, and the summary, wrapped between words.
    lines = render(output, 40)
    assert EVALUATING.match(lines[0]), lines
    assert all(len(line) <= 40 for line in lines[1:]), lines
    narrow_bar = re.compile(r"^([━╸╺ ]* )?\d+/\d+ episodes  [\d,]+ steps/s( .*)?$")
    table = re.compile(r"^(# +seed +steps +reward +ended|─+|\d+ +\d+ +\d+ +[-\d.]+ +\w+)$")
    wrapped = re.compile(r"^mean length [\d.]+ steps$|^\[[-\d.]+, [-\d.]+\] \(n=\d+\)$")
    assert _unexpected(lines, EVALUATING, narrow_bar, PRINTED, table, SUMMARY, wrapped) == []
    assert sum(1 for line in lines if narrow_bar.match(line)) == 1


def test_a_pipe_gets_plain_text_and_no_bar() -> None:
    process = subprocess.run(
        [sys.executable, "-m", "trio_rlmesh", *SLOW_COUNTER, "--episodes", "2"],
        capture_output=True,
        text=True,
        env={**child_env(), "TERM": "xterm-256color"},
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert process.returncode == 0, process.stderr
    for stream in (process.stdout, process.stderr):
        assert "\x1b" not in stream
        assert "\r" not in stream
    assert EVALUATING.match(process.stderr.splitlines()[0])
    assert "episodes  " not in process.stdout + process.stderr  # no bar at all
    assert process.stdout.splitlines()[0].split() == ["#", "steps", "reward", "ended"]
