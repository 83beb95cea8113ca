"""Hypothesis recipes for adapter pairings, built twice: once with ``rlmesh.adapters``, once
with ``trio_rlmesh.adapters``.

A recipe is plain data (dicts, tuples, numbers) drawn by Hypothesis; :func:`build` turns it
into env tags, spaces, a model spec, observations and model outputs with either package, so
the differential test feeds both exactly the same pairing. The strategies lean towards
pairings that resolve (model roles mostly taken from the env's), while still reaching every
refusal: widths, encodings, parts, provenances, labels, fits, upscales, windows, ranges.
"""

from __future__ import annotations

import io
from types import ModuleType
from typing import Any

import numpy as np
from gymnasium import spaces
from hypothesis import strategies as st

ROTATIONS = ("quat_xyzw", "quat_wxyz", "axis_angle", "euler_xyz", "rot6d", "rot6d_rowmajor")
WIDTH = {"quat_xyzw": 4, "quat_wxyz": 4, "axis_angle": 3, "euler_xyz": 3, "rot6d": 6}
WIDTH.update({"rot6d_rowmajor": 6, "gravity_xyz": 3})
IMAGE_ROLES = ("image/primary", "image/wrist", "image/secondary", "image/extra", "x/cam")
STATE_ROLES = (
    "proprio/eef_pos",
    "proprio/eef_rot",
    "proprio/gripper",
    "proprio/joint_pos",
    "proprio/extra",
    "x/s",
)
TEXT_ROLES = ("text/instruction", "text/extra")
ACTION_ROLES = (
    "action/delta_eef_pos",
    "action/delta_eef_rot",
    "action/gripper",
    "action/joint_pos",
    "action/extra",
    "x/a",
)
PARTS = (None, None, None, "left_arm", "head")
PROVENANCES = (None, None, "sensed", "estimated", "privileged")
FRAMES = (None, None, None, "world", "tool")
LABELS = "abcdefgh"

maybe = st.booleans()


def _opt(strategy: st.SearchStrategy[Any], p_none: int = 2) -> st.SearchStrategy[Any]:
    return st.one_of(*([st.none()] * p_none), strategy)


small_float = st.sampled_from([-2.0, -1.0, -0.5, 0.0, 0.25, 0.5, 1.0, 2.0, 3.0])
pair = st.tuples(small_float, small_float).map(lambda p: (min(p), max(p)))


@st.composite
def state_leaf(draw: Any) -> dict[str, Any]:
    role = draw(st.sampled_from(STATE_ROLES))
    encoding: Any = None
    if role == "proprio/eef_rot" or draw(st.integers(0, 9)) == 0:
        encoding = draw(st.sampled_from(ROTATIONS))
        if draw(st.integers(0, 4)) == 0:
            encoding = (encoding, draw(st.sampled_from(ROTATIONS)))
    native = encoding if isinstance(encoding, str) else encoding[0] if encoding else None
    if native is not None:
        width = WIDTH[native]
    elif role == "proprio/eef_pos":
        width = 3
    else:
        width = draw(st.integers(1, 5))
    if draw(st.integers(0, 15)) == 0:
        width += 1  # a width that disagrees with the encoding or the role
    labels = None
    if draw(st.integers(0, 3)) == 0:
        labels = tuple(draw(st.permutations(LABELS[:width])))
    return {
        "kind": "state",
        "role": role,
        "encoding": encoding,
        "width": width,
        "bounds": draw(st.sampled_from(["inf", "unit", "sym", "elementwise"])),
        "range": draw(_opt(pair, 4)),
        "part": draw(st.sampled_from(PARTS)),
        "provenance": draw(st.sampled_from(PROVENANCES)),
        "frame": draw(st.sampled_from(FRAMES)),
        "labels": labels,
    }


@st.composite
def env_leaf(draw: Any) -> dict[str, Any]:
    kind = draw(st.sampled_from(["image", "image", "state", "state", "state", "split", "text"]))
    if kind == "image":
        return {
            "kind": "image",
            "role": draw(st.sampled_from(IMAGE_ROLES)),
            "part": draw(st.sampled_from(PARTS)),
            "layout": draw(st.sampled_from(["hwc", "hwc", "chw"])),
            "upside_down": draw(maybe),
            "shape": (
                draw(st.sampled_from([4, 6, 8, 12])),
                draw(st.sampled_from([4, 6, 8, 12])),
                draw(st.sampled_from([3, 3, 1, 4])),
            ),
            "float": draw(st.integers(0, 5)) == 0,
        }
    if kind == "state":
        return draw(state_leaf())
    if kind == "split":
        fields = draw(st.lists(state_leaf(), min_size=1, max_size=3))
        skip = draw(_opt(st.integers(1, 3), 1))
        return {"kind": "split", "fields": fields, "skip": skip}
    return {"kind": "text", "role": draw(st.sampled_from(TEXT_ROLES))}


