"""The fixed vocabularies of adapters v1: roles, body parts, metadata keys, encodings.

Role strings and metadata keys are wire format: they are matched verbatim between
independently written specs, so they are the same strings RLMesh 0.1.0 uses. The role
registry below says which roles are *registered* (a shared convention) and how each one
constrains the width of a leaf that declares it; any other string still works as a role,
matched on exact agreement, and an ``x/`` prefix marks one as intentionally non-standard.
"""

from __future__ import annotations

from typing import Final, Literal, TypeAlias, get_args

__all__ = [
    "ACTION_DELTA_POS",
    "ACTION_DELTA_ROT",
    "ACTION_EEF_POS",
    "ACTION_EEF_ROT",
    "ACTION_GRIPPER",
    "ACTION_JOINT_POS",
    "ACTION_JOINT_VEL",
    "BASE",
    "BASE_ANG_VEL",
    "BASE_ROT",
    "CHANNEL_ORDERS",
    "COMMAND_BASE_VEL",
    "CROP_MODES",
    "DIRECTIONS",
    "DTYPES",
    "EEF_POS",
    "EEF_ROT",
    "EEF_WRENCH",
    "ENCODING_ORDER",
    "ENV_BRANCH_METADATA_KEY",
    "ENV_METADATA_KEY",
    "FIT_MODES",
    "GRIPPER_POS",
    "HEAD",
    "IMAGE_LAYOUTS",
    "IMAGE_PRIMARY",
    "IMAGE_SECONDARY",
    "IMAGE_WRIST",
    "INSTRUCTION",
    "JOINT_POS",
    "JOINT_VEL",
    "LEFT_ARM",
    "LEFT_LEG",
    "LOCAL_ARM",
    "MAX_STACK",
    "MAX_STACK_SPAN",
    "MODEL_METADATA_KEY",
    "PARTS",
    "RESAMPLES",
    "RIGHT_ARM",
    "RIGHT_LEG",
    "ROTATION_DIMS",
    "STACK_PADS",
    "TORSO",
    "ChannelOrder",
    "CropMode",
    "FitMode",
    "Frame",
    "ImageLayout",
    "Provenance",
    "Reference",
    "Resample",
    "RotationEncoding",
    "StackPad",
    "StackSpec",
    "fixed_dim",
    "is_action_role",
    "is_registered",
    "is_sanctioned",
]

# Metadata keys. Within v1 the JSON documents grow additively only; a breaking change ships
# under a new key.
ENV_METADATA_KEY: Final = "rlmesh.adapters.v1.env_tags"
MODEL_METADATA_KEY: Final = "rlmesh.adapters.v1.model_spec"
ENV_BRANCH_METADATA_KEY: Final = "rlmesh.adapters.v1.env_branch"

# Cameras and text.
IMAGE_PRIMARY: Final = "image/primary"
IMAGE_SECONDARY: Final = "image/secondary"
IMAGE_WRIST: Final = "image/wrist"
INSTRUCTION: Final = "text/instruction"
# Proprioception.
JOINT_POS: Final = "proprio/joint_pos"
JOINT_VEL: Final = "proprio/joint_vel"
EEF_POS: Final = "proprio/eef_pos"
EEF_ROT: Final = "proprio/eef_rot"
EEF_WRENCH: Final = "proprio/eef_wrench"
GRIPPER_POS: Final = "proprio/gripper"
BASE_ANG_VEL: Final = "proprio/base_ang_vel"
BASE_ROT: Final = "proprio/base_rot"
COMMAND_BASE_VEL: Final = "command/base_vel"
# Actions.
ACTION_DELTA_POS: Final = "action/delta_eef_pos"
ACTION_DELTA_ROT: Final = "action/delta_eef_rot"
ACTION_EEF_POS: Final = "action/eef_pos"
ACTION_EEF_ROT: Final = "action/eef_rot"
ACTION_GRIPPER: Final = "action/gripper"
ACTION_JOINT_POS: Final = "action/joint_pos"
ACTION_JOINT_VEL: Final = "action/joint_vel"

# Body parts: conventions, not a registry (any identifier both sides agree on matches).
LEFT_ARM: Final = "left_arm"
RIGHT_ARM: Final = "right_arm"
HEAD: Final = "head"
TORSO: Final = "torso"
BASE: Final = "base"
LEFT_LEG: Final = "left_leg"
RIGHT_LEG: Final = "right_leg"
PARTS: Final = [LEFT_ARM, RIGHT_ARM, HEAD, TORSO, BASE, LEFT_LEG, RIGHT_LEG]

