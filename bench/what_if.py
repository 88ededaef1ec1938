"""What-if experiments: a proposed change applied to the bench only, to measure it before it is made.

Schema what-ifs (`bench.suite.WHAT_IFS`) change the bench database. Runtime
what-ifs patch the running bench processes; they are prototypes of a
proposal, selected through `LEASEHOLD_BENCH_WHAT_IF` so that every process of
a run (the parent's children, the agent processes) applies the same ones.
The production web server of the HTTP workloads is never patched.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from typing import Any

ENV = "LEASEHOLD_BENCH_WHAT_IF"
RUNTIME = ("sqlite-writer-lock",)


def selected() -> list[str]:
    return [name for name in os.environ.get(ENV, "").split(",") if name]


def apply_runtime() -> None:
    """Apply the runtime what-ifs named in the environment (call after django.setup())."""
    if "sqlite-writer-lock" in selected():
        _sqlite_writer_lock()


class _WriterLockedTransactions:
    """`django.db.transaction` as `config.db` sees it, with the outermost atomic() taken under a file lock.

    The proposal: on SQLite, writers queue on an exclusive `flock` of a file
    beside the database before BEGIN IMMEDIATE. The kernel wakes the next
    waiter as soon as the lock is released, in any process, instead of every
    waiter polling in SQLite's busy handler with sleeps of up to 100 ms.
    """

    def __init__(self, real: Any, lock_path: str) -> None:
        self._real = real
        self._lock_path = lock_path

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def atomic(self, *args: Any, **kwargs: Any) -> Any:
        if self._real.get_connection().in_atomic_block:
            return self._real.atomic(*args, **kwargs)
        return self._locked(self._real.atomic(*args, **kwargs))

    @contextlib.contextmanager
    def _locked(self, atomic: Any) -> Iterator[None]:
        descriptor = os.open(self._lock_path, os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            with atomic:
                yield
        finally:
            fcntl.flock(descriptor, fcntl.LOCK_UN)
            os.close(descriptor)


def _sqlite_writer_lock() -> None:
    from django.db import connection, transaction

    import config.db

    if connection.vendor != "sqlite":
        return
    config.db.transaction = _WriterLockedTransactions(transaction, f"{connection.settings_dict['NAME']}.writelock")  # type: ignore[assignment]
