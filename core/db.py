"""The write-transaction helper every write service goes through (SPEC §11).

`write_transaction` runs a service in one `transaction.atomic()` block. When
the database is momentarily unavailable for writing — SQLite's "database is
locked" after its busy timeout, or a PostgreSQL deadlock or serialization
failure — it retries the *whole* transaction after 25, 75 and 200 ms and then
raises `STORAGE_BUSY`. Domain errors and constraint violations are never
retried: they propagate on the first try.

Within a request every wait and retry ends by the request's storage deadline
(`core.deadline`), so contention answers `STORAGE_BUSY`, never a killed
worker.

A service called inside another transaction runs in a savepoint, so it stays
all-or-nothing, and does not retry on its own: the outermost transaction owns
the retry.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from django.db import Error, InterfaceError, OperationalError, connection, transaction
from django.db.models import QuerySet

from core.deadline import bounded, seconds_left
from core.errors import StorageBusy
from core.sqlite_writer import sqlite_writer_turn

RETRY_DELAYS_SECONDS: tuple[float, ...] = (0.025, 0.075, 0.2)
# SQLite's busy timeout as the connection sets it (settings: PRAGMA busy_timeout).
SQLITE_BUSY_TIMEOUT_MS = 5000

# PostgreSQL SQLSTATEs that mean "try the same transaction again".
_RETRYABLE_SQLSTATES = frozenset({"40001", "40P01", "55P03"})
# Besides class 08 (connection exception): the server shutting down or terminating this backend.
_CONNECTION_LOST_SQLSTATES = frozenset({"57P01", "57P02", "57P03"})
_CONNECTION_LOST_MESSAGES = (
    "server closed the connection",
    "connection already closed",
    "the connection is closed",
    "consuming input failed",
    "terminating connection",
    "connection is lost",
    "couldn't get a connection",
)

# The storage cannot take a write right now, and nothing of the transaction committed: the disk
# is full, the file system failed a read or write, a lock outlasted its wait. The caller retries
# later (STORAGE_BUSY); a 500 with a traceback would tell it the opposite.
_STORAGE_FAULT_MESSAGES = ("database or disk is full", "disk i/o error")
# PostgreSQL: class 53 (insufficient resources: disk full, out of memory, too many connections) and an I/O error.
_STORAGE_FAULT_SQLSTATE_PREFIXES = ("53", "58030")

P = ParamSpec("P")
R = TypeVar("R")


def is_connection_loss(exc: BaseException) -> bool:
    """The database connection is gone (a restart, a failover, a terminated backend, a dead pooled connection)."""
    if not isinstance(exc, OperationalError | InterfaceError):
        return False
    sqlstate = getattr(exc.__cause__, "sqlstate", None)
    if sqlstate is not None:
        return sqlstate.startswith("08") or sqlstate in _CONNECTION_LOST_SQLSTATES
    message = str(exc).lower()
    return any(sign in message for sign in _CONNECTION_LOST_MESSAGES)


def is_transient_lock_error(exc: BaseException) -> bool:
    if not isinstance(exc, OperationalError):
        return False
    cause = exc.__cause__
    if getattr(cause, "sqlstate", None) in _RETRYABLE_SQLSTATES:
        return True
    message = str(exc).lower()
    return "database is locked" in message or "database table is locked" in message


def is_storage_fault(exc: BaseException) -> bool:
    """The database refused for want of storage (disk full, an I/O error) or a lock: retryable, nothing written."""
    if not isinstance(exc, OperationalError):
        return False
    if is_transient_lock_error(exc):
        return True
    sqlstate = getattr(exc.__cause__, "sqlstate", None)
    if sqlstate is not None:
        return str(sqlstate).startswith(_STORAGE_FAULT_SQLSTATE_PREFIXES)
    message = str(exc).lower()
    return any(sign in message for sign in _STORAGE_FAULT_MESSAGES)


def write_transaction(func: Callable[P, R]) -> Callable[P, R]:
    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        if transaction.get_connection().in_atomic_block:
            # Inside a caller's transaction: a savepoint keeps this service
            # all-or-nothing, and the caller's transaction owns the retries.
            with transaction.atomic():
                return func(*args, **kwargs)
        reconnected = False
        for tries, delay in enumerate((*RETRY_DELAYS_SECONDS, None), start=1):
            _refuse_past_deadline(tries)
            committing = False
            try:
                with sqlite_writer_turn(), _sqlite_busy_timeout_within_deadline(), transaction.atomic():
                    result = func(*args, **kwargs)
                    committing = True
                return result
            except (OperationalError, InterfaceError) as exc:
                if is_connection_loss(exc):
                    # Lost before COMMIT was sent: nothing was written, so the
                    # whole transaction runs once more on a fresh connection.
                    # Lost during COMMIT, the outcome is unknown: the caller
                    # gets STORAGE_BUSY and retries under its Idempotency-Key.
                    _discard_connection()
                    if committing or reconnected:
                        raise StorageBusy(
                            "The database connection was lost; retry.",
                            details={"attempts": tries, "commit_in_doubt": committing},
                        ) from exc
                    reconnected = True
                    continue
                if not is_transient_lock_error(exc):
                    raise
                if delay is None or bounded(delay) < delay:
                    raise StorageBusy(details={"attempts": tries}) from exc
                time.sleep(delay)
        raise AssertionError("unreachable")

    return wrapper


def run_at_once(sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]] | None:
    """One statement that is its own transaction (no BEGIN, no COMMIT: one round trip); its rows.

    For a hot write whose whole effect is one conditional statement (`leases.services.holding`,
    PostgreSQL). None when the database could not take it now — a lock wait past `lock_timeout`, a
    deadlock, a connection found closed before the statement was sent: nothing was written, and the
    caller runs its full path, which retries (`write_transaction`). A connection lost while the
    statement ran leaves its outcome unknown: STORAGE_BUSY, as for a lost COMMIT. Inside a caller's
    transaction the statement is a part of it, and errors propagate to that transaction's owner.
    """
    if connection.in_atomic_block:
        with transaction.mark_for_rollback_on_error(), connection.cursor() as cursor:
            cursor.execute(sql, params)
            return [tuple(row) for row in cursor.fetchall()]
    _refuse_past_deadline(1)
    try:
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return [tuple(row) for row in cursor.fetchall()]
    except (OperationalError, InterfaceError) as exc:
        if is_transient_lock_error(exc):
            return None
        if not is_connection_loss(exc):
            raise
        _discard_connection()
        if isinstance(exc, InterfaceError):
            return None  # closed before the statement went out
        raise StorageBusy(
            "The database connection was lost; retry.", details={"attempts": 1, "commit_in_doubt": True}
        ) from exc


def _discard_connection() -> None:
    """Drop this thread's broken connection; the next query opens (or takes from the pool) a fresh one."""
    connection = transaction.get_connection()
    with contextlib.suppress(Error):
        connection.close()
    connection.connection = None


