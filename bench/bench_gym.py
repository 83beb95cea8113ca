"""Scenarios 5s, 5a and 5v: Gymnasium-level remote env step loops, ours against rlmesh's.

Both sides step the same ``rlmesh.EnvServer`` subprocess, one after the other, with the same
policy and seeds, in a plain ``obs -> policy -> step`` loop (a training loop's shape):

* 5s: ``trio_rlmesh.gym.RemoteEnv`` (sync, on its private trio thread) vs ``rlmesh.RemoteEnv``;
* 5a: ``open_remote_env`` (awaited in a trio program) vs ``rlmesh.RemoteEnv``;
* 5v: ``trio_rlmesh.gym.RemoteVectorEnv`` vs ``rlmesh.RemoteVectorEnv`` on the 16-lane
  NEXT_STEP vector env (steps counted per lane: env-steps).

``rlmesh.RemoteEnv`` hands out its native tensors; the loop turns them into numpy with
``np.asarray`` (a zero-copy view) before the policy reads them, as ``rlmesh.numpy`` does.
A step's latency is timed around the ``step`` call with ``perf_counter_ns`` on both sides.
steps/s is the steps over the step loop's wall time: from the return of the first reset
(which opens the session) to the last step, resets between episodes included. Connecting
and closing are one-off costs, reported in a note as the whole-run ratio (connect to
close): our client waits for the server's answer to Close, and an env server freed by
RLMesh's client a moment earlier may refuse our first reset as busy for a few tens of
milliseconds (the env client retries), which RLMesh's side never meets in these rounds.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import bench_envs
import bench_policies
import numpy as np
import trio
from bench_measure import Comparison, Sample, interleave, nearest_rank
from bench_targets import TARGETS

STEP_TIMER = "per-step timer"


class _Timer:
    """The times of one run: the whole run (connect to close) and its step loop.

    The loop starts when the first reset has returned (that reset also opens the session)
    and ends after the last step; it includes the resets between episodes.
    """

    def __init__(self) -> None:
        self.durations: list[int] = []
        self.started = time.perf_counter()
        self.loop_started = self.loop_ended = self.ended = 0.0
        self.cpu = 0.0

    def loop(self) -> None:
        self.loop_started = time.perf_counter()
        self.cpu = time.process_time()  # every thread's: ours and rlmesh's clients use some

    def loop_done(self) -> None:
        self.loop_ended = time.perf_counter()
        self.cpu = time.process_time() - self.cpu

    def sample(self, episodes: int, rewards: float, lanes: int = 1) -> Sample:
        self.ended = time.perf_counter()
        ms = [d / 1e6 for d in self.durations]
        steps = len(self.durations)
        return Sample(
            steps=steps * lanes,
            wall_s=self.loop_ended - self.loop_started,
            p50_ms=nearest_rank(ms, 0.5),
            p95_ms=nearest_rank(ms, 0.95),
            latency_source=STEP_TIMER,
            episodes=episodes,
            mean_reward=rewards / max(episodes, 1),
            extra={
                "whole_run_s": self.ended - self.started,
                "client_cpu_us_per_step": self.cpu * 1e6 / max(steps, 1),
            },
        )


def _rlmesh() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # rlmesh warns about unpinned workflow editions
        import rlmesh
    return rlmesh


def _tcp(address: str) -> str:
    return address if "://" in address else f"tcp://{address}"


# ----------------------------------------------------------------------------- single lane


def _single_loop(env: Any, timer: _Timer, episodes: int, seeds: Sequence[int], view: Any) -> float:
    """The synchronous CartPole loop both sides run; returns the summed reward."""
    policy = bench_policies.cartpole_action
    clock = time.perf_counter_ns
    durations = timer.durations
    step = env.step
    total = 0.0
    for index in range(episodes):
        obs, _ = env.reset(seed=seeds[index])
        if index == 0:
            timer.loop()
        while True:
            t0 = clock()
            obs, reward, terminated, truncated, _ = step(policy(view(obs)))
            durations.append(clock() - t0)
            total += reward
            if terminated or truncated:
                break
    timer.loop_done()
    return total


def _same(value: Any) -> Any:
    return value


def run_ours_sync(address: str, *, episodes: int, seeds: Sequence[int]) -> Sample:
    """``trio_rlmesh.gym.RemoteEnv`` from plain synchronous code."""
    from trio_rlmesh.gym import RemoteEnv

    timer = _Timer()
    with RemoteEnv(address, workflow_edition="2026.06") as env:
        total = _single_loop(env, timer, episodes, seeds, _same)
    return timer.sample(episodes, total)


def run_theirs_single(address: str, *, episodes: int, seeds: Sequence[int]) -> Sample:
    """``rlmesh.RemoteEnv`` (RLMesh's native client) from plain synchronous code."""
    rlmesh = _rlmesh()
    timer = _Timer()
    with rlmesh.RemoteEnv(_tcp(address), workflow_edition="2026.06") as env:
        total = _single_loop(env, timer, episodes, seeds, np.asarray)
    return timer.sample(episodes, total)


def run_ours_async(address: str, *, episodes: int, seeds: Sequence[int]) -> Sample:
    """``open_remote_env`` awaited in a trio program."""
    from trio_rlmesh.gym import open_remote_env

    policy = bench_policies.cartpole_action
    clock = time.perf_counter_ns

    async def main() -> Sample:
        timer = _Timer()
        durations = timer.durations
        total = 0.0
        async with open_remote_env(address, workflow_edition="2026.06") as env:
            step = env.step
            for index in range(episodes):
                obs, _ = await env.reset(seed=seeds[index])
                if index == 0:
                    timer.loop()
                while True:
                    t0 = clock()
                    obs, reward, terminated, truncated, _ = await step(policy(obs))
                    durations.append(clock() - t0)
                    total += reward
                    if terminated or truncated:
                        break
            timer.loop_done()
        return timer.sample(episodes, total)

    return trio.run(main)


# ----------------------------------------------------------------------------- vector


def _vector_loop(envs: Any, timer: _Timer, steps: int, seed: int, view: Any) -> tuple[int, float]:
    """The synchronous 16-lane loop both sides run; returns (episodes ended, summed reward)."""
    policy = bench_policies.cartpole_actions
    clock = time.perf_counter_ns
    durations = timer.durations
    step = envs.step
    total = 0.0
    ended = 0
    obs, _ = envs.reset(seed=seed)
    timer.loop()
    for _ in range(steps):
        t0 = clock()
        obs, rewards, terminated, truncated, _ = step(policy(view(obs)))
        durations.append(clock() - t0)
        total += float(view(rewards).sum())
        ended += int((view(terminated) | view(truncated)).sum())
    timer.loop_done()
    return ended, total


def run_ours_vector(address: str, *, steps: int, seed: int) -> Sample:
    """``trio_rlmesh.gym.RemoteVectorEnv`` (16 lanes), ``steps`` vector steps."""
    from trio_rlmesh.gym import RemoteVectorEnv

    timer = _Timer()
    with RemoteVectorEnv(address, workflow_edition="2026.06") as envs:
        ended, total = _vector_loop(envs, timer, steps, seed, _same)
        lanes = envs.num_envs
    return timer.sample(ended, total, lanes)


def run_theirs_vector(address: str, *, steps: int, seed: int) -> Sample:
    """``rlmesh.RemoteVectorEnv`` (RLMesh's native client), ``steps`` vector steps."""
    rlmesh = _rlmesh()
    timer = _Timer()
    with rlmesh.RemoteVectorEnv(_tcp(address), workflow_edition="2026.06") as envs:
        ended, total = _vector_loop(envs, timer, steps, seed, np.asarray)
        lanes = envs.num_envs
    return timer.sample(ended, total, lanes)


# ----------------------------------------------------------------------------- scenarios


def scenario_gym_single(
    which: str,
    address: str,
    *,
    rounds: int,
    episodes: int,
    log: Callable[[str], None] = print,
    warmup: bool = True,
) -> Comparison:
    """5s (``which="sync"``) or 5a (``"async"``): CartPole step loops vs rlmesh.RemoteEnv."""
    seeds = list(range(episodes))
    ours = run_ours_sync if which == "sync" else run_ours_async
    label = "gym.RemoteEnv (sync)" if which == "sync" else "open_remote_env (async)"
    scenario = "5s" if which == "sync" else "5a"
    result = interleave(
        scenario,
        f"CartPole step loop, {label} vs rlmesh.RemoteEnv, same rlmesh.EnvServer",
        (f"ours: {label}", lambda: ours(address, episodes=episodes, seeds=seeds)),
        (
            "rlmesh.RemoteEnv",
            lambda: run_theirs_single(address, episodes=episodes, seeds=seeds),
        ),
        rounds,
        warmup=warmup,
        log=log,
    )
    result.notes.append(cpu_note(result))
    result.notes.append(whole_run_note(result))
    result.notes.append(target_note(result))
    return result


def scenario_gym_vector(
    address: str,
    *,
    rounds: int,
    steps: int,
    log: Callable[[str], None] = print,
    warmup: bool = True,
) -> Comparison:
    """5v: 16-lane vector step loops, RemoteVectorEnv vs rlmesh.RemoteVectorEnv."""
    result = interleave(
        "5v",
        f"{bench_envs.VECTOR_LANES}-lane vector CartPole (NEXT_STEP) step loop, "
        "same rlmesh.EnvServer",
        (
            "ours: gym.RemoteVectorEnv",
            lambda: run_ours_vector(address, steps=steps, seed=0),
        ),
        (
            "rlmesh.RemoteVectorEnv",
            lambda: run_theirs_vector(address, steps=steps, seed=0),
        ),
        rounds,
        warmup=warmup,
        log=log,
    )
    result.notes.append("steps = env-steps (vector steps x 16 lanes); p50/p95 are per vector step")
    result.notes.append(cpu_note(result))
    result.notes.append(whole_run_note(result))
    result.notes.append(target_note(result))
    return result


def cpu_note(result: Comparison) -> str:
    """Each side's client CPU time per (vector) step: what contention for the CPUs costs."""
    parts = []
    for side in (result.ours, result.theirs):
        values = sorted(s.extra["client_cpu_us_per_step"] for s in side.samples)
        parts.append(f"{side.label} {values[len(values) // 2]:.0f}")
    return "client CPU per step (process_time, us): " + "; ".join(parts)


def whole_run_note(result: Comparison) -> str:
    """The ratio again with connect, the first reset and close included (whole runs)."""
    ratios = sorted(
        (a.steps / a.extra["whole_run_s"]) / (b.steps / b.extra["whole_run_s"])
        for a, b in zip(result.ours.samples, result.theirs.samples, strict=True)
    )
    return f"whole runs (connect to close): ours/theirs {ratios[len(ratios) // 2]:.2f}x"


def target_note(result: Comparison) -> str:
    """``ours/theirs 2.31x, target >= 1.5x: met`` for one of the scenarios in TARGETS."""
    target = TARGETS[result.scenario][1]
    verdict = "met" if result.ratio >= target else "MISSED"
    return f"ours/theirs {result.ratio:.2f}x, issue 12 target >= {target:g}x: {verdict}"
