"""``trio-rlmesh compare``: real seeded runs give the verdicts one expects, and the table,
the warnings, ``--json`` and ``--plot`` say what the issue asks (issue 26)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from trio_rlmesh._cli import main

pytest.importorskip("rliable.library", reason="compare needs the analysis extra")

PNG = b"\x89PNG\r\n\x1a\n"
CARTPOLE = ["--seeds", "0..9", "--max-episode-steps", "100", "--no-progress"]
PAIR_FIELDS = {
    "a",
    "b",
    "paired",
    "mean_diff",
    "mean_diff_ci",
    "probability_of_improvement",
    "probability_of_improvement_ci",
}


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The built-in heuristic twice and ``--model random`` once, on CartPole, same seeds."""
    where = tmp_path_factory.mktemp("reports")
    made = {}
    for name, extra in (("heuristic", []), ("again", []), ("random", ["--model", "random"])):
        made[name] = where / f"{name}.json"
        assert main(["run", *CARTPOLE, *extra, "--json", str(made[name])]) == 0
    return made


def _compare(capsys: pytest.CaptureFixture[str], *argv: Any) -> tuple[int, str, str]:
    capsys.readouterr()
    status = main(["compare", *map(str, argv)])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_the_heuristic_clearly_beats_random(
    reports: dict[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "comparison.json"
    status, printed, errors = _compare(
        capsys, reports["random"], reports["heuristic"], "--json", out
    )
    assert status == 0, errors
    assert errors == ""  # same env, spaces, caps and seeds: nothing to warn about
    lines = printed.splitlines()
    assert lines[0].split()[:2] == ["run", "n"]
    assert lines[2].startswith("random ")
    assert lines[3].startswith("heuristic  10  100.0 [100.0, 100.0]  100.0 [100.0, 100.0]")
    assert lines[-1] == f"comparison written to {out}"
    verdict = lines[-2]
    assert verdict.startswith("heuristic beats random: P(heuristic > random) = 1.00 [1.00, 1.00]")
    assert verdict.endswith("paired over 10 seeds")
    data = json.loads(out.read_text())
    assert [run["name"] for run in data["runs"]] == ["random", "heuristic"]
    heuristic = data["runs"][1]
    for key in ("mean", "mean_ci", "iqm", "iqm_ci", "std", "stderr", "median"):
        assert key in heuristic
    # A run's summary in compare is the one its own report has (same resamples and seed).
    own = json.loads(reports["random"].read_text())["summary"]
    assert data["runs"][0] == {"name": "random", "path": str(reports["random"]), **own}
    (pair,) = data["pairs"]
    assert set(pair) >= PAIR_FIELDS
    assert (pair["a"], pair["b"], pair["paired"], pair["winner"]) == (
        "random",
        "heuristic",
        True,
        "heuristic",
    )
    assert pair["mean_diff_ci"][0] > 0
    assert pair["probability_of_improvement_ci"][0] > 0.5
    assert pair["verdict"] == verdict
    assert data["warnings"] == []


def test_a_policy_against_itself_shows_no_difference(
    reports: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    status, printed, _ = _compare(capsys, reports["heuristic"], reports["again"])
    assert status == 0
    assert printed.splitlines()[-1] == (
        "no difference shown between heuristic and again: P(again > heuristic) = 0.50 "
        "[0.50, 0.50], Δmean = +0.0 [+0.0, +0.0], paired over 10 seeds"
    )


def _report(
    path: Path, rewards: list[float], *, seeds: list[int | None] | None = None, **setup: Any
) -> Path:
    seeds = seeds if seeds is not None else list(range(len(rewards)))
    episodes = [
        {"index": i, "seed": seed, "steps": 5, "reward": r, "success": None}
        for i, (r, seed) in enumerate(zip(rewards, seeds, strict=True))
    ]
    base = {"env": "E-v0", "observation_space": "Box()", "action_space": "Discrete(2)"}
    base |= {"max_episode_steps": None, "max_episode_seconds": None}
    data = {"status": "completed", "reason": None, "episodes": episodes, "setup": base | setup}
    path.write_text(json.dumps(data))
    return path


def test_it_warns_when_runs_differ_in_env_spaces_caps_or_seeds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = _report(tmp_path / "a.json", [1.0, 2.0, 3.0, 4.0])
    b = _report(
        tmp_path / "b.json",
        [2.0, 3.0, 4.0, 5.0],
        seeds=[0, 1, 7, 8],
        env="F-v0",
        action_space="Discrete(3)",
        max_episode_steps=50,
    )
    status, printed, errors = _compare(capsys, a, b, "--resamples", "200")
    assert status == 0
    warned = [line.removeprefix("trio-rlmesh compare: warning: ") for line in errors.splitlines()]
    assert warned == [
        "the runs differ in env (a: E-v0; b: F-v0)",
        "the runs differ in action space (a: Discrete(2); b: Discrete(3))",
        "the runs differ in --max-episode-steps (a: None; b: 50)",
        "a and b are compared unpaired: they share 2 seeds, but did not run the same seeds "
        "once each (give both runs the same --seeds to pair them)",
    ]
    assert printed.splitlines()[-1].endswith("unpaired (4 and 4 episodes)")


def test_an_unfinished_run_or_one_without_setup_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = _report(tmp_path / "a.json", [1.0, 2.0, 3.0])
    data = json.loads(a.read_text())
    data |= {"status": "cancelled", "reason": "interrupted by SIGINT"}
    del data["setup"]
    b = tmp_path / "b.json"
    b.write_text(json.dumps(data))
    status, _, errors = _compare(capsys, a, b, "--resamples", "100")
    assert status == 0
    assert "b did not complete (cancelled: interrupted by SIGINT)" in errors
    assert "b has no setup block" in errors


def test_json_to_stdout_and_a_plot_of_every_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = [_report(tmp_path / f"{n}.json", [float(n + i % 4) for i in range(8)]) for n in range(3)]
    plot = tmp_path / "plots" / "compare.png"
    status, printed, errors = _compare(
        capsys, *runs, "--json", "-", "--plot", plot, "--resamples", "100"
    )
    assert status == 0, errors
    data = json.loads(printed)  # nothing else on stdout
    assert [(p["a"], p["b"]) for p in data["pairs"]] == [("0", "1"), ("0", "2"), ("1", "2")]
    assert plot.read_bytes().startswith(PNG)
    assert f"plot written to {plot}" in errors


def test_what_cannot_be_compared_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    a = _report(tmp_path / "a.json", [1.0, 2.0])
    status, _, errors = _compare(capsys, a)
    assert (status, errors) == (2, "trio-rlmesh compare: compare needs at least two reports\n")
    (tmp_path / "bad.json").write_text("{}")
    status, _, errors = _compare(capsys, a, tmp_path / "bad.json")
    assert status == 2
    assert "bad.json is not a report of 'trio-rlmesh run --json'" in errors
    status, _, errors = _compare(capsys, a, tmp_path / "missing.json")
    assert (status, "missing.json cannot be read: no such file or directory" in errors) == (2, True)
    for name in ("rliable", "rliable.library", "rliable.metrics", "scipy", "scipy.stats"):
        monkeypatch.setitem(sys.modules, name, None)
    status, _, errors = _compare(capsys, a, a)
    assert status == 2
    assert "comparing runs needs rliable and scipy: pip install 'trio-rlmesh[analysis]'" in errors
    monkeypatch.undo()
    status, _, errors = _compare(capsys, a, a, "--plot", tmp_path / "plot.txt")
    assert status == 2
    assert "cannot plot to" in errors
    assert "not 'txt'" in errors


def test_the_plot_keeps_its_legend_off_the_data(tmp_path: Path) -> None:
    from tests.record.test_show import legend_overlaps
    from trio_rlmesh._cli._compare import read_run
    from trio_rlmesh._cli._compare_plot import comparison_figure

    paths = [_report(tmp_path / f"{n}.json", [n + 1.0, n + 3.0, n + 2.0]) for n in range(2)]
    runs = [read_run(path, path.stem, resamples=50, seed=0) for path in paths]
    figure = comparison_figure([(r.sample, r.summary) for r in runs], resamples=50, seed=0)
    assert [axes.get_title() for axes in figure.axes] == [
        "mean, 95% CI",
        "IQM, 95% CI",
        "performance profiles",
    ]
    assert legend_overlaps(figure) == []
