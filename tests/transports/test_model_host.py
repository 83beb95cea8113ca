"""The model host's behaviour, once, in every seat it serves from.

Each test runs the same model through a :class:`~trio_rlmesh.runtime.RuntimeModel` in each
seat: in process (:class:`ModelHandlerRuntimeModel`), and served (``serve_model`` over the
in-memory gRPC transport, and for a few cases over real loopback on both backends, called by
:class:`ModelClientRuntimeModel`). The outcomes, and every error's words, code and
recoverability, are the same: a served error arrives framed as RLMesh frames it
(``"model error: "`` before the same words).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import numpy as np
import pytest
import trio

from tests.model.helpers import (
    ACT_DISCRETE,
    BOX_ROUTE,
    DISCRETE_ROUTE,
    OBS,
    broken_request,
    predict_request,
    resolve_request,
)
from trio_rlmesh import ModelError
from trio_rlmesh.model import (
    HeldState,
    Model,
    ModelObservation,
    PredictFrames,
    ResolveOptions,
    RouteContract,
    RouteNeeds,
)
from trio_rlmesh.protocol import model_v1, spaces_v1
from trio_rlmesh.runtime import ModelPrediction, RuntimeModel
from trio_rlmesh.spaces import decode_batch, encode_batch
from trio_rlmesh.transports.grpc import (
    BACKENDS,
    BackendName,
    ModelClientRuntimeModel,
    open_model_client,
    serve_model,
)
from trio_rlmesh.transports.inprocess import ModelHandlerRuntimeModel

Seat = Callable[..., AbstractAsyncContextManager[Any]]
"""``seat(model, name=None)``: the model as a RuntimeModel in one seat."""

_names = itertools.count()
GUARD = 20.0
"""Real seconds any one test may take (a guard, never reached when things work)."""


@asynccontextmanager
async def in_process(model: object, **options: Any) -> AsyncIterator[ModelHandlerRuntimeModel]:
    seat = ModelHandlerRuntimeModel(model, user_code="inline", **options)
    with trio.fail_after(GUARD):
        try:
            yield seat
        finally:
            await seat.aclose()


@asynccontextmanager
async def served(
    model: object,
    *,
    address: str | None = None,
    backend: BackendName = "trio",
    **options: Any,
) -> AsyncIterator[ModelClientRuntimeModel]:
    where = address or f"memory://model-host-{next(_names)}"
    with trio.fail_after(GUARD):
        async with _serving(model, where, backend, options) as client:
            yield client


@asynccontextmanager
async def _serving(
    model: object, where: str, backend: BackendName, options: dict[str, Any]
) -> AsyncIterator[ModelClientRuntimeModel]:
    serve = functools.partial(
        serve_model, model, where, user_code="inline", backend=backend, **options
    )
    async with trio.open_nursery() as nursery:
        bound = await nursery.start(serve)
        async with open_model_client(bound, backend=backend) as client:
            yield ModelClientRuntimeModel(client)
        nursery.cancel_scope.cancel()


SEATS: dict[str, Seat] = {"in-process": in_process, "served": served}
LOOPBACK: dict[str, Seat] = {
    f"loopback-{backend}": functools.partial(served, address="127.0.0.1:0", backend=backend)
    for backend in BACKENDS
}


@pytest.fixture(params=sorted(SEATS))
def seat(request: pytest.FixtureRequest) -> Seat:
    return SEATS[request.param]


every_seat = pytest.mark.parametrize(
    "seat",
    [
        *(pytest.param(SEATS[name], id=name) for name in sorted(SEATS)),
        *(pytest.param(LOOPBACK[name], id=name, marks=pytest.mark.network) for name in LOOPBACK),
    ],
)
"""For the few cases that also run over real sockets, on both backends."""


def internal(text: str) -> tuple[str, str, bool]:
    """The words of a model failure that retrying cannot fix (code INTERNAL)."""
    return text, "INTERNAL", False


def words(error: BaseException) -> tuple[str, str | None, bool]:
    """An error as a caller reads it: its words (without the wire's framing), its code and
    whether it is recoverable."""
    assert isinstance(error, ModelError), repr(error)
    return error.message.removeprefix("model error: "), error.code, error.recoverable


async def fails(call: Any) -> tuple[str, str | None, bool]:
    with pytest.raises(ModelError) as caught:
        await call
    return words(caught.value)


def decoded(prediction: object, space: Any = BOX_ROUTE.action_space, n: int = 1) -> Any:
    assert isinstance(prediction, ModelPrediction), repr(prediction)
    return decode_batch(space, prediction.response.actions[0].leaves, n).tolist()


def release(env_id: str = "e") -> model_v1.ReleaseAdapterRequest:
    context = model_v1.AdapterContext(env_id=env_id, request_id=f"{env_id}:release_adapter")
    return model_v1.ReleaseAdapterRequest(context=context)


def reset(env_id: str, episode_ids: Sequence[str]) -> model_v1.ResetAdapterRequest:
    context = model_v1.AdapterContext(env_id=env_id, request_id=f"{env_id}:reset_adapter:1")
    return model_v1.ResetAdapterRequest(context=context, episode_ids=list(episode_ids))


# ---------------------------------------------------------------- models and handlers


class Echo(Model):
    def predict(self, observation: Any) -> Any:
        return np.clip(observation / 10, -1, 1)


class Chunky(Model):
    def predict_chunk(self, observation: Any) -> Any:
        return np.stack([np.full(2, 0.1 * j, np.float32) for j in range(4)])


class Handler:
    """A hand-written handler: records each grouped call, answers zeros; ``answer`` may
    replace the answers (or raise)."""

    def __init__(self, answer: Callable[[list[ModelObservation]], Any] | None = None) -> None:
        self.answer = answer
        self.calls: list[list[str]] = []
        self.history_seen: list[int] = []
        self.resets: list[tuple[str, list[str]]] = []

    async def predict_grouped(
        self, observations: list[ModelObservation]
    ) -> list[PredictFrames | Exception]:
        self.calls.append([o.env_id for o in observations])
        self.history_seen += [len(o.history) for o in observations]
        if self.answer is not None:
            return self.answer(observations)  # type: ignore[no-any-return]
        return [PredictFrames([np.zeros(2, np.float32)] * o.num_envs) for o in observations]

    def route_setup(self) -> Handler:
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


# ---------------------------------------------------------------- predicts


@every_seat
async def test_a_resolved_route_predicts_echoes_the_context_and_reports_its_phases(
    seat: Seat,
) -> None:
    async with seat(Echo()) as model:
        assert isinstance(model, RuntimeModel)
        assert model.fuses_predicts
        await model.resolve(resolve_request(BOX_ROUTE, "e"))
        assert not model.wants_history
        request = predict_request("e", [1, 2], request_id="e:step_observation:000001")
        prediction = await model.predict(request)
    assert prediction.response.context == request.context
    assert np.allclose(decoded(prediction, n=2), [[0.1, 0.1], [0.2, 0.2]])
    timings = prediction.timings
    for phase in ("total_ns", "decode_ns", "user_ns", "encode_ns", "adapter_ns"):
        assert getattr(timings, phase) is not None, phase
    assert timings.held_episodes == 0


UNRESOLVED = internal(
    "model 'Echo' has no route for env 'nowhere': model env adapter was not resolved; "
    "resolve the route (ResolveAdapter) before the first predict on it"
)


@every_seat
async def test_a_route_that_was_never_resolved_cannot_predict(seat: Seat) -> None:
    async with seat(Echo()) as model:
        assert await fails(model.predict(predict_request("nowhere", [1]))) == UNRESOLVED


async def test_a_released_route_is_unresolved_again(seat: Seat) -> None:
    # In process, the route's contract once stood in for a released (or never resolved)
    # route; now both seats refuse, as RLMesh's model server does.
    async with seat(Echo()) as model:
        await model.resolve(resolve_request(BOX_ROUTE, "nowhere"))
        assert decoded(await model.predict(predict_request("nowhere", [5]))) == [[0.5, 0.5]]
        await model.release_adapter(release("nowhere"), 5.0)
        assert await fails(model.predict(predict_request("nowhere", [1]))) == UNRESOLVED


async def test_history_rows_on_a_route_that_did_not_negotiate_them_are_refused(
    seat: Seat,
) -> None:
    async with seat(Echo()) as model:
        await model.resolve(resolve_request(BOX_ROUTE, "e", horizon=3))
        assert not model.wants_history  # Echo's route needs no history
        request = _with_history(predict_request("e", [1]))
        assert await fails(model.predict(request)) == internal(
            "model 'Echo' refused a predict request for env 'Box-v0' (route e): it carries "
            "observation history rows but this route did not negotiate history "
            "(ResolveAdapterResponse.history was unset): send rows only to a route that "
            "asked for them"
        )


async def test_a_negotiated_route_takes_its_history_rows(seat: Seat) -> None:
    handler = Handler()
    async with seat(handler) as model:
        answer = await model.resolve(resolve_request(BOX_ROUTE, "e", horizon=3))
        assert answer.history is not None
        assert list(answer.history.keys) == ["<root>"]
        assert model.wants_history
        await model.predict(_with_history(predict_request("e", [1])))
    assert handler.history_seen == [2]


def _with_history(request: model_v1.PredictRequest) -> model_v1.PredictRequest:
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
    return request


async def test_a_handler_that_answers_too_few_groups_fails_the_rest(seat: Seat) -> None:
    handler = Handler(lambda groups: [PredictFrames([np.zeros(2, np.float32)])])
    async with seat(handler) as model:
        for env_id in ("a", "b"):
            await model.resolve(resolve_request(BOX_ROUTE, env_id))
        first, second = await model.predict_group(
            [predict_request("a", [1]), predict_request("b", [2])]
        )
    assert decoded(first) == [[0.0, 0.0]]
    assert words(second) == internal(
        "model 'Handler' returned no result for env 'Box-v0' (route b): predict_grouped "
        "returned fewer results than prepared groups"
    )


def _raise(groups: list[ModelObservation]) -> Any:
    raise ValueError("the handler broke")


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        pytest.param(
            lambda groups: [ModelError("busy", recoverable=True, code="BUSY")],
            ("busy", "BUSY", True),
            id="returned in place",
        ),
        pytest.param(
            _raise,
            internal(
                "model 'Handler' failed model.predict on env 'Box-v0' (route e): "
                "ValueError: the handler broke"
            ),
            id="raised",
        ),
    ],
)
async def test_a_handlers_error_reaches_the_caller_worded_once(
    seat: Seat, answer: Callable[[list[ModelObservation]], Any], expected: tuple[Any, ...]
) -> None:
    # An error the handler returns is its own, as it is; one it raises becomes the
    # model's, naming the model and env once (no seat adds a second layer of context).
    async with seat(Handler(answer)) as model:
        await model.resolve(resolve_request(BOX_ROUTE, "e"))
        assert await fails(model.predict(predict_request("e", [1]))) == expected


async def test_one_bad_group_does_not_sink_the_others(seat: Seat) -> None:
    handler = Handler()
    async with seat(handler) as model:
        for env_id in ("good", "bad"):
            await model.resolve(resolve_request(BOX_ROUTE, env_id))
        bad = predict_request("bad", [1])
        bad.episode_info[0].episode_id = ""
        results = await model.predict_group(
            [predict_request("good", [1]), bad, predict_request("unresolved", [1])]
        )
    good, broken, unresolved = results
    assert decoded(good) == [[0.0, 0.0]]
    assert words(broken) == internal(
        "model 'Handler' refused a predict request for env 'Box-v0' (route bad): its lane 0 "
        "has no episode_id"
    )
    assert words(unresolved)[0].startswith("model 'Handler' has no route for env 'unresolved'")
    assert handler.calls == [["good"]]  # one call, for the group that decoded


async def test_the_whole_group_goes_to_one_handler_call_with_its_phases(seat: Seat) -> None:
    handler = Handler()
    async with seat(handler) as model:
        for env_id in ("a", "b", "c"):
            await model.resolve(resolve_request(BOX_ROUTE, env_id))
        results = await model.predict_group(
            [predict_request("a", [1]), predict_request("b", [2, 3]), predict_request("c", [4])]
        )
    assert handler.calls == [["a", "b", "c"]]
    assert [len(decoded(r, n=n)) for r, n in zip(results, (1, 2, 1), strict=True)] == [1, 2, 1]
    first = results[0]
    assert isinstance(first, ModelPrediction)
    assert (first.timings.adapter_ns, first.timings.held_episodes) == (7, 3)
    assert first.timings.held_state_bytes == 12


@pytest.mark.parametrize(
    ("broken", "problem"),
    [
        ("request_id", "its request_id is empty"),
        ("episodes", "it names no episode"),
        ("observation", "its observation does not decode: "),
    ],
)
async def test_a_bad_request_is_refused_in_the_same_words(
    seat: Seat, broken: str, problem: str
) -> None:
    async with seat(Echo()) as model:
        await model.resolve(resolve_request(BOX_ROUTE, "env-3"))
        text, code, recoverable = await fails(model.predict(broken_request("env-3", broken)))
    assert text.startswith(
        f"model 'Echo' refused a predict request for env 'Box-v0' (route env-3): {problem}"
    )
    assert (code, recoverable) == ("INTERNAL", False)


@pytest.mark.parametrize(
    ("ids", "problem"),
    [
        (["a", "", "a"], "its lane 1 has no episode_id"),
        (["a", "a", ""], "it repeats episode id 'a' (lane 1)"),
        (["a", "b", "a"], "it repeats episode id 'a' (lane 2)"),
        (["a", "b", ""], "its lane 2 has no episode_id"),
    ],
)
async def test_blank_or_repeated_episode_ids_name_the_first_bad_lane(
    seat: Seat, ids: list[str], problem: str
) -> None:
    async with seat(Echo()) as model:
        await model.resolve(resolve_request(BOX_ROUTE, "e"))
        text, _, _ = await fails(model.predict(predict_request("e", [1, 2, 3], ids=ids)))
    assert text == f"model 'Echo' refused a predict request for env 'Box-v0' (route e): {problem}"


# ---------------------------------------------------------------- actions


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
    seat: Seat,
    model_type: type[Bad | BadBatch],
    kind: str,
    route: RouteContract,
    fragment: str,
) -> None:
    async with seat(model_type(kind)) as model:
        await model.resolve(resolve_request(route, "env-7"))
        text, code, recoverable = await fails(model.predict(predict_request("env-7", [1, 2, 3])))
    assert text.startswith(f"model '{model_type.__name__}' ")
    assert f"env {route.env_name!r} (route env-7) lane 1" in text  # name, route id, lane
    assert fragment in text
    assert (code, recoverable) == ("INTERNAL", False)


async def test_the_name_given_is_the_models_name_in_its_errors(seat: Seat) -> None:
    async with seat(Bad("raise"), name="policy-7") as model:
        await model.resolve(resolve_request(DISCRETE_ROUTE, "e"))
        text, _, _ = await fails(model.predict(predict_request("e", [2])))
        assert text.startswith("model 'policy-7' failed on env 'Disc-v0' (route e) lane 0: ")
        unresolved, _, _ = await fails(model.predict(predict_request("elsewhere", [2])))
        assert unresolved.startswith("model 'policy-7' has no route for env 'elsewhere'")


async def test_a_recoverable_decline_stays_recoverable(seat: Seat) -> None:
    class Declines(Model):
        def predict(self, observation: Any) -> Any:
            raise ModelError("not now", recoverable=True)

    async with seat(Declines()) as model:
        await model.resolve(resolve_request(BOX_ROUTE, "e"))
        text, _, recoverable = await fails(model.predict(predict_request("e", [1])))
    assert recoverable
    assert "not now" in text


async def test_actions_out_of_box_bounds_pass_and_discrete_batches_round_trip(
    seat: Seat,
) -> None:
    class Loud(Model):
        def predict(self, observation: Any) -> Any:
            return np.array([5.0, -5.0], np.float32)

    class Pick(Model):
        def predict_batch(self, observations: Any) -> Any:
            return (observations[:, 0] % 3).astype(np.int64)

    async with seat(Loud()) as model:
        await model.resolve(resolve_request(BOX_ROUTE, "e"))
        assert decoded(await model.predict(predict_request("e", [1]))) == [[5.0, -5.0]]
    async with seat(Pick()) as model:
        await model.resolve(resolve_request(DISCRETE_ROUTE, "e"))
        prediction = await model.predict(predict_request("e", [1, 2, 4]))
        assert decoded(prediction, ACT_DISCRETE, 3) == [1, 2, 1]


async def test_a_batch_is_encoded_as_its_lanes_would_be(seat: Seat) -> None:
    async with seat(BadBatch("good")) as model:
        await model.resolve(resolve_request(BOX_ROUTE, "e"))
        prediction = await model.predict(predict_request("e", [1, 2, 30]))
    expected = np.array([[0.1, 0.1], [0.2, 0.2], [1.0, 1.0]], np.float32)
    assert decoded(prediction, n=3) == expected.tolist()


@every_seat
async def test_replay_frames_follow_each_routes_horizon(seat: Seat) -> None:
    async with seat(Chunky()) as model:
        await model.resolve(resolve_request(BOX_ROUTE, "chunked", horizon=3))
        await model.resolve(resolve_request(BOX_ROUTE, "plain"))
        chunked, plain = await model.predict_group(
            [predict_request("chunked", [1, 2]), predict_request("plain", [1])]
        )
    assert isinstance(chunked, ModelPrediction)
    assert isinstance(plain, ModelPrediction)
    assert (len(chunked.response.actions), len(plain.response.actions)) == (3, 1)
    frame = decode_batch(BOX_ROUTE.action_space, chunked.response.actions[2].leaves, 2)
    assert frame[1].tolist() == pytest.approx([0.2, 0.2])


# ---------------------------------------------------------------- routes and episodes


async def test_a_refused_route_is_the_models_error_in_the_same_words(seat: Seat) -> None:
    class Native2(Model):
        native_chunk = 2

        def predict_chunk(self, observation: Any) -> Any:
            return np.zeros((2, 2), np.float32)

    async with seat(Native2()) as model:
        text, code, recoverable = await fails(
            model.resolve(resolve_request(BOX_ROUTE, "e", horizon=4))
        )
    assert text == (
        "model 'Native2' refused the route for env 'Box-v0' (route e): execution_horizon=4 "
        "exceeds model Native2's native_chunk=2: the model cannot supply 4 actions per predict"
    )
    assert (code, recoverable) == ("INVALID_REQUEST", False)


async def test_an_episode_end_reaches_the_route_setup_then_the_handler(seat: Seat) -> None:
    handler = Handler()
    async with seat(handler) as model:
        await model.resolve(resolve_request(BOX_ROUTE, "e"))
        await model.reset_adapter(reset("e", ["x"]))
        # The route stays resolved.
        assert isinstance(await model.predict(predict_request("e", [1])), ModelPrediction)
    assert handler.resets == [("e", ["x"]), ("e", ["x"])]


@pytest.mark.parametrize("operation", ["reset_adapter", "release_adapter"])
async def test_an_episode_end_or_release_without_an_env_id_is_refused(
    seat: Seat, operation: str
) -> None:
    handler = Handler()
    async with seat(handler) as model:
        if operation == "reset_adapter":
            call = model.reset_adapter(model_v1.ResetAdapterRequest(episode_ids=["x"]))
        else:
            call = model.release_adapter(model_v1.ReleaseAdapterRequest(), 5.0)
        assert await fails(call) == (f"{operation} missing env_id", "INVALID_REQUEST", False)
    assert handler.resets == []


async def test_a_failing_episode_end_names_the_model_and_route(seat: Seat) -> None:
    class Fussy(Handler):
        async def reset_adapter(self, env_id: str, episode_ids: Sequence[str]) -> None:
            raise KeyError(env_id)

    async with seat(Fussy()) as model:
        await model.resolve(resolve_request(BOX_ROUTE, "e"))
        assert await fails(model.reset_adapter(reset("e", ["x"]))) == internal(
            "model 'Fussy' failed model.reset_adapter on env 'Box-v0' (route e): KeyError: 'e'"
        )
