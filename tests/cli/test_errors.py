"""Every user mistake is one line saying what was wrong and what to do; usage errors exit 2.

With ``--json``, a run that fails before it starts still writes a ``failed`` report.
"""

from __future__ import annotations

import errno
import json
import re
import signal
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import attrs
import gymnasium
import pytest
import trio

from trio_rlmesh import EnvError
from trio_rlmesh._cli import _run, main
from trio_rlmesh._cli._exit import EXIT_FAILED, EXIT_USAGE, UsageError, describe, unwrap
from trio_rlmesh._cli._output import check_writable

from .support import STARTUP_TIMEOUT, read_line, start, stop, wait_for

if sys.version_info < (3, 11):
    from exceptiongroup import BaseExceptionGroup, ExceptionGroup

USAGE_MISTAKES = [
    pytest.param(
        ["--env", "gymnasium:Nope-v0"],
        ["unknown Gymnasium env 'Nope-v0'", "doesn't exist"],
        id="unknown-gymnasium-id",
    ),
    pytest.param(
        ["--env", "foo"],
        ["ENV must be gymnasium:<id>, module:attr or a server address, got 'foo'"],
        id="bare-word",
    ),
    pytest.param(
        ["--env", "CartPole-v1"], ["did you mean gymnasium:CartPole-v1?"], id="missing-gymnasium"
    ),
    pytest.param(
        ["--env", "no_such_module_xyz:bar"],
        ["ENV 'no_such_module_xyz:bar': no module named 'no_such_module_xyz'"],
        id="unknown-module",
    ),
    pytest.param(
        ["--env", "tests.cli.envs:nope"],
        ["module 'tests.cli.envs' has no 'nope'"],
        id="unknown-attribute",
    ),
    pytest.param(
        ["--env", "127.0.0.1:99999"],
        ["--env: invalid address '127.0.0.1:99999': port 99999 is out of range"],
        id="env-port-out-of-range",
    ),
    pytest.param(
        ["--model", "localhost:70000"], ["--model: invalid address"], id="model-port-out-of-range"
    ),
    pytest.param(
        ["--env", "tests.cli.envs:needs_box2d"],
        ["needs a package that is not installed: Box2D is not installed"],
        id="missing-dependency",
    ),
    pytest.param(
        ["--env", "tests.cli.envs:NOT_AN_ENV"],
        ["ENV 'tests.cli.envs:NOT_AN_ENV' is an int, not an env"],
        id="not-an-env",
    ),
    pytest.param(
        ["--env", "tests.cli.envs:returns_int"],
        ["ENV 'tests.cli.envs:returns_int': returns_int() returned an int, not an env"],
        id="factory-returns-no-env",
    ),
    pytest.param(
        ["--execution-horizon", "-1"],
        ["--execution-horizon must be greater than zero, got -1"],
        id="negative-horizon",
    ),
    pytest.param(
        ["--model", "./file.py:X"],
        ["MODEL './file.py:X' names a file", "use file:X"],
        id="model-file-path",
    ),
    pytest.param(
        ["--model", "tests.cli.models:NoPredict"], ["has no predict method"], id="no-predict"
    ),
    pytest.param(
        ["--env", "gymnasium:CartPole-v1", "--env-arg", "colour=1"],
        ["does not take the arguments {'colour': 1}"],
        id="unknown-env-argument",
    ),
    pytest.param(
        ["--env", "gymnasium:CartPole-v1", "--env-kwargs", "[1]"],
        ["--env-kwargs must be a JSON object"],
        id="env-kwargs-not-an-object",
    ),
    pytest.param(
        ["--env", "tests.cli.envs:ENV", "--env-arg", "length=2"],
        ["need a gymnasium:<id>, a class or a function"],
        id="env-arguments-for-an-instance",
    ),
    pytest.param(
        ["--seeds", "0,1", "--episodes", "3"],
        ["--episodes=1 disagrees with the 2 --seeds given"],
        id="seeds-episodes",
    ),
    pytest.param(["--episodes", "x"], ["argument --episodes: invalid int value"], id="argparse"),
]


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


