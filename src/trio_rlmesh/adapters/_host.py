"""The parts of a model spec that are code, not data: custom inputs and custom encodings.

Neither ever crosses into a plan as code. A custom input becomes a slot the adapter fills by
calling the author's transform (an in-process callable, or a ``module:callable`` entrypoint
imported only when the caller trusts entrypoints). A custom rotation encoding resolves as
its built-in ``base`` encoding; the adapter then repacks that slice with the author's arm
(``from_base`` after a state is assembled, ``to_base`` before an action is converted).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt

from ._action_spec import Action, Actuator, CustomEncoding, action_to_dict
from ._errors import AdapterResolutionError, ApplyError
from ._fmt import render_placement
from ._model_spec import Concat, Custom, Image, ModelSpec, State, Text, model_leaf_to_dict
from ._vocab import LOCAL_ARM, ROTATION_DIMS

__all__ = [
    "ActionShim",
    "StateShim",
    "check_inverses",
    "load_entrypoint",
    "model_wire",
    "repack_action",
    "repack_state",
]

Segments = tuple["str | int", ...]
Transform = Callable[[Mapping[str, Any]], Any]

# One valid value per base encoding, for the inverse self-check.
_PROBES: dict[str, list[float]] = {
    "quat_xyzw": [0.0, 0.0, 0.0, 1.0],
    "quat_wxyz": [1.0, 0.0, 0.0, 0.0],
    "axis_angle": [0.1, -0.2, 0.3],
    "euler_xyz": [0.1, -0.2, 0.3],
    "rot6d": [1.0, 0.0, 0.0, 0.0, 1.0, 0.0],
    "rot6d_rowmajor": [1.0, 0.0, 0.0, 1.0, 0.0, 0.0],
}


@attrs.frozen
class StateShim:
    """Repack one custom-encoded slice of an assembled state leaf (base -> custom)."""

    placement: Segments
    base: str
    width: int
    name: str
    dtype: str
    from_base: Callable[[npt.NDArray[Any]], npt.ArrayLike]
    part: int
    """Which part of the leaf (its offset is known only after resolve)."""
    offset: int = 0
    leaf_width: int = 0


@attrs.frozen
class ActionShim:
    """Repack one custom-encoded slice of the model's action (custom -> base)."""

    offset: int
    base: str
    width: int
    name: str
    to_base: Callable[[npt.NDArray[Any]], npt.ArrayLike]


def load_entrypoint(value: str, label: str) -> Callable[..., Any]:
    """The callable a ``module:callable`` string names.

    Raises:
        ValueError: not in ``module:callable`` form. AttributeError / TypeError: it does not
            resolve to a callable.
    """
    module_name, sep, path = value.partition(":")
    if not sep or not module_name or not path or any(not s for s in path.split(".")):
        raise ValueError(f"{label} must be in module:callable form")
    target: Any = importlib.import_module(module_name)
    for segment in path.split("."):
        try:
            target = getattr(target, segment)
        except AttributeError as exc:
            raise AttributeError(f"{label} {value!r} could not resolve {segment!r}") from exc
    if not callable(target) and not hasattr(target, "make"):
        raise TypeError(
            f"{label} {value!r} did not resolve to a callable or an object with a make() method "
            "(an EnvFactory instance)"
        )
    return target  # type: ignore[no-any-return]


def _is_leaf(node: object) -> bool:
    return isinstance(node, (Image, State, Concat, Text, Custom))


def _leaves(node: Any, at: Segments = ()) -> Iterator[tuple[Segments, Any]]:
    if _is_leaf(node):
        yield at, node
    elif isinstance(node, Mapping):
        for key, child in node.items():
            yield from _leaves(child, (*at, key))
    elif isinstance(node, tuple):
        for index, child in enumerate(node):
            yield from _leaves(child, (*at, index))
    else:
        raise TypeError(f"unexpected input tree node {type(node).__name__}")


def _rebuild(node: Any, leaf: Callable[[Segments, Any], Any], at: Segments = ()) -> Any:
    if _is_leaf(node):
        return leaf(at, node)
    if isinstance(node, Mapping):
        return {key: _rebuild(child, leaf, (*at, key)) for key, child in node.items()}
    if isinstance(node, tuple):
        return tuple(_rebuild(child, leaf, (*at, index)) for index, child in enumerate(node))
    raise TypeError(f"unexpected input tree node {type(node).__name__}")


def _custom_encodings(spec: ModelSpec) -> Iterator[CustomEncoding]:
    for _, leaf in _leaves(spec.input):
        parts = (
            leaf.parts if isinstance(leaf, Concat) else (leaf,) if isinstance(leaf, State) else ()
        )
        for part in parts:
            if isinstance(part, State) and isinstance(part.encoding, CustomEncoding):
                yield part.encoding
    for actuator in spec.output.components:
        if isinstance(actuator.encoding, CustomEncoding):
            yield actuator.encoding


