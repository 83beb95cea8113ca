"""The envs the benchmark serves and steps, built the same way on both sides.

Importable without rlmesh: the in-process scenario and the servers in subprocesses
(``trio-rlmesh serve-env bench_envs:<factory>`` and ``serve_rlmesh_env.py KIND``) use it.
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

IMAGE_SHAPE = (84, 84, 3)
IMAGE_EPISODE_STEPS = 100
VECTOR_LANES = 16
SLOW_STEP_S = 0.005
"""How long each step of the slow env waits (a stand-in for a heavy simulator)."""
SLOW_EPISODE_STEPS = 50
"""The slow env's time limit (the balancing policy reaches it)."""


class ImageEnv(gymnasium.Env[np.ndarray, np.int64]):
    """A deterministic env with an 84×84×3 uint8 observation and four actions.

    Every frame is a row-rotation of one fixed noise image (so the bytes change every
    step, as a camera's would); an episode lasts exactly ``IMAGE_EPISODE_STEPS`` steps
    and scores 1 whenever the action matches the step counter modulo 4.
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 (gymnasium's own idiom)

    def __init__(self) -> None:
        self.observation_space = spaces.Box(0, 255, IMAGE_SHAPE, dtype=np.uint8)
        self.action_space = spaces.Discrete(4)
        self._base = np.random.default_rng(1234).integers(0, 256, IMAGE_SHAPE, dtype=np.uint8)
        self._t = 0
        self._offset = 0

    def _frame(self) -> np.ndarray:
        return np.roll(self._base, self._offset + self._t, axis=0)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._t = 0
        self._offset = int(seed or 0) % IMAGE_SHAPE[0]
        return self._frame(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        reward = 1.0 if int(action) == self._t % 4 else 0.0
        self._t += 1
        terminated = self._t >= IMAGE_EPISODE_STEPS
        return self._frame(), reward, terminated, False, {}


def make_cartpole() -> Any:
    """Gymnasium's CartPole-v1 (500-step time limit)."""
    return gymnasium.make("CartPole-v1")


def make_vector16() -> Any:
    """16 CartPole lanes in a SyncVectorEnv with NEXT_STEP autoreset (Gymnasium's default)."""
    return gymnasium.vector.SyncVectorEnv(
        [make_cartpole for _ in range(VECTOR_LANES)],
        autoreset_mode=gymnasium.vector.AutoresetMode.NEXT_STEP,
    )


def make_image() -> Any:
    """The 84×84×3 image env."""
    return ImageEnv()


class SlowStep(gymnasium.Wrapper[Any, Any, Any, Any]):
    """Each step waits ``SLOW_STEP_S`` (sleeping, no CPU) before stepping the env."""

    def step(self, action: Any) -> Any:
        time.sleep(SLOW_STEP_S)
        return self.env.step(action)


def make_slow() -> Any:
    """CartPole-v1 whose step waits a fixed 5 ms, episodes capped at ``SLOW_EPISODE_STEPS``."""
    return SlowStep(gymnasium.make("CartPole-v1", max_episode_steps=SLOW_EPISODE_STEPS))


BUILDERS = {
    "cartpole": make_cartpole,
    "vector16": make_vector16,
    "image": make_image,
    "slow": make_slow,
}
"""Env kinds by name, for the server scripts."""
