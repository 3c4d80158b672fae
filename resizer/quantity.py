"""Exact Kubernetes resource quantities.

Parsing follows ``k8s.io/apimachinery/pkg/api/resource.ParseQuantity``; formatting
produces the canonical string the kube-apiserver would itself produce, so a value we
write is stored unchanged. All arithmetic is exact (``fractions.Fraction``).
"""

from __future__ import annotations

import functools
import math
import re
from fractions import Fraction
from typing import Literal

from resizer.errors import ResizerError

# The two resources the resizer sizes (the one alias for them).
Resource = Literal["cpu", "memory"]
RESOURCES: tuple[Resource, ...] = ("cpu", "memory")

# Kubernetes caps every quantity at this many base units (it silently clamps; we reject).
MAX_QUANTITY = 2**63 - 1

_NANO = Fraction(1, 10**9)
_MAX_SIGNIFICANT_DIGITS = 100
_BINARY_EXPONENTS = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL_EXPONENTS = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SUFFIXES = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
_DECIMAL_SUFFIXES = {exponent: suffix for suffix, exponent in _DECIMAL_EXPONENTS.items()}
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1

_SHAPE = re.compile(r"([+-]?)([0-9]*)(?:\.([0-9]*))?(.*)", re.ASCII | re.DOTALL)
_EXPONENT_SUFFIX = re.compile(r"[eE]([+-]?[0-9]+)", re.ASCII)


class QuantityError(ResizerError):
    """A string (or number) is not a Kubernetes quantity we accept."""


def parse_quantity(text: str) -> Fraction:
    """The exact value Kubernetes reads from a quantity: an optional sign, digits with an optional
    decimal point (``1``, ``0.5``, ``.5``, ``5.``) and a binary (``Ki``..``Ei``), decimal
    (``n u m k M G T P E``) or exponent (``e3``, ``E-3``) suffix. Like Kubernetes, non-zero values
    finer than 1n are rounded away from zero to 1n. Unlike it, a number without digits (``.``,
    ``-``, ``E``: 0 to Kubernetes) and a value above 2^63-1 base units (clamped) are rejected."""
    if not isinstance(text, str):
        raise QuantityError(f"quantity must be a string, got {text!r}")
    return _parse(text)


# A cluster uses few distinct quantity strings, and the webhook and reconciler parse
# them for every pod: memoise the exact parse (pure; errors are not cached).
@functools.lru_cache(maxsize=8192)
def _parse(text: str) -> Fraction:
    if not text:
        raise QuantityError("invalid quantity '': empty")
    shape = _SHAPE.fullmatch(text)
    if shape is None:
        raise QuantityError(f"invalid quantity {text!r}")
    sign, integer_digits, fraction_digits, suffix = shape.groups()
    fraction_digits = fraction_digits or ""
    if not integer_digits and not fraction_digits:
        raise QuantityError(f"invalid quantity {text!r}: no digits")
    base, exponent = _suffix_exponent(text, suffix)
    magnitude = _magnitude(text, integer_digits, fraction_digits, base, exponent)
    return -magnitude if sign == "-" else magnitude


