"""Envs and models for the recording tests (gymnasium and numpy only; no pygame)."""

from __future__ import annotations

import sys
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

needs_minari = pytest.mark.skipif(
    sys.version_info < (3, 11),
    reason="Minari needs Python >= 3.11: recording datasets is documented as unavailable on 3.10",
)
"""Datasets need Minari; on 3.11+ it must be installed (``nox -s tests`` installs the
``record`` extra), so there these tests never skip."""


class Stepper(gym.Env[np.ndarray, np.int64]):
    """A deterministic env with infos and ``rgb_array`` frames.

    An episode of seed ``s`` lasts ``3 + s % 3`` steps and ends by termination for an even
    seed, by truncation for an odd one. The reset info has ``t``; every step's info has
    ``t`` and ``pos`` (a 2-vector), and the last step's also ``outcome`` (a string).
    Frames are 7x9 (odd sizes) and depend on the step.
    """

    metadata: dict[str, Any] = {"render_modes": ["rgb_array"], "render_fps": 12}  # noqa: RUF012

    def __init__(self, render_mode: str | None = None) -> None:
        self.observation_space = gym.spaces.Box(-100.0, 100.0, shape=(3,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(3)
        self.render_mode = render_mode
        self.t = 0
        self.length = 3
        self.seed_value = 0
        self.base = 0.0

    def _obs(self) -> np.ndarray:
        return np.array([self.base, self.t, self.t * self.base % 7], dtype=np.float32)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.seed_value = 0 if seed is None else seed
        self.length = 3 + self.seed_value % 3
        self.base = float(self.np_random.integers(1, 50))
        self.t = 0
        return self._obs(), {"t": 0}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.t += 1
        reward = float(action) * 0.5 + self.t
        done = self.t >= self.length
        info: dict[str, Any] = {"t": self.t, "pos": [float(self.t), -float(self.t)]}
        if done:
            info["outcome"] = "terminated" if self.seed_value % 2 == 0 else "truncated"
        terminated = done and self.seed_value % 2 == 0
        truncated = done and self.seed_value % 2 == 1
        return self._obs(), reward, terminated, truncated, info

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        frame = np.zeros((7, 9, 3), dtype=np.uint8)
        frame[:, : 1 + self.t, 0] = 200
        frame[:, :, 1] = int(self.base) * 5
        return frame


class CannotDraw(Stepper):
    """A :class:`Stepper` whose first render fails as a classic-control env's does without
    pygame."""

    def render(self) -> np.ndarray | None:
        raise gym.error.DependencyNotInstalled(
            'pygame is not installed, run `pip install "gymnasium[classic-control]"`'
        )


def read_video(path: Any, height: int, width: int) -> np.ndarray:
    """An MP4's RGB frames of ``height`` x ``width``, decoded by imageio-ffmpeg's ffmpeg."""
    import subprocess

    import imageio_ffmpeg

    argv = [imageio_ffmpeg.get_ffmpeg_exe(), "-v", "error", "-i", str(path)]
    raw = subprocess.run(
        [*argv, "-f", "rawvideo", "-pix_fmt", "rgb24", "-"], capture_output=True, check=True
    ).stdout
    return np.frombuffer(raw, np.uint8).reshape(-1, height, width, 3)


def rollout(seed: int, actions: Any) -> tuple[list[np.ndarray], list[float], list[dict[str, Any]]]:
    """A direct Gymnasium rollout of :class:`Stepper` with ``seed`` and ``actions``."""
    env = Stepper()
    obs, info = env.reset(seed=seed)
    observations, rewards, infos = [obs], [], [info]
    for action in actions:
        obs, reward, _, _, info = env.step(action)
        observations.append(obs)
        rewards.append(reward)
        infos.append(info)
    return observations, rewards, infos


class Cycle:
    """Actions 0, 1, 2, ... from the observation's step counter (deterministic)."""

    def predict(self, observation: Any) -> Any:
        return np.int64(int(observation[1] + observation[0]) % 3)


class Balancer:
    """Keeps CartPole's pole up (long episodes)."""

    def predict(self, observation: Any) -> Any:
        return np.int64(observation[2] + 0.3 * observation[3] > 0)


class Chunks:
    """Chunks of ``execution_horizon`` different actions: replayed frames differ from
    what a fresh predict on their step would give."""

    def predict_chunk(self, observation: Any, execution_horizon: int) -> Any:
        start = int(observation[1])
        return np.array([(start + 2 * j) % 3 for j in range(execution_horizon)], dtype=np.int64)
