"""Envs the interop tests serve with rlmesh and roll out directly with Gymnasium.

Imported both by the tests and by ``serve_env.py`` (as a top-level module in the
server subprocess), so it depends on gymnasium and numpy only.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class NestedEnv(gym.Env[dict[str, Any], np.ndarray]):
    """A deterministic env whose observation nests every space kind the wire knows."""

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 - gymnasium's convention

    def __init__(self) -> None:
        self.observation_space = spaces.Dict(
            {
                "pos": spaces.Box(-10.0, 10.0, shape=(3,), dtype=np.float32),
                "half": spaces.Box(-1.0, 1.0, shape=(2, 2), dtype=np.float16),
                "pixels": spaces.Box(0, 255, shape=(4, 4, 3), dtype=np.uint8),
                "mode": spaces.Discrete(5, start=-2),
                "flags": spaces.MultiBinary(4),
                "dice": spaces.MultiDiscrete([3, 4, 5]),
                "label": spaces.Text(max_length=8, charset="abcdef"),
                "pair": spaces.Tuple(
                    (spaces.Discrete(3), spaces.Box(0.0, 1.0, shape=(2,), dtype=np.float64))
                ),
            }
        )
        self.action_space = spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
        self._t = 0

    def _obs(self) -> dict[str, Any]:
        rng = self.np_random
        return {
            "pos": rng.uniform(-10, 10, size=3).astype(np.float32),
            "half": rng.uniform(-1, 1, size=(2, 2)).astype(np.float16),
            "pixels": rng.integers(0, 256, size=(4, 4, 3), dtype=np.uint8),
            "mode": np.int64(int(rng.integers(-2, 3))),
            "flags": rng.integers(0, 2, size=4).astype(np.int8),
            "dice": rng.integers(0, [3, 4, 5]).astype(np.int64),
            "label": "".join(rng.choice(list("abcdef"), size=int(rng.integers(1, 9)))),
            "pair": (np.int64(int(rng.integers(0, 3))), rng.uniform(0, 1, size=2)),
        }

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        self._t = 0
        return self._obs(), {}

    def step(self, action: np.ndarray) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        self._t += 1
        reward = float(np.sum(action)) + self._t
        return self._obs(), reward, self._t >= 7, False, {}


class RaisingEnv(gym.Env[np.ndarray, np.int64]):
    """Steps once, then raises ValueError at every step (RLMesh answers an in-band EnvError
    and ends the Join stream)."""

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 - gymnasium's convention

    def __init__(self) -> None:
        self.observation_space = spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self._t = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self._t += 1
        if self._t >= 2:
            raise ValueError("the env broke")
        return np.zeros(1, np.float32), 1.0, False, False, {}


def build(kind: str) -> Any:
    """The env (or list of lane envs) named ``kind``."""
    if kind == "cartpole":
        return gym.make("CartPole-v1")
    if kind == "pendulum":
        return gym.make("Pendulum-v1")
    if kind == "nested":
        return NestedEnv()
    if kind == "vector4":
        return gym.vector.SyncVectorEnv(
            [lambda: gym.make("CartPole-v1") for _ in range(4)],
            autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP,
        )
    if kind == "lanes4":
        return [gym.make("CartPole-v1") for _ in range(4)]
    if kind == "raises":
        return RaisingEnv()
    raise ValueError(f"unknown env kind {kind!r}")
