"""Kubernetes resource quantities ("64", "500m", "256Gi", "1.5", "1e3") as exact decimals.

The suffixes are those of `k8s.io/apimachinery/pkg/api/resource`: binary `Ki Mi Gi Ti Pi Ei`, decimal
`n u m k M G T P E`, or a decimal exponent `e<n>`/`E<n>`. A bare `E` is exa, as upstream.
"""

from __future__ import annotations

import math
import re
from decimal import ROUND_CEILING, Decimal, InvalidOperation

_FORM = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(?:([eE][+-]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]))?$")
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
}
MAX_EXPONENT = 30  # quantities beyond 10^30 are mistakes, not clusters


class QuantityError(ValueError):
    """Not a Kubernetes quantity."""


def parse_quantity(value: str | int | float) -> Decimal:
    """The exact value of a quantity: `parse_quantity("500m") == Decimal("0.5")`, `("1Gi") == 1073741824`.

    Integers (not booleans) and finite floats are taken as plain numbers.

    Raises:
        QuantityError: not a quantity (the message quotes the value).
    """
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a Kubernetes quantity such as 64, 500m or 256Gi")
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"{value!r} is not a finite quantity")
        return Decimal(str(value))
    if not isinstance(value, str):
        raise QuantityError(f"{value!r} is not a Kubernetes quantity such as 64, 500m or 256Gi")
    match = _FORM.match(value.strip())
    if match is None:
        raise QuantityError(f"{value!r} is not a Kubernetes quantity such as 64, 500m or 256Gi")
    number, exponent, suffix = match.groups()
    try:
        base = Decimal(number)
    except InvalidOperation as exc:  # pragma: no cover - the pattern admits only decimals
        raise QuantityError(f"{value!r} is not a Kubernetes quantity") from exc
    if exponent is not None:
        power = int(exponent[1:])
        if abs(power) > MAX_EXPONENT:
            raise QuantityError(f"{value!r} is out of range")
        return base.scaleb(power)
    if suffix in _BINARY:
        return base * _BINARY[suffix]
    if suffix in _DECIMAL:
        return base * _DECIMAL[suffix]
    return base


def _ceil(value: Decimal) -> int:
    return int(value.to_integral_value(rounding=ROUND_CEILING))


def cpu_millicores(value: str | int | float) -> int:
    """CPU as whole millicores, rounded up as Kubernetes does: "2" -> 2000, "500m" -> 500, "0.1" -> 100."""
    return _ceil(parse_quantity(value) * 1000)


def memory_bytes(value: str | int | float) -> int:
    """Memory as whole bytes, rounded up: "256Gi" -> 274877906944, "1k" -> 1000."""
    return _ceil(parse_quantity(value))
