"""With no ``--model``: the CartPole heuristic on CartPole only, a random policy elsewhere."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from trio_rlmesh._cli import main
from trio_rlmesh._cli._exit import UsageError
from trio_rlmesh._cli._policies import HeuristicCartPole, RandomPolicy, is_cartpole
from trio_rlmesh.model import EpisodeRef, ModelObservation, PredictFrames
from trio_rlmesh.protocol import EnvContractInfo, core_v1
from trio_rlmesh.spaces import Box, Discrete

from .support import serving


def _info(env_id: str, observation: Box, action: Discrete | Box) -> EnvContractInfo:
    return EnvContractInfo(env_id, observation, action, {}, 1, None, core_v1.AutoresetMode.DISABLED)


CARTPOLE_OBS = Box.from_bounds(-5.0, 5.0, shape=(4,))


def test_heuristic_policy_pushes_toward_the_fall() -> None:
    policy = HeuristicCartPole()
    assert int(policy.predict([0.0, 0.0, 0.1, 0.0])) == 1
    assert int(policy.predict([0.0, 0.0, -0.1, 0.0])) == 0


def test_cartpole_is_told_by_its_id_and_its_spaces() -> None:
    assert is_cartpole(_info("CartPole-v1", CARTPOLE_OBS, Discrete(2)))
    assert is_cartpole(_info("ns/CartPole-v0", CARTPOLE_OBS, Discrete(2)))
    assert not is_cartpole(_info("Acrobot-v1", CARTPOLE_OBS, Discrete(2)))
    assert not is_cartpole(_info("CartPole-v1", CARTPOLE_OBS, Discrete(3)))
    assert not is_cartpole(_info("CartPole-v1", Box.from_bounds(0.0, 1.0, shape=(6,)), Discrete(2)))


def _group(env_id: str, action: Any, lanes: int = 1) -> ModelObservation:
    episodes = tuple(EpisodeRef(f"{env_id}-{lane}") for lane in range(lanes))
    return ModelObservation(None, env_id, "s", "r", episodes, action_space=action)


async def test_random_policy_samples_each_routes_action_space_reproducibly() -> None:
    box, discrete = Box.from_bounds(-2.0, 2.0, shape=(3,)), Discrete(5)
    a, b = RandomPolicy(seed=7), RandomPolicy(seed=7)
    groups = [_group("pendulum", box, lanes=2), _group("grid", discrete)]
    rounds = [await a.predict_grouped(groups) for _ in range(3)]
    for answers in rounds:
        again = await b.predict_grouped(groups)
        for mine, theirs in zip(answers, again, strict=True):
            assert isinstance(mine, PredictFrames)
            assert isinstance(theirs, PredictFrames)
            assert [np.asarray(x).tolist() for x in mine.actions] == [
                np.asarray(x).tolist() for x in theirs.actions
            ]
    boxes = [x for answers in rounds for x in answers[0].actions]  # type: ignore[union-attr]
    assert len(boxes) == 6
    assert all(x.shape == (3,) and np.all(np.abs(x) <= 2.0) for x in boxes)
    assert len({x.tobytes() for x in boxes}) == 6
    assert all(0 <= int(answers[1].actions[0]) < 5 for answers in rounds)  # type: ignore[union-attr]


def test_random_policy_without_gymnasium(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "gymnasium", None)
    monkeypatch.setitem(sys.modules, "gymnasium.spaces", None)
    with pytest.raises(UsageError, match="Gymnasium, which is not installed"):
        RandomPolicy()


@pytest.mark.parametrize(
    "argv", [["run", "--model", "randm", "--no-progress"], ["serve-model", "randm"]]
)
def test_a_mistyped_builtin_model_gets_a_suggestion(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"trio-rlmesh {argv[0]}: MODEL must be module:attr")
    assert err.endswith("got 'randm'; did you mean 'random'?")


@pytest.mark.network
def test_serve_model_random_serves_the_random_baseline(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    with serving(["serve-model", "random"]) as model:
        code = main(
            [
                *("run", "--env", "tests.cli.envs:Counter", "--env-arg", "length=4"),
                *("--model", model, "--episodes", "3", "--no-progress", "--json", str(out)),
            ]
        )
    assert code == 0
    report = json.loads(out.read_text())
    assert [e["steps"] for e in report["episodes"]] == [4, 4, 4]


def _run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], *argv: str
) -> tuple[str, dict[str, Any]]:
    out = tmp_path / "report.json"
    code = main(["run", *argv, "--no-progress", "--json", str(out)])
    err = capsys.readouterr().err
    assert code == 0, err
    return err.splitlines()[0], json.loads(out.read_text())


def test_no_model_on_another_env_runs_a_random_policy_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, report = _run(tmp_path, capsys, "--env", "tests.cli.envs:Counter", "--episodes", "3")
    assert first.startswith("trio-rlmesh: evaluating a random policy (no --model given and ")
    assert "is not CartPole; it samples the action space)" in first
    assert report["status"] == "completed"
    assert [e["steps"] for e in report["episodes"]] == [3, 3, 3]


def test_no_model_on_cartpole_runs_the_heuristic(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, report = _run(tmp_path, capsys, "--episodes", "1", "--max-episode-steps", "50")
    assert "the built-in heuristic CartPole policy (no --model given)" in first
    assert report["episodes"][0]["steps"] == 50  # the heuristic balances the pole


def test_model_random_is_seeded_by_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ("--model", "random", "--seeds", "0..4", "--base-seed", "11")
    first, one = _run(tmp_path, capsys, *argv)
    _, two = _run(tmp_path, capsys, *argv)
    assert first.startswith(
        "trio-rlmesh: evaluating a random policy (it samples the action space, seed 11) on "
        "gymnasium:CartPole-v1"
    )
    assert [e["steps"] for e in one["episodes"]] == [e["steps"] for e in two["episodes"]]
    # Random actions topple CartPole far sooner than the heuristic does.
    assert max(e["steps"] for e in one["episodes"]) < 200
