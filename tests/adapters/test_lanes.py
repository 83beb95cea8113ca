"""Many lanes, one plan: lanes and chunks give what one adapter per lane gives, step by step.

The lane API (``new_episode``, ``transform_obs_lanes``, ``observe_lanes``,
``transform_action_lanes``, ``transform_chunk``, ``record_action``) is trio-rlmesh's own; its
answers are held to the single-env API's (itself held to RLMesh's by ``test_pairings.py``):
each lane keeps its own frame windows and previous action, and a reset of one lane touches
no other.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from trio_rlmesh import adapters as adapt

from . import pairings

LANES = 3

#: Pairings that resolve (the error ones have no steps to run).
RUNNABLE = sorted(
    name
    for name, golden in pairings.load_golden().items()
    if "error" not in golden and all("error" not in step for step in golden["steps"])
)


def _resolve(pairing: pairings.Pairing) -> adapt.Adapter:
    return adapt.resolve(
        pairing.tags, pairing.observation_space, pairing.action_space, pairing.spec
    )


def _lane_inputs(pairing: pairings.Pairing, lane: int) -> tuple[list[Any], list[Any]]:
    """Lane ``lane``'s observations and outputs: the pairing's, rotated (lanes differ)."""
    count = len(pairing.observations)
    order = [(step + lane) % count for step in range(count)]
    return [pairing.observations[i] for i in order], [pairing.outputs[i] for i in order]


def _stacked(singles: list[Any]) -> Any:
    """One payload per lane as a lane payload: every leaf gains a leading lane axis."""
    first = singles[0]
    if isinstance(first, dict):
        return {key: _stacked([s[key] for s in singles]) for key in first}
    if isinstance(first, np.ndarray):
        return np.stack(singles)
    if isinstance(first, list) and first and isinstance(first[0], (dict, list, np.ndarray)):
        return [_stacked([s[i] for s in singles]) for i in range(len(first))]
    if isinstance(first, (int, float)) and not isinstance(first, bool):
        return np.asarray(singles)
    return list(singles)


def _assert_same(got: Any, want: Any, where: str) -> None:
    if isinstance(want, dict):
        assert isinstance(got, dict), where
        assert list(got) == list(want), where
        for key in want:
            _assert_same(got[key], want[key], f"{where}.{key}")
    elif isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray), where
        assert got.dtype == want.dtype, where
        assert got.shape == want.shape, where
        np.testing.assert_array_equal(got, want, err_msg=where)
    elif isinstance(want, list) and any(isinstance(w, (dict, list, np.ndarray)) for w in want):
        assert isinstance(got, list), where
        assert len(got) == len(want), where
        for index, (a, b) in enumerate(zip(got, want, strict=True)):
            _assert_same(a, b, f"{where}[{index}]")
    else:
        assert got == want, where


@pytest.mark.parametrize("name", RUNNABLE)
def test_lanes_answer_as_one_adapter_per_lane(name: str) -> None:
    pairing = pairings.build(adapt, name)
    shared = _resolve(pairing)
    singles = [_resolve(pairing) for _ in range(LANES)]
    episodes = [shared.new_episode(f"lane-{lane}") for lane in range(LANES)]
    inputs = [_lane_inputs(pairing, lane) for lane in range(LANES)]
    for step in range(len(pairing.observations)):
        if step in pairing.reset_at:  # only lane 0 starts over: the others keep going
            episodes[0] = shared.new_episode("lane-0")
            singles[0].reset()
        obs = [inputs[lane][0][step] for lane in range(LANES)]
        out = np.stack([inputs[lane][1][step] for lane in range(LANES)])
        if step in pairing.observe_at:
            shared.observe_lanes(obs, episodes)
            for lane in range(LANES):
                singles[lane].observe(obs[lane])
        else:
            got = shared.transform_obs_lanes(obs, episodes)
            want = _stacked([singles[lane].transform_obs(obs[lane]) for lane in range(LANES)])
            _assert_same(got, want, f"{name} step {step} payload")
        actions = shared.transform_action_lanes(out, episodes)
        want_actions = np.stack([singles[i].transform_action(out[i]) for i in range(LANES)])
        np.testing.assert_array_equal(actions, want_actions, err_msg=f"{name} step {step}")
        assert actions.dtype == np.float32


@pytest.mark.parametrize("name", RUNNABLE)
def test_chunks_convert_frame_by_frame(name: str) -> None:
    pairing = pairings.build(adapt, name)
    adapter = _resolve(pairing)
    chunk = np.stack(pairing.outputs)  # (H, model_dim)
    got = adapter.transform_chunk(chunk)
    assert got.shape[0] == len(chunk)
    assert got.dtype == np.float32
    frames = np.stack([_resolve(pairing).transform_action(frame) for frame in chunk])
    np.testing.assert_array_equal(got, frames)
    lanes = np.stack([chunk, chunk[::-1]])  # (N, H, model_dim)
    batched = adapter.transform_chunk(lanes, lanes=2)
    np.testing.assert_array_equal(batched, np.stack([frames, frames[::-1]]))


def _previous_pairing() -> pairings.Pairing:
    return pairings.build(adapt, "action_part_bound_implicitly")


def test_chunk_frames_recorded_as_executed_feed_previous() -> None:
    pairing = _previous_pairing()
    adapter = _resolve(pairing)
    single = _resolve(pairing)
    episode = adapter.new_episode("e")
    obs, out = pairing.observations, pairing.outputs
    # Step 0 predicts a chunk of three frames; steps 1 and 2 replay its queued frames.
    payload = adapter.transform_obs_lanes([obs[0]], [episode])
    chunk = adapter.transform_chunk(np.stack(out))
    adapter.record_action(episode, out[0])
    _assert_same(payload, _stacked([single.transform_obs(obs[0])]), "step 0")
    np.testing.assert_array_equal(chunk[0], single.transform_action(out[0]))
    for step in (1, 2):
        adapter.observe_lanes([obs[step]], [episode])
        adapter.record_action(episode, out[step])
        single.observe(obs[step])
        np.testing.assert_array_equal(chunk[step], single.transform_action(out[step]))
    # The next prediction reads the last executed frame's gripper value.
    last = adapter.transform_obs_lanes([obs[0]], [episode])
    np.testing.assert_array_equal(last["prev"], [out[2][:1]])
    _assert_same(last, _stacked([single.transform_obs(obs[0])]), "step 3")


def test_a_lane_missing_its_previous_action_is_named() -> None:
    adapter = _resolve(_previous_pairing())
    obs = _previous_pairing().observations
    episodes = [adapter.new_episode("a"), adapter.new_episode("b")]
    adapter.transform_obs_lanes([obs[0], obs[0]], episodes)
    adapter.record_action(episodes[0], np.zeros(1, np.float32))
    with pytest.raises(ValueError, match="episode b: the observation at step 1"):
        adapter.transform_obs_lanes([obs[1], obs[1]], episodes)


def test_lanes_keep_their_own_windows() -> None:
    pairing = pairings.build(adapt, "stack_first_reset")
    adapter = _resolve(pairing)
    obs = pairing.observations
    a, b = adapter.new_episode(), adapter.new_episode()
    adapter.transform_obs_lanes([obs[0]], [a])  # lane a has seen a frame; lane b has not
    both = adapter.transform_obs_lanes([obs[1], obs[1]], [a, b])["wrist"]
    fresh = _resolve(pairing).transform_obs(obs[1])["wrist"]
    np.testing.assert_array_equal(both[1], fresh)  # b's window is its first frame, twice
    assert not np.array_equal(both[0], both[1])
    assert a.step == 1
    assert b.step == 0


def test_lane_counts_must_agree() -> None:
    pairing = pairings.build(adapt, "openvla_like")
    adapter = _resolve(pairing)
    with pytest.raises(ValueError, match="2 observations but 1 episodes"):
        adapter.transform_obs_lanes(pairing.observations[:2], [adapter.new_episode()])


def test_lanes_of_different_widths_are_refused() -> None:
    pairing = pairings.build(adapt, "bare_leaf_payload")
    adapter = _resolve(pairing)
    good = pairing.observations[0]
    bad = dict(good, grip=np.zeros(2, np.float32))
    lanes = [adapter.new_episode(), adapter.new_episode()]
    with pytest.raises(ValueError):
        adapter.transform_obs_lanes([good, bad], lanes)


def test_single_env_api_is_one_lane() -> None:
    pairing = pairings.build(adapt, "states_all_features")
    adapter = _resolve(pairing)
    episode = adapter.new_episode()
    for obs, out in zip(pairing.observations, pairing.outputs, strict=True):
        lane = adapter.transform_obs_lanes([obs], [episode])
        single = adapter.transform_obs(obs)
        np.testing.assert_array_equal(lane["state"][0], single["state"])
        adapter.transform_action_lanes(out[None], [episode])
        adapter.transform_action(out)
