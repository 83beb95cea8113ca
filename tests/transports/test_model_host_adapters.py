"""The model host's spec'd path, in every seat the host serves from (see
``test_model_host``): a model that declares a :class:`~trio_rlmesh.adapters.ModelSpec` is
resolved against each route's env tags and adapted on every predict corner, with frame
stacks kept per episode and per lane.

Expected values come from the adapter core itself (:func:`trio_rlmesh.adapters.resolve`,
one :class:`~trio_rlmesh.adapters.Adapter` per episode, stepped by hand), which its own
tests pin against RLMesh's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium
import numpy as np
import pytest

import trio_rlmesh.adapters as adapt
from tests.model.helpers import predict_request, resolve_request
from tests.transports.test_model_host import SEATS, Seat, fails, release, reset, seat
from trio_rlmesh.model import Model, RouteContract
from trio_rlmesh.protocol import model_v1, spaces_v1
from trio_rlmesh.runtime import ModelPrediction
from trio_rlmesh.spaces import decode_batch, encode_batch, from_gymnasium

OBS_GYM = gymnasium.spaces.Dict(
    {
        "cam": gymnasium.spaces.Box(0, 255, (4, 4, 3), np.uint8),
        "pos": gymnasium.spaces.Box(-2.0, 2.0, (3,), np.float32),
        "quat": gymnasium.spaces.Box(-1.0, 1.0, (4,), np.float32),
        "task": gymnasium.spaces.Text(32),
    }
)
ACT_GYM = gymnasium.spaces.Box(-1.0, 1.0, (7,), np.float32)
OBS = from_gymnasium(OBS_GYM)
ACT = from_gymnasium(ACT_GYM)

TAGS = adapt.EnvTags(
    observation={
        "cam": adapt.ImageTag(adapt.IMAGE_PRIMARY),
        "pos": adapt.StateTag(adapt.EEF_POS),
        "quat": adapt.StateTag(adapt.EEF_ROT, encoding="quat_xyzw"),
        "task": adapt.TextTag(adapt.INSTRUCTION),
    },
    action=adapt.Action(
        adapt.Actuator(adapt.ACTION_DELTA_POS, 3),
        adapt.Actuator(adapt.ACTION_DELTA_ROT, 3, encoding="axis_angle"),
        adapt.Actuator(adapt.ACTION_GRIPPER, 1, range=(-1.0, 1.0)),
        clip=(-1.0, 1.0),
    ),
)
SPEC = adapt.ModelSpec(
    input={
        "image": adapt.Image(adapt.IMAGE_PRIMARY, size=2, stack=2),
        "state": adapt.Concat(adapt.EEF_POS, adapt.State(adapt.EEF_ROT, encoding="rot6d")),
        "task": adapt.Text(adapt.INSTRUCTION),
    },
    output=adapt.Action(
        adapt.Actuator(adapt.ACTION_DELTA_POS, 3),
        adapt.Actuator(adapt.ACTION_DELTA_ROT, 6, encoding="rot6d"),
        adapt.Actuator(adapt.ACTION_GRIPPER, 1, range=(0.0, 1.0)),
    ),
)
ARM = RouteContract("Arm-v0", OBS, ACT, metadata=TAGS.to_metadata())
UNTAGGED = RouteContract("Arm-v0", OBS, ACT)


def lane_obs(seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    quat = rng.normal(size=4).astype(np.float32)
    return {
        "cam": rng.integers(0, 256, (4, 4, 3), dtype=np.uint8),
        "pos": rng.uniform(-1, 1, 3).astype(np.float32),
        "quat": quat / np.linalg.norm(quat),
        "task": f"task {seed}",
    }


def policy(payload: dict[str, Any]) -> np.ndarray[Any, Any]:
    """One lane's model action: every value depends on the payload (stack included)."""
    image, state = np.asarray(payload["image"], np.float64), payload["state"]
    older, newer = image[0].mean() / 255, image[1].mean() / 255
    return np.array(
        [older - 0.5, newer - 0.5, state[0], *state[3:9], len(payload["task"]) / 10], np.float32
    )


def as_lanes(payloads: Any, n: int) -> list[dict[str, Any]]:
    return [{key: payloads[key][i] for key in payloads} for i in range(n)]


class Policy(Model):
    """The policy through its ``predict`` corner; every payload it saw, lane by lane."""

    spec = SPEC

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    def one(self, payload: dict[str, Any]) -> Any:
        self.seen.append(payload)
        return policy(payload)

    def predict(self, observation: Any) -> Any:
        return self.one(observation)


