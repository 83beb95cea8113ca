"""A lone one-lane group through a plain ``predict``: the engine's shortcut for it."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from trio_rlmesh import ModelError
from trio_rlmesh.model import Model, ModelEngine, PredictFrames, ResolveOptions

from .helpers import BOX_ROUTE, observation


class WithContext(Model):
    def __init__(self) -> None:
        self.seen: list[Any] = []

    def predict(self, observation: Any, context: Any) -> Any:  # type: ignore[override]
        self.seen.append((observation.tolist(), context["predict_index"], context["episode_seed"]))
        return np.zeros(2, np.float32)


def test_one_lane_gets_its_lane_value_and_context() -> None:
    model = WithContext()
    engine = ModelEngine(model)
    for _ in range(2):
        (answer,) = engine.predict_grouped_sync([observation("e", [3.0], seeds=[9])])
        assert isinstance(answer, PredictFrames)
        assert [a.tolist() for a in answer.actions] == [[0.0, 0.0]]
        assert answer.replay == []
    assert model.seen == [([3.0, 3.0], 0, 9), ([3.0, 3.0], 1, 9)]
    assert engine.take_adapter_ns() >= 0


def test_one_lane_failure_names_lane_zero_and_the_input() -> None:
    class Boom(Model):
        def predict(self, observation: Any) -> Any:
            raise ValueError("bad weights")

    (answer,) = ModelEngine(Boom()).predict_grouped_sync([observation("env-3", [1.0])])
    assert isinstance(answer, ModelError)
    assert answer.lane == 0
    assert answer.message.startswith("model 'Boom' failed on env 'env-3' lane 0: ValueError")
    assert "float32[2]; lanes: 1" in answer.message


@pytest.mark.parametrize("authored", ["batch", "chunk"])
async def test_other_corners_still_take_their_own_path(authored: str) -> None:
    class Both(Model):
        native_chunk = 3 if authored == "chunk" else None

        def predict(self, observation: Any) -> Any:
            return np.zeros(2, np.float32)

        if authored == "batch":

            def predict_batch(self, observations: Any) -> Any:
                return np.ones((len(observations), 2), np.float32)

        else:

            def predict_chunk(self, observation: Any) -> Any:
                return np.full((3, 2), 0.5, np.float32)

    engine = ModelEngine(Both())
    if authored == "chunk":
        await engine.route_setup().resolve_adapter("e", BOX_ROUTE, ResolveOptions(3, True))
    (answer,) = engine.predict_grouped_sync([observation("e", [1.0])])
    assert isinstance(answer, PredictFrames)
    if authored == "batch":  # predict_batch wins over predict, as _dispatch orders them
        assert answer.actions[0].tolist() == [1.0, 1.0]
    else:  # horizon 3 goes to the chunk corner and keeps its replay frames
        assert answer.actions[0].tolist() == [0.5, 0.5]
        assert len(answer.replay) == 2
