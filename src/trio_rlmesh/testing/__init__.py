"""Test helpers for code built on trio-rlmesh: scripted fakes and conformance checks.

>>> import trio
>>> from trio_rlmesh.runtime import RuntimeDriver
>>> from trio_rlmesh.testing import FakeEnv, FakeModel
>>> env = FakeEnv(episode_length=3)
>>> report = trio.run(RuntimeDriver(env.session_spec(max_episodes=2), env, FakeModel()).run)
>>> report.status, report.total_steps, [e.steps for e in report.episodes]
('completed', 6, [3, 3])
"""

from __future__ import annotations

from ._checks import ConformanceError as ConformanceError
from ._checks import check_runtime_env as check_runtime_env
from ._checks import check_runtime_model as check_runtime_model
from ._fakes import FakeEnv as FakeEnv
from ._fakes import FakeModel as FakeModel
from ._fakes import Fault as Fault

__all__ = [
    "ConformanceError",
    "FakeEnv",
    "FakeModel",
    "Fault",
    "check_runtime_env",
    "check_runtime_model",
]
