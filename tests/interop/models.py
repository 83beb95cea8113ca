"""Policies the model interop tests run both as trio-rlmesh and as rlmesh 0.1.0 models.

The policies are plain numpy; the rlmesh flavours are defined only when rlmesh is
importable, so ``python -m rlmesh.serve tests.interop.models:RlmeshChunk`` can serve them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trio_rlmesh.model import Model


def cartpole_action(observation: Any) -> np.int64:
    """A deliberately weak CartPole policy, so episode lengths vary with the seed."""
    return np.int64(1 if observation[2] > 0 else 0)


class PlainPolicy:
    def predict(self, observation: Any) -> Any:
        return cartpole_action(observation)


class ChunkPolicy:
    """Six frames per predict: the policy's action, then a fixed wiggle."""

    def predict_chunk(self, observation: Any) -> Any:
        first = cartpole_action(observation)
        return np.array([first, 1 - first, first, first, 1 - first, first], dtype=np.int64)


class OursPlain(PlainPolicy, Model):
    pass


class OursChunk(ChunkPolicy, Model):
    pass


try:
    import rlmesh.numpy as _rlmesh_numpy
except ImportError:  # pragma: no cover - only the interop venv has rlmesh
    pass
else:

    class RlmeshPlain(PlainPolicy, _rlmesh_numpy.Model):  # type: ignore[misc]
        workflow_edition = "2026.06"

    class RlmeshChunk(ChunkPolicy, _rlmesh_numpy.Model):  # type: ignore[misc]
        workflow_edition = "2026.06"

    def _wheel_arm_spec() -> Any:
        import rlmesh.adapters

        from tests.interop.envs import arm_example

        return rlmesh.adapters.ModelSpec.from_dict(arm_example().ReachPolicy.spec.to_dict())

    class RlmeshArm(_rlmesh_numpy.Model):  # type: ignore[misc]
        """``examples/adapted_arm.py``'s policy as RLMesh's spec'd model."""

        workflow_edition = "2026.06"
        spec = _wheel_arm_spec()

        def predict(self, observation: Any) -> Any:
            from tests.interop.envs import arm_example

            return arm_example().ReachPolicy().predict(observation)
