"""Text as people type it: one line ending, whatever the browser or client sent."""

from __future__ import annotations

from decimal import Decimal
from typing import Any


def normalise_newlines(value: Any) -> Any:
    """`\\r\\n` and a lone `\\r` become `\\n`; anything not a string is returned as it is.

    Browsers send a textarea's lines with CRLF (HTML's form encoding), so a
    text compared byte for byte would differ from what was stored though
    nobody changed it (issue 32).
    """
    if not isinstance(value, str) or "\r" not in value:
        return value
    return value.replace("\r\n", "\n").replace("\r", "\n")


def dollars(amount: Any) -> str:
    """An amount of US dollars as people read it: `$0.15`, `$2.00`, `$0.0042` (never `$0.150000000000000`).

    Cents always show; smaller fractions only when they are there.
    """
    value = Decimal(str(amount))
    if value == value.quantize(Decimal("0.01")):
        return f"${value:.2f}"
    return f"${value.normalize():f}"
