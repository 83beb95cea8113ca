"""ModelHandlerRuntimeModel: one grouped call, encoding, errors that say where."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from tests.model.helpers import (
    ACT_DISCRETE,
    BOX_ROUTE,
    DISCRETE_ROUTE,
    OBS,
    predict_request,
    resolve_request,
)
from trio_rlmesh import ModelError
from trio_rlmesh.model import (
    EpisodeRef,
    HeldState,
    Model,
    ModelObservation,
    PredictFrames,
    ResolveOptions,
    RouteContract,
    RouteNeeds,
)
from trio_rlmesh.model._internal import observation_from_request
from trio_rlmesh.protocol import model_v1, spaces_v1
from trio_rlmesh.runtime._interfaces import ModelPrediction, RuntimeModel
from trio_rlmesh.spaces import decode_batch, encode_batch
from trio_rlmesh.transports.inprocess import ModelHandlerRuntimeModel


class Echo(Model):
    def predict(self, observation: Any) -> Any:
        return np.clip(observation / 10, -1, 1)


def _decode(prediction: ModelPrediction, n: int, frame: int = 0) -> Any:
    return decode_batch(BOX_ROUTE.action_space, prediction.response.actions[frame].leaves, n)


async def test_predict_round_trip_mirrors_context_and_reports_timings() -> None:
    model = ModelHandlerRuntimeModel(Echo(), BOX_ROUTE)
    assert isinstance(model, RuntimeModel)
    assert model.fuses_predicts
    request = predict_request("env-1", [1, 2], request_id="env-1:step_observation:000001")
    prediction = await model.predict(request)
    assert prediction.response.context == request.context
    assert np.allclose(_decode(prediction, 2), [[0.1, 0.1], [0.2, 0.2]])
    timings = prediction.timings
    assert timings.total_ns is not None
    assert timings.user_ns is not None
    assert timings.decode_ns is not None
    assert timings.encode_ns is not None
    assert timings.adapter_ns is not None
    assert timings.held_episodes == 0


async def test_lane_count_comes_from_episode_info() -> None:
    model = ModelHandlerRuntimeModel(Echo(), RouteContract("x", OBS, BOX_ROUTE.action_space))
    prediction = await model.predict(predict_request("e", [1, 2, 3]))
    assert _decode(prediction, 3).shape == (3, 2)


class CountingHandler:
    """A hand-written handler: records each grouped call."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.resets: list[tuple[str, list[str]]] = []
        self.route_resets: list[tuple[str, list[str]]] = []
        self.history_seen: list[int] = []

    async def predict_grouped(
        self, observations: list[ModelObservation]
    ) -> list[PredictFrames | Exception]:
        self.calls.append([o.env_id for o in observations])
        out: list[PredictFrames | Exception] = []
        for obs in observations:
            self.history_seen.append(len(obs.history))
            out.append(PredictFrames(actions=[np.zeros(2, np.float32)] * obs.num_envs))
        return out

    def route_setup(self) -> CountingHandler:
        return self

    async def resolve_adapter(
        self, env_id: str, contract: RouteContract, options: ResolveOptions
    ) -> RouteNeeds:
        return RouteNeeds(history=("<root>",) if options.delivers_history else None)

    async def release_adapter(self, env_id: str) -> None:
        return None

    async def reset_adapter(self, env_id: str, episode_ids: Sequence[str]) -> None:
        # Called twice per eviction: once as the route setup, once as the handler.
        self.resets.append((env_id, list(episode_ids)))

    def take_adapter_ns(self) -> int:
        return 7

    def held_state(self) -> HeldState:
        return HeldState(episodes=3, bytes=12)

    async def close(self) -> None:
        return None


async def test_whole_group_goes_to_one_predict_grouped_call() -> None:
    handler = CountingHandler()
    model = ModelHandlerRuntimeModel(handler, BOX_ROUTE)
    results = await model.predict_group(
        [predict_request("a", [1]), predict_request("b", [2, 3]), predict_request("c", [4])]
    )
    assert handler.calls == [["a", "b", "c"]]
    assert all(isinstance(r, ModelPrediction) for r in results)
    first = results[0]
    assert isinstance(first, ModelPrediction)
    assert first.timings.adapter_ns == 7
    assert first.timings.held_episodes == 3
    assert first.timings.held_state_bytes == 12


