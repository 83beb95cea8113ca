"""RLMesh 0.1.0's resolved adapters for one kernel at a time: the reference our kernels are
compared with (interop tests) and timed against (``bench/bench_adapter_kernels.py``).

Each builder takes the ``rlmesh.adapters`` module and ``gymnasium`` (the caller imports or
skips them) and resolves a pairing that exercises exactly one kernel.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _gripper(adapt: Any) -> Any:
    return adapt.Action(adapt.Actuator(adapt.ACTION_GRIPPER, 1))


def _unit_box(gym: Any) -> Any:
    return gym.spaces.Box(-1, 1, (1,), np.float32)


def camera(
    adapt: Any,
    gym: Any,
    shape: tuple[int, int, int],
    *,
    env_layout: str = "hwc",
    env_upside_down: bool = False,
    env_dtype: Any = np.uint8,
    env_range: tuple[float, float] = (0, 255),
    **image: Any,
) -> Any:
    """One ``(H, W, C)`` camera ``cam`` feeding one model input ``img`` (``Image(**image)``)."""
    height, width, channels = shape
    space_shape = shape if env_layout == "hwc" else (channels, height, width)
    observation = gym.spaces.Dict(
        {"cam": gym.spaces.Box(env_range[0], env_range[1], space_shape, env_dtype)}
    )
    tag = adapt.ImageTag(adapt.IMAGE_PRIMARY, layout=env_layout, upside_down=env_upside_down)
    tags = adapt.EnvTags(observation={"cam": tag}, action=_gripper(adapt))
    spec = adapt.ModelSpec(
        input={"img": adapt.Image(adapt.IMAGE_PRIMARY, **image)}, output=_gripper(adapt)
    )
    return adapt.resolve(tags, observation, _unit_box(gym), spec)


def rotation_state(adapt: Any, gym: Any, source: str, target: str, post: Any = None) -> Any:
    """An env rotation ``rot`` read into a model state part ``s`` in another encoding."""
    observation = gym.spaces.Dict(
        {"rot": gym.spaces.Box(-np.inf, np.inf, (adapt.ROTATION_DIMS[source],), np.float32)}
    )
    tags = adapt.EnvTags(
        observation={"rot": adapt.StateTag(adapt.EEF_ROT, encoding=source)},
        action=_gripper(adapt),
    )
    extra = {} if post is None else {"post_rotate": post}
    spec = adapt.ModelSpec(
        input={"s": adapt.State(adapt.EEF_ROT, encoding=target, **extra)}, output=_gripper(adapt)
    )
    return adapt.resolve(tags, observation, _unit_box(gym), spec)


def rotation_action(adapt: Any, gym: Any, model: str, env: str) -> Any:
    """A model rotation actuator turned into the env's encoding."""
    width = adapt.ROTATION_DIMS
    observation = gym.spaces.Dict({"g": _unit_box(gym)})
    action = gym.spaces.Box(-np.inf, np.inf, (width[env],), np.float32)
    tags = adapt.EnvTags(
        observation={"g": adapt.StateTag(adapt.GRIPPER_POS)},
        action=adapt.Action(adapt.Actuator(adapt.ACTION_EEF_ROT, width[env], encoding=env)),
    )
    spec = adapt.ModelSpec(
        input={"s": adapt.State(adapt.GRIPPER_POS)},
        output=adapt.Action(adapt.Actuator(adapt.ACTION_EEF_ROT, width[model], encoding=model)),
    )
    return adapt.resolve(tags, observation, action, spec)
