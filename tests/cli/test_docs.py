"""docs/cli.md shows each command's real ``--help``, and describes exactly its options.

To refresh the blocks after changing an option: ``python -m tests.cli.test_docs``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from trio_rlmesh._cli import _parser

ROOT = Path(__file__).resolve().parents[2]
CLI_DOC = ROOT / "docs" / "cli.md"
COMMANDS = ("serve-env", "serve-model", "run", "show", "compare", "explain")
WIDTH = "100"


def command_help(command: str) -> str:
    """``trio-rlmesh COMMAND --help`` as printed in a 100-column terminal."""
    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        parser = _parser()
        subparsers = next(action for action in parser._actions if action.dest == "command")
        return str(subparsers.choices[command].format_help()).rstrip()  # type: ignore[attr-defined]
    finally:
        if previous is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = previous


def _blocks(text: str) -> dict[str, str]:
    found = {}
    for block in re.findall(r"```text\n(usage: trio-rlmesh .*?)\n```", text, flags=re.S):
        found[block.split()[2]] = block
    return found


@pytest.mark.parametrize("command", COMMANDS)
def test_the_documented_help_is_the_real_one(command: str) -> None:
    assert _blocks(CLI_DOC.read_text())[command] == command_help(command)


def _described_options(section: str) -> set[str]:
    """The options a command's section describes: the ``--flags`` in the terms of its
    definition list (a term may span lines; its definition starts with ``: ``)."""
    described: set[str] = set()
    term: list[str] = []
    for line in section.splitlines():
        if line.startswith(": ") and term:
            for text in term:
                described |= set(re.findall(r"`(--[a-z][a-z-]*)", text))
        term = [*term, line] if line.startswith("`") else []
    return described


@pytest.mark.parametrize("command", COMMANDS)
def test_each_option_is_described_under_its_own_command(command: str) -> None:
    sections = re.split(r"^## `trio-rlmesh (\S+)`\n", CLI_DOC.read_text(), flags=re.M)
    section = dict(zip(sections[1::2], sections[2::2], strict=True))[command]
    parser = _parser()
    subparsers = next(action for action in parser._actions if action.dest == "command")
    real = {
        flag
        for action in subparsers.choices[command]._actions  # type: ignore[attr-defined]
        for flag in action.option_strings
        if flag.startswith("--") and flag != "--help"
    }
    assert _described_options(section) == real


def test_the_command_count_is_right() -> None:
    subparsers = next(action for action in _parser()._actions if action.dest == "command")
    count = len(subparsers.choices)  # type: ignore[arg-type]
    words = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}
    assert f"has {words[count]} commands" in CLI_DOC.read_text()


def refresh() -> None:
    """Rewrite the help blocks of docs/cli.md from the parser."""
    text = CLI_DOC.read_text()
    for command, block in _blocks(text).items():
        text = text.replace(block, command_help(command))
    CLI_DOC.write_text(text)


if __name__ == "__main__":
    refresh()