async def test_bad_group_is_reported_in_place() -> None:
    handler = CountingHandler()
    model = ModelHandlerRuntimeModel(handler, BOX_ROUTE)
    bad = predict_request("bad", [1])
    bad.episode_info[0].episode_id = ""
    good, broken = await model.predict_group([predict_request("good", [1]), bad])
    assert isinstance(good, ModelPrediction)
    assert isinstance(broken, ModelError)
    assert "episode_id" in broken.message
    assert handler.calls == [["good"]]


async def test_resolve_negotiates_history_and_rows_are_decoded() -> None:
    handler = CountingHandler()
    model = ModelHandlerRuntimeModel(handler, BOX_ROUTE)
    answer = await model.resolve(resolve_request(BOX_ROUTE, "e", horizon=3))
    assert answer.history is not None
    assert list(answer.history.keys) == ["<root>"]
    assert model.wants_history
    request = predict_request("e", [1])
    request.step = 3
    request.history = [
        model_v1.ObservationHistoryFrame(
            observation=spaces_v1.SpaceValue(
                leaves=encode_batch(OBS, np.array([[s, s]], np.float32), 1)
            ),
            episode=model_v1.EpisodeInfo(episode_id="e-ep0", seed=5),
            step=s,
        )
        for s in (1, 2)
    ]
    await model.predict(request)
    assert handler.history_seen == [2]


async def test_reset_adapter_reaches_route_setup_then_handler() -> None:
    handler = CountingHandler()
    model = ModelHandlerRuntimeModel(handler, BOX_ROUTE)
    await model.reset_adapter(
        model_v1.ResetAdapterRequest(
            context=model_v1.AdapterContext(env_id="e", request_id="r"), episode_ids=["x"]
        )
    )
    assert handler.resets == [("e", ["x"]), ("e", ["x"])]


async def test_replay_frames_are_encoded() -> None:
    class Chunky(Model):
        def predict_chunk(self, observation: Any) -> Any:
            return np.stack([np.full(2, 0.1 * j, np.float32) for j in range(4)])

    model = ModelHandlerRuntimeModel(Chunky(), BOX_ROUTE)
    await model.resolve(resolve_request(BOX_ROUTE, "e", horizon=3))
    prediction = await model.predict(predict_request("e", [1, 2]))
    assert len(prediction.response.actions) == 3
    assert _decode(prediction, 2, frame=2)[1].tolist() == pytest.approx([0.2, 0.2])


# ---------------------------------------------------------------- bad model output


class Bad(Model):
    def __init__(self, kind: str) -> None:
        self.kind = kind

    def predict(self, observation: Any) -> Any:
        lane_is_bad = observation[0] == 2
        if not lane_is_bad:
            return np.int64(0) if self.kind != "shape" else np.zeros(2, np.float32)
        if self.kind == "shape":
            return np.zeros(3, np.float32)
        if self.kind == "dtype":
            return np.float64(1.5)
        if self.kind == "domain":
            return np.int64(7)
        if self.kind == "text":
            return "left"
        raise RuntimeError("boom")


