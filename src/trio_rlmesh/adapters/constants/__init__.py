"""Adapter constants: the registered roles, body-part spellings and metadata keys.

Roles are wire format, matched verbatim between independently written specs: these are the
same strings as in ``rlmesh.adapters.constants``. A role carries its kind as a prefix
(``image/``, ``proprio/``, ``text/``, ``action/``, ``command/``); any other string works
too on exact agreement, and an ``x/`` prefix marks one as intentionally non-standard.

>>> from trio_rlmesh.adapters.constants import EEF_POS, LEFT_ARM
>>> EEF_POS, LEFT_ARM
('proprio/eef_pos', 'left_arm')
"""

from .._vocab import ACTION_DELTA_POS as ACTION_DELTA_POS
from .._vocab import ACTION_DELTA_ROT as ACTION_DELTA_ROT
from .._vocab import ACTION_EEF_POS as ACTION_EEF_POS
from .._vocab import ACTION_EEF_ROT as ACTION_EEF_ROT
from .._vocab import ACTION_GRIPPER as ACTION_GRIPPER
from .._vocab import ACTION_JOINT_POS as ACTION_JOINT_POS
from .._vocab import ACTION_JOINT_VEL as ACTION_JOINT_VEL
from .._vocab import BASE as BASE
from .._vocab import BASE_ANG_VEL as BASE_ANG_VEL
from .._vocab import BASE_ROT as BASE_ROT
from .._vocab import COMMAND_BASE_VEL as COMMAND_BASE_VEL
from .._vocab import EEF_POS as EEF_POS
from .._vocab import EEF_ROT as EEF_ROT
from .._vocab import EEF_WRENCH as EEF_WRENCH
from .._vocab import ENV_BRANCH_METADATA_KEY as ENV_BRANCH_METADATA_KEY
from .._vocab import ENV_METADATA_KEY as ENV_METADATA_KEY
from .._vocab import GRIPPER_POS as GRIPPER_POS
from .._vocab import HEAD as HEAD
from .._vocab import IMAGE_PRIMARY as IMAGE_PRIMARY
from .._vocab import IMAGE_SECONDARY as IMAGE_SECONDARY
from .._vocab import IMAGE_WRIST as IMAGE_WRIST
from .._vocab import INSTRUCTION as INSTRUCTION
from .._vocab import JOINT_POS as JOINT_POS
from .._vocab import JOINT_VEL as JOINT_VEL
from .._vocab import LEFT_ARM as LEFT_ARM
from .._vocab import LEFT_LEG as LEFT_LEG
from .._vocab import MODEL_METADATA_KEY as MODEL_METADATA_KEY
from .._vocab import PARTS as PARTS
from .._vocab import RIGHT_ARM as RIGHT_ARM
from .._vocab import RIGHT_LEG as RIGHT_LEG
from .._vocab import TORSO as TORSO

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
    "TORSO",
]
