"""trio_rlmesh.gym's envs are Gymnasium's own kinds (tests/test_exports.py pins its names)."""

from __future__ import annotations

import gymnasium

import trio_rlmesh.gym as tg


def test_the_sync_envs_are_gymnasiums_own_kinds() -> None:
    assert issubclass(tg.RemoteEnv, gymnasium.Env)
    assert issubclass(tg.RemoteVectorEnv, gymnasium.vector.VectorEnv)
    assert tg.ENV_ID in gymnasium.registry
