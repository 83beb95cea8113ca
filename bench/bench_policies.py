"""One policy per env, written once in numpy and wrapped for each side.

``ours_*`` return trio-rlmesh :class:`~trio_rlmesh.model.Model` objects; ``theirs_*``
build ``rlmesh.numpy.Model`` subclasses (rlmesh is imported only there).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trio_rlmesh.model import Model


def cartpole_action(observation: Any) -> np.int64:
    """Push the cart toward the side the pole is falling to."""
    _, velocity, angle, angular_velocity = (float(v) for v in observation)
    return np.int64(1 if angle + 0.3 * angular_velocity + 0.01 * velocity > 0 else 0)


def cartpole_actions(observations: Any) -> np.ndarray:
    """The same rule over a ``[N, 4]`` batch, in one vectorised expression."""
    obs = np.asarray(observations, dtype=np.float64)
    score = obs[:, 2] + 0.3 * obs[:, 3] + 0.01 * obs[:, 1]
    return (score > 0).astype(np.int64)


def image_action(observation: Any) -> np.int64:
    """Read one pixel; cheap, so the benchmark measures the transport, not the model."""
    return np.int64(int(observation[0, 0, 0]) % 4)


class OursCartPole(Model):
    def predict(self, observation: Any) -> Any:
        return cartpole_action(observation)


class OursCartPoleBatch(Model):
    def predict_batch(self, observations: Any) -> Any:
        return cartpole_actions(observations)


class OursImage(Model):
    def predict(self, observation: Any) -> Any:
        return image_action(observation)


def theirs_models() -> dict[str, Any]:
    """rlmesh model instances, by kind (imports rlmesh)."""
    from rlmesh.numpy import Model as RlmeshModel

    class TheirCartPole(RlmeshModel):  # type: ignore[misc]
        workflow_edition = "2026.06"

        def predict(self, observation: Any) -> Any:
            return cartpole_action(observation)

    class TheirCartPoleBatch(RlmeshModel):  # type: ignore[misc]
        workflow_edition = "2026.06"

        def predict_batch(self, observations: Any) -> Any:
            return cartpole_actions(observations)

    class TheirImage(RlmeshModel):  # type: ignore[misc]
        workflow_edition = "2026.06"

        def predict(self, observation: Any) -> Any:
            return image_action(observation)

    return {
        "cartpole": TheirCartPole(),
        "vector16": TheirCartPoleBatch(),
        "image": TheirImage(),
    }


def ours_models() -> dict[str, Any]:
    """trio-rlmesh model instances, by kind."""
    return {"cartpole": OursCartPole(), "vector16": OursCartPoleBatch(), "image": OursImage()}
