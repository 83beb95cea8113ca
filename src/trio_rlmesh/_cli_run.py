"""``trio-rlmesh run``: evaluate a model against an env, with progress, tables and a JSON report."""

from __future__ import annotations

import argparse
import json
import math
import signal
import sys
import time
from pathlib import Path
from typing import Any, TextIO

import trio

from ._cli import load_env_target, load_model_target
from ._errors import Error, SpecError
from .runtime import EpisodeCompleted, RuntimeHooks, RuntimeReport, StepCompleted

__all__ = ["HeuristicCartPole", "add_run_parser", "parse_seeds", "run_command"]

DEFAULT_ENV = "gymnasium:CartPole-v1"
DEFAULT_EPISODES = 10
EXIT_CANCELLED = 130


class HeuristicCartPole:
    """The built-in CartPole policy: push the cart toward the side the pole is falling to.

    >>> HeuristicCartPole().predict([0.0, 0.0, 0.05, 0.1])
    1
    """

    def predict(self, observation: Any) -> int:
        _, velocity, angle, angular_velocity = (float(v) for v in observation)
        return int(angle + 0.3 * angular_velocity + 0.01 * velocity > 0)


def parse_seeds(text: str) -> list[int]:
    """Parse ``0,1,2`` or an inclusive range ``0..39``.

    >>> parse_seeds("3..5"), parse_seeds("7, 9")
    ([3, 4, 5], [7, 9])
    """
    text = text.strip()
    if ".." in text:
        low_text, _, high_text = text.partition("..")
        try:
            low, high = int(low_text), int(high_text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"bad seed range {text!r}; use e.g. 0..39") from None
        if high < low:
            raise argparse.ArgumentTypeError(f"seed range {text!r} is empty; use low..high")
        return list(range(low, high + 1))
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad seed list {text!r}; use e.g. 0,1,2") from None


def _is_address(target: str) -> bool:
    if target.startswith(("tcp://", "unix://", "http://")):
        return True
    host, sep, port = target.rpartition(":")
    return bool(sep and host and port.isdigit())


def add_run_parser(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "run",
        help="evaluate a model against an env",
        description=(
            "Evaluate a model against an env. With no --env, Gymnasium's CartPole-v1 is served "
            "in-process on loopback; with no --model, a built-in heuristic CartPole policy runs."
        ),
    )
    p.add_argument("--env", help="gymnasium:<id>, module:attr, or an env server address")
    p.add_argument("--model", help="module:attr, or a model server address")
    p.add_argument("--episodes", type=int, help=f"episodes to run (default {DEFAULT_EPISODES})")
    p.add_argument("--seeds", type=parse_seeds, help="seed list 0,1,2 or range 0..39")
    p.add_argument("--base-seed", type=int, help="derive reset seeds from this seed")
    p.add_argument("--max-episode-steps", type=int, help="truncate episodes after N steps")
    p.add_argument("--max-episode-seconds", type=float, help="truncate episodes after S seconds")
    p.add_argument("--execution-horizon", type=int, default=1, help="actions per predict")
    p.add_argument("--prefetch-lead", type=int, default=0, help="frames of prefetch overlap")
    p.add_argument("--token", help="auth token for the env (and model) server")
    p.add_argument("--json", type=Path, help="write the report as JSON to this path")
    p.add_argument("--no-progress", action="store_true", help="no live progress line")
    p.set_defaults(handler=run_command)


class _Progress(RuntimeHooks):
    """Counts what the run has done; the ticker renders it, never the hot path."""

    def __init__(self, episodes: int) -> None:
        self.target = episodes
        self.done = 0
        self.steps = 0
        self.reward_sum = 0.0
        self.started = time.perf_counter()

    async def step_completed(self, event: StepCompleted) -> None:
        self.steps = event.total_steps

    async def episode_completed(self, event: EpisodeCompleted) -> None:
        self.done += 1
        self.reward_sum += event.record.reward

    def line(self) -> str:
        elapsed = max(time.perf_counter() - self.started, 1e-9)
        mean = f"{self.reward_sum / self.done:8.2f}" if self.done else f"{'-':>8}"
        width = 24
        filled = int(width * self.done / self.target) if self.target else 0
        bar = "#" * filled + "-" * (width - filled)
        return (
            f"[{bar}] {self.done}/{self.target} episodes  {self.steps / elapsed:8.0f} steps/s  "
            f"mean reward {mean}"
        )


async def _ticker(progress: _Progress, stream: TextIO) -> None:
    while True:
        stream.write("\r" + progress.line())
        stream.flush()
        await trio.sleep(0.2)


