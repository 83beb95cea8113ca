"""Each rule on an option is written once, in the options the Python API takes; the command
line gives the same verdict, in the same words under the option's own name.

Every case runs the Python API (``trio_rlmesh.run`` on an env in this process, or
``serve_env``) and the command (``trio-rlmesh run``, which serves the same env on loopback,
or ``serve-env``) with the same values: both run (the same episodes), or both refuse, the
command's one line being the API's error with each parameter named as the option
(``--episodes`` for ``max_episodes``).
"""

from __future__ import annotations

import functools
import json
import math
import signal
from pathlib import Path
from typing import Any

import pytest
import trio

import trio_rlmesh
from trio_rlmesh import SpecError
from trio_rlmesh._cli import main
from trio_rlmesh._cli._exit import EXIT_USAGE, describe, unwrap
from trio_rlmesh._cli._run import API_OPTIONS
from trio_rlmesh._cli._serve import SERVE_OPTIONS
from trio_rlmesh.transports.grpc import serve_env

from .envs import Counter
from .models import AlwaysLeft
from .support import STARTUP_TIMEOUT, read_line, start, stop

RUN = ["run", "--env", "tests.cli.envs:Counter", "--model", "tests.cli.models:AlwaysLeft"]
ONE = {"max_episodes": 1}, ["--episodes", "1"]
RUN_TIMEOUT = 60.0

RUN_RULES = [
    pytest.param(
        {"execution_horizon": 0},
        ["--execution-horizon", "0"],
        "execution_horizon must be greater than zero, got 0",
        id="horizon-0",
    ),
    pytest.param(
        {"execution_horizon": -1},
        ["--execution-horizon", "-1"],
        "execution_horizon must be greater than zero, got -1",
        id="horizon-negative",
    ),
    pytest.param(
        {"prefetch_lead": -1},
        ["--prefetch-lead", "-1"],
        "prefetch_lead must be 0 (off) or a positive frame count, got -1",
        id="prefetch-negative",
    ),
    pytest.param(
        {"prefetch_lead": 2, **ONE[0]}, ["--prefetch-lead", "2", *ONE[1]], 1, id="prefetch"
    ),
    pytest.param(
        {"max_episodes": 0},
        ["--episodes", "0"],
        "max_episodes must be greater than zero when set, got 0",
        id="episodes-0",
    ),
    pytest.param(
        {"max_episode_steps": 0, **ONE[0]},
        ["--max-episode-steps", "0", *ONE[1]],
        "max_episode_steps must be greater than zero when set, got 0",
        id="steps-0",
    ),
    pytest.param(
        {"max_episode_seconds": 0.0, **ONE[0]},
        ["--max-episode-seconds", "0", *ONE[1]],
        "max_episode_seconds must be greater than zero when set (None or infinity: no cap), "
        "got 0.0",
        id="seconds-0",
    ),
    pytest.param(
        {"max_episode_seconds": math.nan, **ONE[0]},
        ["--max-episode-seconds", "nan", *ONE[1]],
        "max_episode_seconds must be greater than zero when set (None or infinity: no cap), "
        "got nan",
        id="seconds-nan",
    ),
    pytest.param(
        {"max_episode_seconds": math.inf, **ONE[0]},
        ["--max-episode-seconds", "inf", *ONE[1]],
        1,
        id="seconds-infinite-is-no-cap",
    ),
    pytest.param({"episode_seeds": (0, 1)}, ["--seeds", "0,1"], 2, id="one-episode-per-seed"),
    pytest.param({"episode_seeds": "4..7"}, ["--seeds", "4..7"], 4, id="seed-range"),
    pytest.param(
        {"episode_seeds": "3..1"},
        ["--seeds", "3..1"],
        "episode_seeds: seed range '3..1' is empty; use low..high",
        id="seed-range-empty",
    ),
    pytest.param(
        {"episode_seeds": "a,b"},
        ["--seeds", "a,b"],
        "episode_seeds: bad seed list 'a,b'; use e.g. 0,1,2",
        id="seed-list-bad",
    ),
    pytest.param(
        {"episode_seeds": (0, 1), "max_episodes": 3},
        ["--seeds", "0,1", "--episodes", "3"],
        "max_episodes=3 disagrees with the 2 episode_seeds given; drop max_episodes or give "
        "one seed per episode",
        id="seeds-disagree-with-episodes",
    ),
    pytest.param(
        {"fuse_wait": 0.01, **ONE[0]},
        ["--fuse-wait", "0.01", *ONE[1]],
        "fuse_wait tunes how a fleet's predicts are fused (several env addresses); this run "
        "drives one env: drop fuse_wait",
        id="fuse-wait-for-one-env",
    ),
    pytest.param(
        {"fuse_wait": math.inf, **ONE[0]},
        ["--fuse-wait", "inf", *ONE[1]],
        "fuse_wait must be a finite number of seconds >= 0, got inf",
        id="fuse-wait-infinite",
    ),
]


def _api_run(options: dict[str, Any]) -> trio_rlmesh.RuntimeReport:
    """``trio_rlmesh.run``, bounded: an unbounded run is a verdict too (a failing one)."""

    async def bounded() -> trio_rlmesh.RuntimeReport:
        with trio.fail_after(RUN_TIMEOUT):
            return await trio_rlmesh.run_local(
                AlwaysLeft(), trio_rlmesh.RunLocalOptions(Counter(), **options)
            )

    return trio.run(bounded)


def _cli_run(argv: list[str], tmp_path: Path) -> tuple[int, str, dict[str, Any]]:
    out = tmp_path / "report.json"
    code = main([*RUN, *argv, "--no-progress", "--json", str(out)])
    return code, out.read_text(), json.loads(out.read_text())


