"""RLMesh's adapters v1 in pure Python: env tags x model spec -> an adapter.

An env *tags* its observation and action spaces once (:class:`EnvTags`: roles such as
``image/primary`` or ``proprio/eef_rot`` plus the few facts a space cannot say); a model
*specifies* its payload once (:class:`ModelSpec`: images, states, text, and its action
layout). :func:`resolve` pairs the two by role, reading widths, dtypes and bounds from the
spaces, and either refuses at once with a precise error or returns an :class:`Adapter` whose
``transform_obs`` / ``transform_action`` run every step::

    import trio_rlmesh.adapters as adapt

    adapter = adapt.resolve(tags, env.observation_space, env.action_space, spec)
    print(adapter.explain())
    payload = adapter.transform_obs(obs)      # env observation -> model input
    action = adapter.transform_action(out)    # model output -> env action

The names, documents and answers are RLMesh 0.1.0's (``rlmesh.adapters``): specs written
for it run unchanged, serialize to the same JSON, and resolve to the same plans. Applying a
plan is numpy only (no native code); JPEG support needs Pillow (the ``adapters`` extra).
"""

from __future__ import annotations

# RLMesh's package binds its public submodules on import, so code written for it reaches them
# as ``adapt.helpers.render_placement`` without importing them itself.
from . import helpers as helpers
from . import specs as specs
from ._action_spec import Action as Action
from ._action_spec import Actuator as Actuator
from ._action_spec import CustomEncoding as CustomEncoding
from ._action_spec import RotationTransform as RotationTransform
from ._adapter import Adapter as Adapter
from ._adapter import AdapterBase as AdapterBase
from ._advice import Advisory as Advisory
from ._api import resolve as resolve
from ._api import resolve_from_contract as resolve_from_contract
from ._api import tag as tag
from ._env_spec import EnvTags as EnvTags
from ._env_spec import Field as Field
from ._env_spec import ImageTag as ImageTag
from ._env_spec import ObservationRoles as ObservationRoles
from ._env_spec import ObsLeaf as ObsLeaf
from ._env_spec import ObsNode as ObsNode
from ._env_spec import Split as Split
from ._env_spec import StateTag as StateTag
from ._env_spec import TextTag as TextTag
from ._errors import AdapterResolutionError as AdapterResolutionError
from ._model_spec import Concat as Concat
from ._model_spec import ConcatPart as ConcatPart
from ._model_spec import Constant as Constant
from ._model_spec import Custom as Custom
from ._model_spec import Image as Image
from ._model_spec import InputNode as InputNode
from ._model_spec import ModelLeaf as ModelLeaf
from ._model_spec import ModelSpec as ModelSpec
from ._model_spec import ObsTransform as ObsTransform
from ._model_spec import Previous as Previous
from ._model_spec import Rotation as Rotation
from ._model_spec import State as State
from ._model_spec import Text as Text
from ._vocab import ROTATION_DIMS as ROTATION_DIMS
from ._vocab import FitMode as FitMode
from ._vocab import Frame as Frame
from ._vocab import ImageLayout as ImageLayout
from ._vocab import Provenance as Provenance
from ._vocab import Reference as Reference
from ._vocab import Resample as Resample
from ._vocab import RotationEncoding as RotationEncoding
from ._vocab import StackPad as StackPad
from ._vocab import StackSpec as StackSpec
from .constants import (
    ACTION_DELTA_POS,
    ACTION_DELTA_ROT,
    ACTION_EEF_POS,
    ACTION_EEF_ROT,
    ACTION_GRIPPER,
    ACTION_JOINT_POS,
    ACTION_JOINT_VEL,
    BASE,
    BASE_ANG_VEL,
    BASE_ROT,
    COMMAND_BASE_VEL,
    EEF_POS,
    EEF_ROT,
    EEF_WRENCH,
    ENV_BRANCH_METADATA_KEY,
    ENV_METADATA_KEY,
    GRIPPER_POS,
    HEAD,
    IMAGE_PRIMARY,
    IMAGE_SECONDARY,
    IMAGE_WRIST,
    INSTRUCTION,
    JOINT_POS,
    JOINT_VEL,
    LEFT_ARM,
    LEFT_LEG,
    MODEL_METADATA_KEY,
    PARTS,
    RIGHT_ARM,
    RIGHT_LEG,
    TORSO,
)

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
    "COMMAND_BASE_VEL",
    "EEF_POS",
    "EEF_ROT",
    "EEF_WRENCH",
    "ENV_BRANCH_METADATA_KEY",
    "ENV_METADATA_KEY",
    "GRIPPER_POS",
    "HEAD",
    "IMAGE_PRIMARY",
    "IMAGE_SECONDARY",
    "IMAGE_WRIST",
    "INSTRUCTION",
    "JOINT_POS",
    "JOINT_VEL",
    "LEFT_ARM",
    "LEFT_LEG",
    "MODEL_METADATA_KEY",
    "PARTS",
    "RIGHT_ARM",
    "RIGHT_LEG",
    "ROTATION_DIMS",
    "TORSO",
    "Action",
    "Actuator",
    "Adapter",
    "AdapterBase",
    "AdapterResolutionError",
    "Advisory",
    "Concat",
    "ConcatPart",
    "Constant",
    "Custom",
    "CustomEncoding",
    "EnvTags",
    "Field",
    "FitMode",
    "Frame",
    "Image",
    "ImageLayout",
    "ImageTag",
    "InputNode",
    "ModelLeaf",
    "ModelSpec",
    "ObsLeaf",
    "ObsNode",
    "ObsTransform",
    "ObservationRoles",
    "Previous",
    "Provenance",
    "Reference",
    "Resample",
    "Rotation",
    "RotationEncoding",
    "RotationTransform",
    "Split",
    "StackPad",
    "StackSpec",
    "State",
    "StateTag",
    "Text",
    "TextTag",
    "resolve",
    "resolve_from_contract",
    "tag",
]
