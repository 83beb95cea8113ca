"""What the model side offers the other layers of trio-rlmesh; none of it is public API.

Users import from :mod:`trio_rlmesh.model`. The transports and the facade import the
conversions between ``model_v1`` messages and handler values from here, and from no other
private module of the model package (``tests/test_layering.py`` checks that).
"""

from __future__ import annotations

from ._handler import env_label, without_route_ids
from ._wire import (
    encode_frames,
    model_error_to_wire,
    observation_from_request,
    predict_refused,
    wire_error_to_model,
)

__all__ = [
    "encode_frames",
    "env_label",
    "model_error_to_wire",
    "observation_from_request",
    "predict_refused",
    "wire_error_to_model",
    "without_route_ids",
]
