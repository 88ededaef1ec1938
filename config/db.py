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

import fcntl
import functools
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

from django.db import OperationalError, transaction

from config.errors import StorageBusy

RETRY_DELAYS_SECONDS: tuple[float, ...] = (0.025, 0.075, 0.2)

# PostgreSQL SQLSTATEs that mean "try the same transaction again".
_RETRYABLE_SQLSTATES = frozenset({"40001", "40P01", "55P03"})

# How long a thread waits for its process's turn to write to SQLite.
SQLITE_WRITER_WAIT_SECONDS = 20.0

P = ParamSpec("P")
R = TypeVar("R")

_sqlite_writer = threading.Lock()


@contextmanager
def _one_sqlite_writer() -> Iterator[None]:
    """On SQLite, queue writers in front of BEGIN IMMEDIATE: threads on a lock, processes on a file lock.

    SQLite admits one writer; its busy handler makes the others poll with
    sleeps of up to 100 ms, so a released lock sits idle while waiters sleep,
    and some starve past the busy timeout. Worse, a waiting connection can
    stall its whole process: the garbage collector of the thread holding the
    write lock finalizing a cursor of the waiting connection blocks on that
    connection's mutex, holding the GIL, until the busy timeout expires.

    So no writer waits inside SQLite: the threads of a process queue on a
    lock (bounded by SQLITE_WRITER_WAIT_SECONDS, then STORAGE_BUSY), and the
    one thread per process that holds it takes an exclusive `flock` on
    `<database>.writelock`, which the kernel hands to the next process the
    moment it is released. A process that dies releases its file lock with
    its file descriptors. Writers outside `write_transaction` (migrations,
    the refusal tally) still meet SQLite's busy handler as before.
    """
    connection = transaction.get_connection()
    if connection.vendor != "sqlite":
        yield
        return
    if not _sqlite_writer.acquire(timeout=SQLITE_WRITER_WAIT_SECONDS):
        raise StorageBusy(details={"waited_seconds": SQLITE_WRITER_WAIT_SECONDS})
    try:
        lock_path = _writer_lock_path(connection.settings_dict["NAME"])
        if lock_path is None:
            yield
            return
        descriptor = os.open(lock_path, os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            yield
        finally:
            os.close(descriptor)  # releases the flock
    finally:
        _sqlite_writer.release()


def _writer_lock_path(name: object) -> str | None:
    """`<database>.writelock` beside a database file; None for an in-memory database."""
    path = str(name)
    if path == ":memory:" or path.startswith("file:") or "mode=memory" in path:
        return None
    return f"{path}.writelock"


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
                with _one_sqlite_writer(), transaction.atomic():
                    return func(*args, **kwargs)
            except OperationalError as exc:
                if not is_transient_lock_error(exc):
                    raise
                if delay is None:
                    raise StorageBusy(details={"attempts": len(RETRY_DELAYS_SECONDS) + 1}) from exc
                time.sleep(delay)
        raise AssertionError("unreachable")

    return wrapper