def _refuse_past_deadline(tries: int) -> None:
    left = seconds_left()
    if left is not None and left <= 0:
        raise StorageBusy("The database stayed busy for this request's whole deadline.", details={"attempts": tries})


@contextmanager
def _sqlite_busy_timeout_within_deadline() -> Iterator[None]:
    """On SQLite, SQLite's own busy wait (5 s) ends by the request's deadline too; a no-op elsewhere."""
    connection = transaction.get_connection()
    left = seconds_left()
    if connection.vendor != "sqlite" or left is None or left * 1000 >= SQLITE_BUSY_TIMEOUT_MS:
        yield
        return
    with connection.cursor() as cursor:
        cursor.execute(f"PRAGMA busy_timeout = {max(1, int(left * 1000))}")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")


@contextmanager
def read_snapshot() -> Iterator[None]:
    """Several reads that must see one snapshot, without taking a write lock.

    PostgreSQL: a REPEATABLE READ transaction. SQLite: `BEGIN DEFERRED` (WAL gives it a snapshot at its
    first read, and it never takes the write lock that Django's IMMEDIATE transactions take). Inside a
    caller's transaction (tests, or a caller that already reads one snapshot) it reads in that one.
    """
    if connection.in_atomic_block:
        yield
    elif connection.vendor == "postgresql":
        with transaction.atomic():
            connection.cursor().execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            yield
    else:
        with connection.cursor() as cursor:
            cursor.execute("BEGIN DEFERRED")
            try:
                yield
            finally:
                cursor.execute("COMMIT")  # nothing was written: commit and rollback end it alike


