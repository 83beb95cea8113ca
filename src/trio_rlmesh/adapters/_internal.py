"""What the runtime uses of the adapters beyond RLMesh's public names.

RLMesh's ``rlmesh.adapters`` surface (mirrored by :mod:`trio_rlmesh.adapters`) has one adapter
per env and episode. The runtime drives many lanes and many episodes through one resolved
pairing, so it holds the pieces apart:

- :class:`AdapterPlan`: the resolved pairing (``Adapter.plan``), immutable and shared;
- :class:`EpisodeState`: one episode of one lane (``Adapter.new_episode()``): its frame
  windows and its previous action; a new episode is a new state;
- the lane methods of :class:`~trio_rlmesh.adapters.Adapter` (``transform_obs_lanes``,
  ``observe_lanes``, ``transform_action_lanes``, ``transform_chunk``, ``record_action``),
  which take the states explicitly;
- :class:`ApplyError`: a step's observation or action did not fit the plan (a
  :class:`ValueError`, as RLMesh raises);
- :func:`adapter_for` and :func:`pairing_failure`: a model's spec resolved against an env's
  contract, and how a failure to pair is worded, in every seat.
"""

from __future__ import annotations

from ._errors import ApplyError
from ._history import EpisodeState
from ._pairing import adapter_for, pairing_failure
from ._plans import AdapterPlan
from ._resolve import OBS_ROOT_KEY

__all__ = [
    "OBS_ROOT_KEY",
    "AdapterPlan",
    "ApplyError",
    "EpisodeState",
    "adapter_for",
    "pairing_failure",
]
