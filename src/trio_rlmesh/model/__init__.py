"""The authoring side: write a model with numpy, serve it through a :class:`ModelHandler`.

>>> import numpy as np
>>> from trio_rlmesh.model import Model, as_handler
>>> class Zero(Model):
...     def predict(self, observation):
...         return np.int64(0)
>>> handler = as_handler(Zero())
"""

from ._engine import ModelEngine as ModelEngine
from ._engine import as_handler as as_handler
from ._episodes import PredictContext as PredictContext
from ._episodes import predict_seed as predict_seed
from ._handler import EpisodeRef as EpisodeRef
from ._handler import HeldState as HeldState
from ._handler import HistoryRow as HistoryRow
from ._handler import ModelHandler as ModelHandler
from ._handler import ModelObservation as ModelObservation
from ._handler import PredictFrames as PredictFrames
from ._handler import ResolveOptions as ResolveOptions
from ._handler import RouteContract as RouteContract
from ._handler import RouteNeeds as RouteNeeds
from ._handler import RouteSetup as RouteSetup
from ._model import Model as Model

__all__ = [
    "EpisodeRef",
    "HeldState",
    "HistoryRow",
    "Model",
    "ModelEngine",
    "ModelHandler",
    "ModelObservation",
    "PredictContext",
    "PredictFrames",
    "ResolveOptions",
    "RouteContract",
    "RouteNeeds",
    "RouteSetup",
    "as_handler",
    "predict_seed",
]
