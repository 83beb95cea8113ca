"""The adapters' two failures: a pairing that cannot resolve, a value that cannot apply."""

from __future__ import annotations

from .._errors import Error, SpecError

__all__ = ["AdapterResolutionError", "ApplyError"]


class AdapterResolutionError(SpecError):
    """Env tags and a model spec cannot be reconciled; the message says what to change.

    Raised at resolve time (never per step), and by :func:`~trio_rlmesh.adapters.tag` when
    tags disagree with the env's spaces. A :class:`ValueError`, as in RLMesh.
    """


class ApplyError(Error, ValueError):
    """A resolved adapter met an observation or action it cannot convert.

    The value broke the contract the adapter was resolved against (a missing key, a leaf of
    the wrong width, an action of the wrong length). A :class:`ValueError`, as in RLMesh.
    """