def coerce_quantity(value: str | int | float) -> Fraction:
    """Parse a quantity that YAML may have handed over as an int or float (``max: 16``)."""
    if isinstance(value, str):  # the common case first: the spec and annotations hold strings
        return _parse(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise QuantityError(f"quantity must be a string or number, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise QuantityError(f"quantity must be finite, got {value!r}")
    if isinstance(value, int) and abs(value) > MAX_QUANTITY:
        raise QuantityError(f"quantity exceeds the Kubernetes maximum ({MAX_QUANTITY})")
    return _parse(str(value))


def round_ratio(numerator: int, denominator: int) -> int:
    """``numerator / denominator`` (denominator > 0) rounded half away from zero, in integers:
    the reconciler sizes every pod through this, and a Fraction per step costs many times more."""
    quotient, remainder = divmod(abs(numerator), denominator)
    rounded = quotient + (2 * remainder >= denominator)
    return rounded if numerator >= 0 else -rounded


def to_millicores(quantity: Fraction) -> int:
    """Whole millicores of a CPU quantity, rounded half away from zero."""
    return round_ratio(quantity.numerator * 1000, quantity.denominator)


def to_bytes(quantity: Fraction) -> int:
    """Whole bytes of a memory quantity, rounded half away from zero."""
    return round_ratio(quantity.numerator, quantity.denominator)


def format_cpu(millicores: int) -> str:
    """Canonical DecimalSI string for a CPU amount (1500 -> "1500m", 2000 -> "2")."""
    _check_whole(millicores, MAX_QUANTITY * 1000)
    return _format_decimal_si(millicores, -3)


def format_memory(nbytes: int) -> str:
    """Canonical string for a memory amount: BinarySI when exactly divisible by 1024
    (1073741824 -> "1Gi", 1536Mi stays "1536Mi"), otherwise DecimalSI ("1M", "858993459")."""
    _check_whole(nbytes, MAX_QUANTITY)
    if abs(nbytes) < 1024 or nbytes % 1024:
        return _format_decimal_si(nbytes, 0)
    mantissa, power = nbytes, 0
    while mantissa % 1024 == 0 and power < len(_BINARY_SUFFIXES) - 1:
        mantissa, power = mantissa // 1024, power + 1
    return f"{mantissa}{_BINARY_SUFFIXES[power]}"


def _suffix_exponent(text: str, suffix: str) -> tuple[int, int]:
    if suffix in _DECIMAL_EXPONENTS:
        return 10, _DECIMAL_EXPONENTS[suffix]
    if suffix in _BINARY_EXPONENTS:
        return 2, _BINARY_EXPONENTS[suffix]
    exponent_match = _EXPONENT_SUFFIX.fullmatch(suffix)
    if exponent_match is None:
        raise QuantityError(f"invalid quantity {text!r}: unknown suffix {suffix!r}")
    exponent = int(exponent_match.group(1))
    if not _INT32_MIN <= exponent <= _INT32_MAX:
        raise QuantityError(f"invalid quantity {text!r}: exponent out of range")
    return 10, exponent


def _magnitude(text: str, integer_digits: str, fraction_digits: str, base: int, exponent: int) -> Fraction:
    digits = (integer_digits + fraction_digits).lstrip("0")
    if not digits:
        return Fraction(0)
    if len(digits) > _MAX_SIGNIFICANT_DIGITS:
        raise QuantityError(f"invalid quantity {text!r}: too many digits")
    # value = int(digits) * 10**decimal_shift * base**exponent; bound its size before
    # building it so that "1e2000000000" cannot allocate a gigantic integer.
    decimal_shift = -len(fraction_digits)
    order = len(digits) + decimal_shift + (exponent if base == 10 else math.ceil(exponent * math.log10(2)))
    if order > 20:
        raise QuantityError(f"invalid quantity {text!r}: exceeds the Kubernetes maximum")
    if order < -20:
        return _NANO  # Kubernetes rounds any non-zero amount below 1n up to 1n.
    scale = (
        Fraction(10) ** (decimal_shift + exponent)
        if base == 10
        else Fraction(10) ** decimal_shift * Fraction(2) ** exponent
    )
    value = int(digits) * scale
    if value > MAX_QUANTITY:
        raise QuantityError(f"invalid quantity {text!r}: exceeds the Kubernetes maximum")
    return math.ceil(value / _NANO) * _NANO


def _check_whole(value: int, limit: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected a whole number of units, got {value!r}")
    if abs(value) > limit:
        raise QuantityError(f"value exceeds the Kubernetes maximum quantity ({MAX_QUANTITY} base units)")


def _format_decimal_si(mantissa: int, exponent: int) -> str:
    if mantissa == 0:
        return "0"
    while mantissa % 10 == 0 and exponent < 18:
        mantissa, exponent = mantissa // 10, exponent + 1
    while exponent % 3:
        mantissa, exponent = mantissa * 10, exponent - 1
    return f"{mantissa}{_DECIMAL_SUFFIXES[exponent]}"
