"""The engine: corner derivation, dispatch precedence, fusion, chunks, contexts, errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from trio_rlmesh import ModelError
from trio_rlmesh.model import (
    Model,
    ModelEngine,
    PredictFrames,
    ResolveOptions,
    as_handler,
    predict_seed,
)
from trio_rlmesh.spaces._internal import LaneRows

from .helpers import BOX_ROUTE, observation


class Recorder(Model):
    """Counts corner calls; actions are ``[obs, obs]`` so lanes are recognisable."""

    def __init__(self) -> None:
        self.calls: list[str] = []


def _engine(model: object) -> ModelEngine:
    handler = as_handler(model)
    assert isinstance(handler, ModelEngine)
    return handler


async def _resolve(engine: ModelEngine, env_id: str, horizon: int) -> None:
    setup = engine.route_setup()
    await setup.resolve_adapter(env_id, BOX_ROUTE, ResolveOptions(execution_horizon=horizon))


def _frames(result: PredictFrames | Exception) -> PredictFrames:
    assert isinstance(result, PredictFrames), result
    return result


class BatchAndChunkBatch(Recorder):
    def predict_batch(self, observations: Any) -> Any:
        self.calls.append("batch")
        return observations[:, :1].repeat(2, axis=1)

    def predict_chunk_batch(self, observations: Any) -> Any:
        self.calls.append("chunk_batch")
        # 10 frames per lane: frame j of lane i = obs_i + j
        base = observations[:, :1]
        return np.stack([np.repeat(base + j, 2, axis=1) for j in range(10)], axis=1)


async def test_dispatch_prefers_chunk_batch_and_caps_to_horizon() -> None:
    model = BatchAndChunkBatch()
    engine = _engine(model)
    await _resolve(engine, "e", 4)
    (result,) = await engine.predict_grouped([observation("e", [0, 10, 20, 30, 40])])
    frames = _frames(result)
    assert model.calls == ["chunk_batch"]
    assert len(frames.actions) == 5
    assert len(frames.replay) == 3
    assert frames.replay[2][1].tolist() == [13.0, 13.0]


async def test_horizon_one_uses_plain_batch() -> None:
    model = BatchAndChunkBatch()
    engine = _engine(model)
    (result,) = await engine.predict_grouped([observation("e", [1, 2])])
    assert model.calls == ["batch"]
    frames = _frames(result)
    assert frames.replay == []
    assert [a.tolist() for a in frames.actions] == [[1.0, 1.0], [2.0, 2.0]]
    # The actions remember the batch the model returned, so the encoder takes it whole.
    assert isinstance(frames.actions, LaneRows)
    assert frames.actions.source() is not None


class ChunkAndBatch(Recorder):
    def predict_batch(self, observations: Any) -> Any:
        self.calls.append("batch")
        return np.repeat(observations[:, :1], 2, axis=1)

    def predict_chunk(self, observation: Any) -> Any:
        self.calls.append("chunk")
        return np.stack([np.full(2, observation[0] + 0.125 * j) for j in range(6)])


async def test_horizon_above_one_prefers_per_lane_chunk_over_batch() -> None:
    model = ChunkAndBatch()
    engine = _engine(model)
    await _resolve(engine, "e", 4)
    (result,) = await engine.predict_grouped([observation("e", [1, 2, 3])])
    frames = _frames(result)
    assert model.calls == ["chunk"] * 3
    assert len(frames.replay) == 3
    assert [a.tolist() for a in frames.replay[0]] == [[1.125] * 2, [2.125] * 2, [3.125] * 2]


async def test_batch_lane_count_mismatch_is_a_model_error() -> None:
    class Short(Model):
        def predict_batch(self, observations: Any) -> Any:
            return np.zeros((len(observations) - 1, 2))

    (result,) = await _engine(Short()).predict_grouped([observation("env-x", [1, 2, 3])])
    assert isinstance(result, ModelError)
    assert "lanes" in result.message
    assert "env-x" in result.message
    assert "Short" in result.message


# ---------------------------------------------------------------- derivation


async def test_predict_is_derived_from_predict_batch() -> None:
    class OnlyBatch(Model):
        def predict_batch(self, observations: Any) -> Any:
            assert observations.shape[0] == 1
            return observations * 2

    engine = _engine(OnlyBatch())
    # Fusion off: the derived per-lane predict runs; a batch of one per call.
    engine._allow_fusion = False
    (result,) = await engine.predict_grouped([observation("e", [3])])
    assert _frames(result).actions[0].tolist() == [6.0, 6.0]


async def test_predict_is_derived_from_predict_chunk_first_frame() -> None:
    class OnlyChunk(Model):
        def __init__(self) -> None:
            self.horizons: list[int] = []

        def predict_chunk(self, observation: Any, horizon: int) -> Any:  # type: ignore[override]
            self.horizons.append(horizon)
            return np.stack([observation + j for j in range(3)])

    model = OnlyChunk()
    engine = _engine(model)
    (result,) = await engine.predict_grouped([observation("e", [1, 2])])
    frames = _frames(result)
    assert [a.tolist() for a in frames.actions] == [[1.0, 1.0], [2.0, 2.0]]
    assert frames.replay == []
    assert model.horizons == [1, 1]


async def test_chunk_batch_alone_yields_every_corner() -> None:
    class OnlyChunkBatch(Model):
        def __init__(self) -> None:
            self.calls: list[tuple[int, int]] = []

        def predict_chunk_batch(self, observations: Any, execution_horizon: int = 1) -> Any:
            self.calls.append((observations.shape[0], execution_horizon))
            return np.stack([observations + j for j in range(5)], axis=1)

    model = OnlyChunkBatch()
    engine = _engine(model)
    await _resolve(engine, "chunky", 3)
    chunked, plain = await engine.predict_grouped(
        [observation("chunky", [1, 2]), observation("plain", [7])]
    )
    assert len(_frames(chunked).replay) == 2
    assert _frames(plain).actions[0].tolist() == [7.0, 7.0]
    assert model.calls == [(2, 3), (1, 1)]


def test_no_corner_is_a_type_error() -> None:
    class Nothing(Model):
        pass

    with pytest.raises(TypeError, match="no predict corner"):
        as_handler(Nothing())


def test_native_chunk_without_chunk_corner_is_a_type_error() -> None:
    class Bad(Model):
        native_chunk = 4

        def predict(self, observation: Any) -> Any:
            return observation

    with pytest.raises(TypeError, match="native_chunk"):
        as_handler(Bad())


async def test_keyword_only_execution_horizon_is_passed_by_keyword() -> None:
    seen: list[int] = []

    class KW(Model):
        def predict_chunk(self, observation: Any, *, execution_horizon: int = 1) -> Any:
            seen.append(execution_horizon)
            return np.stack([observation] * execution_horizon)

    engine = _engine(KW())
    await _resolve(engine, "e", 4)
    (result,) = await engine.predict_grouped([observation("e", [1])])
    assert seen == [4]
    assert len(_frames(result).replay) == 3


async def test_plain_object_with_predict_is_accepted() -> None:
    class Policy:
        def predict(self, observation: Any) -> Any:
            return -observation

    (result,) = await as_handler(Policy()).predict_grouped([observation("e", [2])])
    assert _frames(result).actions[0].tolist() == [-2.0, -2.0]


async def test_load_runs_once_before_predict() -> None:
    class Loaded(Model):
        loads = 0

        def load(self) -> None:
            type(self).loads += 1
            self.weight = 3.0

        def predict(self, observation: Any) -> Any:
            return observation * self.weight

    engine = _engine(Loaded)
    (result,) = await engine.predict_grouped([observation("e", [1])])
    assert Loaded.loads == 1
    assert _frames(result).actions[0].tolist() == [3.0, 3.0]


# ---------------------------------------------------------------- fusion


async def test_fused_grouped_predict_runs_one_forward_and_splits_per_group() -> None:
    class Batched(Model):
        def __init__(self) -> None:
            self.sizes: list[int] = []

        def predict_batch(self, observations: Any) -> Any:
            self.sizes.append(len(observations))
            return observations

    model = Batched()
    a, b = await _engine(model).predict_grouped(
        [observation("a", [1, 2]), observation("b", [3, 4, 5])]
    )
    assert model.sizes == [5]
    assert [x[0] for x in _frames(a).actions] == [1, 2]
    assert [x[0] for x in _frames(b).actions] == [3, 4, 5]


async def test_no_fusion_without_a_batched_corner_keeps_identity() -> None:
    seen: list[tuple[str, int | None]] = []

    class PerLane(Model):
        def predict(self, observation: Any, context: Any) -> Any:  # type: ignore[override]
            seen.append((context["episode_id"], context["episode_seed"]))
            return observation

    await _engine(PerLane()).predict_grouped(
        [observation("a", [1], ids=["ep-a"], seeds=[7]), observation("b", [2], ids=["ep-b"])]
    )
    assert seen == [("ep-a", 7), ("ep-b", None)]


async def test_allow_fusion_false_runs_each_group_alone() -> None:
    class Unfused(Model):
        allow_fusion = False

        def __init__(self) -> None:
            self.sizes: list[int] = []

        def predict_batch(self, observations: Any) -> Any:
            self.sizes.append(len(observations))
            return observations

    model = Unfused()
    await _engine(model).predict_grouped([observation("a", [1, 2]), observation("b", [3])])
    assert model.sizes == [2, 1]


async def test_grouped_chunk_and_batch_model_keeps_chunking_when_grouped() -> None:
    model = ChunkAndBatch()
    engine = _engine(model)
    await _resolve(engine, "a", 4)
    await _resolve(engine, "b", 4)
    a, b = await engine.predict_grouped([observation("a", [1, 2]), observation("b", [3, 4, 5])])
    assert model.calls == ["chunk"] * 5
    assert len(_frames(a).replay) == 3
    assert len(_frames(b).replay) == 3
    assert _frames(b).replay[1][2].tolist() == [5.25, 5.25]


async def test_fused_failure_reaches_every_group_with_recoverability() -> None:
    class Flaky(Model):
        def predict_batch(self, observations: Any) -> Any:
            raise ModelError("busy, try again", recoverable=True)

    a, b = await _engine(Flaky()).predict_grouped(
        [observation("a", [1, 2]), observation("b", [3, 4, 5])]
    )
    assert isinstance(a, ModelError)
    assert isinstance(b, ModelError)
    assert a.recoverable
    assert b.recoverable
    assert "lanes: 2" in a.message
    assert "lanes: 3" in b.message
    assert "'a'" in a.message
    assert "'b'" in b.message


async def test_per_group_errors_do_not_sink_other_groups() -> None:
    class PickyLane(Model):
        def predict(self, observation: Any) -> Any:
            if observation[0] == 13:
                raise ValueError("unlucky")
            return observation

    good, bad = await _engine(PickyLane()).predict_grouped(
        [observation("good", [1]), observation("bad", [2, 13])]
    )
    assert isinstance(good, PredictFrames)
    assert isinstance(bad, ModelError)
    assert bad.lane == 1
    assert not bad.recoverable
    assert "'PickyLane'" in bad.message
    assert "'bad'" in bad.message
    assert "lane 1" in bad.message
    assert "ValueError: unlucky" in bad.message


# ---------------------------------------------------------------- chunks


async def test_replay_cut_to_the_shortest_lane() -> None:
    class Ragged(Model):
        def predict_chunk(self, observation: Any) -> Any:
            length = int(observation[0])
            return [observation] * length

    engine = _engine(Ragged())
    await _resolve(engine, "e", 8)
    (result,) = await engine.predict_grouped([observation("e", [5, 3, 6])])
    assert len(_frames(result).replay) == 2


async def test_empty_chunk_is_an_error() -> None:
    class Empty(Model):
        def predict_chunk(self, observation: Any) -> Any:
            return np.zeros((0, 2))

    engine = _engine(Empty())
    await _resolve(engine, "e", 2)
    (result,) = await engine.predict_grouped([observation("e", [1])])
    assert isinstance(result, ModelError)
    assert "empty action chunk" in result.message


async def test_dict_chunk_is_split_per_key() -> None:
    class DictChunk(Model):
        def predict_chunk(self, observation: Any) -> Any:
            return {"a": np.arange(3), "b": np.arange(3) * 10}

    engine = _engine(DictChunk())
    await _resolve(engine, "e", 3)
    (result,) = await engine.predict_grouped([observation("e", [1])])
    frames = _frames(result)
    assert frames.actions[0] == {"a": 0, "b": 0}
    assert frames.replay[1][0] == {"a": 2, "b": 20}


async def test_native_chunk_is_enforced() -> None:
    class Declared(Model):
        native_chunk = 4

        def predict_chunk(self, observation: Any) -> Any:
            return np.stack([observation] * 3)

    engine = _engine(Declared())
    with pytest.raises(ModelError, match="native_chunk=4"):
        await _resolve(engine, "e", 5)
    await _resolve(engine, "e", 2)
    (result,) = await engine.predict_grouped([observation("e", [1])])
    assert isinstance(result, ModelError)
    assert "returned 3 frames" in result.message


async def test_resolve_answers_native_chunk() -> None:
    class Declared(Model):
        native_chunk = 4

        def predict_chunk(self, observation: Any) -> Any:
            return np.stack([observation] * 4)

    engine = _engine(Declared())
    needs = await engine.route_setup().resolve_adapter("e", BOX_ROUTE, ResolveOptions(2, True))
    assert needs.native_chunk == 4
    assert needs.history is None


# ---------------------------------------------------------------- context & episodes


async def test_context_carries_identity_index_seed_and_state() -> None:
    contexts: list[dict[str, Any]] = []

    class WithContext(Model):
        def predict(self, observation: Any, context: Any) -> Any:  # type: ignore[override]
            context["state"]["n"] = context["state"].get("n", 0) + 1
            contexts.append(dict(context))
            return observation

    engine = _engine(WithContext())
    for _ in range(3):
        await engine.predict_grouped([observation("e", [1], ids=["ep"], seeds=[42])])
    assert [c["predict_index"] for c in contexts] == [0, 1, 2]
    assert [c["predict_seed"] for c in contexts] == [predict_seed(42, i) for i in range(3)]
    assert contexts[-1]["state"] == {"n": 3}
    assert contexts[0]["episode_id"] == "ep"
    assert engine.held_state().episodes == 1


async def test_batched_corner_gets_one_context_per_row() -> None:
    rows: list[list[str]] = []

    class BatchContext(Model):
        def predict_batch(self, observations: Any, context: Any) -> Any:  # type: ignore[override]
            rows.append([c["episode_id"] for c in context])
            return observations

    await _engine(BatchContext()).predict_grouped(
        [observation("a", [1, 2], ids=["x", "y"]), observation("b", [3], ids=["z"])]
    )
    assert rows == [["x", "y", "z"]]


async def test_episode_end_drops_state_and_fires_hook() -> None:
    ended: list[str] = []

    class Stateful(Model):
        def predict(self, observation: Any, context: Any) -> Any:  # type: ignore[override]
            return observation

        def on_episode_end(self, episode_id: str = "") -> None:
            ended.append(episode_id)

    engine = _engine(Stateful())
    await engine.predict_grouped([observation("e", [1, 2], ids=["p", "q"])])
    assert engine.held_state().episodes == 2
    await engine.reset_adapter("e", ["p"])
    assert ended == ["p"]
    assert engine.held_state().episodes == 1
    await engine.reset_adapter("e", [])
    assert engine.held_state().episodes == 0
    assert ended == ["p"]


async def test_context_free_models_hold_no_state() -> None:
    class Plain(Model):
        def predict(self, observation: Any) -> Any:
            return observation

    engine = _engine(Plain())
    await engine.predict_grouped([observation("e", [1], ids=["p"])])
    assert engine.held_state().episodes == 0


async def test_close_runs_once() -> None:
    closes: list[int] = []

    class Closing(Model):
        def predict(self, observation: Any) -> Any:
            return observation

        def close(self) -> None:
            closes.append(1)

    engine = _engine(Closing())
    await engine.close()
    await engine.close()
    assert closes == [1]


def _joint_spec() -> Any:
    import trio_rlmesh.adapters as adapt

    return adapt.ModelSpec(
        {"q": adapt.State(adapt.JOINT_POS)}, adapt.Action(adapt.Actuator(adapt.ACTION_GRIPPER, 1))
    )


def test_a_models_spec_is_the_engines_and_published_as_its_metadata() -> None:
    import trio_rlmesh.adapters as adapt

    spec = _joint_spec()

    class Specd(Model):
        def predict(self, observation: Any) -> Any:
            return observation

    plain = as_handler(Specd)
    assert isinstance(plain, ModelEngine)
    assert (plain.spec, plain.metadata()) == (None, {})
    Specd.spec = spec
    engine = as_handler(Specd)
    assert isinstance(engine, ModelEngine)
    assert engine.spec is spec
    assert engine.metadata() == {adapt.MODEL_METADATA_KEY: spec.to_dict()}


@pytest.mark.interop
def test_a_specd_engines_metadata_is_rlmeshs() -> None:
    import rlmesh.adapters

    class Specd(Model):
        spec = _joint_spec()

        def predict(self, observation: Any) -> Any:
            return observation

    engine = as_handler(Specd)
    assert isinstance(engine, ModelEngine)
    theirs = rlmesh.adapters.ModelSpec.from_dict(Specd.spec.to_dict()).to_metadata()
    assert engine.metadata() == theirs
    assert list(theirs) == [rlmesh.adapters.MODEL_METADATA_KEY]