# Registered roles and the width each fixes (None: the width varies, or follows the rotation
# encoding, or the role has no numeric width).
_REGISTRY: Final[dict[str, int | None]] = {
    IMAGE_PRIMARY: None,
    IMAGE_SECONDARY: None,
    IMAGE_WRIST: None,
    INSTRUCTION: None,
    JOINT_POS: None,
    JOINT_VEL: None,
    EEF_POS: 3,
    EEF_ROT: None,
    EEF_WRENCH: 6,
    GRIPPER_POS: None,
    BASE_ANG_VEL: 3,
    BASE_ROT: None,
    COMMAND_BASE_VEL: 3,
    ACTION_DELTA_POS: 3,
    ACTION_DELTA_ROT: None,
    ACTION_EEF_POS: 3,
    ACTION_EEF_ROT: None,
    ACTION_GRIPPER: None,
    ACTION_JOINT_POS: None,
    ACTION_JOINT_VEL: None,
}


def is_registered(role: str) -> bool:
    """Whether ``role`` is one of the registered (shared) roles."""
    return role in _REGISTRY


def is_sanctioned(role: str) -> bool:
    """Whether ``role`` needs no nudge: registered, or marked non-standard with ``x/``."""
    return role.startswith("x/") or role in _REGISTRY


def fixed_dim(role: str) -> int | None:
    """The width a registered role fixes by convention (``eef_pos`` is 3-D), if any."""
    return _REGISTRY.get(role)


def is_action_role(role: str) -> bool:
    """Whether ``role`` names a command (``action/...``), which an observation may not carry."""
    return role.startswith("action/")


# Rotation encodings and their widths. ``gravity_xyz`` is observation-only: the direction
# gravity points in the body frame, which any rotation converts into and nothing out of.
ROTATION_DIMS: Final[dict[str, int]] = {
    "axis_angle": 3,
    "euler_xyz": 3,
    "gravity_xyz": 3,
    "quat_wxyz": 4,
    "quat_xyzw": 4,
    "rot6d": 6,
    "rot6d_rowmajor": 6,
}
DIRECTIONS: Final[frozenset[str]] = frozenset({"gravity_xyz"})
"""Encodings that are directions: a conversion may end in one, never start from one."""

DTYPES: Final[tuple[str, ...]] = (
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
)
"""The dtype names a model input may declare (RLMesh 0.1.0 refuses any other at resolve)."""

MAX_STACK: Final = 64
"""Most frames one image input may stack."""
MAX_STACK_SPAN: Final = 128
"""Most consecutive frames one frame window may reach back over."""

LOCAL_ARM: Final = "<local>"
"""What an in-process custom-encoding callable becomes on the wire: a marker, not code."""

ImageLayout: TypeAlias = Literal["hwc", "chw"]
RotationEncoding: TypeAlias = Literal[
    "quat_xyzw",
    "quat_wxyz",
    "axis_angle",
    "rot6d",
    "rot6d_rowmajor",
    "euler_xyz",
    "gravity_xyz",
]
FitMode: TypeAlias = Literal["stretch", "crop", "pad"]
Resample: TypeAlias = Literal["bilinear", "bilinear_aa", "bicubic_aa", "lanczos3_aa", "area"]
Frame: TypeAlias = Literal["world", "robot_base", "tool"]
Reference: TypeAlias = Literal["current", "target"]
Provenance: TypeAlias = Literal["sensed", "estimated", "privileged"]
CropMode: TypeAlias = Literal["zoom", "slice"]
ChannelOrder: TypeAlias = Literal["rgb", "bgr"]
StackSpec: TypeAlias = tuple[int, ...]
StackPad: TypeAlias = Literal["first", "black"]

# Each choice's names in RLMesh's order (how its messages list them), from its type.
ENCODING_ORDER: Final[tuple[str, ...]] = get_args(RotationEncoding)
IMAGE_LAYOUTS: Final[tuple[str, ...]] = get_args(ImageLayout)
RESAMPLES: Final[tuple[str, ...]] = get_args(Resample)
CROP_MODES: Final[tuple[str, ...]] = get_args(CropMode)
CHANNEL_ORDERS: Final[tuple[str, ...]] = get_args(ChannelOrder)
FIT_MODES: Final[tuple[str, ...]] = get_args(FitMode)
STACK_PADS: Final[tuple[str, ...]] = get_args(StackPad)