@pytest.mark.parametrize(("argv", "says"), USAGE_MISTAKES)
def test_usage_mistakes_are_one_line_exit_2_and_a_failed_report(
    argv: list[str], says: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report.json"
    code = main(["run", *argv, "--episodes", "1", "--no-progress", "--json", str(out)][:])
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err
    assert "Traceback" not in err
    assert "ExceptionGroup" not in err
    lines = _lines(err)
    assert len(lines) == 1, err
    for text in says:
        assert text in lines[0]
    report = json.loads(out.read_text())
    assert report["status"] == "failed"
    assert report["reason"].startswith("UsageError: ")
    assert report["episodes"] == []


@pytest.mark.network
def test_a_refused_connection_says_it_could_not_connect(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report.json"
    with socket.socket() as bound:  # bound, not listening: connecting is refused
        bound.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{bound.getsockname()[1]}"
        code = main(["run", "--env", address, "--no-progress", "--json", str(out)])
    err = capsys.readouterr().err
    assert code == EXIT_FAILED
    assert _lines(err)[-1] == (
        f"trio-rlmesh run: could not connect to tcp://{address}: connection refused; "
        "is the server running? (env.handshake)"
    )
    assert "connection lost" not in err
    assert json.loads(out.read_text())["reason"].startswith("TransportError: could not connect")


@pytest.mark.network
@pytest.mark.parametrize(
    "command",
    [["serve-env", "gymnasium:CartPole-v1"], ["serve-model", "tests.cli.models:AlwaysLeft"]],
)
def test_a_busy_port_says_the_server_could_not_listen(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        code = main([*command, "--bind", address])
    err = capsys.readouterr().err
    assert code == EXIT_FAILED
    component = command[0].removeprefix("serve-")
    assert _lines(err) == [
        f"trio-rlmesh {command[0]}: the {component} server could not listen on {address}: "
        "the address is already in use; is another server listening there?"
    ]


@pytest.mark.parametrize("where", ["a-directory", "under-a-file"])
def test_an_unwritable_json_path_is_a_usage_error_before_the_run(
    where: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("")
    path, why = {
        "a-directory": (tmp_path, "is a directory"),
        "under-a-file": (
            tmp_path / "file" / "sub" / "out.json",
            f"{tmp_path / 'file'} is not a directory",
        ),
    }[where]
    assert main(["run", "--episodes", "1", "--no-progress", "--json", str(path)]) == EXIT_USAGE
    captured = capsys.readouterr()
    assert _lines(captured.err) == [f"trio-rlmesh run: --json {path} cannot be written: {why}"]
    assert captured.out == ""  # no run, no results
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_the_json_check_leaves_nothing_behind(tmp_path: Path) -> None:
    path = tmp_path / "new" / "out.json"
    check_writable(path, "--json")
    assert path.parent.is_dir()  # as write_json would make it
    assert not path.exists()
    path.write_text("kept")
    check_writable(path, "--json")
    assert path.read_text() == "kept"


def test_a_report_that_cannot_be_written_after_the_run_fails_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report.json"

    def full(path: Path | None, data: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(_run, "write_json", full)
    assert main(["run", "--episodes", "1", "--no-progress", "--json", str(out)]) == EXIT_FAILED
    captured = capsys.readouterr()
    assert "completed: 1 episode" in captured.out  # the results are still printed
    assert _lines(captured.err)[-1] == (
        f"trio-rlmesh run: could not write the report to {out}: no space left on device"
    )


def test_show_checks_the_plot_path_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["show", str(tmp_path / "no-dataset-v0"), "--plot", str(tmp_path)])
    assert code == EXIT_USAGE
    assert _lines(capsys.readouterr().err) == [
        f"trio-rlmesh show: --plot {tmp_path} cannot be written: is a directory"
    ]


def test_gymnasium_not_installed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "gymnasium", None)  # `import gymnasium` raises ImportError
    assert main(["run", "--episodes", "1", "--no-progress"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert _lines(err) == [
        "trio-rlmesh run: ENV 'gymnasium:CartPole-v1' needs Gymnasium, which is not installed: "
        "pip install 'trio-rlmesh[gymnasium]'"
    ]


@pytest.fixture
def box2d_like_id() -> Iterator[str]:
    env_id = "TrioRlmeshNeedsBox2D-v0"
    gymnasium.register(env_id, entry_point="tests.cli.envs:needs_box2d")
    yield env_id
    del gymnasium.registry[env_id]


def test_a_gymnasium_env_missing_its_dependency(
    box2d_like_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve-env", f"gymnasium:{box2d_like_id}"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert _lines(err) == [
        f"trio-rlmesh serve-env: ENV 'gymnasium:{box2d_like_id}' needs a package that is not "
        "installed: Box2D is not installed, run `pip install box2d`"
    ]


def test_lunar_lander_without_box2d(capsys: pytest.CaptureFixture[str]) -> None:
    try:
        import Box2D  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("Box2D is installed")
    assert main(["run", "--env", "gymnasium:LunarLander-v3", "--no-progress"]) == EXIT_USAGE
    assert "needs a package that is not installed: Box2D" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["serve-env", "not-a-target"], "ENV must be gymnasium:<id> or module:attr"),
        (["serve-env", "tests.cli.envs:NOT_AN_ENV"], "is an int, not an env"),
        (["serve-env", "gymnasium:CartPole-v1", "--bind", "127.0.0.1:65536"], "out of range"),
        (["serve-env", "tests.cli.envs:ENV", "--num-envs", "2"], "--num-envs=2 needs"),
        (["serve-env", "gymnasium:CartPole-v1", "--num-envs", "0"], "--num-envs must be"),
        (["serve-model", "x_no_such_module:y"], "no module named 'x_no_such_module'"),
        (["serve-model", "tests.cli.models:NoPredict"], "has no predict method"),
    ],
)
def test_serve_usage_mistakes(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == EXIT_USAGE
    lines = _lines(capsys.readouterr().err)
    assert len(lines) == 1
    assert lines[0].startswith(f"trio-rlmesh {argv[0]}: ")
    assert says in lines[0]


def test_a_failing_env_constructor_is_a_failure_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report.json"
    code = main(["run", "--env", "tests.cli.envs:Unlicensed", "--no-progress", "--json", str(out)])
    err = capsys.readouterr().err
    assert code == EXIT_FAILED, err
    assert _lines(err)[-1] == (
        "trio-rlmesh run: creating the env 'tests.cli.envs:Unlicensed' failed: "
        "RuntimeError: no licence found"
    )
    assert "Traceback" not in err
    assert json.loads(out.read_text())["reason"].startswith("EnvError: creating the env")


def test_unwrap_finds_the_error_inside_nested_groups() -> None:
    error = EnvError("boom")
    nested = ExceptionGroup("outer", [ExceptionGroup("inner", [error])])
    assert unwrap(nested) is error
    assert unwrap(error) is error


async def test_unwrap_prefers_the_error_over_cancellations() -> None:
    error = UsageError("bad")

    async def fail() -> None:
        raise error

    async def sleep_and_fail() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.sleep_forever)
            nursery.start_soon(fail)

    with pytest.raises(BaseExceptionGroup) as caught:
        await sleep_and_fail()
    assert unwrap(caught.value) is error
    assert describe(caught.value).exit_code == EXIT_USAGE


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (["--seeds", "0..3"], "drop --seeds or serve the env with autoreset disabled"),
        (
            ["--max-episode-steps", "5", "--episodes", "2"],
            "--max-episode-steps / --max-episode-seconds require an env with autoreset disabled",
        ),
    ],
)
def test_errors_name_the_option_the_user_typed(
    options: list[str], says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The runtime words these for Python callers (``episode_seeds``); the CLI user typed
    ``--seeds``. The JSON report's reason says the same."""
    out = tmp_path / "report.json"
    argv = ["run", "--env", "tests.cli.envs:vector", *options, "--no-progress", "--json", str(out)]
    assert main(argv) == EXIT_USAGE
    line = _lines(capsys.readouterr().err)[-1]
    assert says in line
    assert "episode_seeds" not in line
    assert "max_episode" not in line
    assert says in json.loads(out.read_text())["reason"]


def test_the_api_names_the_cli_renames_are_run_options() -> None:
    from trio_rlmesh import RunLocalOptions
    from trio_rlmesh._cli import _parser
    from trio_rlmesh._cli._run import API_OPTIONS

    fields = {field.name for field in attrs.fields(RunLocalOptions)}
    run = next(a for a in _parser()._actions if a.dest == "command").choices["run"]  # type: ignore[union-attr]
    flags = {flag for action in run._actions for flag in action.option_strings}
    assert set(API_OPTIONS) <= fields
    assert set(API_OPTIONS.values()) <= flags


@pytest.mark.network
@pytest.mark.parametrize("side", ["env", "model"])
def test_a_server_killed_mid_run_is_named_once_with_its_step(side: str) -> None:
    """The run's last line names the operation, the address (once), the step and the lane,
    and nothing is said about releasing a model whose server is gone."""
    if side == "env":  # two quick episodes, then each step sleeps: the kill lands mid-step
        server_argv = ["serve-env", "tests.cli.envs:Counter", "--env-arg", "announce=true"]
        server_argv += ["--env-arg", "quick=2", "--env-arg", "delay=5"]
        busy, run_argv = "counter: slow step", ["--model", "tests.cli.models:AlwaysLeft"]
    else:
        server_argv = ["serve-model", "tests.cli.models:SlowAfterFirst"]
        busy, run_argv = "model: slow predict", ["--env", "tests.cli.envs:Counter"]
    server = start(server_argv)
    try:
        assert server.stdout is not None
        address = read_line(server.stdout, STARTUP_TIMEOUT, what="address").strip()
        run = start(["run", f"--{side}", address, *run_argv, "--episodes", "50"])
        try:
            wait_for(server, busy)
            server.kill()
            server.wait(timeout=30)
            assert run.wait(timeout=60) == EXIT_FAILED
            assert run.stderr is not None
            err = run.stderr.read()
        finally:
            stop(run, signal.SIGKILL)
    finally:
        stop(server, signal.SIGKILL)
    last = err.strip().splitlines()[-1]
    target = f"tcp://{address}"
    assert re.match(
        rf"trio-rlmesh run: connection lost during {side}\.(step|predict) to "
        rf"{re.escape(target)} at step \d+ on lane 0: ",
        last,
    ), err
    assert last.count(address) == 1, last
    assert "release_adapter" not in err
