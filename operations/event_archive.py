"""Archive closed months of events (SPEC §25): export, check, and only then detach (PostgreSQL).

For each month partition before `--before` (which may be at most the current month, so every archived
month is closed), in month order:

1. Refused while a webhook delivery of one of its events is still open (pending or failed): the
   delivery worker reads the event it posts.
2. Written, unless the file is already there from an earlier run: `DEST/events-YYYY-MM.jsonl`
   (`operations.transfer.archive`: a header, one row per event in id order, an end row with the count
   and the SHA-256 of the event lines), to a `.partial` file renamed when whole, from one snapshot.
3. Checked: the file is read back (its rows, count and checksum against its end row) and the partition
   is read again (its count and the checksum of its rows encoded the same way); any difference stops the
   run with ARCHIVE_MISMATCH and detaches nothing.
4. Detached, in one transaction that counts the partition again under the detach's lock: the partition
   leaves `ledger_event`, is renamed `ledger_event_archived_pYYYYMM` and gets the append-only triggers of
   its own (detaching drops the cloned ones), and an `events.archived` event records the file, count and
   checksum. Never-hard-delete: the rows stay in that table until an operator drops it
   (docs/operations.md, "Archiving events"); the archive file is the record `import_project` reads back.

A rerun skips the months already archived and resumes a month whose file was written but not detached.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any

from django.db import connection, transaction

from core.db import read_snapshot
from ledger.models import Event, EventType
from operations.event_partitions import (
    DEFAULT_PARTITION,
    PARENT,
    attached_partitions,
    default_rows_before,
    ensure_partitions,
    month_of,
    partitioned,
)
from operations.transfer.archive import archive_lines, file_digest, row_source
from push.models import DeliveryStatus

ARCHIVED_PREFIX = "ledger_event_archived_p"
# Detaching drops the cloned row trigger; the partition's own TRUNCATE guard (which asks the parent) is replaced.
APPEND_ONLY_TRIGGERS = (
    "DROP TRIGGER IF EXISTS ledger_event_no_truncate ON {table}",
    "CREATE TRIGGER ledger_event_append_only BEFORE UPDATE OR DELETE ON {table} "
    "FOR EACH ROW EXECUTE FUNCTION ledger_event_refuse_change()",
    "CREATE TRIGGER ledger_event_no_truncate BEFORE TRUNCATE ON {table} "
    "FOR EACH STATEMENT EXECUTE FUNCTION ledger_event_refuse_change()",
)


class ArchiveRefused(Exception):
    """An archive run stopped; `code` is stable (ARCHIVE_NOT_SUPPORTED, ARCHIVE_MONTH_OPEN, ...)."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        self.message = message
        super().__init__(f"{code}: {message}")


@dataclass
class MonthArchived:
    month: str
    file: str
    rows: int
    sha256: str


@dataclass
class ArchiveResult:
    archived: list[MonthArchived] = field(default_factory=list)
    already_archived: list[str] = field(default_factory=list)
    default_rows_before: int = 0


def archive_file(dest: Path, month: date) -> Path:
    return dest / f"events-{month:%Y-%m}.jsonl"


def _archived_months() -> set[date]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT relname FROM pg_class WHERE relname LIKE %s AND relkind = 'r'", [ARCHIVED_PREFIX + "%"])
        names = [row[0] for row in cursor.fetchall()]
    return {date(int(name[-6:-2]), int(name[-2:]), 1) for name in names}


def _open_deliveries(partition: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT count(*) FROM ledger_webhookdelivery d JOIN {partition} e ON e.id = d.event_id "  # noqa: S608
            "WHERE d.status IN (%s, %s)",
            [DeliveryStatus.PENDING, DeliveryStatus.FAILED],
        )
        return int(cursor.fetchone()[0])


def _partition_rows(partition: str) -> Iterator[dict[str, Any]]:
    """The partition's rows in id order, as the ORM reads them (a raw cursor hands JSON over as text)."""
    fields = list(Event._meta.concrete_fields)
    names = [f.attname for f in fields]
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {', '.join(names)} FROM {partition} ORDER BY id")  # noqa: S608
        while batch := cursor.fetchmany(2000):
            for values in batch:
                yield {
                    f.attname: f.from_db_value(v, None, connection) if hasattr(f, "from_db_value") else v
                    for f, v in zip(fields, values, strict=True)
                }


