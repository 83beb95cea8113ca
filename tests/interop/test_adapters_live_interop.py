"""RLMesh's live adapter scenarios with RLMesh's servers swapped for ours.

RLMesh's own suite (``integration/test_adapters_live.py`` in its repository) serves a tagged
env with ``rlmesh.EnvServer`` and a spec'd model with ``Model.serve``, and drives them with its
client and runtime. Here the same scenarios run with our ``serve_env`` and ``serve_model`` in
those seats, driven by the real ``rlmesh`` 0.1.0 client and runtime:

* a spec'd RLMesh model runs against our tagged env server: the tags survive the contract,
  the model sees its payload, the env gets 7-D actions;
* RLMesh resolves an adapter from our server's contract and explains it;
* our served spec'd model resolves its adapter when RLMesh configures the route, and adapts
  every step of RLMesh's session loop;
* our served frame-stacking model stacks per episode (padded at step 0, sliding after);
* our served chunking spec'd model answers RLMesh's ``RemoteModel.session(execution_horizon=2)``
  with one chunk per two steps;
* our served spec'd model meeting an untagged env refuses the route, in RLMesh's words.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import trio

import trio_rlmesh.adapters as adapt
from trio_rlmesh.model import Model
from trio_rlmesh.transports.grpc import serve_env, serve_model

pytestmark = [pytest.mark.interop, pytest.mark.network]

GUARD = 120.0
EDITION = "2026.06"


class Reacher(gym.Env[dict[str, Any], np.ndarray]):
    """Three steps an episode; a small camera, the end effector, a gripper, an instruction.
    Keeps every action it was given."""

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 - gymnasium's convention

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Dict(
            {
                "cam": gym.spaces.Box(0, 255, (8, 8, 3), np.uint8),
                "eef_pos": gym.spaces.Box(-np.inf, np.inf, (3,), np.float32),
                "eef_quat": gym.spaces.Box(-np.inf, np.inf, (4,), np.float32),
                "gripper": gym.spaces.Box(-np.inf, np.inf, (1,), np.float32),
                "instruction": gym.spaces.Text(max_length=64),
            }
        )
        self.action_space = gym.spaces.Box(-1.0, 1.0, (7,), np.float32)
        self.t = 0
        self.actions: list[np.ndarray] = []

    def _obs(self) -> dict[str, Any]:
        rng = np.random.default_rng(100 + self.t)
        quat = rng.normal(size=4).astype(np.float32)
        return {
            "cam": rng.integers(0, 256, (8, 8, 3), dtype=np.uint8),
            "eef_pos": rng.normal(size=3).astype(np.float32),
            "eef_quat": quat / np.linalg.norm(quat),
            "gripper": np.array([0.03], np.float32),
            "instruction": "open the drawer",
        }

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        self.actions.append(np.asarray(action, np.float32))
        self.t += 1
        return self._obs(), 1.0, self.t >= 3, False, {}


def tags(package: Any) -> Any:
    return package.EnvTags(
        observation={
            "cam": package.ImageTag(role=package.IMAGE_PRIMARY),
            "eef_pos": package.StateTag(role=package.EEF_POS),
            "eef_quat": package.StateTag(role=package.EEF_ROT, encoding="quat_xyzw"),
            "gripper": package.StateTag(role=package.GRIPPER_POS),
            "instruction": package.TextTag(role=package.INSTRUCTION),
        },
        action=package.Action(
            package.Actuator(package.ACTION_DELTA_POS, dim=3),
            package.Actuator(package.ACTION_DELTA_ROT, dim=3, encoding="axis_angle"),
            package.Actuator(package.ACTION_GRIPPER, dim=1, range=(-1.0, 1.0)),
            clip=(-1.0, 1.0),
        ),
    )


def spec(package: Any, *, stack: int = 1, everything: bool = True) -> Any:
    image = package.Image(role=package.IMAGE_PRIMARY, height=8, width=8, stack=stack)
    inputs: dict[str, Any] = {"image": image}
    if everything:
        inputs["state"] = package.Concat(
            package.EEF_POS,
            package.State(package.EEF_ROT, encoding="axis_angle"),
            package.GRIPPER_POS,
            container="list",
        )
        inputs["instruction"] = package.Text(role=package.INSTRUCTION)
    return package.ModelSpec(
        input=inputs,
        output=package.Action(
            package.Actuator(package.ACTION_DELTA_POS, dim=3),
            package.Actuator(package.ACTION_DELTA_ROT, dim=3, encoding="axis_angle"),
            package.Actuator(package.ACTION_GRIPPER, dim=1, range=(-1.0, 1.0)),
        ),
    )


def wheel() -> Any:
    return pytest.importorskip("rlmesh.adapters")


@asynccontextmanager
async def our_env(env: Reacher, *, tagged: bool = True) -> AsyncIterator[str]:
    served = adapt.tag(env, tags(adapt)) if tagged else env
    async with trio.open_nursery() as nursery:
        yield await nursery.start(serve_env, served, "127.0.0.1:0")
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def our_model(model: Model) -> AsyncIterator[str]:
    async with trio.open_nursery() as nursery:
        address = await nursery.start(functools.partial(serve_model, model, "127.0.0.1:0"))
        yield f"tcp://{address}"
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def rlmesh_env(env: Reacher, *, tagged: bool = True) -> AsyncIterator[str]:
    """RLMesh's env server, in a thread of this process, serving ``env`` (so the test sees
    its actions)."""
    import rlmesh

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the edition is not pinned by the env
        if tagged:
            server = rlmesh.EnvServer(env, "127.0.0.1:0", tags=tags(wheel()))
        else:
            server = rlmesh.EnvServer(env, "127.0.0.1:0")
    server.start()
    try:
        yield server.address
    finally:
        await trio.to_thread.run_sync(server.shutdown)


def in_thread(call: Callable[[], Any]) -> Any:
    def quiet() -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return call()

    return trio.to_thread.run_sync(quiet)


def session_loop(model_address: str, env_address: str, steps: int) -> None:
    """RLMesh's session loop, a predict and a step at a time, over RemoteModel and RemoteEnv."""
    import rlmesh
    from rlmesh.numpy import RemoteEnv

    env = RemoteEnv(env_address)
    sess = rlmesh.session(rlmesh.RemoteModel(model_address), env, workflow_edition=EDITION)
    try:
        obs, _ = sess.reset(seed=0)
        for _ in range(steps):
            if sess.done:
                break
            obs, *_ = sess.step(sess.predict(obs))
    finally:
        sess.close()
        env.close()


