"""Scenarios 8a and 8b: one resolved adapter's step, ours against ``rlmesh.adapters``; 8c: a
whole adapted run, ours against ``rlmesh.run``.

Both sides resolve the same pairing with their own package (the same code, ``adapt`` being
``trio_rlmesh.adapters`` or ``rlmesh.adapters``), then time ``transform_obs(obs)`` followed by
``transform_action(out)``, the work an adapter adds to every step of an episode:

- **8a**, a robot arm with a camera: a 256×256×3 uint8 camera resized to 224×224 with
  ``bilinear_aa`` and stacked 2 deep, the end effector's position, its orientation converted
  from ``quat_xyzw`` to ``rot6d`` and the gripper concatenated into one state, the
  instruction; the action's rotation converted back from ``rot6d`` to ``axis_angle``, the
  gripper range mapped, the whole action clipped (issue 21 target: ≥ 0.5× RLMesh's calls/s);
- **8b**, the same pairing without the camera (state and text only; target ≥ 1.0×);
- **8c**, a whole in-process run: ``trio_rlmesh.run(model, env)`` of a spec'd model (a 64×64
  camera stacked 2 deep, the state concatenated with the rotation as ``rot6d``, the
  instruction) against ``examples/adapted_arm.py``'s tagged arm env, against
  ``rlmesh.run(Model(fn, spec=...), env)`` of the same predict function and spec (issue 22
  target: ≥ 2× its steps/s). The two runs are checked to give the same rewards first.

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
        scenario_adapted_run(rounds=2 if quick else 5, episodes=2 if quick else 10, log=print),
    ]
    print(format_table(results))
    print(format_targets(results))


if __name__ == "__main__":
    main(sys.argv[1:])


# ----------------------------------------------------------------------------- 8c: a whole run

RUN_CAMERA = 64
RUN_STEPS = 50
"""Steps of an episode of scenario 8c's arm env."""


def _arm() -> ModuleType:
    """``examples/adapted_arm.py``: the tagged arm env (a 64x64 camera here)."""
    import importlib
    from pathlib import Path

    examples = str(Path(__file__).resolve().parents[1] / "examples")
    if examples not in sys.path:
        sys.path.insert(0, examples)
    return importlib.import_module("adapted_arm")


def run_spec(adapt: ModuleType) -> Any:
    """Scenario 8c's model spec, in package ``adapt``: the 64x64 camera stacked 2 deep (no
    resize), the state concatenated with the rotation as ``rot6d``, the instruction."""
    return adapt.ModelSpec(
        {
            "image": adapt.Image(adapt.IMAGE_PRIMARY, size=RUN_CAMERA, stack=2),
            "state": adapt.Concat(
                adapt.EEF_POS, adapt.State(adapt.EEF_ROT, encoding="rot6d"), adapt.GRIPPER_POS
            ),
            "task": adapt.Text(adapt.INSTRUCTION),
        },
        adapt.Action(
            adapt.Actuator(adapt.ACTION_DELTA_POS, 3),
            adapt.Actuator(adapt.ACTION_DELTA_ROT, 6, encoding="rot6d"),
            adapt.Actuator(adapt.ACTION_GRIPPER, 1, range=(0.0, 1.0)),
        ),
    )


def run_predict(payload: Any) -> Any:
    """A cheap policy on the payload (the adapter and the runtime are what is timed)."""
    state, pixel = payload["state"], float(payload["image"][1, 0, 0, 0])
    return np.concatenate([-0.5 * state[:3], state[3:9], [pixel / 255]])


def _run_ours(episodes: int) -> Sample:
    from bench_scenarios import _our_sample

    import trio_rlmesh
    import trio_rlmesh.adapters
    from trio_rlmesh.model import Model

    arm = _arm()

    class Policy(Model):
        spec = run_spec(trio_rlmesh.adapters)

        def predict(self, payload: Any) -> Any:
            return run_predict(payload)

    env = arm.make_env(steps=RUN_STEPS, camera=RUN_CAMERA)
    started = time.perf_counter()
    report = trio_rlmesh.run(Policy(), env, episode_seeds=tuple(range(episodes)))
    return _our_sample(report, time.perf_counter() - started)


def _run_theirs(episodes: int) -> Sample:
    import warnings

    import rlmesh
    import rlmesh.adapters
    from bench_scenarios import their_sample
    from rlmesh.numpy import Model

    arm = _arm()
    tags = rlmesh.adapters.EnvTags.from_dict(arm.TAGS.to_dict())
    env = rlmesh.adapters.tag(arm.ArmEnv(steps=RUN_STEPS, camera=RUN_CAMERA), tags)
    model = Model(run_predict, spec=run_spec(rlmesh.adapters))
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the edition is not pinned
        result = rlmesh.run(model, env, seeds=list(range(episodes)))
    return their_sample(result, time.perf_counter() - started)


def scenario_adapted_run(
    *, rounds: int, episodes: int, log: Callable[[str], None], warmup: bool = True
) -> Comparison:
    """Scenario 8c: a spec'd model run in process against a tagged env, end to end."""
    first_ours, first_theirs = _run_ours(1), _run_theirs(1)
    if first_ours.mean_reward != first_theirs.mean_reward:
        raise AssertionError(
            f"8c: the two runs differ (reward {first_ours.mean_reward} vs "
            f"{first_theirs.mean_reward}); they would time different work"
        )
    result = interleave(
        "8c-adapted-run",
        f"adapted in-process run: {RUN_CAMERA}x{RUN_CAMERA} camera stack 2, state concat with "
        "quat->rot6d, text; trio_rlmesh.run vs rlmesh.run(Model(fn, spec=...), env)",
        ("trio_rlmesh.run", lambda: _run_ours(episodes)),
        ("rlmesh.run", lambda: _run_theirs(episodes)),
        rounds,
        warmup=warmup,
        log=log,
    )
    result.notes.append(
        f"steps = env steps of {episodes} episodes of {RUN_STEPS} steps (examples/adapted_arm.py's "
        "env, tagged); both runs checked to give the same rewards first"
    )
    return result
