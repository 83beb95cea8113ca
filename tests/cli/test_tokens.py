"""Tokens: flag > file > variable, per side for ``run``; an empty token is refused."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from trio_rlmesh._cli import main
from trio_rlmesh._cli._exit import EXIT_USAGE, UsageError
from trio_rlmesh._cli._tokens import resolve_token

from .support import serving


def _args(**values: object) -> argparse.Namespace:
    names = (
        "token",
        "token_file",
        "env_token",
        "env_token_file",
        "model_token",
        "model_token_file",
    )
    return argparse.Namespace(**{name: values.get(name) for name in names})


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    made = {}
    for name, text in {"common": "from-file\n", "env": "  env-file \n", "empty": "\n"}.items():
        made[name] = tmp_path / name
        made[name].write_text(text)
    return made


def test_flag_beats_file_beats_variable(files: dict[str, Path]) -> None:
    environ = {"TRIO_RLMESH_TOKEN": "from-var"}
    assert resolve_token(_args(), environ=environ) == "from-var"
    assert resolve_token(_args(token_file=files["common"]), environ=environ) == "from-file"
    assert resolve_token(_args(token="flag", token_file=files["common"]), environ=environ) == "flag"
    assert resolve_token(_args(), environ={}) is None


def test_per_side_beats_shared_within_each_source(files: dict[str, Path]) -> None:
    environ = {"TRIO_RLMESH_TOKEN": "shared-var", "TRIO_RLMESH_ENV_TOKEN": "env-var"}
    assert resolve_token(_args(), "env", environ) == "env-var"
    assert resolve_token(_args(), "model", environ) == "shared-var"
    both = _args(token="common", env_token="env", token_file=files["common"])
    assert resolve_token(both, "env", environ) == "env"
    assert resolve_token(both, "model", environ) == "common"
    # A flag of either kind beats any file; surrounding whitespace is cut from files.
    assert resolve_token(_args(token="common", env_token_file=files["env"]), "env", {}) == "common"
    assert resolve_token(_args(env_token_file=files["env"]), "env", {}) == "env-file"


@pytest.mark.parametrize(
    ("kwargs", "environ", "source"),
    [
        ({"token": ""}, {}, "--token"),
        ({"token": "  "}, {}, "--token"),
        ({"env_token": ""}, {}, "--env-token"),
        ({"token_file": "empty"}, {}, "--token-file"),
        ({}, {"TRIO_RLMESH_TOKEN": ""}, "$TRIO_RLMESH_TOKEN"),
        ({}, {"TRIO_RLMESH_ENV_TOKEN": ""}, "$TRIO_RLMESH_ENV_TOKEN"),
    ],
)
def test_an_empty_token_is_refused(
    kwargs: dict[str, str], environ: dict[str, str], source: str, files: dict[str, Path]
) -> None:
    values: dict[str, object] = {
        k: files[v] if k.endswith("_file") else v for k, v in kwargs.items()
    }
    with pytest.raises(UsageError, match="is empty") as caught:
        resolve_token(_args(**values), "env", environ)
    assert source in str(caught.value)


def test_a_missing_token_file_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot read --token-file"):
        resolve_token(_args(token_file=tmp_path / "absent"))


def test_an_empty_token_file_is_said_to_be_empty(files: dict[str, Path]) -> None:
    with pytest.raises(UsageError) as caught:
        resolve_token(_args(env_token_file=files["empty"]), "env", {})
    assert str(caught.value) == (
        f"--env-token-file {files['empty']} is empty; write the token into it, or drop "
        "--env-token-file to go without authentication"
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--env", "127.0.0.1:1", "--token-file", "{file}"],
        ["run", "--envs-file", "{file}"],
        ["serve-env", "gymnasium:CartPole-v1", "--token-file", "{file}"],
    ],
)
def test_a_file_that_is_not_text_is_a_usage_error_naming_it(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    binary = tmp_path / "binary"
    binary.write_bytes(b"ok\xff\xfe")
    assert main([arg.format(file=binary) for arg in argv]) == EXIT_USAGE
    option = next(arg for arg in argv if arg.endswith("-file"))
    assert capsys.readouterr().err == (
        f"trio-rlmesh {argv[0]}: {option} {binary} is not UTF-8 text (byte 2 is 0xff)\n"
    )


@pytest.mark.parametrize(
    "command",
    [["serve-env", "gymnasium:CartPole-v1"], ["serve-model", "tests.cli.models:AlwaysLeft"]],
)
@pytest.mark.parametrize("how", ["flag", "variable"])
def test_servers_refuse_an_empty_token(
    command: list[str],
    how: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if how == "flag":
        command = [*command, "--token", ""]
    else:
        monkeypatch.setenv("TRIO_RLMESH_TOKEN", "")
    assert main(command) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "is empty (an unset variable?)" in err
    assert len(err.splitlines()) == 1


def _run(tmp_path: Path, *argv: str) -> tuple[int, dict[str, object]]:
    out = tmp_path / "report.json"
    code = main(["run", *argv, "--episodes", "1", "--no-progress", "--json", str(out)])
    report: dict[str, object] = json.loads(out.read_text())
    return code, report


@pytest.mark.network
def test_separate_env_and_model_tokens_from_each_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    env_file = tmp_path / "env-token"
    env_file.write_text("env-secret\n")
    with (
        serving(["serve-env", "tests.cli.envs:Counter", "--token-file", str(env_file)]) as env,
        serving(
            ["serve-model", "tests.cli.models:AlwaysLeft"],
            extra_env={"TRIO_RLMESH_TOKEN": "model-secret"},
        ) as model,
    ):
        base = ("--env", env, "--model", model)
        code, report = _run(tmp_path, *base, "--env-token", "env-secret", "--model-token", "x")
        assert code == 1
        assert "rejected the token" in str(report["reason"])
        assert "model.handshake" in str(report["reason"])

        code, report = _run(tmp_path, *base, "--env-token", "env-secret")
        assert code == 1
        assert "the server requires a token and none was sent" in str(report["reason"])

        monkeypatch.setenv("TRIO_RLMESH_MODEL_TOKEN", "model-secret")
        code, report = _run(tmp_path, *base, "--env-token-file", str(env_file))
        assert (code, report["status"]) == (0, "completed")

        monkeypatch.setenv("TRIO_RLMESH_ENV_TOKEN", "env-secret")
        code, report = _run(tmp_path, *base)
        assert (code, report["status"]) == (0, "completed")
    capsys.readouterr()


def test_a_side_token_for_an_in_process_side_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["run", "--model-token", "x", "--episodes", "1"]) == EXIT_USAGE
    assert "--model-token is for a model server address" in capsys.readouterr().err


@pytest.mark.network
def test_an_address_of_the_other_service_says_which_it_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with (
        serving(["serve-env", "tests.cli.envs:Counter"]) as env,
        serving(["serve-model", "tests.cli.models:AlwaysLeft"]) as model,
    ):
        code, report = _run(tmp_path, "--env", model)
        assert code == EXIT_USAGE
        assert f"--env {model} is a model server" in str(report["reason"])
        code, report = _run(tmp_path, "--env", env, "--model", env)
        assert code == EXIT_USAGE
        assert f"--model {env} is an env server" in str(report["reason"])
    err = capsys.readouterr().err
    assert "pass it as --model" in err
    assert "pass it as --env" in err
