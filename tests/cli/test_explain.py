"""``trio-rlmesh explain``, and the pairing ``trio-rlmesh run`` prints and reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import trio_rlmesh.adapters as adapt
from tests.interop.envs import arm_example
from trio_rlmesh._cli import main

ARM = "tests.cli.envs:tagged_arm"
UNTAGGED = "tests.cli.envs:untagged_arm"
POLICY = "tests.cli.models:ArmPolicy"
NO_TAGS = (
    "model 'tests.cli.models:ArmPolicy' cannot be paired with env 'UnknownEnv-v1': env "
    "contract carries no adapter tags under 'rlmesh.adapters.v1.env_tags'; serve the env with "
    "rlmesh.adapters.tag(...); change the model's spec or the env's tags (trio-rlmesh explain "
    "shows the pairing)"
)


def explained() -> str:
    """The pairing as the adapter core explains it."""
    arm = arm_example()
    return adapt.resolve_from_contract(arm.make_env(), arm.ReachPolicy.spec).explain()


def test_explain_prints_the_pairing_without_running(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "--env", ARM, "--model", POLICY]) == 0
    out = capsys.readouterr().out
    assert out == f"{POLICY} on UnknownEnv-v1:\n{explained()}\n"


def test_explain_of_a_pairing_that_cannot_work_is_one_line_and_status_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["explain", "--env", UNTAGGED, "--model", POLICY]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"trio-rlmesh explain: {NO_TAGS}\n"
    assert captured.out == ""


def test_explain_of_a_model_without_a_spec_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "--env", ARM, "--model", "tests.cli.models:AlwaysLeft"]) == 0
    assert "declares no spec" in capsys.readouterr().out


def test_explain_prints_advisories_one_line_each(capsys: pytest.CaptureFixture[str]) -> None:
    class Wrist:
        spec = adapt.ModelSpec(
            {"wrist": adapt.Image(adapt.IMAGE_WRIST, size=8)}, arm_example().ReachPolicy.spec.output
        )

        def predict(self, observation: object) -> object:
            raise AssertionError("explain runs no episode")

    import tests.cli.models as models

    models.Wrist = Wrist  # type: ignore[attr-defined]
    try:
        assert main(["explain", "--env", ARM, "--model", "tests.cli.models:Wrist"]) == 0
    finally:
        del models.Wrist  # type: ignore[attr-defined]
    advisories = [
        line for line in capsys.readouterr().out.splitlines() if line.startswith("advisory")
    ]
    assert advisories
    assert advisories[0].startswith("advisory (caution): ")


def test_run_prints_the_pairing_first_and_the_report_keeps_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report.json"
    argv = ["run", "--env", ARM, "--model", POLICY, "--episodes", "2", "--no-progress"]
    assert main([*argv, "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith(f"pairing of {POLICY} with UnknownEnv-v1:\n{explained()}\n")
    report = json.loads(out.read_text())
    assert report["pairing"] == explained()
    assert report["status"] == "completed"


def test_run_of_a_pairing_that_cannot_work_fails_before_any_episode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report.json"
    argv = ["run", "--env", UNTAGGED, "--model", POLICY, "--episodes", "2", "--no-progress"]
    assert main([*argv, "--json", str(out)]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"trio-rlmesh run: {NO_TAGS}"
    report = json.loads(out.read_text())
    assert (report["status"], report["episodes"], report["pairing"]) == ("failed", [], None)


def test_a_run_without_a_spec_reports_no_pairing(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    argv = ["run", "--episodes", "1", "--max-episode-steps", "5", "--no-progress"]
    assert main([*argv, "--json", str(out)]) == 0
    assert json.loads(out.read_text())["pairing"] is None


def test_a_registered_gymnasium_env_carries_its_tags(capsys: pytest.CaptureFixture[str]) -> None:
    import gymnasium

    env_id = "trio-rlmesh-tests/TaggedArm-v0"
    gymnasium.register(env_id, entry_point=tagged_arm_entry)
    try:
        assert main(["explain", "--env", f"gymnasium:{env_id}", "--model", POLICY]) == 0
    finally:
        del gymnasium.registry[env_id]
    assert capsys.readouterr().out == f"{POLICY} on {env_id}:\n{explained()}\n"


def tagged_arm_entry(**kwargs: object) -> object:
    """What a registered env's entry point returns: the env, tagged."""
    return arm_example().make_env(steps=4)