class Recording(Model):
    """Our spec'd model: remembers every payload, answers a zero action."""

    def __init__(self, model_spec: adapt.ModelSpec) -> None:
        self.spec = model_spec
        self.payloads: list[dict[str, Any]] = []

    def predict(self, payload: Any) -> Any:
        self.payloads.append(payload)
        return np.zeros(7, np.float32)


async def test_a_specd_rlmesh_model_runs_against_our_tagged_env_server() -> None:
    from rlmesh.numpy import Model as WheelModel
    from rlmesh.numpy import RemoteEnv

    env = Reacher()
    keys: list[list[str]] = []

    def predict(payload: dict[str, Any]) -> Any:
        keys.append(sorted(payload))
        return np.zeros(7, np.float32)

    def drive(address: str) -> Any:
        client = RemoteEnv(address)
        try:
            recovered = wheel().EnvTags.from_metadata(client.env_contract.metadata or {})
            WheelModel(predict, spec=spec(wheel())).run(client, episodes=1)
        finally:
            client.close()
        return recovered

    with trio.fail_after(GUARD):
        async with our_env(env) as address:
            recovered = await in_thread(lambda: drive(address))
    assert recovered == tags(wheel())
    assert keys[0] == ["image", "instruction", "state"]
    assert [action.shape for action in env.actions] == [(7,)] * 3


async def test_rlmesh_resolves_and_explains_from_our_servers_contract() -> None:
    from rlmesh.numpy import RemoteEnv

    def explain(address: str) -> str:
        client = RemoteEnv(address)
        try:
            return str(wheel().resolve_from_contract(client.env_contract, spec(wheel())).explain())
        finally:
            client.close()

    with trio.fail_after(GUARD):
        async with our_env(Reacher()) as address:
            text = await in_thread(lambda: explain(address))
    assert 'image "cam"' in text
    assert "quat_xyzw->axis_angle" in text


async def test_our_served_specd_model_resolves_at_route_configuration() -> None:
    pytest.importorskip("rlmesh")
    env, model = Reacher(), Recording(spec(adapt))
    with trio.fail_after(GUARD):
        async with rlmesh_env(env) as env_address, our_model(model) as model_address:
            await in_thread(lambda: session_loop(model_address, env_address, 5))
    assert sorted(model.payloads[0]) == ["image", "instruction", "state"]
    assert model.payloads[0]["instruction"] == "open the drawer"
    assert isinstance(model.payloads[0]["state"], list)  # container="list"
    assert [action.shape for action in env.actions] == [(7,)] * 3


