"""Which gRPC backends exist, and picking one by name.

The interface (:mod:`._backend`) knows no backend; each backend imports it, and this
module imports the backends, so the dependencies point one way. Two backends ship:

* ``"trio"`` (the default): gRPC over ``h2`` on trio sockets, no other event loop
  (:mod:`._trio_backend`); it also serves and reaches in-memory addresses
  (``memory://name``) for tests;
* ``"grpclib"``: grpclib on an asyncio loop in a helper thread, reached through the
  portal (:mod:`._grpclib_backend`), imported only when picked.
"""

from __future__ import annotations

from typing import Final, get_args

from ._backend import Backend, BackendName

__all__ = ["BACKENDS", "check_backend", "get_backend"]

BACKENDS: Final[tuple[BackendName, ...]] = get_args(BackendName)


def check_backend(name: str) -> BackendName:
    """Validate a backend name (for options and the CLI).

    >>> check_backend("trio")
    'trio'
    """
    if name not in BACKENDS:
        raise ValueError(f"unknown gRPC backend {name!r}; use one of {', '.join(BACKENDS)}")
    return name


def get_backend(name: str = "trio") -> Backend:
    """The backend called ``name`` (importing grpclib only for ``"grpclib"``)."""
    if check_backend(name) == "grpclib":
        from ._grpclib_backend import GRPCLIB_BACKEND

        return GRPCLIB_BACKEND
    from ._trio_backend import TRIO_BACKEND

    return TRIO_BACKEND
