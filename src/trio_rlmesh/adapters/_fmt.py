"""Text forms shared by error messages and ``explain()``.

RLMesh renders its messages with Rust's formatting: a string's ``Debug`` form (double quotes,
backslash escapes), a float's ``Debug`` form (always a decimal point, an exponent outside
``[1e-4, 1e16)``) or ``Display`` form (no exponent, no trailing ``.0``). The helpers here
reproduce those forms from Python values, so our messages read exactly like RLMesh's.
"""

from __future__ import annotations

import decimal
import math
from collections.abc import Callable, Iterable

__all__ = [
    "debug_float",
    "display_float",
    "quoted",
    "quoted_list",
    "quoted_range",
    "render_placement",
]

Placement = tuple["str | int", ...]

_ESCAPES = {"\t": "\\t", "\r": "\\r", "\n": "\\n", '"': '\\"', "\\": "\\\\", "\0": "\\0"}


def quoted(value: str) -> str:
    """``value`` in double quotes with Rust's ``Debug`` escapes (``"a\\"b"``)."""
    out = ['"']
    for char in value:
        escaped = _ESCAPES.get(char)
        if escaped is not None:
            out.append(escaped)
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{{{ord(char):x}}}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def quoted_list(values: Iterable[str]) -> str:
    """A list of strings as Rust debug-prints a ``Vec<String>``: ``["a", "b"]``."""
    return "[" + ", ".join(quoted(value) for value in values) + "]"


def _digits(value: float) -> tuple[str, int]:
    """The shortest round-trip digits of ``abs(value)`` (as Rust picks them) and the decimal
    exponent of the first: ``abs(value) ~ int(digits) * 10 ** (exponent - len(digits) + 1)``.
    """
    text = repr(abs(value))
    mantissa, _, exp_text = text.partition("e")
    exponent = int(exp_text) if exp_text else 0
    whole, _, frac = mantissa.partition(".")
    digits = (whole + frac).lstrip("0")
    # Position of the first significant digit relative to the decimal point.
    if whole.strip("0"):
        point = len(whole.lstrip("0")) - 1
    else:
        point = -(len(frac) - len(frac.lstrip("0")) + 1)
    digits = digits.rstrip("0") or "0"
    exponent += point
    # When the exact binary value lies halfway between two shortest candidates, Python keeps
    # the even one and Rust the larger: take the larger when it round-trips too.
    exact = decimal.Decimal(abs(value))
    unit = decimal.Decimal(1).scaleb(exponent - len(digits) + 1)
    if exact - decimal.Decimal(int(digits)) * unit == unit / 2:
        up = str(int(digits) + 1)
        if float(decimal.Decimal(int(up)) * unit) == abs(value):
            if len(up) > len(digits):
                exponent += 1
            digits = up.rstrip("0") or "0"
    return digits, exponent


def _plain(digits: str, exponent: int) -> str:
    """Digits with their decimal point placed, no exponent (may end without a fraction)."""
    if exponent < 0:
        return "0." + "0" * (-exponent - 1) + digits
    if exponent + 1 >= len(digits):
        return digits + "0" * (exponent + 1 - len(digits))
    return digits[: exponent + 1] + "." + digits[exponent + 1 :]


def _rust_float(value: float, zero: str, finite: Callable[[str, int, float], str]) -> str:
    """What both of Rust's float formats share: NaN and the infinities spelled as Rust does,
    the sign (negative zero keeps it), ``zero`` for a zero, else ``finite(digits, exponent,
    magnitude)`` (:func:`_digits`'s answer and ``abs(value)``) after the sign."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    sign = "-" if math.copysign(1.0, value) < 0 else ""
    if value == 0:
        return sign + zero
    digits, exponent = _digits(value)
    return sign + finite(digits, exponent, abs(value))


def _display_finite(digits: str, exponent: int, magnitude: float) -> str:
    return _plain(digits, exponent)


def _debug_finite(digits: str, exponent: int, magnitude: float) -> str:
    if 1e-4 <= magnitude < 1e16:
        plain = _plain(digits, exponent)
        return plain if "." in plain else plain + ".0"
    mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    return f"{mantissa}e{exponent}"


def display_float(value: float) -> str:
    """Rust's ``{}`` for an ``f64``: ``1``, ``0.5``, ``-2.25``, ``0.0000001``."""
    return _rust_float(value, "0", _display_finite)


def debug_float(value: float) -> str:
    """Rust's ``{:?}`` for an ``f64``: ``1.0``, ``0.5``, ``1e-5``, ``1e16``."""
    return _rust_float(value, "0.0", _debug_finite)


def quoted_range(pair: tuple[float, float]) -> str:
    """A ``(low, high)`` pair as Rust debug-prints an ``(f64, f64)``: ``(-1.0, 1.0)``."""
    return f"({debug_float(pair[0])}, {debug_float(pair[1])})"


def render_placement(segments: Iterable[str | int]) -> str:
    """A tree position as RLMesh names it: ``a.b[0]``, or ``<root>`` for the empty path.

    Dict keys are joined with dots and tuple indices bracketed; keys are not escaped, so
    ``("a.b",)`` and ``("a", "b")`` render alike (as in RLMesh).

    Example:
        >>> render_placement(("state", 0, "pos"))
        'state[0].pos'
    """
    out: list[str] = []
    for position, segment in enumerate(segments):
        if isinstance(segment, int):
            out.append(f"[{segment}]")
        else:
            out.append(("." if position else "") + segment)
    return "".join(out) or "<root>"
