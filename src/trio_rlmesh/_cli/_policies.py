"""The policies ``run`` uses when no ``--model`` is given, or ``--model random``.

The CartPole heuristic is for CartPole only; any other env gets the random baseline, which
samples the env's action space as RLMesh's ``RANDOM_SAMPLE`` does.
"""

from __future__ import annotations

from typing import Any

from ..protocol import EnvContractInfo
from ..spaces import Box, Discrete
from ._exit import UsageError

__all__ = ["HeuristicCartPole", "RandomPolicy", "is_cartpole"]


class HeuristicCartPole:
    """The built-in CartPole policy: push the cart toward the side the pole is falling to.

    >>> HeuristicCartPole().predict([0.0, 0.0, 0.05, 0.1])
    1
    """

    def predict(self, observation: Any) -> int:
        """The action for one CartPole observation."""
        _, velocity, angle, angular_velocity = (float(v) for v in observation)
        return int(angle + 0.3 * angular_velocity + 0.01 * velocity > 0)


def is_cartpole(info: EnvContractInfo) -> bool:
    """Whether the env is CartPole: its id says so, and its spaces are CartPole's."""
    name = info.env_id.rpartition("/")[2]
    observation, action = info.observation_space, info.action_space
    return (
        name.startswith("CartPole")
        and isinstance(action, Discrete)
        and (action.n, action.start) == (2, 0)
        and isinstance(observation, Box)
        and tuple(observation.shape) == (4,)
    )


class RandomPolicy:
    """Each action a sample of the env's action space: RLMesh's ``RANDOM_SAMPLE`` baseline.

    Sampling uses Gymnasium's spaces (``action_space.sample()``, as RLMesh does), seeded
    with ``seed`` when one is given.

    Raises:
        UsageError: Gymnasium is not installed.
    """

    def __init__(self, info: EnvContractInfo, seed: int | None = None) -> None:
        try:
            from ..spaces import to_gymnasium

            self._space = to_gymnasium(info.action_space)
        except ImportError:
            raise UsageError(
                "the random policy samples the action space with Gymnasium, which is not "
                "installed: pip install 'trio-rlmesh[gymnasium]', or pass --model"
            ) from None
        self._space.seed(seed)

    def predict(self, observation: Any) -> Any:
        """A fresh sample of the action space (the observation is not looked at)."""
        del observation
        return self._space.sample()