class Batched(Policy):
    predict = Model.predict

    def predict_batch(self, observations: Any) -> Any:
        return np.stack([self.one(p) for p in as_lanes(observations, len(observations["task"]))])


class Chunked(Policy):
    predict = Model.predict

    def predict_chunk(self, observation: Any, execution_horizon: int) -> Any:
        return chunk_of(self.one(observation), execution_horizon)


class ChunkBatched(Policy):
    predict = Model.predict

    def predict_chunk_batch(self, observations: Any, execution_horizon: int) -> Any:
        lanes = as_lanes(observations, len(observations["task"]))
        return np.stack([chunk_of(self.one(p), execution_horizon) for p in lanes])


def chunk_of(action: Any, horizon: int) -> Any:
    return np.stack([action * (1 - 0.1 * j) for j in range(horizon)])


CORNERS = {
    "predict": Policy,
    "predict_batch": Batched,
    "predict_chunk": Chunked,
    "predict_chunk_batch": ChunkBatched,
}


def arm_request(
    env_id: str, seeds: Sequence[int], ids: Sequence[str], *, step: int | None = None
) -> model_v1.PredictRequest:
    request = predict_request(env_id, [0.0] * len(seeds), ids=list(ids))
    batch = {
        key: (
            tuple(lane_obs(s)[key] for s in seeds)
            if key == "task"
            else np.stack([lane_obs(s)[key] for s in seeds])
        )
        for key in ("cam", "pos", "quat", "task")
    }
    request.observation = spaces_v1.SpaceValue(leaves=encode_batch(OBS, batch, len(seeds)))
    if step is not None:
        request.step = step
    return request


def env_actions(prediction: object, n: int) -> list[list[float]]:
    assert isinstance(prediction, ModelPrediction), repr(prediction)
    return [decode_batch(ACT, frame.leaves, n).tolist() for frame in prediction.response.actions]


def reference() -> adapt.Adapter:
    return adapt.resolve(TAGS, OBS_GYM, ACT_GYM, SPEC)


def test_the_host_resolves_what_the_adapter_core_resolves() -> None:
    # Sanity of the fixtures: the pairing is the documented one.
    assert "quat_xyzw->rot6d" in reference().explain()


@pytest.mark.parametrize("corner", sorted(CORNERS))
async def test_every_corner_sees_its_payload_and_answers_env_actions(
    seat: Seat, corner: str
) -> None:
    model = CORNERS[corner]()
    lanes = {"ep-a": reference(), "ep-b": reference()}  # one adapter per episode
    async with seat(model) as served:
        await served.resolve(resolve_request(ARM, "arm"))
        for step in range(3):
            seeds = [10 + step, 20 + step]
            got = env_actions(await served.predict(arm_request("arm", seeds, list(lanes))), 2)
            expected = [
                lanes[ep].transform_action(policy(lanes[ep].transform_obs(lane_obs(s)))).tolist()
                for ep, s in zip(lanes, seeds, strict=True)
            ]
            assert len(got) == 1  # horizon 1: no replay frames
            np.testing.assert_allclose(got[0], expected, atol=1e-6)
    # Each lane's stack is its own: at step 1, lane b's older frame is lane b's step-0 frame.
    b0, b1 = model.seen[1], model.seen[3]
    assert np.array_equal(b1["image"][0], b0["image"][1])
    assert np.array_equal(model.seen[0]["image"][0], model.seen[0]["image"][1])  # padded


async def test_an_episode_end_restarts_only_that_episodes_stack(seat: Seat) -> None:
    model = Policy()
    async with seat(model) as served:
        await served.resolve(resolve_request(ARM, "arm"))
        await served.predict(arm_request("arm", [1, 2], ["a", "b"]))
        await served.reset_adapter(reset("arm", ["a"]))
        await served.predict(arm_request("arm", [3, 4], ["a", "b"]))
    _, b_first, a_again, b_second = model.seen
    assert np.array_equal(a_again["image"][0], a_again["image"][1])  # a new stack
    assert np.array_equal(b_second["image"][0], b_first["image"][1])  # b goes on


async def test_a_new_episode_id_on_a_lane_starts_a_new_stack(seat: Seat) -> None:
    model = Policy()
    async with seat(model) as served:
        await served.resolve(resolve_request(ARM, "arm"))
        await served.predict(arm_request("arm", [1], ["first"]))
        await served.predict(arm_request("arm", [2], ["second"]))
    assert np.array_equal(model.seen[1]["image"][0], model.seen[1]["image"][1])


