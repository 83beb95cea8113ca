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


CHAIN_SIZE = 384
CHAIN_MATMULS = 3
"""A CPU-bound model's forward: this many products of ``CHAIN_SIZE``² float32 matrices, about
2.5 ms of one CPU here with single-threaded BLAS (``bench/run.py`` asks for it)."""


class MatmulChain:
    """A forward whose CPU cost per call is fixed, whatever the batch: a fixed chain of
    matrix products (numpy releases the GIL while it multiplies). The policy's actions do
    not depend on it, so both sides still run the same episodes."""

    def __init__(self) -> None:
        rng = np.random.default_rng(0)
        scale = np.float32(1.0 / np.sqrt(CHAIN_SIZE))
        self.weights = [
            rng.standard_normal((CHAIN_SIZE, CHAIN_SIZE), dtype=np.float32) * scale
            for _ in range(CHAIN_MATMULS)
        ]
        self.state = rng.standard_normal((CHAIN_SIZE, CHAIN_SIZE), dtype=np.float32)

    def __call__(self) -> float:
        hidden = self.state
        for weight in self.weights:
            hidden = hidden @ weight
        return float(hidden[0, 0])


def image_action(observation: Any) -> np.int64:
    """Read one pixel; cheap, so the benchmark measures the transport, not the model."""
    return np.int64(int(observation[0, 0, 0]) % 4)


class OursCartPole(Model):
    def predict(self, observation: Any) -> Any:
        return cartpole_action(observation)


class OursCartPoleBatch(Model):
    def predict_batch(self, observations: Any) -> Any:
        return cartpole_actions(observations)


class OursCartPoleChain(Model):
    """The batched CartPole rule behind a :class:`MatmulChain` forward (one per call)."""

    def __init__(self) -> None:
        self.forward = MatmulChain()

    def predict_batch(self, observations: Any) -> Any:
        self.forward()
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

    class TheirCartPoleChain(RlmeshModel):  # type: ignore[misc]
        workflow_edition = "2026.06"

        def __init__(self) -> None:
            super().__init__()
            self.forward = MatmulChain()

        def predict(self, observation: Any) -> Any:
            self.forward()
            return cartpole_action(observation)

    return {
        "cartpole": TheirCartPole(),
        "cartpole_chain": TheirCartPoleChain(),
        "vector16": TheirCartPoleBatch(),
        "image": TheirImage(),
    }


def ours_models() -> dict[str, Any]:
    """trio-rlmesh model instances, by kind."""
    return {"cartpole": OursCartPole(), "vector16": OursCartPoleBatch(), "image": OursImage()}