@st.composite
def actuator(draw: Any, env: bool) -> dict[str, Any]:
    if env and draw(st.integers(0, 8)) == 0:
        return {"role": None, "dim": draw(st.integers(1, 2)), "fill": draw(small_float)}
    role = draw(st.sampled_from(ACTION_ROLES))
    encoding = None
    if role == "action/delta_eef_rot":
        encoding = draw(st.sampled_from(ROTATIONS))
    dim = (
        WIDTH[encoding]
        if encoding
        else 3
        if role == "action/delta_eef_pos"
        else draw(st.integers(1, 3))
    )
    if draw(st.integers(0, 20)) == 0:
        dim += 1
    binary = draw(st.integers(0, 3)) == 0
    optional = env and draw(st.integers(0, 6)) == 0
    labels = tuple(draw(st.permutations(LABELS[:dim]))) if draw(st.integers(0, 5)) == 0 else None
    rng = draw(_opt(pair, 2))
    return {
        "role": role,
        "dim": dim,
        "encoding": encoding,
        "range": rng,
        "binary": binary,
        "scale": draw(
            _opt(st.one_of(small_float, st.lists(small_float, min_size=dim, max_size=dim)), 5)
        ),
        "offset": draw(_opt(small_float, 5)),
        "invert": draw(st.integers(0, 4)) == 0,
        "threshold": draw(_opt(small_float, 6)) if binary else None,
        "clip": env and rng is not None and draw(st.integers(0, 3)) == 0,
        "optional": optional,
        "fill": draw(small_float) if optional else 0.0,
        "frame": draw(st.sampled_from(FRAMES)),
        "reference": draw(st.sampled_from((None, None, None, "current", "target"))),
        "part": draw(st.sampled_from((None, None, None, "left_arm"))),
        "labels": labels,
    }


@st.composite
def model_image(draw: Any, env_roles: list[str]) -> dict[str, Any]:
    role = (
        draw(st.sampled_from(env_roles + list(IMAGE_ROLES)))
        if env_roles
        else draw(st.sampled_from(IMAGE_ROLES))
    )
    stack = draw(st.sampled_from([1, 1, 1, 2, 3]))
    offsets = None
    if stack > 1 and draw(st.integers(0, 2)) == 0:
        offsets = (
            *tuple(
                sorted(draw(st.sets(st.integers(-6, -1), min_size=stack - 1, max_size=stack - 1)))
            ),
            0,
        )
    optional = draw(st.integers(0, 5)) == 0
    return {
        "role": role,
        "height": draw(_opt(st.sampled_from([2, 3, 4, 6, 8, 16]), 2)),
        "width": draw(_opt(st.sampled_from([2, 3, 4, 6, 8, 16]), 2)),
        "layout": draw(st.sampled_from(["hwc", "hwc", "chw"])),
        "channels": draw(_opt(st.sampled_from([1, 3]), 3)),
        "dtype": draw(st.sampled_from(["uint8", "uint8", "float32", "float16", "int32"])),
        "normalize": draw(st.sampled_from([False, False, True, (-1.0, 1.0), (0.0, 255.0)])),
        "lead_dims": draw(st.sampled_from([0, 0, 1, 2])),
        "upside_down": draw(maybe),
        "resample": draw(
            st.sampled_from(["bilinear", "bilinear_aa", "bicubic_aa", "lanczos3_aa", "area"])
        ),
        "allow_upscale": draw(st.integers(0, 3)) == 0,
        "fit": draw(st.sampled_from([None, None, "stretch", "crop", "pad", ("crop", "pad")])),
        "optional": optional,
        "fill": draw(_opt(st.integers(0, 255), 1)) if optional else None,
        "stack": stack,
        "offsets": offsets,
        "stack_pad": draw(st.sampled_from(["first", "first", "black"])) if stack > 1 else "first",
        "crop": draw(_opt(st.sampled_from([0.5, 0.75, 0.9]), 5)),
        "crop_mode": draw(st.sampled_from(["zoom", "slice"])),
        "channel_order": draw(st.sampled_from(["rgb", "rgb", "rgb", "bgr"])),
        "part": draw(st.sampled_from(PARTS)),
    }


