"""What the command line names: ``module:attr`` objects, env and model targets, addresses."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from .._errors import SpecError

__all__ = ["is_address", "load_env_target", "load_model_target", "load_object"]

_CORNERS = ("predict", "predict_batch", "predict_chunk", "predict_chunk_batch")


def is_address(target: str) -> bool:
    """Whether ``target`` reads as a server address rather than a ``module:attr`` target.

    >>> is_address("127.0.0.1:50051"), is_address("unix:///tmp/env.sock"), is_address("m:Env")
    (True, True, False)
    """
    if target.startswith(("tcp://", "unix://", "http://")):
        return True
    host, sep, port = target.rpartition(":")
    return bool(sep and host and port.isdigit())


def load_object(target: str, what: str, form: str = "module:attr") -> Any:
    """Import ``module:attr`` (dotted attributes allowed) from the installed packages or cwd.

    Raises:
        SpecError: ``target`` is not ``module:attr``, or the import or lookup failed.
    """
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise SpecError(f"{what} must be {form}, got {target!r}")
    # A console script does not put the working directory on sys.path; users expect
    # `trio-rlmesh run --model my_policy:Policy` to find ./my_policy.py.
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        value: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise SpecError(f"cannot import module {module_name!r} for {what}: {exc}") from exc
    for part in attr.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise SpecError(f"module {module_name!r} has no attribute {attr!r}") from None
    return value


def load_env_target(target: str) -> Any:
    """Resolve ENV: ``gymnasium:<id>`` (a factory calling ``gymnasium.make``) or ``module:attr``.

    ``module:attr`` may name an env, a vector env, a list of envs, or a callable returning
    one; it is returned as is (``serve_env`` calls factories itself).
    """
    module_name, _, env_id = target.partition(":")
    if module_name == "gymnasium" and env_id:

        def make() -> Any:
            import gymnasium

            return gymnasium.make(env_id)

        return make
    return load_object(target, "ENV", "gymnasium:<id> or module:attr")


def load_model_target(target: str) -> Any:
    """Resolve MODEL ``module:attr``: a class is instantiated without arguments."""
    model = load_object(target, "MODEL")
    if isinstance(model, type):
        model = model()
    if not any(hasattr(model, corner) for corner in _CORNERS):
        raise SpecError(f"{target!r} has no predict method (nor another predict corner)")
    return model
