"""What the spaces layer offers the other layers of trio-rlmesh; none of it is public API.

Users import from :mod:`trio_rlmesh.spaces` (and its errors from :mod:`trio_rlmesh`). Other
layers import the spaces layer's internals from here and from no other private module of
it (``tests/test_layering.py`` checks that).
"""

from __future__ import annotations

from ._codec import LaneRows, carry_batch, carry_lanes, unstack_rows
from ._conformance import check_batch
from ._errors import ROOT, child_path, index_path
from ._spaces import iter_leaves

__all__ = [
    "ROOT",
    "LaneRows",
    "carry_batch",
    "carry_lanes",
    "check_batch",
    "child_path",
    "index_path",
    "iter_leaves",
    "unstack_rows",
]
