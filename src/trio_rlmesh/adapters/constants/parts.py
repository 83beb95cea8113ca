"""The body-part spellings (as ``rlmesh.adapters.constants.parts`` lists them).

>>> from trio_rlmesh.adapters.constants.parts import PARTS
>>> 'left_arm' in PARTS
True
"""

from __future__ import annotations

from .._vocab import BASE as BASE
from .._vocab import HEAD as HEAD
from .._vocab import LEFT_ARM as LEFT_ARM
from .._vocab import LEFT_LEG as LEFT_LEG
from .._vocab import PARTS as PARTS
from .._vocab import RIGHT_ARM as RIGHT_ARM
from .._vocab import RIGHT_LEG as RIGHT_LEG
from .._vocab import TORSO as TORSO

__all__ = [
    "BASE",
    "HEAD",
    "LEFT_ARM",
    "LEFT_LEG",
    "PARTS",
    "RIGHT_ARM",
    "RIGHT_LEG",
    "TORSO",
]
