"""Per-component micro-timings (no profiler): what one CartPole step costs in each part.

Each item times the exact kind of call the hot path makes, many times in a row, and
reports the median µs per call. These are lower bounds (warm caches, no contention);
the cProfile breakdown says how the parts add up in a real run.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import bench_envs
import bench_policies
import trio

from trio_rlmesh.protocol import env_v1, spaces_v1
from trio_rlmesh.protocol._fastwire import decode_env_join_response, encode_env_join
from trio_rlmesh.spaces import _codec
from trio_rlmesh.spaces._gym import from_gymnasium


def _median_us(fn: Callable[[], Any], reps: int, batches: int = 7) -> float:
    per_batch = max(1, reps // batches)
    results = []
    for _ in range(batches):
        started = time.perf_counter_ns()
        for _ in range(per_batch):
            fn()
        results.append((time.perf_counter_ns() - started) / per_batch / 1e3)
    return statistics.median(results)


def _trio_checkpoint_us(reps: int) -> float:
    async def main() -> float:
        started = time.perf_counter_ns()
        for _ in range(reps):
            await trio.lowlevel.checkpoint()
        return (time.perf_counter_ns() - started) / reps / 1e3

    return trio.run(main)


def measure(reps: int = 2000) -> dict[str, float]:
    """µs per call of each component (CartPole sizes)."""
    env = bench_envs.make_cartpole()
    obs_space = from_gymnasium(env.observation_space)
    act_space = from_gymnasium(env.action_space)
    obs, _ = env.reset(seed=0)
    action = bench_policies.cartpole_action(obs)
    obs_leaves = _codec.encode_lanes(obs_space, [obs])
    act_leaves = _codec.encode_lanes(act_space, [action])

    step_request = env_v1.JoinRequest(
        step=env_v1.StepRequest(
            action=spaces_v1.SpaceValue(leaves=act_leaves),
            episode_ids=["0190f1f2-0000-7000-8000-000000000000"],
        )
    )
    step_response_bytes = bytes(
        env_v1.JoinResponse(
            step=env_v1.StepResponse(
                observation=spaces_v1.SpaceValue(leaves=obs_leaves),
                rewards=[1.0],
                terminated_mask=b"\x00",
                truncated_mask=b"\x00",
            )
        )
    )

    def env_step() -> None:
        nonlocal obs
        obs, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            obs, _ = env.reset()

    timings = {
        "env: gymnasium CartPole step": _median_us(env_step, reps),
        "model: heuristic policy call": _median_us(
            lambda: bench_policies.cartpole_action(obs), reps
        ),
        "codec: encode observation (1 lane)": _median_us(
            lambda: _codec.encode_lanes(obs_space, [obs]), reps
        ),
        "codec: decode observation (1 lane)": _median_us(
            lambda: _codec.decode_lanes(obs_space, obs_leaves, 1), reps
        ),
        "codec: encode action (1 lane)": _median_us(
            lambda: _codec.encode_lanes(act_space, [action]), reps
        ),
        "codec: decode action (1 lane)": _median_us(
            lambda: _codec.decode_lanes(act_space, act_leaves, 1), reps
        ),
        "betterproto2: build + serialize Join(step) request": _median_us(
            lambda: bytes(
                env_v1.JoinRequest(
                    step=env_v1.StepRequest(
                        action=spaces_v1.SpaceValue(leaves=act_leaves),
                        episode_ids=list(step_request.step.episode_ids),  # type: ignore[union-attr]
                    )
                )
            ),
            reps,
        ),
        "betterproto2: parse Join(step) response": _median_us(
            lambda: env_v1.JoinResponse.FromString(step_response_bytes), reps
        ),
        # The generated fast codec the transports use for the same two messages.
        "fast codec: serialize Join(step) request": _median_us(
            lambda: encode_env_join(step_request), reps
        ),
        "fast codec: parse Join(step) response": _median_us(
            lambda: decode_env_join_response(step_response_bytes), reps
        ),
        "trio: one checkpoint (schedule round)": _trio_checkpoint_us(reps),
    }
    env.close()
    return timings


def format_components(timings: dict[str, float]) -> str:
    width = max(len(k) for k in timings)
    lines = ["== component micro-timings (median µs per call, no profiler) =="]
    lines += [f"{name:<{width}} {value:>9.1f}" for name, value in timings.items()]
    return "\n".join(lines)