def check_inverses(spec: ModelSpec) -> None:
    """Round-trip each two-armed in-process custom encoding on a probe value.

    Raises:
        AdapterResolutionError: an arm raised, or the arms are not inverses.
    """
    seen: set[int] = set()
    for encoding in _custom_encodings(spec):
        if id(encoding) in seen:
            continue
        seen.add(id(encoding))
        if encoding.is_entrypoint or encoding.from_base is None or encoding.to_base is None:
            continue
        probe = _PROBES.get(encoding.base)
        if probe is None:
            continue
        base = np.asarray(probe, dtype=np.float64)
        try:
            custom = np.asarray(encoding.from_base(base), dtype=np.float64)  # type: ignore[operator]
            back = np.asarray(encoding.to_base(custom), dtype=np.float64)  # type: ignore[operator]
        except Exception as exc:
            raise AdapterResolutionError(
                f"CustomEncoding {encoding.name!r} raised during the inverse self-check: {exc}"
            ) from exc
        if back.shape != base.shape or not np.allclose(back, base, atol=1e-5):
            raise AdapterResolutionError(
                f"CustomEncoding {encoding.name!r} arms are not inverses: "
                f"to_base(from_base({probe})) = {back.tolist()}, expected {probe}; pass "
                "resolve(..., check_inverse=False) to skip"
            )


def _arm(arm: Any, label: str) -> Callable[[npt.NDArray[Any]], npt.ArrayLike]:
    """The runnable arm of a custom encoding: only an in-process callable runs."""
    if not isinstance(arm, str):
        return arm  # type: ignore[no-any-return]
    if arm == LOCAL_ARM:
        raise AdapterResolutionError(
            f"{label}: this custom encoding was read back from a serialized spec; its in-process "
            "transform did not travel, so it cannot be run -- resolve the original spec (holding "
            "the callable) locally"
        )
    raise AdapterResolutionError(
        f"{label}: entrypoint custom-encoding execution is not supported yet; a custom encoding "
        "is a validation/describe schema, not a portable runtime -- use an in-process callable "
        "to run it locally"
    )


def _check_known(encoding: object, label: str) -> None:
    if isinstance(encoding, str) and encoding not in ROTATION_DIMS:
        raise AdapterResolutionError(
            f"{label} has unknown rotation encoding {encoding!r}; expected one of "
            f"{sorted(ROTATION_DIMS)} or a CustomEncoding"
        )


def _shadow_state(at: Segments, leaf: State | Concat, shims: list[StateShim]) -> State | Concat:
    placement = render_placement(at)
    label = f"state input {placement!r}"
    parts = leaf.parts if isinstance(leaf, Concat) else (leaf,)
    shadows: list[Any] = []
    custom = False
    for index, part in enumerate(parts):
        encoding = part.encoding if isinstance(part, State) else None
        _check_known(encoding, label)
        if not isinstance(encoding, CustomEncoding):
            shadows.append(part)
            continue
        assert isinstance(part, State)
        custom = True
        if part.index is not None or part.dim not in (None, encoding.width):
            raise AdapterResolutionError(
                f"{label}: a CustomEncoding part keeps its base width; drop index and set "
                f"dim={encoding.width} or omit it"
            )
        if part.optional:
            raise AdapterResolutionError(f"{label}: a CustomEncoding part cannot be optional")
        if encoding.from_base is None:
            raise AdapterResolutionError(f"{label}: an observation CustomEncoding needs from_base")
        shims.append(
            StateShim(
                at,
                encoding.base,
                encoding.width,
                encoding.name,
                leaf.dtype,
                _arm(encoding.from_base, label),
                index,
            )
        )
        shadows.append(replace(part, encoding=encoding.base))
    if not custom:
        return leaf
    if leaf.reshape is not None:
        raise AdapterResolutionError(
            f"{label}: reshape runs before the host-side encoding shim and would break it; drop it"
        )
    if leaf.container != "array":
        raise AdapterResolutionError(f"{label}: a CustomEncoding requires container='array'")
    if isinstance(leaf, Concat):
        return Concat(
            *shadows,
            pad_to=leaf.pad_to,
            dtype=leaf.dtype,
            reshape=leaf.reshape,
            container=leaf.container,
            clip=leaf.clip,
        )
    return shadows[0]  # type: ignore[no-any-return]


def _shadow_action(action: Action, shims: list[ActionShim]) -> Action:
    components: list[Actuator] = []
    offset = 0
    for actuator in action.components:
        label = f"actuator {actuator.role!r}"
        _check_known(actuator.encoding, label)
        encoding = actuator.encoding
        if isinstance(encoding, CustomEncoding):
            if actuator.binary:
                raise AdapterResolutionError(f"{label}: a CustomEncoding cannot be binary")
            if encoding.to_base is None:
                raise AdapterResolutionError(f"{label}: an action CustomEncoding needs to_base")
            shims.append(
                ActionShim(
                    offset,
                    encoding.base,
                    actuator.dim,
                    encoding.name,
                    _arm(encoding.to_base, label),
                )
            )
            actuator = replace(actuator, encoding=encoding.base)
        components.append(actuator)
        offset += actuator.dim
    return Action(*components, clip=action.clip)