class BadBatch(Model):
    """predict_batch whose lane 1 is bad: a NaN (Box) or an out-of-domain value (Discrete)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def predict_batch(self, observations: Any) -> Any:
        n = len(observations)
        if self.kind == "nan":
            actions = np.zeros((n, 2), np.float32)
            actions[1, 0] = np.nan
            return actions
        if self.kind == "domain":
            return np.array([0, 7] + [1] * (n - 2))
        return np.clip(observations / 10, -1, 1)


@pytest.mark.parametrize(
    ("model_type", "kind", "route", "fragment"),
    [
        (Bad, "shape", BOX_ROUTE, "shape"),
        (Bad, "dtype", DISCRETE_ROUTE, "whole number"),
        (Bad, "domain", DISCRETE_ROUTE, "7"),
        (Bad, "text", DISCRETE_ROUTE, "numeric"),
        (Bad, "raise", DISCRETE_ROUTE, "RuntimeError: boom"),
        # A batch reaches the encoder whole (no per-lane pass when it is good); a bad one
        # is still traced to its lane.
        (BadBatch, "nan", BOX_ROUTE, "holds NaN"),
        (BadBatch, "domain", DISCRETE_ROUTE, "7"),
    ],
)
async def test_bad_output_names_model_env_and_lane(
    model_type: type[Bad | BadBatch], kind: str, route: RouteContract, fragment: str
) -> None:
    model = ModelHandlerRuntimeModel(model_type(kind), route)
    with pytest.raises(ModelError) as caught:
        await model.predict(predict_request("env-7", [1, 2, 3]))
    error = caught.value
    assert f"'{model_type.__name__}'" in error.message
    assert f"env {route.env_name!r} (route env-7)" in error.message  # name and route id
    assert "lane 1" in error.message
    assert error.lane == 1
    assert fragment in error.message
    assert not error.recoverable


async def test_nan_action_is_rejected() -> None:
    class NaN(Model):
        def predict(self, observation: Any) -> Any:
            return np.array([np.nan, 0.0], np.float32)

    with pytest.raises(ModelError, match="NaN"):
        await ModelHandlerRuntimeModel(NaN(), BOX_ROUTE).predict(predict_request("e", [1]))


async def test_out_of_bounds_box_values_pass_through() -> None:
    class Loud(Model):
        def predict(self, observation: Any) -> Any:
            return np.array([5.0, -5.0], np.float32)

    prediction = await ModelHandlerRuntimeModel(Loud(), BOX_ROUTE).predict(
        predict_request("e", [1])
    )
    assert _decode(prediction, 1).tolist() == [[5.0, -5.0]]


async def test_recoverable_model_error_stays_recoverable() -> None:
    class Declines(Model):
        def predict(self, observation: Any) -> Any:
            raise ModelError("not now", recoverable=True)

    with pytest.raises(ModelError) as caught:
        await ModelHandlerRuntimeModel(Declines(), BOX_ROUTE).predict(predict_request("e", [1]))
    assert caught.value.recoverable
    assert "not now" in caught.value.message


async def test_discrete_action_space_round_trip() -> None:
    class Pick(Model):
        def predict_batch(self, observations: Any) -> Any:
            return (observations[:, 0] % 3).astype(np.int64)

    prediction = await ModelHandlerRuntimeModel(Pick(), DISCRETE_ROUTE).predict(
        predict_request("e", [1, 2, 4])
    )
    assert decode_batch(ACT_DISCRETE, prediction.response.actions[0].leaves, 3).tolist() == [
        1,
        2,
        1,
    ]


async def test_batch_output_is_encoded_as_the_lanes_would_be() -> None:
    model = ModelHandlerRuntimeModel(BadBatch("good"), BOX_ROUTE)
    prediction = await model.predict(predict_request("e", [1, 2, 30]))
    expected = np.array([[0.1, 0.1], [0.2, 0.2], [1.0, 1.0]], np.float32)
    assert _decode(prediction, 3).tolist() == expected.tolist()


@pytest.mark.parametrize(
    ("ids", "fragment"),
    [
        (["a", "", "a"], "lane 1 for env 'e' has no episode_id"),
        (["a", "a", ""], "repeats episode id 'a' (lane 1)"),
        (["a", "b", "a"], "repeats episode id 'a' (lane 2)"),
        (["a", "b", ""], "lane 2 for env 'e' has no episode_id"),
    ],
)
async def test_blank_or_repeated_episode_ids_name_the_first_bad_lane(
    ids: list[str], fragment: str
) -> None:
    model = ModelHandlerRuntimeModel(Echo(), BOX_ROUTE)
    with pytest.raises(ModelError) as caught:
        await model.predict(predict_request("e", [1, 2, 3], ids=ids))
    assert fragment in caught.value.message


def test_a_repeated_set_of_episodes_is_decoded_once() -> None:
    # A run's lanes keep their episodes for many predicts: the refs of the last request
    # are reused while its ids and seeds are the same, and rebuilt when either changes.
    first = observation_from_request(predict_request("e", [1, 2], ids=["a", "b"]), BOX_ROUTE)
    again = observation_from_request(predict_request("e", [3, 4], ids=["a", "b"]), BOX_ROUTE)
    assert again.episodes is first.episodes
    reseeded = observation_from_request(
        predict_request("e", [1, 2], ids=["a", "b"], seeds=[None, 5]), BOX_ROUTE
    )
    assert reseeded.episodes == (EpisodeRef("a", None), EpisodeRef("b", 5))
    rolled = observation_from_request(predict_request("e", [1, 2], ids=["a", "c"]), BOX_ROUTE)
    assert rolled.episodes == (EpisodeRef("a", None), EpisodeRef("c", None))


def test_a_bad_request_after_a_good_one_is_still_refused() -> None:
    good = predict_request("e", [1, 2], ids=["a", "b"])
    observation_from_request(good, BOX_ROUTE)
    good.episode_info[1].episode_id = "a"  # the same rows, changed in place
    with pytest.raises(ModelError, match=r"repeats episode id 'a' \(lane 1\)"):
        observation_from_request(good, BOX_ROUTE)
