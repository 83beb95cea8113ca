"""Envs the CLI tests name by ``module:attr``."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

import gymnasium as gym
import numpy as np


class Counter(gym.Env[np.ndarray, np.int64]):
    """Counts steps: reward 1 per step, terminated after ``length`` steps.

    Its spaces are set in ``__init__``, so only an instance has them. With ``success``
    set, the final info reports ``is_success`` (true on even-seeded episodes). ``delay``
    sleeps that many seconds in each step of the episodes after the first ``quick``
    (slow, never hung). With ``announce``, each reset and each slow step prints a line on
    stderr (``counter: reset N``, ``counter: slow step``), which tests wait for.
    """

    def __init__(
        self,
        length: int = 3,
        success: bool = False,
        delay: float = 0.0,
        scale: float = 1.0,
        quick: int = 0,
        announce: bool = False,
    ) -> None:
        self.observation_space = gym.spaces.Box(-1e6, 1e6, shape=(1,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.length, self.success, self.delay, self.scale = length, success, delay, scale
        self.quick, self.announce = quick, announce
        self.t = 0
        self.resets = 0
        self.seed_value: int | None = None

    def _say(self, text: str) -> None:
        if self.announce:
            print(f"counter: {text}", file=sys.stderr, flush=True)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.t, self.seed_value = 0, seed
        self.resets += 1
        self._say(f"reset {self.resets}")
        return np.array([0.0], dtype=np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self.delay and self.resets > self.quick:
            self._say("slow step")
            time.sleep(self.delay)
        self.t += 1
        done = self.t >= self.length
        info: dict[str, Any] = {}
        if done and self.success:
            info["is_success"] = (self.seed_value or 0) % 2 == 0
        return np.array([float(self.t)], dtype=np.float32), self.scale, done, False, info


class ThreadCounter(Counter):
    """A :class:`Counter` that notes the name of the thread each step ran on (in ``threads``)."""

    threads: list[str] = []  # noqa: RUF012 - read by the test that runs it

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        ThreadCounter.threads.append(threading.current_thread().name)
        return super().step(action)


class Unlicensed(Counter):
    """Fails in its constructor, as an env whose simulator is missing a licence would."""

    def __init__(self) -> None:
        raise RuntimeError("no licence found")


ENV = Counter()


def make() -> Counter:
    return Counter()


def returns_int() -> int:
    return 42


NOT_AN_ENV = 42


def needs_box2d() -> Any:
    """A factory that fails as Gymnasium's Box2D envs do without Box2D."""
    raise gym.error.DependencyNotInstalled("Box2D is not installed, run `pip install box2d`")


def vector() -> gym.vector.SyncVectorEnv:
    """Two :class:`Counter` lanes in lockstep; the vector env resets finished lanes itself
    (NEXT_STEP), so the runtime cannot seed or cap its episodes."""
    return gym.vector.SyncVectorEnv([Counter, Counter])


def tagged_arm() -> Any:
    """``examples/adapted_arm.py``'s arm env, tagged, with short episodes."""
    from tests.interop.envs import arm_example

    return arm_example().make_env(steps=4)


def untagged_arm() -> Any:
    """The same arm env without its tags."""
    from tests.interop.envs import arm_example

    return arm_example().ArmEnv(steps=4)
