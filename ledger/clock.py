"""The one clock (SPEC §1.9).

Every app reads the time through `now()`; an operation reads it once and
passes the value down. It lives in `ledger`, the bottom app, so that
`environments` and `leases` can import it without importing upward.

Tests replace the time with `freeze()`/`advance()` (see the `clock` fixture);
nothing ever sleeps to make a lease expire.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

_lock = threading.Lock()
_frozen: datetime | None = None


def now() -> datetime:
    frozen = _frozen
    return frozen if frozen is not None else datetime.now(UTC)


def freeze(at: datetime) -> None:
    """Stop the clock at `at` (aware), for every thread of this process."""
    global _frozen
    if at.tzinfo is None:
        raise ValueError("the clock only holds aware datetimes")
    with _lock:
        _frozen = at


def advance(seconds: float) -> datetime:
    """Move a frozen clock forward; returns the new time."""
    global _frozen
    with _lock:
        if _frozen is None:
            raise RuntimeError("advance() needs a frozen clock; call freeze() first")
        _frozen = _frozen + timedelta(seconds=seconds)
        return _frozen


def unfreeze() -> None:
    global _frozen
    with _lock:
        _frozen = None


def iso(moment: datetime | None) -> str | None:
    """ISO 8601 in UTC with a `Z`, as DRF renders datetimes: the one format of every door's timestamps."""
    if moment is None:
        return None
    text = moment.astimezone(UTC).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text
