"""The model host: a model handler as rlmesh-wire-v1 model messages, with no I/O. The gRPC
model server and the in-process model both serve through it, so a model behaves the same
whichever way it is run.

See :mod:`._host` for the theory of operation.
"""

from __future__ import annotations

from ._host import ModelHost as ModelHost
from ._host import PredictPlan as PredictPlan
from ._host import Route as Route

__all__ = ["ModelHost", "PredictPlan", "Route"]