def _write(path: Path, month: date, partition: str) -> None:
    partial = path.with_name(path.name + ".partial")
    with read_snapshot(), partial.open("w", encoding="utf-8") as out:
        for line in archive_lines(month=month, rows=_partition_rows(partition), source=row_source()):
            out.write(line)
        out.flush()
        os.fsync(out.fileno())
    partial.rename(path)


def _database_digest(month: date, partition: str) -> tuple[int, str]:
    digest = hashlib.sha256()
    count = 0
    with read_snapshot():
        for line in archive_lines(month=month, rows=_partition_rows(partition), source=row_source(), body_only=True):
            digest.update(line.encode("utf-8"))
            count += 1
    return count, digest.hexdigest()


def _detach(month: date, partition: str, path: Path, rows: int, sha256: str, now: datetime) -> None:
    archived = f"{ARCHIVED_PREFIX}{month:%Y%m}"
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"LOCK TABLE {PARENT}, {partition} IN ACCESS EXCLUSIVE MODE")
        cursor.execute(f"SELECT count(*) FROM {partition}")  # noqa: S608
        (now_rows,) = cursor.fetchone()
        if now_rows != rows:
            raise ArchiveRefused(
                "ARCHIVE_MISMATCH", f"{month:%Y-%m} gained events while it was archived ({rows} → {now_rows})"
            )
        cursor.execute(f"ALTER TABLE {PARENT} DETACH PARTITION {partition}")
        cursor.execute(f"ALTER TABLE {partition} RENAME TO {archived}")
        for sql in APPEND_ONLY_TRIGGERS:
            cursor.execute(sql.format(table=archived))
        Event.objects.create(
            type=EventType.EVENTS_ARCHIVED,
            payload={"month": f"{month:%Y-%m}", "file": str(path), "rows": rows, "sha256": sha256, "table": archived},
            created_at=now,
        )


def events_archive(*, before: date, dest: Path, now: datetime) -> ArchiveResult:
    """Archive every month partition before `before` (at most the current month) into `dest`."""
    if not partitioned():
        raise ArchiveRefused(
            "ARCHIVE_NOT_SUPPORTED",
            "archiving needs the month partitions of PostgreSQL; SQLite keeps one event table "
            "(export a project with export_project to keep a copy)",
        )
    if before > month_of(now):
        raise ArchiveRefused(
            "ARCHIVE_MONTH_OPEN", f"{before:%Y-%m} is after the current month {now:%Y-%m}: only closed months"
        )
    if not dest.is_dir():
        raise ArchiveRefused("ARCHIVE_DEST_MISSING", f"{dest} is not a directory")
    ensure_partitions(now=now)
    result = ArchiveResult(default_rows_before=default_rows_before(before))
    result.already_archived = [f"{m:%Y-%m}" for m in sorted(_archived_months()) if m < before]
    for month, partition in sorted(attached_partitions().items()):
        if month >= before:
            continue
        open_deliveries = _open_deliveries(partition)
        if open_deliveries:
            raise ArchiveRefused(
                "ARCHIVE_DELIVERIES_OPEN",
                f"{open_deliveries} webhook deliveries of {month:%Y-%m}'s events are still open; "
                "archive once they are delivered or dead",
            )
        path = archive_file(dest, month)
        if not path.exists():
            _write(path, month, partition)
        file_rows, file_sha = file_digest(path)
        db_rows, db_sha = _database_digest(month, partition)
        if (file_rows, file_sha) != (db_rows, db_sha):
            raise ArchiveRefused(
                "ARCHIVE_MISMATCH",
                f"{path} holds {file_rows} events (sha256 {file_sha[:12]}…) and the partition {db_rows} "
                f"(sha256 {db_sha[:12]}…); nothing detached. Move the file away to write it again.",
            )
        _detach(month, partition, path, db_rows, db_sha, now)
        result.archived.append(MonthArchived(f"{month:%Y-%m}", str(path), db_rows, db_sha))
    return result


__all__ = ["DEFAULT_PARTITION", "ArchiveRefused", "ArchiveResult", "archive_file", "events_archive"]
