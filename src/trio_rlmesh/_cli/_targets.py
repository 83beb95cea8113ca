"""What the command line names: env and model targets, ``module:attr`` objects, addresses.

Every mistake here is a :class:`~._exit.UsageError` whose message names what was wrong
and what to do instead.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import PurePath
from typing import Any

from .._errors import EnvError
from .._facade import looks_like_gymnasium_id
from ._exit import UsageError
from ._policies import BUILTIN_MODELS

__all__ = [
    "GymnasiumFactory",
    "add_env_kwargs_options",
    "add_grpc_backend_option",
    "check_address",
    "check_bind_address",
    "env_kwargs",
    "is_address",
    "load_env_target",
    "load_model_target",
    "load_object",
]

_CORNERS = ("predict", "predict_batch", "predict_chunk", "predict_chunk_batch")
_INSTALL_GYMNASIUM = "pip install 'trio-rlmesh[gymnasium]'"


def is_address(target: str) -> bool:
    """Whether ``target`` reads as a server address rather than a ``module:attr`` target.

    >>> is_address("127.0.0.1:50051"), is_address("unix:///tmp/env.sock"), is_address("m:Env")
    (True, True, False)
    """
    if target.startswith(("tcp://", "unix://", "http://", "https://")):
        return True
    host, sep, port = target.rpartition(":")
    return bool(sep and host and port.isdigit())


def check_address(target: str, option: str) -> str:
    """Validate a connect address (``--env``, ``--model``); returns it unchanged.

    Raises:
        UsageError: a bad scheme, an empty host, or a port out of range.
    """
    from ..transports.grpc import parse_address

    try:
        parse_address(target)
    except ValueError as exc:
        raise UsageError(f"{option}: {exc} (ports are 0-65535)") from None
    return target


def check_bind_address(target: str) -> str:
    """Validate ``--bind``; returns it unchanged."""
    from ..transports.grpc import parse_bind_address

    try:
        parse_bind_address(target)
    except ValueError as exc:
        raise UsageError(f"--bind: {exc} (ports are 0-65535)") from None
    return target


def add_env_kwargs_options(parser: argparse.ArgumentParser) -> None:
    """``--env-kwargs`` and ``--env-arg``, shared by ``run`` and ``serve-env``."""
    parser.add_argument(
        "--env-kwargs",
        metavar="JSON",
        help="keyword arguments for the env, a JSON object (gymnasium:<id>, a class or a function)",
    )
    parser.add_argument(
        "--env-arg",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="one keyword argument for the env (repeatable; VALUE is JSON, else a string)",
    )


def add_grpc_backend_option(parser: argparse.ArgumentParser) -> None:
    """``--grpc-backend``, shared by the servers and ``run`` (which speaks it as a client)."""
    from ..transports.grpc import BACKENDS

    parser.add_argument(
        "--grpc-backend",
        choices=BACKENDS,
        default="trio",
        help="gRPC over h2 on trio (default), or grpclib on an asyncio helper thread",
    )


def env_kwargs(kwargs_json: str | None, pairs: Sequence[str]) -> dict[str, Any]:
    """Merge ``--env-kwargs JSON`` with repeated ``--env-arg k=v`` (later ones win).

    A ``k=v`` value is parsed as JSON when it parses, else kept as a string.

    >>> env_kwargs('{"a": 1}', ["b=2.5", "c=rgb_array", "a=[1, 2]"])
    {'a': [1, 2], 'b': 2.5, 'c': 'rgb_array'}
    """
    merged: dict[str, Any] = {}
    if kwargs_json is not None:
        try:
            parsed = json.loads(kwargs_json)
        except json.JSONDecodeError as exc:
            raise UsageError(
                f"--env-kwargs is not valid JSON ({exc.msg}); "
                'pass an object such as \'{"render_mode": "rgb_array"}\''
            ) from None
        if not isinstance(parsed, dict):
            raise UsageError(
                f"--env-kwargs must be a JSON object, got {type(parsed).__name__}; "
                'pass e.g. \'{"render_mode": "rgb_array"}\''
            )
        merged.update(parsed)
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--env-arg takes key=value, got {pair!r}")
        try:
            value: Any = json.loads(text)
        except json.JSONDecodeError:
            value = text
        merged[key.strip()] = value
    return merged


def _file_hint(module_name: str, attr: str) -> str:
    path = PurePath(module_name)
    stem = path.stem if path.suffix == ".py" else path.name
    folder = str(path.parent)
    if folder in ("", "."):
        return f"use {stem}:{attr}"
    return f"run from {folder} with {stem}:{attr}, or put {folder} on PYTHONPATH"


def load_object(target: str, what: str, form: str = "module:attr") -> Any:
    """Import ``module:attr`` (dotted attributes allowed) from the installed packages or cwd.

    Raises:
        UsageError: ``target`` is not ``module:attr``, names a file, or the import or the
            lookup failed.
    """
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"{what} must be {form}, got {target!r}")
    if "/" in module_name or "\\" in module_name or module_name.endswith(".py"):
        raise UsageError(
            f"{what} {target!r} names a file, but module:attr takes a module name: "
            f"{_file_hint(module_name, attr)}"
        )
    # A console script does not put the working directory on sys.path; users expect
    # `trio-rlmesh run --model my_policy:Policy` to find ./my_policy.py.
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        value: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and module_name.split(".")[0] == exc.name.split(".")[0]:
            raise UsageError(
                f"{what} {target!r}: no module named {exc.name!r} (module:attr imports the "
                "module from the installed packages or the current directory)"
            ) from None
        raise UsageError(
            f"{what} {target!r}: importing {module_name!r} needs {exc.name!r}, "
            "which is not installed"
        ) from None
    except Exception as exc:
        raise UsageError(
            f"{what} {target!r}: importing {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from exc
    for part in attr.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise UsageError(f"{what} {target!r}: module {module_name!r} has no {attr!r}") from None
    return value


def _is_env(value: Any) -> bool:
    return not isinstance(value, type) and hasattr(value, "step") and hasattr(value, "reset")


def _a(value: Any) -> str:
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def _not_an_env(subject: str, value: Any) -> UsageError:
    return UsageError(
        f"{subject} {_a(value)}, not an env: name a Gymnasium env, a vector env, a list of "
        "envs, or a class or function that returns one"
    )


def _import_gymnasium(target: str) -> Any:
    try:
        import gymnasium
    except ImportError:
        raise UsageError(
            f"ENV {target!r} needs Gymnasium, which is not installed: {_INSTALL_GYMNASIUM}"
        ) from None
    return gymnasium


class GymnasiumFactory:
    """What ``gymnasium:<id>`` loads to: each call makes the env, and the Gymnasium
    ``EnvSpec`` of the last env made is kept (a recording names it, so that the dataset
    can make the env again)."""

    def __init__(self, target: str, env_id: str, kwargs: Mapping[str, Any]) -> None:
        gymnasium = _import_gymnasium(target)
        try:
            gymnasium.spec(env_id)
        except gymnasium.error.Error as exc:
            raise UsageError(f"unknown Gymnasium env {env_id!r}: {exc}") from None
        self.target = target
        self.env_id = env_id
        self.kwargs = dict(kwargs)
        self.spec: Any = None
        """The ``EnvSpec`` of the last env made (``None`` before the first)."""

    def __call__(self) -> Any:
        import gymnasium

        if self.kwargs.get("render_mode") == "rgb_array":
            _headless()
        try:
            env = gymnasium.make(self.env_id, **self.kwargs)
        except Exception as exc:
            raise _creation_error(self.target, exc, self.kwargs) from exc
        self.spec = getattr(env, "spec", None)
        return env


def _headless() -> None:
    """``rgb_array`` frames need no window and no sound: keep SDL (which draws Gymnasium's
    classic-control frames, through pygame) from looking for a display or an audio device,
    which on a machine without them only prints errors. A value the user set stays."""
    for variable in ("SDL_VIDEODRIVER", "SDL_AUDIODRIVER"):
        os.environ.setdefault(variable, "dummy")


def _missing_dependency(exc: BaseException) -> bool:
    if isinstance(exc, ImportError):
        return True
    gymnasium = sys.modules.get("gymnasium")
    missing = getattr(getattr(gymnasium, "error", None), "DependencyNotInstalled", None)
    return isinstance(missing, type) and isinstance(exc, missing)


def _creation_error(target: str, exc: Exception, kwargs: Mapping[str, Any]) -> Exception:
    """Why creating the env failed: a missing package or bad arguments (usage errors),
    else an :class:`~trio_rlmesh.EnvError` naming the env's own exception."""
    if _missing_dependency(exc):
        return UsageError(f"ENV {target!r} needs a package that is not installed: {exc}")
    if isinstance(exc, TypeError) and kwargs:
        return UsageError(f"ENV {target!r} does not take the arguments {dict(kwargs)}: {exc}")
    return EnvError(f"creating the env {target!r} failed: {type(exc).__name__}: {exc}")


