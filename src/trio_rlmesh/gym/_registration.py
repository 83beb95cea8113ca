"""The Gymnasium registration of ``trio_rlmesh/Remote-v0``.

Gymnasium 1.x dropped the ``gymnasium.envs`` entry-point plugins of Gym, so the env is
registered when :mod:`trio_rlmesh.gym` is imported. Entry points are strings: registering
imports neither the transports nor any event loop.
"""

from __future__ import annotations

from typing import Final

__all__ = ["ENV_ID", "register"]

ENV_ID: Final = "trio_rlmesh/Remote-v0"
"""The id to pass to ``gymnasium.make`` / ``gymnasium.make_vec`` (with ``address=...``)."""


def register() -> None:
    """Register :data:`ENV_ID` with Gymnasium (again, if it was removed); idempotent.

    ``gymnasium.make(ENV_ID, address=...)`` then builds a :class:`~trio_rlmesh.gym.RemoteEnv`
    and ``gymnasium.make_vec(ENV_ID, num_envs=N, address=...)`` a
    :class:`~trio_rlmesh.gym.RemoteVectorEnv` (the endpoint must serve ``N`` lanes).

    >>> import gymnasium, trio_rlmesh.gym
    >>> gymnasium.spec("trio_rlmesh/Remote-v0").entry_point
    'trio_rlmesh.gym._sync:RemoteEnv'
    """
    import gymnasium

    if ENV_ID in gymnasium.registry:
        return
    gymnasium.register(
        id=ENV_ID,
        entry_point="trio_rlmesh.gym._sync:RemoteEnv",
        vector_entry_point="trio_rlmesh.gym._sync:RemoteVectorEnv",
        # The remote env decides: its server's env has its own time limit, if any.
        max_episode_steps=None,
    )
