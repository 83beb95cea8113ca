"""Env targets: classes are instantiated, and envs take keyword arguments."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trio_rlmesh._cli import main
from trio_rlmesh._cli._targets import env_kwargs


def _run(tmp_path: Path, *argv: str) -> dict[str, object]:
    out = tmp_path / "report.json"
    code = main(["run", *argv, "--no-progress", "--json", str(out)])
    report: dict[str, object] = json.loads(out.read_text())
    assert code == 0, report
    return report


def test_env_argument_values_are_json_scalars_or_strings() -> None:
    assert env_kwargs('{"a": 1, "b": "x"}', ["b=2", "c=true", "d=rgb_array", "e="]) == {
        "a": 1,
        "b": 2,
        "c": True,
        "d": "rgb_array",
        "e": "",
    }
    assert env_kwargs(None, []) == {}


def test_env_arguments_merge_json_and_pairs(tmp_path: Path) -> None:
    # A pair wins over the JSON (length 2 -> 4); pair values read as JSON scalars when they
    # are one (4, 2.5, true), so the env gets an int, a float and a bool.
    report = _run(
        tmp_path,
        *("--env", "tests.cli.envs:Counter", "--env-kwargs", '{"length": 2, "scale": 1}'),
        *("--env-arg", "length=4", "--env-arg", "scale=2.5", "--env-arg", "success=true"),
        *("--model", "tests.cli.models:AlwaysLeft", "--episodes", "2"),
    )
    episodes = report["episodes"]
    assert isinstance(episodes, list)
    assert [(e["steps"], e["reward"], e["success"]) for e in episodes] == [(4, 10.0, True)] * 2


def test_a_class_is_instantiated_with_its_arguments(tmp_path: Path) -> None:
    # Counter sets its spaces in __init__: served as the class object, reset would fail.
    report = _run(
        tmp_path,
        *("--env", "tests.cli.envs:Counter", "--env-arg", "length=4"),
        *("--model", "tests.cli.models:AlwaysLeft"),
    )
    episodes = report["episodes"]
    assert isinstance(episodes, list)
    assert [e["steps"] for e in episodes] == [4] * 10


def test_gymnasium_class_by_module_path(tmp_path: Path) -> None:
    report = _run(
        tmp_path,
        *("--env", "gymnasium.envs.classic_control.cartpole:CartPoleEnv"),
        *("--env-kwargs", '{"render_mode": "rgb_array"}'),
        *("--episodes", "2", "--max-episode-steps", "5"),
    )
    assert report["total_steps"] == 10


@pytest.mark.parametrize(
    "options",
    [
        ["--env-kwargs", '{"max_episode_steps": 6}'],
        ["--env-arg", "max_episode_steps=6"],
        ["--env-kwargs", '{"max_episode_steps": 9}', "--env-arg", "max_episode_steps=6"],
    ],
    ids=["json", "pair", "pair-wins"],
)
def test_gymnasium_id_takes_keyword_arguments(tmp_path: Path, options: list[str]) -> None:
    report = _run(tmp_path, "--env", "gymnasium:CartPole-v1", *options, "--episodes", "2")
    episodes = report["episodes"]
    assert isinstance(episodes, list)
    # The heuristic keeps the pole up far longer: Gymnasium's own TimeLimit ends each at 6.
    assert [(e["steps"], e["truncated"]) for e in episodes] == [(6, True), (6, True)]
