"""Envs the remote-env tests serve, and the direct rollouts they are checked against."""

from __future__ import annotations

import threading
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from tests.interop.envs import FramesEnv, NestedEnv

__all__ = [
    "CHECK_ENV_IDS",
    "BlockingEnv",
    "EchoEnv",
    "FramesEnv",
    "NestedEnv",
    "assert_same",
    "make_checked",
]

CHECK_ENV_IDS = ("CartPole-v1", "Pendulum-v1", "FrozenLake-v1", "Blackjack-v1", "nested")
"""The envs ``check_env`` must pass on through a remote env (``nested``: a Dict observation)."""


def make_checked(name: str) -> Any:
    """One of :data:`CHECK_ENV_IDS`, built the same way on the server and for the baseline."""
    return NestedEnv() if name == "nested" else gym.make(name)


def assert_same(actual: Any, expected: Any, path: str = "obs") -> None:
    """Exact structural equality of a remote value and a Gymnasium value (dtype-agnostic)."""
    if isinstance(expected, dict):
        assert set(actual) == set(expected), path
        for key in expected:
            assert_same(actual[key], expected[key], f"{path}.{key}")
    elif isinstance(expected, tuple):
        assert isinstance(actual, tuple), path
        assert len(actual) == len(expected), path
        for index, (a, e) in enumerate(zip(actual, expected, strict=True)):
            assert_same(a, e, f"{path}[{index}]")
    elif isinstance(expected, str):
        assert actual == expected, path
    else:
        np.testing.assert_array_equal(np.asarray(actual), np.asarray(expected), err_msg=path)


class EchoEnv(gym.Env[np.ndarray, np.int64]):
    """Echoes its reset options and per-step numpy values into its infos."""

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 - Gymnasium's convention

    def __init__(self) -> None:
        self.observation_space = spaces.Box(-100.0, 100.0, shape=(2,), dtype=np.float32)
        self.action_space = spaces.Discrete(3)
        self.t = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return np.array([seed or 0, 0], np.float32), {"options": options, "seed": seed}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if int(action) == 2:
            raise ValueError("action 2 breaks the echo env")
        self.t += 1
        info = {"t": np.int64(self.t), "pair": np.array([self.t, -self.t]), "flag": np.bool_(1)}
        return np.array([self.t, int(action)], np.float32), 0.5, self.t >= 3, False, info


class BlockingEnv(gym.Env[np.ndarray, np.int64]):
    """CartPole-like env whose ``step`` can be held until the test lets it go.

    ``hold()`` makes the next steps wait; ``entered`` is set when a held step starts and
    ``release()`` lets it finish. Served on a worker thread (``user_code="thread"``).
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 - Gymnasium's convention

    def __init__(self) -> None:
        self.observation_space = spaces.Box(-10.0, 10.0, shape=(1,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self.t = 0
        self.holding = False
        self.entered = threading.Event()
        self.gate = threading.Event()

    def hold(self) -> None:
        self.holding = True
        self.entered.clear()
        self.gate.clear()

    def release(self) -> None:
        self.holding = False
        self.gate.set()

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self.holding:
            self.entered.set()
            self.gate.wait(60)
        self.t += 1
        return np.array([self.t], np.float32), 1.0, False, False, {}
