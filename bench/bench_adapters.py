"""Scenarios 8a and 8b: one resolved adapter's step, ours against ``rlmesh.adapters``.

Both sides resolve the same pairing with their own package (the same code, ``adapt`` being
``trio_rlmesh.adapters`` or ``rlmesh.adapters``), then time ``transform_obs(obs)`` followed by
``transform_action(out)``, the work an adapter adds to every step of an episode:

- **8a**, a robot arm with a camera: a 256×256×3 uint8 camera resized to 224×224 with
  ``bilinear_aa`` and stacked 2 deep, the end effector's position, its orientation converted
  from ``quat_xyzw`` to ``rot6d`` and the gripper concatenated into one state, the
  instruction; the action's rotation converted back from ``rot6d`` to ``axis_angle``, the
  gripper range mapped, the whole action clipped (issue 21 target: ≥ 0.5× RLMesh's calls/s);
- **8b**, the same pairing without the camera (state and text only; target ≥ 1.0×).

One "step" of the table is one ``transform_obs`` + ``transform_action`` pair; p50/p95 come
from a per-pair timer. Each round starts a new episode on both sides (``reset()``), so the
frame window fills the same way. Before timing, the two sides' answers are compared (the same
state and action to float32 rounding, images within one uint8 step), so the two time the same
work. ``python bench/bench_adapters.py [--quick]`` runs both scenarios alone.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
from bench_measure import Comparison, Sample, interleave, nearest_rank

CAMERA = (256, 256, 3)
TARGET_SIZE = 224


def resolve_pairing(adapt: ModuleType, gym: ModuleType, *, camera: bool) -> Any:
    """The scenario's adapter, resolved by package ``adapt``."""
    spaces = gym.spaces
    observation = {
        "ee_pos": spaces.Box(-2.0, 2.0, (3,), np.float32),
        "ee_quat": spaces.Box(-1.0, 1.0, (4,), np.float32),
        "grip": spaces.Box(0.0, 0.08, (1,), np.float32),
        "goal": spaces.Text(64),
    }
    tags = {
        "ee_pos": adapt.StateTag(adapt.EEF_POS),
        "ee_quat": adapt.StateTag(adapt.EEF_ROT, encoding="quat_xyzw"),
        "grip": adapt.StateTag(adapt.GRIPPER_POS),
        "goal": adapt.TextTag(adapt.INSTRUCTION),
    }
    inputs = {
        "state": adapt.Concat(
            adapt.EEF_POS, adapt.State(adapt.EEF_ROT, encoding="rot6d"), adapt.GRIPPER_POS
        ),
        "task": adapt.Text(adapt.INSTRUCTION),
    }
    if camera:
        observation["rgb"] = spaces.Box(0, 255, CAMERA, np.uint8)
        tags["rgb"] = adapt.ImageTag(adapt.IMAGE_PRIMARY)
        inputs["image"] = adapt.Image(
            adapt.IMAGE_PRIMARY, size=TARGET_SIZE, resample="bilinear_aa", stack=2
        )
    env_tags = adapt.EnvTags(
        tags,
        adapt.Action(
            adapt.Actuator(adapt.ACTION_DELTA_POS, 3),
            adapt.Actuator(adapt.ACTION_DELTA_ROT, 3, encoding="axis_angle"),
            adapt.Actuator(adapt.ACTION_GRIPPER, 1, range=(-1.0, 1.0)),
            clip=(-1.0, 1.0),
        ),
    )
    spec = adapt.ModelSpec(
        inputs,
        adapt.Action(
            adapt.Actuator(adapt.ACTION_DELTA_POS, 3),
            adapt.Actuator(adapt.ACTION_DELTA_ROT, 6, encoding="rot6d"),
            adapt.Actuator(adapt.ACTION_GRIPPER, 1, range=(0.0, 1.0)),
        ),
    )
    action_space = spaces.Box(-1.0, 1.0, (7,), np.float32)
    return adapt.resolve(env_tags, spaces.Dict(observation), action_space, spec)


def step_inputs(seed: int = 0) -> tuple[dict[str, Any], np.ndarray]:
    """One observation (a unit quaternion, a random camera frame) and one model output."""
    rng = np.random.default_rng(seed)
    quat = rng.normal(size=4).astype(np.float32)
    observation = {
        "rgb": rng.integers(0, 256, CAMERA, dtype=np.uint8),
        "ee_pos": np.array([0.1, -0.2, 0.3], np.float32),
        "ee_quat": (quat / np.linalg.norm(quat)).astype(np.float32),
        "grip": np.array([0.04], np.float32),
        "goal": "put the red block in the bowl",
    }
    return observation, rng.uniform(-1.0, 1.0, 10).astype(np.float32)