@contextmanager
def postgres_settings(values: dict[str, str]) -> Iterator[None]:
    """PostgreSQL: `SET LOCAL` these planner or session settings for the statements inside (in the caller's
    transaction), then the values before, so they never outlive the block (not after an error: the
    transaction is rolled back, and its settings with it)."""
    names = list(values)
    if not names:
        yield
        return
    with connection.cursor() as cursor:
        reads = ", ".join("current_setting(%s)" for _ in names)
        sets = ", ".join("set_config(%s, %s, true)" for _ in names)
        cursor.execute(
            f"SELECT {reads}, {sets}", [*names, *(value for name in names for value in (name, values[name]))]
        )
        previous = cursor.fetchone()[: len(names)]
    yield
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT " + ", ".join("set_config(%s, %s, true)" for _ in names),
            [value for pair in zip(names, previous, strict=True) for value in pair],
        )


@contextmanager
def postgres_plan(values: dict[str, str]) -> Iterator[None]:
    """The reads inside under these planner settings (`postgres_settings`), in one transaction on PostgreSQL
    (a `SET LOCAL` needs one: two statements more for the whole block); elsewhere as they are, with no
    transaction (SQLite: no lock held across them)."""
    if connection.vendor != "postgresql":
        yield
        return
    with transaction.atomic(), postgres_settings(values):
        yield


def count_up_to(rows: QuerySet[Any], bound: int) -> tuple[int, bool]:
    """How many `rows`, counted up to `bound`, and whether more follow: the planner stops at the bound's
    row instead of reading a backlog to its end (issue 33: 276,000 ready tasks at 1M).

    `rows` keeps its order: give it an index's (the walk then reads about `bound` rows whatever the
    table holds), or none (`.order_by()`). Unordered, PostgreSQL may pick a sequential scan that
    expects the rows early and meets them late (800,000 rows read for 1,001 at 1M: stop 43)."""
    counted = rows[: bound + 1].count()
    return min(counted, bound), counted > bound


class PrivateFileConnection(sqlite3.Connection):
    """SQLite's connection (settings: OPTIONS `factory`), opening its database 0600 in a 0700 directory.

    The database holds webhook secrets, session keys and password hashes: it
    must not be readable by the machine's other users whatever the umask.
    SQLite creates the `-wal` and `-shm` files with the database file's own
    mode, so a database file created private keeps all three private.
    """

    def __init__(self, database: Any, *args: Any, **kwargs: Any) -> None:
        make_sqlite_files_private(database)
        super().__init__(database, *args, **kwargs)


def make_sqlite_files_private(database: object) -> None:
    """Create the database file 0600 (in a 0700 directory) before SQLite does; make existing ones private too.

    In-memory databases (`:memory:`, `file:…` URIs) have no file. A file or
    directory owned by another user is left alone (the server cannot change
    it, and refusing to start would not make it private either).
    """
    name = os.fspath(database) if isinstance(database, str | os.PathLike) else ""
    if not name or name == ":memory:" or name.startswith("file:"):
        return
    path = Path(name)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    _restrict(path.parent, 0o700)
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
    for suffix in ("", "-wal", "-shm", ".writelock"):
        _restrict(path.with_name(f"{path.name}{suffix}"), 0o600)


def _restrict(path: Path, mode: int) -> None:
    with contextlib.suppress(FileNotFoundError):
        status = path.stat()
        if status.st_uid == os.geteuid() and status.st_mode & 0o777 != mode:
            path.chmod(mode)