def _checked_factory(target: str, factory: Callable[..., Any], kwargs: Mapping[str, Any]) -> Any:
    name = getattr(factory, "__qualname__", None) or type(factory).__name__

    def make() -> Any:
        try:
            made = factory(**kwargs)
        except Exception as exc:
            raise _creation_error(target, exc, kwargs) from exc
        if not _is_env(made):
            raise _not_an_env(f"ENV {target!r}: {name}() returned", made)
        return made

    return make


def load_env_target(
    target: str, kwargs: Mapping[str, Any] | None = None, *, run: bool = False
) -> Any:
    """Resolve ENV to what ``serve_env`` takes.

    * ``gymnasium:<id>``: a factory calling ``gymnasium.make(<id>, **kwargs)``, after
      checking that the id is registered;
    * ``module:attr`` naming a class or a function: a factory calling it with ``kwargs``
      (each call must return an env);
    * ``module:attr`` naming an env, a vector env or a list of envs: returned as is
      (``kwargs`` are refused: the object exists already).

    Raises:
        UsageError: what is wrong with ``target`` and what to write instead.
    """
    kwargs = dict(kwargs or {})
    form = (
        "gymnasium:<id>, module:attr or a server address"
        if run
        else "gymnasium:<id> or module:attr"
    )
    module_name, sep, rest = target.partition(":")
    if module_name == "gymnasium" and rest:
        return GymnasiumFactory(target, rest, kwargs)
    if not sep and looks_like_gymnasium_id(target):
        raise UsageError(f"ENV must be {form}, got {target!r}; did you mean gymnasium:{target}?")
    value = load_object(target, "ENV", form)
    if isinstance(value, type) or (callable(value) and not _is_env(value)):
        return _checked_factory(target, value, kwargs)
    if kwargs:
        raise UsageError(
            f"--env-kwargs/--env-arg need a gymnasium:<id>, a class or a function; "
            f"ENV {target!r} is {_a(value)} that already exists"
        )
    if isinstance(value, (list, tuple)):
        if not value:
            raise UsageError(f"ENV {target!r} is an empty list; name at least one env")
        for item in value:
            if not _is_env(item):
                raise _not_an_env(f"ENV {target!r} holds", item)
        return value
    if not _is_env(value):
        raise _not_an_env(f"ENV {target!r} is", value)
    return value


def load_model_target(target: str, *, run: bool = False) -> Any:
    """Resolve MODEL: a built-in model's name (``random``), or ``module:attr``, where a
    class is instantiated without arguments.

    Raises:
        UsageError: ``target`` cannot be loaded, or names something without a predict corner.
    """
    builtin = BUILTIN_MODELS.get(target)
    if builtin is not None:
        return builtin()
    if ":" not in target:
        names = ", ".join(repr(name) for name in BUILTIN_MODELS)
        form = (
            f"module:attr, a model server address or {names}" if run else f"module:attr or {names}"
        )
        close = difflib.get_close_matches(target, BUILTIN_MODELS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise UsageError(f"MODEL must be {form}, got {target!r}{hint}")
    model = load_object(target, "MODEL")
    if isinstance(model, type):
        try:
            model = model()
        except Exception as exc:
            raise UsageError(
                f"MODEL {target!r}: creating it without arguments failed: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
    if not any(hasattr(model, corner) for corner in _CORNERS):
        raise UsageError(
            f"MODEL {target!r} has no predict method (nor predict_batch, predict_chunk or "
            "predict_chunk_batch)"
        )
    return model
