"""Advisories: what a resolved adapter tolerated instead of failing on."""

from __future__ import annotations

from typing import Literal

import attrs

from ._fmt import quoted

__all__ = ["Advisory"]


@attrs.frozen(repr=False)
class Advisory:
    """One non-fatal note about a resolved pairing.

    ``severity`` is ``"info"`` for a benign hint or an explicitly requested lossy step (an
    aspect crop, a role outside the registry), and ``"caution"`` when the adapter substitutes
    or fabricates data the model sees (a camera bound under another role, a zero-filled
    frame): the tier an evaluation harness may want to refuse. ``str(advisory)`` is the
    message.
    """

    severity: Literal["info", "caution"]
    """``"info"`` or ``"caution"``."""
    message: str
    """The note itself."""

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"Advisory(severity={quoted(self.severity)}, message={quoted(self.message)})"