@st.composite
def model_part(draw: Any, env_roles: list[str], action_roles: list[str]) -> Any:
    pick = draw(st.integers(0, 11))
    if pick == 0:
        return {"constant": True, "dim": draw(st.integers(1, 3)), "fill": draw(small_float)}
    if pick == 1 and action_roles:
        return {
            "previous": True,
            "role": draw(st.sampled_from(action_roles)),
            "fill": draw(small_float),
        }
    role = (
        draw(st.sampled_from(env_roles + list(STATE_ROLES)))
        if env_roles
        else draw(st.sampled_from(STATE_ROLES))
    )
    if pick == 2:
        return role
    encoding: Any = None
    if role == "proprio/eef_rot" or draw(st.integers(0, 12)) == 0:
        encoding = draw(st.sampled_from((*ROTATIONS, "gravity_xyz")))
        if draw(st.integers(0, 4)) == 0:
            encoding = (encoding, draw(st.sampled_from(ROTATIONS)))
    optional = draw(st.integers(0, 5)) == 0
    sel = draw(st.sampled_from(["none", "none", "none", "dim", "index", "labels"]))
    if encoding == "quat_xyzw" and not optional and sel == "none" and draw(st.integers(0, 2)) == 0:
        encoding = "custom"  # a CustomEncoding on base quat_xyzw (negation both ways)
    return {
        "role": role,
        "encoding": encoding,
        "dim": draw(st.integers(1, 4)) if sel == "dim" else None,
        "index": draw(st.integers(0, 3)) if sel == "index" else None,
        "labels": tuple(draw(st.permutations(LABELS[: draw(st.integers(1, 4))])))
        if sel == "labels"
        else None,
        "optional": optional,
        "fill": draw(small_float) if optional else 0.0,
        "range": draw(_opt(pair, 4)),
        "scale": draw(_opt(small_float, 5)),
        "offset": draw(_opt(small_float, 5)),
        "part": draw(st.sampled_from(PARTS)),
        "provenance": draw(st.sampled_from(PROVENANCES)),
        "frame": draw(st.sampled_from(FRAMES)),
    }


@st.composite
def recipe(draw: Any) -> dict[str, Any]:
    leaves = draw(st.dictionaries(st.sampled_from("abcdef"), env_leaf(), min_size=1, max_size=4))
    env_actuators = draw(st.lists(actuator(True), min_size=1, max_size=3))
    image_roles = [leaf["role"] for leaf in leaves.values() if leaf["kind"] == "image"]
    state_roles = [leaf["role"] for leaf in leaves.values() if leaf["kind"] == "state"]
    state_roles += [
        f["role"] for leaf in leaves.values() if leaf["kind"] == "split" for f in leaf["fields"]
    ]
    text_roles = [leaf["role"] for leaf in leaves.values() if leaf["kind"] == "text"]
    # The model outputs mostly the env's actuators, sometimes one more, sometimes one less.
    model_actuators = [
        {**a, "clip": False, "optional": False, "fill": 0.0}
        for a in env_actuators
        if a["role"] is not None and draw(st.integers(0, 9)) > 0
    ]
    if not model_actuators or draw(st.integers(0, 6)) == 0:
        model_actuators.append(draw(actuator(False)))
    if draw(st.integers(0, 3)) == 0:
        model_actuators = list(draw(st.permutations(model_actuators)))
    action_roles = [a["role"] for a in model_actuators if a["role"] is not None]
    model_leaves: dict[str, Any] = {}
    for name in draw(st.lists(st.sampled_from("pqrstu"), min_size=1, max_size=4, unique=True)):
        kind = draw(st.sampled_from(["image", "state", "state", "text", "custom"]))
        if kind == "image":
            model_leaves[name] = {"kind": "image", **draw(model_image(image_roles))}
        elif kind == "state":
            parts = draw(st.lists(model_part(state_roles, action_roles), min_size=1, max_size=3))
            if all(isinstance(p, dict) and p.get("constant") for p in parts):
                parts.append(draw(st.sampled_from(STATE_ROLES)))
            model_leaves[name] = {
                "kind": "state",
                "parts": parts,
                "pad_to": draw(_opt(st.integers(4, 16), 3)),
                "dtype": draw(st.sampled_from(["float32", "float32", "float64", "float16"])),
                "clip": draw(_opt(pair, 5)),
                "container": draw(st.sampled_from(["array", "array", "array", "list"])),
            }
        elif kind == "custom":
            model_leaves[name] = {"kind": "custom"}
        else:
            model_leaves[name] = {
                "kind": "text",
                "role": draw(st.sampled_from(text_roles + list(TEXT_ROLES))),
                "container": draw(st.sampled_from(["str", "list"])),
                "fill": draw(st.sampled_from([None, "do it"])),
            }
    return {
        "env": leaves,
        "env_action": env_actuators,
        "action_clip": draw(_opt(pair, 3)),
        "action_bounds": draw(st.sampled_from(["inf", "unit", "sym"])),
        "model": model_leaves,
        "model_action": model_actuators,
        "model_root": draw(st.sampled_from(["dict", "dict", "dict", "tuple", "leaf"])),
        "seed": draw(st.integers(0, 2**16)),
        "steps": draw(st.integers(1, 4)),
        "observe_at": draw(st.sets(st.integers(1, 3), max_size=1)),
        "reset_at": draw(st.sets(st.integers(1, 3), max_size=1)),
        "drop_text": draw(st.integers(0, 4)) == 0,
        "png": draw(st.integers(0, 4)) == 0,
    }


