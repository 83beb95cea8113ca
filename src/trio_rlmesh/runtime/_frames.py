"""Render frames (``render=True``): who may render, and one PNG per lane from ``env.render``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._errors import EnvError, SpecError
from ..protocol import env_v1
from ._interfaces import RuntimeEnv

if TYPE_CHECKING:
    from ._calls import Call
    from ._spec import RuntimeSessionSpec

__all__ = ["check_renders", "render_frames"]

_PNG_FORMATS = (int(env_v1.RenderFormat.UNSPECIFIED), int(env_v1.RenderFormat.PNG))
"""Render formats read as PNG (spec §6.5: 0 is PNG too; any other value is dropped)."""


def check_renders(spec: RuntimeSessionSpec, env: RuntimeEnv) -> None:
    """Refuse ``render=True`` where the driver cannot get one frame per lane."""
    where = f"the env at {spec.env_component_id}"
    # RuntimeEnv's own render is the declared "none"; a class that leaves it out has none too.
    if getattr(type(env), "render", RuntimeEnv.render) is RuntimeEnv.render:
        raise SpecError(
            f"rendering frames needs an env endpoint with a render call; {where} has none"
        )
    if spec.num_envs > 1 and not spec.lanes_step_individually:
        raise SpecError(
            f"rendering frames needs one frame per lane, but {where} is a lockstep vector env "
            f"(num_envs={spec.num_envs}) that renders all its lanes at once; use num_envs=1 "
            "or a lane endpoint (one env per lane)"
        )


async def render_frames(
    call: Call[env_v1.RenderRequest, env_v1.RenderResponse] | None,
    spec: RuntimeSessionSpec,
    env_indices: tuple[int, ...],
    lane: int | None,
    step: int,
    timeout_ms: int,
) -> tuple[bytes | None, ...]:
    """The env's rendering of a group's lane, as a PNG."""
    assert call is not None
    request = env_v1.RenderRequest(env_indices=list(env_indices), timeout_ms=timeout_ms)
    response = await call(request, lane, step, call.now())
    if response.frame is None or int(response.format) not in _PNG_FORMATS:
        raise EnvError(
            f"env.render answered no frame at runtime step {step}: the env "
            f"at {spec.env_component_id} does not render rgb_array images (its "
            f"render mode is {spec.env_contract.render_mode or 'unset'!r})",
            operation="env.render",
            step=step,
            lane=lane,
        )
    return (response.frame,)