def model_wire(
    spec: ModelSpec, trust_entrypoints: bool
) -> tuple[dict[str, Any], dict[Segments, Transform], list[StateShim], list[ActionShim]]:
    """The model spec's document with code replaced: custom inputs by placeholders, custom
    encodings by their base; the custom inputs' callables and the encodings' repack shims.

    Raises:
        AdapterResolutionError: an untrusted entrypoint, or a custom encoding that cannot run.
    """
    state_shims: list[StateShim] = []
    action_shims: list[ActionShim] = []
    customs: dict[Segments, Transform] = {}

    def shadow(at: Segments, leaf: Any) -> Any:
        if isinstance(leaf, (State, Concat)):
            return _shadow_state(at, leaf, state_shims)
        return leaf

    shadow_input = _rebuild(spec.input, shadow)
    shadow_output = _shadow_action(spec.output, action_shims)

    def wire(at: Segments, leaf: Any) -> Any:
        if not isinstance(leaf, Custom):
            return model_leaf_to_dict(leaf)
        if leaf.transform is not None:
            customs[at] = leaf.transform
            return {"type": "custom", "transform": f"host:{render_placement(at)}"}
        entrypoint = leaf.entrypoint
        assert entrypoint is not None
        if not trust_entrypoints:
            raise AdapterResolutionError(
                f"custom input at {render_placement(at)!r} references entrypoint {entrypoint!r}; "
                "pass resolve(..., trust_entrypoints=True) to allow importing it"
            )
        customs[at] = load_entrypoint(entrypoint, "custom input transform")
        return {"type": "custom", "transform": entrypoint}

    def walk(node: Any, at: Segments = ()) -> Any:
        if _is_leaf(node):
            return wire(at, node)
        if isinstance(node, Mapping):
            return {key: walk(child, (*at, key)) for key, child in node.items()}
        return [walk(child, (*at, index)) for index, child in enumerate(node)]

    document = {"input": walk(shadow_input), "output": action_to_dict(shadow_output)}
    return document, customs, state_shims, action_shims


def address(
    shims: list[StateShim], layouts: Mapping[Segments, tuple[tuple[int | None, ...], int | None]]
) -> tuple[StateShim, ...]:
    """Give each state shim its offset in the resolved leaf (the widths before it)."""
    out: list[StateShim] = []
    for shim in shims:
        placement = render_placement(shim.placement)
        widths, total = layouts.get(shim.placement, ((None,), None))
        if total is None or any(w is None for w in widths):
            raise AdapterResolutionError(
                f"state input {placement!r}: the resolved part widths are not all known, so "
                f"custom encoding {shim.name!r} cannot address its slice; declare dim on each part"
            )
        if widths[shim.part] != shim.width:
            raise AdapterResolutionError(
                f"state input {placement!r}: custom encoding {shim.name!r} needs a "
                f"width-{shim.width} {shim.base} slice but the part resolved to "
                f"{widths[shim.part]} dims"
            )
        offset = sum(w for w in widths[: shim.part] if w is not None)
        out.append(attrs.evolve(shim, offset=offset, leaf_width=total))
    return tuple(out)


def repack_state(shim: StateShim, value: Any) -> npt.NDArray[Any]:
    """The assembled state leaf with the shim's slice in the model's custom packing."""
    placement = render_placement(shim.placement)
    leaf = np.asarray(value)
    if leaf.ndim != 1 or int(leaf.size) != shim.leaf_width:
        raise ApplyError(
            f"custom encoding {shim.name!r} for {placement!r} expected a flat "
            f"width-{shim.leaf_width} state, got shape {leaf.shape}"
        )
    stop = shim.offset + shim.width
    out = np.asarray(shim.from_base(leaf[shim.offset : stop]))
    if out.ndim != 1 or int(out.size) != shim.width:
        raise ApplyError(
            f"custom encoding {shim.name!r} for {placement!r} must return a flat "
            f"width-{shim.width} vector, from_base returned shape {out.shape}"
        )
    repacked = leaf.astype(np.dtype(shim.dtype))
    repacked[shim.offset : stop] = out
    return repacked


def repack_action(shims: tuple[ActionShim, ...], raw: Any) -> Any:
    """The model's action with each custom slice back in its base packing."""
    if not shims:
        return raw
    if isinstance(raw, Mapping):
        raise TypeError(
            "a CustomEncoding on an action component requires the model to emit a flat array "
            "action, not a mapping"
        )
    action = np.array(raw, dtype=np.float64)
    if action.ndim != 1:
        raise ApplyError(
            "a CustomEncoding on an action component requires a 1-D action vector, got shape "
            f"{action.shape}"
        )
    for shim in shims:
        stop = shim.offset + shim.width
        converted = np.asarray(shim.to_base(action[shim.offset : stop]))
        if converted.ndim != 1 or int(converted.size) != shim.width:
            raise ApplyError(
                f"custom encoding {shim.name!r} must return a flat width-{shim.width} vector, "
                f"to_base returned shape {converted.shape}"
            )
        action[shim.offset : stop] = converted
    return action
