"""What the per-kind resolvers share: the error, the missing-role fallbacks, identities."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, NoReturn

import attrs

from ._advice import Advisory
from ._errors import AdapterResolutionError
from ._fmt import quoted, quoted_list, render_placement
from ._vocab import is_sanctioned

if TYPE_CHECKING:
    from ._join import EnvFeatures

__all__ = [
    "Notes",
    "fail",
    "identity",
    "kind_of_role_error",
    "offers",
    "refuse_unknown_kind",
    "where",
]

Segments = tuple["str | int", ...]

_ROLE_KINDS = ("image/", "proprio/", "text/", "action/", "command/")


def fail(message: str) -> NoReturn:
    raise AdapterResolutionError(message)


def where(placement: Segments) -> str:
    """A placement as messages quote it: ``"state"``, ``"<root>"``."""
    return quoted(render_placement(placement))


def identity(role: str, *qualifiers: str | None) -> str:
    """``role#part#provenance`` (the qualifiers that are set), as offers lists show a leaf."""
    return "#".join([role, *(q for q in qualifiers if q is not None)])


def offers(keys: Iterable[str]) -> str:
    return quoted_list(sorted(set(keys)))


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
    """Declarations the env cannot confirm (a frame, a provenance, a reference)."""
    plan: list[Advisory] = attrs.Factory(list)
    """The per-input notes (binding hints, unverifiable declarations)."""

    def ad_hoc_fill(self, role: str) -> None:
        if not is_sanctioned(role):
            self.resolve.append(
                Advisory(
                    "info",
                    f"model declares ad-hoc role {quoted(role)} that this env does not: an "
                    "ad-hoc role matches only on the exact string, so it resolves to a fill "
                    'here -- use a registered role, or the "x/" namespace to mark it '
                    "intentionally non-standard",
                )
            )


def parts_of(values: Sequence[str | None]) -> list[str]:
    return sorted({v for v in values if v is not None})