async def test_routes_never_share_a_stack_and_a_release_drops_it(seat: Seat) -> None:
    model = Policy()
    async with seat(model) as served:
        for env_id in ("left", "right"):
            await served.resolve(resolve_request(ARM, env_id))
        # The same episode id on two routes (two fleet endpoints): two stacks.
        await served.predict_group(
            [arm_request("left", [1], ["ep"]), arm_request("right", [2], ["ep"])]
        )
        await served.release_adapter(release("left"), 5.0)
        await served.resolve(resolve_request(ARM, "left"))
        await served.predict_group(
            [arm_request("left", [3], ["ep"]), arm_request("right", [4], ["ep"])]
        )
    left_again, right_second = model.seen[2], model.seen[3]
    assert np.array_equal(left_again["image"][0], left_again["image"][1])  # released: new
    assert np.array_equal(right_second["image"][0], model.seen[1]["image"][1])


async def test_a_chunked_route_asks_for_history_and_rows_slide_the_stack(seat: Seat) -> None:
    model = Chunked()
    ref = reference()
    async with seat(model) as served:
        answer = await served.resolve(resolve_request(ARM, "arm", horizon=3))
        assert answer.history is not None
        assert list(answer.history.keys) == ["image"]
        first = await served.predict(arm_request("arm", [0], ["ep"], step=0))
        request = arm_request("arm", [3], ["ep"], step=3)
        request.history = [_row(seed, "ep") for seed in (1, 2)]
        second = await served.predict(request)
    expected_first = ref.transform_obs(lane_obs(0))
    chunk = chunk_of(policy(expected_first), 3)
    np.testing.assert_allclose(
        env_actions(first, 1), [[ref.transform_chunk(frame)] for frame in chunk], atol=1e-6
    )
    for seed in (1, 2):
        ref.observe(lane_obs(seed))
    payload = ref.transform_obs(lane_obs(3))
    assert np.array_equal(model.seen[1]["image"], payload["image"])
    assert len(env_actions(second, 1)) == 3


def _row(seed: int, episode_id: str) -> model_v1.ObservationHistoryFrame:
    one = {
        key: (value,) if key == "task" else np.asarray(value)[None]
        for key, value in lane_obs(seed).items()
    }
    return model_v1.ObservationHistoryFrame(
        observation=spaces_v1.SpaceValue(leaves=encode_batch(OBS, one, 1)),
        episode=model_v1.EpisodeInfo(episode_id=episode_id),
        step=seed,
    )


async def test_a_spec_on_an_untagged_env_fails_the_route_in_rlmeshs_words(seat: Seat) -> None:
    async with seat(Policy()) as served:
        text, code, recoverable = await fails(served.resolve(resolve_request(UNTAGGED, "arm")))
    assert text == (
        "model 'Policy' cannot be paired with env 'Arm-v0' (route arm): env contract carries no "
        "adapter tags under 'rlmesh.adapters.v1.env_tags'; serve the env with "
        "rlmesh.adapters.tag(...); change the model's spec or the env's tags (trio-rlmesh "
        "explain shows the pairing)"
    )
    assert (code, recoverable) == ("INVALID_REQUEST", False)


async def test_a_pairing_that_cannot_work_names_model_env_and_input(seat: Seat) -> None:
    class Joints(Model):
        spec = adapt.ModelSpec({"q": adapt.State(adapt.JOINT_POS)}, SPEC.output)

        def predict(self, observation: Any) -> Any:
            raise AssertionError("never called")

    async with seat(Joints()) as served:
        text, _, _ = await fails(served.resolve(resolve_request(ARM, "arm")))
    assert text.startswith("model 'Joints' cannot be paired with env 'Arm-v0' (route arm): ")
    assert 'model input "q" needs state role "proprio/joint_pos"' in text


async def test_a_spec_set_in_load_is_the_one_resolved(seat: Seat) -> None:
    class Late(Policy):
        spec = None

        def load(self) -> None:
            self.spec = SPEC

    model = Late()
    async with seat(model) as served:
        await served.resolve(resolve_request(ARM, "arm"))
        await served.predict(arm_request("arm", [1], ["ep"]))
    assert sorted(model.seen[0]) == ["image", "state", "task"]


async def test_a_model_action_of_the_wrong_width_is_the_models_error(seat: Seat) -> None:
    class Short(Policy):
        def predict(self, observation: Any) -> Any:
            return np.zeros(4, np.float32)

    async with seat(Short()) as served:
        await served.resolve(resolve_request(ARM, "arm"))
        text, code, _ = await fails(served.predict(arm_request("arm", [1], ["ep"])))
    assert text == (
        "model 'Short' could not adapt env 'Arm-v0' (route arm): expected 10-dim model "
        "action, got shape (4,)"
    )
    assert code == "INTERNAL"


