"""A model's spec meets an env's contract: the one rule the runtime, the model host and the
command line resolve a pairing by, and the one wording of its failure."""

from __future__ import annotations

from typing import Any

from ._adapter import Adapter
from ._api import resolve_from_contract
from ._errors import AdapterResolutionError
from ._model_spec import ModelSpec

__all__ = ["adapter_for", "pairing_failure"]


def adapter_for(spec: object, contract: Any) -> Adapter | None:
    """The adapter between a model's ``spec`` and an env's ``contract`` (anything
    :func:`~trio_rlmesh.adapters.resolve_from_contract` takes), or ``None`` when the model
    declares no spec (``None``, or RLMesh's ``NO_ADAPTER``: the model adapts itself).

    Raises:
        AdapterResolutionError: the spec is not a :class:`~trio_rlmesh.adapters.ModelSpec`,
            the env publishes no tags (RLMesh's words), or the pairing cannot work.
    """
    if spec is None or repr(spec) == "NO_ADAPTER":
        return None
    if not isinstance(spec, ModelSpec):
        raise AdapterResolutionError(
            f"a model spec must be a ModelSpec or NO_ADAPTER; got {type(spec).__name__}"
        )
    return resolve_from_contract(contract, spec)


def pairing_failure(model: str, env: str, error: BaseException) -> str:
    """How a pairing that cannot be resolved is said: the model, the env (as the caller
    labels it), the resolver's words, and what to change.

    >>> pairing_failure("'m'", "env 'Arm-v0'", ValueError("no tags")).split("; ")[0]
    "model 'm' cannot be paired with env 'Arm-v0': no tags"
    """
    return (
        f"model {model} cannot be paired with {env}: {error}; change the model's spec or the "
        "env's tags (trio-rlmesh explain shows the pairing)"
    )
