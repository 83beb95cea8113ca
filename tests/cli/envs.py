"""Envs the CLI tests load with ``--env tests.cli.envs:<name>``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import gymnasium as gym

STEPPED_FILE = "TRIO_RLMESH_TEST_STEPPED_FILE"
"""Environment variable naming the file :func:`marked_cartpole` creates once it has stepped."""
MARK_AFTER = 20


class _MarksWhenStepped(gym.Wrapper[Any, Any, Any, Any]):
    def __init__(self, env: gym.Env[Any, Any], path: Path) -> None:
        super().__init__(env)
        self.path = path
        self.steps = 0

    def step(self, action: Any) -> Any:
        self.steps += 1
        if self.steps == MARK_AFTER:
            self.path.touch()
        return super().step(action)


def marked_cartpole() -> gym.Env[Any, Any]:
    """CartPole that touches ``$TRIO_RLMESH_TEST_STEPPED_FILE`` after its 20th step: by then
    the run is well under way (its signal handlers are in place)."""
    return _MarksWhenStepped(gym.make("CartPole-v1"), Path(os.environ[STEPPED_FILE]))