def test_the_seats_are_the_host_suites() -> None:
    assert sorted(SEATS) == ["in-process", "served"]


__all__ = ["seat"]  # the host suite's fixture, used here


class Recalls(Model):
    """Reads its own previous gripper action; answers a chunk whose frames all differ."""

    spec = adapt.ModelSpec(
        {"pos": adapt.State(adapt.EEF_POS), "last": adapt.Previous(adapt.ACTION_GRIPPER)},
        SPEC.output,
    )

    def __init__(self) -> None:
        self.seen: list[float] = []

    def predict_chunk(self, observation: Any, execution_horizon: int) -> Any:
        self.seen.append(float(observation["last"][0]))
        base = np.zeros(10, np.float32)
        return np.stack([base + 0.1 * (j + 1) for j in range(execution_horizon)])


async def test_previous_reads_the_frame_executed_at_the_step_before(seat: Seat) -> None:
    # A chunk of 3: frames 0.1, 0.2, 0.3 execute at steps 0, 1, 2; the predict at step 3
    # reads step 2's action (0.3), recorded when step 2's row arrived.
    model = Recalls()
    async with seat(model) as served:
        answer = await served.resolve(resolve_request(ARM, "arm", horizon=3))
        assert answer.history is not None
        await served.predict(arm_request("arm", [0], ["ep"], step=0))
        request = arm_request("arm", [3], ["ep"], step=3)
        request.history = [_row(seed, "ep") for seed in (1, 2)]
        await served.predict(request)
    assert model.seen == [0.0, pytest.approx(0.3)]


@pytest.mark.parametrize(
    ("horizon", "delivers", "keys"),
    [(1, True, ["image"]), (1, False, None), (3, True, ["image"])],
)
async def test_a_stacked_route_asks_for_history_whenever_it_is_offered(
    seat: Seat, horizon: int, delivers: bool, keys: list[str] | None
) -> None:
    # RLMesh's model server's answer: the history keys whenever the runtime offers rows.
    async with seat(Policy()) as served:
        request = resolve_request(ARM, "arm", horizon=horizon, delivers_history=delivers)
        answer = await served.resolve(request)
    assert (list(answer.history.keys) if answer.history is not None else None) == keys


async def test_a_stacked_route_without_history_at_a_horizon_is_refused(seat: Seat) -> None:
    async with seat(Chunked()) as served:
        request = resolve_request(ARM, "arm", horizon=3, delivers_history=False)
        text, code, recoverable = await fails(served.resolve(request))
    assert text == (
        "model 'Chunked' refused the route for env 'Arm-v0' (route arm): frame-stacking "
        "(input 'image' stack=2) needs every env step, but the runtime did not offer "
        "observation history (delivers_history) at execution_horizon=3: the window would hold "
        "only decision-point frames. Use a runtime that delivers history, stack=1 (or no "
        "Previous part), or execution_horizon=1."
    )
    assert (code, recoverable) == ("INTERNAL", False)


class _Clock:
    """``time`` for the host: ``perf_counter_ns`` moves only when a test moves it."""

    def __init__(self) -> None:
        self.now = 0

    def perf_counter_ns(self) -> int:
        return self.now


async def test_each_predict_reports_its_own_adapter_time_apart_from_decode_and_encode(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from trio_rlmesh.transports._modelhost import ModelHost, _host

    clock = _Clock()
    monkeypatch.setattr(_host, "time", clock)
    host = ModelHost.open(Policy(), user_code="inline")
    await host.resolve(resolve_request(ARM, "arm"))
    route = host.routes["arm"].adapter
    assert route is not None
    payload, actions = route.payload, route.actions

    def slow_payload(group: Any) -> Any:
        clock.now += 1000
        return payload(group)

    def slow_actions(group: Any, frames: Any) -> Any:
        clock.now += 100
        return actions(group, frames)

    monkeypatch.setattr(route, "payload", slow_payload)
    monkeypatch.setattr(route, "actions", slow_actions)
    first = host.plan([arm_request("arm", [1], ["ep-a"])])
    second = host.plan([arm_request("arm", [2], ["ep-b"])])  # decoded while the first waits
    for plan in (second, first):
        await host.call(plan)
        host.finish(plan)
    for plan in (first, second):
        assert isinstance(plan.results[0], model_v1.PredictResponse), plan.results
        assert (plan.host_adapter_ns, plan.decode_ns, plan.encode_ns) == (1100, 0, 0)
