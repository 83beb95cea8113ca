"""``trio_rlmesh.adapters`` against ``rlmesh.adapters`` 0.1.0, side by side in one process.

- the public surface: the same names, the same signatures;
- ``tag()`` publishes the same metadata bytes, and tags published by either package resolve
  in the other;
- the goldens of ``tests/adapters`` are exactly what the wheel answers today;
- a differential run: Hypothesis draws pairings (tags, spaces, spec, observations, model
  outputs; ``adapter_recipes``), both packages build, serialize, resolve, explain and apply
  them, and must agree: the same documents, errors (class and message), ``explain()`` text,
  advisories and history windows, and the same payloads and env actions (resampled images
  within one uint8 step, everything else to 1e-5).
"""

from __future__ import annotations

import importlib
import inspect
import json
import types
import warnings
from collections.abc import Callable
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from tests.adapters import pairings
from trio_rlmesh import adapters as ours
from trio_rlmesh.adapters import _vocab as vocab
from trio_rlmesh.protocol import python_to_meta

from . import adapter_recipes as recipes

pytestmark = pytest.mark.interop
wheel = pytest.importorskip("rlmesh.adapters")

# The wheel's Adapter is built from its native plan handle; these take its bridges.
WHEEL_ONLY_METHODS = {"transform_obs_value", "transform_action_value", "serve_route"}


def test_the_public_names_are_the_wheels() -> None:
    assert ours.__all__ == wheel.__all__
    for module in ("constants", "constants.roles", "constants.parts", "specs"):
        mine = importlib.import_module(f"trio_rlmesh.adapters.{module}")
        theirs = importlib.import_module(f"rlmesh.adapters.{module}")
        assert mine.__all__ == theirs.__all__, module
        for name in theirs.__all__:
            value = getattr(theirs, name)
            if isinstance(value, (str, int, list, dict)):
                assert getattr(mine, name) == value, f"{module}.{name}"
    # RLMesh's helpers module has no __all__: its one function.
    assert ours.helpers.__all__ == ["render_placement"]
    assert hasattr(wheel.helpers, "render_placement")
    for name in wheel.__all__:
        mine, theirs = getattr(ours, name), getattr(wheel, name)
        if isinstance(theirs, (str, int, list, dict)):
            assert mine == theirs, name


def test_the_vocabularies_are_the_wheels_in_its_order() -> None:
    # The native core's own lists: the order its messages name the choices in.
    native = importlib.import_module("rlmesh._rlmesh")
    for name in ("IMAGE_LAYOUTS", "CROP_MODES", "CHANNEL_ORDERS", "RESAMPLES"):
        assert getattr(vocab, name) == tuple(getattr(native, name)), name
    assert vocab.ROTATION_DIMS == native.ROTATION_DIMS
    assert set(vocab.ENCODING_ORDER) == set(native.ROTATION_DIMS)


def _parameters(target: Any) -> list[tuple[str, Any, Any]]:
    """Each parameter's name, kind and default; RLMesh's value-bridge hooks (``*_bridge``,
    its own framework plumbing) left out."""
    signature = inspect.signature(target)
    return [
        (p.name, p.kind, p.default)
        for p in signature.parameters.values()
        if not p.name.endswith("_bridge")
    ]


@pytest.mark.parametrize(
    "name",
    [
        n
        for n in wheel.__all__
        if (inspect.isclass(getattr(wheel, n)) or inspect.isfunction(getattr(wheel, n)))
        and n not in ("Adapter", "Advisory", "AdapterResolutionError")
    ],
)
def test_signatures_are_the_wheels(name: str) -> None:
    assert _parameters(getattr(ours, name)) == _parameters(getattr(wheel, name))


def test_the_adapter_methods_are_the_wheels() -> None:
    for cls in ("Adapter", "AdapterBase"):
        theirs = {
            n: m
            for n, m in vars(getattr(wheel, cls)).items()
            if callable(m) and not n.startswith("_") and n not in WHEEL_ONLY_METHODS
        }
        for name, method in theirs.items():
            mine = getattr(getattr(ours, cls), name)
            assert _parameters(mine)[1:] == _parameters(method)[1:], f"{cls}.{name}"


