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
import logging
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
logger = logging.getLogger(__name__)


@contextmanager
def sqlite_writer_turn() -> Iterator[None]:
    """On SQLite, queue writers in front of BEGIN IMMEDIATE: threads on a lock, processes on a file lock.

    SQLite admits one writer; its busy handler makes the others poll with
    sleeps of up to 100 ms, so a released lock sits idle while waiters sleep,
    and some starve past the busy timeout. Worse, a waiting connection can
    stall its whole process: the garbage collector of the thread holding the
    write lock finalizing a cursor of the waiting connection blocks on that
    connection's mutex, holding the GIL, until the busy timeout expires.

    So no writer waits inside SQLite: the threads of a process queue on a
    lock, and the one thread per process that holds it takes an exclusive
    `flock` on `<database>.writelock`, which the kernel hands to the next
    process the moment it is released (a process that dies releases it with
    its file descriptors). Both waits together are bounded by
    SQLITE_WRITER_WAIT_SECONDS, then STORAGE_BUSY. Inside a transaction this
    is a no-op: the outermost writer took its turn. Writers that do not come
    through here (migrations, Django's own admin log and sessions) still meet
    SQLite's busy handler.
    """
    connection = transaction.get_connection()
    if connection.vendor != "sqlite" or connection.in_atomic_block:
        yield
        return
    deadline = time.monotonic() + SQLITE_WRITER_WAIT_SECONDS
    if not _sqlite_writer.acquire(timeout=SQLITE_WRITER_WAIT_SECONDS):
        raise StorageBusy(details={"waited_seconds": SQLITE_WRITER_WAIT_SECONDS})
    try:
        descriptor = _open_writer_lock(connection.settings_dict["NAME"])
        if descriptor is None:
            yield
            return
        try:
            if not _flock_before(descriptor, deadline):
                descriptor = None  # the waiter thread owns it now, and closes it
                raise StorageBusy(details={"waited_seconds": SQLITE_WRITER_WAIT_SECONDS})
            yield
        finally:
            if descriptor is not None:
                os.close(descriptor)  # releases the flock
    finally:
        _sqlite_writer.release()


def _open_writer_lock(name: object) -> int | None:
    """A descriptor of `<database>.writelock` beside a database file; None for an in-memory database.

    Opened read-only (flock needs no write access) and created world-readable,
    so processes of other OS users sharing the database can lock it too. If it
    cannot be opened, writers fall back to SQLite's busy handler.
    """
    path = str(name)
    if path == ":memory:" or path.startswith("file:") or "mode=memory" in path:
        return None
    try:
        return os.open(f"{path}.writelock", os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError:
        logger.warning("cannot open %s.writelock; SQLite writers queue in its busy handler", path, exc_info=True)
        return None


def _flock_before(descriptor: int, deadline: float) -> bool:
    """Take the exclusive flock on `descriptor` before `deadline`; False (and the descriptor handed off) if not.

    Uncontended, one non-blocking call. Contended, a helper thread waits in
    the kernel's queue (woken at release, unlike a polling loop) while this
    thread waits for it with a timeout; on timeout the helper keeps the
    descriptor and closes it, releasing the lock, whenever it gets it.
    """
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        pass
    state = {"acquired": False, "abandoned": False}
    settled = threading.Lock()
    taken = threading.Event()

    def wait_in_kernel() -> None:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        with settled:
            if state["abandoned"]:
                os.close(descriptor)
                return
            state["acquired"] = True
        taken.set()

    threading.Thread(target=wait_in_kernel, name="sqlite-writelock", daemon=True).start()
    taken.wait(max(0.0, deadline - time.monotonic()))
    with settled:
        if state["acquired"]:
            return True
        state["abandoned"] = True
        return False


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
