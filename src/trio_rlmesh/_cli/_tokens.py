"""Authorization tokens from the command line, a file or the environment.

A token on the command line (``--token T``) is visible to every user of the machine (``ps``
shows it), so it can also come from a file (``--token-file PATH``) or an environment variable
(``TRIO_RLMESH_TOKEN``; for ``run`` also per side, ``TRIO_RLMESH_ENV_TOKEN`` and
``TRIO_RLMESH_MODEL_TOKEN``).

Precedence: a flag beats a file, which beats a variable; within each, the per-side form beats
the shared one. An empty token, wherever it comes from, is refused: it is almost always an
unset variable expanded by the shell, and serving with it would turn authentication off.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Final, Literal

from .._errors import SpecError
from ..protocol._internal import check_token
from ._exit import UsageError
from ._output import read_text_file

__all__ = [
    "ENV_TOKEN_VARIABLE",
    "MODEL_TOKEN_VARIABLE",
    "TOKEN_VARIABLE",
    "add_side_token_options",
    "add_token_options",
    "explicit_side_token",
    "resolve_token",
]

TOKEN_VARIABLE: Final = "TRIO_RLMESH_TOKEN"
ENV_TOKEN_VARIABLE: Final = "TRIO_RLMESH_ENV_TOKEN"
MODEL_TOKEN_VARIABLE: Final = "TRIO_RLMESH_MODEL_TOKEN"

Side = Literal["env", "model"]
_SIDE_VARIABLES: Final[dict[str, str]] = {"env": ENV_TOKEN_VARIABLE, "model": MODEL_TOKEN_VARIABLE}


def add_token_options(parser: argparse.ArgumentParser, help_text: str) -> None:
    """``--token`` and ``--token-file``."""
    parser.add_argument("--token", help=f"{help_text} (ps shows it to other users)")
    parser.add_argument(
        "--token-file",
        type=Path,
        metavar="PATH",
        help=f"read the token from this file (else ${TOKEN_VARIABLE})",
    )


def add_side_token_options(parser: argparse.ArgumentParser) -> None:
    """``--env-token``, ``--env-token-file``, ``--model-token``, ``--model-token-file``."""
    for side in ("env", "model"):
        parser.add_argument(
            f"--{side}-token", help=f"token for the {side} server only (beats --token)"
        )
        parser.add_argument(
            f"--{side}-token-file",
            type=Path,
            metavar="PATH",
            help=f"read the {side} server's token from this file (else ${_SIDE_VARIABLES[side]})",
        )


def _checked(token: str, refusal: str) -> str:
    """``token`` if the API's rule (:func:`check_token`, which the servers and clients
    apply again) takes it; else a usage error saying ``refusal``, which names where the
    token came from."""
    try:
        check_token(token)
    except SpecError:
        raise UsageError(refusal) from None
    return token


def _unset(source: str) -> str:
    return (
        f"the token from {source} is empty (an unset variable?); give a non-empty token, "
        "or none at all to go without authentication"
    )


def _read(path: Path, option: str) -> str:
    return _checked(
        read_text_file(path, option).strip(),
        f"{option} {path} is empty; write the token into it, or drop {option} to go "
        "without authentication",
    )


def resolve_token(
    args: argparse.Namespace, side: Side | None = None, environ: Mapping[str, str] | None = None
) -> str | None:
    """The token for ``side`` (``None``: the one token of a server command), or ``None``.

    Raises:
        UsageError: the token found is empty, or its file cannot be read.
    """
    environ = os.environ if environ is None else environ
    prefixes = [f"{side}_", ""] if side is not None else [""]
    for prefix in prefixes:
        value = getattr(args, f"{prefix}token", None)
        if value is not None:
            return _checked(value, _unset(f"--{prefix.replace('_', '-')}token"))
    for prefix in prefixes:
        path = getattr(args, f"{prefix}token_file", None)
        if path is not None:
            return _read(path, f"--{prefix.replace('_', '-')}token-file")
    variables = [_SIDE_VARIABLES[side], TOKEN_VARIABLE] if side is not None else [TOKEN_VARIABLE]
    for variable in variables:
        value = environ.get(variable)
        if value is not None:
            return _checked(value, _unset(f"${variable}"))
    return None


def explicit_side_token(args: argparse.Namespace, side: Side) -> str | None:
    """The option that gave ``side`` a token of its own (``--env-token``...), if one did."""
    if getattr(args, f"{side}_token", None) is not None:
        return f"--{side}-token"
    if getattr(args, f"{side}_token_file", None) is not None:
        return f"--{side}-token-file"
    return None
