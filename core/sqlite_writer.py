"""The SQLite writer queue: threads on a lock, processes on a file lock, before BEGIN IMMEDIATE.

`core.db.write_transaction` takes a turn here before each write transaction
on SQLite; on PostgreSQL this is a no-op.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import transaction

from core.deadline import bounded
from core.errors import StorageBusy

# How long a thread waits for its process's turn to write to SQLite.
SQLITE_WRITER_WAIT_SECONDS = 20.0

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
    SQLITE_WRITER_WAIT_SECONDS (or what is left of the request's storage
    deadline, if less), then STORAGE_BUSY. Inside a transaction this
    is a no-op: the outermost writer took its turn. Writers that do not come
    through here (migrations, Django's own admin log and sessions) still meet
    SQLite's busy handler.
    """
    connection = transaction.get_connection()
    if connection.vendor != "sqlite" or connection.in_atomic_block:
        yield
        return
    wait = bounded(SQLITE_WRITER_WAIT_SECONDS)
    deadline = time.monotonic() + wait
    if not _sqlite_writer.acquire(timeout=wait):
        raise StorageBusy(details={"waited_seconds": round(wait, 3)})
    try:
        descriptor = _open_writer_lock(connection.settings_dict["NAME"])
        if descriptor is None:
            yield
            return
        try:
            if not _flock_before(descriptor, deadline):
                descriptor = None  # the waiter thread owns it now, and closes it
                raise StorageBusy(details={"waited_seconds": round(wait, 3)})
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
        return os.open(f"{path}.writelock", os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
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
