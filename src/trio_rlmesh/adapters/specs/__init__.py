"""The spec classes and their vocabulary types (as ``rlmesh.adapters.specs`` exports them;
the same objects as :mod:`trio_rlmesh.adapters` exports).

>>> from trio_rlmesh.adapters.specs import State
>>> State("proprio/eef_pos").role
'proprio/eef_pos'
"""

from __future__ import annotations

from .._action_spec import Action as Action
from .._action_spec import Actuator as Actuator
from .._action_spec import CustomEncoding as CustomEncoding
from .._action_spec import RotationTransform as RotationTransform
from .._env_spec import EnvTags as EnvTags
from .._env_spec import Field as Field
from .._env_spec import ImageTag as ImageTag
from .._env_spec import ObservationRoles as ObservationRoles
from .._env_spec import ObsLeaf as ObsLeaf
from .._env_spec import ObsNode as ObsNode
from .._env_spec import Split as Split
from .._env_spec import StateTag as StateTag
from .._env_spec import TextTag as TextTag
from .._model_spec import Concat as Concat
from .._model_spec import ConcatPart as ConcatPart
from .._model_spec import Constant as Constant
from .._model_spec import Custom as Custom
from .._model_spec import Image as Image
from .._model_spec import InputNode as InputNode
from .._model_spec import ModelLeaf as ModelLeaf
from .._model_spec import ModelSpec as ModelSpec
from .._model_spec import ObsTransform as ObsTransform
from .._model_spec import Previous as Previous
from .._model_spec import Rotation as Rotation
from .._model_spec import State as State
from .._model_spec import Text as Text
from .._vocab import ROTATION_DIMS as ROTATION_DIMS
from .._vocab import FitMode as FitMode
from .._vocab import Frame as Frame
from .._vocab import ImageLayout as ImageLayout
from .._vocab import Provenance as Provenance
from .._vocab import Reference as Reference
from .._vocab import Resample as Resample
from .._vocab import RotationEncoding as RotationEncoding
from .._vocab import StackPad as StackPad
from .._vocab import StackSpec as StackSpec

__all__ = [
    "ROTATION_DIMS",
    "Action",
    "Actuator",
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
]