# ------------------------------------------------------------------------------------------
# Building a recipe with one package


def _bounds(kind: str, width: int) -> tuple[Any, Any]:
    if kind == "inf":
        return -np.inf, np.inf
    if kind == "unit":
        return 0.0, 1.0
    if kind == "sym":
        return -1.0, 1.0
    low = -np.arange(1, width + 1, dtype=np.float32)
    return low, -low


def _state_tag(A: ModuleType, leaf: dict[str, Any]) -> Any:
    return A.StateTag(
        leaf["role"],
        leaf["encoding"],
        leaf["range"],
        frame=leaf["frame"],
        provenance=leaf["provenance"],
        part=leaf["part"],
        labels=leaf["labels"],
    )


def env_side(A: ModuleType, r: dict[str, Any]) -> tuple[Any, Any, Any]:
    """``(tags, observation space, action space)``."""
    tags: dict[str, Any] = {}
    space: dict[str, Any] = {}
    for key, leaf in r["env"].items():
        kind = leaf["kind"]
        if kind == "image":
            h, w, c = leaf["shape"]
            shape = (h, w, c) if leaf["layout"] == "hwc" else (c, h, w)
            tags[key] = A.ImageTag(
                leaf["role"], leaf["layout"], leaf["upside_down"], part=leaf["part"]
            )
            if leaf["float"]:
                space[key] = spaces.Box(0.0, 1.0, shape, np.float32)
            else:
                space[key] = spaces.Box(0, 255, shape, np.uint8)
        elif kind == "state":
            tags[key] = _state_tag(A, leaf)
            low, high = _bounds(leaf["bounds"], leaf["width"])
            space[key] = spaces.Box(low, high, (leaf["width"],), np.float32)
        elif kind == "split":
            fields = [
                A.Field(
                    f["role"],
                    f["width"],
                    f["encoding"],
                    f["range"],
                    frame=f["frame"],
                    provenance=f["provenance"],
                    part=f["part"],
                    labels=f["labels"],
                )
                for f in leaf["fields"]
            ]
            if leaf["skip"]:
                fields.insert(1, A.Field(None, leaf["skip"]))
            tags[key] = A.Split(*fields)
            width = sum(f.dim for f in fields)
            low, high = _bounds(leaf["fields"][0]["bounds"], width)
            space[key] = spaces.Box(low, high, (width,), np.float32)
        else:
            tags[key] = A.TextTag(leaf["role"])
            space[key] = spaces.Text(12)
    action = A.Action(*(_actuator(A, a) for a in r["env_action"]), clip=r["action_clip"])
    width = sum(a["dim"] for a in r["env_action"])
    low, high = _bounds(r["action_bounds"], width)
    return (
        A.EnvTags(tags, action),
        spaces.Dict(space),
        spaces.Box(low, high, (width,), np.float32),
    )


