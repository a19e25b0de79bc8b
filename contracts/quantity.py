"""Kubernetes resource quantities ("100Gi", "500m", "1e3"), compared by value."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from contracts.meta import QUANTITY

_SUFFIX = {
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}


def parse_quantity(text: str) -> Decimal:
    """The value of a quantity; ValueError when it is not one. `1Gi` equals `1024Mi`."""
    match = re.fullmatch(QUANTITY, text)
    if match is None:
        raise ValueError(f"invalid quantity {text!r}")
    suffix = match.group(3) or ""
    number = text[: len(text) - len(suffix)]
    try:
        value = Decimal(number)
    except InvalidOperation as exc:  # pragma: no cover - the pattern already excludes these
        raise ValueError(f"invalid quantity {text!r}") from exc
    if suffix[:1] in ("e", "E"):
        return value * (Decimal(10) ** int(suffix[1:]))
    return value * _SUFFIX[suffix]