def check_same_answers(ours: Any, theirs: Any, camera: bool) -> None:
    """Both adapters give the same payload and action for the scenario's step.

    Raises:
        AssertionError: they disagree (the bench would time different work).
    """
    observation, output = step_inputs()
    mine, other = ours.transform_obs(observation), theirs.transform_obs(observation)
    assert sorted(mine) == sorted(other), (sorted(mine), sorted(other))
    np.testing.assert_allclose(mine["state"], other["state"], rtol=0, atol=1e-6)
    assert mine["task"] == other["task"]
    if camera:
        assert mine["image"].shape == other["image"].shape == (2, TARGET_SIZE, TARGET_SIZE, 3)
        gap = np.abs(mine["image"].astype(int) - np.asarray(other["image"]).astype(int)).max()
        assert gap <= 1, f"images differ by {gap} uint8 steps"
    np.testing.assert_allclose(
        ours.transform_action(output), theirs.transform_action(output), rtol=0, atol=1e-6
    )
    ours.reset()
    theirs.reset()


def _sample(adapter: Any, calls: int) -> Sample:
    observation, output = step_inputs()
    adapter.reset()
    timings: list[float] = []
    started = time.perf_counter()
    for _ in range(calls):
        begin = time.perf_counter_ns()
        adapter.transform_obs(observation)
        adapter.transform_action(output)
        timings.append((time.perf_counter_ns() - begin) / 1e6)
    wall = time.perf_counter() - started
    return Sample(
        steps=calls,
        wall_s=wall,
        p50_ms=statistics.median(timings),
        p95_ms=nearest_rank(timings, 0.95),
        latency_source="per-call timer",
    )


SCENARIOS = {
    "8a": ("8a-adapter-camera", True),
    "8b": ("8b-adapter-state", False),
}
"""Scenario id -> (table id, with the camera)."""


def ours_runner(which: str) -> Callable[[int], Sample]:
    """Our side of scenario ``which`` alone, resolved now: ``runner(calls)`` times that many
    step pairs (what the scenario's profile runs)."""
    import gymnasium

    import trio_rlmesh.adapters

    adapter = resolve_pairing(trio_rlmesh.adapters, gymnasium, camera=SCENARIOS[which][1])
    return lambda calls: _sample(adapter, calls)


def scenario_adapter(
    which: str,
    *,
    rounds: int,
    calls: int,
    log: Callable[[str], None],
    warmup: bool = True,
) -> Comparison:
    """Scenario ``8a`` or ``8b``: ``calls`` step pairs per round and side."""
    import gymnasium
    import rlmesh.adapters

    import trio_rlmesh.adapters

    table_id, camera = SCENARIOS[which]
    ours = resolve_pairing(trio_rlmesh.adapters, gymnasium, camera=camera)
    theirs = resolve_pairing(rlmesh.adapters, gymnasium, camera=camera)
    check_same_answers(ours, theirs, camera)
    what = "256x256x3 camera -> 224 bilinear_aa, stack 2, " if camera else ""
    result = interleave(
        table_id,
        f"adapter transform_obs + transform_action: {what}state concat with quat->rot6d, text",
        ("trio_rlmesh.adapters", lambda: _sample(ours, calls)),
        ("rlmesh.adapters", lambda: _sample(theirs, calls)),
        rounds,
        warmup=warmup,
        log=log,
    )
    result.notes.append(
        "steps = transform_obs + transform_action pairs of one resolved adapter (no env, no "
        "model); both sides checked to give the same payload and action first"
    )
    return result


def main(argv: list[str]) -> None:
    from bench_measure import format_table
    from bench_targets import format_targets

    quick = "--quick" in argv
    results = [
        scenario_adapter("8a", rounds=2 if quick else 5, calls=10 if quick else 150, log=print),
        scenario_adapter("8b", rounds=2 if quick else 5, calls=200 if quick else 3000, log=print),
    ]
    print(format_table(results))
    print(format_targets(results))


if __name__ == "__main__":
    main(sys.argv[1:])