def format_episodes(report: RuntimeReport) -> str:
    """The results table printed at the end of a run."""
    header = f"{'#':>4} {'seed':>8} {'steps':>7} {'reward':>10} {'term':>5} {'trunc':>5} {'ok':>5}"
    lines = [header, "-" * len(header)]
    for ep in report.episodes:
        seed = "-" if ep.seed is None else str(ep.seed)
        ok = "-" if ep.success is None else ("yes" if ep.success else "no")
        lines.append(
            f"{ep.index:>4} {seed:>8} {ep.steps:>7} {ep.reward:>10.2f} "
            f"{ep.terminated!s:>5} {ep.truncated!s:>5} {ok:>5}"
        )
    mean = report.mean_reward
    lines.append(
        f"{report.status}: {len(report.episodes)} episodes, {report.total_steps} steps, "
        f"mean reward {mean:.3f}" + (f" ({report.reason})" if report.reason else "")
    )
    return "\n".join(lines)


def _failed_report_dict(error: BaseException) -> dict[str, Any]:
    report = getattr(error, "report", None)
    data: dict[str, Any]
    if report is not None:
        data = report.to_json_dict()
    else:
        data = {
            "status": "failed",
            "reason": None,
            "total_steps": 0,
            "mean_reward": 0.0,
            "episodes": [],
            "telemetry": [],
        }
    data["status"] = "failed"
    data["reason"] = f"{type(error).__name__}: {error}"
    return data


def _write_json(path: Path | None, data: dict[str, Any]) -> None:
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    # Reports can carry NaN (an empty mean); keep the file strict JSON.
    text = json.dumps(data, indent=2, allow_nan=False, default=_json_default)
    path.write_text(text + "\n")


def _json_default(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


async def _evaluate(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from ._facade import RunLocalOptions, run_local, run_remote
    from .runtime import format_telemetry
    from .transports.grpc import serve_env

    seeds: list[int] = args.seeds or []
    episodes = args.episodes
    if seeds and episodes is not None and episodes != len(seeds):
        raise SpecError(
            f"--episodes {episodes} disagrees with the {len(seeds)} seeds given; "
            "drop --episodes or give one seed per episode"
        )
    if episodes is None:
        episodes = len(seeds) if seeds else DEFAULT_EPISODES
    if episodes < 1:
        raise SpecError(f"--episodes must be at least 1, got {episodes}")

    progress = _Progress(episodes)
    show_progress = not args.no_progress and out.isatty()
    cancelled_by: list[str] = []
    result: RuntimeReport | None = None
    failure: Error | None = None

    async with trio.open_nursery() as nursery:
        env_target = args.env or DEFAULT_ENV
        if _is_address(env_target):
            address = env_target
        else:
            env = load_env_target(env_target)
            address = await nursery.start(serve_env, env, "127.0.0.1:0")
        model_name = args.model or "built-in heuristic CartPole policy"
        err.write(
            f"trio-rlmesh: evaluating {model_name} on {env_target} ({address}), "
            f"{episodes} episodes\n"
        )
        err.flush()
        options = RunLocalOptions(
            address,
            token=args.token,
            base_seed=args.base_seed,
            episode_seeds=tuple(seeds),
            max_episodes=episodes,
            max_episode_steps=args.max_episode_steps,
            max_episode_seconds=args.max_episode_seconds,
            execution_horizon=args.execution_horizon,
            prefetch_lead=args.prefetch_lead,
            close_env=False,
        )

        async def watch_signals(driver: Any) -> None:
            with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for signum in signals:
                    cancelled_by.append(signal.Signals(signum).name)
                    driver.cancel(f"interrupted by {signal.Signals(signum).name}")
                    return

        async def drive(task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None:
            nonlocal result, failure
            try:
                if args.model and _is_address(args.model):
                    result = await run_remote(
                        args.model,
                        options,
                        model_token=args.token,
                        hooks=progress,
                        task_status=task_status,
                    )
                else:
                    model = load_model_target(args.model) if args.model else HeuristicCartPole()
                    result = await run_local(
                        model, options, hooks=progress, task_status=task_status
                    )
            except Error as exc:
                # Kept aside so the caller sees the error itself, not an ExceptionGroup.
                failure = exc
            finally:
                nursery.cancel_scope.cancel()

        try:
            driver = await nursery.start(drive)
        except RuntimeError:
            # drive() failed before the driver existed (connect, handshake, resolve).
            if failure is None:
                raise
        else:
            nursery.start_soon(watch_signals, driver)
            if show_progress:
                nursery.start_soon(_ticker, progress, out)

    if failure is not None:
        raise failure
    if show_progress:
        out.write("\r" + progress.line() + "\n")
    assert result is not None
    out.write(format_episodes(result) + "\n")
    if result.telemetry:
        out.write(format_telemetry(result.telemetry) + "\n")
    _write_json(args.json, result.to_json_dict())
    if result.status == "cancelled":
        return EXIT_CANCELLED
    return 0


def run_command(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Entry point of ``trio-rlmesh run``; returns the process exit code."""
    out = out or sys.stdout
    err = sys.stderr
    try:
        return trio.run(_evaluate, args, out, err)
    except SpecError as exc:
        err.write(f"trio-rlmesh run: {exc}\n")
        _write_json(args.json, _failed_report_dict(exc))
        return 2 if exc.report is None else 1
    except Error as exc:
        err.write(f"trio-rlmesh run failed: {type(exc).__name__}: {exc}\n")
        _write_json(args.json, _failed_report_dict(exc))
        return 1
