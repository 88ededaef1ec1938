"""The write-transaction helper every write service goes through (SPEC §11).

`write_transaction` runs a service in one `transaction.atomic()` block. When
the database is momentarily unavailable for writing — SQLite's "database is
locked" after its busy timeout, or a PostgreSQL deadlock or serialization
failure — it retries the *whole* transaction after 25, 75 and 200 ms and then
raises `STORAGE_BUSY`. Domain errors and constraint violations are never
retried: they propagate on the first try.

A service called inside another transaction runs in a savepoint, so it stays
all-or-nothing, and does not retry on its own: the outermost transaction owns
the retry.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from django.db import OperationalError, transaction

from config.errors import StorageBusy
from config.sqlite_writer import sqlite_writer_turn

RETRY_DELAYS_SECONDS: tuple[float, ...] = (0.025, 0.075, 0.2)

# PostgreSQL SQLSTATEs that mean "try the same transaction again".
_RETRYABLE_SQLSTATES = frozenset({"40001", "40P01", "55P03"})

P = ParamSpec("P")
R = TypeVar("R")


def is_transient_lock_error(exc: BaseException) -> bool:
    if not isinstance(exc, OperationalError):
        return False
    cause = exc.__cause__
    if getattr(cause, "sqlstate", None) in _RETRYABLE_SQLSTATES:
        return True
    message = str(exc).lower()
    return "database is locked" in message or "database table is locked" in message


def write_transaction(func: Callable[P, R]) -> Callable[P, R]:
    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        if transaction.get_connection().in_atomic_block:
            # Inside a caller's transaction: a savepoint keeps this service
            # all-or-nothing, and the caller's transaction owns the retries.
            with transaction.atomic():
                return func(*args, **kwargs)
        for delay in (*RETRY_DELAYS_SECONDS, None):
            try:
                with sqlite_writer_turn(), transaction.atomic():
                    return func(*args, **kwargs)
            except OperationalError as exc:
                if not is_transient_lock_error(exc):
                    raise
                if delay is None:
                    raise StorageBusy(details={"attempts": len(RETRY_DELAYS_SECONDS) + 1}) from exc
                time.sleep(delay)
        raise AssertionError("unreachable")

    return wrapper
