"""A catalogue of hand-written pairings, each built with either adapters package.

Every pairing is a function of the package (``rlmesh.adapters`` or ``trio_rlmesh.adapters``)
returning a :class:`Pairing`. ``golden_pairings.json`` holds what ``rlmesh.adapters`` 0.1.0
answers for each (its ``explain()``, advisories, error, and the payloads and env actions of a
few steps); ``test_pairings.py`` holds ours to it, and the interop suite re-derives the file
from the wheel (``tests/interop/test_adapters_interop.py``), so the goldens are the wheel's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs
import numpy as np
from gymnasium import spaces as S

GOLDEN = Path(__file__).parent / "golden_pairings.json"


@attrs.frozen
class Pairing:
    """Tags, spaces and a spec, plus what to feed an adapter resolved from them."""

    tags: Any
    observation_space: Any
    action_space: Any
    spec: Any
    observations: list[Any] = attrs.field(factory=list)
    outputs: list[Any] = attrs.field(factory=list)
    observe_at: tuple[int, ...] = ()
    """Steps whose observation is only observed (a replayed chunk frame): no payload."""
    reset_at: tuple[int, ...] = ()
    """Steps before which the episode restarts."""
    resolve: dict[str, Any] = attrs.field(factory=dict)


def box(n: int, low: Any = -np.inf, high: Any = np.inf) -> S.Box:
    return S.Box(low, high, (n,), np.float32)


def cam(h: int, w: int, c: int = 3) -> S.Box:
    return S.Box(0, 255, (h, w, c), np.uint8)


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def observations(space: S.Dict, steps: int, seed: int) -> list[dict[str, Any]]:
    rng = _rng(seed)
    out = []
    for _ in range(steps):
        obs: dict[str, Any] = {}
        for key, sub in space.spaces.items():
            if isinstance(sub, S.Text):
                obs[key] = "pick the red cube"
            elif sub.dtype == np.uint8:
                obs[key] = rng.integers(0, 256, sub.shape, dtype=np.uint8)
            else:
                obs[key] = rng.uniform(-1, 1, sub.shape).astype(np.float32)
        out.append(obs)
    return out


def outputs(width: int, steps: int, seed: int) -> list[np.ndarray[Any, Any]]:
    rng = _rng(seed + 1)
    return [rng.uniform(-1.5, 1.5, width).astype(np.float32) for _ in range(steps)]


def _arm_tags(A: ModuleType) -> Any:
    return A.EnvTags(
        {
            "cam": A.ImageTag(A.IMAGE_PRIMARY),
            "wrist": A.ImageTag(A.IMAGE_WRIST, part=A.LEFT_ARM),
            "pos": A.StateTag(A.EEF_POS, frame="world"),
            "quat": A.StateTag(A.EEF_ROT, "quat_xyzw"),
            "grip": A.StateTag(A.GRIPPER_POS, range=(0, 0.08)),
            "joints": A.StateTag(A.JOINT_POS, labels=("a", "b", "c"), provenance="sensed"),
            "task": A.TextTag(A.INSTRUCTION),
        },
        A.Action(
            A.Actuator(A.ACTION_DELTA_POS, 3, frame="tool", reference="current"),
            A.Actuator(A.ACTION_DELTA_ROT, 3, "axis_angle"),
            A.Actuator(A.ACTION_GRIPPER, 1, range=(-1, 1), binary=True),
            A.Actuator(None, 1, fill=0.5),
            clip=(-1, 1),
        ),
    )


ARM_SPACE = S.Dict(
    {
        "cam": cam(24, 32),
        "wrist": cam(16, 16),
        "pos": box(3),
        "quat": box(4),
        "grip": box(1, 0, 0.08),
        "joints": box(3, -2, 2),
        "task": S.Text(32),
    }
)
ARM_ACTION = box(8, -1, 1)


def _arm_output(A: ModuleType, **gripper: Any) -> Any:
    return A.Action(
        A.Actuator(A.ACTION_DELTA_POS, 3),
        A.Actuator(A.ACTION_DELTA_ROT, 6, "rot6d"),
        A.Actuator(A.ACTION_GRIPPER, 1, **({"range": (0, 1)} | gripper)),
    )


def arm(A: ModuleType, inputs: Any, steps: int = 3, seed: int = 0, **extra: Any) -> Pairing:
    output = extra.pop("output", None) or _arm_output(A)
    spec = A.ModelSpec(inputs, output)
    width = sum(a.dim for a in output.components)
    return Pairing(
        _arm_tags(A),
        ARM_SPACE,
        ARM_ACTION,
        spec,
        observations(ARM_SPACE, steps, seed),
        outputs(width, steps, seed),
        **extra,
    )


def custom(
    A: ModuleType,
    observation: Any,
    space: S.Dict,
    action: Any,
    action_space: S.Box,
    inputs: Any,
    output: Any,
    steps: int = 2,
) -> Pairing:
    """A pairing over an env of its own."""
    width = sum(a.dim for a in output.components)
    return Pairing(
        A.EnvTags(observation, action),
        space,
        action_space,
        A.ModelSpec(inputs, output),
        observations(space, steps, 3),
        outputs(width, steps, 3),
    )


def count_keys(observation: Any) -> Any:
    """A custom input: how many entries the raw observation has (a numpy scalar)."""
    return np.float32(len(observation))


def _twin_provenance(A: ModuleType, inputs: Any) -> Pairing:
    return custom(
        A,
        {
            "sensed": A.StateTag(A.JOINT_POS, provenance="sensed"),
            "plain": A.StateTag(A.JOINT_POS),
            "truth": A.StateTag(A.JOINT_POS, provenance="privileged"),
        },
        S.Dict({"sensed": box(2), "plain": box(2), "truth": box(2)}),
        A.Action(A.Actuator(A.ACTION_JOINT_POS, 2)),
        box(2),
        inputs,
        A.Action(A.Actuator(A.ACTION_JOINT_POS, 2)),
    )


def _labelled_joints(A: ModuleType, env_labels: tuple[str, ...]) -> Pairing:
    """A model emitting joints labelled ``a, b`` for an env labelling them ``env_labels``."""
    return custom(
        A,
        {"q": A.StateTag(A.JOINT_POS)},
        S.Dict({"q": box(2)}),
        A.Action(A.Actuator(A.ACTION_JOINT_POS, 2, labels=env_labels)),
        box(2),
        {"q": A.State(A.JOINT_POS)},
        A.Action(A.Actuator(A.ACTION_JOINT_POS, 2, labels=("a", "b"))),
    )


def _quat(obs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for o in obs:  # unit quaternions, as a real env sends
        if "quat" in o:
            o["quat"] = (o["quat"] / np.linalg.norm(o["quat"])).astype(np.float32)
    return obs


PAIRINGS: dict[str, Callable[[ModuleType], Pairing]] = {
    "openvla_like": lambda A: arm(
        A,
        {
            "image": A.Image(A.IMAGE_PRIMARY, size=16, fit="crop", resample="bilinear_aa"),
            "state": A.Concat(A.EEF_POS, A.State(A.EEF_ROT, encoding="rot6d"), A.GRIPPER_POS),
            "text": A.Text(A.INSTRUCTION),
        },
    ),
    "every_image_step": lambda A: arm(
        A,
        {
            "image": A.Image(
                A.IMAGE_PRIMARY,
                12,
                16,
                layout="chw",
                dtype="float32",
                normalize=(-1, 1),
                lead_dims=1,
                upside_down=True,
                resample="area",
                crop_area=0.81,
                channel_order="bgr",
                render=(24, 32),
            ),
        },
    ),
    "pad_letterbox": lambda A: arm(
        A, {"image": A.Image(A.IMAGE_PRIMARY, size=12, fit="pad", resample="lanczos3_aa")}
    ),
    "slice_crop": lambda A: arm(
        A, {"image": A.Image(A.IMAGE_PRIMARY, crop=0.5, crop_mode="slice", resample="bicubic_aa")}
    ),
    "stack_offsets_black": lambda A: arm(
        A,
        {
            "image": A.Image(
                A.IMAGE_PRIMARY,
                size=8,
                fit="stretch",
                stack=3,
                offsets=(-3, -1, 0),
                stack_pad="black",
                normalize=(-1, 1),
                dtype="float32",
            )
        },
        steps=5,
        observe_at=(2,),
    ),
    "stack_first_reset": lambda A: arm(
        A,
        {"wrist": A.Image(A.IMAGE_WRIST, part=A.LEFT_ARM, stack=2)},
        steps=4,
        reset_at=(2,),
    ),
    "wrist_without_part": lambda A: arm(A, {"wrist": A.Image(A.IMAGE_WRIST)}),
    "optional_camera": lambda A: arm(
        A,
        {
            "second": A.Image(
                A.IMAGE_SECONDARY,
                size=4,
                channels=3,
                optional=True,
                fill=7,
                normalize=True,
                dtype="float32",
                stack=2,
                stack_pad="black",
            ),
        },
        steps=2,
    ),
    "states_all_features": lambda A: arm(
        A,
        {
            "state": A.Concat(
                A.State(A.EEF_POS, frame="world", scale=2.0, offset=-0.5),
                A.State(A.EEF_ROT, encoding=("axis_angle", "rot6d")),
                A.State(A.GRIPPER_POS, range=(-1, 1)),
                A.State(A.JOINT_POS, labels=("c", "a", "b"), scale=(1, 2, 3), provenance="sensed"),
                A.Constant(dim=2, fill=1.5),
                A.State("x/missing", optional=True, dim=2, fill=0.25),
                A.Previous(A.ACTION_GRIPPER, fill=-1.0),
                pad_to=24,
                clip=(-5, 5),
                dtype="float64",
            ),
        },
        steps=4,
        observe_at=(2,),
    ),
    "post_rotate_gravity": lambda A: arm(
        A,
        {
            "tool": A.State(
                A.EEF_ROT,
                encoding="euler_xyz",
                post_rotate=A.Rotation.from_matrix([[1, 0, 0], [0, 0, -1], [0, 1, 0]]),
            ),
            "gravity": A.State(A.EEF_ROT, encoding="gravity_xyz"),
            "index": A.State(A.EEF_ROT, encoding="quat_wxyz", index=0, container="list"),
            "first_two": A.State(A.EEF_POS, dim=2, reshape=(2, 1)),
        },
    ),
    "action_corrections": lambda A: arm(
        A,
        {"state": A.State(A.EEF_POS)},
        output=A.Action(
            A.Actuator(A.ACTION_GRIPPER, 1, range=(0, 1), invert=True, threshold=0.5, binary=True),
            A.Actuator(A.ACTION_DELTA_POS, 3, scale=(1, 2, 3), offset=0.25),
            A.Actuator(A.ACTION_DELTA_ROT, 4, "quat_wxyz"),
            A.Actuator("x/unused", 2),
        ),
    ),
    "tuple_payload": lambda A: arm(
        A, (A.Text(A.INSTRUCTION, container="list"), {"s": A.State(A.EEF_POS, index=2)})
    ),
    "bare_leaf_payload": lambda A: arm(A, A.State(A.GRIPPER_POS, range=(-1, 1))),
    "text_fill": lambda A: arm(A, {"t": A.Text("text/goal", fill="do it")}),
    "error_missing_role": lambda A: arm(A, {"s": A.State(A.JOINT_VEL)}),
    "error_upscale": lambda A: arm(A, {"i": A.Image(A.IMAGE_PRIMARY, size=64)}),
    "error_aspect": lambda A: arm(A, {"i": A.Image(A.IMAGE_PRIMARY, size=16)}),
    "error_channels": lambda A: arm(A, {"i": A.Image(A.IMAGE_PRIMARY, channels=1)}),
    "error_labels": lambda A: arm(A, {"s": A.State(A.JOINT_POS, labels=("a", "z", "c"))}),
    "error_provenance": lambda A: arm(A, {"s": A.State(A.JOINT_POS, provenance="estimated")}),
    "error_frame": lambda A: arm(A, {"s": A.State(A.EEF_POS, frame="tool")}),
    "error_window": lambda A: arm(A, {"i": A.Image(A.IMAGE_PRIMARY, stack=2, offsets=(0, -1))}),
    "error_action_reference": lambda A: arm(
        A,
        {"s": A.State(A.EEF_POS)},
        output=A.Action(
            A.Actuator(A.ACTION_DELTA_POS, 3, reference="target"),
            A.Actuator(A.ACTION_DELTA_ROT, 3, "axis_angle"),
            A.Actuator(A.ACTION_GRIPPER, 1),
        ),
    ),
    "error_model_clip": lambda A: arm(
        A,
        {"s": A.State(A.EEF_POS)},
        output=A.Action(
            A.Actuator(A.ACTION_DELTA_POS, 3),
            A.Actuator(A.ACTION_DELTA_ROT, 3, "axis_angle"),
            A.Actuator(A.ACTION_GRIPPER, 1),
            clip=(-1, 1),
        ),
    ),
    "error_previous_unknown": lambda A: arm(A, {"s": A.Previous("action/joint_pos")}),
    "error_role_kind": lambda A: arm(A, {"s": A.State("audio/mic")}),
    "error_untrusted_entrypoint": lambda A: arm(A, {"c": A.Custom(entrypoint="json:dumps")}),
    "action_part_bound_implicitly": lambda A: custom(
        A,
        {"q": A.StateTag(A.JOINT_POS)},
        S.Dict({"q": box(2)}),
        A.Action(A.Actuator(A.ACTION_GRIPPER, 1), A.Actuator(None, 1, fill=-1.0)),
        box(2, -1, 1),
        {"q": A.State(A.JOINT_POS), "prev": A.Previous(A.ACTION_GRIPPER, fill=0.5)},
        A.Action(A.Actuator(A.ACTION_GRIPPER, 1, part=A.LEFT_ARM, offset=0.5)),
        steps=3,
    ),
    "one_fill_note_for_two_parts": lambda A: arm(
        A,
        {
            "s": A.Concat(
                A.State("proprio/extra", optional=True, dim=1),
                A.State("proprio/extra", optional=True, index=0, part=A.HEAD),
            )
        },
    ),
    "custom_input_and_encodings": lambda A: arm(
        A,
        {
            "count": A.Custom(transform=count_keys),
            "rot": A.State(
                A.EEF_ROT,
                encoding=A.CustomEncoding(
                    "quat_wxyz", from_base=np.negative, to_base=np.negative, name="neg"
                ),
            ),
        },
        output=A.Action(
            A.Actuator(A.ACTION_DELTA_POS, 3),
            A.Actuator(
                A.ACTION_DELTA_ROT,
                4,
                A.CustomEncoding("quat_xyzw", to_base=np.negative, name="neg"),
            ),
            A.Actuator(A.ACTION_GRIPPER, 1),
        ),
    ),
    "zoom_window_bytes": lambda A: arm(
        A, {"i": A.Image(A.IMAGE_PRIMARY, crop=0.5, stack=2, dtype="float32", normalize=True)}
    ),
    "error_labels_before_encoding": lambda A: arm(
        A, {"s": A.State(A.JOINT_POS, labels=("a", "b", "c"), encoding="rot6d")}
    ),
    "error_axis_across_rotation": lambda A: arm(
        A,
        {"s": A.State(A.EEF_POS)},
        output=A.Action(
            A.Actuator(A.ACTION_DELTA_POS, 3),
            A.Actuator(A.ACTION_DELTA_ROT, 4, "quat_xyzw", scale=(1, 1, 1, 2)),
            A.Actuator(A.ACTION_GRIPPER, 1),
        ),
    ),
    # Replayed steps before an episode's first payload count no step: that payload reads the
    # Previous fill (steps 1 and 5), and the actions converted before it are not recorded.
    "previous_counts_from_first_payload": lambda A: arm(
        A,
        {"s": A.Concat(A.EEF_POS, A.Previous(A.ACTION_GRIPPER, fill=-0.75))},
        steps=6,
        observe_at=(0, 3, 4),
        reset_at=(3,),
    ),
    "action_labels_permute": lambda A: _labelled_joints(A, ("b", "a")),
    "error_action_labels": lambda A: _labelled_joints(A, ("a", "c")),
    "error_provenances_listed": lambda A: _twin_provenance(A, {"q": A.State(A.JOINT_POS)}),
    "provenance_picks_a_leaf": lambda A: _twin_provenance(
        A, {"q": A.State(A.JOINT_POS, provenance=("estimated", "privileged"))}
    ),
}


def _quat_fixups(name: str, pairing: Pairing) -> Pairing:
    return attrs.evolve(pairing, observations=_quat(pairing.observations))


def build(A: ModuleType, name: str) -> Pairing:
    """The named pairing, built with package ``A`` (its quaternions normalized)."""
    return _quat_fixups(name, PAIRINGS[name](A))


# ------------------------------------------------------------------------------------------
# What an adapter answers, as JSON


def encode(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return {
            "dtype": value.dtype.name,
            "shape": list(value.shape),
            "data": value.astype(np.float64).ravel().tolist(),
        }
    if isinstance(value, dict):
        return {"map": {k: encode(v) for k, v in value.items()}}
    if isinstance(value, list):
        return {"list": [encode(v) for v in value]}
    return value


def run(A: ModuleType, name: str) -> dict[str, Any]:
    """Everything package ``A`` answers for the named pairing."""
    pairing = build(A, name)
    try:
        adapter = A.resolve(
            pairing.tags, pairing.observation_space, pairing.action_space, pairing.spec
        )
    except Exception as exc:  # the error is the answer
        return {"error": f"{type(exc).__name__}: {exc}"}
    result: dict[str, Any] = {
        "explain": adapter.explain(),
        "advisories": [[a.severity, a.message] for a in adapter.advisories()],
        "history_keys": list(adapter.history_keys()),
        "history_windows": [list(w) for w in adapter.history_windows()],
        "steps": [],
    }
    for step, (obs, out) in enumerate(zip(pairing.observations, pairing.outputs, strict=True)):
        if step in pairing.reset_at:
            adapter.reset()
        record: dict[str, Any] = {}
        try:
            if step in pairing.observe_at:
                # A replayed chunk frame: the step happens, its action is executed.
                adapter.observe(obs)
            else:
                record["payload"] = encode(adapter.transform_obs(obs))
            record["action"] = encode(adapter.transform_action(out))
        except Exception as exc:
            record["error"] = f"{type(exc).__name__}: {exc}"
        result["steps"].append(record)
    return result


def load_golden() -> dict[str, Any]:
    return json.loads(GOLDEN.read_text())  # type: ignore[no-any-return]
