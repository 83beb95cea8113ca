"""What the per-kind resolvers share: the error, the missing-role fallbacks, identities."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import attrs
import numpy as np

from ._advice import Advisory
from ._errors import AdapterResolutionError
from ._fmt import quoted, quoted_list, render_placement
from ._vocab import is_sanctioned

if TYPE_CHECKING:
    from ._join import EnvFeatures

__all__ = [
    "Notes",
    "affine_term",
    "fail",
    "gather",
    "identity",
    "kind_of_role_error",
    "label_gaps",
    "offers",
    "refuse_unknown_kind",
    "where",
]

Segments = tuple["str | int", ...]

_ROLE_KINDS = ("image/", "proprio/", "text/", "action/", "command/")


def fail(message: str) -> NoReturn:
    raise AdapterResolutionError(message)


def affine_term(
    node: Mapping[str, Any], name: str, width: int, subject: str
) -> np.ndarray[Any, np.dtype[np.float64]] | None:
    """A ``scale`` or ``offset`` as applied: one number as a 0-d array (it broadcasts over
    whatever width the slice has after a rotation conversion), ``axis_<name>`` per axis.

    Raises:
        AdapterResolutionError: ``axis_<name>`` does not have ``width`` values (``subject``
            names it in the message).
    """
    scalar, axis = node.get(name), node.get(f"axis_{name}")
    if scalar is not None:
        return np.asarray(float(scalar))
    if axis is None:
        return None
    if len(axis) != width:
        fail(f"{subject} has {len(axis)} values but the resolved width is {width}")
    return np.asarray(axis, dtype=np.float64)


def label_gaps(first: tuple[str, Sequence[str]], second: tuple[str, Sequence[str]]) -> str | None:
    """What each side's labels lack of the other's (``"the env lacks [...] and the model
    lacks [...]"``, each side as ``(its name, its labels)``), or ``None`` when they agree."""
    reasons = []
    for (name, labels), (_, other) in ((first, second), (second, first)):
        lacking = [label for label in other if label not in labels]
        if lacking:
            reasons.append(f"the {name} lacks {quoted_list(lacking)}")
    return " and ".join(reasons) or None


def gather(source: Sequence[str], target: Sequence[str]) -> np.ndarray[Any, Any] | None:
    """Indices taking axes labelled ``source`` into the order of ``target`` (the same set),
    or ``None`` when the orders already agree."""
    order = [list(source).index(label) for label in target]
    if order == list(range(len(order))):
        return None
    return np.asarray(order, dtype=np.intp)


def where(placement: Segments) -> str:
    """A placement as messages quote it: ``"state"``, ``"<root>"``."""
    return quoted(render_placement(placement))


def identity(role: str, *qualifiers: str | None) -> str:
    """``role#part#provenance`` (the qualifiers that are set), as offers lists show a leaf."""
    return "#".join([role, *(q for q in qualifiers if q is not None)])


def offers(identities: Iterable[tuple[str, str | None, str | None]]) -> str:
    """The env's (or model's) leaves as a message lists them: sorted by role, then part, then
    provenance (unset first), each as ``role#part#provenance``."""
    ordered = sorted(
        set(identities),
        key=lambda i: (i[0], i[1] is not None, i[1] or "", i[2] is not None, i[2] or ""),
    )
    return quoted_list([identity(*i) for i in ordered])


T = TypeVar("T")


def by_part(
    candidates: Sequence[T],
    part_of: Callable[[T], str | None],
    want: str | None,
    ambiguous: Callable[[list[str]], str],
) -> tuple[list[T], str | None]:
    """The candidates a (role, part) reference may bind, and the part bound implicitly.

    A named part binds only that part. No part prefers the leaves declared without one;
    failing those, the role's only part (reported back, for an advisory); several parts are
    ambiguous (``ambiguous(parts)`` is the message).
    """
    if want is not None:
        return [c for c in candidates if part_of(c) == want], None
    plain = [c for c in candidates if part_of(c) is None]
    if plain or not candidates:
        return plain, None
    parts = sorted({p for p in map(part_of, candidates) if p is not None})
    if len(parts) > 1:
        fail(ambiguous(parts))
    return list(candidates), parts[0]


def kind_of_role_error(role: str) -> str | None:
    """Why ``role`` is refused, when its ``kind/`` prefix is not one this build defines."""
    if "/" not in role or role.startswith("x/"):
        return None
    if any(role.startswith(kind) for kind in _ROLE_KINDS):
        return None
    kinds = quoted_list(_ROLE_KINDS)
    # The run of spaces is in RLMesh's message too (a line continuation kept verbatim).
    return (
        f"role {quoted(role)} carries a kind this core does not define; the kinds are "
        f"{kinds}              (or the x/ escape for the whole role)"
    )


def refuse_unknown_kind(role: str, at: Segments, env: EnvFeatures) -> None:
    """Fail when the env has ``role`` only as a leaf of a kind this build cannot read.

    Checked before any fallback (a fill, a lone camera) could hide data the env does send.
    """
    for unknown in env.unknown:
        if unknown.role == role:
            fail(
                f"model input {where(at)} needs role {quoted(role)} but the env declares it as "
                f"unrecognized observation kind {quoted(unknown.kind)}; upgrade the runtime"
            )


@attrs.define
class Notes:
    """Advisories collected while resolving, by where they surface."""

    resolve: list[Advisory] = attrs.Factory(list)
    """Listed under ``dropped:`` and first among the advisories."""
    checks: list[Advisory] = attrs.Factory(list)
    """Binding notes: a part bound implicitly, a declaration the env cannot confirm."""
    fabricated: list[Advisory] = attrs.Factory(list)
    """Env action dims the model does not drive (listed last)."""

    def ad_hoc_fill(self, role: str, env_roles: Iterable[str | None]) -> None:
        """Note an ad-hoc role the env lacks altogether (it matches only the exact string)."""
        if not is_sanctioned(role) and role not in set(env_roles):
            self.resolve.append(
                Advisory(
                    "info",
                    f"model declares ad-hoc role {quoted(role)} that this env does not: an "
                    "ad-hoc role matches only on the exact string, so it resolves to a fill "
                    'here -- use a registered role, or the "x/" namespace to mark it '
                    "intentionally non-standard",
                )
            )
