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


class NullMetadata(gym.Wrapper[Any, Any, Any, Any]):
    """CartPole whose metadata holds nulls, which rlmesh writes as key-only MetaMap entries."""

    def __init__(self, env: gym.Env[Any, Any]) -> None:
        super().__init__(env)
        self.metadata = {**env.metadata, "range": None, "tags": {"clip": None, "role": "pole"}}


class OldGymEnv:
    """The old Gym API (before Gym 0.26), deterministic from the reset seed.

    ``reset`` returns the observation alone; ``step`` returns ``(obs, reward, done, info)``.
    An episode of seed ``s`` lasts ``3 + s % 5`` steps; with an even seed it ends by the
    time limit (``info["TimeLimit.truncated"]`` with ``done``), with an odd one by
    termination. Step 1 always carries ``TimeLimit.truncated`` without ``done`` (which is
    no episode end).
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 - gymnasium's convention

    def __init__(self) -> None:
        self.observation_space = spaces.Box(-100.0, 100.0, shape=(2,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self.seed = 0
        self.t = 0
        self.position = 0.0

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        self.seed = 0 if seed is None else int(seed)
        self.t = 0
        self.position = float(self.seed % 7)
        return self._obs()

    def _obs(self) -> np.ndarray:
        return np.array([self.t, self.position], dtype=np.float32)

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, dict[str, Any]]:
        self.t += 1
        self.position += 1.0 if int(action) == 1 else -1.0
        done = self.t >= 3 + self.seed % 5
        info: dict[str, Any] = {"t": self.t}
        if done and self.seed % 2 == 0:
            info["TimeLimit.truncated"] = True
        elif self.t == 1:
            info["TimeLimit.truncated"] = True  # without done: not an episode end
        return self._obs(), float(self.position), done, info

    def close(self) -> None:
        pass


class OldGymVectorEnv:
    """``num_envs`` :class:`OldGymEnv` lanes stepped together, in the old Gym vector API.

    ``reset`` returns the batched observation alone; ``step`` returns ``(obs, rewards,
    dones, infos)`` with ``infos`` a dict holding the per-lane ``TimeLimit.truncated``
    array and its ``_TimeLimit.truncated`` mask (Gym 0.24's layout). A lane that ended
    autoresets on its next step (NEXT_STEP, declared in ``metadata``): that step returns
    its fresh observation with reward 0 and is no episode step.
    """

    def __init__(self, num_envs: int = 3) -> None:
        self.num_envs = num_envs
        self.lanes = [OldGymEnv() for _ in range(num_envs)]
        self.single_observation_space = self.lanes[0].observation_space
        self.single_action_space = self.lanes[0].action_space
        self.observation_space = spaces.Box(-100.0, 100.0, shape=(num_envs, 2), dtype=np.float32)
        self.action_space = spaces.MultiDiscrete([2] * num_envs)
        self.metadata: dict[str, Any] = {"autoreset_mode": "NextStep"}
        self.pending = [False] * num_envs

    def reset(self, seed: int | list[int] | None = None, options: Any = None) -> np.ndarray:
        if seed is None:
            seeds: list[int | None] = [None] * self.num_envs
        elif isinstance(seed, int):
            seeds = [seed + index for index in range(self.num_envs)]
        else:
            seeds = list(seed)
        self.pending = [False] * self.num_envs
        return np.stack([lane.reset(s) for lane, s in zip(self.lanes, seeds, strict=True)])

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        observations, rewards, dones, limited = [], [], [], []
        for index, (lane, action) in enumerate(zip(self.lanes, actions, strict=True)):
            if self.pending[index]:
                observations.append(lane.reset(lane.seed + self.num_envs))
                rewards.append(0.0)
                dones.append(False)
                limited.append(False)
                self.pending[index] = False
                continue
            obs, reward, done, info = lane.step(action)
            observations.append(obs)
            rewards.append(reward)
            dones.append(done)
            limited.append(bool(done and info.get("TimeLimit.truncated", False)))
            self.pending[index] = done
        mask = np.array(limited)
        return (
            np.stack(observations),
            np.array(rewards),
            np.array(dones),
            {"TimeLimit.truncated": mask, "_TimeLimit.truncated": mask.copy()},
        )

    def close(self) -> None:
        pass


class FramesEnv(gym.Env[int, int]):
    """Renders an RGB frame that depends on the step count (servers send it as PNG)."""

    metadata: dict[str, Any] = {"render_modes": ["rgb_array"], "render_fps": 4}  # noqa: RUF012

    def __init__(self, render_mode: str | None = "rgb_array") -> None:
        self.render_mode = render_mode
        self.observation_space = spaces.Discrete(5)
        self.action_space = spaces.Discrete(2)
        self.t = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[int, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return 0, {}

    def step(self, action: Any) -> tuple[int, float, bool, bool, dict[str, Any]]:
        self.t += 1
        return self.t % 5, 1.0, False, False, {}

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        frame = np.zeros((12, 16, 3), np.uint8)
        frame[:, :, 0] = np.arange(16, dtype=np.uint8) * 15
        frame[:, :, 1] = self.t * 20
        frame[3:7, 5:9, 2] = 255
        frame[8:] = np.random.default_rng(self.t).integers(0, 256, size=(4, 16, 3))
        return frame


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


def arm_example() -> Any:
    """``examples/adapted_arm.py`` as a module (the tagged arm env and the spec'd model)."""
    import importlib
    import sys
    from pathlib import Path

    examples = str(Path(__file__).resolve().parents[2] / "examples")
    if examples not in sys.path:
        sys.path.insert(0, examples)
    return importlib.import_module("adapted_arm")


ARM_STEPS = 8
"""Steps of an arm episode in the interop tests (the example's default is longer)."""


def build_arm(kind: str) -> Any:
    """The arm env: tagged by trio-rlmesh (``arm``), by RLMesh's ``tag`` (``arm-wheel``), or
    four lanes of it in a NEXT_STEP vector env whose metadata carries the tags (``arm4``)."""
    arm = arm_example()
    if kind == "arm":
        return arm.make_env(steps=ARM_STEPS)
    if kind == "arm-wheel":
        import rlmesh.adapters

        tags = rlmesh.adapters.EnvTags.from_dict(arm.TAGS.to_dict())
        return rlmesh.adapters.tag(arm.ArmEnv(steps=ARM_STEPS), tags)
    vector = gym.vector.SyncVectorEnv(
        [lambda: arm.ArmEnv(steps=ARM_STEPS) for _ in range(4)],
        autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP,
    )
    vector.metadata = {**vector.metadata, **arm.TAGS.to_metadata()}
    return vector


def build(kind: str) -> Any:
    """The env (or list of lane envs) named ``kind``."""
    if kind.startswith("arm"):
        return build_arm(kind)
    if kind == "cartpole":
        return gym.make("CartPole-v1")
    if kind == "pendulum":
        return gym.make("Pendulum-v1")
    if kind == "frozenlake":
        return gym.make("FrozenLake-v1")
    if kind == "blackjack":
        return gym.make("Blackjack-v1")
    if kind == "frames":
        return FramesEnv()
    if kind == "nested":
        return NestedEnv()
    if kind == "vector4":
        return gym.vector.SyncVectorEnv(
            [lambda: gym.make("CartPole-v1") for _ in range(4)],
            autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP,
        )
    if kind == "null-metadata":
        return NullMetadata(gym.make("CartPole-v1"))
    if kind == "lanes4":
        return [gym.make("CartPole-v1") for _ in range(4)]
    if kind == "raises":
        return RaisingEnv()
    if kind == "oldgym":
        return OldGymEnv()
    if kind == "oldgym_vector3":
        return OldGymVectorEnv(3)
    raise ValueError(f"unknown env kind {kind!r}")