async def test_our_served_frame_stacking_model_stacks_per_episode() -> None:
    pytest.importorskip("rlmesh")
    env, model = Reacher(), Recording(spec(adapt, stack=2, everything=False))
    with trio.fail_after(GUARD):
        async with rlmesh_env(env) as env_address, our_model(model) as model_address:
            await in_thread(lambda: session_loop(model_address, env_address, 3))
    images = [np.asarray(payload["image"]) for payload in model.payloads]
    assert len(images) >= 2
    assert images[0].shape[0] == 2
    np.testing.assert_array_equal(images[0][0], images[0][1])  # padded with the first frame
    assert not np.array_equal(images[1][0], images[1][1])  # the window slid
    np.testing.assert_array_equal(images[1][0], images[0][1])  # the episode goes on


async def test_our_served_chunking_specd_model_serves_rlmeshs_mini_driver() -> None:
    import rlmesh
    from rlmesh.numpy import RemoteEnv

    calls = {"predict_chunk": 0, "horizon": 0}

    class Chunks(Model):
        def predict_chunk(self, payload: Any, execution_horizon: int = 1) -> Any:
            calls["predict_chunk"] += 1
            calls["horizon"] = execution_horizon
            return np.zeros((2, 7), np.float32)

    Chunks.spec = spec(adapt)
    env = Reacher()

    def drive(model_address: str, env_address: str) -> None:
        client = RemoteEnv(env_address)
        sess = rlmesh.RemoteModel(model_address).session(
            client, execution_horizon=2, workflow_edition=EDITION
        )
        try:
            sess.run(episodes=1)
        finally:
            sess.close()
            client.close()

    with trio.fail_after(GUARD):
        async with rlmesh_env(env) as env_address, our_model(Chunks()) as model_address:
            await in_thread(lambda: drive(model_address, env_address))
    assert calls == {"predict_chunk": 2, "horizon": 2}
    assert len(env.actions) == 3


async def test_our_served_specd_model_refuses_an_untagged_env_in_rlmeshs_words() -> None:
    pytest.importorskip("rlmesh")
    with trio.fail_after(GUARD):
        async with (
            rlmesh_env(Reacher(), tagged=False) as env_address,
            our_model(Recording(spec(adapt))) as model_address,
        ):
            with pytest.raises(Exception, match="no adapter tags") as caught:
                await in_thread(lambda: session_loop(model_address, env_address, 1))
    assert "serve the env with rlmesh.adapters.tag(...)" in str(caught.value)


async def test_a_served_specd_model_answers_route_configuration_as_rlmeshs() -> None:
    """RLMesh's served spec'd model and ours, asked to configure the same routes: the same
    answers (history keys), and the same refusals (RLMesh's words inside ours)."""
    from tests.interop import envs
    from tests.interop.test_model_interop import rlmesh_model_server
    from trio_rlmesh import ModelError
    from trio_rlmesh.runtime._internal import route_request
    from trio_rlmesh.transports.grpc import open_env_client, open_model_client

    arm = envs.arm_example()
    cases = [("arm", 1, True), ("arm", 1, False), ("arm", 3, True), ("arm", 3, False)]
    cases.append(("untagged", 1, True))
    answers: dict[str, list[Any]] = {}
    with trio.fail_after(GUARD):
        async with trio.open_nursery() as nursery:
            tagged = await nursery.start(serve_env, arm.make_env(), "127.0.0.1:0")
            untagged = await nursery.start(serve_env, arm.ArmEnv(), "127.0.0.1:0")
            specs = {}
            for kind, address in (("arm", tagged), ("untagged", untagged)):
                async with open_env_client(address) as client:
                    specs[kind] = client.contract.spec
            async with (
                our_model(arm.ReachPolicy()) as ours,
                rlmesh_model_server("tests.interop.models:RlmeshArm") as theirs,
            ):
                for name, address in (("ours", ours), ("theirs", theirs)):
                    answers[name] = []
                    async with open_model_client(address) as client:
                        for kind, horizon, delivers in cases:
                            request = route_request(
                                "e",
                                specs[kind],
                                execution_horizon=horizon,
                                delivers_history=delivers,
                            )
                            try:
                                answer = await client.resolve_adapter(request)
                            except ModelError as exc:
                                answers[name].append(exc.message)
                            else:
                                history = answer.history
                                answers[name].append(list(history.keys) if history else None)
            nursery.cancel_scope.cancel()
    mine, wheel_answers = answers["ours"], answers["theirs"]
    assert mine[:3] == wheel_answers[:3] == [["image"], None, ["image"]]
    stacked = wheel_answers[3].removeprefix("model error: ")
    assert stacked.startswith("frame-stacking (input 'image' stack=2) needs every env step")
    assert mine[3].endswith(stacked)
    no_tags = "env contract carries no adapter tags under 'rlmesh.adapters.v1.env_tags'"
    assert no_tags in wheel_answers[4]
    assert no_tags in mine[4]