def _actuator(A: ModuleType, a: dict[str, Any]) -> Any:
    if a["role"] is None:
        return A.Actuator(None, a["dim"], fill=a["fill"])
    scale = a["scale"]
    if isinstance(scale, list):
        scale = tuple(scale)
    return A.Actuator(
        a["role"],
        a["dim"],
        a["encoding"],
        a["range"],
        a["binary"],
        scale,
        a["invert"],
        a["threshold"],
        a["clip"],
        a["fill"],
        a["optional"],
        frame=a["frame"],
        reference=a["reference"],
        part=a["part"],
        offset=a["offset"],
        labels=a["labels"],
    )


def _part(A: ModuleType, p: Any) -> Any:
    if isinstance(p, str):
        return p
    if p.get("constant"):
        return A.Constant(dim=p["dim"], fill=p["fill"])
    if p.get("previous"):
        return A.Previous(p["role"], fill=p["fill"])
    encoding = p["encoding"]
    if encoding == "custom":
        encoding = A.CustomEncoding("quat_xyzw", from_base=np.negative, to_base=np.negative)
    return A.State(
        p["role"],
        encoding,
        p["dim"],
        p["index"],
        p["optional"],
        p["range"],
        fill=p["fill"],
        scale=p["scale"],
        offset=p["offset"],
        frame=p["frame"],
        provenance=p["provenance"],
        part=p["part"],
        labels=p["labels"],
    )


def model_side(A: ModuleType, r: dict[str, Any]) -> Any:
    """The model spec (constructor errors propagate: the caller compares them)."""
    inputs: dict[str, Any] = {}
    for key, leaf in r["model"].items():
        kind = leaf["kind"]
        if kind == "image":
            fields = {k: v for k, v in leaf.items() if k != "kind"}
            inputs[key] = A.Image(**fields)
        elif kind == "state":
            inputs[key] = A.Concat(
                *(_part(A, p) for p in leaf["parts"]),
                pad_to=leaf["pad_to"],
                dtype=leaf["dtype"],
                clip=leaf["clip"],
                container=leaf["container"],
            )
        elif kind == "custom":
            inputs[key] = A.Custom(transform=count_keys)
        else:
            inputs[key] = A.Text(leaf["role"], leaf["container"], leaf["fill"])
    tree: Any = inputs
    if r["model_root"] == "tuple":
        tree = tuple(inputs.values())
    elif r["model_root"] == "leaf":
        tree = next(iter(inputs.values()))
    return A.ModelSpec(tree, A.Action(*(_actuator(A, a) for a in r["model_action"])))


def count_keys(observation: Any) -> Any:
    """A custom input: a function of the raw observation mapping."""
    return np.float32(len(observation))


def observations(r: dict[str, Any], space: Any) -> list[dict[str, Any]]:
    """One observation per step, from the recipe's seed."""
    rng = np.random.default_rng(r["seed"])
    out = []
    for _ in range(r["steps"]):
        obs: dict[str, Any] = {}
        for key, sub in space.spaces.items():
            if isinstance(sub, spaces.Text):
                if not r["drop_text"]:
                    obs[key] = "pick the cube"
            elif sub.dtype == np.uint8:
                obs[key] = rng.integers(0, 256, sub.shape, dtype=np.uint8)
                layout = r["env"][key]["layout"]
                if r["png"] and layout == "hwc" and sub.shape[-1] in (1, 3, 4):
                    obs[key] = png(obs[key])
            elif len(sub.shape) == 3:
                obs[key] = rng.random(sub.shape, dtype=np.float32)
            else:
                obs[key] = rng.uniform(-1.0, 1.0, sub.shape).astype(np.float32)
        out.append(obs)
    return out


def png(image: np.ndarray[Any, Any]) -> bytes:
    """``image`` (HxWxC uint8, C in 1, 3, 4) as PNG bytes."""
    from PIL import Image

    buffer = io.BytesIO()
    mode = {1: "L", 3: "RGB", 4: "RGBA"}[image.shape[-1]]
    Image.fromarray(image[..., 0] if mode == "L" else image, mode).save(buffer, format="PNG")
    return buffer.getvalue()


def model_outputs(r: dict[str, Any]) -> list[np.ndarray[Any, Any]]:
    rng = np.random.default_rng(r["seed"] + 1)
    width = sum(a["dim"] for a in r["model_action"])
    return [rng.uniform(-1.5, 1.5, width).astype(np.float32) for _ in range(r["steps"])]
