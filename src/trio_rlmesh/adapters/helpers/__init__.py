"""Adapter helpers: how a position in a spec tree is named.

>>> from trio_rlmesh.adapters.helpers import render_placement
>>> render_placement(("state", 0)), render_placement(())
('state[0]', '<root>')
"""

from .._fmt import render_placement as render_placement

__all__ = ["render_placement"]
