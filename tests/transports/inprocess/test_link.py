"""``link_in_process``: an in-process env and model pass values as they are, never as bytes."""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np

import trio_rlmesh
from trio_rlmesh.model import Model, RouteContract
from trio_rlmesh.model import _wire as model_wire
from trio_rlmesh.model._internal import observation_from_request
from trio_rlmesh.protocol import env_v1, model_v1, spaces_v1
from trio_rlmesh.protocol._internal import CarriedValue
from trio_rlmesh.runtime import ActionReceived, ObservationEmitted, RuntimeHooks, StepCompleted
from trio_rlmesh.runtime import _events as runtime_events
from trio_rlmesh.spaces import decode_batch, encode_batch
from trio_rlmesh.transports._envhost import _values as envhost_values
from trio_rlmesh.transports.inprocess import (
    GymEnvRuntimeEnv,
    ModelHandlerRuntimeModel,
    link_in_process,
)


class Seen(Model):
    """Keeps every observation it was given and answers 1."""

    def __init__(self) -> None:
        self.observations: list[Any] = []

    def predict(self, observation: Any) -> Any:
        self.observations.append(observation)
        return np.int64(1)


class Recording(gymnasium.Wrapper[Any, Any, Any, Any]):
    """Keeps every action the env was given."""

    def __init__(self, env: gymnasium.Env[Any, Any]) -> None:
        super().__init__(env)
        self.actions: list[Any] = []

    def step(self, action: Any) -> Any:
        self.actions.append(action)
        return self.env.step(action)


def test_link_only_pairs_an_in_process_env_with_an_in_process_model() -> None:
    env = GymEnvRuntimeEnv(gymnasium.make("CartPole-v1"), user_code="inline")
    model = ModelHandlerRuntimeModel(Seen(), user_code="inline")
    assert not env.carry_values
    assert not model.carry_values
    assert not link_in_process(env, object())
    assert not link_in_process(object(), model)
    assert not env.carry_values
    assert not model.carry_values
    assert link_in_process(env, model)
    assert env.carry_values
    assert model.carry_values


async def test_a_linked_env_answers_carried_observations_with_the_same_bytes() -> None:
    plain = GymEnvRuntimeEnv(gymnasium.make("CartPole-v1"), user_code="inline")
    linked = GymEnvRuntimeEnv(gymnasium.make("CartPole-v1"), user_code="inline")
    linked.carry_values = True
    request = env_v1.ResetRequest(seeds=[7], episode_ids=["e1"])
    expected = (await plain.reset(request)).response.observation
    carried = (await linked.reset(request)).response.observation
    assert type(expected) is spaces_v1.SpaceValue
    assert isinstance(carried, CarriedValue)
    assert carried.leaves == expected.leaves
    space = linked.host.gate.observation_space
    np.testing.assert_array_equal(carried.batch, decode_batch(space, expected.leaves, 1))
    assert not carried.batch.flags.writeable
    # Actions arrive carried too: the env takes the batch, no bytes are read.
    action = CarriedValue(linked.host.gate.action_space, np.array([1]), 1)
    step = env_v1.StepRequest(action=action, episode_ids=["e1"])
    stepped = (await linked.step(step)).response
    assert action._leaves is None  # never encoded
    wire = env_v1.StepRequest(
        action=spaces_v1.SpaceValue(leaves=encode_batch(linked.host.gate.action_space, [1], 1)),
        episode_ids=["e1"],
    )
    assert (await plain.step(wire)).response.observation.leaves == stepped.observation.leaves


async def test_run_links_an_env_object_and_a_model_object(monkeypatch: Any) -> None:
    """``run(model, env)`` passes values: the model sees the env's observations and the env
    the model's actions with no bytes in between."""
    decoded: list[Any] = []

    def counting(*args: Any) -> Any:
        decoded.append(args)
        return decode_batch(*args)

    monkeypatch.setattr(model_wire, "decode_batch", counting)
    monkeypatch.setattr(envhost_values, "decode_batch", counting)

    class Hooks(RuntimeHooks):
        def __init__(self) -> None:
            self.raw: list[tuple[bytes, ...]] = []

        async def step_completed(self, event: StepCompleted) -> None:
            self.raw.append(event._raw_observation)

    model, env, hooks = Seen(), Recording(gymnasium.make("CartPole-v1")), Hooks()
    report = await trio_rlmesh.run_local(
        model, trio_rlmesh.RunLocalOptions(env, episode_seeds=(3,), max_episodes=1), hooks=hooks
    )
    assert report.status == "completed"
    assert report.total_steps == len(env.actions) == len(model.observations)
    assert decoded == []
    # Read-only snapshots, as a decoded observation is; and the raw leaves a hook (the
    # recorder) reads are the bytes of the very observations the model saw.
    assert all(not obs.flags.writeable for obs in model.observations)
    # (The model sees each step's observation but the last, the terminal one.)
    assert [raw[0] for raw in hooks.raw[:-1]] == [o.tobytes() for o in model.observations[1:]]
    assert all(type(action) is np.int64 for action in env.actions)


def test_a_model_request_with_a_carried_observation_decodes_nothing() -> None:
    # The model adapter takes the batch itself (identity), not a decode of its bytes.
    space = GymEnvRuntimeEnv(gymnasium.make("CartPole-v1")).host.gate.observation_space
    batch = np.zeros((1, 4), np.float32)
    batch.flags.writeable = False
    value = CarriedValue(space, batch, 1)
    contract = RouteContract("CartPole-v1", observation_space=space, action_space=space)
    request = model_v1.PredictRequest(
        context=model_v1.AdapterContext(session_id="s", env_id="e", request_id="r"),
        observation=value,
        episode_info=[model_v1.EpisodeInfo(episode_id="ep", seed=0)],
    )
    assert observation_from_request(request, contract).observation is batch
    assert value._leaves is None


async def test_hooks_of_a_linked_run_get_the_carried_batches(monkeypatch: Any) -> None:
    """Observation and action hooks receive the very batches that passed, decoding nothing."""
    decoded: list[Any] = []

    def counting(*args: Any) -> Any:
        decoded.append(args)
        return decode_batch(*args)

    for module in (model_wire, envhost_values, runtime_events):
        monkeypatch.setattr(module, "decode_batch", counting)

    class Hooks(RuntimeHooks):
        def __init__(self) -> None:
            self.observations: list[Any] = []
            self.actions: list[Any] = []

        async def observation_emitted(self, event: ObservationEmitted) -> None:
            self.observations.append(event.observation)

        async def action_received(self, event: ActionReceived) -> None:
            self.actions.append(event.action)

    model, env, hooks = Seen(), Recording(gymnasium.make("CartPole-v1")), Hooks()
    report = await trio_rlmesh.run_local(
        model, trio_rlmesh.RunLocalOptions(env, episode_seeds=(5,), max_episodes=1), hooks=hooks
    )
    assert report.status == "completed"
    assert decoded == []
    seen = hooks.observations[: len(model.observations)]
    assert all(not batch.flags.writeable for batch in seen)
    assert [b[0].tobytes() for b in seen] == [o.tobytes() for o in model.observations]
    assert [int(a[0]) for a in hooks.actions] == [int(a) for a in env.actions]
