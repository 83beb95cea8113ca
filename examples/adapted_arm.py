"""A tagged arm env meets a spec'd model: no glue code, the same episodes on every server.

    python examples/adapted_arm.py

The env is a small tabletop reacher as a simulator exposes it: a 64x64 agent-view camera,
the end effector's position and orientation (a quaternion, x-y-z-w), the gripper opening, a
language instruction, and a 7-D delta action (position, axis-angle rotation, gripper in
[-1, 1]). The model was "trained" on something else: a 32x32 camera with the previous frame
stacked on it, one state vector with the rotation as ``rot6d``, and a 10-D action with the
rotation as ``rot6d`` and the gripper in [0, 1]. The env's tags and the model's spec say so
once; the runtime resolves the adapter before the first predict and converts every step.

The script prints the pairing (``explain()``), then evaluates the model three times with the
same seeds: the env in this process, served by trio-rlmesh's ``serve_env``, and (when the
``rlmesh`` package is installed) served by RLMesh's own ``rlmesh.EnvServer``. The rewards
depend on every action value, so equal rewards mean equal actions.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import trio
from gymnasium import spaces

import trio_rlmesh
import trio_rlmesh.adapters as adapt
from trio_rlmesh.model import Model
from trio_rlmesh.transports.grpc import serve_env

GOAL = np.array([0.3, -0.2, 0.25])
WEIGHTS = np.array([1.0, 0.9, 0.8, 0.3, 0.2, 0.1, 0.05])
"""How much each action value costs: the reward reads every one of them."""


class ArmEnv(gym.Env):
    """Move the end effector to a goal; the camera sees a bright square where the arm is."""

    metadata = {"render_modes": []}  # noqa: RUF012 - gymnasium's convention

    def __init__(self, steps: int = 20, camera: int = 64) -> None:
        self.observation_space = spaces.Dict(
            {
                "agentview_rgb": spaces.Box(0, 255, (camera, camera, 3), np.uint8),
                "eef_pos": spaces.Box(-2.0, 2.0, (3,), np.float32),
                "eef_quat": spaces.Box(-1.0, 1.0, (4,), np.float32),
                "gripper_qpos": spaces.Box(0.0, 0.08, (1,), np.float32),
                "language_instruction": spaces.Text(64),
            }
        )
        self.action_space = spaces.Box(-1.0, 1.0, (7,), np.float32)
        self.steps, self.camera = steps, camera

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.pos = self.np_random.uniform(-0.5, 0.5, 3)
        quat = self.np_random.normal(size=4)
        self.quat = quat / np.linalg.norm(quat)
        self.grip = 0.04
        return self._obs(), {}

    def step(self, action):
        action = np.asarray(action, np.float64)
        self.t += 1
        self.pos = np.clip(self.pos + 0.1 * action[:3], -2.0, 2.0)
        self.quat = _rotate(self.quat, 0.1 * action[3:6])
        self.grip = float(np.clip(0.04 + 0.04 * action[6], 0.0, 0.08))
        distance = float(np.linalg.norm(self.pos - GOAL))
        reward = -distance - 0.01 * float(np.dot(WEIGHTS, np.abs(action)))
        return self._obs(), reward, distance < 0.05, self.t >= self.steps, {}

    def _obs(self):
        size = self.camera
        image = self.np_random.integers(0, 40, (size, size, 3), dtype=np.uint8)
        row, col = (np.clip((self.pos[:2] + 1.0) / 2.0, 0, 0.99) * (size - 8)).astype(int)
        image[row : row + 8, col : col + 8] = 255
        return {
            "agentview_rgb": image,
            "eef_pos": self.pos.astype(np.float32),
            "eef_quat": self.quat.astype(np.float32),
            "gripper_qpos": np.array([self.grip], np.float32),
            "language_instruction": "reach the red cube",
        }


def _rotate(quat, rotvec):
    """``quat`` (x, y, z, w) turned by the axis-angle ``rotvec``."""
    angle = float(np.linalg.norm(rotvec))
    if angle < 1e-12:
        return quat
    x, y, z = np.sin(angle / 2) * rotvec / angle
    w = np.cos(angle / 2)
    qx, qy, qz, qw = quat
    turned = np.array(
        [
            w * qx + x * qw + y * qz - z * qy,
            w * qy - x * qz + y * qw + z * qx,
            w * qz + x * qy - y * qx + z * qw,
            w * qw - x * qx - y * qy - z * qz,
        ]
    )
    return turned / np.linalg.norm(turned)


TAGS = adapt.EnvTags(
    observation={
        "agentview_rgb": adapt.ImageTag(adapt.IMAGE_PRIMARY),
        "eef_pos": adapt.StateTag(adapt.EEF_POS),
        "eef_quat": adapt.StateTag(adapt.EEF_ROT, encoding="quat_xyzw"),
        "gripper_qpos": adapt.StateTag(adapt.GRIPPER_POS),
        "language_instruction": adapt.TextTag(adapt.INSTRUCTION),
    },
    action=adapt.Action(
        adapt.Actuator(adapt.ACTION_DELTA_POS, 3),
        adapt.Actuator(adapt.ACTION_DELTA_ROT, 3, encoding="axis_angle"),
        adapt.Actuator(adapt.ACTION_GRIPPER, 1, range=(-1.0, 1.0)),
        clip=(-1.0, 1.0),
    ),
)


def make_env(**options) -> ArmEnv:
    """The env, tagged: its metadata carries the tags, so any server publishes them."""
    return adapt.tag(ArmEnv(**options), TAGS)


class ReachPolicy(Model):
    """The model: its own payload in, its own 10-D action out."""

    spec = adapt.ModelSpec(
        input={
            "image": adapt.Image(adapt.IMAGE_PRIMARY, size=32, resample="bilinear_aa", stack=2),
            "state": adapt.Concat(
                adapt.EEF_POS, adapt.State(adapt.EEF_ROT, encoding="rot6d"), adapt.GRIPPER_POS
            ),
            "task": adapt.Text(adapt.INSTRUCTION),
        },
        output=adapt.Action(
            adapt.Actuator(adapt.ACTION_DELTA_POS, 3),
            adapt.Actuator(adapt.ACTION_DELTA_ROT, 6, encoding="rot6d"),
            adapt.Actuator(adapt.ACTION_GRIPPER, 1, range=(0.0, 1.0)),
        ),
    )

    def predict(self, payload):
        image, state = payload["image"], payload["state"]  # (2, 32, 32, 3), (10,)
        motion = float(np.abs(image[1].astype(np.float32) - image[0]).mean()) / 255
        toward = np.clip(4.0 * (GOAL - state[:3]), -1.0, 1.0)
        # Turn a little toward the identity orientation (rot6d: the first two columns).
        rotation = state[3:9] + 0.5 * (np.array([1.0, 0.0, 0.0, 0.0, 1.0, 0.0]) - state[3:9])
        close = 1.0 if "cube" in payload["task"] else 0.0
        return np.concatenate([toward, rotation, [close - motion]]).astype(np.float32)


SEEDS = (0, 1, 2)


async def evaluate_served(serve) -> list[float]:
    """Evaluate against an env server that ``serve(task_status)`` starts."""
    async with trio.open_nursery() as nursery:
        address = await nursery.start(serve)
        options = trio_rlmesh.RunLocalOptions(address, episode_seeds=SEEDS)
        report = await trio_rlmesh.run_local(ReachPolicy(), options)
        nursery.cancel_scope.cancel()
    return [episode.reward for episode in report.episodes]


async def serve_ours(task_status=trio.TASK_STATUS_IGNORED) -> None:
    await serve_env(make_env(), "127.0.0.1:0", task_status=task_status)


async def serve_rlmeshs(task_status=trio.TASK_STATUS_IGNORED) -> None:
    """RLMesh's own env server, in a thread of this process, for as long as we wait."""
    import warnings

    import rlmesh

    with warnings.catch_warnings():  # it asks for a pinned workflow edition; any will do here
        warnings.simplefilter("ignore")
        server = rlmesh.EnvServer(make_env(), "127.0.0.1:0")
    server.start()
    try:
        task_status.started(server.address)
        await trio.sleep_forever()
    finally:
        server.shutdown()


async def main() -> None:
    env = make_env()
    adapter = adapt.resolve_from_contract(env, ReachPolicy.spec)
    print(adapter.explain())

    with trio.fail_after(60):
        options = trio_rlmesh.RunLocalOptions(make_env(), episode_seeds=SEEDS)
        local = await trio_rlmesh.run_local(ReachPolicy(), options)
        rewards = {"in process": [episode.reward for episode in local.episodes]}
        rewards["trio-rlmesh serve_env"] = await evaluate_served(serve_ours)
        try:
            import rlmesh  # noqa: F401
        except ImportError:
            print("(rlmesh is not installed: skipping rlmesh.EnvServer)")
        else:
            rewards["rlmesh.EnvServer"] = await evaluate_served(serve_rlmeshs)
    for where, values in rewards.items():
        print(f"{where:>22}: " + "  ".join(f"{value:8.4f}" for value in values))
    same = all(values == rewards["in process"] for values in rewards.values())
    print("same episodes everywhere:", same)


if __name__ == "__main__":
    trio.run(main)
