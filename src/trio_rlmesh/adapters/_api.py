"""The verbs: :func:`resolve`, :func:`resolve_from_contract` and :func:`tag`."""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping
from typing import Any, TypeVar

from ..protocol import core_v1, read_env_contract
from ._adapter import Adapter
from ._env_spec import EnvTags
from ._errors import AdapterResolutionError
from ._host import address, check_inverses, model_wire
from ._join import join
from ._model_spec import ModelSpec
from ._plans import StatePlan
from ._resolve import resolve_documents
from ._spaceview import view_of
from ._vocab import ENV_METADATA_KEY
from ._wire import WireError, read_env, read_model

__all__ = ["resolve", "resolve_from_contract", "tag"]

EnvT = TypeVar("EnvT")


def _resolve(
    env_document: Any,
    observation_space: object,
    action_space: object,
    model_spec: ModelSpec,
    trust_entrypoints: bool,
    check_inverse: bool,
) -> Adapter:
    if check_inverse:
        check_inverses(model_spec)
    model_document, customs, state_shims, action_shims = model_wire(model_spec, trust_entrypoints)
    try:
        env_doc, env_reading = read_env(env_document, strict=False)
        model_doc, model_reading = read_model(
            json.loads(json.dumps(model_document, allow_nan=False)), strict=False
        )
    except WireError as exc:
        raise AdapterResolutionError(str(exc)) from None
    except ValueError as exc:
        raise AdapterResolutionError(str(exc)) from None
    plan = resolve_documents(
        env_doc,
        env_reading,
        view_of(observation_space),
        view_of(action_space),
        model_doc,
        model_reading,
        customs,
    )
    layouts = {p.placement: (p.widths, p.width) for p in plan.obs if isinstance(p, StatePlan)}
    return Adapter(plan, customs, address(state_shims, layouts), tuple(action_shims))


def resolve(
    env_tags: EnvTags,
    observation_space: object,
    action_space: object,
    model_spec: ModelSpec,
    *,
    trust_entrypoints: bool = False,
    check_inverse: bool = True,
) -> Adapter:
    """Pair an env's tags and spaces with a model's spec: the :class:`Adapter` between them.

    Args:
        env_tags: The env's tags.
        observation_space: The env's observation space (a Gymnasium space, a
            :mod:`trio_rlmesh.spaces` space, or a protocol ``SpaceSpec``).
        action_space: The env's action space (a flat Box).
        model_spec: The model's input tree and action layout.
        trust_entrypoints: Allow importing ``module:callable`` custom inputs (leave it off
            for specs from untrusted sources; in-process callables always run).
        check_inverse: Round-trip each two-armed :class:`CustomEncoding` on a probe value,
            to catch a mispaired encode/decode.

    Raises:
        AdapterResolutionError: a model input or actuator has no usable env counterpart, or a
            declaration is impossible; the message names it and says what to change.

    Example:
        >>> from gymnasium import spaces
        >>> from trio_rlmesh import adapters as adapt
        >>> adapter = adapt.resolve(
        ...     adapt.EnvTags({"q": adapt.StateTag(adapt.JOINT_POS)},
        ...                   adapt.Action(adapt.Actuator(adapt.ACTION_JOINT_POS, 2))),
        ...     spaces.Dict({"q": spaces.Box(-1, 1, (2,))}),
        ...     spaces.Box(-1, 1, (2,)),
        ...     adapt.ModelSpec(adapt.State(adapt.JOINT_POS),
        ...                     adapt.Action(adapt.Actuator(adapt.ACTION_JOINT_POS, 2))),
        ... )
        >>> print(adapter.explain())
        observation:
          "<root>" <- concat(q)
        action:
          "action/joint_pos" <- model[0:2]
    """
    try:
        document = json.loads(json.dumps(env_tags.to_dict()))
    except ValueError as exc:
        raise AdapterResolutionError(str(exc)) from None
    return _resolve(
        document, observation_space, action_space, model_spec, trust_entrypoints, check_inverse
    )


def resolve_from_contract(
    contract: Any,
    model_spec: ModelSpec,
    *,
    trust_entrypoints: bool = False,
    check_inverse: bool = True,
) -> Adapter:
    """Resolve against an env's contract: the tags it publishes in its metadata (under
    :data:`ENV_METADATA_KEY`) and its spaces.

    ``contract`` is what a handshake carries: a protocol ``EnvContract`` message, a
    :class:`~trio_rlmesh.protocol.EnvContractInfo`, or any object with ``metadata``,
    ``observation_space`` and ``action_space``. A peer's tags are read tolerantly: a leaf of
    a kind this build does not know is ignored unless the model needs its role.

    Raises:
        AdapterResolutionError: the contract carries no tags, or resolution fails.
    """
    if isinstance(contract, core_v1.EnvContract):
        contract = read_env_contract(contract)
    metadata: Mapping[str, Any] = getattr(contract, "metadata", None) or {}
    raw = metadata.get(ENV_METADATA_KEY)
    if raw is None:
        raise AdapterResolutionError(
            f"env contract carries no adapter tags under {ENV_METADATA_KEY!r}; serve the env "
            "with rlmesh.adapters.tag(...)"
        )
    if not isinstance(raw, Mapping):
        raise AdapterResolutionError(f"metadata key {ENV_METADATA_KEY!r} must hold a mapping")
    try:
        document = json.loads(json.dumps(raw, allow_nan=False))
    except (ValueError, TypeError) as exc:
        raise AdapterResolutionError(
            f"env contract tags are not serializable JSON: {exc}"
        ) from None
    return _resolve(
        document,
        contract.observation_space,
        contract.action_space,
        model_spec,
        trust_entrypoints,
        check_inverse,
    )


def tag(env: EnvT, tags: EnvTags, *, validate: bool = True) -> EnvT:
    """Publish ``tags`` in ``env.metadata`` (under :data:`ENV_METADATA_KEY`); return ``env``.

    With ``validate`` (the default) the tags are checked against the env's spaces first,
    and the non-fatal hints that raises are shown as warnings.

    Raises:
        AdapterResolutionError: a role or width cannot be reconciled with the spaces.

    Example:
        >>> import gymnasium as gym
        >>> from trio_rlmesh import adapters as adapt
        >>> env = adapt.tag(
        ...     gym.make("CartPole-v1"),
        ...     adapt.EnvTags(adapt.StateTag(adapt.JOINT_POS),
        ...                   adapt.Action(adapt.Actuator(adapt.ACTION_JOINT_POS, 1))),
        ...     validate=False,
        ... )
        >>> adapt.ENV_METADATA_KEY in env.metadata
        True
    """
    if validate:
        _validate(env, tags)
    existing = getattr(env, "metadata", None)
    merged: dict[str, Any] = dict(existing) if isinstance(existing, Mapping) else {}
    merged.update(tags.to_metadata())
    # Gymnasium envs hold metadata as a class attribute; this shadows it on the instance.
    env.metadata = merged  # type: ignore[attr-defined]
    return env


def _validate(env: object, tags: EnvTags) -> None:
    observation_space = getattr(env, "observation_space", None)
    action_space = getattr(env, "action_space", None)
    if observation_space is None or action_space is None:
        raise AdapterResolutionError(
            "cannot validate tags: env exposes no observation_space/action_space; pass "
            "validate=False to tag without checking"
        )
    try:
        document, _ = read_env(json.loads(json.dumps(tags.to_dict())), strict=True)
    except ValueError as exc:
        raise AdapterResolutionError(str(exc)) from None
    features = join(document, view_of(observation_space), view_of(action_space))
    for note in features.advisories:
        warnings.warn(str(note), stacklevel=3)
