"""The space model, the SpaceValue codec and Gymnasium conversion (rlmesh-wire-v1 §7-§8).

Spaces are frozen, hashable values; :func:`validate` applies the rules a real rlmesh peer
applies. The codec turns batched numpy values into the per-leaf byte strings of a
``SpaceValue`` and back; the lane count ``n`` always comes from the caller.

Example:
    >>> import numpy as np
    >>> from trio_rlmesh import spaces
    >>> obs = spaces.Dict(
    ...     {"pos": spaces.Box.from_bounds(-1.0, 1.0, shape=(2,)), "id": spaces.Discrete(4)}
    ... )
    >>> leaves = spaces.encode_batch(obs, {"pos": np.zeros((3, 2)), "id": [0, 1, 3]}, 3)
    >>> [len(leaf) for leaf in leaves]
    [24, 24]
    >>> spaces.decode_batch(obs, leaves, 3)["id"].tolist()
    [0, 1, 3]
"""

from ._codec import LeafBuffer as LeafBuffer
from ._codec import decode_batch as decode_batch
from ._codec import decode_lanes as decode_lanes
from ._codec import decode_value as decode_value
from ._codec import encode_batch as encode_batch
from ._codec import encode_lanes as encode_lanes
from ._codec import encode_value as encode_value
from ._codec import stack_lanes as stack_lanes
from ._codec import unstack as unstack
from ._dtypes import DType as DType
from ._gym import from_gymnasium as from_gymnasium
from ._gym import to_gymnasium as to_gymnasium
from ._spaces import BoundsKind as BoundsKind
from ._spaces import Box as Box
from ._spaces import Dict as Dict
from ._spaces import Discrete as Discrete
from ._spaces import MultiBinary as MultiBinary
from ._spaces import MultiDiscrete as MultiDiscrete
from ._spaces import Space as Space
from ._spaces import Text as Text
from ._spaces import Tuple as Tuple
from ._spaces import validate as validate

__all__ = [
    "BoundsKind",
    "Box",
    "DType",
    "Dict",
    "Discrete",
    "LeafBuffer",
    "MultiBinary",
    "MultiDiscrete",
    "Space",
    "Text",
    "Tuple",
    "decode_batch",
    "decode_lanes",
    "decode_value",
    "encode_batch",
    "encode_lanes",
    "encode_value",
    "from_gymnasium",
    "stack_lanes",
    "to_gymnasium",
    "unstack",
    "validate",
]
