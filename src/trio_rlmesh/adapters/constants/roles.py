"""The registered roles (as ``rlmesh.adapters.constants.roles`` lists them).

>>> from trio_rlmesh.adapters.constants.roles import GRIPPER_POS
>>> GRIPPER_POS
'proprio/gripper'
"""

from __future__ import annotations

from .._vocab import ACTION_DELTA_POS as ACTION_DELTA_POS
from .._vocab import ACTION_DELTA_ROT as ACTION_DELTA_ROT
from .._vocab import ACTION_EEF_POS as ACTION_EEF_POS
from .._vocab import ACTION_EEF_ROT as ACTION_EEF_ROT
from .._vocab import ACTION_GRIPPER as ACTION_GRIPPER
from .._vocab import ACTION_JOINT_POS as ACTION_JOINT_POS
from .._vocab import ACTION_JOINT_VEL as ACTION_JOINT_VEL
from .._vocab import BASE_ANG_VEL as BASE_ANG_VEL
from .._vocab import BASE_ROT as BASE_ROT
from .._vocab import COMMAND_BASE_VEL as COMMAND_BASE_VEL
from .._vocab import EEF_POS as EEF_POS
from .._vocab import EEF_ROT as EEF_ROT
from .._vocab import EEF_WRENCH as EEF_WRENCH
from .._vocab import GRIPPER_POS as GRIPPER_POS
from .._vocab import IMAGE_PRIMARY as IMAGE_PRIMARY
from .._vocab import IMAGE_SECONDARY as IMAGE_SECONDARY
from .._vocab import IMAGE_WRIST as IMAGE_WRIST
from .._vocab import INSTRUCTION as INSTRUCTION
from .._vocab import JOINT_POS as JOINT_POS
from .._vocab import JOINT_VEL as JOINT_VEL

__all__ = [
    "ACTION_DELTA_POS",
    "ACTION_DELTA_ROT",
    "ACTION_EEF_POS",
    "ACTION_EEF_ROT",
    "ACTION_GRIPPER",
    "ACTION_JOINT_POS",
    "ACTION_JOINT_VEL",
    "BASE_ANG_VEL",
    "BASE_ROT",
    "COMMAND_BASE_VEL",
    "EEF_POS",
    "EEF_ROT",
    "EEF_WRENCH",
    "GRIPPER_POS",
    "IMAGE_PRIMARY",
    "IMAGE_SECONDARY",
    "IMAGE_WRIST",
    "INSTRUCTION",
    "JOINT_POS",
    "JOINT_VEL",
]
