"""The policies ``run`` uses when no ``--model`` is given."""

from __future__ import annotations

from typing import Any

__all__ = ["HeuristicCartPole"]


class HeuristicCartPole:
    """The built-in CartPole policy: push the cart toward the side the pole is falling to.

    >>> HeuristicCartPole().predict([0.0, 0.0, 0.05, 0.1])
    1
    """

    def predict(self, observation: Any) -> int:
        """The action for one CartPole observation."""
        _, velocity, angle, angular_velocity = (float(v) for v in observation)
        return int(angle + 0.3 * angular_velocity + 0.01 * velocity > 0)
