"""The policies ``run`` uses when no ``--model`` is given, and the models named by name.

The CartPole heuristic is for CartPole only; any other env gets the random baseline, which
samples the env's action space as RLMesh's ``RANDOM_SAMPLE`` does. ``random`` is also a
model of its own: ``run --model random``, ``serve-model random``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

from .._errors import Error, ModelError
from ..model import ModelObservation, PredictFrames
from ..protocol import EnvContractInfo
from ..spaces import Box, Discrete
from ._exit import UsageError

__all__ = ["BUILTIN_MODELS", "RANDOM_MODEL", "HeuristicCartPole", "RandomPolicy", "is_cartpole"]

RANDOM_MODEL: Final = "random"
"""``--model random``, ``serve-model random``: the random baseline (RLMesh's ``RANDOM_SAMPLE``)."""


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

    A :class:`~trio_rlmesh.model.ModelHandler`, so it learns each route's action space from
    the route itself: ``run --model random`` runs it in process, ``serve-model random``
    serves it to any runtime. Sampling uses Gymnasium's spaces (``action_space.sample()``,
    as RLMesh does), each route's seeded with ``seed`` when one is given.

    Raises:
        UsageError: Gymnasium is not installed.
    """

    name = RANDOM_MODEL

    def __init__(self, seed: int | None = None) -> None:
        try:
            import gymnasium.spaces  # noqa: F401 - sampling needs it; say so now, not later
        except ImportError:
            raise UsageError(
                "the random policy samples the action space with Gymnasium, which is not "
                "installed: pip install 'trio-rlmesh[gymnasium]', or pass --model"
            ) from None
        self._seed = seed
        self._spaces: dict[tuple[str, int], Any] = {}

    def _space(self, group: ModelObservation) -> Any:
        space = group.action_space
        if space is None:
            raise ModelError(
                f"the random policy has no action space to sample for {group.env_label}",
                operation="model.predict",
            )
        key = (group.env_id, id(space))
        sampled = self._spaces.get(key)
        if sampled is None:
            from ..spaces import to_gymnasium

            sampled = self._spaces[key] = to_gymnasium(space)
            sampled.seed(self._seed)
        return sampled

    async def predict_grouped(
        self, observations: list[ModelObservation]
    ) -> list[PredictFrames | Error]:
        """A fresh sample of each lane's action space (the observations are not looked at)."""
        answers: list[PredictFrames | Error] = []
        for group in observations:
            try:
                space = self._space(group)
            except Error as exc:
                answers.append(exc)
                continue
            answers.append(PredictFrames([space.sample() for _ in range(group.num_envs)]))
        return answers

    def route_setup(self) -> None:
        """Routes need no setup: the action space comes with every predict."""

    async def reset_adapter(self, env_id: str, episode_ids: Sequence[str]) -> None:
        """Nothing is kept per episode."""

    def take_adapter_ns(self) -> int:
        """No adapter work is done."""
        return 0

    def held_state(self) -> None:
        """No per-episode state is held."""

    async def close(self) -> None:
        """Forget the routes' spaces."""
        self._spaces.clear()


BUILTIN_MODELS: dict[str, Callable[[], Any]] = {RANDOM_MODEL: RandomPolicy}
"""The models the command line names without ``module:attr``."""
