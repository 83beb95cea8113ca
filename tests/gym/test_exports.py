"""trio_rlmesh.gym's public surface."""

from __future__ import annotations

import gymnasium

import trio_rlmesh.gym as tg


def test_every_public_name_exists_once() -> None:
    assert len(set(tg.__all__)) == len(tg.__all__)
    for name in tg.__all__:
        assert getattr(tg, name) is not None, name


def test_the_sync_envs_are_gymnasiums_own_kinds() -> None:
    assert issubclass(tg.RemoteEnv, gymnasium.Env)
    assert issubclass(tg.RemoteVectorEnv, gymnasium.vector.VectorEnv)
    assert tg.ENV_ID in gymnasium.registry
