"""SQLite's write-ahead log, checkpointed and bounded while readers and backups hold snapshots (SPEC §25).

Under WAL a commit appends pages to `<database>-wal`; a checkpoint copies them back into the database file,
and only a checkpoint that copied every frame, with no reader still reading the log, lets the next writer
start the log again from its beginning. Two things kept the file growing while the server ran (part two:
+0.45 MB per agent cycle, never shrinking):

- the file is never made smaller by SQLite on its own: a log started again is overwritten in place, so the
  file keeps its largest size. `PRAGMA journal_size_limit` (set on every connection, settings' init
  command, SQLITE_WAL_LIMIT_BYTES) cuts it back to the limit each time the log starts again;
- the log starts again only when, at a commit, no reader is still using it. A reader or a backup holding a
  snapshot keeps every frame written after its start; with readers overlapping (persistent server threads,
  parked waits) that moment can be missed for long. `wal_checkpoint`, run by the sweep job every minute,
  checkpoints passively (never waits, never blocks a writer) and, when every frame is in the database file
  and the file is past the limit, truncates it (TRUNCATE waits for readers at most CHECKPOINT_WAIT_MS, then
  gives up until the next run). A backup runs it as soon as its own snapshot ends (operations/backup.py).

The WAL's size is then bounded by SQLITE_WAL_LIMIT_BYTES plus what is written while the oldest snapshot is
held, and back under the limit within a minute of that snapshot's end (bench `renewals`, docs/performance.md).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.db import SQLITE_BUSY_TIMEOUT_MS

# The WAL file is cut back to this size whenever the log starts again (PRAGMA journal_size_limit). SQLite's
# auto-checkpoint runs at 1,000 pages (4 MB): a log that is checkpointed as it should never passes ~4 MB.
SQLITE_WAL_LIMIT_BYTES = 8 * 1024 * 1024
# How long a truncating checkpoint waits for readers to leave the log; writers wait as long behind it.
CHECKPOINT_WAIT_MS = 200
# What every SQLite connection runs first (config/settings/base.py).
SQLITE_INIT_PRAGMAS = (
    "PRAGMA journal_mode=WAL;PRAGMA synchronous=NORMAL;PRAGMA foreign_keys=ON;"
    f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS};PRAGMA journal_size_limit={SQLITE_WAL_LIMIT_BYTES};"
)


@dataclass(frozen=True)
class WalCheckpoint:
    """What one `wal_checkpoint` did: the file's size before and after, and whether a reader kept frames."""

    wal_bytes_before: int
    wal_bytes_after: int
    frames: int
    checkpointed: int
    truncated: bool

    @property
    def held_back(self) -> bool:
        """A reader's snapshot kept some frames out of the database file (they wait for the next run)."""
        return self.checkpointed < self.frames


def wal_path(database: str | os.PathLike[str]) -> Path:
    path = Path(database)
    return path.with_name(f"{path.name}-wal")


def wal_bytes(database: str | os.PathLike[str]) -> int:
    try:
        return wal_path(database).stat().st_size
    except FileNotFoundError:
        return 0


def wal_checkpoint(cursor: Any, database: str | os.PathLike[str], *, busy_timeout_ms: int) -> WalCheckpoint:
    """Checkpoint the WAL of `database` through `cursor` (outside any transaction); truncate it when it can.

    PASSIVE first: copies what no reader still needs, waits for nothing. Then, only when every frame was
    copied and the file is past SQLITE_WAL_LIMIT_BYTES, TRUNCATE with a busy wait of CHECKPOINT_WAIT_MS (it
    waits for the readers still in the log); `busy_timeout_ms` is the connection's own wait, set back after.
    """
    before = wal_bytes(database)
    _, frames, checkpointed = cursor.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    truncated = False
    if frames >= 0 and checkpointed == frames and before > SQLITE_WAL_LIMIT_BYTES:
        cursor.execute(f"PRAGMA busy_timeout = {CHECKPOINT_WAIT_MS}")
        try:
            busy, _, _ = cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            truncated = not busy
        finally:
            cursor.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
    return WalCheckpoint(
        wal_bytes_before=before,
        wal_bytes_after=wal_bytes(database),
        frames=frames,
        checkpointed=checkpointed,
        truncated=truncated,
    )


def checkpoint_default_database() -> WalCheckpoint | None:
    """`wal_checkpoint` on Django's default database when it is SQLite (None on PostgreSQL, or in a transaction)."""
    from django.db import connection

    if connection.vendor != "sqlite" or connection.in_atomic_block:
        return None  # inside a transaction (a test's) a checkpoint could not pass the transaction's own snapshot
    connection.ensure_connection()
    raw = connection.connection
    return wal_checkpoint(raw.cursor(), connection.settings_dict["NAME"], busy_timeout_ms=SQLITE_BUSY_TIMEOUT_MS)