def _same_refusal(error: SpecError, says: str, line: str, command: str, table: Any) -> None:
    assert str(error) == says
    named = describe(error, table).message
    assert line == f"trio-rlmesh {command}: {named}"
    options = [option for name, option in table.items() if name in says]
    assert options, "a rule's error names the option it is about"
    for name, option in table.items():
        if name in says:
            assert option in named
            assert name not in named


@pytest.mark.network
@pytest.mark.parametrize(("api", "cli", "verdict"), RUN_RULES)
def test_run_options_get_one_verdict_from_the_api_and_the_command(
    api: dict[str, Any],
    cli: list[str],
    verdict: int | str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if isinstance(verdict, int):  # both run this many episodes
        report = _api_run(api)
        code, _, data = _cli_run(cli, tmp_path)
        assert code == 0, capsys.readouterr().err
        assert len(report.episodes) == len(data["episodes"]) == verdict
        assert [e.seed for e in report.episodes] == [e["seed"] for e in data["episodes"]]
        return
    with pytest.raises(SpecError) as info:
        _api_run(api)
    capsys.readouterr()
    code, _, data = _cli_run(cli, tmp_path)
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err
    assert data["episodes"] == []
    _same_refusal(info.value, verdict, err.splitlines()[-1], "run", API_OPTIONS)


@pytest.mark.parametrize("token", ["", "  "])
def test_a_blank_token_is_refused_by_the_api_and_the_command(
    token: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The rule (``check_token``) is the API's; the command names where the token came
    from instead of the parameter."""
    with pytest.raises(SpecError, match="token must not be blank"):
        trio_rlmesh.RunLocalOptions("127.0.0.1:1", token=token)
    options = trio_rlmesh.RunLocalOptions("127.0.0.1:1")
    with pytest.raises(SpecError, match="token must not be blank"):  # the model's, the same
        trio.run(functools.partial(trio_rlmesh.run_remote, model_token=token), "h:2", options)
    code = main(["run", "--env", "127.0.0.1:1", "--token", token, "--no-progress"])
    assert code == EXIT_USAGE
    assert "the token from --token is empty (an unset variable?)" in capsys.readouterr().err


SERVE_RULES = [
    pytest.param(
        {"num_envs": 0},
        ["tests.cli.envs:make", "--num-envs", "0"],
        "num_envs must be greater than zero when set, got 0",
        id="num-envs-0",
    ),
    pytest.param(
        {"num_envs": 2},
        ["tests.cli.envs:ENV", "--num-envs", "2"],
        "num_envs=2 needs a factory (a class, or a callable returning an env; one env per "
        "lane), not one env object (Counter)",
        id="num-envs-for-one-env",
    ),
    pytest.param(
        {"drain_timeout": -1.0},
        ["tests.cli.envs:ENV", "--drain-timeout", "-1"],
        "drain_timeout must be >= 0 seconds (None or infinity: no deadline), got -1.0",
        id="drain-negative",
    ),
    pytest.param(
        {"drain_timeout": math.nan},
        ["tests.cli.envs:ENV", "--drain-timeout", "nan"],
        "drain_timeout must be >= 0 seconds (None or infinity: no deadline), got nan",
        id="drain-nan",
    ),
]


@pytest.mark.parametrize(("api", "cli", "says"), SERVE_RULES)
def test_serve_options_get_one_verdict_from_the_api_and_the_command(
    api: dict[str, Any], cli: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from .envs import ENV, make

    target = make if cli[0].endswith(":make") else ENV

    async def serve_briefly() -> None:  # a server that starts has taken the values
        with trio.fail_after(RUN_TIMEOUT):
            async with trio.open_nursery() as nursery:
                await nursery.start(functools.partial(serve_env, target, "127.0.0.1:0", **api))
                nursery.cancel_scope.cancel()

    with pytest.raises(BaseException) as info:
        trio.run(serve_briefly)
    error = unwrap(info.value)
    assert isinstance(error, SpecError), repr(error)
    code = main(["serve-env", *cli])  # the command's signal handlers want the main thread
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err
    [line] = err.splitlines()
    _same_refusal(error, says, line, "serve-env", SERVE_OPTIONS)


@pytest.mark.network
async def test_an_infinite_drain_timeout_is_no_limit_for_the_api_and_the_command() -> None:
    with trio.fail_after(STARTUP_TIMEOUT):
        async with trio.open_nursery() as nursery:
            await nursery.start(
                lambda task_status: serve_env(
                    Counter(), "127.0.0.1:0", drain_timeout=math.inf, task_status=task_status
                )
            )
            nursery.cancel_scope.cancel()
    server = start(["serve-env", "tests.cli.envs:Counter", "--drain-timeout", "inf"])
    try:
        assert server.stdout is not None
        read_line(server.stdout, STARTUP_TIMEOUT, what="address")
        server.send_signal(signal.SIGINT)
        assert server.wait(timeout=STARTUP_TIMEOUT) == 130
    finally:
        stop(server, signal.SIGKILL)


def test_a_fleet_of_no_ray_servers_is_refused_by_the_api_and_the_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``env_fleet``'s count and ``--ray-envs`` follow one rule, checked before Ray is
    imported; each names its own parameter."""
    from trio_rlmesh.ray import env_fleet

    async def start_fleet() -> None:
        async with env_fleet("gymnasium:CartPole-v1", 0):
            pass  # pragma: no cover

    with pytest.raises(SpecError) as info:
        trio.run(start_fleet)
    assert str(info.value) == "env_fleet count must be greater than zero, got 0"
    assert main(["run", "--ray-envs", "0", "--no-progress"]) == EXIT_USAGE
    line = capsys.readouterr().err.splitlines()[-1]
    assert line == "trio-rlmesh run: --ray-envs must be greater than zero, got 0"
