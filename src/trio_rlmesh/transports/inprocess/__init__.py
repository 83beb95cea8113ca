"""In-process adapters: a model handler and a Gymnasium env as runtime endpoints, no network."""

from ._env import GymEnvRuntimeEnv as GymEnvRuntimeEnv
from ._env import link_in_process as link_in_process
from ._model import ModelHandlerRuntimeModel as ModelHandlerRuntimeModel

__all__ = ["GymEnvRuntimeEnv", "ModelHandlerRuntimeModel", "link_in_process"]