class Arm(gym.Env[dict[str, Any], np.ndarray[Any, Any]]):
    """A small arm env: camera, end-effector pose as a quaternion, gripper, instruction."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": [], "note": "kept"}

    def __init__(self) -> None:
        box = gym.spaces.Box
        self.observation_space = gym.spaces.Dict(
            {
                "cam": box(0, 255, (16, 16, 3), np.uint8),
                "pos": box(-1, 1, (3,), np.float32),
                "quat": box(-1, 1, (4,), np.float32),
                "grip": box(0, 0.08, (1,), np.float32),
                "task": gym.spaces.Text(32),
            }
        )
        self.action_space = box(-1, 1, (7,), np.float32)


def arm_tags(A: types.ModuleType) -> Any:
    return A.EnvTags(
        {
            "cam": A.ImageTag(A.IMAGE_PRIMARY),
            "pos": A.StateTag(A.EEF_POS),
            "quat": A.StateTag(A.EEF_ROT, "quat_xyzw"),
            "grip": A.StateTag(A.GRIPPER_POS),
            "task": A.TextTag(A.INSTRUCTION),
        },
        A.Action(
            A.Actuator(A.ACTION_DELTA_POS, 3),
            A.Actuator(A.ACTION_DELTA_ROT, 3, "axis_angle"),
            A.Actuator(A.ACTION_GRIPPER, 1, binary=True),
        ),
    )


def arm_spec(A: types.ModuleType) -> Any:
    return A.ModelSpec(
        {
            "image": A.Image(A.IMAGE_PRIMARY, size=8, resample="bilinear_aa", stack=2),
            "state": A.Concat(A.EEF_POS, A.State(A.EEF_ROT, encoding="rot6d"), A.GRIPPER_POS),
            "text": A.Text(A.INSTRUCTION),
        },
        A.Action(
            A.Actuator(A.ACTION_DELTA_POS, 3),
            A.Actuator(A.ACTION_DELTA_ROT, 6, "rot6d"),
            A.Actuator(A.ACTION_GRIPPER, 1, range=(0, 1)),
        ),
    )


def test_tag_publishes_the_same_metadata_bytes() -> None:
    mine = ours.tag(Arm(), arm_tags(ours))
    theirs = wheel.tag(Arm(), arm_tags(wheel))
    assert mine.metadata["note"] == "kept"
    assert json.dumps(mine.metadata) == json.dumps(theirs.metadata)
    assert bytes(python_to_meta(mine.metadata)) == bytes(python_to_meta(theirs.metadata))


@pytest.mark.parametrize(("publisher", "reader"), [(ours, wheel), (wheel, ours)])
def test_tags_published_by_either_resolve_in_the_other(
    publisher: types.ModuleType, reader: types.ModuleType
) -> None:
    env = publisher.tag(Arm(), arm_tags(publisher))
    contract = types.SimpleNamespace(
        metadata=env.metadata,
        observation_space=env.observation_space,
        action_space=env.action_space,
    )
    adapter = reader.resolve_from_contract(contract, arm_spec(reader))
    direct = wheel.resolve(
        arm_tags(wheel), env.observation_space, env.action_space, arm_spec(wheel)
    )
    assert adapter.explain() == direct.explain()


def test_tag_refuses_what_the_wheel_refuses() -> None:
    env = Arm()
    env.observation_space = gym.spaces.Dict({"pos": gym.spaces.Box(-1, 1, (2,), np.float32)})
    tags = lambda A: A.EnvTags({"pos": A.StateTag(A.EEF_POS)}, arm_tags(A).action)  # noqa: E731
    with pytest.raises(wheel.AdapterResolutionError) as theirs:
        wheel.tag(env, tags(wheel))
    with pytest.raises(ours.AdapterResolutionError) as mine:
        ours.tag(env, tags(ours))
    assert str(mine.value) == str(theirs.value)


def test_tag_warns_as_the_wheel_warns() -> None:
    def caught(A: types.ModuleType) -> list[str]:
        env = Arm()
        env.observation_space = gym.spaces.Dict(
            {"cam": gym.spaces.Box(0, 255, (3, 8, 8), np.uint8)}
        )
        tags = A.EnvTags({"cam": A.ImageTag("image/odd")}, arm_tags(A).action)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            A.tag(env, tags)
        return [str(w.message) for w in seen]

    assert caught(ours) == caught(wheel)
    assert len(caught(ours)) == 2


@pytest.mark.parametrize("name", sorted(pairings.PAIRINGS))
def test_the_goldens_are_the_wheels_answers(name: str) -> None:
    assert pairings.run(wheel, name) == pairings.load_golden()[name]


# ------------------------------------------------------------------------------------------
# The differential run


def _attempt(fn: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return ("ok", fn())
    except Exception as exc:  # the error is the answer
        return ("error", exc)


def _same_error(mine: BaseException, theirs: BaseException) -> bool:
    """The same error: one class name (or ours a subclass of the wheel's builtin class),
    and the same message."""
    same_class = type(mine).__name__ == type(theirs).__name__ or (
        type(theirs).__module__ == "builtins" and isinstance(mine, type(theirs))
    )
    return same_class and str(mine) == str(theirs)


def _check_same(label: str, mine: tuple[str, Any], theirs: tuple[str, Any]) -> bool:
    """Whether both succeeded; fails the test when they disagree."""
    assert mine[0] == theirs[0], f"{label}: ours {mine[1]!r}, the wheel's {theirs[1]!r}"
    if mine[0] == "error":
        assert _same_error(mine[1], theirs[1]), f"{label}: {mine[1]!r} != {theirs[1]!r}"
        return False
    return True


def _same_value(mine: Any, theirs: Any, atol: float, where: str) -> None:
    if isinstance(theirs, np.ndarray):
        assert isinstance(mine, np.ndarray), where
        assert (mine.dtype, mine.shape) == (theirs.dtype, theirs.shape), where
        np.testing.assert_allclose(
            mine.astype(np.float64), theirs.astype(np.float64), atol=atol, rtol=0, err_msg=where
        )
    elif isinstance(theirs, dict):
        assert isinstance(mine, dict), where
        assert list(mine) == list(theirs), where
        for key in theirs:
            _same_value(mine[key], theirs[key], atol, f"{where}.{key}")
    elif isinstance(theirs, list):
        assert isinstance(mine, list), where
        assert len(mine) == len(theirs), where
        for index, (a, b) in enumerate(zip(mine, theirs, strict=True)):
            _same_value(a, b, atol, f"{where}[{index}]")
    elif isinstance(theirs, float):
        assert isinstance(mine, float), where
        assert abs(mine - theirs) <= atol, where
    else:
        assert type(mine) is type(theirs), where
        assert mine == theirs, where


def compare(recipe: dict[str, Any]) -> None:
    """Both packages on one recipe: they must agree at every stage."""
    env_w, env_o = (_attempt(lambda A=A: recipes.env_side(A, recipe)) for A in (wheel, ours))
    if not _check_same("env tags", env_o, env_w):
        return
    (tags_w, obs_space, act_space), (tags_o, _, _) = env_w[1], env_o[1]
    doc_w, doc_o = (
        _attempt(lambda: json.dumps(tags_w.to_dict())),
        _attempt(lambda: json.dumps(tags_o.to_dict())),
    )
    if _check_same("env tags document", doc_o, doc_w):
        assert doc_o[1] == doc_w[1]
    spec_w, spec_o = (_attempt(lambda A=A: recipes.model_side(A, recipe)) for A in (wheel, ours))
    if not _check_same("model spec", spec_o, spec_w):
        return
    if not any(leaf["kind"] == "custom" for leaf in recipe["model"].values()):
        doc_w = _attempt(lambda: json.dumps(spec_w[1].to_dict()))
        doc_o = _attempt(lambda: json.dumps(spec_o[1].to_dict()))
        if _check_same("model spec document", doc_o, doc_w):
            assert doc_o[1] == doc_w[1]
    adapter_w = _attempt(lambda: wheel.resolve(tags_w, obs_space, act_space, spec_w[1]))
    adapter_o = _attempt(lambda: ours.resolve(tags_o, obs_space, act_space, spec_o[1]))
    if not _check_same("resolve", adapter_o, adapter_w):
        return
    theirs, mine = adapter_w[1], adapter_o[1]
    assert mine.explain() == theirs.explain(), f"explain:\n{mine.explain()}\n{theirs.explain()}"
    notes = [[(a.severity, a.message) for a in x.advisories()] for x in (mine, theirs)]
    assert notes[0] == notes[1], f"advisories: {notes}"
    keys = [tuple(x.history_keys()) for x in (mine, theirs)]
    assert keys[0] == keys[1], f"history keys: {keys}"
    windows = [tuple(x.history_windows()) for x in (mine, theirs)]
    assert windows[0] == windows[1], f"history windows: {windows}"
    resampled = "resize" in theirs.explain() or "zoom" in theirs.explain()
    observations = recipes.observations(recipe, obs_space)
    for step, (obs, out) in enumerate(
        zip(observations, recipes.model_outputs(recipe), strict=True)
    ):
        if step in recipe["reset_at"]:
            mine.reset()
            theirs.reset()
        if step in recipe["observe_at"]:
            seen = (_attempt(lambda a=a, o=obs: a.observe(o)) for a in (mine, theirs))
            _check_same(f"observe {step}", *seen)
        else:
            payload_o, payload_w = (
                _attempt(lambda a=a, o=obs: a.transform_obs(o)) for a in (mine, theirs)
            )
            if _check_same(f"transform_obs {step}", payload_o, payload_w):
                _same_value(
                    payload_o[1], payload_w[1], 1.0 if resampled else 1e-5, f"payload {step}"
                )
        action_o, action_w = (
            _attempt(lambda a=a, o=out: a.transform_action(o)) for a in (mine, theirs)
        )
        if _check_same(f"transform_action {step}", action_o, action_w):
            _same_value(action_o[1], action_w[1], 1e-5, f"action {step}")


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(recipes.recipe())
def test_both_packages_agree_on_generated_pairings(recipe: dict[str, Any]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compare(recipe)
